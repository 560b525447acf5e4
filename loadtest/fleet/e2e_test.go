package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-iot/sluice/config"
	"github.com/sluice-iot/sluice/loadtest"
	"github.com/sluice-iot/sluice/loadtest/report"
	"github.com/sluice-iot/sluice/node"
)

// target is the Sluice node of the package's tests, started in-process on the
// embedded back end with demo data, for the fleets to load. One node serves every
// test (starting one costs seconds under -race); each test makes its own devices.
type target struct {
	t     *testing.T
	url   string
	token string // the demo device's
	auth  string // X-Authorization of the demo tenant administrator
}

var shared target

func TestMain(m *testing.M) {
	os.Exit(runWithNode(m))
}

func runWithNode(m *testing.M) int {
	dir, err := os.MkdirTemp("", "sluice-load-test-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	cfg := config.Default()
	cfg.HTTP.BindAddress, cfg.HTTP.BindPort = "127.0.0.1", 0
	cfg.Data.Dir, cfg.Data.Demo = dir, true
	n, err := node.Start(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		panic(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	}()
	shared = target{url: "http://" + n.Addr().String(), token: n.Bootstrap.DemoDeviceToken}
	c := &client{base: shared.url, http: http.DefaultClient, timeout: time.Minute}
	if err := c.login(context.Background(), "tenant@thingsboard.org", "tenant"); err != nil {
		panic(err)
	}
	shared.auth = c.authHeader()
	return m.Run()
}

// startTarget returns the shared node, with the login of the demo tenant
// administrator.
func startTarget(t *testing.T) *target {
	tg := shared
	tg.t = t
	return &tg
}

// call sends a REST request as the tenant administrator, wants status, and
// decodes the answer into out (nil: ignored).
func (tg *target) call(status int, method, path, body string, out any) {
	tg.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, tg.url+path, rd)
	req.Header.Set("Content-Type", "application/json")
	if tg.auth != "" {
		req.Header.Set("X-Authorization", tg.auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tg.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		tg.t.Fatalf("%s %s: status %d, want %d: %s", method, path, resp.StatusCode, status, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			tg.t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
}

// clean fails the test unless every request of r was answered 2xx.
func clean(t *testing.T, r *report.Report) {
	t.Helper()
	s := r.Summary
	if s.Requests == 0 || s.OK != s.Requests || s.Failed != 0 || s.TransportErrors != 0 || len(r.TransportErrors) != 0 {
		var b bytes.Buffer
		r.WriteText(&b)
		t.Fatalf("not a clean run:\n%s", b.String())
	}
}

// TestFleetCreate: a fleet creates its devices over the REST API, sends every
// profile with attribute posts mixed in, all answered 200, the points land on the
// devices, and cleanup deletes the devices again.
func TestFleetCreate(t *testing.T) {
	tg := startTarget(t)
	ctx := context.Background()
	f, err := New(ctx, Options{URL: tg.url, User: "tenant@thingsboard.org", Password: "tenant", Devices: 5,
		Requests: 60, Connections: 4, AttributesEvery: 4, BatchSize: 7})
	if err != nil {
		t.Fatal(err)
	}
	if f.Mode != ModeCreate || len(f.Devices) != 5 {
		t.Fatalf("mode %s, %d devices", f.Mode, len(f.Devices))
	}
	for _, p := range loadtest.Profiles {
		f.opts.Profile = p
		r, err := f.Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		clean(t, r)
		tel, attr := r.Kinds[KindTelemetry], r.Kinds[KindAttributes]
		if r.Summary.Requests != 60 || tel.OK != 45 || attr.OK != 15 || r.Setup.Mode != ModeCreate || r.Setup.Devices != 5 {
			t.Fatalf("%s: summary %+v, kinds %+v", p, r.Summary, r.Kinds)
		}
		if want := map[loadtest.Profile]int64{"single": 45, "meter": 135, "keys20": 900, "mixed": 360, "batch": 315}[p]; r.Summary.Points != want {
			t.Fatalf("%s: %d points, want %d", p, r.Summary.Points, want)
		}
		if len(r.Timeline) == 0 || r.Config.Profile != string(p) {
			t.Fatalf("%s: timeline %v, config %+v", p, r.Timeline, r.Config)
		}
	}

	// The last run (batch) stored its rows under the devices' own timestamps.
	var ts map[string][]struct{ Ts int64 }
	tg.call(200, "GET", "/api/plugins/telemetry/DEVICE/"+f.Devices[0].ID+"/values/timeseries?keys=temperature,firmwareVersion&startTs=0&endTs=9999999999999&limit=1000", "", &ts)
	if len(ts["temperature"]) == 0 {
		t.Fatalf("no telemetry stored: %v", ts)
	}

	if err := f.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Devices {
		tg.call(404, "GET", "/api/device/"+d.ID, "", nil)
	}
}

// TestFleetTokensFile: a fleet from a tokens file (here the tokens a created fleet
// saved) runs open loop at a rate and creates and deletes nothing.
func TestFleetTokensFile(t *testing.T) {
	tg := startTarget(t)
	ctx := context.Background()
	made, err := New(ctx, Options{URL: tg.url, User: "tenant@thingsboard.org", Password: "tenant", Devices: 3, Requests: 1})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tokens.txt")
	var b bytes.Buffer
	b.WriteString("# saved by a previous run\n" + tg.token + "\n")
	if err := WriteTokens(&b, made.Devices); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := ReadTokens(fh)
	fh.Close()
	if err != nil || len(tokens) != 4 {
		t.Fatalf("tokens %v, %v", tokens, err)
	}

	f, err := New(ctx, Options{URL: tg.url, Tokens: tokens, Requests: 40, Rate: 4000, Connections: 2, Profile: loadtest.ProfileMixed})
	if err != nil {
		t.Fatal(err)
	}
	r, err := f.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	clean(t, r)
	if r.Setup.Mode != ModeTokens || r.Setup.Devices != 4 || r.Summary.Requests != 40 || r.Config.Rate != 4000 {
		t.Fatalf("setup %+v, summary %+v", r.Setup, r.Summary)
	}
	if err := f.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	for _, d := range made.Devices {
		tg.call(200, "GET", "/api/device/"+d.ID, "", nil) // not the fleet's to delete
	}
}

// TestFleetProvision: a fleet provisions its devices with a device profile's key
// and secret, and with a login finds them by name to delete them.
func TestFleetProvision(t *testing.T) {
	tg := startTarget(t)
	ctx := context.Background()
	// The node is shared (and -count may repeat the test): a profile of its own.
	key := "load-key-" + randomHex(4)
	tg.call(200, "POST", "/api/deviceProfile", `{"name":"`+key+`","provisionType":"ALLOW_CREATE_NEW_DEVICES","provisionDeviceKey":"`+key+`",`+
		`"profileData":{"provisionConfiguration":{"type":"ALLOW_CREATE_NEW_DEVICES","provisionDeviceSecret":"load-secret"}}}`, nil)
	f, err := New(ctx, Options{URL: tg.url, ProvisionKey: key, ProvisionSecret: "load-secret",
		User: "tenant@thingsboard.org", Password: "tenant", Devices: 3, Requests: 30, Profile: loadtest.ProfileKeys20})
	if err != nil {
		t.Fatal(err)
	}
	if f.Mode != ModeProvision || len(f.Devices) != 3 || f.Devices[0].Token == "" {
		t.Fatalf("mode %s, devices %+v", f.Mode, f.Devices)
	}
	r, err := f.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	clean(t, r)
	if err := f.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	tg.call(404, "GET", "/api/tenant/devices?deviceName="+f.Devices[0].Name, "", nil)

	_, err = New(ctx, Options{URL: tg.url, ProvisionKey: key, ProvisionSecret: "wrong", Devices: 1, Requests: 1})
	if err == nil || !strings.Contains(err.Error(), "NOT_FOUND") {
		t.Fatalf("wrong secret: %v", err)
	}
}

// TestFleetRPC: devices that poll for RPC get a pending one and reply; polls that
// time out are counted as empty, not as failures.
func TestFleetRPC(t *testing.T) {
	tg := startTarget(t)
	ctx := context.Background()
	f, err := New(ctx, Options{URL: tg.url, User: "tenant@thingsboard.org", Password: "tenant", Devices: 2,
		Requests: 20, RPCPollers: 2, RPCTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var rpc struct{ RpcID string }
	tg.call(200, "POST", "/api/rpc/oneway/"+f.Devices[0].ID, `{"method":"setGpio","params":{"pin":7},"persistent":true,"timeout":60000}`, &rpc)
	r, err := f.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	clean(t, r)
	c := r.RPC
	if c == nil || c.Pollers != 2 || c.Polls < 2 || c.Delivered != 1 || c.Replies != 1 || c.Failed != 0 || c.Delivered+c.Empty != c.Polls {
		t.Fatalf("rpc %+v", c)
	}
}

func TestNewErrors(t *testing.T) {
	tg := startTarget(t)
	f := func(o Options, want string) {
		t.Helper()
		_, err := New(context.Background(), o)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v, want %q", err, want)
		}
	}
	f(Options{URL: "ftp://x", Devices: 1, Requests: 1}, "bad target URL")
	f(Options{URL: tg.url + "/tb?x=1", Devices: 1, Requests: 1}, "bad target URL")
	f(Options{URL: tg.url, Devices: 1, Requests: 1}, "give a tokens file")
	f(Options{URL: tg.url, Devices: 1, Requests: 1, User: "tenant@thingsboard.org", Password: "wrong"}, "cannot log in")
}

// TestCleanupUnsure: devices whose create got no answer may exist; cleanup
// looks them up by name, deletes the one that was made and skips the one that
// was not.
func TestCleanupUnsure(t *testing.T) {
	tg := startTarget(t)
	ctx := context.Background()
	f, err := New(ctx, Options{URL: tg.url, User: "tenant@thingsboard.org", Password: "tenant", Devices: 1})
	if err != nil {
		t.Fatal(err)
	}
	made := "unsure-made-" + randomHex(3)
	var dev struct{ ID entityID }
	tg.call(200, "POST", "/api/device", `{"name":"`+made+`"}`, &dev)
	f.unsure = []Device{{Name: made}, {Name: "unsure-never-made-" + randomHex(3)}}
	if err := f.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	tg.call(404, "GET", "/api/device/"+dev.ID.ID, "", nil)
	tg.call(404, "GET", "/api/device/"+f.Devices[0].ID, "", nil)
}
