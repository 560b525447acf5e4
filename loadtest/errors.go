package loadtest

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"syscall"

	"github.com/valyala/fasthttp"
)

// Classify names the kind of a transport error for counting: "timeout",
// "connection refused", "connection reset", "connection closed", "no free
// connection", "dns", "tls", or "other". The kinds are few so that a report can list
// them all; the first error's full text is kept in Result.FirstErr.
func Classify(err error) string {
	var dnsErr *net.DNSError
	switch {
	case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, fasthttp.ErrDialTimeout):
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "connection reset"
	case errors.Is(err, fasthttp.ErrConnectionClosed), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed"
	case errors.Is(err, fasthttp.ErrNoFreeConns):
		return "no free connection"
	case errors.As(err, &dnsErr):
		return "dns"
	case isTLS(err):
		return "tls"
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return "timeout"
	}
	return "other"
}

func isTLS(err error) bool {
	var rec tls.RecordHeaderError
	var verify *tls.CertificateVerificationError
	var alert tls.AlertError
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	return errors.As(err, &rec) || errors.As(err, &verify) || errors.As(err, &alert) ||
		errors.As(err, &unknown) || errors.As(err, &host)
}
