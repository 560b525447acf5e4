package httpapi

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
	"golang.org/x/crypto/bcrypt"

	"github.com/sluice-iot/sluice/engine"
	"github.com/sluice-iot/sluice/ingest"
	"github.com/sluice-iot/sluice/storage"
	"github.com/sluice-iot/sluice/storage/embedded"
)

// gatedTelemetry holds every Write until the test opens the gate.
type gatedTelemetry struct {
	storage.Telemetry
	entered chan struct{}
	gate    chan struct{}
}

func (g *gatedTelemetry) Write(ctx context.Context, rows []storage.Row) error {
	g.entered <- struct{}{}
	<-g.gate
	return g.Telemetry.Write(ctx, rows)
}

// TestFullQueueAnswers503 fills the one-slot queue of a one-shard writer while its
// commit is held, and expects the device to get 503 naming the setting to raise.
func TestFullQueueAnswers503(t *testing.T) {
	db, err := embedded.Open(t.TempDir(), embedded.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	eng := engine.New(db, engine.Config{JWTSigningKey: []byte("httpapi-test-key"), BcryptCost: bcrypt.MinCost})
	demo, err := eng.Bootstrap(context.Background(), true, "")
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedTelemetry{Telemetry: db, entered: make(chan struct{}, 10), gate: make(chan struct{})}
	w := ingest.NewWriter(g, ingest.Config{Shards: 1, QueueSize: 1})
	defer w.Close()
	h := New(Config{MaxBodySize: 1 << 20}, eng, w, nil, nil).Handler()

	type result struct {
		status int
		body   string
	}
	results := make(chan result, 3)
	post := func() {
		var req fasthttp.Request
		req.Header.SetMethod("POST")
		req.SetRequestURI("/api/v1/" + demo.DemoDeviceToken + "/telemetry")
		req.SetBodyString(`{"t":1}`)
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, nil, nil) // a context as a server would give it
		h(&ctx)
		results <- result{ctx.Response.StatusCode(), string(ctx.Response.Body())}
	}
	go post()
	select {
	case <-g.entered: // the first request's commit holds the shard
	case r := <-results:
		t.Fatalf("first request did not reach the store: %d %s", r.status, r.body)
	}
	go post() // one of these two waits in the queue,
	go post() // the other finds it full
	r := <-results
	if r.status != 503 || !strings.Contains(r.body, "SLUICE_INGEST_QUEUE_SIZE") || !strings.Contains(r.body, `"errorCode":`) {
		t.Fatalf("full queue: %d %s", r.status, r.body)
	}
	close(g.gate)
	for range 2 {
		if r := <-results; r.status != 200 {
			t.Fatalf("queued request: %d %s", r.status, r.body)
		}
	}
}
