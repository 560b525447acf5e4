package embedded

import (
	"testing"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// interleavedRows is what a group commit of the sluice-bench batch100 cell gets:
// requests of one device, each 100 ascending timestamps × 4 keys, from workers
// whose timestamps interleave, so every series' rows are runs out of order.
func interleavedRows(requests int) []storage.Row {
	id := uuid.New()
	keys := []string{"temperature", "humidity", "active", "status"}
	var rows []storage.Row
	for r := range requests {
		// worker r posts seq 0: ts base + r*100, then the next worker's base
		// comes before the previous worker's next request.
		base := int64(1_700_000_000_000) + int64((requests-1-r)*100)
		for i := range int64(100) {
			for _, k := range keys {
				rows = append(rows, storage.Row{EntityID: id, Entry: kv.Entry{Ts: base + i, Key: k, Value: kv.LongValue(i)}})
			}
		}
	}
	return rows
}

// TestPlanOrder: plan puts each series' rows in ts order, and of rows with one ts
// the later one last, whatever order the runs come in.
func TestPlanOrder(t *testing.T) {
	rows := interleavedRows(25)
	// A second copy of some points, which must sort after the first.
	rows = append(rows, rows[:40]...)
	w := new(writer)
	w.plan(rows)
	for _, g := range w.byKey {
		p := &w.groups[g]
		idx := w.order[p.start : p.start+p.count]
		for i := 1; i < len(idx); i++ {
			a, b := &rows[idx[i-1]], &rows[idx[i]]
			if a.Key != b.Key || a.Ts > b.Ts || a.Ts == b.Ts && idx[i-1] > idx[i] {
				t.Fatalf("series %s: row %d (ts %d) before row %d (ts %d)", a.Key, idx[i-1], a.Ts, idx[i], b.Ts)
			}
		}
	}
}

// BenchmarkPlan is plan on one batch100 group commit of 25 requests.
func BenchmarkPlan(b *testing.B) {
	rows := interleavedRows(25)
	w := new(writer)
	for b.Loop() {
		w.plan(rows)
		w.reset()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(rows)), "ns/row")
}
