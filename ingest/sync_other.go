//go:build !linux

package ingest

import "os"

func syncData(f *os.File) error { return f.Sync() }
