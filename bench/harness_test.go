package bench

import (
	"bytes"
	"strings"
	"testing"
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
