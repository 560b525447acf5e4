//go:build unix

package ingest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockFile is the spool folder's lock; not Pebble's "LOCK", which the move out
// of Pebble removes (migratePebble).
const lockFile = "spool.lock"

// lockDir takes the spool folder for this process: an exclusive flock on
// dir/spool.lock, held until the returned file is closed (or the process ends). Two
// processes on one spool each delivered and deleted the other's segments,
// acknowledged rows included; the embedded store has Pebble's LOCK for this.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another process is using it (%s is locked)", f.Name())
		}
		return nil, fmt.Errorf("cannot lock %s: %w", f.Name(), err)
	}
	return f, nil
}
