package node

import (
	"context"
	"io"
	"log/slog"
	"net"
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
	n, logs := startLogged(t)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	}()
	for _, raw := range []string{
		"GET /api/v1/SECRET_DEVICE_TOKEN/attributes HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
		"POST /api/device HTTP/1.1\r\nHost: x\r\nX-Authorization: ApiKey tb_SECRETKEY\r\nContent-Length: abc\r\n\r\n",
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
