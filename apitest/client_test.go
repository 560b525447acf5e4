package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-iot/sluice/config"
	"github.com/sluice-iot/sluice/node"
)

// testNode is a node under test and an HTTP client for it.
type testNode struct {
	t     *testing.T
	URL   string
	Token string // demo device access token
	node  *node.Node
}

// startNode starts an in-process node with demo data on a random port; tweak may
// change the configuration first.
func startNode(t *testing.T, tweak func(*config.Config)) *testNode {
	t.Helper()
	cfg := config.Default()
	cfg.HTTP.BindAddress = "127.0.0.1"
	cfg.HTTP.BindPort = 0
	cfg.Data.Dir = t.TempDir()
	cfg.Data.Demo = true
	if tweak != nil {
		tweak(&cfg)
	}
	n, err := node.Start(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	})
	return &testNode{t: t, URL: "http://" + n.Addr().String(), Token: n.Bootstrap.DemoDeviceToken, node: n}
}

type response struct {
	Status int
	Body   []byte
	Header http.Header
}

// JSON decodes the body into v, failing the test on error.
func (r response) JSON(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("response %d is not the JSON expected: %v\n%s", r.Status, err, r.Body)
	}
}

// do sends a request; headers are "Name: value" strings.
func (n *testNode) do(method, path string, body string, headers ...string) response {
	n.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, n.URL+path, rd)
	if err != nil {
		n.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		n.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{Status: resp.StatusCode, Body: b, Header: resp.Header}
}

// must sends a request and fails the test unless it answers want.
func (n *testNode) must(want int, method, path, body string, headers ...string) response {
	n.t.Helper()
	r := n.do(method, path, body, headers...)
	if r.Status != want {
		n.t.Fatalf("%s %s: status %d, want %d: %s", method, path, r.Status, want, r.Body)
	}
	return r
}

// login returns the X-Authorization header for the user.
func (n *testNode) login(user, password string) string {
	n.t.Helper()
	var tok struct{ Token, RefreshToken string }
	n.must(200, "POST", "/api/auth/login", `{"username":"`+user+`","password":"`+password+`"}`).JSON(n.t, &tok)
	if tok.Token == "" || tok.RefreshToken == "" {
		n.t.Fatalf("login of %s gave no tokens", user)
	}
	return "X-Authorization: Bearer " + tok.Token
}

func (n *testNode) tenantAuth() string { return n.login("tenant@thingsboard.org", "tenant") }

type entityID struct {
	EntityType string `json:"entityType"`
	ID         string `json:"id"`
}

// createDevice creates a device as the tenant admin and returns its id and token.
func (n *testNode) createDevice(auth, name string) (id, token string) {
	n.t.Helper()
	var dev struct{ ID entityID }
	n.must(200, "POST", "/api/device", `{"name":"`+name+`","type":"default"}`, auth).JSON(n.t, &dev)
	var cred struct{ CredentialsID string }
	n.must(200, "GET", "/api/device/"+dev.ID.ID+"/credentials", "", auth).JSON(n.t, &cred)
	if dev.ID.ID == "" || cred.CredentialsID == "" {
		n.t.Fatalf("device %s: no id or token", name)
	}
	return dev.ID.ID, cred.CredentialsID
}

// errorBody checks the JSON error body of r.
func errorBody(t *testing.T, r response, status int) string {
	t.Helper()
	var e struct {
		Status    int    `json:"status"`
		Message   string `json:"message"`
		ErrorCode *int   `json:"errorCode"`
		Timestamp int64  `json:"timestamp"`
	}
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Body)
	}
	if err := json.Unmarshal(r.Body, &e); err != nil || e.Status != status || e.Message == "" || e.ErrorCode == nil || e.Timestamp == 0 {
		t.Fatalf("not a JSON error body for %d: %s", status, r.Body)
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("error content type %q", ct)
	}
	return e.Message
}

// compactJSON normalises JSON text for comparisons.
func compactJSON(t *testing.T, s []byte) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, s); err != nil {
		t.Fatalf("bad JSON %q: %v", s, err)
	}
	return b.String()
}
