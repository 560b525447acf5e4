package node

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluice-iot/sluice/codec"
	"github.com/sluice-iot/sluice/config"
	"github.com/sluice-iot/sluice/internal/testenv"
)

// TestStartLogsJSONEngine: the ready line says which JSON engine the node runs,
// sonic's native path or its encoding/json fallback (issue #7: log it at start-up).
func TestStartLogsJSONEngine(t *testing.T) {
	n, logs := startLogged(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	var ready string
	for line := range strings.SplitSeq(logs.String(), "\n") {
		if strings.Contains(line, `msg="sluice node ready"`) {
			ready = line
		}
	}
	if want := `json="` + codec.JSONEngine() + `"`; !strings.Contains(ready, want) {
		t.Fatalf("ready line %q does not carry %s\n%s", ready, want, logs.String())
	}
}

// TestUnparsedRequestLogsNoSecrets: a request fasthttp cannot parse is logged
// without its head, which holds the device token and the API key.
func TestUnparsedRequestLogsNoSecrets(t *testing.T) {
	n, logs := startServing(t)
	for _, raw := range []string{
		"GET /api/v1/SECRET_DEVICE_TOKEN/attributes HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
		"POST /api/device HTTP/1.1\r\nHost: x\r\nX-Authorization: ApiKey tb_SECRETKEY\r\nContent-Length: abc\r\n\r\n",
		// No HTTP version: fasthttp 1.74 quotes the whole head in its error,
		// SecureErrorLogMessage or not.
		"POST /api/v1/SECRET_DEVICE_TOKEN/telemetry\r\nX-Authorization: Bearer SECRETKEY\r\n\r\n",
	} {
		c, err := net.Dial("tcp", n.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte(raw)); err != nil {
			t.Fatal(err)
		}
		io.ReadAll(c) // the answer, then the server closes
		c.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), "http server") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	out := logs.String()
	if !strings.Contains(out, "http server") {
		t.Fatalf("fasthttp logged nothing for the bad requests:\n%s", out)
	}
	if strings.Contains(out, "SECRET_DEVICE_TOKEN") || strings.Contains(out, "SECRETKEY") {
		t.Fatalf("a secret reached the log:\n%s", out)
	}
}

// startServing is startLogged with the node shut down when the test ends.
func startServing(t *testing.T) (*Node, *testenv.Buffer) {
	t.Helper()
	n, logs := startLogged(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	})
	return n, logs
}

// startLogged starts a node on the embedded default, on a free loopback port,
// logging as text into the returned buffer.
func startLogged(t *testing.T) (*Node, *testenv.Buffer) {
	t.Helper()
	cfg := config.Default()
	cfg.HTTP.BindAddress, cfg.HTTP.BindPort = "127.0.0.1", 0
	cfg.Data.Dir = t.TempDir()
	logs := new(testenv.Buffer)
	n, err := Start(cfg, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return n, logs
}

func TestRedactQuoted(t *testing.T) {
	in := `error when serving connection "127.0.0.1:8080<->127.0.0.1:5555": cannot find whitespace in the first line of request "POST /api/v1/TOKEN/telemetry\r\nX-Authorization: Bearer \"JWT\"": buffer size=85`
	want := `error when serving connection "127.0.0.1:8080<->127.0.0.1:5555": cannot find whitespace in the first line of request "[redacted]": buffer size=85`
	if got := redactQuoted(in); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

// roundTrip sends raw on a new connection and reads until the server closes
// it or 2 s pass.
func roundTrip(t *testing.T, n *Node, raw string) (answer string, closed bool) {
	t.Helper()
	c, err := net.Dial("tcp", n.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte(raw)); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(c)
	return string(b), err == nil // EOF: closed; a timeout: kept open
}

// TestContentLengthAndChunked: a request with both framings is answered, then
// its connection closed, so nothing after it is read as another request.
func TestContentLengthAndChunked(t *testing.T) {
	n, _ := startServing(t)
	smuggle := "POST /api/v1/T/telemetry HTTP/1.1\r\nHost: x\r\nContent-Length: 8\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
	answer, closed := roundTrip(t, n, smuggle)
	if !closed || strings.Count(answer, "HTTP/1.1 ") != 1 || strings.Contains(answer, `"UP"`) {
		t.Fatalf("closed %v, answer:\n%s", closed, answer)
	}
	// Chunked alone keeps its connection.
	plain := "POST /api/v1/T/telemetry HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
	if answer, _ := roundTrip(t, n, plain); !strings.Contains(answer, `"UP"`) {
		t.Fatalf("chunked alone:\n%s", answer)
	}
}

// TestExpectContinueTooLarge: a body announced over the limit is refused
// before the client sends it.
func TestExpectContinueTooLarge(t *testing.T) {
	n, _ := startServing(t)
	big := "POST /api/v1/T/telemetry HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: 999999999\r\n\r\n"
	if answer, _ := roundTrip(t, n, big); !strings.HasPrefix(answer, "HTTP/1.1 413") || strings.Contains(answer, "100 Continue") {
		t.Fatalf("answer:\n%s", answer)
	}
	small := "POST /api/v1/T/telemetry HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"
	if answer, _ := roundTrip(t, n, small); !strings.HasPrefix(answer, "HTTP/1.1 100 Continue") {
		t.Fatalf("answer:\n%s", answer)
	}
}

// TestFailedFirstStartKeepsPassword: a first start that fails on its port or
// TLS files creates no system administrator, so the start that then succeeds
// prints the first password (before, it was never printed).
func TestFailedFirstStartKeepsPassword(t *testing.T) {
	dir := t.TempDir()
	bad := dir + "/bad.pem"
	if err := os.WriteFile(bad, []byte("not a pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.HTTP.BindAddress, cfg.HTTP.BindPort = "127.0.0.1", 0
	cfg.Data.Dir = dir + "/data"
	cfg.SSL.SSLEnabled, cfg.SSL.PemCert, cfg.SSL.PemKey = true, bad, bad
	log := slog.New(slog.DiscardHandler)
	if n, err := Start(cfg, log); err == nil {
		n.Shutdown(context.Background())
		t.Fatal("started with a bad TLS pair")
	}
	cfg.SSL.SSLEnabled = false
	n, err := Start(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Shutdown(context.Background())
	if n.Bootstrap.GeneratedPassword == "" {
		t.Fatal("the first password was not given by the first start that succeeded")
	}
}

// TestHealthWhileStopping: a node on its way down says so, not "starting".
func TestHealthWhileStopping(t *testing.T) {
	n, _ := startLogged(t)
	if err := n.health(); err != nil {
		t.Fatalf("running: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.health(); err != errStopping {
		t.Fatalf("stopped: %v", err)
	}
}
