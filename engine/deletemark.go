package engine

import (
	"context"
	"slices"
	"time"

	"github.com/google/uuid"
)

// deletionMarks is the mark a deletion puts on a device profile, tenant
// profile or OTA package before it checks that nothing uses it (see
// DeleteDeviceProfile): saves refuse a marked one. Each deletion under way
// names its own mark, so when two deletions of one record run at once, the
// one that finds the record in use and takes its mark back leaves the other's
// in place; with one shared flag it cleared it, and a save in between could
// give the record to a device (tenant) just before the other deletion removed
// it.
//
// Saves refuse a record while marked: while a mark younger than staleDeletion
// is there, or Deleting without marks (written by an earlier version, which
// knew no names; the next deletion drops it, as those versions did). Deleting
// itself says whether any mark is there, for nodes of earlier versions during
// a rolling upgrade. A mark older than staleDeletion is taken for a deletion
// that crashed between its mark and its end: it no longer counts, and the
// next deletion drops it.
type deletionMarks struct {
	Deleting  bool           `json:"deleting,omitempty"`
	Deletions []deletionMark `json:"deletions,omitempty"`
}

// deletionMark names one deletion under way and when it started (Unix ms).
type deletionMark struct {
	ID string `json:"id"`
	At int64  `json:"at"`
}

// staleDeletion is the age past which a mark is taken for a deletion that
// crashed: a deletion lists the records that could use the marked one, which
// takes seconds even for large tenants.
const staleDeletion = 10 * time.Minute

// marked is whether saves must refuse the record now.
func (m *deletionMarks) marked(now time.Time) bool {
	if !m.Deleting {
		return false
	}
	if len(m.Deletions) == 0 {
		return true // an earlier version's mark
	}
	cutoff := now.Add(-staleDeletion).UnixMilli()
	return slices.ContainsFunc(m.Deletions, func(d deletionMark) bool { return d.At >= cutoff })
}

// newDeletionID names a deletion.
func newDeletionID() string { return uuid.NewString() }

// mark adds the mark of deletion id, dropping the marks of crashed deletions.
// It reports whether the marks changed (false: id's mark is there already).
func (m *deletionMarks) mark(id string, now time.Time) bool {
	if slices.ContainsFunc(m.Deletions, func(d deletionMark) bool { return d.ID == id }) {
		return false
	}
	cutoff := now.Add(-staleDeletion).UnixMilli()
	m.Deletions = slices.DeleteFunc(m.Deletions, func(d deletionMark) bool { return d.At < cutoff })
	m.Deletions = append(m.Deletions, deletionMark{ID: id, At: now.UnixMilli()})
	m.Deleting = true
	return true
}

// unmark takes back the mark of deletion id; the record stays marked while
// other deletions are under way. It reports whether the marks changed.
func (m *deletionMarks) unmark(id string) bool {
	n := len(m.Deletions)
	m.Deletions = slices.DeleteFunc(m.Deletions, func(d deletionMark) bool { return d.ID == id })
	if len(m.Deletions) == n {
		return false
	}
	m.Deleting = len(m.Deletions) > 0
	return true
}

// setMark marks (deleting) or unmarks deletion id; it reports whether the
// marks changed.
func (m *deletionMarks) setMark(id string, deleting bool, now time.Time) bool {
	if deleting {
		return m.mark(id, now)
	}
	return m.unmark(id)
}

// marks gives the marks of a record that embeds them.
func (m *deletionMarks) marks() *deletionMarks { return m }

// markHeld is nil while the stored record (kind, id) holds deletion's mark,
// still fresh: the last check of a deletion before it deletes. A deletion
// slower than staleDeletion (a paused VM, a clock jump) saw its mark stop
// counting, so a save may have given the record to someone meanwhile: it is
// refused (errChangedMeanwhile) for the caller to take its mark back and try
// again.
func markHeld[T any, PT interface {
	*T
	marks() *deletionMarks
}](ctx context.Context, e *Engine, kind string, id uuid.UUID, deletion string) error {
	r, err := getRecord[T](ctx, e, kind, id)
	if err != nil {
		return notFound(err)
	}
	cutoff := e.now().Add(-staleDeletion).UnixMilli()
	if !slices.ContainsFunc(PT(r).marks().Deletions, func(d deletionMark) bool { return d.ID == deletion && d.At >= cutoff }) {
		return errChangedMeanwhile
	}
	return nil
}
