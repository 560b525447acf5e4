package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluice-iot/sluice/loadtest"
	"github.com/sluice-iot/sluice/loadtest/fleet"
)

func TestParse(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	os.WriteFile(tokens, []byte("A\nB\nC\n"), 0o600)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("# none\n"), 0o600)

	o, f, err := parse([]string{"-tokens", tokens, "-profile", "batch", "-batch-size", "5", "-rate", "100", "-cleanup"}, &bytes.Buffer{})
	if err != nil || len(o.Tokens) != 3 || o.Devices != 0 || o.Profile != loadtest.ProfileBatch || o.BatchSize != 5 || o.Rate != 100 || !f.cleanup {
		t.Fatalf("options %+v, flags %+v, %v", o, f, err)
	}
	o, _, _ = parse([]string{"-tokens", tokens, "-devices", "2"}, &bytes.Buffer{})
	if o.Devices != 2 {
		t.Fatalf("-devices with -tokens: %d", o.Devices)
	}

	bad := func(want string, args ...string) {
		t.Helper()
		_, _, err := parse(args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%q: error %v, want %q", args, err, want)
		}
	}
	bad("unknown profile", "-profile", "huge")
	bad("no tokens", "-tokens", empty)
	bad("no such file", "-tokens", filepath.Join(dir, "missing"))
	bad("-duration 0 needs -requests", "-duration", "0")
	bad("unexpected arguments", "extra")
	bad("flag provided but not defined", "-nope")
	// Caught before any device is made.
	bad("-duration -1s: negative", "-duration", "-1s")
	bad("-warmup -1s: negative", "-warmup", "-1s")
	bad("-interval -1s: negative", "-interval", "-1s")
	bad("-timeout -1s: negative", "-timeout", "-1s")
	bad("-requests -5: negative", "-requests", "-5")
	bad("-connections -1: negative", "-connections", "-1")
	for _, rate := range []string{"NaN", "Inf", "-Inf", "-1", "1e300", "10000001"} {
		bad("-rate", "-rate", rate)
	}
	bad("want at most 10,000,000 requests per second", "-rate", "1e300")
	if _, _, err := parse([]string{"-tokens", tokens, "-rate", "1e7"}, &bytes.Buffer{}); err != nil {
		t.Fatalf("-rate 1e7 (the most): %v", err)
	}
	bad("needs a login", "-provision-key", "k", "-provision-secret", "s", "-cleanup")
	// 0 where it has no meaning is refused, not taken for the default.
	bad("-connections 0: want at least 1", "-connections", "0")
	bad("-batch-size 0: want at least 1", "-batch-size", "0")
	bad("-setup-concurrency 0: want at least 1", "-setup-concurrency", "0")
	bad("-timeout 0: want a duration above 0", "-timeout", "0")
	bad("-interval 0: want a duration above 0", "-interval", "0")
	bad("-rpc-timeout 0: want a duration above 0", "-rpc-timeout", "0")
	bad("-devices 0: want at least 1", "-devices", "0", "-user", "u")
	bad("-setup-concurrency -2: negative", "-setup-concurrency", "-2")
	bad("-encoding", "-encoding", "br")
	// 0 where it means something is taken.
	o, _, err = parse([]string{"-tokens", tokens, "-devices", "0", "-rate", "0", "-requests", "0", "-warmup", "0",
		"-attributes-every", "0", "-rpc-poll", "0", "-encoding", "zstd"}, &bytes.Buffer{})
	if err != nil || o.Devices != 0 || o.Encoding != "zstd" {
		t.Fatalf("zeros with a meaning: %+v, %v", o, err)
	}
	o, _, _ = parse([]string{"-tokens", tokens}, &bytes.Buffer{})
	if o.Encoding != "" || o.RPCTimeout != 25*time.Second {
		t.Fatalf("defaults: encoding %q, rpc timeout %v", o.Encoding, o.RPCTimeout)
	}
	if _, _, err := parse([]string{"-provision-key", "k", "-provision-secret", "s", "-cleanup", "-api-key", "x"}, &bytes.Buffer{}); err != nil {
		t.Fatalf("provision with a login and -cleanup: %v", err)
	}
}

// TestRun: the command runs a fleet from a tokens file against a server, prints
// the summary, and writes both reports.
func TestRun(t *testing.T) {
	var mu sync.Mutex
	paths := map[string]int{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		mu.Lock()
		paths[string(ctx.Path())]++
		mu.Unlock()
	}}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown() })

	dir := t.TempDir()
	tokens, jsonFile, htmlFile := filepath.Join(dir, "tokens"), filepath.Join(dir, "r.json"), filepath.Join(dir, "r.html")
	os.WriteFile(tokens, []byte("A\nB\n"), 0o600)
	var stdout, stderr bytes.Buffer
	err = run([]string{"-url", "http://" + ln.Addr().String(), "-tokens", tokens, "-requests", "50", "-duration", time.Hour.String(),
		"-profile", "meter", "-attributes-every", "5", "-json", jsonFile, "-html", htmlFile}, &stdout, &stderr, nil)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "50 requests in") || !strings.Contains(stdout.String(), "status: 200 50") ||
		!strings.Contains(stdout.String(), "2xx/s") {
		t.Fatalf("stdout:\n%s", stdout.String())
	}
	if paths["/api/v1/A/telemetry"] != 20 || paths["/api/v1/B/attributes"] != 5 {
		t.Fatalf("paths %v", paths)
	}
	var rep struct {
		Summary struct{ Requests, OK int64 }
		Setup   struct{ Mode string }
	}
	b, err := os.ReadFile(jsonFile)
	if err != nil || json.Unmarshal(b, &rep) != nil || rep.Summary.Requests != 50 || rep.Summary.OK != 50 || rep.Setup.Mode != "tokens" {
		t.Fatalf("JSON report %s, %v", b, err)
	}
	if b, err := os.ReadFile(htmlFile); err != nil || !bytes.Contains(b, []byte("<svg")) {
		t.Fatalf("HTML report: %v", err)
	}
}

// TestRunSecondInterrupt: the first interrupt stops the load, but the run still
// waits for the requests in flight and the RPC pollers' first polls (here they
// would never end); the second ends those waits and the report comes.
func TestRunSecondInterrupt(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	seen := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[path.Base(r.URL.Path)] = true
		mu.Unlock()
		select { // never answers while the test runs
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // first: lets the server close
	tokens := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(tokens, []byte("A\nB\n"), 0o600)

	sigs := make(chan os.Signal)
	var stdout, stderr bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run([]string{"-url", srv.URL, "-tokens", tokens, "-duration", "1h", "-timeout", "1h",
			"-connections", "2", "-rpc-poll", "1", "-rpc-timeout", "1h", "-quiet"}, &stdout, &stderr, sigs)
	}()
	for {
		mu.Lock()
		busy := seen["telemetry"] && seen["rpc"]
		mu.Unlock()
		if busy {
			break
		}
		time.Sleep(time.Millisecond)
	}
	sigs <- os.Interrupt // stop the load
	sigs <- os.Interrupt // and stop waiting for it: taken only once the first was handled
	select {
	case err := <-done:
		if !errors.Is(err, errNoSuccess) { // nothing was answered, and so nothing 2xx
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute): // a guard against a hang, not a measure
		t.Fatal("the run did not end after the second interrupt")
	}
	if !strings.Contains(stdout.String(), "interrupted:") || !strings.Contains(stderr.String(), "Ctrl-C again") ||
		strings.Contains(stdout.String(), "answers in flight") {
		t.Fatalf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
}

// startServer serves handler on loopback until the test ends; it returns the URL.
func startServer(t *testing.T, handler func(ctx *fasthttp.RequestCtx)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: handler}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown() })
	return "http://" + ln.Addr().String()
}

// TestRunNoSuccess: a run in which no request got a 2xx answer writes its
// report, headlines 0 2xx/s, and ends with exit status 2. Flat out, a 503 with
// Retry-After is not re-sent at once.
func TestRunNoSuccess(t *testing.T) {
	var calls atomic.Int64
	url := startServer(t, func(ctx *fasthttp.RequestCtx) {
		calls.Add(1)
		ctx.Response.Header.Set("Retry-After", "5")
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
	})
	dir := t.TempDir()
	tokens, jsonFile := filepath.Join(dir, "tokens"), filepath.Join(dir, "r.json")
	os.WriteFile(tokens, []byte("A\n"), 0o600)
	var stdout, stderr bytes.Buffer
	err := run([]string{"-url", url, "-tokens", tokens, "-duration", "300ms", "-connections", "2", "-quiet", "-json", jsonFile},
		&stdout, &stderr, nil)
	if !errors.Is(err, errNoSuccess) || exitCode(err) != 2 {
		t.Fatalf("error %v (exit %d)\n%s", err, exitCode(err), stdout.String())
	}
	if exitCode(errors.New("other")) != 1 {
		t.Fatal("another error is not exit status 1")
	}
	if n := calls.Load(); n != 2 { // one per connection: each then waits out the Retry-After (cut at the end)
		t.Fatalf("%d requests to a target answering 503 with Retry-After 5", n)
	}
	if !strings.Contains(stdout.String(), "(0 2xx/s)") || !strings.Contains(stdout.String(), "latency (2xx) from send:      none") {
		t.Fatalf("stdout:\n%s", stdout.String())
	}
	if b, err := os.ReadFile(jsonFile); err != nil || !bytes.Contains(b, []byte(`"okPerSec": 0`)) {
		t.Fatalf("JSON report %s, %v", b, err)
	}
}

// TestRunOutputsFirst: a report path that cannot be written fails the run
// before it sends anything (or makes any device).
func TestRunOutputsFirst(t *testing.T) {
	var calls atomic.Int64
	url := startServer(t, func(ctx *fasthttp.RequestCtx) { calls.Add(1) })
	dir := t.TempDir()
	tokens, jsonFile := filepath.Join(dir, "tokens"), filepath.Join(dir, "r.json")
	os.WriteFile(tokens, []byte("A\n"), 0o600)
	for _, flag := range []string{"-json", "-html", "-save-tokens"} {
		err := run([]string{"-url", url, "-tokens", tokens, "-requests", "5", "-quiet", "-json", jsonFile, flag, filepath.Join(dir, "no", "such", "dir")},
			&bytes.Buffer{}, &bytes.Buffer{}, nil)
		if err == nil || !strings.Contains(err.Error(), "cannot write") || calls.Load() != 0 {
			t.Fatalf("%s: error %v, %d requests", flag, err, calls.Load())
		}
		// The file opened before the bad one is not left behind, empty.
		if _, err := os.Stat(jsonFile); flag != "-json" && !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s: %s left: %v", flag, jsonFile, err)
		}
	}
}

// TestRunSetupFails: when the setup fails part way (here the third create is
// refused), the tokens of the devices made are written to -save-tokens and the
// devices left are named; with -cleanup they are deleted instead.
func TestRunSetupFails(t *testing.T) {
	for _, withCleanup := range []bool{false, true} {
		var mu sync.Mutex
		creates, deletes := 0, 0
		devices := map[string]string{} // id → name
		url := startServer(t, func(ctx *fasthttp.RequestCtx) {
			mu.Lock()
			defer mu.Unlock()
			ctx.SetContentType("application/json")
			switch p := string(ctx.Path()); {
			case p == "/api/auth/login":
				ctx.SetBodyString(`{"token":"jwt","refreshToken":"r"}`)
			case p == "/api/device" && string(ctx.Method()) == "POST":
				creates++
				if creates == 3 {
					ctx.SetStatusCode(400)
					ctx.SetBodyString(`{"message":"no"}`)
					return
				}
				var body struct{ Name string }
				json.Unmarshal(ctx.PostBody(), &body)
				id := fmt.Sprintf("id-%d", creates)
				devices[id] = body.Name
				fmt.Fprintf(ctx, `{"id":{"id":%q}}`, id)
			case strings.HasPrefix(p, "/api/device/") && string(ctx.Method()) == "DELETE":
				deletes++
				delete(devices, strings.TrimPrefix(p, "/api/device/"))
			default:
				ctx.SetStatusCode(404)
			}
		})
		dir := t.TempDir()
		saved := filepath.Join(dir, "saved")
		args := []string{"-url", url, "-user", "u", "-password", "p", "-devices", "5", "-setup-concurrency", "1",
			"-save-tokens", saved, "-quiet", "-name-prefix", "t"}
		if withCleanup {
			args = append(args, "-cleanup")
		}
		var stderr bytes.Buffer
		err := run(args, &bytes.Buffer{}, &stderr, nil)
		if err == nil || !strings.Contains(err.Error(), "status 400") || exitCode(err) != 1 {
			t.Fatalf("error %v", err)
		}
		// With -cleanup the file is written again once the devices are deleted,
		// without their tokens.
		b, _ := os.ReadFile(saved)
		if tokens, _ := fleet.ReadTokens(bytes.NewReader(b)); len(tokens) != map[bool]int{false: 2, true: 0}[withCleanup] {
			t.Fatalf("cleanup %v: %d tokens saved:\n%s", withCleanup, len(tokens), b)
		}
		mu.Lock()
		left := len(devices)
		mu.Unlock()
		if withCleanup {
			if left != 0 || deletes != 2 || strings.Contains(stderr.String(), "left ") {
				t.Fatalf("cleanup: %d devices left, %d deletes\n%s", left, deletes, stderr.String())
			}
			continue
		}
		if left != 2 || !regexp.MustCompile(`left 2 devices named t-[0-9a-f]{6}-\*`).MatchString(stderr.String()) ||
			!strings.Contains(stderr.String(), "tokens in "+saved) {
			t.Fatalf("%d devices left; stderr:\n%s", left, stderr.String())
		}
	}
}

// TestRunSetupInterrupted: a Ctrl-C during the setup keeps the tokens of the
// devices made so far and says which devices it leaves.
func TestRunSetupInterrupted(t *testing.T) {
	var mu sync.Mutex
	creates := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api/auth/login":
			fmt.Fprint(w, `{"token":"jwt"}`)
		case "/api/device":
			mu.Lock()
			creates++
			n := creates
			mu.Unlock()
			if n > 2 {
				io.Copy(io.Discard, r.Body) // so that the server sees the client go
				<-r.Context().Done()        // the third never comes back
				return
			}
			fmt.Fprintf(w, `{"id":{"id":"id-%d"}}`, n)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	saved := filepath.Join(t.TempDir(), "saved")
	sigs := make(chan os.Signal, 1)
	var stderr bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run([]string{"-url", srv.URL, "-user", "u", "-password", "p", "-devices", "5", "-setup-concurrency", "1",
			"-save-tokens", saved, "-quiet"}, &bytes.Buffer{}, &stderr, sigs)
	}()
	for {
		mu.Lock()
		n := creates
		mu.Unlock()
		if n == 3 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	sigs <- os.Interrupt
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute): // a guard against a hang, not a measure
		t.Fatal("the setup did not end at the interrupt")
	}
	if err == nil || !strings.Contains(err.Error(), "setup interrupted") {
		t.Fatalf("error %v", err)
	}
	b, _ := os.ReadFile(saved)
	if strings.Count(string(b), "\n") != 2 ||
		!regexp.MustCompile(`left 2 devices named sluice-load-[0-9a-f]{6}-\* \(and up to 1 more`).MatchString(stderr.String()) {
		t.Fatalf("saved:\n%s\nstderr:\n%s", b, stderr.String())
	}
}

// lockedBuffer is a bytes.Buffer the test reads while run writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestRunKeepsOutputsOnFailure: existing -json, -html and -save-tokens files
// are not emptied at start-up; a run that fails (a wrong password) leaves them
// as they were, and one that goes through replaces them whole, with their
// permissions, leaving no temporary file beside them. A link is followed.
func TestRunKeepsOutputsOnFailure(t *testing.T) {
	url := startServer(t, func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == "/api/auth/login" {
			ctx.SetStatusCode(401)
			ctx.SetBodyString(`{"message":"Invalid username or password"}`)
		}
	})
	dir := t.TempDir()
	saved, jsonFile, htmlFile, tokens := filepath.Join(dir, "saved"), filepath.Join(dir, "r.json"), filepath.Join(dir, "r.html"), filepath.Join(dir, "tokens")
	old := map[string]string{saved: "OLD-TOKEN\n", jsonFile: `{"old":true}`, htmlFile: "<p>old</p>"}
	for p, content := range old {
		os.WriteFile(p, []byte(content), 0o640)
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(jsonFile, link); err != nil {
		t.Fatal(err)
	}
	unchanged := func(when string) {
		t.Helper()
		for p, content := range old {
			if b, err := os.ReadFile(p); err != nil || string(b) != content {
				t.Fatalf("%s: %s holds %q, %v; want %q", when, p, b, err, content)
			}
		}
	}
	noTemp := func(when string) {
		t.Helper()
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".tmp") {
				t.Fatalf("%s: %s left", when, e.Name())
			}
		}
	}
	err := run([]string{"-url", url, "-user", "u", "-password", "wrong", "-devices", "2", "-quiet",
		"-json", link, "-html", htmlFile, "-save-tokens", saved}, &bytes.Buffer{}, &bytes.Buffer{}, nil)
	if err == nil || !strings.Contains(err.Error(), "cannot log in") {
		t.Fatalf("error %v", err)
	}
	unchanged("after a failed login")
	noTemp("after a failed login")

	os.WriteFile(tokens, []byte("A\nB\n"), 0o600)
	err = run([]string{"-url", url, "-tokens", tokens, "-requests", "4", "-quiet", "-json", link, "-html", htmlFile, "-save-tokens", saved},
		&bytes.Buffer{}, &bytes.Buffer{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(saved); string(b) != "A\nB\n" {
		t.Fatalf("tokens saved: %q", b)
	}
	if b, _ := os.ReadFile(jsonFile); !bytes.Contains(b, []byte(`"requests": 4`)) {
		t.Fatalf("JSON report through the link: %s", b)
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link was replaced: %v", err)
	}
	for p := range old {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o640 {
			t.Fatalf("%s: mode %v, %v; want its own 0640", p, st.Mode(), err)
		}
	}
	noTemp("after a run")
}

// TestRunCleanupRewritesTokens: after -cleanup, -save-tokens lists only the
// devices it failed to delete.
func TestRunCleanupRewritesTokens(t *testing.T) {
	var mu sync.Mutex
	creates := 0
	token := map[string]string{} // id → access token
	url := startServer(t, func(ctx *fasthttp.RequestCtx) {
		mu.Lock()
		defer mu.Unlock()
		ctx.SetContentType("application/json")
		switch p := string(ctx.Path()); {
		case p == "/api/auth/login":
			ctx.SetBodyString(`{"token":"jwt"}`)
		case p == "/api/device" && string(ctx.Method()) == "POST":
			creates++
			id := fmt.Sprintf("id-%d", creates)
			token[id] = string(ctx.QueryArgs().Peek("accessToken"))
			fmt.Fprintf(ctx, `{"id":{"id":%q}}`, id)
		case p == "/api/device/id-2" && string(ctx.Method()) == "DELETE":
			ctx.SetStatusCode(500) // this one stays
		case strings.HasPrefix(p, "/api/device/") && string(ctx.Method()) == "DELETE":
			delete(token, strings.TrimPrefix(p, "/api/device/"))
		}
	})
	saved := filepath.Join(t.TempDir(), "saved")
	err := run([]string{"-url", url, "-user", "u", "-password", "p", "-devices", "3", "-requests", "3", "-quiet",
		"-save-tokens", saved, "-cleanup"}, &bytes.Buffer{}, &bytes.Buffer{}, nil)
	if err == nil || !strings.Contains(err.Error(), "status 500") {
		t.Fatalf("error %v", err)
	}
	b, _ := os.ReadFile(saved)
	mu.Lock()
	defer mu.Unlock()
	if len(token) != 1 || string(b) != token["id-2"]+"\n" {
		t.Fatalf("devices left %v; tokens saved %q", token, b)
	}
}

// TestRunFirstPollsWaitSaid: when the load has ended but the RPC pollers' first
// polls are held, the command says that it waits for them and how to skip
// that; skipped, the report says the polls were cut off.
func TestRunFirstPollsWaitSaid(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/rpc") {
			<-r.Context().Done() // held until the client goes
		}
	}))
	t.Cleanup(srv.Close)
	tokens := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(tokens, []byte("A\nB\n"), 0o600)
	sigs := make(chan os.Signal)
	var stdout bytes.Buffer
	stderr := &lockedBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run([]string{"-url", srv.URL, "-tokens", tokens, "-requests", "4", "-rpc-poll", "2", "-rpc-timeout", "1h", "-quiet"},
			&stdout, stderr, sigs)
	}()
	for !strings.Contains(stderr.String(), "waiting up to") {
		time.Sleep(time.Millisecond)
	}
	sigs <- os.Interrupt // the load has ended by itself: the first only stops it
	sigs <- os.Interrupt // the second ends the wait
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute): // a guard against a hang, not a measure
		t.Fatal("the run did not end after the second interrupt")
	}
	if !regexp.MustCompile(`waiting up to (3600|3599)s for the RPC pollers' first polls \(Ctrl-C twice to skip\)`).MatchString(stderr.String()) ||
		!strings.Contains(stdout.String(), "rpc: 2 pollers, 0 polls") || !strings.Contains(stdout.String(), "first polls of 2 pollers were cut off") {
		t.Fatalf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
}

// TestRunSetupFailsKeepsOldTokens: a setup that fails before it made any
// device (the tenant's device limit refuses the first create, a wrong
// provision key) leaves an existing -save-tokens file as it was: it may be the
// only record of an earlier run's devices, which are what the limit counts.
func TestRunSetupFailsKeepsOldTokens(t *testing.T) {
	for _, c := range []struct {
		status      int // of every create: 403 says it made nothing, 502 leaves it unsure
		withCleanup bool
	}{{403, false}, {403, true}, {502, false}} {
		url := startServer(t, func(ctx *fasthttp.RequestCtx) {
			ctx.SetContentType("application/json")
			switch string(ctx.Path()) {
			case "/api/auth/login":
				ctx.SetBodyString(`{"token":"jwt"}`)
			case "/api/device":
				ctx.SetStatusCode(c.status)
				ctx.SetBodyString(`{"message":"Can't create more then 5 devices!","errorCode":41}`)
			default:
				ctx.SetStatusCode(404)
			}
		})
		saved := filepath.Join(t.TempDir(), "saved")
		os.WriteFile(saved, []byte("OLD-1\nOLD-2\n"), 0o600)
		args := []string{"-url", url, "-user", "u", "-password", "p", "-devices", "3", "-setup-concurrency", "1",
			"-save-tokens", saved, "-quiet"}
		if c.withCleanup {
			args = append(args, "-cleanup")
		}
		var stderr bytes.Buffer
		err := run(args, &bytes.Buffer{}, &stderr, nil)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("status %d", c.status)) {
			t.Fatalf("error %v", err)
		}
		if b, _ := os.ReadFile(saved); string(b) != "OLD-1\nOLD-2\n" {
			t.Fatalf("%+v: the tokens file holds %q after a setup that made no device; stderr:\n%s", c, b, stderr.String())
		}
		// The file does not hold this run's tokens: stderr does not send the user there.
		if strings.Contains(stderr.String(), "tokens in") {
			t.Fatalf("%+v: stderr:\n%s", c, stderr.String())
		}
	}
}

// TestRunDanglingLink: a -json path that is a link to a file not made yet
// (latest.json → runs/42.json) is followed as an existing link is: the report
// is written to the file it names, and the link stays.
func TestRunDanglingLink(t *testing.T) {
	url := startServer(t, func(ctx *fasthttp.RequestCtx) {})
	dir := t.TempDir()
	tokens, target, link := filepath.Join(dir, "tokens"), filepath.Join(dir, "runs", "42.json"), filepath.Join(dir, "latest.json")
	os.WriteFile(tokens, []byte("A\n"), 0o600)
	os.Mkdir(filepath.Dir(target), 0o700)
	if err := os.Symlink(filepath.Join("runs", "42.json"), link); err != nil {
		t.Fatal(err)
	}
	err := run([]string{"-url", url, "-tokens", tokens, "-requests", "2", "-quiet", "-json", link}, &bytes.Buffer{}, &bytes.Buffer{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link was replaced: %v", err)
	}
	if b, err := os.ReadFile(target); err != nil || !bytes.Contains(b, []byte(`"requests": 2`)) {
		t.Fatalf("report in the link's target: %s, %v", b, err)
	}
}
