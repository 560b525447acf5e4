//go:build !linux

package procs

// Elsewhere the nice value belongs to the whole process: leave it alone.
func background() bool { return false }
