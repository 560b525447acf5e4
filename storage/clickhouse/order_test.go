package clickhouse

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// shuffledRows is n rows of several devices and keys, in time order per series
// but interleaved, with some series out of time order and repeated ts.
func shuffledRows(n int) []storage.Row {
	devices := make([]uuid.UUID, 7)
	for i := range devices {
		devices[i] = uuid.New()
	}
	keys := []string{"temperature", "t", "humidity", "b", "temp"}
	rows := make([]storage.Row, n)
	for i := range rows {
		ts := int64(1_700_000_000_000 + i/3)
		if i%11 == 0 {
			ts -= 1000 // older points
		}
		rows[i] = storage.Row{EntityID: devices[rand.IntN(len(devices))], Entry: kv.Entry{
			Ts: ts, Key: keys[rand.IntN(len(keys))], Value: kv.LongValue(int64(i))}}
	}
	return rows
}

func TestSortOrder(t *testing.T) {
	var o orderer
	for _, n := range []int{0, 1, 2, 100, 5000} {
		rows := shuffledRows(n)
		order := o.sortOrder(rows)
		if len(order) != n {
			t.Fatalf("%d rows, order of %d", n, len(order))
		}
		seen := make([]bool, n)
		for j, i := range order {
			if seen[i] {
				t.Fatalf("row %d twice", i)
			}
			seen[i] = true
			if j == 0 {
				continue
			}
			a, b := &rows[order[j-1]], &rows[i]
			c := compareEntity(a.EntityID, b.EntityID)
			if c == 0 {
				c = strings.Compare(a.Key, b.Key)
			}
			if c == 0 {
				c = cmp.Compare(a.Ts, b.Ts)
				if c == 0 && order[j-1] > i {
					t.Fatalf("rows %d and %d of one point swapped: the later write must stay later", order[j-1], i)
				}
			}
			if c > 0 {
				t.Fatalf("position %d: row %d before row %d", j, order[j-1], i)
			}
		}
	}
}

// TestCompareEntityIsServerOrder: UUIDs in compareEntity's order come back in
// the same order from ClickHouse's ORDER BY.
func TestCompareEntityIsServerOrder(t *testing.T) {
	s := OpenTest(t)
	ids := make([]uuid.UUID, 50)
	for i := range ids {
		ids[i] = uuid.New()
		ids[i][rand.IntN(16)] = 0 // some ties in either half
	}
	slices.SortFunc(ids, compareEntity)
	texts := make([]string, len(ids))
	for i, id := range ids {
		texts[i] = id.String()
	}
	rows, err := s.conn.Query(context.Background(), "SELECT toString(arrayJoin(arrayMap(x -> toUUID(x), ?))) AS u ORDER BY toUUID(u)", texts)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for i := 0; rows.Next(); i++ {
		var u string
		if err := rows.Scan(&u); err != nil {
			t.Fatal(err)
		}
		if u != texts[i] {
			t.Fatalf("position %d: server has %s, compareEntity %s", i, u, ids[i])
		}
	}
}

// TestInsertIsAlreadySorted: the server does not sort a delivery's part again.
func TestInsertIsAlreadySorted(t *testing.T) {
	s := OpenTest(t)
	rows := shuffledRows(20000)
	for i := range rows[:5000] {
		rows[i].Ts -= 40 * 86_400_000 // a second partition (month)
	}
	id := uuid.NewString()
	ctx := ch.Context(context.Background(), ch.WithQueryID(id), ch.WithSettings(ch.Settings{"log_queries": 1}))
	if err := s.WriteHistory(ctx, rows, make([]bool, len(rows)), nil); err != nil {
		t.Fatal(err)
	}
	// The server may log the query just after answering it: flush and look
	// until it is there.
	var blocks, sorted uint64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if err := s.conn.Exec(context.Background(), "SYSTEM FLUSH LOGS"); err != nil {
			t.Fatal(err)
		}
		err := s.conn.QueryRow(context.Background(), `SELECT
				ProfileEvents.Values[indexOf(ProfileEvents.Names, 'MergeTreeDataWriterBlocks')],
				ProfileEvents.Values[indexOf(ProfileEvents.Names, 'MergeTreeDataWriterBlocksAlreadySorted')]
			FROM system.query_log WHERE query_id = ? AND type = 2`, id).Scan(&blocks, &sorted)
		if err == nil {
			break
		}
		if !errors.Is(err, sql.ErrNoRows) || time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	if blocks < 2 || sorted != blocks {
		t.Fatalf("%d blocks written, %d of them already sorted", blocks, sorted)
	}
}

// BenchmarkSortOrder orders a 100,000-row delivery of one device's batches of 100
// points (25 ts × 4 keys), as the spool delivers them: each batch in time order,
// the batches in the order their requests committed, not in time order.
func BenchmarkSortOrder(b *testing.B) {
	device := uuid.New()
	keys := []string{"temperature", "humidity", "pressure", "battery"}
	batches := make([][]storage.Row, 1000)
	for i := range batches {
		for t := range 25 {
			for _, k := range keys {
				batches[i] = append(batches[i], storage.Row{EntityID: device,
					Entry: kv.Entry{Ts: int64(i*25 + t), Key: k, Value: kv.LongValue(1)}})
			}
		}
	}
	for _, inOrder := range []bool{true, false} {
		name := "batches-in-order"
		order := batches
		if !inOrder {
			name = "batches-shuffled"
			order = slices.Clone(batches)
			rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		}
		rows := slices.Concat(order...)
		b.Run(name, func(b *testing.B) {
			var o orderer
			for b.Loop() {
				o.sortOrder(rows)
			}
			b.ReportMetric(float64(b.N*len(rows))/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// TestSortOrderRuns: a series made of stretches in time order that touch,
// overlap or share a ts comes out in (ts, row) order.
func TestSortOrderRuns(t *testing.T) {
	device := uuid.New()
	var o orderer
	for range 2000 {
		var rows []storage.Row
		for range 1 + rand.IntN(40) {
			ts := int64(rand.IntN(50))
			for range 1 + rand.IntN(12) {
				rows = append(rows, storage.Row{EntityID: device, Entry: kv.Entry{Ts: ts, Key: "k"}})
				ts += int64(rand.IntN(3))
			}
		}
		order := o.sortOrder(rows)
		for j := 1; j < len(order); j++ {
			a, b := order[j-1], order[j]
			if rows[a].Ts > rows[b].Ts || rows[a].Ts == rows[b].Ts && a > b {
				t.Fatalf("rows %d (ts %d) before %d (ts %d)", a, rows[a].Ts, b, rows[b].Ts)
			}
		}
	}
}

// TestSortByTs: both of sortByTs's sorts (radix for a span under 2^32 ms,
// comparison otherwise, and below radixMin rows) give the stable order by ts,
// at the ends of the int64 range too.
func TestSortByTs(t *testing.T) {
	device := uuid.New()
	var o orderer
	for _, n := range []int{radixMin - 1, radixMin, 5000} {
		for _, span := range []uint64{0, 3, 255, 256, 1 << 20, 1<<32 - 1, 1 << 32, 1 << 40, math.MaxUint64} {
			for _, base := range []int64{math.MinInt64, -1 << 40, 0, 1_700_000_000_000, math.MaxInt64 - int64(min(span, math.MaxInt64))} {
				rows := make([]storage.Row, n)
				for i := range rows {
					off := rand.Uint64N(min(span, math.MaxUint64-1) + 1)
					if i%5 == 0 && i > 0 {
						off = uint64(rows[i-1].Ts - base) // a repeated ts
					}
					if span == math.MaxUint64 && i < 2 {
						off = []uint64{0, math.MaxUint64}[i] // both ends
					}
					rows[i] = storage.Row{EntityID: device, Entry: kv.Entry{Ts: base + int64(off), Key: "k"}}
				}
				if span >= 1<<63 && base != math.MinInt64 {
					continue // base + span would leave the int64 range
				}
				want := make([]int32, n)
				for i := range want {
					want[i] = int32(i)
				}
				slices.SortStableFunc(want, func(a, b int32) int { return cmp.Compare(rows[a].Ts, rows[b].Ts) })
				if got := o.sortOrder(rows); !slices.Equal(got, want) {
					t.Fatalf("%d rows from %d spanning %d: order differs from a stable sort by ts", n, base, span)
				}
			}
		}
	}
}
