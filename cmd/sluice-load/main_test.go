package main

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluice-iot/sluice/loadtest"
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
	for _, rate := range []string{"NaN", "Inf", "-Inf", "-1"} {
		bad("-rate", "-rate", rate)
	}
	bad("needs a login", "-provision-key", "k", "-provision-secret", "s", "-cleanup")
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
	if !strings.Contains(stdout.String(), "50 requests in") || !strings.Contains(stdout.String(), "status: 200 50") {
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
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute): // a guard against a hang, not a measure
		t.Fatal("the run did not end after the second interrupt")
	}
	if !strings.Contains(stdout.String(), "interrupted:") || !strings.Contains(stderr.String(), "Ctrl-C again") {
		t.Fatalf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
}
