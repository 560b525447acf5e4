package fleet

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Device is one simulated device.
type Device struct {
	Name  string // empty for a device read from a tokens file
	ID    string // set for a device the fleet created (or found again to delete it)
	Token string // access token of the device API
}

// Setup modes, as the report names them.
const (
	ModeCreate    = "create"
	ModeProvision = "provision"
	ModeTokens    = "tokens"
)

// Fleet is a set of devices on one target, ready to send traffic.
type Fleet struct {
	// Mode is how the devices were obtained: ModeCreate, ModeProvision or ModeTokens.
	Mode    string
	Devices []Device
	// SetupTime is how long creating or provisioning the devices took.
	SetupTime time.Duration
	// Names is the pattern of the names of the devices this fleet made or
	// tried to make, "<NamePrefix>-<run>-*" (run: 6 hex digits, new for every
	// fleet); empty for a fleet from tokens.
	Names string

	opts   Options
	client *client
	addr   string // host:port
	prefix string // the path of the URL, "" or "/tb": every call goes under it
	tls    bool
	// unsure are devices whose create or provision failed without an answer
	// that says it did not happen (a timeout, a dropped connection, a 5xx that a
	// proxy may send after the server made it): they may exist, so Cleanup looks
	// them up by name.
	unsure []Device
	// deleted[i] is set once Cleanup deleted Devices[i] (or found it gone).
	deleted []bool
}

// New obtains the fleet opts describes: the Tokens given, or Devices devices
// provisioned with ProvisionKey and ProvisionSecret, or created over the REST API
// after logging in as User (or with APIKey). On an error after some devices were
// made it returns them too, so that Cleanup can remove them.
func New(ctx context.Context, opts Options) (*Fleet, error) {
	if err := opts.normalize(); err != nil {
		return nil, err
	}
	u, err := url.Parse(opts.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("bad target URL %q: want http://host:port or https://host:port, optionally with a path (https://host/tb)", opts.URL)
	}
	// A deployment behind a path prefix (a proxy's https://host/tb) has the whole
	// API under it: the REST calls, the device API, the RPC polls.
	f := &Fleet{opts: opts, tls: u.Scheme == "https", addr: u.Host, prefix: strings.TrimRight(u.EscapedPath(), "/")}
	if u.Port() == "" {
		port := "80"
		if f.tls {
			port = "443"
		}
		f.addr = net.JoinHostPort(u.Hostname(), port)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = f.tlsConfig()
	transport.MaxIdleConnsPerHost = opts.SetupConcurrency + opts.RPCPollers
	f.client = &client{base: u.Scheme + "://" + u.Host + f.prefix, http: &http.Client{Transport: transport}, timeout: opts.Timeout}

	start := time.Now()
	defer func() { f.SetupTime = time.Since(start) }()
	switch {
	case len(opts.Tokens) > 0:
		f.Mode = ModeTokens
		for _, t := range opts.Tokens {
			f.Devices = append(f.Devices, Device{Token: t})
		}
		if opts.Devices > 0 && opts.Devices < len(f.Devices) {
			f.Devices = f.Devices[:opts.Devices]
		}
		return f, nil
	case opts.ProvisionKey != "":
		f.Mode = ModeProvision
		if err := f.login(ctx); err != nil { // only needed to clean up
			return nil, err
		}
		return f, f.make(ctx, func(ctx context.Context, d *Device) (err error) {
			d.Token, err = f.client.provision(ctx, d.Name, opts.ProvisionKey, opts.ProvisionSecret)
			return err
		})
	default:
		f.Mode = ModeCreate
		if err := f.login(ctx); err != nil {
			return nil, err
		}
		if f.client.authHeader() == "" {
			return nil, errors.New("no devices: give a tokens file, a provision key and secret, or a login (user and password, or an API key) to create devices")
		}
		return f, f.make(ctx, func(ctx context.Context, d *Device) (err error) {
			d.Token = randomHex(10)
			d.ID, err = f.client.createDevice(ctx, d.Name, opts.DeviceType, d.Token)
			return err
		})
	}
}

func (f *Fleet) tlsConfig() *tls.Config {
	return &tls.Config{InsecureSkipVerify: f.opts.Insecure} //nolint:gosec // only when asked for, for self-signed test deployments
}

func (f *Fleet) login(ctx context.Context) error {
	switch {
	case f.opts.APIKey != "":
		f.client.setAuth("ApiKey " + f.opts.APIKey)
	case f.opts.User != "":
		return f.client.login(ctx, f.opts.User, f.opts.Password)
	}
	return nil
}

// make names opts.Devices devices and runs one for each, SetupConcurrency at a
// time, keeping the devices that succeeded; it stops at the first error.
func (f *Fleet) make(ctx context.Context, one func(context.Context, *Device) error) error {
	run := randomHex(3)
	f.Names = f.opts.NamePrefix + "-" + run + "-*"
	devices := make([]Device, f.opts.Devices)
	for i := range devices {
		devices[i].Name = fmt.Sprintf("%s-%s-%d", f.opts.NamePrefix, run, i)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next, done atomic.Int64
	ok, unsure := make([]bool, len(devices)), make([]bool, len(devices))
	var wg sync.WaitGroup
	for range min(f.opts.SetupConcurrency, len(devices)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(devices) || ctx.Err() != nil {
					return
				}
				if err := one(ctx, &devices[i]); err != nil {
					unsure[i] = !notMade(err)
					cancel(err)
					return
				}
				ok[i] = true
				if n := int(done.Add(1)); f.opts.OnSetup != nil {
					f.opts.OnSetup(n, len(devices))
				}
			}
		})
	}
	wg.Wait()
	for i, d := range devices {
		if ok[i] {
			f.Devices = append(f.Devices, d)
		} else if unsure[i] {
			d.ID = "" // found by name at cleanup
			f.unsure = append(f.unsure, d)
		}
	}
	return context.Cause(ctx)
}

// Unsure is the number of devices whose create or provision failed in a way
// that leaves it unknown whether they were made (Cleanup looks them up by name).
func (f *Fleet) Unsure() int { return len(f.unsure) }

// Remaining is the fleet's devices that Cleanup has not deleted: all of them
// before it ran, and of a fleet from tokens; after it, those it failed to delete
// or did not get to (interrupted).
func (f *Fleet) Remaining() []Device {
	var left []Device
	for i, d := range f.Devices {
		if i >= len(f.deleted) || !f.deleted[i] {
			left = append(left, d)
		}
	}
	return left
}

// Made reports whether the fleet made its devices (create or provision), so
// that they stay on the target unless Cleanup deletes them.
func (f *Fleet) Made() bool { return f.Mode == ModeCreate || f.Mode == ModeProvision }

// Cleanup deletes the devices the fleet created or provisioned; a fleet from a
// tokens file deletes nothing. Provisioned devices are found by name, which needs a
// login. A device already gone (404) counts as deleted: a retried delete whose
// first attempt got no answer finds it so.
func (f *Fleet) Cleanup(ctx context.Context) error {
	if f.Mode == ModeTokens || len(f.Devices)+len(f.unsure) == 0 {
		return nil
	}
	if f.client.authHeader() == "" {
		return errors.New("cannot delete the provisioned devices without a login: give a user and password or an API key")
	}
	var errs []error
	var mu sync.Mutex
	var next atomic.Int64
	var wg sync.WaitGroup
	all := len(f.Devices) + len(f.unsure)
	if len(f.deleted) != len(f.Devices) {
		f.deleted = make([]bool, len(f.Devices))
	}
	for range min(f.opts.SetupConcurrency, all) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= all || ctx.Err() != nil {
					return
				}
				var err error
				if i < len(f.Devices) {
					err = f.delete(ctx, &f.Devices[i])
				} else {
					err = f.delete(ctx, &f.unsure[i-len(f.Devices)]) // a 404: it was not made after all
				}
				if isNotFound(err) {
					err = nil
				}
				if err == nil && i < len(f.Devices) {
					f.deleted[i] = true // each index is one goroutine's
				}
				mu.Lock()
				if err != nil && len(errs) < 10 {
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(append(errs, ctx.Err())...)
}

// notMade tells whether the failure of a create or provision says the device was
// not made: only a 4xx answer does, or a provision answered 2xx with a status
// other than SUCCESS (NOT_FOUND, FAILURE), unless either came to a retry after a
// 503 (the first attempt may have made the device: the retry is then a
// duplicate). No answer, a cancelled wait, or a 5xx (a proxy's 502 or 504 may
// come after the server made the device) leaves it unknown.
func notMade(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && (ae.refused || ae.status >= 400 && ae.status < 500) && !ae.afterUnsure
}

// isNotFound tells an API answer of 404.
func isNotFound(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.status == http.StatusNotFound
}

func (f *Fleet) delete(ctx context.Context, d *Device) error {
	if d.ID == "" {
		id, err := f.client.deviceID(ctx, d.Name)
		if err != nil {
			return err
		}
		d.ID = id
	}
	return f.client.deleteDevice(ctx, d.ID)
}

// ReadTokens reads access tokens, one per line; blank lines and lines starting
// with # are skipped.
func ReadTokens(r io.Reader) ([]string, error) {
	var tokens []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		tokens = append(tokens, line)
	}
	return tokens, sc.Err()
}

// WriteTokens writes the devices' access tokens, one per line: the format
// ReadTokens reads.
func WriteTokens(w io.Writer, devices []Device) error {
	bw := bufio.NewWriter(w)
	for _, d := range devices {
		bw.WriteString(d.Token)
		bw.WriteByte('\n')
	}
	return bw.Flush()
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
