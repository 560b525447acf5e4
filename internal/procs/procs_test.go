package procs

import (
	"runtime"
	"testing"
)

func TestSet(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(before)

	t.Setenv("GOMAXPROCS", "3")
	if n := Set(); n != before || runtime.GOMAXPROCS(0) != before {
		t.Fatalf("with GOMAXPROCS set: Set gave %d and left %d, want %d untouched", n, runtime.GOMAXPROCS(0), before)
	}
	t.Setenv("GOMAXPROCS", "")
	if n := Set(); n != before+Extra || runtime.GOMAXPROCS(0) != before+Extra {
		t.Fatalf("Set gave %d and left %d, want %d", n, runtime.GOMAXPROCS(0), before+Extra)
	}
}
