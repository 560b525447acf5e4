package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeTB is the part of the ThingsBoard API a fleet uses, under a path prefix (a
// deployment behind a proxy at /tb). Its tokens expire when the test says so.
type fakeTB struct {
	url    string // with the prefix
	prefix string

	mu      sync.Mutex
	access  map[string]bool   // valid access tokens
	refresh map[string]bool   // valid refresh tokens
	devices map[string]string // id → name
	issued  int

	// What it was asked, and requests outside the prefix.
	logins, refreshes, creates, telemetry, polls int
	stray                                        []string
	// createStatus, when set, is the status of the n-th create (from 1): a 4xx,
	// or a 503 (the server is overloaded), does not make the device, anything
	// else does and then answers it. deleteStatus, when set, is the status of
	// the n-th delete: anything but 200 deletes nothing. A 429 or 503 of either
	// carries Retry-After: retryAfter when set.
	createStatus, deleteStatus func(n int) int
	retryAfter                 string
	deletes                    int
}

func newFakeTB(t *testing.T, prefix string) *fakeTB {
	tb := &fakeTB{prefix: prefix, access: map[string]bool{}, refresh: map[string]bool{}, devices: map[string]string{}}
	srv := httptest.NewServer(http.HandlerFunc(tb.serve))
	t.Cleanup(srv.Close)
	tb.url = srv.URL + prefix
	return tb
}

// expire makes every access token, and with refreshToo every refresh token, invalid.
func (tb *fakeTB) expire(refreshToo bool) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	clear(tb.access)
	if refreshToo {
		clear(tb.refresh)
	}
}

func (tb *fakeTB) count(n *int) int {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return *n
}

// pair issues a token pair; under mu.
func (tb *fakeTB) pair() map[string]string {
	tb.issued++
	a, r := fmt.Sprintf("jwt-%d", tb.issued), fmt.Sprintf("refresh-%d", tb.issued)
	tb.access[a], tb.refresh[r] = true, true
	return map[string]string{"token": a, "refreshToken": r}
}

func (tb *fakeTB) serve(w http.ResponseWriter, r *http.Request) {
	path, ok := strings.CutPrefix(r.URL.Path, tb.prefix+"/api/")
	if !ok {
		tb.mu.Lock()
		tb.stray = append(tb.stray, r.Method+" "+r.URL.Path)
		tb.mu.Unlock()
		http.NotFound(w, r)
		return
	}
	if strings.HasPrefix(path, "v1/") { // the device API: no login
		if strings.HasSuffix(path, "/rpc") {
			ms, _ := strconv.Atoi(r.URL.Query().Get("timeout"))
			select {
			case <-time.After(time.Duration(ms) * time.Millisecond):
			case <-r.Context().Done():
			}
			tb.mu.Lock()
			tb.polls++
			tb.mu.Unlock()
			w.WriteHeader(http.StatusRequestTimeout)
			return
		}
		tb.mu.Lock()
		tb.telemetry++
		tb.mu.Unlock()
		return
	}
	var body map[string]string
	json.NewDecoder(r.Body).Decode(&body)
	tb.mu.Lock()
	defer tb.mu.Unlock()
	answer := func(status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(v)
	}
	switch r.Method + " " + path {
	case "POST auth/login":
		tb.logins++
		if body["password"] != "pw" {
			answer(401, map[string]string{"message": "Invalid username or password"})
			return
		}
		answer(200, tb.pair())
		return
	case "POST auth/token":
		tb.refreshes++
		if !tb.refresh[body["refreshToken"]] {
			answer(401, map[string]string{"message": "Token has expired"})
			return
		}
		delete(tb.refresh, body["refreshToken"])
		answer(200, tb.pair())
		return
	}
	auth := r.Header.Get("X-Authorization")
	if jwt, ok := strings.CutPrefix(auth, "Bearer "); !(ok && tb.access[jwt]) && auth != "ApiKey good" {
		answer(401, map[string]string{"message": "Token has expired"})
		return
	}
	switch {
	case r.Method == "POST" && path == "device":
		tb.creates++
		status := 200
		if tb.createStatus != nil {
			status = tb.createStatus(tb.creates)
		}
		if status >= 400 && status < 500 || status == 503 {
			tb.throttle(w, status)
			answer(status, map[string]string{"message": "bad request"})
			return
		}
		id := fmt.Sprintf("dev-%d", tb.creates)
		tb.devices[id] = body["name"]
		answer(status, map[string]any{"id": map[string]string{"id": id}})
	case r.Method == "GET" && path == "tenant/devices":
		for id, name := range tb.devices {
			if name == r.URL.Query().Get("deviceName") {
				answer(200, map[string]any{"id": map[string]string{"id": id}})
				return
			}
		}
		answer(404, map[string]string{"message": "not found"})
	case r.Method == "DELETE" && strings.HasPrefix(path, "device/"):
		id := strings.TrimPrefix(path, "device/")
		tb.deletes++
		if tb.deleteStatus != nil {
			if status := tb.deleteStatus(tb.deletes); status != 200 {
				tb.throttle(w, status)
				answer(status, map[string]string{"message": "busy"})
				return
			}
		}
		if _, ok := tb.devices[id]; !ok {
			answer(404, map[string]string{"message": "not found"})
			return
		}
		delete(tb.devices, id)
	default:
		answer(404, map[string]string{"message": "no route " + path})
	}
}

// throttle sets Retry-After on a 429 or 503; under mu.
func (tb *fakeTB) throttle(w http.ResponseWriter, status int) {
	if (status == 429 || status == 503) && tb.retryAfter != "" {
		w.Header().Set("Retry-After", tb.retryAfter)
	}
}

// TestCleanupAfterTokenExpiry: the login of a long run has expired by the
// cleanup; the fleet refreshes it once (not once per call) and deletes every
// device, or logs in again when the refresh token has expired too. Every call,
// the device traffic included, goes under the URL's path prefix.
func TestCleanupAfterTokenExpiry(t *testing.T) {
	tb := newFakeTB(t, "/tb")
	ctx := context.Background()
	f, err := New(ctx, Options{URL: tb.url + "/", User: "tenant", Password: "pw", Devices: 20, SetupConcurrency: 8,
		Requests: 40, Connections: 4, RPCPollers: 1, RPCTimeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r, err := f.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	clean(t, r)
	if r.Target != tb.url || tb.count(&tb.telemetry) != 40 || r.RPC.Polls < 1 || r.RPC.Empty != r.RPC.Polls {
		t.Fatalf("target %s, telemetry %d, rpc %+v", r.Target, tb.count(&tb.telemetry), r.RPC)
	}

	tb.expire(false)
	if err := f.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(tb.devices); n != 0 || tb.count(&tb.refreshes) != 1 || tb.count(&tb.logins) != 1 {
		t.Fatalf("%d devices left, %d refreshes, %d logins", n, tb.refreshes, tb.logins)
	}

	f, err = New(ctx, Options{URL: tb.url, User: "tenant", Password: "pw", Devices: 5})
	if err != nil {
		t.Fatal(err)
	}
	tb.expire(true)
	if err := f.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(tb.devices); n != 0 || tb.count(&tb.logins) != 3 {
		t.Fatalf("refresh token expired too: %d devices left, %d logins", n, tb.logins)
	}
	if len(tb.stray) != 0 {
		t.Fatalf("calls outside the prefix: %v", tb.stray)
	}
}

// TestAPIKeyNotRenewed: a 401 to an API key is an answer, not an expired login:
// nothing is renewed or tried again.
func TestAPIKeyNotRenewed(t *testing.T) {
	tb := newFakeTB(t, "")
	_, err := New(context.Background(), Options{URL: tb.url, APIKey: "revoked", Devices: 1, SetupConcurrency: 1})
	if err == nil || !strings.Contains(err.Error(), "status 401") {
		t.Fatalf("error %v", err)
	}
	if tb.count(&tb.creates) != 0 || tb.count(&tb.refreshes) != 0 || tb.count(&tb.logins) != 0 {
		t.Fatalf("%d creates, %d refreshes, %d logins", tb.creates, tb.refreshes, tb.logins)
	}
	var ae *apiError
	if !errors.As(err, &ae) {
		t.Fatalf("not an API error: %v", err)
	}
}

// TestCreate5xxUnsure: a 502 from a proxy may come after the device was made:
// cleanup looks it up by name and deletes it. A 4xx says it was not made.
func TestCreate5xxUnsure(t *testing.T) {
	ctx := context.Background()
	for _, status := range []int{http.StatusBadGateway, http.StatusGatewayTimeout, http.StatusBadRequest} {
		tb := newFakeTB(t, "")
		tb.createStatus = func(n int) int {
			if n == 3 {
				return status
			}
			return 200
		}
		f, err := New(ctx, Options{URL: tb.url, User: "tenant", Password: "pw", Devices: 5, SetupConcurrency: 1})
		if err == nil || len(f.Devices) != 2 {
			t.Fatalf("%d: error %v, devices %+v", status, err, f.Devices)
		}
		if wantUnsure := status >= 500; (len(f.unsure) == 1) != wantUnsure {
			t.Fatalf("%d: unsure %+v", status, f.unsure)
		}
		if err := f.Cleanup(ctx); err != nil {
			t.Fatal(err)
		}
		if len(tb.devices) != 0 {
			t.Fatalf("%d: devices left %v", status, tb.devices)
		}
	}
}

func TestNotMade(t *testing.T) {
	f := func(err error, want bool) {
		t.Helper()
		if got := notMade(err); got != want {
			t.Fatalf("notMade(%v) = %v", err, got)
		}
	}
	f(fmt.Errorf("cannot create: %w", &apiError{status: 400}), true)
	f(&apiError{status: 409}, true)
	f(&apiError{status: 502}, false)
	f(&apiError{status: 503}, false)
	f(context.DeadlineExceeded, false)
	f(errors.New("connection reset"), false)
	f(fmt.Errorf("cannot provision: %w", &apiError{status: 200, refused: true}), true)
	f(&apiError{status: 200, refused: true, afterUnsure: true}, false)
	f(&apiError{status: 400, afterUnsure: true}, false)
}

// TestProvisionRefused: a provision answered 200 with a status other than
// SUCCESS (NOT_FOUND: a wrong key; FAILURE) made no device: the setup fails
// without counting it unsure, so cleanup does not look for it. After a 503 the
// same refusal leaves it unsure (the first attempt may have made it).
func TestProvisionRefused(t *testing.T) {
	fastRetries(t)
	for _, c := range []struct {
		answers    []string // the n-th provision's answer; "503" for a 503
		devices    int      // made
		unsure     bool
		wantStatus string
	}{
		{[]string{`{"status":"NOT_FOUND","errorMsg":"Provision data was not found!"}`}, 0, false, "NOT_FOUND"},
		{[]string{"ok", "ok", `{"status":"FAILURE","errorMsg":"refused"}`}, 2, false, "FAILURE"},
		{[]string{`{}`}, 0, false, "refused"},
		{[]string{"503", `{"status":"FAILURE","errorMsg":"Device already exists"}`}, 0, true, "FAILURE"},
	} {
		var mu sync.Mutex
		n := 0
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/api/v1/provision" {
				http.NotFound(w, r)
				return
			}
			mu.Lock()
			answer := "ok"
			if n < len(c.answers) {
				answer = c.answers[n]
			}
			n++
			mu.Unlock()
			switch answer {
			case "503":
				w.WriteHeader(http.StatusServiceUnavailable)
			case "ok":
				fmt.Fprintf(w, `{"status":"SUCCESS","credentialsType":"ACCESS_TOKEN","credentialsValue":"tok-%d"}`, n)
			default:
				fmt.Fprint(w, answer)
			}
		}))
		f, err := New(context.Background(), Options{URL: srv.URL, ProvisionKey: "k", ProvisionSecret: "s", Devices: 4, SetupConcurrency: 1})
		srv.Close()
		if err == nil || !strings.Contains(err.Error(), c.wantStatus) || f == nil || len(f.Devices) != c.devices || (f.Unsure() == 1) != c.unsure {
			t.Fatalf("%q: error %v, fleet %+v", c.answers, err, f)
		}
	}
}

// fastRetries makes the retries of the test wait 1 ms (without Retry-After).
func fastRetries(t *testing.T) {
	base := retryBase
	retryBase = time.Millisecond
	t.Cleanup(func() { retryBase = base })
}

// TestSetupRetries: a 429 or 503 to a create is tried again, after the
// answer's Retry-After; the setup does not end at the first one. So is a 429 to
// a delete at the cleanup.
func TestSetupRetries(t *testing.T) {
	fastRetries(t)
	ctx := context.Background()
	tb := newFakeTB(t, "")
	tb.retryAfter = "1"
	tb.createStatus = func(n int) int {
		switch n {
		case 2:
			return http.StatusTooManyRequests
		case 4:
			return http.StatusServiceUnavailable
		}
		return 200
	}
	tb.deleteStatus = func(n int) int {
		if n == 1 {
			return http.StatusTooManyRequests
		}
		return 200
	}
	start := time.Now()
	f, err := New(ctx, Options{URL: tb.url, User: "tenant", Password: "pw", Devices: 4, SetupConcurrency: 1})
	if err != nil || len(f.Devices) != 4 || f.Unsure() != 0 {
		t.Fatalf("error %v, %d devices, %d unsure", err, len(f.Devices), f.Unsure())
	}
	if d := time.Since(start); d < 2*time.Second || tb.count(&tb.creates) != 6 {
		t.Fatalf("%d creates in %v: want 6, after two waits of Retry-After 1 s", tb.creates, d)
	}
	if err := f.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if len(tb.devices) != 0 || tb.count(&tb.deletes) != 5 {
		t.Fatalf("devices left %v, %d deletes", tb.devices, tb.deletes)
	}
}

// TestSetupRetriesRunOut: a create answered 503 every time fails the setup
// after retryAttempts; the device may exist (a 503 of a proxy may come after
// the server made it), so cleanup looks it up by name.
func TestSetupRetriesRunOut(t *testing.T) {
	fastRetries(t)
	tb := newFakeTB(t, "")
	tb.createStatus = func(n int) int {
		if n >= 2 {
			return http.StatusServiceUnavailable
		}
		return 200
	}
	f, err := New(context.Background(), Options{URL: tb.url, User: "tenant", Password: "pw", Devices: 3, SetupConcurrency: 1})
	if err == nil || !strings.Contains(err.Error(), "status 503") || len(f.Devices) != 1 || f.Unsure() != 1 {
		t.Fatalf("error %v, %d devices, %d unsure", err, len(f.Devices), f.Unsure())
	}
	if n := tb.count(&tb.creates); n != 1+retryAttempts {
		t.Fatalf("%d creates, want %d", n, 1+retryAttempts)
	}
	if f.Names == "" || !strings.HasPrefix(f.Devices[0].Name, strings.TrimSuffix(f.Names, "*")) {
		t.Fatalf("names %q, device %q", f.Names, f.Devices[0].Name)
	}
	if err := f.Cleanup(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestRetry: which failures are tried again, how often, and what a 4xx to a
// retry after a 503 or no answer says.
func TestRetry(t *testing.T) {
	fastRetries(t)
	c := &client{}
	ctx := context.Background()
	noAnswer := &url.Error{Op: "Get", URL: "http://x", Err: errors.New("connection reset by peer")}
	f := func(name string, idempotent bool, errs []error, wantCalls int) error {
		t.Helper()
		calls := 0
		err := c.retry(ctx, idempotent, func() error {
			calls++
			return errs[min(calls, len(errs))-1]
		})
		if calls != wantCalls {
			t.Fatalf("%s: %d calls, want %d (error %v)", name, calls, wantCalls, err)
		}
		return err
	}
	if err := f("429 then ok", false, []error{&apiError{status: 429}, nil}, 2); err != nil {
		t.Fatal(err)
	}
	f("503 always", false, []error{&apiError{status: 503}}, retryAttempts)
	f("400", false, []error{&apiError{status: 400}}, 1)
	f("500", true, []error{&apiError{status: 500}}, 1)
	f("no answer, idempotent", true, []error{noAnswer, nil}, 2)
	f("no answer, POST", false, []error{noAnswer}, 1)
	f("not JSON", true, []error{errors.New("unexpected answer")}, 1)

	err := f("503 then 400", false, []error{&apiError{status: 503}, &apiError{status: 400}}, 2)
	if notMade(err) {
		t.Fatal("a 400 after a 503 says the device was not made")
	}
	if err := f("429 then 400", false, []error{&apiError{status: 429}, &apiError{status: 400}}, 2); !notMade(err) {
		t.Fatal("a 400 after a 429 does not say the device was not made")
	}

	// Retry-After decides the wait; a cancelled ctx ends it.
	cctx, cancel := context.WithCancel(ctx)
	calls := 0
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	start := time.Now()
	err = c.retry(cctx, false, func() error { calls++; return &apiError{status: 429, retryAfter: time.Hour} })
	if calls != 1 || err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("cancelled during Retry-After: %d calls, %v, %v", calls, err, time.Since(start))
	}
}
