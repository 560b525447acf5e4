package procs

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestSet(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(before)
	gcBefore := debug.SetGCPercent(100)
	defer debug.SetGCPercent(gcBefore)

	t.Setenv("GOMAXPROCS", "3")
	t.Setenv("GOGC", "100")
	if n, gc := Set(); n != before || runtime.GOMAXPROCS(0) != before || gc != 100 {
		t.Fatalf("with GOMAXPROCS and GOGC set: Set gave %d, %d and left %d, want %d and GOGC 100 untouched", n, gc, runtime.GOMAXPROCS(0), before)
	}
	t.Setenv("GOMAXPROCS", "")
	t.Setenv("GOGC", "")
	if n, gc := Set(); n != before+Extra || runtime.GOMAXPROCS(0) != before+Extra || gc != GCPercent {
		t.Fatalf("Set gave %d, %d and left %d, want %d and %d", n, gc, runtime.GOMAXPROCS(0), before+Extra, GCPercent)
	}
	if gc := debug.SetGCPercent(GCPercent); gc != GCPercent {
		t.Fatalf("GOGC left at %d, want %d", gc, GCPercent)
	}
}
