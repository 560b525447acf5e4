// Package embedded is the default storage back end: telemetry, attributes and
// entities in one local Pebble folder, owned by one process. Every write is synced
// to disk before it returns. The key layout is described in keys.go.
package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/internal/pebblelog"
	"github.com/sluice-iot/sluice/storage"
)

// Options tune the embedded back end; the zero value is a sane default.
type Options struct {
	// CacheSize is the block cache size in bytes; 0 means 64 MiB.
	CacheSize int64
	// Logger receives Pebble's errors; its informational chatter goes to Debug.
	// nil means slog.Default().
	Logger *slog.Logger
	// MinFreeBytes is the free disk space below which writes are refused
	// (space.go); 0 means DefaultMinFreeBytes, negative no guard.
	MinFreeBytes int64
}

// DB is the embedded back end. It implements storage.Backend and is safe for
// concurrent use.
type DB struct {
	pdb  *pebble.DB
	lock *pebble.Lock

	// mu makes Close wait for running operations: they hold it for reading.
	mu     sync.RWMutex
	closed bool

	// stripes serialise read-modify-write of one entity's latest values and
	// attributes; Write locks several, always in ascending order.
	stripes [stripeCount]sync.Mutex
	// entities serialises Put and Delete so the unique check and the index update
	// are one atomic step. Entity writes are rare; one lock is enough.
	entities sync.Mutex

	space space
}

var _ storage.Backend = (*DB)(nil)

// Open opens or creates the back end in dir. The folder is locked for the life of
// the DB: a second Open of it, from this or any other process, fails.
func Open(dir string, opts Options) (*DB, error) {
	if opts.CacheSize <= 0 {
		opts.CacheSize = 64 << 20
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cannot create storage folder: %w", err)
	}
	lock, err := pebble.LockDirectory(dir, vfs.Default)
	if err != nil {
		return nil, fmt.Errorf("cannot open storage folder %s: it is in use by another Sluice process (or already open in this one): %w", dir, err)
	}
	cache := pebble.NewCache(opts.CacheSize)
	// Open takes its own reference on the cache.
	defer cache.Unref()
	po := &pebble.Options{
		Cache:              cache,
		Lock:               lock,
		Logger:             pebblelog.Logger{L: opts.Logger.With("component", "pebble")},
		FormatMajorVersion: pebble.FormatNewest,
		Merger:             concatMerger,
		EventListener:      stallListener(opts.Logger),
	}
	// Write looks up the latest value of every series it touches; blooms keep those
	// point reads off disk. Deeper levels inherit the policy.
	po.Levels[0].FilterPolicy = bloom.FilterPolicy(10)
	tuneForTelemetry(po)
	pdb, err := pebble.Open(dir, po)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("cannot open storage folder %s: %w", dir, err)
	}
	if err := migrateHistory(pdb, opts.Logger); err != nil {
		pdb.Close()
		lock.Close()
		return nil, fmt.Errorf("cannot move the history in %s to the chunked layout: %w", dir, err)
	}
	if opts.MinFreeBytes == 0 {
		opts.MinFreeBytes = DefaultMinFreeBytes
	}
	return &DB{pdb: pdb, lock: lock, space: space{dir: dir, minFree: opts.MinFreeBytes}}, nil
}

// tuneForTelemetry sizes Pebble for the write pattern of telemetry: a steady
// stream of small new points spread over every series, so each memtable flush
// overlaps the whole key range of the base level and each L0 compaction rewrites
// all of it. Pebble's defaults (4 MiB memtables, compaction at 4 L0 sublevels,
// stop at 12, 64 MiB base level) made that rewrite happen every 16 MiB written:
// BenchmarkWriteGroupCommit measured a write amplification of 8.1 after 15M points
// and 99k points/s, with compactions over 75% of the CPU and write stalls of up to
// a second in sluice-bench. With the values below the same run writes each byte
// about 1.4 times (bench/RESULTS.md has the numbers and profiles).
func tuneForTelemetry(po *pebble.Options) {
	// Memtables start at 256 KiB and double up to this size, so a quiet or
	// short-lived node stays small; a busy one flushes 16× less often, and every
	// L0 table it flushes carries 16× more points per rewrite of the base level.
	po.MemTableSize = 64 << 20
	// Let L0 collect more flushed tables before compacting them into the base
	// level together (fewer, larger rewrites), and stop writes only well past
	// that, so a burst waits for compaction rarely instead of every few seconds.
	// Reads merge at most this many more L0 tables.
	po.L0CompactionThreshold = 8
	po.L0StopWritesThreshold = 32
	// A larger base level spreads the same data over fewer levels below it.
	po.LBaseMaxBytes = 256 << 20
}

// Close flushes the memtable (so the next Open replays no log) and releases the
// folder. Operations after Close return storage.ErrUnavailable; Close is idempotent.
func (d *DB) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	err := d.pdb.Flush()
	err = errors.Join(err, d.pdb.Close(), d.lock.Close())
	if err != nil {
		return fmt.Errorf("cannot close storage: %w", err)
	}
	return nil
}

var errClosed = fmt.Errorf("embedded storage is closed: %w", storage.ErrUnavailable)

// enter starts an operation; on nil the caller must call leave.
func (d *DB) enter(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d.mu.RLock()
	if d.closed {
		d.mu.RUnlock()
		return errClosed
	}
	return nil
}

func (d *DB) leave() { d.mu.RUnlock() }

// enterWrite is enter for an operation that adds data: it is refused while the
// disk is nearly full (space.go).
func (d *DB) enterWrite(ctx context.Context) error {
	if err := d.space.check(); err != nil {
		return err
	}
	return d.enter(ctx)
}

const stripeCount = 256

func stripeOf(id uuid.UUID) int {
	// The last bytes of v4 and v7 ids are random.
	return int(id[15] ^ id[11])
}

func (d *DB) lockEntity(id uuid.UUID) func() {
	m := &d.stripes[stripeOf(id)]
	m.Lock()
	return m.Unlock
}

// get returns a copy of the value of key, or nil, false when it is absent.
func get(r pebble.Reader, key []byte) ([]byte, bool, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	v = append([]byte(nil), v...)
	return v, true, closer.Close()
}
