package bench

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sluice-iot/sluice/internal/testenv"
)

// TestHarnessSmoke runs every embedded target for a few requests: the harness works
// and Sluice acknowledges every request, for devices it created too. It measures
// nothing; cmd/sluice-bench does.
func TestHarnessSmoke(t *testing.T) {
	var log bytes.Buffer
	cells, err := Run(Options{Connections: 2, Requests: 20, Devices: 2, Log: &log})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if len(cells) != 3*len(Payloads) {
		t.Fatalf("%d cells\n%s", len(cells), log.String())
	}
	for _, c := range cells {
		if r := c.Result; r.Requests != 20 || r.Status[200] != 20 || r.Errors != 0 {
			t.Fatalf("%s %s: %v\n%s", c.Target, c.Payload, r, log.String())
		}
	}
	var table bytes.Buffer
	WriteTable(&table, cells)
	if lines := strings.Count(table.String(), "\n"); lines != 2+len(cells) {
		t.Fatalf("table of %d lines:\n%s", lines, table.String())
	}
	if !strings.Contains(table.String(), "| sluice embedded, 2 devices | batch100 |") {
		t.Fatalf("table:\n%s", table.String())
	}
}

// TestHarnessProduction runs the ClickHouse + Redis target for a few requests of
// each payload, for the demo device and for devices it created: the node starts on
// a fresh database and key prefix, acknowledges every request, and Close drops
// them again.
func TestHarnessProduction(t *testing.T) {
	addrs := testenv.Service(t, "CLICKHOUSE_ADDR", "REDIS_ADDR")
	for _, devices := range []int{1, 2} {
		var log bytes.Buffer
		cells, err := Run(Options{Connections: 2, Requests: 20, Devices: devices, Only: "clickhouse",
			ClickHouseAddr: addrs[0], RedisAddr: addrs[1], Log: &log})
		if err != nil {
			t.Fatalf("%v\n%s", err, log.String())
		}
		if len(cells) != len(Payloads) {
			t.Fatalf("%d devices: %d cells\n%s", devices, len(cells), log.String())
		}
		for _, c := range cells {
			if r := c.Result; r.Requests != 20 || r.Status[200] != 20 || r.Errors != 0 || !strings.HasPrefix(c.Target, "sluice clickhouse+redis") {
				t.Fatalf("%s %s: %v\n%s", c.Target, c.Payload, r, log.String())
			}
		}
	}
}

// TestHarnessOpenLoop runs the ceiling at a fixed open-loop rate and in half-peak
// mode for a few requests: the open-loop cells are measured, carry their rate (half
// the closed-loop cell before them), and land in the second table. No timing
// assertions: the rate only needs to be low enough to finish quickly.
func TestHarnessOpenLoop(t *testing.T) {
	f := func(opts Options, wantCells int, wantRows ...string) []Cell {
		t.Helper()
		var log bytes.Buffer
		opts.Connections, opts.Requests, opts.Only, opts.OnlyPayload, opts.Log = 2, 20, "ceiling", "single", &log
		cells, err := Run(opts)
		if err != nil {
			t.Fatalf("%v\n%s", err, log.String())
		}
		if len(cells) != wantCells {
			t.Fatalf("%d cells, want %d\n%s", len(cells), wantCells, log.String())
		}
		for _, c := range cells {
			if r := c.Result; r.Requests != 20 || r.Status[200] != 20 || r.Errors != 0 {
				t.Fatalf("%s %s at %v/s: %v\n%s", c.Target, c.Payload, c.Rate, r, log.String())
			}
		}
		var table bytes.Buffer
		WriteTable(&table, cells)
		for _, row := range wantRows {
			if !strings.Contains(table.String(), row) {
				t.Fatalf("table has no %q:\n%s", row, table.String())
			}
		}
		return cells
	}

	cells := f(Options{Rate: 1000}, 1, "| offered req/s |", "| ceiling (fasthttp no-op) | single | 1,000 | – |")
	if cells[0].Rate != 1000 || cells[0].Peak != 0 {
		t.Fatalf("cell %+v", cells[0])
	}

	cells = f(Options{HalfPeak: true, Rate: 1000}, 2, "| ceiling (fasthttp no-op) | single | ", "| 0.50 |")
	peak, half := cells[0], cells[1]
	if peak.Rate != 0 || half.Peak != peak.Result.ReqPerSec() || half.Rate != peak.Result.ReqPerSec()/2 {
		t.Fatalf("peak %+v, half %+v", peak, half)
	}
}
