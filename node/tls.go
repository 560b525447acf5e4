package node

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
)

// dualListener serves HTTPS and plain HTTP on one port: the first byte of a
// connection tells them apart (0x16 starts a TLS handshake record). The decision is
// made on the first Read, inside the connection's own goroutine, so a client that
// sends nothing never blocks Accept.
func dualListener(ln net.Listener, certFile, keyFile string) (net.Listener, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("cannot load SSL_PEM_CERT / SSL_PEM_KEY: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	return &sniffListener{Listener: ln, tls: cfg}, nil
}

type sniffListener struct {
	net.Listener
	tls *tls.Config
}

func (l *sniffListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &sniffConn{Conn: c, tls: l.tls}, nil
}

type sniffConn struct {
	net.Conn
	tls   *tls.Config
	once  sync.Once
	inner net.Conn
}

// peekedConn replays the bytes buffered while sniffing.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func (c *sniffConn) sniff() {
	r := bufio.NewReaderSize(c.Conn, 512)
	first, err := r.Peek(1)
	raw := &peekedConn{Conn: c.Conn, r: r}
	if err == nil && first[0] == 0x16 {
		c.inner = tls.Server(raw, c.tls)
		return
	}
	c.inner = raw
}

func (c *sniffConn) Read(p []byte) (int, error) {
	c.once.Do(c.sniff)
	return c.inner.Read(p)
}

func (c *sniffConn) Write(p []byte) (int, error) {
	c.once.Do(c.sniff)
	return c.inner.Write(p)
}

// SyscallConn reaches the socket under either protocol, so that a waiting
// request can see its client hang up (httpapi's hang-up probe).
func (c *sniffConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return sc.SyscallConn()
}

// Close closes the socket directly: it must not wait for a sniff that is still
// blocked reading from a silent client.
func (c *sniffConn) Close() error { return c.Conn.Close() }
