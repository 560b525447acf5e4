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
// None is needed: the node writes each file whole under a temporary name
// (tmpSuffix after segSuffix, which isDeadLetter rejects, so neither a listing
// nor a replay takes it), syncs it and only then gives it its name
// (placeDeadLetter), and never opens, reads, renames or removes it again: a
// file under a dead-letter name is complete. The log passes over their names
// (listSegments wants a hexadecimal segment number), segment removal names
// only the log's segments (removeSegments, checkTail), and the spool's start
// leaves them, and the .replayed files, alone: it removes only temporary
// files a crash left (removeDeadLetterTemps), and migratePebble removes only
// Pebble's own files unless the folder still holds a Pebble store, which a
// version that writes dead letters moves out at its first start, before it
// delivers anything. The files written here are written the same way, and
// no writer, here or the node, ever takes a name that exists.

// deadLetterTime is the UTC time in a dead-letter file's name, as
// Spool.deadLetter writes it: fixed width, so names sort by time.
const deadLetterTime = "20060102T150405.000000000Z"

// tmpSuffix ends the name of a dead-letter file being written, after
// segSuffix: isDeadLetter rejects it, and the spool's start removes one a
// crash left (removeDeadLetterTemps).
const tmpSuffix = ".tmp"

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
// is written under a temporary name and placed like the node's
// (writeDeadLetterFile), so neither the node nor another replay sees it
// incomplete or writes to it, and a failed write leaves nothing.
func writeDeadLetter(dir string, dl *DeadLetter, idx []int) (string, error) {
	var enc recordEncoder
	var buf []byte
	for _, i := range idx {
		start := len(buf)
		buf = enc.append(append(buf, make([]byte, recHeaderLen)...), dl.Rows, []int32{int32(i)}, dl.Versions[i])
		putHeader(buf[start:], dl.from[i].lane, dl.from[i].seq, crc32.Checksum(buf[start+recHeaderLen:], castagnoli))
	}
	return writeDeadLetterFile(dir, buf)
}

// deadLetterName is the path of a dead-letter file of dir named for the time
// now.
func deadLetterName(dir string) string {
	return filepath.Join(dir, deadLetterPrefix+time.Now().UTC().Format(deadLetterTime)+segSuffix)
}

// writeDeadLetterFile writes buf, whole records, to a new dead-letter file in
// dir and returns its path: under a temporary name (tmpSuffix) created
// exclusively, synced, then placed under its own name (placeDeadLetter) and
// the folder synced, so a file under a dead-letter name is always complete,
// the name survives a power cut once it returns, and a failure leaves no
// file. A crash before it returns may leave the temporary file, which the
// spool's next start removes.
func writeDeadLetterFile(dir string, buf []byte) (string, error) {
	var f *os.File
	for {
		var err error
		f, err = os.OpenFile(deadLetterName(dir)+tmpSuffix, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrExist) {
			return "", fmt.Errorf("cannot create a dead-letter file: %w", err)
		}
	}
	tmp := f.Name()
	_, err := f.Write(buf)
	if err == nil {
		err = syncData(f)
	}
	if err := errors.Join(err, f.Close()); err != nil {
		return "", fmt.Errorf("cannot write the dead-letter file %s: %w", tmp, errors.Join(err, os.Remove(tmp)))
	}
	path, err := placeDeadLetter(dir, tmp)
	if err != nil {
		return "", fmt.Errorf("cannot name the dead-letter file %s: %w", tmp, errors.Join(err, os.Remove(tmp)))
	}
	if err := syncDir(dir); err != nil {
		return "", fmt.Errorf("cannot sync the folder of the dead-letter file %s: %w", path, err)
	}
	return path, nil
}

// placeDeadLetter gives the complete file tmp a dead-letter name of dir, for
// the time now and not taken yet (the next nanosecond's should it be), and
// returns it. It links the name to the file, which fails rather than replace
// a file of that name, then removes tmp; where the file system has no hard
// links, it renames tmp to a name it found free (a writer taking that name
// in between would need the same nanosecond).
func placeDeadLetter(dir, tmp string) (string, error) {
	for {
		path := deadLetterName(dir)
		err := os.Link(tmp, path)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err == nil {
			// Left behind should this fail: removed at the spool's next start.
			os.Remove(tmp)
			return path, nil
		}
		if _, serr := os.Lstat(tmp); serr != nil {
			return "", err // tmp itself is gone (removed by a starting spool)
		}
		switch _, serr := os.Lstat(path); {
		case serr == nil:
			continue
		case !errors.Is(serr, os.ErrNotExist):
			return "", serr
		}
		if rerr := os.Rename(tmp, path); rerr != nil {
			return "", errors.Join(err, rerr)
		}
		return path, nil
	}
}

// removeDeadLetterTemps removes the temporary dead-letter files of dir
// (tmpSuffix), which only a crash, or a replay that failed to remove its
// own, leaves: their rows are still where they came from (the spool's log
// delivers them again, as their record was not done; the file a replay was
// replaying is unchanged), and a complete file of theirs already has its
// own name. A replay writing one while the node starts loses it and fails,
// changing no file. It returns how many it removed.
func removeDeadLetterTemps(dir string) (int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, deadLetterPrefix) || !strings.HasSuffix(name, segSuffix+tmpSuffix) || !e.Type().IsRegular() {
			continue
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return n, err
		}
		n++
	}
	if n > 0 {
		return n, syncDir(dir)
	}
	return 0, nil
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
	// Only a name a listing shows: a segment of the log renamed away under the
	// node would lose its records, a file being written (tmpSuffix) is not
	// complete yet, and a replayed one would be replayed again.
	switch name := filepath.Base(path); {
	case isDeadLetter(name):
	case strings.HasPrefix(name, deadLetterPrefix) && strings.HasSuffix(name, replayedSuffix):
		return Replayed{}, fmt.Errorf("%s was replayed already (its name ends in %s); to replay it again, rename it without %s", name, replayedSuffix, replayedSuffix)
	case strings.HasPrefix(name, deadLetterPrefix) && strings.HasSuffix(name, tmpSuffix):
		return Replayed{}, fmt.Errorf("%s is a dead-letter file being written, or one a crash left unfinished (its rows are still in the spool), not one to replay", name)
	default:
		return Replayed{}, fmt.Errorf("%s is not a dead-letter file (%s…%s)", name, deadLetterPrefix, segSuffix)
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
