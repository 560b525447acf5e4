// Package node assembles one Sluice node from its configuration: storage back end,
// engine, telemetry writer and HTTP front end, and runs it until shutdown.
package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"regexp"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluice-iot/sluice/codec"
	"github.com/sluice-iot/sluice/config"
	"github.com/sluice-iot/sluice/engine"
	"github.com/sluice-iot/sluice/httpapi"
	"github.com/sluice-iot/sluice/ingest"
	"github.com/sluice-iot/sluice/storage"
)

// Node is one running Sluice node.
type Node struct {
	cfg     config.Config
	log     *slog.Logger
	store   storage.Backend
	backend *backend
	eng     *engine.Engine
	ingest  *ingest.Writer
	api     *httpapi.Server
	stats   *engine.IngestStats // per-device ingest counts (ingeststats.go)
	srv     *fasthttp.Server
	ln      net.Listener
	ready   atomic.Bool
	// stopping tells /healthz a node on its way down from one coming up.
	stopping atomic.Bool
	served   chan error

	// Bootstrap says what the first start created (demo token, generated password).
	Bootstrap engine.BootstrapResult
}

// Start opens the back end, loads bootstrap data, and starts serving HTTP.
func Start(cfg config.Config, log *slog.Logger) (*Node, error) {
	proxies, err := cfg.HTTP.Proxies()
	if err != nil {
		return nil, fmt.Errorf("SLUICE_TRUSTED_PROXIES: %w", err)
	}
	if err := os.MkdirAll(cfg.Data.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("cannot create data folder %s (SLUICE_DATA_DIR): %w", cfg.Data.Dir, err)
	}
	// The port and the TLS pair first: a start that fails on them must not
	// have created the system administrator, whose first password is printed
	// only by a start that succeeds (it would be lost).
	ln, err := listen(cfg)
	if err != nil {
		return nil, err
	}
	stats := engine.NewIngestStats(!cfg.Production()) // embedded: stored when acknowledged
	b, err := openBackend(context.Background(), cfg, log, stats)
	if err != nil {
		ln.Close()
		return nil, err
	}
	n := &Node{cfg: cfg, log: log, backend: b, store: b.store, stats: stats, served: make(chan error, 1)}
	n.eng = engine.New(b.store, engine.Config{
		JWTSigningKey:   b.signingKey,
		Notifier:        b.notifier,
		Logger:          log,
		AccessTokenTTL:  time.Duration(cfg.Auth.TokenExpiration) * time.Second,
		RefreshTokenTTL: time.Duration(cfg.Auth.RefreshExpiration) * time.Second,
		Issuer:          cfg.Auth.Issuer,

		LoginMaxFailures:        cfg.Auth.LoginMaxFailures,
		LoginMaxAddressFailures: cfg.Auth.LoginMaxAddressFailures,
		LoginLockout:            time.Duration(cfg.Auth.LoginLockout) * time.Second,
		ActivationTTL:           time.Duration(cfg.Auth.ActivationTTL) * time.Second,

		RPCDefaultTimeout: time.Duration(cfg.Device.RPCDefaultTimeout) * time.Millisecond,
		InactivityTimeout: time.Duration(cfg.Device.InactivityTimeout) * time.Second,
		RPCMinTimeout:     time.Duration(cfg.Device.RPCMinTimeout) * time.Millisecond,
		ScriptTimeout:     time.Duration(cfg.Device.ScriptTimeout) * time.Millisecond,
		ScriptMaxMemory:   cfg.Device.ScriptMaxMemory,
		ClaimDuration:     time.Duration(cfg.Device.ClaimDuration) * time.Millisecond,
		ClaimNotByDefault: !cfg.Device.ClaimAllowByDefault,

		LongPollMaxPerNode:   cfg.HTTP.LongPollMaxPerNode,
		LongPollMaxPerDevice: cfg.HTTP.LongPollMaxPerDevice,
	})
	drop := n.eng.DropCaches
	b.dropCaches.Store(&drop)
	if n.Bootstrap, err = n.eng.Bootstrap(context.Background(), cfg.Data.Demo, cfg.Auth.SysadminPassword); err != nil {
		ln.Close()
		b.close()
		return nil, fmt.Errorf("cannot load bootstrap data: %w", err)
	}
	if err := n.eng.ResumeRollouts(context.Background()); err != nil {
		log.Warn("cannot resume the OTA rollouts a node left unfinished; the sweep tries again each minute", "err", err)
	}
	shards := cfg.Ingest.Shards
	if shards == 0 && b.spool == nil {
		// Embedded: every shard's synced batch goes through Pebble's one log, one
		// fsync at a time, so more shards only split the group commits (64 devices'
		// single points: 1 shard 26.9k-31.9k req/s mean, 2 shards 24.2k-28.2k;
		// batches alike; bench/RESULTS.md).
		shards = 1
	}
	n.ingest = ingest.NewWriter(b.store, ingest.Config{
		Shards: shards, QueueSize: cfg.Ingest.QueueSize, MaxBatchRows: cfg.Ingest.MaxBatchRows,
		Tally: stats,
	})
	api := httpapi.New(httpapi.Config{
		TrustedProxies:     proxies,
		CORSOrigins:        cfg.HTTP.CORSOrigins(),
		MaxBodySize:        cfg.Limits.MaxBodySize,
		LongPollMaxTimeout: time.Duration(cfg.HTTP.LongPollMaxTimeout) * time.Millisecond,
		ReportThreads:      cfg.Analytics.ReportThreads,
		ReportQueue:        cfg.Analytics.ReportQueue,
		ReportTimeout:      time.Duration(cfg.Analytics.ReportTimeout) * time.Millisecond,
		IngestStats:        stats,
		Limits: codec.Limits{
			MaxDepth: cfg.Limits.MaxJSONDepth, MaxObjectKeys: cfg.Limits.MaxObjectKeys,
			MaxEntries: cfg.Limits.MaxEntries, MaxKeyLen: cfg.Limits.MaxKeyLen, MaxValueLen: cfg.Limits.MaxValueLen,
		},
	}, n.eng, n.ingest, log, n.health)
	n.api = api
	if sp := b.spool; sp != nil {
		api.Gauges().NewGauge(`sluice_spool_rows`, func() float64 { r, _ := sp.Depth(); return float64(r) })
		api.Gauges().NewGauge(`sluice_spool_bytes`, func() float64 { _, by := sp.Depth(); return float64(by) })
	}
	api.Gauges().NewGauge(`sluice_ingest_queued_requests`, func() float64 { return float64(n.ingest.Queued()) })
	// None of these timeouts can cut a long poll (up to SLUICE_LONG_POLL_MAX_TIMEOUT,
	// 300 s) while its handler waits: fasthttp applies ReadTimeout to reading the
	// request only (nothing is read while the handler runs), starts WriteTimeout
	// when the handler returns (it bounds writing the response), and IdleTimeout is
	// the wait for the next request on a kept-alive connection.
	//
	// fasthttp has no header timeout of its own: Server.ReadTimeout runs from a
	// request's first byte (a connection's first request: from accepting it), and
	// HeaderReceived may set a new read deadline once the headers are in. So the
	// server's ReadTimeout is SLUICE_HTTP_HEADER_TIMEOUT, and HeaderReceived gives
	// the body SLUICE_HTTP_READ_TIMEOUT: a client trickling its headers is cut
	// early, a large upload still has the whole read timeout.
	bodyTimeout := fasthttp.RequestConfig{ReadTimeout: time.Duration(cfg.HTTP.ReadTimeout) * time.Millisecond}
	n.srv = &fasthttp.Server{
		Handler:            api.Handler(),
		ErrorHandler:       api.ErrorHandler,
		Name:               "Sluice",
		MaxRequestBodySize: cfg.Limits.MaxBodySize,
		// fasthttp's default of 4 KiB for the request line and headers is half
		// of Tomcat's (ThingsBoard's): a read of many keys in its URL, or a
		// browser's cookies, would be 431 here only.
		ReadBufferSize: cfg.HTTP.MaxHeaderSize,
		ReadTimeout:    time.Duration(cfg.HTTP.HeaderTimeout) * time.Millisecond,
		HeaderReceived: func(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
			// A message with both Content-Length and chunked encoding is read
			// as chunked (RFC 9112 §6.3), but a proxy in front may have read
			// it by its length: the connection closes after the answer, so
			// the two cannot disagree about where the next request starts.
			if h.ContentLength() == -1 && hasContentLength(h.RawHeaders()) {
				h.SetConnectionClose()
			}
			return bodyTimeout
		},
		// "Expect: 100-continue" with a body over the limit is refused before
		// the client sends it, answered and counted as ErrorHandler answers a
		// body sent over it.
		ExpectHandler: api.ExpectHandler,
		WriteTimeout:  time.Duration(cfg.HTTP.WriteTimeout) * time.Millisecond,
		IdleTimeout:   time.Duration(cfg.HTTP.IdleTimeout) * time.Millisecond,
		// Responses written while shutting down close their connection, so a client
		// reconnects (to another node) instead of reusing it.
		CloseOnShutdown: true,
		// fasthttp logs a request it cannot parse; without this, with up to 400
		// bytes of its raw head: the device token in the path, the API key or JWT
		// in X-Authorization.
		SecureErrorLogMessage: true,
		Logger:                fasthttpLogger{log},
		// fasthttp would parse every multipart body as it reads it, another
		// copy of it, and refuse a malformed one with no word of why; the one
		// route that takes multipart (an OTA upload) reads its part itself.
		DisablePreParseMultipartForm: true,
	}
	n.ln = ln
	n.startIngestStats()
	go func() { n.served <- n.srv.Serve(ln) }()
	n.ready.Store(true)
	log.Info("sluice node ready", "addr", ln.Addr().String(), "https", cfg.SSL.SSLEnabled, "data", cfg.Data.Dir,
		"demo", cfg.Data.Demo, "backend", backendName(cfg), "json", codec.JSONEngine())
	return n, nil
}

// listen opens the HTTP port, with HTTPS beside plain HTTP when SSL is on.
func listen(cfg config.Config) (net.Listener, error) {
	addr := net.JoinHostPort(cfg.HTTP.BindAddress, strconv.Itoa(cfg.HTTP.BindPort))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cannot listen on %s (HTTP_BIND_ADDRESS, HTTP_BIND_PORT): %w", addr, err)
	}
	if cfg.SSL.SSLEnabled {
		tls, err := dualListener(ln, cfg.SSL.PemCert, cfg.SSL.PemKey)
		if err != nil {
			ln.Close()
			return nil, err
		}
		ln = tls
	}
	return ln, nil
}

// Addr is the address the node listens on.
func (n *Node) Addr() net.Addr { return n.ln.Addr() }

// Engine gives tests and tools access to the node's engine.
func (n *Node) Engine() *engine.Engine { return n.eng }

// Done is closed with the serve error if the listener stops by itself.
func (n *Node) Done() <-chan error { return n.served }

// Shutdown stops accepting requests, ends open long polls (503), lets running
// requests finish (within ctx), commits every queued telemetry batch, and closes
// the store.
func (n *Node) Shutdown(ctx context.Context) error {
	n.stopping.Store(true)
	n.ready.Store(false)
	n.api.Close()
	err := n.srv.ShutdownWithContext(ctx)
	n.ingest.Close()
	err = errors.Join(err, n.closeIngestStats())
	n.eng.Close(ctx) // its last sweeps, after the last writes: ingest counts included
	return errors.Join(err, n.closeStore())
}

func (n *Node) closeStore() error { return n.backend.close() }

// health says why the node cannot serve, for /healthz: it is starting or
// stopping, or its spool failed a sync and refuses every write until a restart.
func (n *Node) health() error {
	if !n.ready.Load() {
		if n.stopping.Load() {
			return errStopping
		}
		return errNotReady
	}
	if sp := n.backend.spool; sp != nil {
		return sp.Failed()
	}
	return nil
}

var (
	errNotReady = errors.New("Node is starting")
	errStopping = errors.New("Node is stopping")
)

// hasContentLength tells whether raw request headers hold Content-Length.
func hasContentLength(raw []byte) bool {
	for line := range bytes.SplitSeq(raw, []byte("\n")) {
		name, _, ok := bytes.Cut(line, []byte(":"))
		if ok && bytes.EqualFold(bytes.TrimSpace(name), []byte("Content-Length")) {
			return true
		}
	}
	return false
}

type fasthttpLogger struct{ log *slog.Logger }

func (l fasthttpLogger) Printf(format string, args ...any) {
	l.log.Warn("http server", "msg", redactQuoted(fmt.Sprintf(format, args...)))
}

// quoted matches a %q-quoted string; address is what fasthttp quotes of a
// connection ("127.0.0.1:8080<->127.0.0.1:5555").
var (
	quoted  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	address = regexp.MustCompile(`^"[0-9A-Za-z.:\[\]%]*(<->[0-9A-Za-z.:\[\]%]*)?"$`)
)

// redactQuoted drops every quoted string but addresses from a fasthttp log
// line. SecureErrorLogMessage does not cover them all: fasthttp 1.74 quotes
// the whole buffered request (device token in the path, X-Authorization) in
// the error of a request line it cannot parse.
func redactQuoted(msg string) string {
	return quoted.ReplaceAllStringFunc(msg, func(q string) string {
		if address.MatchString(q) {
			return q
		}
		return `"[redacted]"`
	})
}

func backendName(cfg config.Config) string {
	if cfg.Production() {
		return "clickhouse+redis"
	}
	return "embedded"
}
