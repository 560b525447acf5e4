package script

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Limits bound one script run.
type Limits struct {
	// Timeout is the longest run (1 s by default).
	Timeout time.Duration
	// MaxMemory is the live heap a run may hold, in bytes (16 MiB by default).
	MaxMemory int
	// Workers is how many scripts run at once on this node, each in its own
	// process (GOMAXPROCS, at least 2 and at most 4, by default).
	Workers int
}

// killGrace is how long past Timeout the node waits for a worker before it
// kills it: the worker interrupts the script itself at Timeout, unless the
// script is stuck inside a native built-in.
const killGrace = time.Second

// Runner runs scripts in a pool of worker processes, started when first needed
// and kept while they are healthy. It is safe for concurrent use.
type Runner struct {
	lim   Limits
	idle  chan *proc
	slots chan struct{} // one token per running or idle worker

	mu     sync.Mutex
	closed bool
}

// New returns a runner with the limits l.
func New(l Limits) *Runner {
	if l.Timeout <= 0 {
		l.Timeout = time.Second
	}
	if l.MaxMemory <= 0 {
		l.MaxMemory = 16 << 20
	}
	if l.Workers <= 0 {
		l.Workers = min(max(runtime.GOMAXPROCS(0), 2), 4)
	}
	return &Runner{lim: l, idle: make(chan *proc, l.Workers), slots: make(chan struct{}, l.Workers)}
}

// Limits returns the limits the runner applies.
func (r *Runner) Limits() Limits { return r.lim }

// Run calls the script src with params (JSON; empty means null) and device. It
// returns the JSON of the return value, or nil when the script returned
// undefined. A failed run is a *Error.
func (r *Runner) Run(ctx context.Context, src string, params []byte, device Device) ([]byte, error) {
	p, err := r.acquire(ctx)
	if err != nil {
		return nil, err
	}
	if len(params) == 0 {
		params = nil // null
	}
	req := request{Src: src, Params: params, Device: device, TimeoutMs: r.lim.Timeout.Milliseconds()}
	res, err := p.call(req, r.lim.Timeout+killGrace)
	if err != nil {
		r.discard(p)
		return nil, err
	}
	if res.Kind == KindMemory || p.dead() {
		r.discard(p) // a worker exits after a memory error
	} else {
		r.release(p)
	}
	if res.Kind != "" {
		return nil, &Error{Kind: res.Kind, Msg: res.Error}
	}
	if res.Undefined {
		return nil, nil
	}
	return res.Result, nil
}

// Close stops every idle worker; workers busy now stop when their run ends.
func (r *Runner) Close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	for {
		select {
		case p := <-r.idle:
			r.discard(p)
		default:
			return
		}
	}
}

// acquire returns an idle worker, or starts one when the pool has room; it
// waits at most Timeout for either.
func (r *Runner) acquire(ctx context.Context) (*proc, error) {
	select {
	case p := <-r.idle:
		return p, nil
	default:
	}
	wait := time.NewTimer(r.lim.Timeout)
	defer wait.Stop()
	select {
	case p := <-r.idle:
		return p, nil
	case r.slots <- struct{}{}:
		p, err := r.start()
		if err != nil {
			<-r.slots
			return nil, err
		}
		return p, nil
	case <-wait.C:
		return nil, &Error{Kind: KindBusy, Msg: fmt.Sprintf("all %d script workers stayed busy for %d ms", r.lim.Workers, r.lim.Timeout.Milliseconds())}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (r *Runner) release(p *proc) {
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		r.discard(p)
		return
	}
	r.idle <- p
}

// discard stops a worker and frees its slot.
func (r *Runner) discard(p *proc) {
	p.kill()
	<-r.slots
}

// proc is one worker process.
type proc struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *headBuffer
	waited chan struct{} // closed once the process has been reaped
}

func (r *Runner) start() (*proc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("cannot find the executable to start a script worker: %w", err)
	}
	cmd := exec.Command(exe)
	// Only what the Go runtime reads: the node's environment holds secrets
	// (passwords, signing keys) that a worker has no use for.
	cmd.Env = []string{workerEnv + "=1", workerMemoryEnv + "=" + strconv.Itoa(r.lim.MaxMemory)}
	for _, k := range []string{"GOMAXPROCS", "GOGC", "GODEBUG", "GORACE", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	p := &proc{cmd: cmd, stderr: &headBuffer{}, waited: make(chan struct{})}
	cmd.Stderr = p.stderr
	if p.in, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p.out = bufio.NewReader(out)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("cannot start a script worker: %w", err)
	}
	return p, nil
}

// call sends one request and reads its response; the worker is killed if it
// has not answered within limit. A worker that failed is already stopped.
func (p *proc) call(req request, limit time.Duration) (response, error) {
	killed := make(chan struct{})
	timer := time.AfterFunc(limit, func() {
		close(killed)
		p.cmd.Process.Kill()
	})
	var res response
	err := writeFrame(p.in, req)
	if err == nil {
		err = readFrame(p.out, &res)
	}
	if timer.Stop() && err == nil {
		return res, nil
	}
	p.kill()
	select {
	case <-killed:
		if err == nil {
			return res, nil // it answered just in time; the next call gets a new worker
		}
		return res, &Error{Kind: KindTimeout, Msg: fmt.Sprintf("timeout after %d ms (the worker did not stop and was killed)", req.TimeoutMs)}
	default:
	}
	if p.stderr.outOfMemory() {
		return res, &Error{Kind: KindMemory, Msg: "memory limit exceeded (the worker ran out of memory and was stopped)"}
	}
	return res, &Error{Kind: KindCrashed, Msg: "the script worker failed: " + p.stderr.reason()}
}

// dead tells whether the worker has been stopped.
func (p *proc) dead() bool {
	select {
	case <-p.waited:
		return true
	default:
		return false
	}
}

// kill ends the process and reaps it; it may be called more than once.
func (p *proc) kill() {
	select {
	case <-p.waited:
		return
	default:
	}
	p.in.Close() // a healthy worker exits on end of input
	p.cmd.Process.Kill()
	p.cmd.Wait()
	close(p.waited)
}

// headBuffer keeps the first few KiB a worker wrote to stderr: where the Go
// runtime says why it failed, before the goroutine dumps.
type headBuffer struct {
	mu  sync.Mutex
	buf []byte
}

const headSize = 4 << 10

func (t *headBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if room := headSize - len(t.buf); room > 0 {
		t.buf = append(t.buf, b[:min(room, len(b))]...)
	}
	return len(b), nil
}

func (t *headBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// outOfMemory tells whether the worker died of its memory cap: the Go runtime
// (or, in race-detector builds, ThreadSanitizer) says so on stderr. A worker is
// pure Go, so a segmentation fault there is the runtime failing to map memory
// at the cap too.
func (t *headBuffer) outOfMemory() bool {
	s := t.String()
	return strings.Contains(s, "out of memory") || strings.Contains(s, "failed to allocate") ||
		strings.Contains(s, "cannot allocate memory") || strings.Contains(s, "SIGSEGV")
}

// reason is the first line of a Go runtime failure report, if any.
func (t *headBuffer) reason() string {
	for line := range strings.Lines(t.String()) {
		if strings.HasPrefix(line, "fatal error:") || strings.HasPrefix(line, "panic:") || strings.HasPrefix(line, "runtime:") {
			return strings.TrimSpace(line)
		}
	}
	return "it exited"
}
