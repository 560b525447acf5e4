package script

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dop251/goja"
)

// The worker side. A node starts workers by re-executing its own binary with
// workerEnv set; init below then serves script runs on stdin/stdout and never
// returns to the program's main. It reads nothing else and opens nothing: the
// scripts get no I/O from the worker either.
const (
	workerEnv       = "SLUICE_SCRIPT_WORKER"
	workerMemoryEnv = "SLUICE_SCRIPT_WORKER_MEMORY"
)

func init() {
	if os.Getenv(workerEnv) != "1" {
		return
	}
	maxMem, err := strconv.Atoi(os.Getenv(workerMemoryEnv))
	if err != nil || maxMem <= 0 {
		fmt.Fprintln(os.Stderr, "script worker: bad", workerMemoryEnv)
		os.Exit(2)
	}
	os.Exit(serve(os.Stdin, os.Stdout, maxMem))
}

// request is one run, from the node to a worker.
type request struct {
	Src       string          `json:"src"`
	Params    json.RawMessage `json:"params"`
	Device    Device          `json:"device"`
	TimeoutMs int64           `json:"timeoutMs"`
}

// response is the outcome of one run. Result is the JSON of the return value;
// Undefined says the script returned nothing JSON can express.
type response struct {
	Result    json.RawMessage `json:"result,omitempty"`
	Undefined bool            `json:"undefined,omitempty"`
	Kind      Kind            `json:"kind,omitempty"`
	Error     string          `json:"error,omitempty"`
}

// maxFrame bounds one message; a request carries at most a script and the
// device's params (the node's body limit), a response a reply.
const maxFrame = 1 << 30

func writeFrame(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(b)))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

func readFrame(r io.Reader, v any) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxFrame {
		return fmt.Errorf("frame of %d bytes is too large", size)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// serve runs requests until in ends; it returns the exit code.
func serve(in io.Reader, out io.Writer, maxMem int) int {
	limitData(maxMem)
	// A deep recursion through native built-ins grows the Go stack; end the
	// worker well before the 1 GiB default.
	debug.SetMaxStack(256 << 20)
	w := &worker{maxMem: uint64(maxMem), programs: make(map[string]*goja.Program)}
	runtime.GC()
	w.baseline = w.heap().live
	br, bw := bufio.NewReader(in), bufio.NewWriter(out)
	for {
		var req request
		if err := readFrame(br, &req); err != nil {
			return 0 // the node closed the pipe (or died)
		}
		res := w.run(req)
		if err := writeFrame(bw, res); err != nil || bw.Flush() != nil {
			return 0
		}
		if res.Kind == KindMemory {
			// Start the next run from a clean heap: the node starts a new worker.
			return 0
		}
	}
}

// limitData caps the worker's data segment (Go's heap is in it) at its size now
// plus 4×maxMem + 256 MiB: past it an allocation fails and the Go runtime ends
// the process, which the node reports as a memory error.
func limitData(maxMem int) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return // not Linux: the heap sampling still applies
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmData:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return
			}
			lim := kb<<10 + 4*uint64(maxMem) + 256<<20
			syscall.Setrlimit(syscall.RLIMIT_DATA, &syscall.Rlimit{Cur: lim, Max: lim})

			return
		}
	}
}

// worker is the state of a worker process: its memory budget and the programs
// it compiled, by source (rules change rarely; the map is dropped when full).
type worker struct {
	maxMem     uint64
	baseline   uint64
	lastForced uint64 // heap objects after the last forced GC
	programs   map[string]*goja.Program
	samples    [2]metrics.Sample
}

const maxPrograms = 256

type heapStats struct{ live, objects uint64 }

// heap reads the live heap of the last GC and the heap objects now.
func (w *worker) heap() heapStats {
	w.samples[0].Name = "/gc/heap/live:bytes"
	w.samples[1].Name = "/memory/classes/heap/objects:bytes"
	metrics.Read(w.samples[:])
	return heapStats{live: w.samples[0].Value.Uint64(), objects: w.samples[1].Value.Uint64()}
}

func (w *worker) program(src string) (*goja.Program, error) {
	if p, ok := w.programs[src]; ok {
		return p, nil
	}
	p, err := compile(src)
	if err != nil {
		return nil, err
	}
	if len(w.programs) >= maxPrograms {
		clear(w.programs)
	}
	w.programs[src] = p
	return p, nil
}

// Interrupt values: why the watchdog stopped a script.
type stopReason struct{ kind Kind }

func (w *worker) run(req request) (res response) {
	defer func() {
		if v := recover(); v != nil {
			res = response{Kind: KindCrashed, Error: fmt.Sprintf("script engine failure: %v", v)}
		}
	}()
	prog, err := w.program(req.Src)
	if err != nil {
		return failure(err)
	}
	vm := goja.New()
	vm.SetMaxCallStackSize(2000)
	w.sandbox(vm)
	timeout := time.Duration(req.TimeoutMs) * time.Millisecond
	w.lastForced = 0
	stop := w.watch(vm, timeout)
	defer stop()
	fn, err := vm.RunProgram(prog)
	if err != nil {
		return w.failure(err, req.TimeoutMs)
	}
	call, _ := goja.AssertFunction(fn)
	params := goja.Null()
	if len(req.Params) > 0 {
		if params, err = parseJSON(vm, string(req.Params)); err != nil {
			return w.failure(err, req.TimeoutMs)
		}
	}
	device := vm.NewObject()
	device.Set("id", req.Device.ID)
	device.Set("name", req.Device.Name)
	device.Set("type", req.Device.Type)
	v, err := call(goja.Undefined(), params, device)
	if err != nil {
		return w.failure(err, req.TimeoutMs)
	}
	if goja.IsUndefined(v) {
		return response{Undefined: true}
	}
	// JSON.stringify inside the runtime: toJSON methods run under the same limits.
	s, err := stringify(vm, v)
	if err != nil {
		return w.failure(err, req.TimeoutMs)
	}
	if goja.IsUndefined(s) {
		return response{Undefined: true} // a function or a symbol
	}
	return response{Result: json.RawMessage(s.String())}
}

func parseJSON(vm *goja.Runtime, text string) (goja.Value, error) {
	parse, _ := goja.AssertFunction(vm.Get("JSON").ToObject(vm).Get("parse"))
	return parse(goja.Undefined(), vm.ToValue(text))
}

func stringify(vm *goja.Runtime, v goja.Value) (goja.Value, error) {
	f, _ := goja.AssertFunction(vm.Get("JSON").ToObject(vm).Get("stringify"))
	return f(goja.Undefined(), v)
}

// watch interrupts vm at timeout, or when the heap passes the budget; the
// returned func stops watching.
func (w *worker) watch(vm *goja.Runtime, timeout time.Duration) (stop func()) {
	timer := time.AfterFunc(timeout, func() { vm.Interrupt(stopReason{KindTimeout}) })
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if w.overBudget() {
					vm.Interrupt(stopReason{KindMemory})
					return
				}
			}
		}
	}()
	return func() {
		timer.Stop()
		close(done)
		<-finished
	}
}

// overBudget tells whether the script holds more than maxMem of live heap. The
// live size of the last GC is cheap to read; once the heap (garbage included)
// is past the budget, a GC is forced to learn the live size now, again each
// time another quarter of the budget has been allocated.
func (w *worker) overBudget() bool {
	h := w.heap()
	limit := w.baseline + w.maxMem
	if h.live > limit {
		return true
	}
	if h.objects <= limit || h.objects < w.lastForced+w.maxMem/4 {
		return false
	}
	runtime.GC()
	h = w.heap()
	w.lastForced = h.objects
	return h.live > limit
}

// sandbox refuses single string allocations past the budget before they happen.
// Everything else is left to the heap sampling.
func (w *worker) sandbox(vm *goja.Runtime) {
	proto := vm.Get("String").ToObject(vm).Get("prototype").ToObject(vm)
	guard := func(name string, size func(s goja.String, c goja.FunctionCall) float64) {
		orig, _ := goja.AssertFunction(proto.Get(name))
		f := func(c goja.FunctionCall) goja.Value {
			// Strings of code units: 2 bytes each at worst. Only primitive strings
			// are checked here: converting an object would run its toString twice.
			s, ok := c.This.(goja.String)
			if n := 2 * size(s, c); ok && n > float64(w.maxMem) && !math.IsInf(n, 0) {
				vm.Interrupt(stopReason{KindMemory})
				return goja.Undefined() // the interrupt ends the script at its next instruction
			}
			v, err := orig(c.This, c.Arguments...)
			if err != nil {
				panic(err)
			}
			return v
		}
		proto.DefineDataProperty(name, vm.ToValue(f), goja.FLAG_TRUE, goja.FLAG_TRUE, goja.FLAG_FALSE)
	}
	guard("repeat", func(s goja.String, c goja.FunctionCall) float64 {
		if s == nil {
			return 0
		}
		return float64(s.Length()) * c.Argument(0).ToFloat()
	})
	pad := func(s goja.String, c goja.FunctionCall) float64 { return c.Argument(0).ToFloat() }
	guard("padStart", pad)
	guard("padEnd", pad)
}

// failure turns a run error into a response.
func (w *worker) failure(err error, timeoutMs int64) response {
	var ie *goja.InterruptedError
	if errors.As(err, &ie) {
		if r, ok := ie.Value().(stopReason); ok {
			if r.kind == KindTimeout {
				return response{Kind: KindTimeout, Error: fmt.Sprintf("timeout after %d ms", timeoutMs)}
			}
			return response{Kind: KindMemory, Error: fmt.Sprintf("memory limit of %d bytes exceeded", w.maxMem)}
		}
	}
	var so *goja.StackOverflowError
	if errors.As(err, &so) {
		return response{Kind: KindThrown, Error: "RangeError: Maximum call stack size exceeded"}
	}
	return failure(err)
}

func failure(err error) response {
	if e, ok := err.(*Error); ok {
		return response{Kind: e.Kind, Error: e.Msg}
	}
	return response{Kind: KindThrown, Error: err.Error()}
}
