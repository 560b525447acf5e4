package apitest

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-iot/sluice/internal/testenv"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// sluiceBinary builds cmd/sluice once per test run.
func sluiceBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sluice-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "sluice")
		out, err := exec.Command("go", "build", "-o", binPath, "../cmd/sluice").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

type proc struct {
	cmd    *exec.Cmd
	stderr *testenv.Buffer
	exited chan error
}

// startBinary runs the built binary with env (added to a minimal environment) and
// waits until /healthz answers.
func startBinary(t *testing.T, url string, env ...string) *proc {
	t.Helper()
	cmd := exec.Command(sluiceBinary(t))
	cmd.Dir = t.TempDir() // no configs/sluice.yaml there: defaults + environment
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	p := &proc{cmd: cmd, stderr: new(testenv.Buffer), exited: make(chan error, 1)}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-p.exited:
			t.Fatalf("sluice exited during start-up: %v\n%s", err, p.stderr)
		default:
		}
		if r, err := http.Get(url + "/healthz"); err == nil {
			r.Body.Close()
			if r.StatusCode == 200 {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluice not ready after 60 s\n%s", p.stderr)
		}
		time.Sleep(20 * time.Millisecond) // polling a child process for readiness
	}
}

// TestBinaryKill9KeepsAckedTelemetry starts the real binary, acknowledges writes,
// kills it with SIGKILL, restarts it on the same folder, and finds every point.
func TestBinaryKill9KeepsAckedTelemetry(t *testing.T) {
	port := freePort(t)
	data := t.TempDir()
	env := []string{"HTTP_BIND_ADDRESS=127.0.0.1", fmt.Sprintf("HTTP_BIND_PORT=%d", port), "SLUICE_DATA_DIR=" + data, "SLUICE_DEMO=true"}
	n := &testNode{t: t, URL: fmt.Sprintf("http://127.0.0.1:%d", port)}
	p := startBinary(t, n.URL, env...)
	// main prints the demo accounts once the node is up, so just after /healthz
	// answers they may not be there yet.
	eventually(t, 10*time.Second, "the demo token printed at start-up", func() bool {
		return strings.Contains(p.stderr.String(), "DHT11_DEMO_TOKEN")
	})
	auth := n.tenantAuth()
	id, token := n.createDevice(auth, "crash")

	const writers, perWriter = 8, 25
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				ts := 1_000_000 + w*perWriter + i
				n.must(200, "POST", "/api/v1/"+token+"/telemetry", fmt.Sprintf(`{"ts":%d,"values":{"seq":%d}}`, ts, ts))
			}
		})
	}
	wg.Wait()
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited

	startBinary(t, n.URL, env...)
	// The JWT issued before the crash still works: the generated signing key was
	// kept in the data folder.
	r := n.must(200, "GET", fmt.Sprintf("/api/plugins/telemetry/DEVICE/%s/values/timeseries?keys=seq&startTs=0&endTs=9999999&limit=100000", id), "", auth)
	var got map[string][]struct{ Ts int64 }
	r.JSON(t, &got)
	if len(got["seq"]) != writers*perWriter {
		t.Fatalf("after kill -9: %d points, want %d", len(got["seq"]), writers*perWriter)
	}
}

func TestBinarySIGTERMAndBadConfig(t *testing.T) {
	port := freePort(t)
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	p := startBinary(t, url, "HTTP_BIND_ADDRESS=127.0.0.1", fmt.Sprintf("HTTP_BIND_PORT=%d", port), "SLUICE_DATA_DIR="+t.TempDir())
	// main prints it once the node is up, so just after /healthz answers it
	// may not be there yet.
	eventually(t, 10*time.Second, "the generated sysadmin password printed on a first start without demo", func() bool {
		return strings.Contains(p.stderr.String(), "password")
	})
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, p.stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit 30 s after SIGTERM")
	}

	cmd := exec.Command(sluiceBinary(t))
	cmd.Dir = t.TempDir()
	cmd.Env = []string{"HTTP_BIND_PORT=eighty", "SLUICE_DATA_DIR=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "HTTP_BIND_PORT") {
		t.Fatalf("bad HTTP_BIND_PORT: err %v, output %s", err, out)
	}
}
