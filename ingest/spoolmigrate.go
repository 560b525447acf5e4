package ingest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluice-iot/sluice/internal/pebblelog"
)

// migratePebble moves a spool that an earlier version kept in Pebble (keys
// shard byte | sequence number, values spool records) into segment 1 of the log,
// then removes Pebble's files. Any segment already there is from a migration
// cut short before Pebble's markers went (this version writes segments only
// once they are gone), so it starts over; a crash in between at worst delivers
// records twice, which the sink tolerates.
func migratePebble(dir string, log *slog.Logger) error {
	desc, err := pebble.Peek(dir, vfs.Default)
	if err != nil || !desc.Exists {
		// Not a Pebble store (Peek fails on a folder without one), or one whose
		// move was cut short after its markers began to go, which is after its
		// copy was complete: what is left of it goes. A folder whose markers are
		// all there but which Peek cannot read is left alone.
		if err != nil {
			if marked, merr := hasMarker(dir); merr != nil || marked {
				return errors.Join(err, merr)
			}
		}
		return removeFiles(dir, pebbleFile)
	}
	if err := removeFiles(dir, spoolFile); err != nil {
		return err
	}
	n, err := copyPebbleToSegment(dir, log)
	if err != nil {
		return err
	}
	// Segment 1 is synced and its name is in the folder for good. Pebble's
	// markers go first: Peek finds a store by them, so from here on a crash
	// leaves a folder the next start takes as moved, with leftovers it removes.
	// Removed in name order, the data files went first, and a crash then made
	// the next start throw segment 1 away and copy an emptied store.
	if err := removeFiles(dir, func(name string) bool { return strings.HasPrefix(name, "marker.") }); err != nil {
		return err
	}
	if err := removeFiles(dir, func(name string) bool { return !spoolFile(name) }); err != nil {
		return err
	}
	log.Info("telemetry spool moved out of Pebble into segment files", "records", n)
	return nil
}

// spoolFile reports whether a file of the spool folder is the log's own: a
// segment, the cursors or the shard count.
func spoolFile(name string) bool {
	return strings.HasSuffix(name, segSuffix) || name == cursorsFile || strings.HasPrefix(name, shardsFile)
}

// pebbleFile reports whether a file of the spool folder is one Pebble makes.
func pebbleFile(name string) bool {
	for _, prefix := range []string{"MANIFEST-", "OPTIONS-", "marker."} {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	for _, suffix := range []string{".sst", ".log", ".blob", ".dbtmp"} {
		if strings.HasSuffix(name, suffix) {
			return true
		}
	}
	return name == "LOCK" || name == "CURRENT"
}

// hasMarker reports whether dir holds a Pebble marker file.
func hasMarker(dir string) (bool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "marker.") {
			return true, nil
		}
	}
	return false, nil
}

// removeFiles removes the entries of dir that match, then syncs dir when it
// removed any.
func removeFiles(dir string, match func(name string) bool) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	removed := false
	for _, e := range entries {
		if match(e.Name()) {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
			removed = true
		}
	}
	if !removed {
		return nil
	}
	return syncDir(dir)
}

// copyPebbleToSegment copies the Pebble store in dir into a new segment 1,
// synced, its name synced into dir, and returns how many records it holds.
func copyPebbleToSegment(dir string, log *slog.Logger) (int, error) {
	db, err := pebble.Open(dir, &pebble.Options{Logger: pebblelog.Logger{L: log.With("component", "spool")}})
	if err != nil {
		return 0, err
	}
	f, err := os.OpenFile(filepath.Join(dir, segName(1)), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		db.Close()
		return 0, err
	}
	n, err := copyPebble(db, f)
	err = errors.Join(err, f.Sync(), f.Close(), db.Close())
	if err != nil {
		return 0, err
	}
	return n, syncDir(dir)
}

func copyPebble(db *pebble.DB, f *os.File) (n int, err error) {
	it, err := db.NewIter(nil)
	if err != nil {
		return 0, err
	}
	var buf []byte
	var off int64
	for it.First(); it.Valid(); it.Next() {
		k, v := it.Key(), it.Value()
		if len(k) != 9 {
			return n, errors.Join(fmt.Errorf("unexpected key %x", k), it.Close())
		}
		buf = append(buf[:0], make([]byte, recHeaderLen)...)
		buf = append(buf, v...)
		putHeader(buf, k[0], binary.BigEndian.Uint64(k[1:]), crc32.Checksum(v, castagnoli))
		if _, err := f.WriteAt(buf, off); err != nil {
			return n, errors.Join(err, it.Close())
		}
		off += int64(len(buf))
		n++
	}
	return n, errors.Join(it.Error(), it.Close())
}
