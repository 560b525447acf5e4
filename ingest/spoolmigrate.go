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
// cut short (this version writes segments only once Pebble's files are gone),
// so it starts over; a crash in between at worst delivers records twice, which
// the sink tolerates.
func migratePebble(dir string, log *slog.Logger) error {
	desc, err := pebble.Peek(dir, vfs.Default)
	if err != nil || !desc.Exists {
		return nil // not a Pebble store (Peek fails on a folder without one)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), segSuffix) || e.Name() == cursorsFile {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	db, err := pebble.Open(dir, &pebble.Options{Logger: pebblelog.Logger{L: log.With("component", "spool")}})
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, segName(1)), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		db.Close()
		return err
	}
	n, err := copyPebble(db, f)
	err = errors.Join(err, f.Sync(), f.Close(), db.Close())
	if err != nil {
		return err
	}
	if entries, err = os.ReadDir(dir); err != nil { // Pebble wrote new files opening and closing
		return err
	}
	for _, e := range entries {
		if name := e.Name(); !strings.HasSuffix(name, segSuffix) && name != cursorsFile {
			if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
				return err
			}
		}
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	log.Info("telemetry spool moved out of Pebble into segment files", "records", n)
	return nil
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
