package apitest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-iot/sluice/config"
)

// selfSigned writes a certificate for 127.0.0.1 and its key as PEM files.
func selfSigned(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "sluice-test"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	return certFile, keyFile
}

// TestHTTPSAndHTTPOnOnePort checks that with SSL_ENABLED the port answers both
// HTTPS and plain HTTP.
func TestHTTPSAndHTTPOnOnePort(t *testing.T) {
	cert, key := selfSigned(t)
	n := startNode(t, func(c *config.Config) {
		c.SSL = config.SSL{SSLEnabled: true, PemCert: cert, PemKey: key}
	})
	n.must(200, "POST", "/api/v1/"+n.Token+"/telemetry", `{"plain":1}`)

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	httpsURL := strings.Replace(n.URL, "http://", "https://", 1)
	resp, err := client.Post(httpsURL+"/api/v1/"+n.Token+"/telemetry", "application/json", strings.NewReader(`{"secure":1}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.TLS == nil {
		t.Fatalf("HTTPS: status %d, TLS %v", resp.StatusCode, resp.TLS != nil)
	}
	resp, err = client.Get(httpsURL + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("HTTPS healthz: %v %v", err, resp)
	}
	resp.Body.Close()
}

// TestHangupOnTheSSLPort: with SSL_ENABLED a poll whose client hangs up is
// freed at the next probe (5 s), under TLS (whose close_notify a peek would
// read as data) and plain HTTP alike, as on a plain port.
func TestHangupOnTheSSLPort(t *testing.T) {
	cert, key := selfSigned(t)
	n := startNode(t, func(c *config.Config) {
		c.SSL = config.SSL{SSLEnabled: true, PemCert: cert, PemKey: key}
	})
	addr := strings.TrimPrefix(n.URL, "http://")
	poll := []byte("GET /api/v1/" + n.Token + "/rpc?timeout=60000 HTTP/1.1\r\nHost: x\r\n\r\n")
	secure, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []net.Conn{secure, plain} {
		if _, err := c.Write(poll); err != nil {
			t.Fatal(err)
		}
	}
	waitPolls := func(want int64) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for n.node.Engine().OpenPolls() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%d open polls, want %d", n.node.Engine().OpenPolls(), want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitPolls(2)
	secure.Close() // sends close_notify, then FIN
	plain.Close()
	waitPolls(0)
}

func TestSSLWithBadFilesFailsStart(t *testing.T) {
	c := config.Default()
	c.SSL = config.SSL{SSLEnabled: true, PemCert: "/nonexistent.pem", PemKey: "/nonexistent.key"}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "SSL_PEM_CERT") {
		t.Fatalf("want an error naming SSL_PEM_CERT, got %v", err)
	}
}
