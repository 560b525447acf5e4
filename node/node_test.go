package node

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-iot/sluice/codec"
	"github.com/sluice-iot/sluice/config"
)

// syncBuffer is a bytes.Buffer the node's goroutines may log into.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestStartLogsJSONEngine: the ready line says which JSON engine the node runs,
// sonic's native path or its encoding/json fallback (issue #7: log it at start-up).
func TestStartLogsJSONEngine(t *testing.T) {
	cfg := config.Default()
	cfg.HTTP.BindAddress, cfg.HTTP.BindPort = "127.0.0.1", 0
	cfg.Data.Dir = t.TempDir()
	var logs syncBuffer
	n, err := Start(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
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
