//go:build !linux

package httpapi

// peerOpen cannot peek without blocking here: every client counts as there,
// and waits end at their timeout as before.
func peerOpen(uintptr) bool { return true }
