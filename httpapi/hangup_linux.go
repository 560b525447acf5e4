package httpapi

import "syscall"

// peerOpen peeks at the socket without waiting or taking anything: the peer
// closed it when a read would see the end (0 bytes) or an error; nothing to
// read yet, or a pipelined request waiting, means it is still there.
func peerOpen(fd uintptr) bool {
	var b [1]byte
	n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	if err == syscall.EAGAIN || err == syscall.EINTR {
		return true
	}
	return err == nil && n > 0
}
