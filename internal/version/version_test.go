package version

import (
	"sync"
	"testing"
)

// TestReserve: ranges handed out concurrently never overlap and rise.
func TestReserve(t *testing.T) {
	const workers, each = 8, 1000
	got := make([][]uint64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			prev := uint64(0)
			for range each {
				v := Reserve(3)
				if v <= prev {
					t.Errorf("version %d after %d", v, prev)
				}
				prev = v + 2
				got[w] = append(got[w], v)
			}
		})
	}
	wg.Wait()
	seen := map[uint64]bool{}
	for _, vs := range got {
		for _, v := range vs {
			for i := range uint64(3) {
				if seen[v+i] {
					t.Fatalf("version %d handed out twice", v+i)
				}
				seen[v+i] = true
			}
		}
	}
}
