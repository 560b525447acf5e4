package httpapi

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// Connection states of the kernel's TCP (include/net/tcp_states.h).
const (
	tcpClose     = 7
	tcpCloseWait = 8
)

// peerOpen asks the kernel, without waiting or taking anything, whether the
// peer closed the socket. On TCP the connection's state says it: CLOSE_WAIT
// once the peer's FIN arrived, CLOSE after a reset. That holds under TLS too,
// where peeking would find the client's close_notify alert, bytes that read as
// "still there". Other sockets are peeked: the peer closed it when a read
// would see the end (0 bytes) or an error; nothing to read yet, or a
// pipelined request waiting, means it is still there.
func peerOpen(fd uintptr) bool {
	if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
		return info.State != tcpCloseWait && info.State != tcpClose
	}
	var b [1]byte
	n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	if err == syscall.EAGAIN || err == syscall.EINTR {
		return true
	}
	return err == nil && n > 0
}
