// Package fleet simulates a fleet of devices against a Sluice or ThingsBoard
// deployment: it creates, provisions or is given the devices, drives their
// telemetry (and optionally attribute posts and RPC long polls) with loadtest, and
// reports the run (loadtest/report). cmd/sluice-load is its command line.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/sluice-iot/sluice/loadtest"
	"github.com/sluice-iot/sluice/loadtest/report"
)

// Options describe a fleet and its traffic. URL and one way to get devices are
// required; the rest has defaults.
type Options struct {
	// URL is the target: http://host:port or https://host:port, with the path
	// prefix of a deployment behind one (https://host/tb): every call goes under it.
	URL string
	// Insecure skips TLS certificate verification (self-signed test deployments).
	Insecure bool

	// Tokens, when set, are the fleet's devices (the first Devices of them when
	// Devices is set). Otherwise Devices devices are provisioned with ProvisionKey
	// and ProvisionSecret, or created over the REST API after logging in as User with
	// Password, or with APIKey. A login also lets Cleanup delete provisioned devices.
	Tokens                        []string
	Devices                       int
	User, Password, APIKey        string
	ProvisionKey, ProvisionSecret string
	// NamePrefix starts the names of the devices the fleet makes (default
	// "sluice-load"), DeviceType is their type (default "default").
	NamePrefix, DeviceType string
	// SetupConcurrency is how many devices are made or deleted at once (default 16).
	SetupConcurrency int
	// OnSetup, when set, sees the progress of making the devices.
	OnSetup func(done, total int)

	// Profile is the telemetry payload (default loadtest.ProfileSingle); BatchSize
	// the rows of a ProfileBatch request (default 10).
	Profile   loadtest.Profile
	BatchSize int
	// Rate is requests per second over all connections, open loop; 0 sends flat
	// out, each connection as soon as its previous answer arrived.
	Rate        float64
	Connections int // default 16
	// Duration and Requests bound the run (at least one is needed); Warmup runs
	// first, unrecorded; Timeout bounds each request (default 10s).
	Duration, Warmup, Timeout time.Duration
	Requests                  int64
	// AttributesEvery > 0 makes every device post client attributes instead of
	// telemetry on every AttributesEvery-th of its requests.
	AttributesEvery int
	// RPCPollers devices (the first ones) also long-poll for server-side RPC, with
	// RPCTimeout as the poll's timeout (default 25s: under the 30 s async request
	// timeout of a ThingsBoard monolith, which answers 503 at 30 s).
	RPCPollers int
	RPCTimeout time.Duration
	// Encoding, when set, compresses every telemetry and attribute body with it
	// ("gzip" or "zstd", loadtest.Config.Encoding) and sends Content-Encoding.
	// Sluice accepts both; ThingsBoard does not decompress device API bodies.
	Encoding string
	// Interval is the resolution of the report's timeline and of OnSample (default 1s).
	Interval time.Duration
	OnSample func(loadtest.Sample)
	// Abort, when closed after Run's ctx ended, ends Run's wait for the requests in
	// flight and for the RPC pollers' first polls: a second Ctrl-C. Run then
	// reports at once, without those (report.Summary.Aborted, and
	// report.RPC.FirstPollsCut).
	Abort <-chan struct{}
	// OnFirstPollsWait, when set, is called when the load has ended but Run still
	// waits for the first polls of pending RPC pollers, for up to left (the rest
	// of the poll timeout; the server should answer by then). Only Abort ends
	// that wait early.
	OnFirstPollsWait func(pending int, left time.Duration)
}

func (o *Options) normalize() error {
	if o.URL == "" {
		return errors.New("no target URL")
	}
	if o.Devices < 0 || o.Connections < 0 || o.Rate < 0 || o.BatchSize < 0 || o.RPCPollers < 0 || o.AttributesEvery < 0 || o.SetupConcurrency < 0 {
		return errors.New("negative devices, connections, rate, batch size, RPC pollers, attributes interval or setup concurrency")
	}
	// Checked here, before any device is made, not by loadtest.Run after.
	if o.Duration < 0 || o.Warmup < 0 || o.Timeout < 0 || o.Requests < 0 || o.Interval < 0 || o.RPCTimeout < 0 {
		return errors.New("negative duration, warm-up, timeout, requests, interval or RPC timeout")
	}
	if math.IsNaN(o.Rate) || math.IsInf(o.Rate, 0) {
		return fmt.Errorf("rate %v is not a number of requests per second", o.Rate)
	}
	if o.Rate > loadtest.MaxRate {
		return fmt.Errorf("rate %g is above the most the load generator schedules, %d requests per second", o.Rate, loadtest.MaxRate)
	}
	if len(o.Tokens) == 0 && o.Devices == 0 {
		return errors.New("no devices: give a tokens file, or a number of devices to create or provision")
	}
	if o.ProvisionKey != "" && o.ProvisionSecret == "" {
		return errors.New("a provision key needs its provision secret")
	}
	if o.Profile == "" {
		o.Profile = loadtest.ProfileSingle
	}
	if _, err := loadtest.ParseProfile(string(o.Profile)); err != nil {
		return err
	}
	if err := loadtest.CheckEncoding(o.Encoding); err != nil {
		return err
	}
	setDefault(&o.NamePrefix, "sluice-load")
	setDefault(&o.DeviceType, "default")
	setDefault(&o.SetupConcurrency, 16)
	setDefault(&o.BatchSize, 10)
	setDefault(&o.Connections, 16)
	setDefault(&o.Timeout, 10*time.Second)
	setDefault(&o.RPCTimeout, DefaultRPCTimeout)
	setDefault(&o.Interval, time.Second)
	return nil
}

// DefaultRPCTimeout is the RPC long poll's timeout when Options.RPCTimeout is 0:
// under the 30 s async request timeout of a ThingsBoard monolith (Spring's,
// which answers 503 at 30 s), so a poll ends with its own timeout there too.
const DefaultRPCTimeout = 25 * time.Second

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Run sends the fleet's traffic and returns the report. It returns an error only
// when the run could not start; failed requests are in the report.
func (f *Fleet) Run(ctx context.Context) (*report.Report, error) {
	if len(f.Devices) == 0 {
		return nil, errors.New("the fleet has no devices")
	}
	o := f.opts
	started := time.Now()
	t := newTraffic(f.Devices, f.prefix, o.Profile, o.BatchSize, o.AttributesEvery)

	var rpc *rpcPollers
	var wg sync.WaitGroup
	pollCtx, stopPolls := context.WithCancel(ctx)
	defer stopPolls()
	// The pollers' first polls outlive ctx (every poller is counted once), but
	// not an Abort.
	firstCtx, endFirst := context.WithCancel(context.WithoutCancel(ctx))
	defer endFirst()
	go func() {
		select {
		case <-o.Abort:
			endFirst()
		case <-firstCtx.Done():
		}
	}()
	if o.RPCPollers > 0 {
		rpc = &rpcPollers{client: f.client, timeout: o.RPCTimeout}
		tokens := make([]string, min(o.RPCPollers, len(f.Devices)))
		for i := range tokens {
			tokens[i] = f.Devices[i].Token
		}
		rpc.start(len(tokens))
		wg.Go(func() { rpc.run(pollCtx, firstCtx, tokens) })
	}

	cfg := loadtest.Config{
		Addr: f.addr, TLS: f.tls, Connections: o.Connections, Rate: o.Rate,
		Duration: o.Duration, Requests: o.Requests, Warmup: o.Warmup, Timeout: o.Timeout, Encoding: o.Encoding,
		Generate: t.generate, Interval: o.Interval, OnSample: o.OnSample, Stop: ctx.Done(), Abort: o.Abort,
	}
	if f.tls {
		cfg.TLSConfig = f.tlsConfig()
	}
	res, err := loadtest.Run(cfg)
	stopPolls()
	if rpc != nil && o.OnFirstPollsWait != nil && firstCtx.Err() == nil {
		if pending, left := rpc.firstPolls(time.Now()); pending > 0 {
			o.OnFirstPollsWait(pending, left)
		}
	}
	wg.Wait()
	if err != nil {
		return nil, fmt.Errorf("cannot start the load: %w", err)
	}

	r := report.Build(res)
	r.Target, r.StartedAt = f.client.base, started
	r.Setup = report.Setup{Mode: f.Mode, Devices: len(f.Devices), Seconds: f.SetupTime.Seconds()}
	r.Config = report.Config{
		Profile: string(o.Profile), Encoding: o.Encoding, Rate: o.Rate, Connections: o.Connections,
		DurationSeconds: o.Duration.Seconds(), Requests: o.Requests, WarmupSeconds: o.Warmup.Seconds(),
		TimeoutSeconds: o.Timeout.Seconds(), AttributesEvery: o.AttributesEvery,
	}
	if o.Profile.Timestamped() {
		r.Config.BatchSize = o.BatchSize
	}
	if rpc != nil {
		r.RPC = rpc.report()
		r.Config.RPCPollers, r.Config.RPCTimeoutMs = r.RPC.Pollers, o.RPCTimeout.Milliseconds()
	}
	return r, nil
}
