package fleet

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// TestRPCPollWait: a device polls again at once only after an RPC or a 408;
// after a 200 without an RPC (which made it poll flat out), a 404, a 503, it
// waits the backoff first. The wait is the test's, so nothing is timed.
func TestRPCPollWait(t *testing.T) {
	for _, c := range []struct {
		status int
		body   string
		wait   bool
	}{
		{200, ``, true},
		{200, `{}`, true},
		{200, `not json`, true},
		{404, ``, true},
		{503, ``, true},
		{408, ``, false},
		{200, `{"id":7,"method":"reboot","params":{}}`, false},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		var mu sync.Mutex
		polls, replies := 0, 0
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			if r.Method == http.MethodPost {
				replies++
				return
			}
			if polls++; polls == 2 {
				cancel() // the second poll ends the run: it is not counted
				<-r.Context().Done()
				return
			}
			w.WriteHeader(c.status)
			w.Write([]byte(c.body))
		}))
		var waits []time.Duration
		p := &rpcPollers{client: &client{base: srv.URL, http: srv.Client()}, timeout: time.Hour,
			sleep: func(_ context.Context, d time.Duration) {
				waits = append(waits, d)
				cancel() // the run ends in the wait
			}}
		p.start(1)
		p.poll(ctx, ctx, "T")
		srv.Close()
		cancel()
		r := p.report()
		if c.wait && (len(waits) != 1 || waits[0] != backoff || polls != 1) ||
			!c.wait && (len(waits) != 0 || polls != 2) || r.Polls != 1 || p.firstPending.Load() != 0 {
			t.Fatalf("%d %q: waits %v, %d polls (%d counted)", c.status, c.body, waits, polls, r.Polls)
		}
		if delivered := c.body != "" && c.body[0] == '{' && len(c.body) > 2; delivered && (r.Delivered != 1 || r.Replies != 1 || replies != 1) {
			t.Fatalf("RPC: %+v, %d replies", r, replies)
		}
	}
}

// TestRPCMustWait: a poll that was held half its timeout or more does not
// wait after it, whatever its answer: it did not flood the target.
func TestRPCMustWait(t *testing.T) {
	p := &rpcPollers{timeout: 10 * time.Second}
	f := func(status int, err error, delivered bool, took time.Duration, want bool) {
		t.Helper()
		if got := p.mustWait(status, err, delivered, took); got != want {
			t.Fatalf("status %d, error %v, delivered %v, took %v: wait %v", status, err, delivered, took, got)
		}
	}
	f(200, nil, false, time.Millisecond, true)
	f(200, nil, false, 5*time.Second, false)
	f(200, nil, true, time.Millisecond, false)
	f(408, nil, false, time.Millisecond, false)
	f(503, nil, false, time.Millisecond, true)
	f(503, nil, false, 9*time.Second, false)
	f(0, errors.New("refused"), false, time.Millisecond, true)
	f(0, errors.New("timeout"), false, 20*time.Second, false)
}

// TestRunFirstPollsWait: when the load ends while the pollers' first polls are
// held, Run says it waits for them (OnFirstPollsWait), and an Abort then cuts
// them off: the report counts no poll and says why.
func TestRunFirstPollsWait(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/A/rpc" {
			<-r.Context().Done() // held until the client goes
		}
	}))
	t.Cleanup(srv.Close)
	f, err := New(context.Background(), Options{URL: srv.URL, Tokens: []string{"A", "B"}})
	if err != nil {
		t.Fatal(err)
	}
	abort := make(chan struct{})
	var pending int
	var left time.Duration
	f.opts.Requests, f.opts.Duration, f.opts.RPCPollers, f.opts.RPCTimeout, f.opts.Abort = 5, 0, 1, time.Hour, abort
	f.opts.OnFirstPollsWait = func(n int, d time.Duration) {
		pending, left = n, d
		close(abort) // a second Ctrl-C
	}
	rep, err := f.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if pending != 1 || left <= 0 || left > time.Hour || rep.RPC == nil || rep.RPC.Polls != 0 || rep.RPC.FirstPollsCut != 1 {
		t.Fatalf("waited for %d first polls, up to %v; report %+v", pending, left, rep.RPC)
	}
}
