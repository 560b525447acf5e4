package engine

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/sluice-iot/sluice/notify"
	"github.com/sluice-iot/sluice/storage"
	"github.com/sluice-iot/sluice/storage/embedded"
)

// twoNodes returns two engines ("nodes") over one store and one notifier,
// with cache TTLs far longer than a test, and the demo data. Node A's store is
// what wrapA makes of the shared one, when wrapA is not nil.
func twoNodes(t *testing.T, wrapA func(storage.Backend) storage.Backend) (a, b *Engine, demo BootstrapResult) {
	t.Helper()
	db, err := embedded.Open(t.TempDir(), embedded.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	cfg := Config{JWTSigningKey: []byte("test-signing-key-0123456789abcdef"), BcryptCost: bcrypt.MinCost,
		TokenCacheTTL: time.Hour, AuthCacheTTL: time.Hour, Notifier: notify.NewLocal()}
	var storeA storage.Backend = db
	if wrapA != nil {
		storeA = wrapA(db)
	}
	a, b = New(storeA, cfg), New(db, cfg)
	if demo, err = b.Bootstrap(context.Background(), true, ""); err != nil {
		t.Fatal(err)
	}
	return a, b, demo
}

// TestEvictionReachesOtherNodes runs two engines ("nodes") over one store and one
// notifier, with cache TTLs far longer than the test: a change on node B must make
// node A refuse the old device token and the old JWT at once.
func TestEvictionReachesOtherNodes(t *testing.T) {
	ctx := context.Background()
	a, b, demo := twoNodes(t, nil)

	// Node A caches the device token and the tenant admin's state.
	if _, err := a.DeviceByToken(ctx, demo.DemoDeviceToken); err != nil {
		t.Fatal(err)
	}
	access, _, err := a.Login(ctx, DemoTenantAdminEmail, "tenant")
	if err != nil {
		t.Fatal(err)
	}
	p, err := a.Authenticate(ctx, "Bearer "+access)
	if err != nil {
		t.Fatal(err)
	}

	// Node B changes the device's token and the admin's password.
	creds, err := b.GetDeviceCredentials(ctx, p, demo.DemoDeviceID)
	if err != nil {
		t.Fatal(err)
	}
	creds.CredentialsID = "NEW_TOKEN_AFTER_ROTATION"
	if _, err := b.SaveDeviceCredentials(ctx, p, creds); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.ChangePassword(ctx, p, "tenant", "tenant-2"); err != nil {
		t.Fatal(err)
	}

	var ee *Error
	if _, err := a.DeviceByToken(ctx, demo.DemoDeviceToken); !errors.As(err, &ee) || ee.Code != CodeAuthentication {
		t.Fatalf("node A still accepts the rotated token: %v", err)
	}
	if _, err := a.DeviceByToken(ctx, "NEW_TOKEN_AFTER_ROTATION"); err != nil {
		t.Fatalf("node A refuses the new token: %v", err)
	}
	if _, err := a.Authenticate(ctx, "Bearer "+access); !errors.As(err, &ee) || ee.Code != CodeJWTExpired {
		t.Fatalf("node A still accepts a JWT issued before the password change: %v", err)
	}
}

// TestTokenEvictionIsPerToken: a device change evicts that device's token on
// every node, not every token (which made each save cost every node a storage
// read per device request).
func TestTokenEvictionIsPerToken(t *testing.T) {
	ctx := context.Background()
	a, b, demo := twoNodes(t, nil)
	for _, tok := range []string{demo.DemoDeviceToken, DemoCustomerDeviceToken} {
		if _, err := a.DeviceByToken(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	cached := func(tok string) bool {
		_, ok := a.tokens.m.Load(tok)
		return ok
	}
	p := (&testEngine{Engine: b}).login(t, DemoTenantAdminEmail, "tenant")
	d, err := b.GetDevice(ctx, p, demo.DemoDeviceID)
	if err != nil {
		t.Fatal(err)
	}
	d.Label = "relabelled"
	if _, err := b.SaveDevice(ctx, p, d, ""); err != nil {
		t.Fatal(err)
	}
	if cached(demo.DemoDeviceToken) || !cached(DemoCustomerDeviceToken) {
		t.Fatalf("after a save on B: demo token cached %v, other token cached %v", cached(demo.DemoDeviceToken), cached(DemoCustomerDeviceToken))
	}
	if got, err := a.DeviceByToken(ctx, demo.DemoDeviceToken); err != nil || got.Label != "relabelled" {
		t.Fatalf("node A reads %+v %v", got, err)
	}
}

// credsHookStore runs hook once, after the first credentials lookup.
type credsHookStore struct {
	storage.Backend
	mu   sync.Mutex
	hook func()
}

func (h *credsHookStore) Lookup(ctx context.Context, kind, unique string) (storage.Record, error) {
	r, err := h.Backend.Lookup(ctx, kind, unique)
	h.mu.Lock()
	f := h.hook
	if kind == kindCredentials {
		h.hook = nil
	}
	h.mu.Unlock()
	if f != nil && kind == kindCredentials {
		f()
	}
	return r, err
}

// TestEvictionDuringLoad: a token rotated on node B while node A loads it
// (its first use on A) is not cached by that load: A refuses it next time.
func TestEvictionDuringLoad(t *testing.T) {
	ctx := context.Background()
	var hs *credsHookStore
	a, b, demo := twoNodes(t, func(db storage.Backend) storage.Backend {
		hs = &credsHookStore{Backend: db}
		return hs
	})
	p := (&testEngine{Engine: b}).login(t, DemoTenantAdminEmail, "tenant")
	hs.hook = func() {
		creds, err := b.GetDeviceCredentials(ctx, p, demo.DemoDeviceID)
		if err != nil {
			t.Error(err)
			return
		}
		creds.CredentialsID = "NEW_TOKEN_AFTER_ROTATION"
		if _, err := b.SaveDeviceCredentials(ctx, p, creds); err != nil {
			t.Error(err)
		}
	}
	if _, err := a.DeviceByToken(ctx, demo.DemoDeviceToken); err != nil {
		t.Fatal(err) // the load read the credentials before the rotation
	}
	if _, err := a.DeviceByToken(ctx, demo.DemoDeviceToken); err == nil {
		t.Fatal("node A still accepts the rotated token: the load in flight cached it")
	}
}

// TestResyncPause: the pause after a resync ends early, reporting it, when
// the wait's timeout fires or its context ends.
func TestResyncPause(t *testing.T) {
	defer func(d time.Duration) { resyncSpread = d }(resyncSpread)
	resyncSpread = time.Hour
	var e Engine
	fired := make(chan time.Time, 1)
	fired <- time.Now()
	if e.resyncPause(context.Background(), fired) {
		t.Fatal("a fired timeout did not end the pause")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if e.resyncPause(ctx, nil) {
		t.Fatal("an ended context did not end the pause")
	}
	resyncSpread = 0
	if !e.resyncPause(context.Background(), nil) {
		t.Fatal("no spread: the pause must pass")
	}
}
