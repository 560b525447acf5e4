package apitest

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-iot/sluice/engine"
)

// TestTenThousandIdlePolls opens 10,000 shared-attribute long polls on one node
// (the real binary, as deployed: no race detector, whose goroutine limit is 8,128)
// and checks the node keeps serving meanwhile, answers every poll with 408 at the
// timeout, and lets go of all of them. The client needs no goroutine per poll:
// each is a raw connection written once and read after the timeout.
func TestTenThousandIdlePolls(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 10,000 connections")
	}
	const polls = 10000
	port := freePort(t)
	n := &testNode{t: t, URL: fmt.Sprintf("http://127.0.0.1:%d", port)}
	p := startBinary(t, n.URL, "HTTP_BIND_ADDRESS=127.0.0.1", fmt.Sprintf("HTTP_BIND_PORT=%d", port),
		"SLUICE_DATA_DIR="+t.TempDir(), "SLUICE_DEMO=true",
		// All 10,000 polls are the demo device's (creating 10,000 devices would
		// dominate the test): lift the per-device cap, keep the node's.
		"SLUICE_LONG_POLL_MAX_PER_DEVICE=0")

	addr := fmt.Sprintf("127.0.0.1:%d", port)
	req := "GET /api/v1/" + engine.DemoDeviceToken + "/attributes/updates?timeout=25000 HTTP/1.1\r\nHost: sluice\r\n\r\n"
	conns := make([]net.Conn, 0, polls)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range polls {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("after %d polls: %v", len(conns), err)
		}
		conns = append(conns, c)
		if _, err := c.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
	}
	waitOpenPolls(t, n, polls)
	t.Logf("%d polls open: node RSS %d MiB", polls, rssMiB(t, p.cmd.Process.Pid))
	n.must(200, "POST", "/api/v1/"+engine.DemoDeviceToken+"/telemetry", `{"busy":1}`)
	n.must(200, "GET", "/api/v1/"+engine.DemoDeviceToken+"/attributes", "")

	statuses := make(map[int]int)
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(60 * time.Second))
		r, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			statuses[0]++
			continue
		}
		r.Body.Close()
		statuses[r.StatusCode]++
	}
	if statuses[408] != polls {
		t.Fatalf("answers by status (0 = no answer): %v, want %d × 408", statuses, polls)
	}
	waitOpenPolls(t, n, 0)
}

// waitOpenPolls waits until the node reports want open polls on /healthz.
func waitOpenPolls(t *testing.T, n *testNode, want int64) {
	t.Helper()
	var got struct{ OpenPolls int64 }
	eventually(t, 60*time.Second, fmt.Sprintf("%d open polls", want), func() bool {
		n.must(200, "GET", "/healthz", "").JSON(t, &got)
		return got.OpenPolls == want
	})
}

// rssMiB reads the resident set size of process pid.
func rssMiB(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Logf("cannot read RSS: %v", err)
		return -1
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb >> 10
		}
	}
	return -1
}
