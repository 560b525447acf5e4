package series

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/uuid"
)

// TestIndex: Index gives the numbers a plain map would, over series met at random
// (the map) or in cycles that repeat, break and change (the successor check), and
// across Resets.
func TestIndex(t *testing.T) {
	entities := make([]uuid.UUID, 20)
	for i := range entities {
		entities[i] = uuid.New()
	}
	names := []string{"a", "b", "temperature", "", "a\x00b", "humidity", "t", "T", "x", "y", "z"}
	var x Index
	for round := range 50 {
		want := map[Key]int{}
		cycle := 1 + rand.IntN(30)
		for n := range 2000 {
			i := rand.IntN(cycle)
			if round%2 == 1 && rand.IntN(50) > 0 {
				i = n % cycle // in a cycle, now and then broken
			}
			k := Key{entities[i%len(entities)], names[(i/len(entities)+i)%len(names)]}
			id, added := x.Of(k.Entity, k.Name)
			w, seen := want[k]
			if !seen {
				w = len(want)
				want[k] = w
			}
			if id != w || added == seen {
				t.Fatalf("round %d: %v got (%d, %v), want (%d, %v)", round, k, id, added, w, !seen)
			}
			if x.Key(id) != k {
				t.Fatalf("round %d: Key(%d) = %v, want %v", round, id, x.Key(id), k)
			}
		}
		if x.Len() != len(want) {
			t.Fatalf("round %d: Len %d, want %d", round, x.Len(), len(want))
		}
		x.Reset()
		if x.Len() != 0 {
			t.Fatalf("Len %d after Reset", x.Len())
		}
	}
}

// BenchmarkIndex numbers group commits of 10,000 rows, 4 keys per point, from one
// device or 64 taking turns, against a map lookup per row.
func BenchmarkIndex(b *testing.B) {
	keys := []string{"temperature", "humidity", "active", "status"}
	for _, devices := range []int{1, 64} {
		ids := make([]uuid.UUID, devices)
		for i := range ids {
			ids[i] = uuid.New()
		}
		key := func(i int) Key { return Key{ids[i/len(keys)%devices], keys[i%len(keys)]} }
		b.Run(fmt.Sprintf("devices=%d/index", devices), func(b *testing.B) {
			var x Index
			for b.Loop() {
				for i := range 10000 {
					k := key(i)
					x.Of(k.Entity, k.Name)
				}
				x.Reset()
			}
			b.ReportMetric(float64(b.N*10000)/b.Elapsed().Seconds(), "rows/s")
		})
		b.Run(fmt.Sprintf("devices=%d/map", devices), func(b *testing.B) {
			m := map[Key]int32{}
			for b.Loop() {
				for i := range 10000 {
					k := key(i)
					if _, ok := m[k]; !ok {
						m[k] = int32(len(m))
					}
				}
				clear(m)
			}
			b.ReportMetric(float64(b.N*10000)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
