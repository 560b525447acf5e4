package engine

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/crypto/bcrypt"

	"github.com/sluice-iot/sluice/storage/embedded"
)

func TestParseRateLimit(t *testing.T) {
	f := func(in string, wantBandwidths int, wantErr bool) {
		t.Helper()
		l, err := parseRateLimit(in)
		if (err != nil) != wantErr {
			t.Fatalf("%q: error %v, want error %v", in, err, wantErr)
		}
		got := 0
		if l != nil {
			got = len(l.bws)
		}
		if got != wantBandwidths {
			t.Fatalf("%q: %d bandwidths, want %d", in, got, wantBandwidths)
		}
	}
	f("", 0, false)
	f("   ", 0, false)
	f("10:1", 1, false)
	f("1000:1,20000:60", 2, false)
	f(" 5 : 1 , 100 : 60 ", 2, false)
	f("10", 0, true)
	f("10:", 0, true)
	f(":1", 0, true)
	f("0:1", 0, true)
	f("10:0", 0, true)
	f("-1:1", 0, true)
	f("10:1,", 0, true)
	f("a:b", 0, true)
	f("1.5:1", 0, true)
	f("10:1,20:1", 0, true) // one period twice, refused by ThingsBoard too
}

func TestBucketRefillsGreedily(t *testing.T) {
	l, _ := parseRateLimit("2:1,3:10")
	now := int64(0)
	b := newBucket(l, now)
	take := func(n float64, wantOK bool, wantWait time.Duration) {
		t.Helper()
		ok, wait := b.take(now, n)
		if ok != wantOK || wait != wantWait {
			t.Fatalf("at %v take %v: %v %v, want %v %v", time.Duration(now), n, ok, wait, wantOK, wantWait)
		}
	}
	take(1, true, 0)
	take(1, true, 0)
	take(1, false, 500*time.Millisecond) // 2:1 is empty: one token every 0.5 s
	now += int64(500 * time.Millisecond)
	take(1, true, 0) // 3:10 now empty too (it refilled 0.15)
	now += int64(time.Second)
	// 2:1 is full again, 3:10 holds 0.15+0.1+… : the longer bandwidth decides.
	ok, wait := b.take(now, 1)
	if ok || wait <= time.Second {
		t.Fatalf("3:10 should refuse for a few seconds: %v %v", ok, wait)
	}
	now += int64(wait)
	take(1, true, 0)
	// More than a capacity never fits: the wait is the period.
	take(5, false, 10*time.Second)
	if b.full(now) {
		t.Fatal("a drained bucket reads full")
	}
	now += int64(time.Minute)
	if !b.full(now) {
		t.Fatal("a bucket idle for its longest period must be full")
	}
}

func TestBucketsSweepFullOnes(t *testing.T) {
	var bs buckets
	l, _ := parseRateLimit("1:1")
	id := uuid.New()
	now := int64(time.Hour)
	if ok, _ := bs.take(bucketKey{id, deviceMsgBucket}, l, now, 1); !ok {
		t.Fatal("first take refused")
	}
	now += int64(2 * sweepEvery)
	other := id
	other[0] ^= 1                                         // same shard
	bs.take(bucketKey{other, deviceMsgBucket}, l, now, 1) // an insert sweeps its shard
	sh := &bs.shards[id[15]%bucketShards]
	if _, kept := sh.m[bucketKey{id, deviceMsgBucket}]; kept || len(sh.m) != 1 {
		t.Fatalf("an idle, full bucket was kept: %d buckets", len(sh.m))
	}
	// A changed limit string starts a new bucket.
	l2, _ := parseRateLimit("5:1")
	for range 5 {
		if ok, _ := bs.take(bucketKey{id, deviceMsgBucket}, l2, now, 1); !ok {
			t.Fatal("new limit not applied")
		}
	}
}

// limitedTenant gives the demo tenant a profile with conf and returns the demo device.
func limitedTenant(t testing.TB, te *testEngine, conf string) *Device {
	t.Helper()
	ctx := context.Background()
	admin := &Principal{Authority: SysAdmin, TenantID: NullUUID, CustomerID: NullUUID}
	tp, err := te.SaveTenantProfile(ctx, admin, &TenantProfile{Name: "limited",
		ProfileData: TenantProfileData{Configuration: json.RawMessage(conf)}})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := te.DeviceByToken(ctx, te.demo.DemoDeviceToken)
	if err != nil {
		t.Fatal(err)
	}
	tn, err := te.GetTenant(ctx, admin, dev.TenantID())
	if err != nil {
		t.Fatal(err)
	}
	tn.TenantProfileID = &tp.ID
	if _, err := te.SaveTenant(ctx, admin, tn); err != nil {
		t.Fatal(err)
	}
	return dev
}

func wantLimited(t *testing.T, err error, msg string) {
	t.Helper()
	var le *LimitError
	if !errors.As(err, &le) || le.Err.Msg != msg || le.Err.Code != CodeTooManyRequests || le.RetryAfter <= 0 {
		t.Fatalf("want a LimitError %q, got %v", msg, err)
	}
}

func TestAllowDevice(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	dev := te.demo.DemoDeviceToken
	d, _ := te.DeviceByToken(ctx, dev)
	for range 100 { // the default profile limits nothing
		wantCode(t, te.AllowDevice(ctx, d, 10), 0)
	}
	d = limitedTenant(t, te, `{"transportDeviceMsgRateLimit":"2:60","transportDeviceTelemetryDataPointsRateLimit":"10:60",`+
		`"transportTenantTelemetryMsgRateLimit":"3:60"}`)
	wantCode(t, te.AllowDevice(ctx, d, 0), 0)
	wantCode(t, te.AllowDevice(ctx, d, 0), 0)
	wantLimited(t, te.AllowDevice(ctx, d, 0), "Too many requests for current device!")
	// Writes count against the telemetry limits, not the message limit.
	wantCode(t, te.AllowDevice(ctx, d, 6), 0)
	wantLimited(t, te.AllowDevice(ctx, d, 6), "Too many requests for current device!") // 4 points left
	wantCode(t, te.AllowDevice(ctx, d, 4), 0)
	wantLimited(t, te.AllowDevice(ctx, d, 1), "Too many requests for current device!") // no points left
	// The device's refused writes gave the tenant's telemetry messages back:
	// another device of the tenant has the third.
	d2, err := te.DeviceByToken(ctx, DemoCustomerDeviceToken)
	if err != nil {
		t.Fatal(err)
	}
	// More points than the device's limit holds at once can never pass: a
	// plain 429 that says so, with no Retry-After to wait for in vain.
	err = te.AllowDevice(ctx, d2, 11)
	var le *LimitError
	if wantCode(t, err, CodeTooManyRequests); errors.As(err, &le) {
		t.Fatalf("a request over the capacity: %v, a LimitError", err)
	}
	wantCode(t, te.AllowDevice(ctx, d2, 1), 0)
	wantLimited(t, te.AllowDevice(ctx, d2, 1), "Too many requests for current tenant!") // 3 telemetry messages
	// MayWrite refuses, taking nothing, once a write could not pass.
	wantLimited(t, te.MayWrite(ctx, d2), "Too many requests for current tenant!")
}

func TestAllowREST(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	limitedTenant(t, te, `{"tenantServerRestLimitsConfiguration":"3:60","customerServerRestLimitsConfiguration":"1:60"}`)
	sys, admin, customer := te.sysadmin(t), te.tenantAdmin(t), te.customerUser(t)
	for range 10 {
		wantCode(t, te.AllowREST(ctx, sys), 0)
	}
	wantCode(t, te.AllowREST(ctx, customer), 0)
	wantLimited(t, te.AllowREST(ctx, customer), "Too many requests for current customer!")
	wantCode(t, te.AllowREST(ctx, admin), 0) // the refused customer call gave its tenant token back
	wantCode(t, te.AllowREST(ctx, admin), 0)
	wantLimited(t, te.AllowREST(ctx, admin), "Too many requests for current tenant!")
}

func TestTenantProfileValidation(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	sys := te.sysadmin(t)
	f := func(conf string, code Code) {
		t.Helper()
		_, err := te.SaveTenantProfile(ctx, sys, &TenantProfile{Name: "p-" + conf, ProfileData: TenantProfileData{Configuration: json.RawMessage(conf)}})
		wantCode(t, err, code)
	}
	f(`{"transportDeviceMsgRateLimit":"10:1"}`, 0)
	f(`{"transportDeviceMsgRateLimit":null}`, 0)
	f(`null`, 0)
	f(`{"transportDeviceMsgRateLimit":"10"}`, CodeBadRequestParams)
	f(`{"tenantServerRestLimitsConfiguration":"x:1"}`, CodeBadRequestParams)
	f(`{"transportDeviceMsgRateLimit":10}`, CodeBadRequestParams)
	f(`[1]`, CodeBadRequestParams)
	f(`{"rpcTtlDays":30}`, 0)
	f(`{"rpcTtlDays":0}`, 0)
	f(`{"rpcTtlDays":9223372036854775807}`, 0) // capped, not overflowed
	f(`{"rpcTtlDays":-1}`, CodeBadRequestParams)
	f(`{"rpcTtlDays":1.5}`, CodeBadRequestParams)
	// A mistyped field is named, without the decoder's position dump.
	_, err := te.SaveTenantProfile(ctx, sys, &TenantProfile{Name: "typed", ProfileData: TenantProfileData{Configuration: json.RawMessage(`{"transportTenantMsgRateLimit":5}`)}})
	if err == nil || err.Error() != "Invalid tenant profile configuration: transportTenantMsgRateLimit must be a string, not a number" {
		t.Fatalf("mistyped field: %v", err)
	}

	_, err = te.SaveTenantProfile(ctx, te.tenantAdmin(t), &TenantProfile{Name: "x"})
	wantCode(t, err, CodePermissionDenied)
	_, err = te.SaveTenantProfile(ctx, sys, &TenantProfile{Name: " "})
	wantCode(t, err, CodeBadRequestParams)
	_, err = te.SaveTenantProfile(ctx, sys, &TenantProfile{Name: DefaultTenantProfileName})
	wantCode(t, err, CodeBadRequestParams) // name taken

	def, err := te.DefaultTenantProfileInfo(ctx, sys)
	wantCode(t, err, 0)
	wantCode(t, te.DeleteTenantProfile(ctx, sys, def.ID.ID), CodeBadRequestParams)
	d := limitedTenant(t, te, `{}`)
	tn, _ := te.GetTenant(ctx, sys, d.TenantID())
	wantCode(t, te.DeleteTenantProfile(ctx, sys, tn.TenantProfileID.ID), CodeBadRequestParams) // in use
	_, err = te.SaveTenant(ctx, sys, &Tenant{Title: "t2", TenantProfileID: &EntityID{EntityType: EntityTenantProfile, ID: uuid.New()}})
	wantCode(t, err, CodeBadRequestParams)
	page, err := te.ListTenantProfiles(ctx, sys, PageLink{PageSize: 100})
	wantCode(t, err, 0)
	if page.TotalElements < 3 {
		t.Fatalf("profiles listed: %d", page.TotalElements)
	}
}

func TestPollCaps(t *testing.T) {
	te := newTestEngine(t)
	te.cfg.LongPollMaxPerNode, te.cfg.LongPollMaxPerDevice = 3, 2
	a, b, c := uuid.New(), uuid.New(), uuid.New()
	ra1, err := te.admitPoll(a)
	wantCode(t, err, 0)
	ra2, err := te.admitPoll(a)
	wantCode(t, err, 0)
	_, err = te.admitPoll(a)
	wantLimited(t, err, "Too many long polls for current device! At most 2 at once (SLUICE_LONG_POLL_MAX_PER_DEVICE)")
	rb, err := te.admitPoll(b)
	wantCode(t, err, 0)
	_, err = te.admitPoll(c)
	var le *LimitError
	if !errors.As(err, &le) || le.Err.Code != CodeUnavailable {
		t.Fatalf("past the node cap: %v", err)
	}
	if te.OpenPolls() != 3 {
		t.Fatalf("open polls %d, want 3", te.OpenPolls())
	}
	ra1()
	rc, err := te.admitPoll(c)
	wantCode(t, err, 0)
	ra2()
	rb()
	rc()
	if te.OpenPolls() != 0 {
		t.Fatalf("open polls %d after release", te.OpenPolls())
	}
	for i := range te.limits.polls.shards {
		if len(te.limits.polls.shards[i].m) != 0 {
			t.Fatal("released devices still counted")
		}
	}
}

// BenchmarkAllowDevice is the cost a device request pays for the limits: with the
// default profile (nothing to count) and with device and tenant limits.
func BenchmarkAllowDevice(b *testing.B) {
	for _, conf := range []string{"", `{"transportTenantTelemetryMsgRateLimit":"1000000000:1","transportTenantTelemetryDataPointsRateLimit":"1000000000:1",` +
		`"transportDeviceTelemetryMsgRateLimit":"1000000000:1","transportDeviceTelemetryDataPointsRateLimit":"1000000000:1"}`} {
		name := "unlimited"
		if conf != "" {
			name = "limited"
		}
		b.Run(name, func(b *testing.B) {
			te := newBenchEngine(b)
			d, err := te.DeviceByToken(context.Background(), te.demo.DemoDeviceToken)
			if err != nil {
				b.Fatal(err)
			}
			if conf != "" {
				d = limitedTenant(b, te, conf)
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := te.AllowDevice(ctx, d, 10); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// newBenchEngine is newTestEngine for benchmarks.
func newBenchEngine(b *testing.B) *testEngine {
	b.Helper()
	db, err := embedded.Open(b.TempDir(), embedded.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	e := New(db, Config{JWTSigningKey: []byte("test-signing-key-0123456789abcdef"), BcryptCost: bcrypt.MinCost})
	res, err := e.Bootstrap(context.Background(), true, "")
	if err != nil {
		b.Fatal(err)
	}
	return &testEngine{Engine: e, demo: res}
}
