package engine

import (
	"slices"
	"strconv"
	"testing"
	"time"
)

func kyiv(t *testing.T) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation("Europe/Kyiv")
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func ms(t *testing.T, s string) int64 {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v.UnixMilli()
}

// TestRelativeRange: presets are whole calendar units in the zone, across DST.
func TestRelativeRange(t *testing.T) {
	now := time.Date(2024, 3, 31, 12, 0, 0, 0, kyiv(t)) // a Sunday, the day DST starts
	for _, c := range []struct{ preset, from, to string }{
		{"TODAY", "2024-03-30T22:00:00Z", "2024-03-31T21:00:00Z"}, // 23 hours
		{"YESTERDAY", "2024-03-29T22:00:00Z", "2024-03-30T22:00:00Z"},
		{"LAST_7_DAYS", "2024-03-24T22:00:00Z", "2024-03-31T21:00:00Z"},
		{"THIS_WEEK", "2024-03-24T22:00:00Z", "2024-03-31T21:00:00Z"},
		{"PREV_WEEK", "2024-03-17T22:00:00Z", "2024-03-24T22:00:00Z"},
		{"THIS_MONTH", "2024-02-29T22:00:00Z", "2024-03-31T21:00:00Z"},
		{"PREV_MONTH", "2024-01-31T22:00:00Z", "2024-02-29T22:00:00Z"},
		{"LAST_3_MONTHS", "2023-12-31T22:00:00Z", "2024-03-31T21:00:00Z"},
		{"THIS_YEAR", "2023-12-31T22:00:00Z", "2024-12-31T22:00:00Z"},
		{"PREV_YEAR", "2022-12-31T22:00:00Z", "2023-12-31T22:00:00Z"},
		{"LAST_YEAR", "2023-04-01T09:00:00Z", "2024-03-31T09:00:00Z"}, // the last 365 days
	} {
		from, to := relativeRange(c.preset, now)
		if from != ms(t, c.from) || to != ms(t, c.to) {
			t.Errorf("%s: [%s, %s), want [%s, %s)", c.preset, time.UnixMilli(from).UTC().Format(time.RFC3339),
				time.UnixMilli(to).UTC().Format(time.RFC3339), c.from, c.to)
		}
	}
}

// TestDateAxisDST: RAW hours skip the hour that does not exist in spring and
// merge the one that happens twice in autumn; labels are first instants.
func TestDateAxisDST(t *testing.T) {
	loc := kyiv(t)
	raw := []ViewField{{Label: "Date", Source: SourceDate, Grouping: "RAW", GroupBy: "HOUR"}}
	labels := func(fields []ViewField, from, to string) []any {
		t.Helper()
		start, end := ms(t, from), ms(t, to)
		a := newDateAxis(fields, loc, start, end)
		keys, err := a.keys(start, end)
		if err != nil {
			t.Fatal(err)
		}
		var out []any
		for _, k := range keys {
			out = append(out, a.label(k))
		}
		return out
	}
	epoch := func(ss ...string) []any {
		var out []any
		for _, s := range ss {
			out = append(out, strconv.FormatInt(ms(t, s), 10))
		}
		return out
	}
	// Spring: local 00:00–06:00 EET/EEST; 03:00 does not exist.
	got := labels(raw, "2024-03-30T22:00:00Z", "2024-03-31T03:00:00Z")
	want := epoch("2024-03-30T22:00:00Z", "2024-03-30T23:00:00Z", "2024-03-31T00:00:00Z", "2024-03-31T01:00:00Z", "2024-03-31T02:00:00Z")
	if !slices.Equal(got, want) {
		t.Fatalf("spring hours %v, want %v", got, want)
	}
	// Autumn: local 00:00–05:00; 03:00 happens twice, one bucket from its first instant.
	got = labels(raw, "2024-10-26T21:00:00Z", "2024-10-27T03:00:00Z")
	want = epoch("2024-10-26T21:00:00Z", "2024-10-26T22:00:00Z", "2024-10-26T23:00:00Z", "2024-10-27T00:00:00Z", "2024-10-27T02:00:00Z")
	if !slices.Equal(got, want) {
		t.Fatalf("autumn hours %v, want %v", got, want)
	}
	// A month bucket that began before the range, under another offset.
	got = labels([]ViewField{{Source: SourceDate, Grouping: "RAW", GroupBy: "MONTH"}}, "2024-04-10T00:00:00Z", "2024-04-11T00:00:00Z")
	if want := epoch("2024-03-31T21:00:00Z"); !slices.Equal(got, want) {
		t.Fatalf("April bucket %v, want %v", got, want)
	}
	got = labels([]ViewField{{Source: SourceDate, Grouping: "RAW", GroupBy: "MONTH"}}, "2024-03-10T00:00:00Z", "2024-03-11T00:00:00Z")
	if want := epoch("2024-02-29T22:00:00Z"); !slices.Equal(got, want) {
		t.Fatalf("March bucket %v, want %v", got, want)
	}
	// Too many buckets is a 400.
	start, end := ms(t, "2000-01-01T00:00:00Z"), ms(t, "2024-01-01T00:00:00Z")
	if _, err := newDateAxis(raw, loc, start, end).keys(start, end); err == nil {
		t.Fatal("24 years of hours accepted")
	}
}
