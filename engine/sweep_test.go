package engine

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// TestDeviceSweep: what a request that passed a device's token check before its
// deletion writes after it (latest values, attributes) is deleted once more,
// TokenCacheTTL and sweepSlack later, or at Close when that comes first.
func TestDeviceSweep(t *testing.T) {
	defer func(v time.Duration) { sweepSlack = v }(sweepSlack)
	ctx := context.Background()
	straggle := func(te *testEngine, id uuid.UUID) {
		t.Helper()
		row := storage.Row{EntityID: id, Entry: kv.Entry{Ts: 1, Key: "t", Value: kv.LongValue(1)}}
		if err := te.store.Write(ctx, []storage.Row{row}); err != nil {
			t.Fatal(err)
		}
		if err := te.store.SaveAttributes(ctx, id, storage.ClientScope, []kv.Entry{row.Entry}); err != nil {
			t.Fatal(err)
		}
	}
	left := func(te *testEngine, id uuid.UUID) bool {
		t.Helper()
		keys, err := te.store.SeriesKeys(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		attrs, err := te.store.GetAttributes(ctx, id, storage.ClientScope, nil)
		if err != nil {
			t.Fatal(err)
		}
		return len(keys)+len(attrs) > 0
	}
	deleted := func(te *testEngine) uuid.UUID {
		t.Helper()
		admin := te.tenantAdmin(t)
		d, err := te.SaveDevice(ctx, admin, &Device{Name: "gone-" + uuid.NewString()}, "")
		if err != nil {
			t.Fatal(err)
		}
		wantCode(t, te.DeleteDevice(ctx, admin, d.ID.ID), 0)
		straggle(te, d.ID.ID)
		return d.ID.ID
	}

	t.Run("after the token cache", func(t *testing.T) {
		sweepSlack = 0
		te := newTestEngine(t)
		te.cfg.TokenCacheTTL, te.cfg.AuthCacheTTL = 20*time.Millisecond, 20*time.Millisecond
		id := deleted(te)
		deadline := time.Now().Add(10 * time.Second)
		for left(te, id) {
			if time.Now().After(deadline) {
				t.Fatal("data written after the deletion is still there")
			}
			time.Sleep(5 * time.Millisecond)
		}
	})

	t.Run("at close", func(t *testing.T) {
		sweepSlack = time.Hour
		te := newTestEngine(t)
		id := deleted(te)
		if !left(te, id) {
			t.Fatal("swept before its time")
		}
		te.Close(ctx)
		if left(te, id) {
			t.Fatal("Close did not run the sweep still due")
		}
		te.sweepLater(sweep{id: id}) // after Close: nothing scheduled
		if len(te.sweeps.queue) != 0 {
			t.Fatal("a sweep scheduled after Close")
		}
	})

	t.Run("a device not deleted is left alone", func(t *testing.T) {
		te := newTestEngine(t)
		id := te.demo.DemoDeviceID
		straggle(te, id)
		te.sweepDevice(ctx, id)
		if !left(te, id) {
			t.Fatal("swept a live device's data")
		}
	})
}

// TestTenantSweep: a device and a customer created in a tenant while it was
// being deleted (by an admin whose user another node still had cached) are
// deleted too, the cache lifetimes later.
func TestTenantSweep(t *testing.T) {
	defer func(v time.Duration) { sweepSlack = v }(sweepSlack)
	sweepSlack = 0
	te := newTestEngine(t)
	te.cfg.TokenCacheTTL, te.cfg.AuthCacheTTL = 20*time.Millisecond, 20*time.Millisecond
	ctx := context.Background()
	other := te.newTenant(t, "Doomed", "doomed@example.com")
	wantCode(t, te.DeleteTenant(ctx, te.sysadmin(t), other.TenantID), 0)
	d, err := te.saveDevice(ctx, other.TenantID, &Device{Name: "late"}, "LATE_TOKEN")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := te.createCustomer(ctx, other.TenantID, newID(), &Customer{Title: "late"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		devs, _ := te.store.List(ctx, kindDevice, other.TenantID)
		custs, _ := te.store.List(ctx, kindCustomer, other.TenantID)
		if len(devs)+len(custs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("left in the deleted tenant: %d devices, %d customers", len(devs), len(custs))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := te.DeviceByToken(ctx, "LATE_TOKEN"); err == nil {
		t.Fatalf("the late device %s still authenticates", d.ID.ID)
	}
}
