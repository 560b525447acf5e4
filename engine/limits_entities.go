package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/google/uuid"
)

// Entity limits of tenant profiles, as ThingsBoard's DefaultTenantProfileConfiguration
// carries them (compat §9): maxDevices, maxCustomers and maxUsers cap how many of
// each a tenant may have, maxOtaPackagesInBytes the bytes of its OTA packages. A
// limit of 0 or less, or none, is unlimited (ThingsBoard's
// DefaultApiLimitService.getLimit). Only creates are checked, as in ThingsBoard
// (DataValidator.validateNumberOfEntitiesPerTenant in each validateCreate): a
// tenant already past a lowered limit keeps what it has and creates no more
// until it is below it again. The system administrator and system-level users
// (no tenant) are never limited.
//
// A create counts the tenant's records (storage.Entities.Count, no record
// read) only when the tenant's profile sets that limit, which is read from the
// cache of the tenant's limits (tenantLimits).

// entityLimits are the entity limits of one tenant profile; 0 is unlimited.
type entityLimits struct {
	devices, customers, users int64
	otaBytes                  int64
}

// entityLimitFields are the configuration fields of the entity limits.
type entityLimitFields struct {
	MaxDevices            int64 `json:"maxDevices"`
	MaxCustomers          int64 `json:"maxCustomers"`
	MaxUsers              int64 `json:"maxUsers"`
	MaxOtaPackagesInBytes int64 `json:"maxOtaPackagesInBytes"`
}

// parseEntityLimits reads the entity limits of a profile configuration; a
// mistyped one is a 400 naming the field. They are read apart from the rate
// limits (parseLimits), so a stored profile whose entity limits do not read
// (saved before Sluice read them) keeps its rate limits.
func parseEntityLimits(conf json.RawMessage) (entityLimits, error) {
	trimmed := strings.TrimSpace(string(conf))
	if trimmed == "" || trimmed == "null" {
		return entityLimits{}, nil
	}
	if trimmed[0] != '{' {
		return entityLimits{}, errTenantProfileConfig
	}
	var f entityLimitFields
	if err := decodeConfiguration(conf, &f); err != nil {
		return entityLimits{}, err
	}
	return entityLimits{
		devices:   max(f.MaxDevices, 0),
		customers: max(f.MaxCustomers, 0),
		users:     max(f.MaxUsers, 0),
		otaBytes:  max(f.MaxOtaPackagesInBytes, 0),
	}, nil
}

// entityLimitsOf returns the entity limits of tenant's profile, cached with
// its rate limits (tenantLimits). A tenant that does not exist (any more) is
// unlimited: its requests fail elsewhere.
func (e *Engine) entityLimitsOf(ctx context.Context, tenant uuid.UUID) (entityLimits, error) {
	l, err := e.tenantLimits(ctx, tenant, e.now())
	if err != nil {
		return entityLimits{}, err
	}
	return l.entities, nil
}

// EntitiesLimitError is a create refused because the tenant has as many
// entities of the type as its profile allows: ThingsBoard's
// EntitiesLimitExceededException, whose message is "<Type>s limit reached"
// and whose REST answer is a 403 with errorCode 41 (ENTITIES_LIMIT_EXCEEDED)
// and "entityType" and "limit" in the body. Err carries the message and
// CodeEntitiesLimit.
type EntitiesLimitError struct {
	Err        *Error
	EntityType string // DEVICE, CUSTOMER, USER
	Limit      int64
}

func (e *EntitiesLimitError) Error() string { return e.Err.Msg }
func (e *EntitiesLimitError) Unwrap() error { return e.Err }

// isEntitiesLimit is whether err is a create refused by an entity limit.
func isEntitiesLimit(err error) bool {
	var le *EntitiesLimitError
	return errors.As(err, &le)
}

// limitedKind is an entity type with a count limit.
type limitedKind struct {
	kind       string // record kind, owned by the tenant
	entityType string
	normalName string // ThingsBoard's EntityType.getNormalName
	limit      func(entityLimits) int64
}

var (
	deviceLimit   = &limitedKind{kindDevice, EntityDevice, "Device", func(l entityLimits) int64 { return l.devices }}
	customerLimit = &limitedKind{kindCustomer, EntityCustomer, "Customer", func(l entityLimits) int64 { return l.customers }}
	// Users are owned by their tenant, customer users too: every user of the
	// tenant counts, as ThingsBoard's count of USER entities of the tenant.
	userLimit = &limitedKind{kindUser, EntityUser, "User", func(l entityLimits) int64 { return l.users }}
)

// checkEntityLimit refuses the create of one more entity of k for tenant when
// its profile's limit is reached (ThingsBoard's DefaultApiLimitService.
// checkEntitiesLimit: count < limit passes). The count is taken only when
// the profile sets a limit. Counting is not reserving: two creates at once at
// limit-1 may both pass and leave the tenant one past its limit, as in
// ThingsBoard, which counts with a SELECT before its insert; the next create
// is refused.
func (e *Engine) checkEntityLimit(ctx context.Context, tenant uuid.UUID, k *limitedKind) error {
	if isNull(tenant) {
		return nil // system-level: never limited
	}
	l, err := e.entityLimitsOf(ctx, tenant)
	if err != nil {
		return err
	}
	limit := k.limit(l)
	if limit <= 0 {
		return nil
	}
	n, err := e.store.Count(ctx, k.kind, tenant)
	if err != nil {
		return fmt.Errorf("cannot count %s of %s: %w", k.kind, tenant, err)
	}
	if int64(n) < limit {
		return nil
	}
	return &EntitiesLimitError{
		Err:        &Error{Code: CodeEntitiesLimit, Msg: k.normalName + "s limit reached"},
		EntityType: k.entityType,
		Limit:      limit,
	}
}

// limitOtaUpload returns the bytes of an upload to a package of tenant so
// that reading them fails, with ThingsBoard's 400 "Ota packages total size
// exceeds the maximum of …", before they would take the tenant's packages
// past its maxOtaPackagesInBytes (ThingsBoard's
// DataValidator.validateMaxSumDataSizePerTenant: the sum of the sizes of the
// tenant's packages plus the new one may equal the maximum, not pass it).
// What was read is never more than what the limit leaves, so the caller
// stores nothing past it and deletes what it stored. Without a limit data
// comes back as it is. Two uploads at once may together pass the limit, as
// in ThingsBoard, which sums with a SELECT before its update.
func (e *Engine) limitOtaUpload(ctx context.Context, tenant uuid.UUID, data io.Reader) (io.Reader, error) {
	l, err := e.entityLimitsOf(ctx, tenant)
	if err != nil || l.otaBytes <= 0 {
		return data, err
	}
	pkgs, err := listRecords[otaRecord](ctx, e, kindOtaPackage, tenant)
	if err != nil {
		return nil, err
	}
	var used int64
	for _, r := range pkgs {
		if r.DataSize != nil && *r.DataSize > 0 {
			used += *r.DataSize
		}
	}
	refuse := Errorf(CodeBadRequestParams, "Ota packages total size exceeds the maximum of %s", displaySize(l.otaBytes))
	return &capReader{r: data, left: l.otaBytes - used, refuse: refuse}, nil
}

// capReader gives at most left bytes of r; one more is refuse.
type capReader struct {
	r      io.Reader
	left   int64 // < 0: refused
	refuse error
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left < 0 {
		return 0, c.refuse
	}
	// One byte more than is left tells a stream that ends here from one that
	// goes on.
	if int64(len(p)) > c.left+1 {
		p = p[:c.left+1]
	}
	n, err := c.r.Read(p)
	if int64(n) > c.left {
		c.left = -1
		return 0, c.refuse
	}
	c.left -= int64(n)
	return n, err
}

// displaySize is Apache Commons' FileUtils.byteCountToDisplaySize, which
// ThingsBoard's message uses: whole units of 1024, rounded down.
func displaySize(n int64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{60, "EB"}, {50, "PB"}, {40, "TB"}, {30, "GB"}, {20, "MB"}, {10, "KB"}} {
		if n>>u.shift > 0 {
			return strconv.FormatInt(n>>u.shift, 10) + " " + u.name
		}
	}
	return strconv.FormatInt(n, 10) + " bytes"
}
