package fleet

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestFleetHTTPSNoRPCRoute: a fleet reaches an HTTPS target with a self-signed
// certificate when told to skip verification, and a target without the RPC poll
// route costs counted failures, not the run.
func TestFleetHTTPSNoRPCRoute(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/rpc") {
			http.NotFound(w, r)
		}
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are expected
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ctx := context.Background()

	o := Options{URL: srv.URL, Tokens: []string{"A", "B"}, Requests: 10, RPCPollers: 1, RPCTimeout: time.Second}
	f, err := New(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	r, err := f.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.Summary.OK != 0 || r.Summary.TransportErrors != 10 || r.TransportErrors["tls"] != 10 {
		t.Fatalf("without -insecure: summary %+v, transport %v", r.Summary, r.TransportErrors)
	}

	o.Insecure = true
	if f, err = New(ctx, o); err != nil {
		t.Fatal(err)
	}
	if r, err = f.Run(ctx); err != nil {
		t.Fatal(err)
	}
	clean(t, r)
	if c := r.RPC; c.Polls < 1 || c.Failed != c.Polls || c.Status["404"] != c.Polls || c.Delivered != 0 {
		t.Fatalf("rpc %+v", c)
	}
}
