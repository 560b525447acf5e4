package embedded

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluice-iot/sluice/storage"
)

// Pebble ends the process when a commit cannot write its log (a full disk is a
// "fatal commit error"), and a node restarted on the still-full disk cannot
// flush what it replays. So writes stop while the folder's file system has less
// than Options.MinFreeBytes free: they are refused as storage.ErrUnavailable
// (503, retry later), reads and deletes go on, and writes resume by themselves
// once space is freed. The reserve covers a memtable's log and flush (64 MiB)
// with room for compactions to go on.

// DefaultMinFreeBytes is the free space writes keep when Options.MinFreeBytes is 0.
const DefaultMinFreeBytes = 256 << 20

// spaceCheckEvery bounds how often a write asks the file system for its free
// space: a group commit per write makes a statfs per write too dear at full rate.
const spaceCheckEvery = 100 * time.Millisecond

// space is the free-space guard of a DB.
type space struct {
	dir      string
	minFree  int64        // < 0: no guard
	checked  atomic.Int64 // unix ns of the last look
	lastFree atomic.Int64
	low      atomic.Bool
	// free is for tests: the free bytes of dir; nil means ask the file system.
	free func(dir string) (int64, error)
}

// errLowSpace refuses a write while the disk is nearly full.
type errLowSpace struct{ free, min int64 }

func (e errLowSpace) Error() string {
	return fmt.Sprintf("storage unavailable: %d MiB free on the data folder's disk, writes stop below %d MiB (SLUICE_DATA_MIN_FREE_MB)", e.free>>20, e.min>>20)
}

func (e errLowSpace) Unwrap() error { return storage.ErrUnavailable }

// check refuses a write when the last look at the file system, at most
// spaceCheckEvery ago, found less than minFree bytes free. A failed look lets
// writes through: the guard only keeps Pebble from a full disk it can see.
func (s *space) check() error {
	if s.minFree < 0 {
		return nil
	}
	now := time.Now().UnixNano()
	if last := s.checked.Load(); now-last >= int64(spaceCheckEvery) && s.checked.CompareAndSwap(last, now) {
		free, err := s.freeBytes()
		s.lastFree.Store(free)
		s.low.Store(err == nil && free < s.minFree)
	}
	if s.low.Load() {
		return errLowSpace{s.lastFree.Load(), s.minFree}
	}
	return nil
}

func (s *space) freeBytes() (int64, error) {
	if s.free != nil {
		return s.free(s.dir)
	}
	return freeBytes(s.dir)
}
