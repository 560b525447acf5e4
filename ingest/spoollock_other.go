//go:build !unix

package ingest

import (
	"os"
	"path/filepath"
)

const lockFile = "spool.lock"

// lockDir cannot lock a folder here: one process per spool is up to the
// operator.
func lockDir(dir string) (*os.File, error) {
	return os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o644)
}
