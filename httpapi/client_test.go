package httpapi

import (
	"net"
	"net/netip"
	"testing"

	"github.com/valyala/fasthttp"
)

func TestClientAddr(t *testing.T) {
	s := &Server{cfg: Config{TrustedProxies: []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8"),
	}}}
	for _, c := range []struct {
		peer string
		xff  []string
		want string
	}{
		{"203.0.113.9", nil, "203.0.113.9"},
		// An untrusted peer's header is the client's own word: ignored.
		{"203.0.113.9", []string{"198.51.100.1"}, "203.0.113.9"},
		{"10.0.0.5", []string{"198.51.100.1"}, "198.51.100.1"},
		// From the right: the client may have sent a header of its own.
		{"10.0.0.5", []string{"1.2.3.4, 198.51.100.1"}, "198.51.100.1"},
		{"10.0.0.5", []string{"1.2.3.4, 198.51.100.1, 10.9.9.9"}, "198.51.100.1"},
		{"10.0.0.5", []string{"1.2.3.4", "198.51.100.1,10.1.1.1"}, "198.51.100.1"},
		{"10.0.0.5", []string{"::ffff:198.51.100.7"}, "198.51.100.7"},
		{"fd00::1", []string{"2001:db8::1"}, "2001:db8::1"},
		// Nothing or garbage after trusted hops: the last trusted hop.
		{"10.0.0.5", nil, "10.0.0.5"},
		{"10.0.0.5", []string{"10.2.2.2"}, "10.2.2.2"},
		{"10.0.0.5", []string{"unknown, 10.3.3.3"}, "10.3.3.3"},
	} {
		var req fasthttp.Request
		for _, v := range c.xff {
			req.Header.Add("X-Forwarded-For", v)
		}
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, &net.TCPAddr{IP: net.ParseIP(c.peer), Port: 1234}, nil)
		if got := s.clientAddr(&ctx); got != c.want {
			t.Errorf("peer %s, X-Forwarded-For %q: %s, want %s", c.peer, c.xff, got, c.want)
		}
	}
}
