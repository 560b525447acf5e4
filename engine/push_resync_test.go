package engine

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/notify"
	"github.com/sluice-iot/sluice/storage"
)

// pollDeadline bounds the wait for a poll that should answer at once; only a
// broken poll, which waits out its hour, gets near it.
const pollDeadline = 30 * time.Second

// awaitPoll waits for the answer of a poll that should end without its timeout.
func awaitPoll(t *testing.T, res <-chan pollResult, what string) pollResult {
	t.Helper()
	select {
	case r := <-res:
		return r
	case <-time.After(pollDeadline):
		t.Fatalf("%s: the poll is still waiting", what)
		return pollResult{}
	}
}

// resyncUntil fires the notifier's resync until the poll answers: a poll that
// startPoll reports open may not have taken its resync channel yet, and a
// resync before that is not one it waits on.
func (te *testEngine) resyncUntil(t *testing.T, res <-chan pollResult, what string) pollResult {
	t.Helper()
	deadline := time.After(pollDeadline)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		te.DropCaches()
		select {
		case r := <-res:
			return r
		case <-tick.C:
		case <-deadline:
			t.Fatalf("%s: the poll is still waiting after resyncs", what)
		}
	}
}

// mutedEngine is a test engine whose notifier can lose messages, as a node's
// does while its Redis subscription is down.
func mutedEngine(t *testing.T) (*testEngine, *mutableNotifier) {
	bus := &mutableNotifier{Notifier: notify.NewLocal()}
	return newTestEngine(t, func(c *Config) { c.Notifier = bus }), bus
}

// unheard runs change with the notifier muted: its messages are lost.
func unheard(t *testing.T, bus *mutableNotifier, change func() error) {
	t.Helper()
	bus.muted.Store(true)
	defer bus.muted.Store(false)
	if err := change(); err != nil {
		t.Fatal(err)
	}
}

// settableClock makes the engine's clock one the test sets (ms since the
// epoch), starting an hour ago; set it before any poll starts.
func (te *testEngine) settableClock() *atomic.Int64 {
	var clock atomic.Int64
	clock.Store(time.Now().Add(-time.Hour).UnixMilli())
	te.now = func() time.Time { return time.UnixMilli(clock.Load()) }
	return &clock
}

// TestSharedPollResync: a shared-attribute change lost by the notifier reaches
// the open poll at the resync, with the other attributes updated since the
// poll started, not those the device had before it polled.
func TestSharedPollResync(t *testing.T) {
	te, bus := mutedEngine(t)
	clock := te.settableClock()
	ctx, dev := context.Background(), te.demo.DemoDeviceID
	if err := te.SaveAttributes(ctx, dev, storage.SharedScope, []kv.Entry{{Key: "old", Value: kv.LongValue(1)}}); err != nil {
		t.Fatal(err)
	}
	clock.Add((resyncSkew + time.Minute).Milliseconds())
	res := te.startPoll(t, ctx, dev, time.Hour)
	clock.Add(time.Second.Milliseconds())
	unheard(t, bus, func() error {
		return te.SaveAttributes(ctx, dev, storage.SharedScope, []kv.Entry{
			{Key: "fw", Value: kv.StringValue("2.0")}, {Key: "sw", Value: kv.LongValue(3)}})
	})
	r := te.resyncUntil(t, res, "lost shared change")
	if r.err != nil || !r.ok || string(r.body) != `{"fw":"2.0","sw":3}` {
		t.Fatalf("poll after a resync: %q ok=%v err=%v", r.body, r.ok, r.err)
	}
}

// resyncSeen fires one resync and returns once the open poll of the device
// with token has looked again after it: its token check, right before its
// attribute read, loads the token back into the cache the resync emptied.
// Nothing must have cached the token before the poll started.
func (te *testEngine) resyncSeen(t *testing.T, token, what string) {
	t.Helper()
	te.tokenCached(t, token, what) // the poll's first look, after it took the resync channel
	te.DropCaches()
	te.tokenCached(t, token, what+" (again)")
}

// tokenCached waits until the device's token is in the token cache: an open
// poll's look (pollerCurrent) puts it there. Nothing must have cached the
// token before the poll started.
func (te *testEngine) tokenCached(t *testing.T, token, what string) {
	t.Helper()
	deadline := time.Now().Add(pollDeadline)
	for {
		if _, ok := te.CachedDeviceByToken(token); ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the poll did not look", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSharedPollResyncPauseTimeout: a poll whose timeout comes during its
// pause after a resync still looks before it ends: a change lost in the gap
// is its answer, not a 408. The device's next poll starts after that change,
// and its own resync (if any) would not answer it.
func TestSharedPollResyncPauseTimeout(t *testing.T) {
	defer func(d time.Duration) { resyncSpread = d }(resyncSpread)
	resyncSpread = time.Hour // the pause outlasts the poll
	te, bus := mutedEngine(t)
	ctx, dev := context.Background(), te.demo.DemoDeviceID
	token := te.tokenOf(t, dev)
	res := te.startPoll(t, ctx, dev, 2*time.Second)
	te.tokenCached(t, token, "first look") // the poll holds the resync channel
	unheard(t, bus, func() error {
		return te.SaveAttributes(ctx, dev, storage.SharedScope, []kv.Entry{{Key: "fw", Value: kv.StringValue("2.0")}})
	})
	te.DropCaches()
	if r := awaitPoll(t, res, "timeout in the pause"); r.err != nil || !r.ok || string(r.body) != `{"fw":"2.0"}` {
		t.Fatalf("poll whose timeout came in its resync pause: %q ok=%v err=%v", r.body, r.ok, r.err)
	}
}

// TestSharedPollResyncOnlyOld: a resync answers no attribute saved before the
// poll started (more than resyncSkew before): the device had it, and an
// answer would be a spurious update (of fw_* keys, it could restart the
// device's OTA flow). The poll keeps waiting and answers the next change,
// with that change only.
func TestSharedPollResyncOnlyOld(t *testing.T) {
	te := newTestEngine(t)
	clock := te.settableClock()
	ctx, dev := context.Background(), te.demo.DemoDeviceID
	if err := te.SaveAttributes(ctx, dev, storage.SharedScope, []kv.Entry{
		{Key: "fw_version", Value: kv.StringValue("1.0")}, {Key: "old", Value: kv.LongValue(1)}}); err != nil {
		t.Fatal(err)
	}
	clock.Add((resyncSkew + time.Second).Milliseconds())
	res := te.startPoll(t, ctx, dev, time.Hour)
	te.resyncSeen(t, te.tokenOf(t, dev), "resync with only old attributes")
	if err := te.SaveAttributes(ctx, dev, storage.SharedScope, []kv.Entry{{Key: "next", Value: kv.LongValue(2)}}); err != nil {
		t.Fatal(err)
	}
	if r := awaitPoll(t, res, "change after resyncs"); r.err != nil || !r.ok || string(r.body) != `{"next":2}` {
		t.Fatalf("poll after resyncs and a change: %q ok=%v err=%v", r.body, r.ok, r.err)
	}
}

// TestSharedPollResyncSkew: an attribute dated up to resyncSkew before the
// poll started (by another node whose clock is behind this one's) is
// answered at a resync: the device may not have had it.
func TestSharedPollResyncSkew(t *testing.T) {
	te, bus := mutedEngine(t)
	clock := te.settableClock()
	ctx, dev := context.Background(), te.demo.DemoDeviceID
	if err := te.SaveAttributes(ctx, dev, storage.SharedScope, []kv.Entry{{Key: "old", Value: kv.LongValue(1)}}); err != nil {
		t.Fatal(err)
	}
	clock.Add((resyncSkew + time.Minute).Milliseconds())
	res := te.startPoll(t, ctx, dev, time.Hour)
	// Saved on a node whose clock is behind: dated before the poll started.
	clock.Add(-(resyncSkew - time.Second).Milliseconds())
	unheard(t, bus, func() error {
		return te.SaveAttributes(ctx, dev, storage.SharedScope, []kv.Entry{{Key: "behind", Value: kv.LongValue(2)}})
	})
	r := te.resyncUntil(t, res, "change dated before the poll")
	if r.err != nil || !r.ok || string(r.body) != `{"behind":2}` {
		t.Fatalf("poll after a resync: %q ok=%v err=%v", r.body, r.ok, r.err)
	}
}

// TestSharedPollResyncNothingShared: a resync with no shared attribute to
// answer keeps the poll waiting, to its timeout (408), never an empty 200.
func TestSharedPollResyncNothingShared(t *testing.T) {
	te := newTestEngine(t)
	res := te.startPoll(t, context.Background(), te.demo.DemoDeviceID, 300*time.Millisecond)
	r := te.resyncUntil(t, res, "nothing shared")
	if r.err != nil || r.ok || r.body != nil {
		t.Fatalf("poll after resyncs with nothing shared: %q ok=%v err=%v", r.body, r.ok, r.err)
	}
}

// TestSharedPollResyncDeviceGone: a deletion or a token change whose message
// was lost ends the open poll at the resync as the message would have:
// 403 "Device was deleted!", or 408 for new credentials.
func TestSharedPollResyncDeviceGone(t *testing.T) {
	te, bus := mutedEngine(t)
	admin, ctx := te.tenantAdmin(t), context.Background()

	dev := te.newDevice(t, admin, "renamed-token")
	res := te.startPoll(t, ctx, dev, time.Hour)
	unheard(t, bus, func() error { return te.newToken(ctx, admin, dev, "RESYNC_NEW_TOKEN") })
	if r := te.resyncUntil(t, res, "lost credentials change"); r.err != nil || r.ok {
		t.Fatalf("poll after a lost credentials change: %q ok=%v err=%v", r.body, r.ok, r.err)
	}

	dev = te.newDevice(t, admin, "deleted")
	res = te.startPoll(t, ctx, dev, time.Hour)
	unheard(t, bus, func() error { return te.DeleteDevice(ctx, admin, dev) })
	if r := te.resyncUntil(t, res, "lost deletion"); !errors.Is(r.err, ErrDeviceDeleted) || r.ok {
		t.Fatalf("poll after a lost deletion: %q ok=%v err=%v", r.body, r.ok, r.err)
	}
}

// TestSharedPollDeviceGoneBeforeSubscribe: a device deleted, or given a new
// token, after its token was checked and before its poll subscribed answers at
// once (403, 408), not at the poll's timeout.
func TestSharedPollDeviceGoneBeforeSubscribe(t *testing.T) {
	te := newTestEngine(t)
	admin, ctx := te.tenantAdmin(t), context.Background()
	poll := func(dev uuid.UUID, token string) <-chan pollResult {
		res := make(chan pollResult, 1)
		go func() {
			body, ok, err := te.WaitSharedAttributes(ctx, dev, token, time.Hour)
			res <- pollResult{body, ok, err}
		}()
		return res
	}

	dev := te.newDevice(t, admin, "renamed-early")
	old := te.tokenOf(t, dev)
	if err := te.newToken(ctx, admin, dev, "EARLY_NEW_TOKEN"); err != nil {
		t.Fatal(err)
	}
	if r := awaitPoll(t, poll(dev, old), "credentials changed first"); r.err != nil || r.ok {
		t.Fatalf("poll with a replaced token: %q ok=%v err=%v", r.body, r.ok, r.err)
	}

	dev = te.newDevice(t, admin, "deleted-early")
	old = te.tokenOf(t, dev)
	if err := te.DeleteDevice(ctx, admin, dev); err != nil {
		t.Fatal(err)
	}
	if r := awaitPoll(t, poll(dev, old), "deleted first"); !errors.Is(r.err, ErrDeviceDeleted) || r.ok {
		t.Fatalf("poll of a deleted device: %q ok=%v err=%v", r.body, r.ok, r.err)
	}
}

// TestSharedPollNoticeKeysGone: a large change whose keys were all deleted
// before the poll read them is not answered (no 200 {}): the poll answers the
// next change.
func TestSharedPollNoticeKeysGone(t *testing.T) {
	te := newTestEngine(t)
	ctx, dev := context.Background(), te.demo.DemoDeviceID
	res := te.startPoll(t, ctx, dev, time.Hour)
	// The notice of a large save whose keys are gone by the time the poll reads.
	big := []kv.Entry{{Key: "gone", Value: kv.StringValue(strings.Repeat("x", maxInlinePush))}}
	te.publishPush(ctx, sharedTopic(dev), sharedUpdateMsg(big))
	if err := te.SaveAttributes(ctx, dev, storage.SharedScope, []kv.Entry{{Key: "next", Value: kv.LongValue(1)}}); err != nil {
		t.Fatal(err)
	}
	if r := awaitPoll(t, res, "notice of deleted keys"); r.err != nil || !r.ok || string(r.body) != `{"next":1}` {
		t.Fatalf("poll after a notice of deleted keys: %q ok=%v err=%v", r.body, r.ok, r.err)
	}
}

// newDevice creates a device of the demo tenant.
func (te *testEngine) newDevice(t *testing.T, admin *Principal, name string) uuid.UUID {
	t.Helper()
	d, err := te.SaveDevice(context.Background(), admin, &Device{Name: name}, "")
	if err != nil {
		t.Fatal(err)
	}
	return d.UUID()
}

// tokenOf is the device's current token.
func (te *testEngine) tokenOf(t *testing.T, dev uuid.UUID) string {
	t.Helper()
	creds, err := te.credentialsOf(context.Background(), dev)
	if err != nil {
		t.Fatal(err)
	}
	return creds.CredentialsID
}

// newToken gives the device another token.
func (te *testEngine) newToken(ctx context.Context, admin *Principal, dev uuid.UUID, token string) error {
	creds, err := te.GetDeviceCredentials(ctx, admin, dev)
	if err != nil {
		return err
	}
	creds.CredentialsID = token
	_, err = te.SaveDeviceCredentials(ctx, admin, creds)
	return err
}

// TestRPCPollDeviceGoneBeforeSubscribe: an RPC poll of a device deleted after
// its token was checked and before the poll subscribed answers 403 at once,
// not at its timeout.
func TestRPCPollDeviceGoneBeforeSubscribe(t *testing.T) {
	te := newTestEngine(t)
	admin, ctx := te.tenantAdmin(t), context.Background()
	dev := te.newDevice(t, admin, "rpc-deleted-early")
	if err := te.DeleteDevice(ctx, admin, dev); err != nil {
		t.Fatal(err)
	}
	res := make(chan pollResult, 1)
	go func() {
		body, ok, err := te.WaitRPC(ctx, dev, "", time.Hour)
		res <- pollResult{body, ok, err}
	}()
	if r := awaitPoll(t, res, "deleted first"); !errors.Is(r.err, ErrDeviceDeleted) || r.ok {
		t.Fatalf("RPC poll of a deleted device: %q ok=%v err=%v", r.body, r.ok, r.err)
	}
}
