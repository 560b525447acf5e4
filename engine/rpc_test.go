package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/crypto/bcrypt"

	"github.com/sluice-iot/sluice/notify"
	"github.com/sluice-iot/sluice/storage"
	"github.com/sluice-iot/sluice/storage/embedded"
)

// rpcTestClock lets a test move an engine's clock forward.
type rpcTestClock struct{ off atomic.Int64 }

func (c *rpcTestClock) now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *rpcTestClock) advance(d time.Duration) { c.off.Add(int64(d)) }
func (te *testEngine) fakeClock() *rpcTestClock { c := new(rpcTestClock); te.now = c.now; return c }
func rpcReq(method, params string) *RPCRequest {
	return &RPCRequest{Method: method, Params: json.RawMessage(params)}
}
func persistentReq(method, params string) *RPCRequest {
	r := rpcReq(method, params)
	r.Persistent = true
	return r
}

type rpcCallResult struct {
	res RPCResult
	err error
}

// call starts CallRPC and delivers its outcome.
func (te *testEngine) startCall(p *Principal, dev uuid.UUID, oneway bool, req *RPCRequest) <-chan rpcCallResult {
	out := make(chan rpcCallResult, 1)
	go func() {
		res, err := te.CallRPC(context.Background(), p, dev, oneway, req)
		out <- rpcCallResult{res, err}
	}()
	return out
}

// pollRPC waits for the device's next RPC and returns its id, method and params.
func (te *testEngine) pollRPC(t *testing.T, dev uuid.UUID) (id int64, method, params string) {
	t.Helper()
	body, ok, err := te.WaitRPC(context.Background(), dev, te.tokenOf(t, dev), 10*time.Second)
	if err != nil || !ok {
		t.Fatalf("poll: ok=%v err=%v", ok, err)
	}
	var m struct {
		ID     int64           `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("poll body %s: %v", body, err)
	}
	return m.ID, m.Method, string(m.Params)
}

func TestRPCOutcomes(t *testing.T) {
	te := newTestEngine(t)
	te.cfg.RPCMinTimeout = time.Millisecond
	admin := te.tenantAdmin(t)
	dev := te.demo.DemoDeviceID
	ctx := context.Background()

	f := func(oneway bool, reply string, want RPCOutcome, wantReply string) {
		t.Helper()
		res := te.startCall(admin, dev, oneway, rpcReq("setGpio", `{"pin": 7}`))
		id, method, params := te.pollRPC(t, dev)
		if method != "setGpio" || params != `{"pin":7}` {
			t.Fatalf("delivered %s %s", method, params)
		}
		if !oneway {
			if err := te.ReplyRPC(ctx, dev, id, []byte(reply)); err != nil {
				t.Fatal(err)
			}
		}
		r := <-res
		if r.err != nil || r.res.Outcome != want || string(r.res.Reply) != wantReply {
			t.Fatalf("outcome %+v %q err=%v, want %d %q", r.res, r.res.Reply, r.err, want, wantReply)
		}
	}
	f(true, "", RPCDone, "")
	f(false, `{"ok":true}`, RPCDone, `{"ok":true}`)
	f(false, "", RPCDone, "")
	f(false, "not json", RPCBadReply, "")

	// Never taken: not delivered; taken and not answered: no reply.
	short := rpcReq("m", "")
	short.Timeout = new(int64(1))
	if r := <-te.startCall(admin, dev, false, short); r.err != nil || r.res.Outcome != RPCNotDelivered {
		t.Fatalf("never polled: %+v %v", r.res, r.err)
	}
	short.Timeout = new(int64(300))
	res := te.startCall(admin, dev, false, short)
	te.pollRPC(t, dev)
	if r := <-res; r.err != nil || r.res.Outcome != RPCNoReply {
		t.Fatalf("not answered: %+v %v", r.res, r.err)
	}
	// Lightweight RPCs are gone once answered: nothing is left to deliver.
	if body, ok, err := te.WaitRPC(ctx, dev, te.tokenOf(t, dev), time.Millisecond); ok || err != nil {
		t.Fatalf("left over: %s %v", body, err)
	}

	// A call whose ctx ends (node shutdown) ends with ctx.Err() and drops its RPC.
	cctx, cancel := context.WithCancel(ctx)
	ended := make(chan error, 1)
	go func() {
		_, err := te.CallRPC(cctx, admin, dev, true, rpcReq("m", ""))
		ended <- err
	}()
	for {
		if rs, _ := te.store.List(ctx, kindRPC, dev); len(rs) == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	if rs, _ := te.store.List(ctx, kindRPC, dev); len(rs) != 0 {
		t.Fatalf("cancelled call left %d RPCs", len(rs))
	}
}

func TestRPCOrderAndIDs(t *testing.T) {
	te := newTestEngine(t)
	admin := te.tenantAdmin(t)
	dev := te.demo.DemoDeviceID
	for i := range 3 {
		if _, err := te.CallRPC(context.Background(), admin, dev, true, persistentReq(fmt.Sprint("m", i), fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		id, method, params := te.pollRPC(t, dev)
		if id != int64(i) || method != fmt.Sprint("m", i) || params != fmt.Sprint(i) {
			t.Fatalf("poll %d: id %d %s %s", i, id, method, params)
		}
	}
	// Ids keep increasing after the RPCs are done.
	te.CallRPC(context.Background(), admin, dev, true, persistentReq("next", ""))
	if id, _, params := te.pollRPC(t, dev); id != 3 || params != "{}" {
		t.Fatalf("next id %d params %s", id, params)
	}
}

// TestRPCConcurrentIDs: RPCs queued at once, on two engines over one store (two
// nodes), get distinct ids, each delivered once.
func TestRPCConcurrentIDs(t *testing.T) {
	db, err := embedded.Open(t.TempDir(), embedded.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	bus := notify.NewLocal()
	cfg := Config{JWTSigningKey: []byte("test-signing-key-0123456789abcdef"), BcryptCost: bcrypt.MinCost, Notifier: bus}
	a, b := New(db, cfg), New(db, cfg)
	demo, err := a.Bootstrap(context.Background(), true, "")
	if err != nil {
		t.Fatal(err)
	}
	ta, tb := &testEngine{Engine: a, demo: demo}, &testEngine{Engine: b, demo: demo}
	admin := ta.tenantAdmin(t)
	dev := demo.DemoDeviceID

	const n = 20
	var wg sync.WaitGroup
	for i := range n {
		e := []*testEngine{ta, tb}[i%2]
		wg.Go(func() {
			if _, err := e.CallRPC(context.Background(), admin, dev, true, persistentReq("m", "")); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	var mu sync.Mutex
	var ids []int64
	for i := range n {
		e := []*testEngine{ta, tb}[i%2]
		wg.Go(func() {
			id, _, _ := e.pollRPC(t, dev)
			mu.Lock()
			ids = append(ids, id)
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.Sort(ids)
	if len(slices.Compact(ids)) != n {
		t.Fatalf("ids %v: not %d distinct", ids, n)
	}
	if body, ok, _ := ta.WaitRPC(context.Background(), dev, ta.tokenOf(t, dev), time.Millisecond); ok {
		t.Fatalf("delivered twice: %s", body)
	}
}

func TestPersistentRPC(t *testing.T) {
	te := newTestEngine(t)
	clock := te.fakeClock()
	admin := te.tenantAdmin(t)
	dev := te.demo.DemoDeviceID
	ctx := context.Background()
	status := func(id uuid.UUID, want, wantResponse string) {
		t.Helper()
		r, err := te.GetPersistentRPC(ctx, admin, id)
		if err != nil {
			t.Fatal(err)
		}
		resp := "null"
		if r.Response != nil {
			resp = string(r.Response)
		}
		if r.Status != want || resp != wantResponse {
			t.Fatalf("status %s response %s, want %s %s", r.Status, resp, want, wantResponse)
		}
	}
	send := func(oneway bool) uuid.UUID {
		t.Helper()
		res, err := te.CallRPC(ctx, admin, dev, oneway, persistentReq("m", `{"a":1}`))
		if err != nil || res.Outcome != RPCPersisted {
			t.Fatalf("persistent call: %+v %v", res, err)
		}
		return res.ID
	}

	// QUEUED → DELIVERED → SUCCESSFUL with the response.
	id := send(false)
	status(id, RPCQueued, "null")
	reqID, _, _ := te.pollRPC(t, dev)
	status(id, RPCDelivered, "null")
	te.ReplyRPC(ctx, dev, reqID, []byte(`{"done":1}`))
	status(id, RPCSuccessful, `{"done":1}`)
	te.ReplyRPC(ctx, dev, reqID, []byte(`{"again":1}`)) // stale: ignored
	status(id, RPCSuccessful, `{"done":1}`)

	// One-way: DELIVERED once delivered, for good (ThingsBoard's
	// processRpcResponseStatus). A reply that is not JSON: SUCCESSFUL with
	// {"error":"<reply>"} (its processRpcResponses).
	oneway := send(true)
	te.pollRPC(t, dev)
	status(oneway, RPCDelivered, "null")
	id = send(false)
	reqID, _, _ = te.pollRPC(t, dev)
	te.ReplyRPC(ctx, dev, reqID, []byte("oops"))
	status(id, RPCSuccessful, `{"error":"oops"}`)

	// Past expiry: never delivered and delivered but not answered are both
	// EXPIRED (no longer delivered, a late reply ignored); a delivered one-way
	// RPC stays DELIVERED.
	delivered := send(false)
	reqID, _, _ = te.pollRPC(t, dev)
	queued := send(false)
	clock.advance(time.Hour)
	status(queued, RPCExpired, "null")
	status(delivered, RPCExpired, "null")
	status(oneway, RPCDelivered, "null")
	te.ReplyRPC(ctx, dev, reqID, []byte(`{}`))
	status(delivered, RPCExpired, "null")
	if body, ok, _ := te.WaitRPC(ctx, dev, te.tokenOf(t, dev), time.Millisecond); ok {
		t.Fatalf("expired RPC delivered: %s", body)
	}
	status(queued, RPCExpired, "null") // as the poll wrote it, moving it out of the queue

	// Listing: all persistent RPCs of the device, or those of one status.
	page, err := te.ListPersistentRPCs(ctx, admin, dev, "", PageLink{PageSize: 10})
	if err != nil || page.TotalElements != 5 {
		t.Fatalf("list: %d %v", page.TotalElements, err)
	}
	page, err = te.ListPersistentRPCs(ctx, admin, dev, RPCSuccessful, PageLink{PageSize: 10})
	if err != nil || page.TotalElements != 2 {
		t.Fatalf("list SUCCESSFUL: %d %v", page.TotalElements, err)
	}
	_, err = te.ListPersistentRPCs(ctx, admin, dev, RPCDeleted, PageLink{PageSize: 10})
	wantCode(t, err, CodeBadRequestParams)

	// Access: the customer user does not see the demo device's RPCs, only tenant
	// admins delete, another tenant is refused, the system administrator too.
	other := te.newTenant(t, "Other", "other@example.com")
	for _, p := range []*Principal{te.customerUser(t), other, te.sysadmin(t)} {
		_, err := te.GetPersistentRPC(ctx, p, queued)
		wantCode(t, err, CodePermissionDenied)
		wantCode(t, te.DeletePersistentRPC(ctx, p, queued), CodePermissionDenied)
		_, err = te.CallRPC(ctx, p, dev, true, persistentReq("m", ""))
		wantCode(t, err, CodePermissionDenied)
	}
	wantCode(t, te.DeletePersistentRPC(ctx, admin, queued), 0)
	_, err = te.GetPersistentRPC(ctx, admin, queued)
	wantCode(t, err, CodeItemNotFound)
	_, err = te.CallRPC(ctx, admin, dev, true, &RPCRequest{Persistent: true})
	wantCode(t, err, CodeBadRequestParams)

	// Deleting the device deletes its RPCs, queued and done.
	if err := te.DeleteDevice(ctx, admin, dev); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{kindRPC, kindRPCClaim, kindRPCID} {
		for _, owner := range []uuid.UUID{dev, rpcDoneOwner(dev)} {
			if rs, _ := te.store.List(ctx, kind, owner); len(rs) != 0 {
				t.Fatalf("%d %s records left", len(rs), kind)
			}
		}
	}
}

// TestRPCPollWakesAndEnds: a waiting poll takes an RPC queued later, and ends on
// device deletion and on ctx.
func TestRPCPollWakesAndEnds(t *testing.T) {
	te := newTestEngine(t)
	admin := te.tenantAdmin(t)
	dev := te.demo.DemoDeviceID
	ctx := context.Background()

	polled := make(chan pollResult, 1)
	before := te.OpenPolls()
	go func() {
		body, ok, err := te.WaitRPC(ctx, dev, te.tokenOf(t, dev), time.Minute)
		polled <- pollResult{body, ok, err}
	}()
	for te.OpenPolls() == before {
		time.Sleep(time.Millisecond)
	}
	te.CallRPC(ctx, admin, dev, true, persistentReq("later", `[1]`))
	if r := <-polled; !r.ok || string(r.body) != `{"id":0,"method":"later","params":[1]}` {
		t.Fatalf("woken poll: %s %v %v", r.body, r.ok, r.err)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := te.WaitRPC(cctx, dev, te.tokenOf(t, dev), time.Minute); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled poll: %v", err)
	}

	go func() {
		body, ok, err := te.WaitRPC(ctx, dev, te.tokenOf(t, dev), time.Minute)
		polled <- pollResult{body, ok, err}
	}()
	for te.OpenPolls() == before {
		time.Sleep(time.Millisecond)
	}
	te.DeleteDevice(ctx, admin, dev)
	if r := <-polled; r.err != ErrDeviceDeleted {
		t.Fatalf("deleted device: %v", r.err)
	}
}

// TestRPCWaitCapped: an RPC whose call waits (not persistent) expires at most
// maxRPCWait from now, whatever expirationTime asks; a persistent one keeps it.
func TestRPCWaitCapped(t *testing.T) {
	te := newTestEngine(t)
	far := int64(math.MaxInt64)
	for _, persistent := range []bool{false, true} {
		req := rpcReq("m", "{}")
		req.ExpirationTime, req.Persistent = &far, persistent
		before := time.Now()
		r, err := te.newRPC(&Device{}, false, req)
		if err != nil {
			t.Fatal(err)
		}
		capped := r.ExpirationTime <= before.Add(maxRPCWait+time.Minute).UnixMilli()
		if capped == persistent {
			t.Errorf("persistent %v: expires at %d", persistent, r.ExpirationTime)
		}
	}
}

// TestRPCSeqNeverBack: a node that took a lower request id and advances the
// device's next id last leaves it where another node moved it.
func TestRPCSeqNeverBack(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	dev := uuid.New()
	for _, c := range []struct{ took, next int64 }{{6, 7}, {4, 7}, {9, 10}, {9, 10}} {
		if err := te.advanceRPCSeq(ctx, dev, c.took); err != nil {
			t.Fatal(err)
		}
		seq, err := getRecord[rpcSeq](ctx, te.Engine, kindRPCSeq, dev)
		if err != nil || seq.Next != c.next {
			t.Fatalf("after taking %d: next %+v, %v; want %d", c.took, seq, err, c.next)
		}
	}
}

// TestPersistentRPCTTL: with rpcTtlDays in the tenant's profile, persistent RPCs
// created longer ago go, whatever their status, when the device's RPCs are next
// read (ThingsBoard's RpcCleanUpService counts from createdTime too); younger
// ones and those of a profile without it stay.
func TestPersistentRPCTTL(t *testing.T) {
	te := newTestEngine(t)
	clock := te.fakeClock()
	admin := te.tenantAdmin(t)
	dev := te.demo.DemoDeviceID
	ctx := context.Background()
	send := func(req *RPCRequest) uuid.UUID {
		t.Helper()
		res, err := te.CallRPC(ctx, admin, dev, true, req)
		if err != nil || res.Outcome != RPCPersisted {
			t.Fatalf("persistent call: %+v %v", res, err)
		}
		return res.ID
	}
	count := func() int {
		t.Helper()
		page, err := te.ListPersistentRPCs(ctx, admin, dev, "", PageLink{PageSize: 10})
		if err != nil {
			t.Fatal(err)
		}
		return page.TotalElements
	}
	far := persistentReq("late", "")
	exp := clock.now().Add(30 * 24 * time.Hour).UnixMilli()
	far.ExpirationTime = &exp
	delivered, queued := send(persistentReq("m", "")), send(far)
	te.pollRPC(t, dev)
	clock.advance(3 * 24 * time.Hour)
	young := send(persistentReq("young", ""))
	if n := count(); n != 3 {
		t.Fatalf("no rpcTtlDays: %d RPCs listed, want all 3", n)
	}

	limitedTenant(t, te, `{"rpcTtlDays":2}`)
	if _, err := te.GetPersistentRPC(ctx, admin, delivered); !errors.Is(err, ErrNotFound) {
		t.Fatalf("an RPC 3 days old with rpcTtlDays 2: %v", err)
	}
	if body, ok, _ := te.WaitRPC(ctx, dev, te.tokenOf(t, dev), time.Millisecond); !ok || !strings.Contains(string(body), "young") {
		t.Fatalf("poll: %s %v, want the young RPC (the old queued one is gone)", body, ok)
	}
	if n := count(); n != 1 {
		t.Fatalf("%d RPCs listed, want the young one", n)
	}
	for _, id := range []uuid.UUID{delivered, queued} {
		if _, err := te.store.Get(ctx, kindRPC, id); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("RPC %s past rpcTtlDays still stored: %v", id, err)
		}
	}
	if _, err := te.GetPersistentRPC(ctx, admin, young); err != nil {
		t.Fatal(err)
	}
}

// TestRPCWritesOverWhatTheyRead: a poll delivering a persistent RPC that an
// admin deletes meanwhile neither delivers it nor brings it back, nor does a
// device's reply landing after a delete; a claim left by a poll that died
// before writing the RPC delivered is taken over once stale.
func TestRPCWritesOverWhatTheyRead(t *testing.T) {
	te := newTestEngine(t)
	clock := te.fakeClock()
	admin := te.tenantAdmin(t)
	dev := te.demo.DemoDeviceID
	ctx := context.Background()
	send := func() uuid.UUID {
		t.Helper()
		req := persistentReq("m", "")
		exp := clock.now().Add(time.Hour).UnixMilli()
		req.ExpirationTime = &exp
		res, err := te.CallRPC(ctx, admin, dev, false, req)
		if err != nil || res.Outcome != RPCPersisted {
			t.Fatalf("persistent call: %+v %v", res, err)
		}
		return res.ID
	}
	gone := func(id uuid.UUID) {
		t.Helper()
		if _, err := te.store.Get(ctx, kindRPC, id); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("deleted RPC %s is back: %v", id, err)
		}
	}
	overtake := te.overtaker()

	id := send()
	overtake(func() { wantCode(t, te.DeletePersistentRPC(ctx, admin, id), 0) })
	if body, ok, err := te.WaitRPC(ctx, dev, te.tokenOf(t, dev), time.Millisecond); ok || err != nil {
		t.Fatalf("an RPC deleted while a poll took it was delivered: %s %v", body, err)
	}
	gone(id)

	id = send()
	reqID, _, _ := te.pollRPC(t, dev)
	overtake(func() { wantCode(t, te.DeletePersistentRPC(ctx, admin, id), 0) })
	if err := te.ReplyRPC(ctx, dev, reqID, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	gone(id)

	// A claim whose poll died: the RPC waits while it is fresh, then goes out.
	id = send()
	r, err := getRecord[rpcRecord](ctx, te.Engine, kindRPC, id)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := te.claimRPC(ctx, r); !ok || err != nil {
		t.Fatalf("claim: %v %v", ok, err)
	}
	if body, ok, _ := te.WaitRPC(ctx, dev, te.tokenOf(t, dev), time.Millisecond); ok {
		t.Fatalf("delivered past a fresh claim: %s", body)
	}
	clock.advance(rpcClaimStale)
	if _, ok, _ := te.WaitRPC(ctx, dev, te.tokenOf(t, dev), time.Millisecond); !ok {
		t.Fatal("an RPC behind a stale claim was not delivered")
	}
	got, err := te.GetPersistentRPC(ctx, admin, id)
	if err != nil || got.Status != RPCDelivered {
		t.Fatalf("after the take-over: %+v %v", got, err)
	}
}

// mutableNotifier loses every message published while muted, as a node's bus
// connection does while it is down.
type mutableNotifier struct {
	notify.Notifier
	muted atomic.Bool
}

func (m *mutableNotifier) Publish(ctx context.Context, topic string, msg []byte) error {
	if m.muted.Load() {
		return nil
	}
	return m.Notifier.Publish(ctx, topic, msg)
}

// TestRPCWaitsResync: an RPC queued while the notifier lost messages reaches
// the device's open poll once the notifier has resubscribed (DropCaches), not
// at the poll's end; a call waiting for a reply lost the same way gets it.
func TestRPCWaitsResync(t *testing.T) {
	bus := &mutableNotifier{Notifier: notify.NewLocal()}
	te := newTestEngine(t, func(c *Config) { c.Notifier = bus })
	admin, dev, ctx := te.tenantAdmin(t), te.demo.DemoDeviceID, context.Background()

	polled := make(chan pollResult, 1)
	go func() {
		body, ok, err := te.WaitRPC(ctx, dev, te.tokenOf(t, dev), time.Minute)
		polled <- pollResult{body, ok, err}
	}()
	for te.OpenPolls() == 0 {
		time.Sleep(time.Millisecond)
	}
	bus.muted.Store(true)
	if _, err := te.CallRPC(ctx, admin, dev, true, persistentReq("lost", `{}`)); err != nil {
		t.Fatal(err)
	}
	bus.muted.Store(false)
	te.DropCaches()
	select {
	case r := <-polled:
		if !r.ok || !strings.Contains(string(r.body), "lost") {
			t.Fatalf("poll after a resync: %s %v %v", r.body, r.ok, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the poll did not look again after the resync")
	}

	call := te.startCall(admin, dev, false, rpcReq("ask", `{}`))
	reqID, _, _ := te.pollRPC(t, dev)
	bus.muted.Store(true)
	if err := te.ReplyRPC(ctx, dev, reqID, []byte(`{"ok":1}`)); err != nil {
		t.Fatal(err)
	}
	bus.muted.Store(false)
	te.DropCaches()
	select {
	case r := <-call:
		if r.err != nil || r.res.Outcome != RPCDone || string(r.res.Reply) != `{"ok":1}` {
			t.Fatalf("call after a resync: %+v %v", r.res, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not look again after the resync")
	}
}

// rpcListCounter counts the RPC records List hands out: what polls read.
type rpcListCounter struct {
	storage.Backend
	listed atomic.Int64
}

func (s *rpcListCounter) List(ctx context.Context, kind string, owner uuid.UUID) ([]storage.Record, error) {
	rs, err := s.Backend.List(ctx, kind, owner)
	if kind == kindRPC {
		s.listed.Add(int64(len(rs)))
	}
	return rs, err
}

// countRPCListing puts an rpcListCounter under te; read returns the records
// listed since the last read.
func (te *testEngine) countRPCListing() (read func() int64) {
	c := &rpcListCounter{Backend: te.store}
	te.store = c
	return func() int64 { return c.listed.Swap(0) }
}

// TestRPCPollReadsPendingOnly: a device's polls read its pending RPCs, not the
// persistent ones that are done (answered, delivered one-way, delivered and
// unanswered, expired), however many there are; the REST reads still see all.
func TestRPCPollReadsPendingOnly(t *testing.T) {
	te := newTestEngine(t)
	clock := te.fakeClock()
	admin := te.tenantAdmin(t)
	dev := te.demo.DemoDeviceID
	ctx := context.Background()
	send := func(oneway bool, method string) uuid.UUID {
		t.Helper()
		res, err := te.CallRPC(ctx, admin, dev, oneway, persistentReq(method, "{}"))
		if err != nil || res.Outcome != RPCPersisted {
			t.Fatalf("persistent call: %+v %v", res, err)
		}
		return res.ID
	}
	const n = 40 // a quarter of each kind
	for range n / 4 {
		send(false, "answered")
		reqID, _, _ := te.pollRPC(t, dev)
		if err := te.ReplyRPC(ctx, dev, reqID, []byte(`{"ok":1}`)); err != nil {
			t.Fatal(err)
		}
		send(true, "oneway")
		te.pollRPC(t, dev)
		send(false, "unanswered")
		te.pollRPC(t, dev)
	}
	for range n / 4 { // never delivered: expire below (polls would take them first)
		send(false, "queued")
	}
	clock.advance(time.Hour)
	read := te.countRPCListing()
	// The first poll moves the expired queued RPCs out of the queue; the others
	// left it when they were delivered.
	if body, ok, err := te.WaitRPC(ctx, dev, te.tokenOf(t, dev), time.Millisecond); ok || err != nil {
		t.Fatalf("poll: %s %v", body, err)
	}
	if got := read(); got != n/4 {
		t.Fatalf("the first poll read %d RPC records, want the %d expired queued ones", got, n/4)
	}
	for range 3 {
		if body, ok, err := te.WaitRPC(ctx, dev, te.tokenOf(t, dev), time.Millisecond); ok || err != nil {
			t.Fatalf("poll: %s %v", body, err)
		}
	}
	if got := read(); got != 0 {
		t.Fatalf("polls with %d finished RPCs read %d RPC records, want none", n, got)
	}
	pending := send(false, "pending")
	if id, method, _ := te.pollRPC(t, dev); method != "pending" || id != n {
		t.Fatalf("delivered %d %s", id, method)
	}
	if got := read(); got != 1 {
		t.Fatalf("a poll with one pending RPC read %d RPC records", got)
	}

	// The REST reads see them all, with their statuses.
	statuses := map[string]int{}
	page, err := te.ListPersistentRPCs(ctx, admin, dev, "", PageLink{PageSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range page.Data {
		statuses[v.Request.Body.Method+" "+v.Status]++
	}
	want := map[string]int{"answered SUCCESSFUL": n / 4, "oneway DELIVERED": n / 4, "unanswered EXPIRED": n / 4,
		"queued EXPIRED": n / 4, "pending DELIVERED": 1}
	if fmt.Sprint(statuses) != fmt.Sprint(want) {
		t.Fatalf("listed %v, want %v", statuses, want)
	}
	if page, err := te.ListPersistentRPCs(ctx, admin, dev, RPCExpired, PageLink{PageSize: 100}); err != nil || page.TotalElements != n/2 {
		t.Fatalf("EXPIRED: %d %v", page.TotalElements, err)
	}
	if got, err := te.GetPersistentRPC(ctx, admin, pending); err != nil || got.Status != RPCDelivered {
		t.Fatalf("get: %+v %v", got, err)
	}
	wantCode(t, te.DeletePersistentRPC(ctx, admin, pending), 0)
	if _, err := te.GetPersistentRPC(ctx, admin, pending); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted: %v", err)
	}
}

// TestRPCStoredByEarlierVersion: RPC records as earlier versions stored them,
// every one owned by its device, still work: polls move the finished ones out
// of the queue, at most maxRetirePerPoll each (later polls do not read them), a
// queued one is delivered, a delivered one takes its reply, the REST reads see
// them all.
func TestRPCStoredByEarlierVersion(t *testing.T) {
	te := newTestEngine(t)
	admin := te.tenantAdmin(t)
	dev := te.demo.DemoDeviceID
	ctx := context.Background()
	now := time.Now().UnixMilli()
	d, err := te.loadDevice(ctx, dev)
	if err != nil {
		t.Fatal(err)
	}
	old := func(reqID int64, oneway bool, status, reply string) uuid.UUID {
		t.Helper()
		r := &rpcRecord{ID: newID(), CreatedTime: now, TenantID: d.TenantID(), DeviceID: dev, ReqID: reqID,
			Oneway: oneway, Persistent: true, ExpirationTime: now + time.Hour.Milliseconds(), Method: "m",
			Params: json.RawMessage(`{}`), Status: status, Reply: []byte(reply)}
		if err := te.putRecord(ctx, kindRPC, r.ID, dev, r, rpcReqKey(dev, reqID)); err != nil {
			t.Fatal(err)
		}
		return r.ID
	}
	old(0, true, RPCSuccessful, "")
	old(1, false, RPCSuccessful, `{"ok":1}`)
	failed := old(2, false, RPCFailed, "oops")
	delivered := old(3, false, RPCDelivered, "")
	queued := old(4, false, RPCQueued, "")
	const more = maxRetirePerPoll + 5
	for i := range int64(more) {
		old(5+i, true, RPCSuccessful, "")
	}
	if err := te.advanceRPCSeq(ctx, dev, 4+more); err != nil {
		t.Fatal(err)
	}

	// The first poll moves those before the queued one and delivers it; the
	// next ones move the rest, maxRetirePerPoll at a time.
	read := te.countRPCListing()
	if id, _, _ := te.pollRPC(t, dev); id != 4 {
		t.Fatalf("delivered request %d, want the queued 4", id)
	}
	for i, want := range []int64{5 + more, more, more - maxRetirePerPoll, 0} {
		if i > 0 {
			if body, ok, _ := te.WaitRPC(ctx, dev, te.tokenOf(t, dev), time.Millisecond); ok {
				t.Fatalf("delivered again: %s", body)
			}
		}
		if got := read(); got != want {
			t.Fatalf("poll %d read %d RPC records, want %d", i, got, want)
		}
	}
	if err := te.ReplyRPC(ctx, dev, 3, []byte(`{"late":1}`)); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[uuid.UUID]string{delivered: `SUCCESSFUL {"late":1}`, queued: "DELIVERED ",
		failed: `FAILED {"error":"oops"}`} {
		v, err := te.GetPersistentRPC(ctx, admin, id)
		if err != nil || v.Status+" "+string(v.Response) != want {
			t.Fatalf("RPC %s: %+v %v, want %s", id, v, err, want)
		}
	}
	if page, err := te.ListPersistentRPCs(ctx, admin, dev, "", PageLink{PageSize: 10}); err != nil || page.TotalElements != 5+more {
		t.Fatalf("list: %d %v", page.TotalElements, err)
	}
}

// TestRPCRequestUUID: a requestUUID becomes the RPC's id; one that names
// another RPC, stored or in flight, is refused and changes nothing; once its
// RPC is gone the id may be used again.
func TestRPCRequestUUID(t *testing.T) {
	te := newTestEngine(t)
	te.cfg.RPCMinTimeout = time.Millisecond
	admin := te.tenantAdmin(t)
	dev := te.demo.DemoDeviceID
	ctx := context.Background()
	withID := func(id uuid.UUID, method string, persistent bool) *RPCRequest {
		r := rpcReq(method, "{}")
		r.ID, r.Persistent = id, persistent
		return r
	}
	chosen := uuid.New()
	res, err := te.CallRPC(ctx, admin, dev, false, withID(chosen, "first", true))
	if err != nil || res.ID != chosen {
		t.Fatalf("requestUUID %s: %+v %v", chosen, res, err)
	}
	_, err = te.CallRPC(ctx, admin, dev, false, withID(chosen, "second", true))
	wantCode(t, err, CodeBadRequestParams)
	// An id Sluice made is refused the same way.
	own, err := te.CallRPC(ctx, admin, dev, true, persistentReq("own", "{}"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = te.CallRPC(ctx, admin, dev, true, withID(own.ID, "again", true))
	wantCode(t, err, CodeBadRequestParams)
	if v, err := te.GetPersistentRPC(ctx, admin, chosen); err != nil || v.Request.Body.Method != "first" || v.Request.ID != chosen {
		t.Fatalf("the first RPC: %+v %v", v, err)
	}
	if page, _ := te.ListPersistentRPCs(ctx, admin, dev, "", PageLink{PageSize: 10}); page.TotalElements != 2 {
		t.Fatalf("%d RPCs stored, want 2", page.TotalElements)
	}

	// A lightweight RPC holds its id while its call waits, and frees it after.
	light := uuid.New()
	call := te.startCall(admin, dev, false, withID(light, "light", false))
	var reqID int64
	for _, want := range []string{"first", "own", "light"} {
		var method string
		if reqID, method, _ = te.pollRPC(t, dev); method != want {
			t.Fatalf("delivered %s, want %s", method, want)
		}
	}
	_, err = te.CallRPC(ctx, admin, dev, true, withID(light, "clash", true))
	wantCode(t, err, CodeBadRequestParams)
	if err := te.ReplyRPC(ctx, dev, reqID, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if r := <-call; r.err != nil || r.res.Outcome != RPCDone {
		t.Fatalf("light call: %+v %v", r.res, r.err)
	}
	if res, err := te.CallRPC(ctx, admin, dev, true, withID(light, "reused", true)); err != nil || res.ID != light {
		t.Fatalf("reusing a freed id: %+v %v", res, err)
	}
	// Deleting an RPC frees its id too.
	wantCode(t, te.DeletePersistentRPC(ctx, admin, chosen), 0)
	if res, err := te.CallRPC(ctx, admin, dev, true, withID(chosen, "reused", true)); err != nil || res.ID != chosen {
		t.Fatalf("reusing a deleted RPC's id: %+v %v", res, err)
	}
}

// TestPersistentRPCSortAndShape: the list sorts by request and response (their
// JSON text; no response last ascending), and an RPC's request carries no
// additionalInfo of its own (ThingsBoard's @JsonIgnore), the RPC does.
func TestPersistentRPCSortAndShape(t *testing.T) {
	te := newTestEngine(t)
	admin := te.tenantAdmin(t)
	dev := te.demo.DemoDeviceID
	ctx := context.Background()
	ids := []uuid.UUID{uuid.MustParse("30000000-0000-4000-8000-000000000000"),
		uuid.MustParse("10000000-0000-4000-8000-000000000000"), uuid.MustParse("20000000-0000-4000-8000-000000000000")}
	for i, id := range ids {
		req := persistentReq(fmt.Sprint("m", i), "{}")
		req.ID, req.AdditionalInfo = id, json.RawMessage(`{"note":1}`)
		if _, err := te.CallRPC(ctx, admin, dev, false, req); err != nil {
			t.Fatal(err)
		}
	}
	for _, reply := range []string{`{"b":1}`, `{"a":1}`} { // m0 and m1 answered
		reqID, _, _ := te.pollRPC(t, dev)
		if err := te.ReplyRPC(ctx, dev, reqID, []byte(reply)); err != nil {
			t.Fatal(err)
		}
	}
	order := func(prop, dir string) string {
		t.Helper()
		page, err := te.ListPersistentRPCs(ctx, admin, dev, "", PageLink{PageSize: 10, SortProperty: prop, SortOrder: dir})
		if err != nil {
			t.Fatal(err)
		}
		var methods []string
		for _, v := range page.Data {
			methods = append(methods, v.Request.Body.Method)
		}
		return strings.Join(methods, ",")
	}
	for _, c := range []struct{ prop, dir, want string }{
		{"request", "ASC", "m1,m2,m0"}, {"request", "DESC", "m0,m2,m1"},
		{"response", "ASC", "m1,m0,m2"}, {"response", "DESC", "m2,m0,m1"},
		{"createdTime", "ASC", "m0,m1,m2"},
	} {
		if got := order(c.prop, c.dir); got != c.want {
			t.Errorf("sortProperty=%s %s: %s, want %s", c.prop, c.dir, got, c.want)
		}
	}
	_, err := te.ListPersistentRPCs(ctx, admin, dev, "", PageLink{PageSize: 10, SortProperty: "method"})
	wantCode(t, err, CodeBadRequestParams)

	v, err := te.GetPersistentRPC(ctx, admin, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(v)
	var shape struct {
		AdditionalInfo json.RawMessage
		Request        map[string]json.RawMessage
	}
	if err := json.Unmarshal(b, &shape); err != nil {
		t.Fatal(err)
	}
	if _, ok := shape.Request["additionalInfo"]; ok || string(shape.AdditionalInfo) != `{"note":1}` {
		t.Fatalf("RPC JSON %s: additionalInfo belongs to the RPC only", b)
	}
}

// TestRPCPollOldToken: a poll with a token replaced after the caller checked
// it and before the poll subscribed ends as a timeout at once and never takes
// an RPC: one queued for the device waits for the new token's poll.
func TestRPCPollOldToken(t *testing.T) {
	te := newTestEngine(t)
	ctx, admin := context.Background(), te.tenantAdmin(t)
	dev := te.demo.DemoDeviceID
	old := te.tokenOf(t, dev)
	if err := te.newToken(ctx, admin, dev, "ROTATED_TOKEN"); err != nil {
		t.Fatal(err)
	}
	if _, err := te.CallRPC(ctx, admin, dev, true, &RPCRequest{Method: "secret", Persistent: true}); err != nil {
		t.Fatal(err)
	}
	if body, ok, err := te.WaitRPC(ctx, dev, old, time.Hour); ok || err != nil {
		t.Fatalf("poll with the old token: %s ok=%v err=%v", body, ok, err)
	}
	if _, method, _ := te.pollRPC(t, dev); method != "secret" {
		t.Fatalf("the new token's poll got %q", method)
	}
}
