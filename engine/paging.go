package engine

import (
	"cmp"
	"regexp"
	"slices"
	"strings"

	"github.com/google/uuid"
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
// ("ASC" or "DESC", any case) to ASC; without a SortProperty the SortOrder is
// ignored, as ThingsBoard ignores it (checkPageLink).
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

// idKey sorts by an id as PostgreSQL orders uuids, by their bytes: as their
// canonical strings.
func idKey(id uuid.UUID) sortKey { return strKey(id.String()) }
func numKey(n int64) sortKey     { return sortKey{n: n, num: true} }

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
	key, desc, err := checkPageLink(pl, spec)
	if err != nil {
		return PageData[T]{}, err
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

// sortPropertyPattern is ThingsBoard's Validator.PROPERTY_PATTERN: Unicode
// letters, digits, '_' and '-'.
var sortPropertyPattern = regexp.MustCompile(`^[\p{L}0-9_-]+$`)

// checkPageLink checks pl as ThingsBoard does, in its order: the controller's
// createPageLink (BaseController) first, a malformed sortProperty and then the
// sortOrder, which only counts with a sortProperty (without one ThingsBoard
// makes no sort at all and ignores it); then the DAO's
// Validator.validatePageLink, pageSize and page. A well-formed property the
// list has no key for is 400 too (ThingsBoard's query fails on it). It
// returns the key to sort by and whether descending. No sortProperty sorts
// by createdTime.
func checkPageLink[T any](pl PageLink, spec pageSpec[T]) (func(T) sortKey, bool, error) {
	desc := false
	if pl.SortProperty != "" {
		if !sortPropertyPattern.MatchString(pl.SortProperty) {
			return nil, false, Errorf(CodeBadRequestParams, "Invalid sort property")
		}
		switch strings.ToUpper(pl.SortOrder) {
		case "", "ASC":
		case "DESC":
			desc = true
		default:
			return nil, false, Errorf(CodeBadRequestParams, "Unsupported sort order '%s'! Only 'ASC' or 'DESC' types are allowed.", pl.SortOrder)
		}
	}
	if pl.PageSize < 1 {
		return nil, false, Errorf(CodeBadRequestParams, "Incorrect page link page size '%d'. Page size must be greater than zero.", pl.PageSize)
	}
	if pl.Page < 0 {
		return nil, false, Errorf(CodeBadRequestParams, "Incorrect page link page '%d'. Page must be positive integer.", pl.Page)
	}
	prop := pl.SortProperty
	if prop == "" {
		prop = "createdTime"
	}
	key, ok := spec.keys[prop]
	if !ok {
		return nil, false, Errorf(CodeBadRequestParams, "Invalid sort property: %s", prop)
	}
	return key, desc, nil
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
		"id":          func(t *Tenant) sortKey { return idKey(t.ID.ID) }, // ThingsBoard's default sort
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
		"id":          func(c *Customer) sortKey { return idKey(c.ID.ID) }, // ThingsBoard's default sort
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
		"id":            func(p *DeviceProfile) sortKey { return idKey(p.ID.ID) }, // ThingsBoard's default sort
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
		"id":                func(d *Device) sortKey { return idKey(d.ID.ID) }, // ThingsBoard's default sort
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
		"id":          func(u *User) sortKey { return idKey(u.ID.ID) }, // ThingsBoard's default sort
		"email":       func(u *User) sortKey { return strKey(u.Email) },
		"firstName":   func(u *User) sortKey { return strKey(u.FirstName) },
		"lastName":    func(u *User) sortKey { return strKey(u.LastName) },
	},
}

var apiKeyPages = pageSpec[*APIKeyInfo]{
	text: func(k *APIKeyInfo) string { return k.Description },
	keys: map[string]func(*APIKeyInfo) sortKey{
		"createdTime":    func(k *APIKeyInfo) sortKey { return numKey(k.CreatedTime) },
		"id":             func(k *APIKeyInfo) sortKey { return idKey(k.ID.ID) }, // ThingsBoard's default sort
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
