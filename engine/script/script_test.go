package script

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestCheck(t *testing.T) {
	f := func(src, wantErr string) {
		t.Helper()
		err := Check(src)
		if wantErr == "" {
			if err != nil {
				t.Fatalf("Check(%q): %v", src, err)
			}
			return
		}
		var se *Error
		if !errors.As(err, &se) || se.Kind != KindSyntax || !strings.Contains(se.Msg, wantErr) {
			t.Fatalf("Check(%q) = %v, want a syntax error with %q", src, err, wantErr)
		}
	}
	f(`return 1`, "")
	f(`return {time: Date.now(), p: params, d: device.name}`, "")
	f(``, "")
	f(`// a comment on the last line`, "")
	f(`return {`, "SyntaxError")
	f("var a = 1;\nreturn a +;", "Line 2:")
	f(`}); globalThis.x = 1; (function () {`, "unbalanced braces")
	f(strings.Repeat(" ", MaxSourceLen+1), "longer than")
}

func newRunner(t *testing.T, l Limits) *Runner {
	t.Helper()
	r := New(l)
	t.Cleanup(r.Close)
	return r
}

func TestRun(t *testing.T) {
	r := newRunner(t, Limits{})
	dev := Device{ID: "d1", Name: "sensor", Type: "thermo"}
	f := func(src, params, want string) {
		t.Helper()
		got, err := r.Run(context.Background(), src, []byte(params), dev)
		if err != nil {
			t.Fatalf("Run(%q): %v", src, err)
		}
		if string(got) != want {
			t.Fatalf("Run(%q) = %s, want %s", src, got, want)
		}
	}
	f(`return 1`, ``, `1`)
	f(`return params`, ``, `null`)
	f(`return params`, `{"a":[1,2.5,"x",null,true]}`, `{"a":[1,2.5,"x",null,true]}`)
	f(`return params.pin + 1`, `{"pin":7}`, `8`)
	f(`return [device.id, device.name, device.type]`, ``, `["d1","sensor","thermo"]`)
	f(`return {toJSON: function () { return "custom" }}`, ``, `"custom"`)
	f(`return "x".repeat(3) + "y".padStart(2, "-")`, ``, `"xxx-y"`)
	f(`var o = {}; for (var k in "ab") o[k] = 1; return Object.keys(o)`, ``, `["0","1"]`)
	// Undefined and what JSON cannot express give no reply.
	f(`return`, ``, ``)
	f(`return function () {}`, ``, ``)
	// No I/O: nothing outside the ECMAScript built-ins is in scope.
	f(`return [typeof require, typeof console, typeof process, typeof fetch, typeof setTimeout]`, ``,
		`["undefined","undefined","undefined","undefined","undefined"]`)
	// Rules cannot leak into each other: every run gets a fresh runtime.
	f(`Object.prototype.leak = 1; globalThis.g = 1; return 0`, ``, `0`)
	f(`return [({}).leak === undefined, typeof g]`, ``, `[true,"undefined"]`)
}

func TestRunErrors(t *testing.T) {
	// Memory bombs get a long time limit: under the race detector goja's
	// String.prototype.repeat is slow enough to reach a short one first.
	fast := newRunner(t, Limits{Timeout: 300 * time.Millisecond, MaxMemory: 8 << 20})
	slow := newRunner(t, Limits{Timeout: 10 * time.Second, MaxMemory: 8 << 20})
	r := fast
	// f runs src and wants an error of one of kinds whose message holds msg.
	f := func(src string, msg string, kinds ...Kind) {
		t.Helper()
		_, err := r.Run(context.Background(), src, nil, Device{})
		var se *Error
		if !errors.As(err, &se) || !slices.Contains(kinds, se.Kind) || !strings.Contains(se.Msg, msg) {
			t.Fatalf("Run(%q) = %v, want a %v error with %q", src, err, kinds, msg)
		}
	}
	f(`throw new Error("boom")`, "Error: boom", KindThrown)
	f(`return params.x.y`, "TypeError", KindThrown)
	f(`var a = {}; a.self = a; return a`, "circular", KindThrown)
	f(`function f() { return f() } return f()`, "Maximum call stack size exceeded", KindThrown)
	f(`return {`, "SyntaxError", KindSyntax)
	f(`while (true) {}`, "timeout after 300 ms", KindTimeout)
	f(`for (;;) { try { while (true) {} } catch (e) {} }`, "timeout", KindTimeout)
	// Growth that is slow per step meets whichever limit comes first.
	f(`var a = [1]; while (true) a = a.concat(a)`, "", KindMemory, KindTimeout)
	f(`var a = [1]; while (true) a = [...a, ...a]`, "", KindMemory, KindTimeout)
	f(`var a = []; while (true) a.push({k: a.length})`, "", KindMemory, KindTimeout)

	r = slow
	// Refused before allocating, and not catchable.
	f(`return 'x'.repeat(1e9)`, "memory limit of 8388608 bytes exceeded", KindMemory)
	f(`try { 'x'.repeat(1e9) } catch (e) {} return 1`, "memory limit", KindMemory)
	f(`return ''.padEnd(1e9)`, "memory limit", KindMemory)
	// Caught by the heap sampling.
	f(`var a = []; while (true) a.push('x'.repeat(1e6))`, "memory limit", KindMemory)
	f(`var s = 'x'.repeat(1e6), a = []; while (true) a.push(s + a.length)`, "memory limit", KindMemory)
	// One doubling can jump past the sampling to the hard cap, which ends the worker.
	f(`var s = 'x'; while (true) s += s`, "memory limit", KindMemory)
	// After all that the runner still works.
	for _, r := range []*Runner{fast, slow} {
		if got, err := r.Run(context.Background(), `return 42`, nil, Device{}); err != nil || string(got) != "42" {
			t.Fatalf("after the failures: %s, %v", got, err)
		}
	}
}

// A runaway script takes one worker; others keep answering meanwhile.
func TestRunConcurrent(t *testing.T) {
	r := newRunner(t, Limits{Timeout: 500 * time.Millisecond, Workers: 2})
	var wg sync.WaitGroup
	wg.Add(1)
	var loopErr error
	go func() {
		defer wg.Done()
		_, loopErr = r.Run(context.Background(), `while (true) {}`, nil, Device{})
	}()
	for i := range 20 {
		got, err := r.Run(context.Background(), `return params * 2`, []byte(strconv.Itoa(i)), Device{})
		if err != nil || string(got) != strconv.Itoa(2*i) {
			t.Fatalf("run %d: %s, %v", i, got, err)
		}
	}
	wg.Wait()
	var se *Error
	if !errors.As(loopErr, &se) || se.Kind != KindTimeout {
		t.Fatalf("loop: %v", loopErr)
	}
}
