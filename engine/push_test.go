package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

type pollResult struct {
	body []byte
	ok   bool
	err  error
}

// startPoll starts WaitSharedAttributes with the device's current token and
// returns once it is subscribed.
func (te *testEngine) startPoll(t *testing.T, ctx context.Context, id uuid.UUID, timeout time.Duration) <-chan pollResult {
	t.Helper()
	creds, err := te.credentialsOf(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	before := te.OpenPolls()
	res := make(chan pollResult, 1)
	go func() {
		body, ok, err := te.WaitSharedAttributes(ctx, id, creds.CredentialsID, timeout)
		res <- pollResult{body, ok, err}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for te.OpenPolls() == before {
		if time.Now().After(deadline) {
			t.Fatal("the poll did not subscribe within 5 s")
		}
		time.Sleep(time.Millisecond)
	}
	return res
}

func TestWaitSharedAttributes(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	dev := te.demo.DemoDeviceID
	f := func(change func(), wantBody string) {
		t.Helper()
		res := te.startPoll(t, ctx, dev, time.Minute)
		change()
		r := <-res
		if r.err != nil || !r.ok || string(r.body) != wantBody {
			t.Fatalf("got %q ok=%v err=%v, want %s", r.body, r.ok, r.err, wantBody)
		}
	}
	save := func(scope storage.Scope, attrs ...kv.Entry) func() {
		return func() {
			if err := te.SaveAttributes(ctx, dev, scope, attrs); err != nil {
				t.Fatal(err)
			}
		}
	}
	del := func(scope storage.Scope, keys ...string) func() {
		return func() {
			if err := te.DeleteAttributes(ctx, dev, scope, keys); err != nil {
				t.Fatal(err)
			}
		}
	}
	both := func(a, b func()) func() { return func() { a(); b() } }

	f(save(storage.SharedScope, kv.Entry{Key: "fw", Value: kv.StringValue("1.2")}, kv.Entry{Key: "target", Value: kv.LongValue(23)}),
		`{"fw":"1.2","target":23}`)
	f(save(storage.SharedScope, kv.Entry{Key: "d", Value: kv.DoubleValue(42)}, kv.Entry{Key: "b", Value: kv.BoolValue(true)},
		kv.Entry{Key: "j", Value: kv.JSONValue(`{"a":[1]}`)}, kv.Entry{Key: "q\"", Value: kv.StringValue("x")}),
		`{"d":42.0,"b":true,"j":{"a":[1]},"q\"":"x"}`)
	// A key given twice counts once, with the value that is stored.
	f(save(storage.SharedScope, kv.Entry{Key: "k", Value: kv.LongValue(1)}, kv.Entry{Key: "k", Value: kv.LongValue(2)}),
		`{"k":2}`)
	// Client and server scope changes are not delivered: the next shared one is.
	f(both(save(storage.ClientScope, kv.Entry{Key: "c", Value: kv.LongValue(1)}),
		save(storage.SharedScope, kv.Entry{Key: "s", Value: kv.LongValue(2)})), `{"s":2}`)
	f(both(save(storage.ServerScope, kv.Entry{Key: "c", Value: kv.LongValue(1)}),
		del(storage.SharedScope, "target", "missing", "fw", "target")), `{"deleted":["target","fw"]}`) // in the request's order
	// Deleting keys that do not exist, or server keys, changes nothing for the device.
	f(both(del(storage.SharedScope, "missing"), both(del(storage.ServerScope, "c"),
		save(storage.SharedScope, kv.Entry{Key: "last", Value: kv.LongValue(3)}))), `{"last":3}`)

	// A change past maxInlinePush goes out as a notice of its keys; the poll
	// reads their values, each key once.
	big := strings.Repeat("x", maxInlinePush)
	f(save(storage.SharedScope, kv.Entry{Key: "big", Value: kv.StringValue("old")}, kv.Entry{Key: "n", Value: kv.LongValue(7)},
		kv.Entry{Key: "big", Value: kv.StringValue(big)}), `{"big":"`+big+`","n":7}`)
	if msg := sharedUpdateMsg([]kv.Entry{{Key: "big", Value: kv.StringValue(big)}, {Key: "é", Value: kv.LongValue(1)}}); len(msg) > 16 ||
		!slices.Equal(noticeKeys(msg), []string{"big", "é"}) {
		t.Fatalf("notice %q: keys %q", msg, noticeKeys(msg))
	}

	// Another device's change is not delivered.
	res := te.startPoll(t, ctx, dev, 50*time.Millisecond)
	if err := te.SaveAttributes(ctx, te.demo.CustomerDeviceID, storage.SharedScope, []kv.Entry{{Key: "x", Value: kv.LongValue(1)}}); err != nil {
		t.Fatal(err)
	}
	if r := <-res; r.ok || r.err != nil || r.body != nil {
		t.Fatalf("timeout: got %q ok=%v err=%v", r.body, r.ok, r.err)
	}
	if n := te.OpenPolls(); n != 0 {
		t.Fatalf("%d polls still open", n)
	}
}

func TestWaitSharedAttributesEnds(t *testing.T) {
	te := newTestEngine(t)
	ctx, cancel := context.WithCancel(context.Background())
	res := te.startPoll(t, ctx, te.demo.DemoDeviceID, time.Minute)
	cancel()
	if r := <-res; !errors.Is(r.err, context.Canceled) || r.ok {
		t.Fatalf("cancelled poll: ok=%v err=%v", r.ok, r.err)
	}

	res = te.startPoll(t, context.Background(), te.demo.DemoDeviceID, time.Minute)
	if err := te.DeleteDevice(context.Background(), te.tenantAdmin(t), te.demo.DemoDeviceID); err != nil {
		t.Fatal(err)
	}
	if r := <-res; !errors.Is(r.err, ErrDeviceDeleted) || r.ok {
		t.Fatalf("poll of a deleted device: ok=%v err=%v", r.ok, r.err)
	}
}
