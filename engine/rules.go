package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/bytedance/sonic"
	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/engine/script"
	"github.com/sluice-iot/sluice/storage"
)

// Client-side RPC (compat §1.7): a device's POST /api/v1/{token}/rpc is answered
// by the rule of its tenant for the method: a rule for the device's profile
// first, then a tenant-wide rule, then the built-in getCurrentTime. No rule is a
// 404 at once (ThingsBoard lets the request hang to its timeout). Rule scripts
// run in the worker processes of package script.

const kindRPCRule = "rpcRule"

// MethodGetCurrentTime is answered {"time":<unix ms>} unless a rule of the tenant
// answers it.
const MethodGetCurrentTime = "getCurrentTime"

// maxRuleMethodLen bounds a rule's method name, as ThingsBoard bounds key names.
const maxRuleMethodLen = 255

// RPCRule answers one client-side RPC method for the devices of a tenant, or
// only for those of one device profile.
type RPCRule struct {
	ID              uuid.UUID  `json:"id"`
	CreatedTime     int64      `json:"createdTime"`
	TenantID        uuid.UUID  `json:"tenantId"`
	Method          string     `json:"method"`
	Script          string     `json:"script"`
	DeviceProfileID *uuid.UUID `json:"deviceProfileId"`
	Version         int64      `json:"version"`
}

// RPCRuleInput is the body of a rule save. DeviceProfileID may be an id string,
// a ThingsBoard id object {"entityType":"DEVICE_PROFILE","id":...}, null or absent.
type RPCRuleInput struct {
	Method          string          `json:"method"`
	Script          string          `json:"script"`
	DeviceProfileID json.RawMessage `json:"deviceProfileId"`
}

// ruleKey is the unique index of a rule: one per (tenant, profile or any, method).
func ruleKey(tenant uuid.UUID, profile *uuid.UUID, method string) string {
	p := "*"
	if profile != nil {
		p = profile.String()
	}
	return "rule:" + tenant.String() + "/" + p + "/" + method
}

// ruleState is the node's view of the rules: a per-tenant cache and the script
// runner, both set up on first use.
type ruleState struct {
	once   sync.Once
	cache  ttlCache[uuid.UUID, []*RPCRule]
	runner *script.Runner
}

// rulesTopic carries "the rules of tenant X changed" to every node.
const rulesTopic = "engine:rules"

func (e *Engine) ruleState() *ruleState {
	rs := &e.rules
	rs.once.Do(func() {
		rs.cache.ttl = e.cfg.AuthCacheTTL
		rs.runner = script.New(script.Limits{Timeout: e.cfg.ScriptTimeout, MaxMemory: e.cfg.ScriptMaxMemory})
		// Subscribed before the cache is first filled, so no change is missed;
		// a lost message (bus reset) is bounded by the cache TTL.
		e.cfg.Notifier.Subscribe(rulesTopic, func(msg []byte) {
			if id, err := uuid.ParseBytes(msg); err == nil {
				rs.cache.evict(id)
			}
		})
	})
	return rs
}

// evictRules forgets the cached rules of a tenant on every node.
func (e *Engine) evictRules(tenant uuid.UUID) {
	e.ruleState().cache.evict(tenant)
	if err := e.cfg.Notifier.Publish(context.Background(), rulesTopic, []byte(tenant.String())); err != nil {
		e.cfg.Logger.Warn("cannot publish a rule change; other nodes rely on their cache TTL", "err", err)
	}
}

// tenantRules returns the rules of a tenant, cached.
func (e *Engine) tenantRules(ctx context.Context, tenant uuid.UUID) ([]*RPCRule, error) {
	return e.ruleState().cache.get(e.now(), tenant, func() ([]*RPCRule, error) {
		return listRecords[RPCRule](ctx, e, kindRPCRule, tenant)
	})
}

var (
	errRuleMethod  = &Error{Code: CodeBadRequestParams, Msg: "Rule method should be specified!"}
	errRuleProfile = &Error{Code: CodeBadRequestParams, Msg: "deviceProfileId is not a device profile of this tenant"}
)

// SaveRPCRule creates the rule of (method, profile) of p's tenant, or replaces
// its script when it exists (tenant admins only). The script must compile.
func (e *Engine) SaveRPCRule(ctx context.Context, p *Principal, in *RPCRuleInput) (*RPCRule, error) {
	if err := requireRole(p, TenantAdmin); err != nil {
		return nil, err
	}
	// Kept as written: a device's method is matched as it sends it, so a
	// trimmed " m " would answer "m" and never " m ".
	method := in.Method
	if strings.TrimSpace(method) == "" {
		return nil, errRuleMethod
	}
	if len(method) > maxRuleMethodLen {
		return nil, Errorf(CodeBadRequestParams, "Rule method is longer than %d bytes", maxRuleMethodLen)
	}
	if err := script.Check(in.Script); err != nil {
		return nil, Errorf(CodeBadRequestParams, "Invalid script: %s", err.Error())
	}
	profile, err := e.ruleProfile(ctx, p.TenantID, in.DeviceProfileID)
	if err != nil {
		return nil, err
	}
	key := ruleKey(p.TenantID, profile, method)
	for range 2 {
		r := &RPCRule{ID: newID(), CreatedTime: e.now().UnixMilli(), TenantID: p.TenantID,
			Method: method, DeviceProfileID: profile, Version: 1}
		old, err := lookupRecord[RPCRule](ctx, e, kindRPCRule, key)
		switch {
		case err == nil:
			r.ID, r.CreatedTime, r.Version = old.ID, old.CreatedTime, old.Version+1
		case !errors.Is(err, storage.ErrNotFound):
			return nil, err
		}
		r.Script = in.Script
		err = e.putRecord(ctx, kindRPCRule, r.ID, p.TenantID, r, key)
		if err == nil {
			e.evictRules(p.TenantID)
			return r, nil
		}
		if !errors.Is(err, storage.ErrConflict) {
			return nil, err
		}
		// Another save of the same method and profile created it meanwhile: update that one.
	}
	return nil, fmtConflict(kindRPCRule, p.TenantID)
}

// ruleProfile reads the deviceProfileId of a rule save and checks that it is a
// profile of the tenant; absent or null means every profile (nil).
func (e *Engine) ruleProfile(ctx context.Context, tenant uuid.UUID, raw json.RawMessage) (*uuid.UUID, error) {
	text := strings.TrimSpace(string(raw))
	if text == "" || text == "null" {
		return nil, nil
	}
	var s string
	if err := sonic.UnmarshalString(text, &s); err != nil {
		var obj struct {
			ID string `json:"id"`
		}
		if sonic.UnmarshalString(text, &obj) != nil {
			return nil, errRuleProfile
		}
		s = obj.ID
	}
	id, err := uuid.Parse(s)
	if err != nil {
		return nil, errRuleProfile
	}
	dp, err := getRecord[DeviceProfile](ctx, e, kindProfile, id)
	if errors.Is(err, storage.ErrNotFound) || err == nil && dp.TenantID.ID != tenant {
		return nil, errRuleProfile
	}
	if err != nil {
		return nil, err
	}
	return &id, nil
}

// ListRPCRules returns the rules of p's tenant by method, tenant-wide rules
// before profile rules (tenant admins only).
func (e *Engine) ListRPCRules(ctx context.Context, p *Principal) ([]*RPCRule, error) {
	if err := requireRole(p, TenantAdmin); err != nil {
		return nil, err
	}
	rules, err := listRecords[RPCRule](ctx, e, kindRPCRule, p.TenantID)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(rules, func(a, b *RPCRule) int {
		return cmp.Or(cmp.Compare(a.Method, b.Method), cmp.Compare(profileText(a), profileText(b)))
	})
	return rules, nil
}

func profileText(r *RPCRule) string {
	if r.DeviceProfileID == nil {
		return ""
	}
	return r.DeviceProfileID.String()
}

// DeleteRPCRule deletes a rule of p's tenant (tenant admins only); another
// tenant's rule is not found.
func (e *Engine) DeleteRPCRule(ctx context.Context, p *Principal, id uuid.UUID) error {
	if err := requireRole(p, TenantAdmin); err != nil {
		return err
	}
	r, err := getRecord[RPCRule](ctx, e, kindRPCRule, id)
	if err != nil {
		return notFound(err)
	}
	if r.TenantID != p.TenantID {
		return ErrNotFound
	}
	if err := e.deleteRecord(ctx, kindRPCRule, id); err != nil {
		return notFound(err)
	}
	e.evictRules(p.TenantID)
	return nil
}

// matchRule picks the rule for a device of profile: the profile's own rule
// wins over a tenant-wide one.
func matchRule(rules []*RPCRule, profile uuid.UUID, method string) *RPCRule {
	var wide *RPCRule
	for _, r := range rules {
		if r.Method != method {
			continue
		}
		if r.DeviceProfileID == nil {
			wide = r
		} else if *r.DeviceProfileID == profile {
			return r
		}
	}
	return wide
}

// CallClientRPC answers a device's client-side RPC: the JSON reply, or nil for
// a 200 with an empty body (the script returned undefined). params is JSON
// (nil means null). A method no rule answers is a 404 naming it; a script that
// throws, runs past SLUICE_SCRIPT_TIMEOUT or allocates past
// SLUICE_SCRIPT_MAX_MEMORY is a 500 naming the rule, the method and the cause.
func (e *Engine) CallClientRPC(ctx context.Context, dev *Device, method string, params []byte) ([]byte, error) {
	rules, err := e.tenantRules(ctx, dev.TenantID())
	if err != nil {
		return nil, err
	}
	r := matchRule(rules, dev.DeviceProfileID.ID, method)
	if r == nil {
		if method == MethodGetCurrentTime {
			return append(strconv.AppendInt([]byte(`{"time":`), e.now().UnixMilli(), 10), '}'), nil
		}
		return nil, Errorf(CodeItemNotFound, "No rule answers the client-side RPC method %q", method)
	}
	reply, err := e.ruleState().runner.Run(ctx, r.Script, params,
		script.Device{ID: dev.UUID().String(), Name: dev.Name, Type: dev.Type})
	var se *script.Error
	switch {
	case err == nil:
		return reply, nil
	case errors.As(err, &se) && se.Kind == script.KindBusy:
		return nil, Errorf(CodeUnavailable, "Cannot run the rule for method %q now: %s; retry later", method, se.Msg)
	case errors.As(err, &se):
		return nil, Errorf(CodeGeneral, "Script of rule %s for method %q failed: %s", r.ID, method, se.Msg)
	}
	return nil, fmt.Errorf("cannot run rule %s: %w", r.ID, err)
}
