// Package bench measures Sluice against baselines under one load generator
// (loadtest) with the same payloads: a no-op fasthttp handler (the ceiling), a
// net/http + encoding/json handler (the naive baseline), and Sluice in-process on the
// embedded back end and, when configured, on ClickHouse + Redis. cmd/sluice-bench
// prints the table; the codec benchmarks against encoding/json and fastjson sit
// beside it.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluice-iot/sluice/config"
	"github.com/sluice-iot/sluice/node"
	"github.com/sluice-iot/sluice/storage/clickhouse"
	"github.com/sluice-iot/sluice/storage/redis"
)

// Target is a running server under test on loopback.
type Target struct {
	Name   string
	Addr   string   // host:port
	Paths  []string // where telemetry is posted: worker w posts to Paths[w % len(Paths)]
	Sluice bool     // a Sluice node, compared with the ceiling and the baseline
	close  func() error
}

// Close stops the server and removes what it wrote.
func (t *Target) Close() error { return t.close() }

func listen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

// StartCeiling starts a fasthttp server whose handler reads the body and answers
// 200: what the HTTP layer and the load generator cost by themselves.
func StartCeiling() (*Target, error) {
	ln, err := listen()
	if err != nil {
		return nil, err
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		_ = ctx.PostBody()
		ctx.SetStatusCode(fasthttp.StatusOK)
	}}
	go srv.Serve(ln)
	return &Target{Name: "ceiling (fasthttp no-op)", Addr: ln.Addr().String(), Paths: []string{"/api/v1/TOKEN/telemetry"},
		close: srv.Shutdown}, nil
}

// StartBaseline starts a net/http server whose handler reads the body and parses it
// with encoding/json into map[string]any ([]any of them for a batch), answering 200,
// or 400 when it is not JSON: the naive server, storing nothing.
func StartBaseline() (*Target, error) {
	ln, err := listen()
	if err != nil {
		return nil, err
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusOK)
	})}
	go srv.Serve(ln)
	return &Target{Name: "baseline (net/http+encoding/json)", Addr: ln.Addr().String(), Paths: []string{"/api/v1/TOKEN/telemetry"},
		close: func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return srv.Shutdown(ctx)
		}}, nil
}

// StartSluice starts a node in-process on the embedded default, with demo data in a
// fresh temporary folder. Telemetry goes to the demo device, or with devices > 1 to
// that many devices created for the run. The node logs to log (nil: nowhere).
func StartSluice(devices int, log *slog.Logger) (*Target, error) {
	return startNode("sluice embedded", devices, log, func(c *config.Config) {
		// The environment may name ClickHouse and Redis for the other target.
		d := config.Default()
		c.ClickHouse, c.Redis = d.ClickHouse, d.Redis
	}, nil)
}

// StartSluiceProduction starts a node in-process on ClickHouse at chAddr and Redis at
// redisAddr, in a fresh database and key prefix that Close drops again; devices and
// log as for StartSluice.
func StartSluiceProduction(chAddr, redisAddr string, devices int, log *slog.Logger) (*Target, error) {
	var b [6]byte
	rand.Read(b[:])
	name := hex.EncodeToString(b[:])
	database, prefix := "sluice_bench_"+name, "sluicebench:"+name+":"
	drop := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var errs []error
		if s, err := clickhouse.Open(ctx, clickhouse.Options{Addrs: []string{chAddr}, Database: database}); err == nil {
			errs = append(errs, s.Drop(ctx), s.Close())
		} else {
			errs = append(errs, err)
		}
		if s, err := redis.Open(ctx, redis.Options{Addrs: []string{redisAddr}, Prefix: prefix}); err == nil {
			errs = append(errs, s.Drop(ctx), s.Close())
		} else {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
	return startNode("sluice clickhouse+redis", devices, log, func(c *config.Config) {
		c.ClickHouse.CHAddr = chAddr
		c.ClickHouse.CHDatabase = database
		c.Redis.RedisAddr = redisAddr
		c.Redis.RedisPrefix = prefix
	}, drop)
}

func startNode(name string, devices int, log *slog.Logger, tweak func(*config.Config), drop func() error) (*Target, error) {
	dir, err := os.MkdirTemp("", "sluice-bench-")
	if err != nil {
		return nil, err
	}
	// The node's settings from the environment, as the binary takes them
	// (SLUICE_SPOOL_SHARDS=2, …), to measure other configurations.
	cfg, err := config.Load("", os.Environ())
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	cfg.HTTP.BindAddress, cfg.HTTP.BindPort = "127.0.0.1", 0
	cfg.Data.Dir, cfg.Data.Demo = dir, true
	if tweak != nil {
		tweak(&cfg)
	}
	cleanup := func() error {
		var err error
		if drop != nil {
			err = drop()
		}
		return errors.Join(err, os.RemoveAll(dir))
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	n, err := node.Start(cfg, log)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("cannot start %s: %w", name, err), cleanup())
	}
	t := &Target{Name: name, Addr: n.Addr().String(), Paths: []string{"/api/v1/" + n.Bootstrap.DemoDeviceToken + "/telemetry"},
		Sluice: true, close: func() error { return errors.Join(shutdown(n, drop), cleanup()) }}
	if devices > 1 {
		t.Name = fmt.Sprintf("%s, %d devices", name, devices)
		if t.Paths, err = createDevices("http://"+t.Addr, devices); err != nil {
			return nil, errors.Join(err, t.Close())
		}
	}
	return t, nil
}

// shutdown stops n. The spool delivers its whole backlog to ClickHouse before the
// node's Shutdown returns (ingest.Spool's drain checks for Close only between failed
// deliveries), tens of seconds after a run; the data is throwaway, so past 10 s the
// database is dropped first, which fails the deliveries and ends them.
func shutdown(n *node.Node, drop func() error) error {
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		done <- n.Shutdown(ctx)
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
	}
	if drop == nil {
		return <-done
	}
	derr := drop()
	<-done // errors of the deliveries the drop failed
	return derr
}

// createDevices creates n devices through the REST API as the demo tenant
// administrator and returns their telemetry paths.
func createDevices(url string, n int) ([]string, error) {
	var tok struct{ Token string }
	if err := post(url+"/api/auth/login", "", `{"username":"tenant@thingsboard.org","password":"tenant"}`, &tok); err != nil {
		return nil, err
	}
	paths := make([]string, n)
	for i := range paths {
		token := fmt.Sprintf("bench-%d-%x", i, mrand.Uint64())
		body := fmt.Sprintf(`{"name":"bench-%d","type":"default"}`, i)
		if err := post(url+"/api/device?accessToken="+token, tok.Token, body, nil); err != nil {
			return nil, fmt.Errorf("cannot create device %d: %w", i, err)
		}
		paths[i] = "/api/v1/" + token + "/telemetry"
	}
	return paths, nil
}

func post(url, jwt, body string, v any) error {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if jwt != "" {
		req.Header.Set("X-Authorization", "Bearer "+jwt)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: status %d: %s", req.URL.Path, resp.StatusCode, b)
	}
	if v != nil {
		return json.Unmarshal(b, v)
	}
	return nil
}
