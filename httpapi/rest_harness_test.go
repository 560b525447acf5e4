package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/crypto/bcrypt"

	"github.com/sluice-iot/sluice/engine"
	"github.com/sluice-iot/sluice/ingest"
	"github.com/sluice-iot/sluice/internal/testenv"
	"github.com/sluice-iot/sluice/storage/embedded"
)

// testNode is an in-process front end over a fresh embedded store with the demo
// data, served on a random local port.
type testNode struct {
	t     *testing.T
	URL   string                 // base URL, e.g. http://127.0.0.1:41234
	Demo  engine.BootstrapResult // demo ids and tokens
	Eng   *engine.Engine
	API   *Server
	Store *embedded.DB
	// Logs holds every log line of the node (store and front end), at debug level.
	Logs *testenv.Buffer
}

// startTestNode starts a node that lives until the test ends. tweak, when given,
// may change the engine configuration first.
func startTestNode(t *testing.T, tweak ...func(*engine.Config)) *testNode {
	t.Helper()
	logs := &testenv.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	db, err := embedded.Open(t.TempDir(), embedded.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	cfg := engine.Config{JWTSigningKey: []byte("httpapi-test-key"), BcryptCost: bcrypt.MinCost}
	for _, f := range tweak {
		f(&cfg)
	}
	eng := engine.New(db, cfg)
	demo, err := eng.Bootstrap(context.Background(), true, "")
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	w := ingest.NewWriter(db, ingest.Config{})
	api := New(Config{MaxBodySize: 1 << 20}, eng, w, log, nil)
	srv := &fasthttp.Server{Handler: api.Handler(), ErrorHandler: api.ErrorHandler, MaxRequestBodySize: 1 << 20}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.ShutdownWithContext(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		<-served
		w.Close()
		if err := db.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return &testNode{t: t, URL: "http://" + ln.Addr().String(), Demo: demo, Eng: eng, API: api, Store: db, Logs: logs}
}

// do sends a request and returns the status and body. auth, when not empty, is
// sent as X-Authorization. body is sent as is when it is a string or []byte, as
// JSON otherwise, and not at all when nil.
func (n *testNode) do(method, path, auth string, body any) (int, []byte) {
	n.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = bytes.NewBufferString(b)
	case []byte:
		r = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			n.t.Fatal(err)
		}
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, n.URL+path, r)
	if err != nil {
		n.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth != "" {
		req.Header.Set("X-Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		n.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		n.t.Fatal(err)
	}
	return resp.StatusCode, out
}

// bearer logs in and returns the X-Authorization value for the user.
func (n *testNode) bearer(email, password string) string {
	n.t.Helper()
	status, body := n.do("POST", "/api/auth/login", "", map[string]string{"username": email, "password": password})
	if status != http.StatusOK {
		n.t.Fatalf("login %s: %d %s", email, status, body)
	}
	var pair engine.JWTPair
	if err := json.Unmarshal(body, &pair); err != nil {
		n.t.Fatal(err)
	}
	return "Bearer " + pair.Token
}

// Logins of the demo accounts.
func (n *testNode) sysadmin() string { return n.bearer(engine.SysadminEmail, "sysadmin") }
func (n *testNode) tenant() string   { return n.bearer(engine.DemoTenantAdminEmail, "tenant") }
func (n *testNode) customer() string { return n.bearer(engine.DemoCustomerUserEmail, "customer") }

// decode unmarshals a response body into v.
func (n *testNode) decode(body []byte, v any) {
	n.t.Helper()
	if err := json.Unmarshal(body, v); err != nil {
		n.t.Fatalf("decode %s: %v", body, err)
	}
}

// apiError is the JSON error body.
type apiError struct {
	Status    int    `json:"status"`
	Message   string `json:"message"`
	ErrorCode int    `json:"errorCode"`
	Timestamp int64  `json:"timestamp"`
}

// expect sends a request and checks the status; for an error status it also checks
// the JSON error body and, when msg is not empty, its message. It returns the body.
func (n *testNode) expect(method, path, auth string, body any, status int, msg string) []byte {
	n.t.Helper()
	got, out := n.do(method, path, auth, body)
	if got != status {
		n.t.Fatalf("%s %s: status %d, want %d: %s", method, path, got, status, out)
	}
	if status >= 400 {
		var e apiError
		n.decode(out, &e)
		if e.Status != status || e.ErrorCode == 0 || e.Timestamp == 0 {
			n.t.Fatalf("%s %s: error body %s", method, path, out)
		}
		if msg != "" && e.Message != msg {
			n.t.Fatalf("%s %s: message %q, want %q", method, path, e.Message, msg)
		}
	}
	return out
}

// pair decodes a {"token","refreshToken"} body.
func (n *testNode) pair(body []byte) engine.JWTPair {
	n.t.Helper()
	var p engine.JWTPair
	n.decode(body, &p)
	if p.Token == "" || p.RefreshToken == "" {
		n.t.Fatalf("not a token pair: %s", body)
	}
	return p
}

// activate gets an activation link for a new user as auth, activates the user with
// password and returns its X-Authorization value.
func (n *testNode) activate(auth string, u *engine.User, password string) string {
	n.t.Helper()
	link := string(n.expect("GET", "/api/user/"+u.ID.ID.String()+"/activationLink", auth, nil, 200, ""))
	_, token, ok := strings.Cut(link, "activateToken=")
	if !ok || !strings.HasPrefix(link, n.URL+"/api/noauth/activate?") {
		n.t.Fatalf("activation link %q", link)
	}
	p := n.pair(n.expect("POST", "/api/noauth/activate", "", map[string]string{"activateToken": token, "password": password}, 200, ""))
	return "Bearer " + p.Token
}

// newUser creates a user as auth and activates it with password "password1".
func (n *testNode) newUser(auth string, u map[string]any) (engine.User, string) {
	n.t.Helper()
	var out engine.User
	n.decode(n.expect("POST", "/api/user?sendActivationMail=false", auth, u, 200, ""), &out)
	return out, n.activate(auth, &out, "password1")
}

// otherTenant creates tenant title with an admin and returns the admin's token.
func (n *testNode) otherTenant(title string) (tenant engine.Tenant, bearer string) {
	n.t.Helper()
	sys := n.sysadmin()
	n.decode(n.expect("POST", "/api/tenant", sys, map[string]string{"title": title}, 200, ""), &tenant)
	_, bearer = n.newUser(sys, map[string]any{
		"email": strings.ToLower(title) + "@example.com", "authority": engine.TenantAdmin, "tenantId": tenant.ID,
	})
	return tenant, bearer
}
