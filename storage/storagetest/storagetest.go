// Package storagetest is the conformance suite every storage back end must pass.
// It checks only what the storage interfaces promise, so the embedded back end and
// the ClickHouse+Redis one are held to the same contract. It uses no sleeps and no
// timing assertions; run it under -race.
package storagetest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// Run runs the suite. open must return a fresh, empty back end for each sub-test
// and close it itself (t.Cleanup); the suite never calls Close.
func Run(t *testing.T, open func(t *testing.T) storage.Backend) {
	t.Run("Telemetry", func(t *testing.T) { testTelemetry(t, open) })
	t.Run("Read", func(t *testing.T) { testRead(t, open) })
	t.Run("Aggregate", func(t *testing.T) { testAggregate(t, open) })
	t.Run("DeleteSeries", func(t *testing.T) { testDeleteSeries(t, open) })
	t.Run("Attributes", func(t *testing.T) { testAttributes(t, open) })
	t.Run("Entities", func(t *testing.T) { testEntities(t, open) })
	t.Run("Concurrency", func(t *testing.T) { testConcurrency(t, open) })
}

// Shorthands for entries.
func long(ts int64, key string, n int64) kv.Entry {
	return kv.Entry{Ts: ts, Key: key, Value: kv.LongValue(n)}
}

func double(ts int64, key string, f float64) kv.Entry {
	return kv.Entry{Ts: ts, Key: key, Value: kv.DoubleValue(f)}
}

func str(ts int64, key, s string) kv.Entry {
	return kv.Entry{Ts: ts, Key: key, Value: kv.StringValue(s)}
}

func rows(entity uuid.UUID, entries ...kv.Entry) []storage.Row {
	out := make([]storage.Row, len(entries))
	for i, e := range entries {
		out[i] = storage.Row{TenantID: tenant, EntityID: entity, Entry: e}
	}
	return out
}

var tenant = uuid.MustParse("00000000-0000-4000-8000-00000000aaaa")

func write(t *testing.T, b storage.Backend, entity uuid.UUID, entries ...kv.Entry) {
	t.Helper()
	if err := b.Write(t.Context(), rows(entity, entries...)); err != nil {
		t.Fatalf("Write: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// checkEntries fails unless got and want hold the same entries in the same order.
func checkEntries(t *testing.T, what string, got, want []kv.Entry) {
	t.Helper()
	same := len(got) == len(want)
	for i := 0; same && i < len(got); i++ {
		same = got[i].Ts == want[i].Ts && got[i].Key == want[i].Key && got[i].Value.Same(want[i].Value)
	}
	if !same {
		t.Fatalf("%s:\ngot  %s\nwant %s", what, formatEntries(got), formatEntries(want))
	}
}

func formatEntries(es []kv.Entry) string {
	var sb strings.Builder
	sb.WriteByte('[')
	for i, e := range es {
		if i > 0 {
			sb.WriteString(", ")
		}
		fmt.Fprintf(&sb, "%d %q=%s(%s)", e.Ts, e.Key, e.Value.Type, e.Value.Text())
	}
	sb.WriteByte(']')
	return sb.String()
}

func checkStrings(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: got %q, want %q", what, got, want)
	}
}
