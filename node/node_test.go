package node

import (
	"context"
	"log/slog"
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
	cfg := config.Default()
	cfg.HTTP.BindAddress, cfg.HTTP.BindPort = "127.0.0.1", 0
	cfg.Data.Dir = t.TempDir()
	var logs testenv.Buffer
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
