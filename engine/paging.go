package engine

import (
	"cmp"
	"slices"
	"strings"
)

// PageData is one page of a list, in ThingsBoard's paging shape.
type PageData[T any] struct {
	Data          []T  `json:"data"`
	TotalPages    int  `json:"totalPages"`
	TotalElements int  `json:"totalElements"`
	HasNext       bool `json:"hasNext"`
}

// PageLink selects a page of a list. TextSearch is a case-insensitive substring of
// the name (title, e-mail); SortProperty defaults to createdTime and SortOrder
// ("ASC" or "DESC", any case) to ASC.
type PageLink struct {
	PageSize     int
	Page         int
	TextSearch   string
	SortProperty string
	SortOrder    string
}

// sortKey is the value of a sort property: a string, or a number when num.
type sortKey struct {
	s    string
	n    int64
	num  bool
	null bool // no value: see nullKey
}

func strKey(s string) sortKey { return sortKey{s: s} }
func numKey(n int64) sortKey  { return sortKey{n: n, num: true} }

// nullKey is the key of an absent value (NULL in ThingsBoard's tables). It
// sorts as PostgreSQL's default sorts NULL: after every value ascending,
// before every value descending (makePage reverses the whole comparison).
var nullKey = sortKey{null: true}

// pageSpec says how a listed type is searched and sorted.
type pageSpec[T any] struct {
	text func(T) string
	// alt, when set, is a second text that textSearch matches (a device's
	// label, as ThingsBoard's "name ILIKE ... OR label ILIKE ...").
	alt  func(T) string
	keys map[string]func(T) sortKey
}

// makePage filters, sorts and cuts items as pl says. ThingsBoard counts and sorts in
// SQL; a tenant's records fit in memory here, so this does the same on the slice.
// Equal keys keep the input order (ascending id from storage), in either
// direction; nullKey sorts last ascending and first descending, as PostgreSQL's
// NULLS LAST / NULLS FIRST defaults.
func makePage[T any](items []T, pl PageLink, spec pageSpec[T]) (PageData[T], error) {
	if pl.PageSize < 1 {
		return PageData[T]{}, Errorf(CodeBadRequestParams, "Page size must not be less than one")
	}
	if pl.Page < 0 {
		return PageData[T]{}, Errorf(CodeBadRequestParams, "Page index must not be less than zero")
	}
	prop := pl.SortProperty
	if prop == "" {
		prop = "createdTime"
	}
	key, ok := spec.keys[prop]
	if !ok {
		return PageData[T]{}, Errorf(CodeBadRequestParams, "Invalid sort property: %s", prop)
	}
	desc := false
	switch strings.ToUpper(pl.SortOrder) {
	case "", "ASC":
	case "DESC":
		desc = true
	default:
		return PageData[T]{}, Errorf(CodeBadRequestParams, "Invalid sort order: %s", pl.SortOrder)
	}

	if pl.TextSearch != "" {
		needle := strings.ToLower(pl.TextSearch)
		items = slices.DeleteFunc(slices.Clone(items), func(v T) bool {
			if strings.Contains(strings.ToLower(spec.text(v)), needle) {
				return false
			}
			return spec.alt == nil || !strings.Contains(strings.ToLower(spec.alt(v)), needle)
		})
	}
	slices.SortStableFunc(items, func(a, b T) int {
		ka, kb := key(a), key(b)
		var c int
		if ka.null || kb.null {
			// NULL is greater than any value: last ASC, first DESC.
			c = cmp.Compare(b2i(ka.null), b2i(kb.null))
		} else if ka.num {
			c = cmp.Compare(ka.n, kb.n)
		} else {
			// Names sort as a database collation would: case only breaks ties.
			c = cmp.Or(cmp.Compare(strings.ToLower(ka.s), strings.ToLower(kb.s)), cmp.Compare(ka.s, kb.s))
		}
		if desc {
			return -c
		}
		return c
	})

	total := len(items)
	// Divided, not rounded up by adding pageSize - 1: pageSize may be as large
	// as an int goes.
	pages := total / pl.PageSize
	if total%pl.PageSize != 0 {
		pages++
	}
	out := PageData[T]{Data: []T{}, TotalElements: total, TotalPages: pages}
	out.HasNext = pl.Page < out.TotalPages-1
	// A page past the end is empty, not an error, as in ThingsBoard.
	if pl.Page < out.TotalPages {
		from := pl.Page * pl.PageSize // below total: no overflow
		out.Data = items[from : from+min(pl.PageSize, total-from)]
	}
	return out, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

var tenantPages = pageSpec[*Tenant]{
	text: func(t *Tenant) string { return t.Title },
	keys: map[string]func(*Tenant) sortKey{
		"createdTime": func(t *Tenant) sortKey { return numKey(t.CreatedTime) },
		"title":       func(t *Tenant) sortKey { return strKey(t.Title) },
		"email":       func(t *Tenant) sortKey { return strKey(t.Email) },
		"country":     func(t *Tenant) sortKey { return strKey(t.Country) },
		"city":        func(t *Tenant) sortKey { return strKey(t.City) },
	},
}

var customerPages = pageSpec[*Customer]{
	text: func(c *Customer) string { return c.Title },
	keys: map[string]func(*Customer) sortKey{
		"createdTime": func(c *Customer) sortKey { return numKey(c.CreatedTime) },
		"title":       func(c *Customer) sortKey { return strKey(c.Title) },
		"email":       func(c *Customer) sortKey { return strKey(c.Email) },
		"country":     func(c *Customer) sortKey { return strKey(c.Country) },
		"city":        func(c *Customer) sortKey { return strKey(c.City) },
	},
}

var profilePages = pageSpec[*DeviceProfile]{
	text: func(p *DeviceProfile) string { return p.Name },
	keys: map[string]func(*DeviceProfile) sortKey{
		"createdTime":   func(p *DeviceProfile) sortKey { return numKey(p.CreatedTime) },
		"name":          func(p *DeviceProfile) sortKey { return strKey(p.Name) },
		"type":          func(p *DeviceProfile) sortKey { return strKey(p.Type) },
		"transportType": func(p *DeviceProfile) sortKey { return strKey(p.TransportType) },
		"description":   func(p *DeviceProfile) sortKey { return strKey(p.Description) },
		"isDefault": func(p *DeviceProfile) sortKey {
			if p.Default {
				return numKey(1)
			}
			return numKey(0)
		},
	},
}

var devicePages = pageSpec[*Device]{
	text: func(d *Device) string { return d.Name },
	alt:  func(d *Device) string { return d.Label },
	keys: map[string]func(*Device) sortKey{
		"createdTime":       func(d *Device) sortKey { return numKey(d.CreatedTime) },
		"name":              func(d *Device) sortKey { return strKey(d.Name) },
		"type":              func(d *Device) sortKey { return strKey(d.Type) },
		"deviceProfileName": func(d *Device) sortKey { return strKey(d.Type) },
		"label":             func(d *Device) sortKey { return strKey(d.Label) },
	},
}

var userPages = pageSpec[*User]{
	text: func(u *User) string { return u.Email },
	keys: map[string]func(*User) sortKey{
		"createdTime": func(u *User) sortKey { return numKey(u.CreatedTime) },
		"email":       func(u *User) sortKey { return strKey(u.Email) },
		"firstName":   func(u *User) sortKey { return strKey(u.FirstName) },
		"lastName":    func(u *User) sortKey { return strKey(u.LastName) },
	},
}

var apiKeyPages = pageSpec[*APIKeyInfo]{
	text: func(k *APIKeyInfo) string { return k.Description },
	keys: map[string]func(*APIKeyInfo) sortKey{
		"createdTime":    func(k *APIKeyInfo) sortKey { return numKey(k.CreatedTime) },
		"expirationTime": func(k *APIKeyInfo) sortKey { return numKey(k.ExpirationTime) },
		"description":    func(k *APIKeyInfo) sortKey { return strKey(k.Description) },
		"enabled": func(k *APIKeyInfo) sortKey {
			if k.Enabled {
				return numKey(1)
			}
			return numKey(0)
		},
	},
}
