// Package script runs the JavaScript of client-side RPC rules (goja) with a time
// and a memory limit and no I/O.
//
// A rule script is the body of a function of params and device; its return value
// is the reply. Scripts never run in the node's own process: goja cannot bound the
// memory a script allocates (string concatenation, array spread and object
// literals allocate inside the interpreter, out of reach of any hook), so a
// runaway script could take the whole node down. Instead each run goes to a
// worker process (this binary re-executed, see worker.go) that:
//
//   - interrupts the script at Limits.Timeout (goja's Runtime.Interrupt);
//   - samples its own Go heap every millisecond and interrupts the script once
//     the live heap exceeds Limits.MaxMemory above the worker's idle baseline (the
//     worker runs one script at a time, so its heap is that script's);
//   - refuses at once a String.prototype.repeat, padStart or padEnd whose result
//     alone would exceed Limits.MaxMemory;
//   - has a hard RLIMIT_DATA of its idle size plus 4×MaxMemory + 256 MiB, so a
//     single allocation that the sampling cannot see coming ends the worker (the
//     call answers a memory error) instead of the machine.
//
// The node kills a worker that has not answered by Timeout + 1 s (a script stuck
// in a native built-in, such as a catastrophic regular expression, is not
// interruptible) and starts a new one for the next call.
package script

import (
	"errors"
	"fmt"
	"strings"

	"github.com/dop251/goja"
	"github.com/dop251/goja/ast"
)

// MaxSourceLen is the longest script accepted, in bytes.
const MaxSourceLen = 64 << 10

// Kind says why a run failed.
type Kind string

const (
	KindSyntax  Kind = "syntax"  // the script does not compile
	KindThrown  Kind = "thrown"  // the script threw, or its result cannot be JSON
	KindTimeout Kind = "timeout" // it ran past Limits.Timeout
	KindMemory  Kind = "memory"  // it held more than Limits.MaxMemory
	KindCrashed Kind = "crashed" // the worker process failed for another reason
	KindBusy    Kind = "busy"    // no worker became free within Limits.Timeout
)

// Error is a failed run: a kind and a message fit for the caller.
type Error struct {
	Kind Kind
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Device is what a script sees as device.
type Device struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Type string `json:"type"`
}

// Check compiles src as a rule script; the error (a *Error of KindSyntax) names
// the problem and its line.
func Check(src string) error {
	_, err := compile(src)
	return err
}

// wrapPrefix makes the script the body of a function. It has no newline, so the
// line numbers of syntax errors are the script's own.
const wrapPrefix = "(function (params, device) {"

// compile turns a script into a program whose value is the rule function.
func compile(src string) (*goja.Program, error) {
	if len(src) > MaxSourceLen {
		return nil, &Error{Kind: KindSyntax, Msg: fmt.Sprintf("the script is longer than %d bytes", MaxSourceLen)}
	}
	prg, err := goja.Parse("rule", wrapPrefix+src+"\n})")
	if err != nil {
		return nil, syntaxError(err)
	}
	// A script such as "}); f(); (function(){" would escape the wrapper: it would
	// still run sandboxed, but as something other than the rule's body.
	if !isOneFunction(prg) {
		return nil, &Error{Kind: KindSyntax, Msg: "SyntaxError: unbalanced braces: the script must be the body of a function"}
	}
	p, err := goja.CompileAST(prg, false)
	if err != nil {
		return nil, syntaxError(err)
	}
	return p, nil
}

func isOneFunction(prg *ast.Program) bool {
	if len(prg.Body) != 1 {
		return false
	}
	st, ok := prg.Body[0].(*ast.ExpressionStatement)
	if !ok {
		return false
	}
	_, ok = st.Expression.(*ast.FunctionLiteral)
	return ok
}

func syntaxError(err error) *Error {
	msg := err.Error()
	var se *goja.CompilerSyntaxError
	if errors.As(err, &se) {
		msg = se.Error()
	}
	if !strings.HasPrefix(msg, "SyntaxError") {
		msg = "SyntaxError: " + msg
	}
	return &Error{Kind: KindSyntax, Msg: msg}
}
