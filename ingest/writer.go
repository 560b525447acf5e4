// Package ingest is the telemetry write path: rows parsed from a request are handed
// to one of several shards, each shard groups the rows of every request waiting for
// it into one storage write (group commit), and each request is answered only after
// the write that holds its rows is durable.
package ingest

import (
	"context"
	"errors"
	"hash/maphash"
	"runtime"
	"runtime/trace"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

// ErrOverloaded is returned when a shard's queue is full. The message names the
// setting to raise, as the device sees it in its 503.
var ErrOverloaded = errors.New("telemetry write queue is full; retry later or raise SLUICE_INGEST_QUEUE_SIZE")

// ErrClosed is returned after Close.
var ErrClosed = errors.New("telemetry writer is shutting down")

// Config sizes the write path. Zero fields take the defaults.
type Config struct {
	// Shards is the number of parallel writers (default GOMAXPROCS; the node
	// passes 1 for the embedded store).
	Shards int
	// QueueSize is the number of requests that may wait per shard (default 1024).
	QueueSize int
	// MaxBatchRows caps the rows of one group commit (default 10000).
	MaxBatchRows int
	// Tally, when set, counts accepted and rejected rows per device.
	Tally Tally
}

// Writer is the sharded group-commit writer in front of storage.Telemetry.
type Writer struct {
	store  storage.Telemetry
	tally  Tally
	shards []*shard
	seed   maphash.Seed

	mu     sync.RWMutex // held for reading while enqueuing, for writing by Close
	closed bool
	wg     sync.WaitGroup
}

type request struct {
	rows []storage.Row
	done chan error
}

var requestPool = sync.Pool{New: func() any { return &request{done: make(chan error, 1)} }}

type shard struct {
	queue chan *request
	quit  chan struct{}
	batch []storage.Row
	reqs  []*request
	max   int
}

// NewWriter starts the shards of a writer over store.
func NewWriter(store storage.Telemetry, cfg Config) *Writer {
	if cfg.Shards <= 0 {
		cfg.Shards = runtime.GOMAXPROCS(0)
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 1024
	}
	if cfg.MaxBatchRows <= 0 {
		cfg.MaxBatchRows = 10000
	}
	w := &Writer{store: store, tally: cfg.Tally, seed: maphash.MakeSeed()}
	for range cfg.Shards {
		s := &shard{queue: make(chan *request, cfg.QueueSize), quit: make(chan struct{}), max: cfg.MaxBatchRows}
		w.shards = append(w.shards, s)
		w.wg.Add(1)
		go w.run(s)
	}
	return w
}

// Write stores rows and returns once they are durable. Rows may alias request
// memory: the caller must keep it alive until Write returns, which it does anyway
// because it waits. Rows of one call should belong to one entity (one request);
// that entity picks the shard, so one device's writes keep their order.
func (w *Writer) Write(ctx context.Context, rows []storage.Row) error {
	if len(rows) == 0 {
		return nil
	}
	s := w.shards[w.shardOf(rows[0].EntityID)]
	req := requestPool.Get().(*request)
	req.rows = rows

	w.mu.RLock()
	if w.closed {
		w.mu.RUnlock()
		requestPool.Put(req)
		w.rejected(rows, ReasonUnavailable)
		return ErrClosed
	}
	select {
	case s.queue <- req:
	default:
		w.mu.RUnlock()
		requestPool.Put(req)
		pointsOverloaded.Add(len(rows))
		w.rejected(rows, ReasonQueueFull)
		return ErrOverloaded
	}
	w.mu.RUnlock()

	// Wait for the commit even if ctx ends: the rows may already be in a batch and
	// req must not go back to the pool while a shard still holds it.
	err := <-req.done
	req.rows = nil
	requestPool.Put(req)
	return err
}

// Queued is the number of write requests waiting in the shards' queues.
func (w *Writer) Queued() int {
	n := 0
	for _, s := range w.shards {
		n += len(s.queue)
	}
	return n
}

func (w *Writer) shardOf(id uuid.UUID) int {
	return int(maphash.Bytes(w.seed, id[:]) % uint64(len(w.shards)))
}

// run is a shard's loop: take one request, then whatever else is already waiting
// or arrives while the shard yields to the request goroutines (up to max rows),
// write them in one call, answer them all.
func (w *Writer) run(s *shard) {
	defer w.wg.Done()
	for {
		var first *request
		select {
		case first = <-s.queue:
		case <-s.quit:
			// Close has stopped new enqueues; drain what is left.
			for {
				select {
				case r := <-s.queue:
					w.commit(s, r)
				default:
					return
				}
			}
		}
		w.commit(s, first)
	}
}

// lingerYields is how many yields in a row that bring no new request end a group
// commit's gathering. Each fsync costs the same however many requests it carries
// (0.2-1 ms on the virtio disk of bench/RESULTS.md), so a few more requests per
// commit are nearly free throughput. Yielding (runtime.Gosched) rather than
// sleeping lets the request goroutines already runnable (parsing requests bound
// for this queue) run first, and costs nothing on an idle node: Gosched returns at
// once when nothing else is runnable, so a lone request is committed without
// delay. sluice-bench -only embedded -payload single (64 connections), 18 runs
// each, alternated with the build before (2026-11-22 12:43-12:52): mean 31.4k →
// 33.7k req/s, median 30.6k → 35.3k, p99 median 4.2 → 3.6 ms; rows per commit
// about 80 → 105. 4 yields measured about as 2, 8 worse (bench/RESULTS.md).
const lingerYields = 2

// lingerMax bounds the gathering when requests keep arriving (many devices, each
// yield bringing some): about one commit's time on that disk, so lingering at most
// doubles the wait of the batch's first request.
const lingerMax = 500 * time.Microsecond

// storeWriteRegion names a group commit's store write in execution traces.
const storeWriteRegion = "ingest: store write"

func (w *Writer) commit(s *shard, first *request) {
	s.batch = append(s.batch[:0], first.rows...)
	s.reqs = append(s.reqs[:0], first)
	s.gather()
	deadline := time.Now().Add(lingerMax)
	for idle := 0; idle < lingerYields && len(s.batch) < s.max && time.Now().Before(deadline); {
		runtime.Gosched()
		if s.gather() == 0 {
			idle++
		} else {
			idle = 0
		}
	}
	start := time.Now()
	// A region in execution traces (sluice-bench -trace; go tool trace, "User-defined
	// regions"): it splits each slow commit into time on a CPU, waiting for one
	// and waiting for the store's sync. Free when no trace runs.
	region := trace.StartRegion(context.Background(), storeWriteRegion)
	err := w.store.Write(context.Background(), s.batch)
	region.End()
	batchDuration.UpdateDuration(start)
	batchRows.Update(float64(len(s.batch)))
	switch {
	case err == nil:
		pointsAccepted.Add(len(s.batch))
	case errors.Is(err, ErrSpoolFull):
		spoolFull.Add(len(s.batch))
	default:
		pointsFailed.Add(len(s.batch))
	}
	for i, r := range s.reqs {
		if err != nil {
			// Before the answer: the request's rows are the writer's until then.
			w.rejected(r.rows, reasonOf(err))
		}
		r.done <- err
		s.reqs[i] = nil
	}
	if err == nil && w.tally != nil {
		// After the answers, off their latency: only the rows' entity ids are
		// read, and the batch holds copies of those.
		w.tally.Accepted(s.batch)
	}
	clear(s.batch) // drop references into request bodies
}

// gather moves the requests waiting in the queue into the batch, up to max rows,
// without blocking, and returns how many it took.
func (s *shard) gather() int {
	n := 0
	for len(s.batch) < s.max {
		select {
		case r := <-s.queue:
			s.batch = append(s.batch, r.rows...)
			s.reqs = append(s.reqs, r)
			n++
		default:
			return n
		}
	}
	return n
}

func (w *Writer) rejected(rows []storage.Row, reason string) {
	if w.tally != nil {
		w.tally.Rejected(rows, reason)
	}
}

// Close stops accepting writes, commits everything queued, and waits for the shards.
func (w *Writer) Close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	w.mu.Unlock()
	for _, s := range w.shards {
		close(s.quit)
	}
	w.wg.Wait()
}
