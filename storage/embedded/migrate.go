package embedded

import (
	"bytes"
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2"
)

// migrateBatchBytes is about how much a migration batch writes before it commits.
const migrateBatchBytes = 4 << 20

// migrateHistory moves history points stored one key per point (table h, by
// stores from before chunked history) into windows (table s), at Open, before
// anything else reads or writes. Each batch converts whole windows and deletes
// their point keys, so a crash in the middle leaves every point in exactly one
// of the two forms and the next Open carries on.
func migrateHistory(pdb *pebble.DB, log *slog.Logger) error {
	table := []byte{tableHistory}
	it, err := pdb.NewIter(&pebble.IterOptions{LowerBound: table, UpperBound: prefixEnd(table)})
	if err != nil {
		return err
	}
	defer it.Close()
	if !it.First() {
		return it.Error()
	}
	log.Info("storage: moving history to the chunked layout, once")
	var (
		b      = pdb.NewBatch()
		from   = bytes.Clone(it.Key()) // first point key the batch converts
		series []byte                  // the current window's series prefix, table s
		window int64
		pts    []point
		moved  int
	)
	defer func() { b.Close() }()
	// put adds the collected window to the batch.
	put := func() error {
		if len(pts) == 0 {
			return nil
		}
		moved += len(pts)
		err := b.Set(appendTs(bytes.Clone(series), window), appendChunk(nil, window, pts), nil)
		pts = pts[:0]
		return err
	}
	// commit commits the batch, deleting the point keys in [from, to).
	commit := func(to []byte) error {
		if err := put(); err != nil {
			return err
		}
		if err := b.DeleteRange(from, to, nil); err != nil {
			return err
		}
		if err := b.Commit(pebble.Sync); err != nil {
			return err
		}
		b.Close()
		b = pdb.NewBatch()
		return nil
	}
	for valid := true; valid; valid = it.Next() {
		k := it.Key()
		if len(k) < 1+16+1+8 {
			return fmt.Errorf("%w: history key of %d bytes", errCorrupt, len(k))
		}
		prefix, ts := k[1:len(k)-8], decodeTs(k[len(k)-8:])
		if len(pts) == 0 || !bytes.Equal(prefix, series[1:]) || windowOf(ts) != window {
			if b.Len() >= migrateBatchBytes {
				if err := commit(k); err != nil {
					return err
				}
				from = bytes.Clone(k)
			} else if err := put(); err != nil {
				return err
			}
			series = append(append(series[:0], tableSeries), prefix...)
			window = windowOf(ts)
		}
		raw, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		v, err := decodeValue(raw)
		if err != nil {
			return err
		}
		pts = append(pts, point{ts, v})
	}
	if err := it.Error(); err != nil {
		return err
	}
	if err := commit(prefixEnd(table)); err != nil {
		return err
	}
	log.Info("storage: history moved to the chunked layout", "points", moved)
	return nil
}
