package ingest

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sluice-iot/sluice/storage"
)

// Dead-letter files (Spool.deadLetter) are read, listed and replayed here for
// the operator's `sluice deadletter` while the node may be running, without
// the spool folder's lock (lockDir), which the node holds as long as it runs.
// None is needed: the node creates each file, writes its records in one
// append, syncs it and closes it, and never opens, reads, renames or removes
// it again. The log passes over their names (listSegments wants a
// hexadecimal segment number), segment removal names only the log's segments
// (removeSegments, checkTail), and the spool's start leaves them, and the
// .replayed files, alone: migratePebble removes only Pebble's own files
// unless the folder still holds a Pebble store, which a version that writes
// dead letters moves out at its first start, before it delivers anything.
// The one overlap is a node appending to a file of the same name, which
// takes two dead letters in the same nanosecond; the files written here are
// created exclusively instead.

// deadLetterTime is the UTC time in a dead-letter file's name, as
// Spool.deadLetter writes it: fixed width, so names sort by time.
const deadLetterTime = "20060102T150405.000000000Z"

// replayedSuffix ends the name of a dead-letter file once replayed: the file
// is kept, but a listing and a second replay no longer take it for one to do.
const replayedSuffix = ".replayed"

// DeadLetterFile describes a dead-letter file of a spool folder.
type DeadLetterFile struct {
	Name  string
	Path  string
	Bytes int64
	Rows  int
	// Damaged counts the stretches of bytes that do not check out and the
	// records that do not decode; their rows are not counted in Rows.
	Damaged int
}

// DeadLetter is what a dead-letter file holds.
type DeadLetter struct {
	Rows []storage.Row
	// Versions[i] is Rows[i]'s version (internal/version), taken when the
	// spool took the row; 0 for a row of a record written before versions
	// were, which the history store gives one when it is written.
	Versions []uint64
	// Damaged is as in DeadLetterFile; DamagedBytes is their size.
	Damaged      int
	DamagedBytes int64
	// from is the lane and sequence number of the spool record each row came
	// from, kept in the file the rows still refused go to.
	from []recordOrigin
}

type recordOrigin struct {
	lane byte
	seq  uint64
}

// ListDeadLetters returns the dead-letter files in the spool folder dir that
// are not replayed yet, oldest first.
func ListDeadLetters(dir string) ([]DeadLetterFile, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("cannot list the dead-letter files: %w", err)
	}
	var files []DeadLetterFile
	for _, e := range entries {
		if !isDeadLetter(e.Name()) || !e.Type().IsRegular() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		dl, size, err := readDeadLetter(path)
		if errors.Is(err, os.ErrNotExist) {
			continue // replayed (renamed) since the listing
		}
		if err != nil {
			return nil, err
		}
		files = append(files, DeadLetterFile{Name: e.Name(), Path: path, Bytes: size, Rows: len(dl.Rows), Damaged: dl.Damaged})
	}
	return files, nil
}

// isDeadLetter reports whether name is that of a dead-letter file not
// replayed yet.
func isDeadLetter(name string) bool {
	return strings.HasPrefix(name, deadLetterPrefix) && strings.HasSuffix(name, segSuffix)
}

// ReadDeadLetter returns the rows of the dead-letter file at path with their
// versions, and how many stretches of damage it passed over. Any file in the
// segment format reads, a segment of the log included.
func ReadDeadLetter(path string) ([]storage.Row, []uint64, int, error) {
	dl, _, err := readDeadLetter(path)
	if err != nil {
		return nil, nil, 0, err
	}
	return dl.Rows, dl.Versions, dl.Damaged, nil
}

// readDeadLetter reads the file at path and returns what it holds and its
// size.
func readDeadLetter(path string) (*DeadLetter, int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, fmt.Errorf("cannot read the dead-letter file: %w", err)
	}
	return decodeDeadLetter(b), int64(len(b)), nil
}

// decodeDeadLetter decodes the records of a dead-letter file with the log's
// own readers (recordAt, decodeVersioned). It does not use scanSegment: that
// looks past damage only for records numbered after those before it, as the
// log's are, while every record of a dead-letter file carries the number of
// the spool record its row came from, most often one number for all; here any
// record that checks out after damage is read.
func decodeDeadLetter(b []byte) *DeadLetter {
	dl := &DeadLetter{}
	for off := 0; off < len(b); {
		h, ok := recordAt(b, off)
		if !ok {
			skip := nextRecord(b[off:], 0)
			if skip < 0 {
				skip = len(b) - off // damage, or a write cut off, up to the end
			}
			dl.damage(skip)
			off += skip
			continue
		}
		end := off + recHeaderLen + h.n
		dl.decode(b[off+recHeaderLen:end], recordOrigin{h.lane, h.seq})
		off = end
	}
	return dl
}

// decode appends the rows of one record, or counts it damaged.
func (dl *DeadLetter) decode(payload []byte, from recordOrigin) {
	n := len(dl.Rows)
	rows, ver, err := decodeVersioned(dl.Rows, payload, nil)
	if err != nil {
		dl.Rows = rows[:n]
		dl.damage(recHeaderLen + len(payload))
		return
	}
	dl.Rows = rows
	for j := range len(rows) - n {
		v := ver
		if ver != 0 {
			v += uint64(j) // a record's rows count up from its version
		}
		dl.Versions = append(dl.Versions, v)
		dl.from = append(dl.from, from)
	}
}

func (dl *DeadLetter) damage(bytes int) {
	dl.Damaged++
	dl.DamagedBytes += int64(bytes)
}

// WriteDeadLetter writes rows with their versions (vers[i] is rows[i]'s, 0
// for none) to a new dead-letter file in dir, synced, its name too, and
// returns its path. Each row is a record of its own, as the spool writes
// them; its lane and sequence number are 0.
func WriteDeadLetter(dir string, rows []storage.Row, vers []uint64) (string, error) {
	if len(vers) != len(rows) {
		return "", fmt.Errorf("cannot write a dead-letter file: %d rows with %d versions", len(rows), len(vers))
	}
	idx := make([]int, len(rows))
	for i := range idx {
		idx[i] = i
	}
	return writeDeadLetter(dir, &DeadLetter{Rows: rows, Versions: vers, from: make([]recordOrigin, len(rows))}, idx)
}

// writeDeadLetter writes the rows of dl at idx to a new dead-letter file in
// dir, as Spool.deadLetter does (each row a record with the lane and sequence
// number it came from and its own version), and returns its path. The file
// is created exclusively, so neither the node nor another replay appends to
// it, and a failed write removes it.
func writeDeadLetter(dir string, dl *DeadLetter, idx []int) (string, error) {
	var enc recordEncoder
	var buf []byte
	for _, i := range idx {
		start := len(buf)
		buf = enc.append(append(buf, make([]byte, recHeaderLen)...), dl.Rows, []int32{int32(i)}, dl.Versions[i])
		putHeader(buf[start:], dl.from[i].lane, dl.from[i].seq, crc32.Checksum(buf[start+recHeaderLen:], castagnoli))
	}
	f, err := createDeadLetter(dir)
	if err != nil {
		return "", fmt.Errorf("cannot create a dead-letter file: %w", err)
	}
	_, err = f.Write(buf)
	if err == nil {
		err = syncData(f)
	}
	if err := errors.Join(err, f.Close()); err != nil {
		return "", fmt.Errorf("cannot write the dead-letter file %s: %w", f.Name(), errors.Join(err, os.Remove(f.Name())))
	}
	if err := syncDir(dir); err != nil {
		return "", fmt.Errorf("cannot sync the folder of the dead-letter file %s: %w", f.Name(), err)
	}
	return f.Name(), nil
}

// createDeadLetter creates a dead-letter file named for the time now, taking
// the next nanosecond's name should one be taken.
func createDeadLetter(dir string) (*os.File, error) {
	for {
		path := filepath.Join(dir, deadLetterPrefix+time.Now().UTC().Format(deadLetterTime)+segSuffix)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if !errors.Is(err, os.ErrExist) {
			return f, err
		}
	}
}

// Replayed is what a replay of a dead-letter file did.
type Replayed struct {
	Rows    int // rows read from the file
	Written int // rows the history store took
	Damaged int // stretches of damage passed over (DeadLetter.Damaged)
	// Refused is how many rows the history store refused alone; RefusedTo is
	// the new dead-letter file that holds them ("" when none).
	Refused   int
	RefusedTo string
	// RenamedTo is the file's new name: its path and replayedSuffix.
	RenamedTo string
}

// ReplayDeadLetter writes the rows of the dead-letter file at path to w (the
// history store, as the spool delivers to it), then renames the file to
// path+".replayed" so that it is not replayed again by mistake; the file's
// damaged bytes, which no row was read from, stay in it. A batch w refuses
// is written in halves down to single rows, as the spool does, and the rows
// it refuses alone go to a new dead-letter file in the same folder, listed
// and replayed like any other.
//
// A replay changes no file when it fails: when w is unavailable (or ctx
// ends), or when w refuses every row, which says the cause is not mended
// yet. Rows written before the failure are written again by the next
// replay, which is harmless: each row keeps the version the spool gave it
// (ReplacingMergeTree keeps one of two equal rows; a row without one, from a
// record of an earlier version, takes a new one each time, and its copies
// hold the same value), and every row is written
// as a possible repeat, so ClickHouse marks its day for reads with FINAL. A
// version kept also means that a delete made after the row was first
// acknowledged still hides it.
func ReplayDeadLetter(ctx context.Context, w Sink, path string) (Replayed, error) {
	if name := filepath.Base(path); !strings.HasPrefix(name, deadLetterPrefix) {
		// A segment of the log renamed away under the node would lose its records.
		return Replayed{}, fmt.Errorf("%s is not a dead-letter file (%s…)", name, deadLetterPrefix)
	}
	renamed := path + replayedSuffix
	if _, err := os.Lstat(renamed); err == nil {
		return Replayed{}, fmt.Errorf("cannot replay %s: %s exists already", path, renamed)
	} else if !errors.Is(err, os.ErrNotExist) {
		return Replayed{}, fmt.Errorf("cannot replay %s: %w", path, err)
	}
	dl, _, err := readDeadLetter(path)
	if err != nil {
		return Replayed{}, err
	}
	res := Replayed{Rows: len(dl.Rows), Damaged: dl.Damaged}
	r := replayer{ctx: ctx, w: w, dl: dl}
	if err := r.writeAll(); err != nil {
		return res, fmt.Errorf("cannot replay %s; the file is left as it is: %w", path, err)
	}
	if r.written == 0 && len(r.refused) > 0 {
		return res, fmt.Errorf("cannot replay %s: the history store still refuses each of its %d rows; the file is left as it is: %w",
			path, len(r.refused), r.refusal)
	}
	res.Written, res.Refused = r.written, len(r.refused)
	if len(r.refused) > 0 {
		// Written before the rename: a crash in between leaves the rows in
		// both files, and replaying either again is harmless.
		if res.RefusedTo, err = writeDeadLetter(filepath.Dir(path), dl, r.refused); err != nil {
			return res, fmt.Errorf("cannot keep the rows still refused of %s; the file is left as it is: %w", path, err)
		}
	}
	if err := os.Rename(path, renamed); err != nil {
		return res, fmt.Errorf("replayed %s, but cannot rename it: %w", path, err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return res, fmt.Errorf("replayed %s, but cannot sync its folder after renaming it: %w", path, err)
	}
	res.RenamedTo = renamed
	return res, nil
}

// replayBatchRows is the most rows a replay writes at once, the spool's
// default delivery.
const replayBatchRows = 100000

// replayer writes a dead letter's rows, finding those the history store
// refuses alone.
type replayer struct {
	ctx     context.Context
	w       Sink
	dl      *DeadLetter
	repeat  []bool // all true: a replayed row may repeat a point the store has
	written int
	refused []int // indexes of the rows refused alone, in order
	refusal error // the first refusal
}

// writeAll writes every row, in batches; it fails when the store is
// unavailable or ctx ends.
func (r *replayer) writeAll() error {
	r.repeat = slices.Repeat([]bool{true}, min(len(r.dl.Rows), replayBatchRows))
	for lo := 0; lo < len(r.dl.Rows); lo += replayBatchRows {
		if err := r.write(lo, min(lo+replayBatchRows, len(r.dl.Rows))); err != nil {
			return err
		}
	}
	return nil
}

// write writes rows [lo, hi) and, when the store refuses them, each half
// the same way, down to single rows, which it adds to refused.
func (r *replayer) write(lo, hi int) error {
	err := r.w.WriteHistory(r.ctx, r.dl.Rows[lo:hi], r.repeat[:hi-lo], r.dl.Versions[lo:hi])
	switch {
	case err == nil:
		r.written += hi - lo
		return nil
	case errors.Is(err, storage.ErrUnavailable) || r.ctx.Err() != nil:
		return err // not about the rows: a refusal now says nothing of them
	}
	if r.refusal == nil {
		r.refusal = err
	}
	if hi-lo == 1 {
		r.refused = append(r.refused, lo)
		return nil
	}
	mid := lo + (hi-lo)/2
	if err := r.write(lo, mid); err != nil {
		return err
	}
	return r.write(mid, hi)
}
