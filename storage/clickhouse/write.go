package clickhouse

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/internal/version"
	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

const (
	insertHistory = " (tenant_id, entity_id, key, ts, ver, type, bool_v, long_v, dbl_v, str_v, json_v)"
	insertLatest  = " (tenant_id, entity_id, key, ts, ver, type, bool_v, long_v, dbl_v, str_v, json_v, lver)"
)

// Write inserts the rows into telemetry, then the newest row of each (entity, key)
// into telemetry_latest. Rows get consecutive versions in slice order, so of two
// rows with the same (entity, key, ts) the later one wins. A failed Write may have
// stored some rows; repeating it stores each once. Every row's day is marked as
// one that may hold copies (see telemetry_repeats).
func (s *Store) Write(ctx context.Context, rows []storage.Row) error {
	if len(rows) == 0 {
		return nil
	}
	cols, err := s.writeHistory(ctx, rows, nil, nil)
	defer putColumns(cols)
	if err != nil {
		return err
	}

	// One candidate per (entity, key): the newest ts, on equal ts the later row.
	// Ordering the history numbered the rows' series (cols.of).
	newest := cols.newest[:0]
	for range cols.index.Len() {
		newest = append(newest, -1)
	}
	cols.newest = newest
	for i, n := range cols.of {
		if j := newest[n]; j < 0 || rows[i].Ts >= rows[j].Ts {
			newest[n] = i
		}
	}
	lcols := getColumns()
	defer putColumns(lcols)
	for i, n := range cols.of {
		if newest[n] == i {
			lcols.add(&rows[i], cols.rowVer(int(i)))
		}
	}
	return s.insert(ctx, "telemetry_latest", insertLatest, lcols, true)
}

// WriteHistory inserts the rows into telemetry only: the spool's delivery in
// production, where the latest values live in Redis. mayRepeat[i] tells whether
// rows[i] may repeat a point written before (the same entity, key and ts: written
// again, or delivered again); nil means every row may. The days of those rows are
// marked in telemetry_repeats before the rows are inserted, so a report never
// reads a copy without FINAL. vers[i] is rows[i]'s version (internal/version),
// taken when the spool acknowledged it, so that a delete made after that
// acknowledgement hides the row however late it arrives, and of two writes of
// one point the later wins whichever arrives first; 0 or a nil vers takes one
// now.
func (s *Store) WriteHistory(ctx context.Context, rows []storage.Row, mayRepeat []bool, vers []uint64) error {
	if len(rows) == 0 {
		return nil
	}
	if mayRepeat != nil && len(mayRepeat) != len(rows) {
		return fmt.Errorf("clickhouse: %d rows with %d repeat flags", len(rows), len(mayRepeat))
	}
	if vers != nil && len(vers) != len(rows) {
		return fmt.Errorf("clickhouse: %d rows with %d versions", len(rows), len(vers))
	}
	cols, err := s.writeHistory(ctx, rows, mayRepeat, vers)
	putColumns(cols)
	return err
}

// writeHistory marks the days that may hold copies, then inserts rows into
// telemetry; the caller puts the columns back.
func (s *Store) writeHistory(ctx context.Context, rows []storage.Row, mayRepeat []bool, vers []uint64) (*columns, error) {
	cols := getColumns()
	if err := s.check(); err != nil {
		return cols, err
	}
	if err := s.markRepeats(ctx, rows, mayRepeat); err != nil {
		return cols, err
	}
	// Versions taken now follow the rows' order (the later of two equal points
	// wins); the columns follow the table's.
	cols.base, cols.given = version.Reserve(len(rows)), vers
	cols.grow(len(rows))
	for _, i := range cols.sortOrder(rows) {
		cols.add(&rows[i], cols.rowVer(int(i)))
	}
	return cols, s.insert(ctx, "telemetry", insertHistory, cols, false)
}

// msPerDay is the length of a telemetry_repeats day.
const msPerDay = 86_400_000

type entityDay struct {
	entity uuid.UUID
	day    int64
}

// markRepeats inserts the (entity, day) of every row that may repeat a point;
// days are ts / msPerDay truncated toward zero, as ClickHouse's intDiv.
func (s *Store) markRepeats(ctx context.Context, rows []storage.Row, mayRepeat []bool) error {
	days := make(map[entityDay]struct{})
	var last entityDay
	for i := range rows {
		if mayRepeat == nil || mayRepeat[i] {
			// A delivery holds runs of one device's rows: skip the map for a
			// row of the day before it.
			if d := (entityDay{rows[i].EntityID, rows[i].Ts / msPerDay}); len(days) == 0 || d != last {
				days[d], last = struct{}{}, d
			}
		}
	}
	if len(days) == 0 {
		return nil
	}
	entities, nums := make([]uuid.UUID, 0, len(days)), make([]int64, 0, len(days))
	for d := range days {
		entities, nums = append(entities, d.entity), append(nums, d.day)
	}
	b, err := s.conn.PrepareBatch(ctx, "INSERT INTO "+s.table("telemetry_repeats")+" (entity_id, day)")
	if err != nil {
		return fail("prepare insert into telemetry_repeats", err)
	}
	defer b.Abort()
	if err := b.Column(0).Append(entities); err != nil {
		return fail("fill insert into telemetry_repeats", err)
	}
	if err := b.Column(1).Append(nums); err != nil {
		return fail("fill insert into telemetry_repeats", err)
	}
	if err := b.Send(); err != nil {
		return fail("insert into telemetry_repeats", err)
	}
	return nil
}

// insertBlockRows is the most rows the driver buffers for one insert at a time.
const insertBlockRows = 16384

func (s *Store) insert(ctx context.Context, table, columns string, c *columns, latest bool) (err error) {
	start := time.Now()
	defer func() {
		insertDuration.UpdateDuration(start)
		if err != nil {
			insertErrors.Inc()
		} else {
			insertedRows.Add(len(c.ts))
		}
	}()
	if s.unlimitedPartitions {
		ctx = ch.Context(ctx, ch.WithSettings(ch.Settings{"max_partitions_per_insert_block": 0}))
	}
	b, err := s.conn.PrepareBatch(ctx, "INSERT INTO "+s.table(table)+columns)
	if err != nil {
		return fail("prepare insert into "+table, err)
	}
	defer b.Abort()
	// The driver copies the columns into a block of its own and grows it by
	// appending; sending a large insert in blocks of insertBlockRows (Flush keeps
	// the block's capacity) bounds that copy, which for 100,000-row spool
	// deliveries was most of a node's allocation. ClickHouse squashes the blocks
	// of one INSERT into one part (min_insert_block_size_rows, default 1,048,576).
	n := len(c.ts)
	for lo := 0; lo < n; lo += insertBlockRows {
		hi := min(lo+insertBlockRows, n)
		all := []any{c.tenant[lo:hi], c.entity[lo:hi], c.key[lo:hi], c.ts[lo:hi], c.ver[lo:hi], c.typ[lo:hi],
			c.boolV[lo:hi], c.longV[lo:hi], c.dblV[lo:hi], c.strV[lo:hi], c.jsonV[lo:hi]}
		if latest {
			all = append(all, c.lver[lo:hi])
		}
		for i, col := range all {
			if err := b.Column(i).Append(col); err != nil {
				return fail("fill insert into "+table, err)
			}
		}
		if hi < n {
			if err := b.Flush(); err != nil {
				return fail("insert into "+table, err)
			}
		}
	}
	if err := b.Send(); err != nil {
		return fail("insert into "+table, err)
	}
	return nil
}

// insertRow inserts one row.
func (s *Store) insertRow(ctx context.Context, table, columns string, values ...any) error {
	return insertRow(ctx, s.conn, s.table(table), columns, values...)
}

// insertRow inserts one row into the qualified table over conn. Inserts go
// through batches: 18.16 waits for a data block after an INSERT … VALUES sent
// as a plain query and never answers.
func insertRow(ctx context.Context, conn driver.Conn, table, columns string, values ...any) error {
	b, err := conn.PrepareBatch(ctx, "INSERT INTO "+table+columns)
	if err != nil {
		return fail("prepare insert into "+table, err)
	}
	defer b.Abort()
	if err := b.Append(values...); err != nil {
		return fail("fill insert into "+table, err)
	}
	if err := b.Send(); err != nil {
		return fail("insert into "+table, err)
	}
	return nil
}

// columns buffers a batch column by column: the driver takes whole slices, which
// costs far fewer allocations than appending row by row.
type columns struct {
	tenant, entity []uuid.UUID
	key            []string
	ts             []int64
	ver, lver      []uint64
	typ, boolV     []uint8
	longV          []int64
	dblV           []float64
	strV, jsonV    []string
	newest         []int    // Write's newest row of each series
	base           uint64   // version of the first row, taken at the write
	given          []uint64 // versions taken earlier, by row (WriteHistory's vers)
	orderer
}

// rowVer is the version of rows[i]: the one given, else one taken at the write.
func (c *columns) rowVer(i int) uint64 {
	if c.given != nil && c.given[i] != 0 {
		return c.given[i]
	}
	return c.base + uint64(i)
}

var columnsPool = sync.Pool{New: func() any { return new(columns) }}

func getColumns() *columns { return columnsPool.Get().(*columns) }

func putColumns(c *columns) {
	c.reset()
	columnsPool.Put(c)
}

func (c *columns) reset() {
	c.given = nil
	c.tenant, c.entity, c.key, c.ts = c.tenant[:0], c.entity[:0], c.key[:0], c.ts[:0]
	c.ver, c.lver, c.typ, c.boolV = c.ver[:0], c.lver[:0], c.typ[:0], c.boolV[:0]
	c.longV, c.dblV, c.strV, c.jsonV = c.longV[:0], c.dblV[:0], c.strV[:0], c.jsonV[:0]
	// Drop the strings the slices and the index still reference.
	clear(c.key[:cap(c.key)])
	clear(c.strV[:cap(c.strV)])
	clear(c.jsonV[:cap(c.jsonV)])
	c.index.Reset()
	c.newest, c.series, c.of = c.newest[:0], c.series[:0], c.of[:0]
}

// grow makes room for n more rows in every column at once: a spool delivery is
// 100,000 rows, and growing by appending allocated each column about twice over.
func (c *columns) grow(n int) {
	c.tenant, c.entity = slices.Grow(c.tenant, n), slices.Grow(c.entity, n)
	c.key, c.ts = slices.Grow(c.key, n), slices.Grow(c.ts, n)
	c.ver, c.lver = slices.Grow(c.ver, n), slices.Grow(c.lver, n)
	c.typ, c.boolV = slices.Grow(c.typ, n), slices.Grow(c.boolV, n)
	c.longV, c.dblV = slices.Grow(c.longV, n), slices.Grow(c.dblV, n)
	c.strV, c.jsonV = slices.Grow(c.strV, n), slices.Grow(c.jsonV, n)
}

func (c *columns) add(r *storage.Row, ver uint64) {
	v := &r.Value
	var b uint8
	if v.Bool {
		b = 1
	}
	var str, json string
	switch v.Type {
	case kv.String:
		str = v.Str
	case kv.JSON:
		json = v.Str
	}
	c.tenant = append(c.tenant, r.TenantID)
	c.entity = append(c.entity, r.EntityID)
	c.key = append(c.key, r.Key)
	c.ts = append(c.ts, r.Ts)
	c.ver = append(c.ver, ver)
	c.lver = append(c.lver, latestVersion(r.Ts))
	c.typ = append(c.typ, uint8(v.Type))
	c.boolV = append(c.boolV, b)
	c.longV = append(c.longV, v.Long)
	c.dblV = append(c.dblV, v.Double)
	c.strV = append(c.strV, str)
	c.jsonV = append(c.jsonV, json)
}

// latestVersion maps ts onto UInt64 keeping its order, negative times included.
func latestVersion(ts int64) uint64 { return uint64(ts) ^ (1 << 63) }

// value rebuilds a kv.Value from its columns.
func value(typ, b uint8, l int64, d float64, str, json string) kv.Value {
	switch kv.Type(typ) {
	case kv.Bool:
		return kv.BoolValue(b != 0)
	case kv.Long:
		return kv.LongValue(l)
	case kv.Double:
		return kv.DoubleValue(d)
	case kv.JSON:
		return kv.JSONValue(json)
	}
	return kv.StringValue(str)
}
