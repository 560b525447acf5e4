package engine

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

func TestAPIKeyLifecycle(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	k, err := te.SaveAPIKey(ctx, admin, &APIKeyRequest{Description: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	if k.Value == nil || !strings.HasPrefix(*k.Value, "tb_") || len(*k.Value) != 3+86 {
		t.Fatalf("value %v", k.Value)
	}
	if raw, err := base64.RawURLEncoding.DecodeString((*k.Value)[3:]); err != nil || len(raw) != 64 {
		t.Fatalf("value is not 64 bytes base64url: %v", err)
	}
	// Created without "enabled": enabled, as the OpenAPI document's default says.
	if k.ID.EntityType != EntityAPIKey || k.UserID.ID != admin.UserID || k.TenantID.ID != admin.TenantID || k.Expired || !k.Enabled {
		t.Fatalf("key %+v", k.APIKeyInfo)
	}
	value := *k.Value
	// Only the hash is stored.
	r, err := te.store.Get(ctx, kindAPIKey, k.ID.ID)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(r.Data), value) || strings.Contains(string(r.Data), value[3:]) ||
		len(r.Unique) != 1 || r.Unique[0] != "keyhash:"+sha256Hex(value) {
		t.Fatalf("stored key: %s %v", r.Data, r.Unique)
	}

	auth := func(header string, want error) {
		t.Helper()
		p, err := te.Authenticate(ctx, header)
		if err != want {
			t.Fatalf("Authenticate(%.20q) = %v, want %v", header, err, want)
		}
		if err == nil && (p.UserID != admin.UserID || p.Authority != TenantAdmin || p.TenantID != admin.TenantID) {
			t.Fatalf("principal %+v", p)
		}
	}
	auth("ApiKey "+value, nil)
	auth("ApiKey "+value+"x", ErrBadCredentials)
	auth("ApiKey tb_", ErrBadCredentials)
	auth("ApiKey "+value[3:], ErrBadCredentials)
	auth("apikey "+value, ErrAuthFailed)
	auth("Bearer "+value, ErrBadCredentials)

	// Updates: description and enabled only; refused at once when disabled.
	upd := func(in APIKeyInfo, code Code) {
		t.Helper()
		out, err := te.SaveAPIKey(ctx, admin, &APIKeyRequest{ID: in.ID, UserID: in.UserID,
			ExpirationTime: in.ExpirationTime, Description: in.Description, Enabled: &in.Enabled})
		wantCode(t, err, code)
		if err == nil && out.Value != nil {
			t.Fatalf("update returned the value")
		}
	}
	info := k.APIKeyInfo
	info.Description, info.Enabled = "ci-2", false
	upd(info, 0)
	auth("ApiKey "+value, errUserNotActive)
	bad := info
	bad.ExpirationTime = 5
	upd(bad, CodeBadRequestParams)
	bad = info
	bad.UserID = newEntityID(EntityUser, uuid.New())
	upd(bad, CodeBadRequestParams)
	bad = info
	bad.Description = " "
	upd(bad, CodeBadRequestParams)
	bad = info
	bad.ID.ID = uuid.New()
	upd(bad, CodeItemNotFound)
	// An update without enabled keeps the key's state: still disabled.
	if _, err := te.SaveAPIKey(ctx, admin, &APIKeyRequest{ID: info.ID, Description: "ci-3"}); err != nil {
		t.Fatal(err)
	}
	auth("ApiKey "+value, errUserNotActive)
	if _, err := te.SetAPIKeyEnabled(ctx, admin, k.ID.ID, true); err != nil {
		t.Fatal(err)
	}
	auth("ApiKey "+value, nil)
	if _, err := te.SaveAPIKey(ctx, admin, &APIKeyRequest{ID: info.ID, Description: "ci-4"}); err != nil {
		t.Fatal(err)
	}
	auth("ApiKey "+value, nil)
	got, err := te.SetAPIKeyDescription(ctx, admin, k.ID.ID, "renamed")
	if err != nil || got.Description != "renamed" || !got.Enabled {
		t.Fatalf("description: %+v %v", got, err)
	}

	// Expiry, through the engine clock.
	exp, err := te.SaveAPIKey(ctx, admin, &APIKeyRequest{Description: "short",
		ExpirationTime: time.Now().Add(time.Hour).UnixMilli()})
	if err != nil {
		t.Fatal(err)
	}
	auth("ApiKey "+*exp.Value, nil)
	te.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	auth("ApiKey "+*exp.Value, errAPIKeyExpired)
	page, err := te.ListAPIKeys(ctx, admin, admin.UserID, PageLink{PageSize: 10, SortProperty: "description"})
	if err != nil || page.TotalElements != 2 || page.Data[0].Description != "renamed" || !page.Data[1].Expired || page.Data[0].Expired {
		t.Fatalf("list: %+v %v", page, err)
	}
	te.now = time.Now

	// Delete, then the key is unknown.
	wantCode(t, te.DeleteAPIKey(ctx, admin, k.ID.ID), 0)
	auth("ApiKey "+value, ErrBadCredentials)
	wantCode(t, te.DeleteAPIKey(ctx, admin, k.ID.ID), CodeItemNotFound)
}

func TestAPIKeyPermissions(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin, cust, sys := te.tenantAdmin(t), te.customerUser(t), te.sysadmin(t)
	other := te.newTenant(t, "B", "b@example.com")
	f := func(p *Principal, owner uuid.UUID, code Code) {
		t.Helper()
		_, err := te.SaveAPIKey(ctx, p, &APIKeyRequest{Description: "k",
			UserID: newEntityID(EntityUser, owner)})
		wantCode(t, err, code)
		_, err = te.ListAPIKeys(ctx, p, owner, PageLink{PageSize: 1})
		wantCode(t, err, code)
	}
	f(cust, cust.UserID, 0)
	f(cust, admin.UserID, CodePermissionDenied)
	f(admin, admin.UserID, 0)
	f(admin, cust.UserID, 0)
	f(admin, other.UserID, CodePermissionDenied)
	f(admin, sys.UserID, CodePermissionDenied)
	f(sys, sys.UserID, 0)
	f(sys, admin.UserID, 0)
	f(sys, cust.UserID, CodePermissionDenied)
	sys2, err := te.SaveUser(ctx, sys, &User{Email: "sys2@example.com", Authority: SysAdmin})
	if err != nil {
		t.Fatal(err)
	}
	f(sys, sys2.ID.ID, 0) // another system administrator's, as ThingsBoard's SysAdminPermissions
	f(other, admin.UserID, CodePermissionDenied)
	f(other, uuid.New(), CodeItemNotFound)

	// A key of a customer user acts as that user, with its rights only.
	k, err := te.SaveAPIKey(ctx, cust, &APIKeyRequest{Description: "mine"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := te.Authenticate(ctx, "ApiKey "+*k.Value)
	if err != nil || p.Authority != CustomerUser || p.CustomerID != te.demo.DemoCustomerID {
		t.Fatalf("principal %+v %v", p, err)
	}
	_, err = te.GetDevice(ctx, p, te.demo.DemoDeviceID)
	wantCode(t, err, CodePermissionDenied)
	_, err = te.SetAPIKeyEnabled(ctx, other, k.ID.ID, false)
	wantCode(t, err, CodePermissionDenied)
	wantCode(t, te.DeleteAPIKey(ctx, other, k.ID.ID), CodePermissionDenied)

	// Deleting the user deletes its keys.
	u, err := te.GetUser(ctx, admin, cust.UserID)
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, te.DeleteUser(ctx, admin, u.ID.ID), 0)
	if _, err := te.Authenticate(ctx, "ApiKey "+*k.Value); err != ErrBadCredentials {
		t.Fatalf("key of a deleted user: %v", err)
	}
	if _, err := te.store.Get(ctx, kindAPIKey, k.ID.ID); err == nil {
		t.Fatal("key of a deleted user is still stored")
	}
	// And tokens of a deleted user are refused.
	if _, err := te.CurrentUser(ctx, cust); err == nil {
		t.Fatal("deleted user still loads")
	}
}

// overtakingStore runs overtake once, before the first Replace it passes on:
// another node's write landing between an update's read and its write.
type overtakingStore struct {
	storage.Backend
	overtake func()
}

func (s *overtakingStore) Replace(ctx context.Context, r storage.Record, prev []byte) error {
	if f := s.overtake; f != nil {
		s.overtake = nil
		f()
	}
	return s.Backend.Replace(ctx, r, prev)
}

// overtaker puts an overtakingStore under te and returns what arms it: f runs
// before the next Replace, on the store beneath.
func (te *testEngine) overtaker() func(f func()) {
	inner := te.store
	store := &overtakingStore{Backend: inner}
	te.store = store
	return func(f func()) {
		store.overtake = func() { te.store = inner; f(); te.store = store }
	}
}

// TestAPIKeyUpdateRace: an update overtaken by a disable, say by the key's
// holder on a node that still had it cached as enabled, keeps the key disabled;
// one overtaken by a delete does not bring the key back.
func TestAPIKeyUpdateRace(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	k, err := te.SaveAPIKey(ctx, admin, &APIKeyRequest{Description: "raced"})
	if err != nil {
		t.Fatal(err)
	}
	overtake := te.overtaker()

	overtake(func() {
		if _, err := te.SetAPIKeyEnabled(ctx, admin, k.ID.ID, false); err != nil {
			t.Error(err)
		}
	})
	got, err := te.SetAPIKeyDescription(ctx, admin, k.ID.ID, "renamed")
	if err != nil || got.Enabled || got.Description != "renamed" {
		t.Fatalf("update overtaken by a disable: %+v, %v", got, err)
	}

	overtake(func() {
		if err := te.DeleteAPIKey(ctx, admin, k.ID.ID); err != nil {
			t.Error(err)
		}
	})
	_, err = te.SetAPIKeyEnabled(ctx, admin, k.ID.ID, true)
	wantCode(t, err, CodeItemNotFound)
	if _, err := te.Authenticate(ctx, "ApiKey "+*k.Value); err != ErrBadCredentials {
		t.Fatalf("the deleted key authenticates: %v", err)
	}
}

// TestAPIKeyDescriptionLength: a description is at most 255 characters, on
// create, update and PUT .../description, with ThingsBoard's message.
func TestAPIKeyDescriptionLength(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	const msg = "Validation error: description length must be equal or less than 255"
	long := strings.Repeat("d", 256)
	_, err := te.SaveAPIKey(ctx, admin, &APIKeyRequest{Description: long})
	wantMsg(t, err, CodeBadRequestParams, msg)
	k, err := te.SaveAPIKey(ctx, admin, &APIKeyRequest{Description: strings.Repeat("é", 255)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = te.SaveAPIKey(ctx, admin, &APIKeyRequest{ID: k.ID, Description: long})
	wantMsg(t, err, CodeBadRequestParams, msg)
	_, err = te.SetAPIKeyDescription(ctx, admin, k.ID.ID, long)
	wantMsg(t, err, CodeBadRequestParams, msg)
}

// TestAPIKeyCreatedExpired: as in ThingsBoard, an expirationTime already past
// is accepted; the key reads as expired and is refused.
func TestAPIKeyCreatedExpired(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	past := te.now().Add(-time.Minute).UnixMilli()
	k, err := te.SaveAPIKey(ctx, admin, &APIKeyRequest{Description: "late", ExpirationTime: past})
	if err != nil || !k.Expired || k.ExpirationTime != past {
		t.Fatalf("key with a past expiry: %+v %v", k, err)
	}
	if _, err := te.Authenticate(ctx, "ApiKey "+*k.Value); err != errAPIKeyExpired {
		t.Fatalf("expired key: %v", err)
	}
	_, err = te.SaveAPIKey(ctx, admin, &APIKeyRequest{Description: "negative", ExpirationTime: -1})
	wantCode(t, err, CodeBadRequestParams)
}

// wantMsg is wantCode that also checks the message.
func wantMsg(t *testing.T, err error, code Code, msg string) {
	t.Helper()
	wantCode(t, err, code)
	var ee *Error
	if errors.As(err, &ee); ee.Msg != msg {
		t.Fatalf("message %q, want %q", ee.Msg, msg)
	}
}
