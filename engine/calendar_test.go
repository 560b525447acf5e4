package engine

import (
	"testing"
	"time"
)

func TestPeriodEnd(t *testing.T) {
	zone := func(name string) *time.Location {
		t.Helper()
		loc, ok := ParseZoneID(name)
		if !ok {
			t.Fatalf("zone %q refused", name)
		}
		return loc
	}
	// ThingsBoard's TimeUtilsTest, and midnights a clock change moves.
	for _, c := range []struct {
		ts   int64
		typ  IntervalType
		zone string
		want int64
	}{
		{1704899727000, IntervalWeek, "Europe/Kyiv", 1705183200000},      // Sunday, January 14, 2024 0:00 +02:00
		{1704899727000, IntervalWeekISO, "Europe/Kyiv", 1705269600000},   // Monday, January 15
		{1704899727000, IntervalWeek, "Europe/Amsterdam", 1705186800000}, // Sunday, January 14, 2024 0:00 +01:00
		{1704899727000, IntervalWeekISO, "Europe/Amsterdam", 1705273200000},
		{1704621600000, IntervalWeek, "Europe/Kyiv", 1705183200000},    // from a Sunday: the next one
		{1704621600000, IntervalWeekISO, "Europe/Kyiv", 1704664800000}, // Monday, January 8
		{1704899727000, IntervalMonth, "Europe/Kyiv", 1706738400000},   // February 1, 0:00 +02:00
		{1704899727000, IntervalMonth, "Europe/Amsterdam", 1706742000000},
		{1704899727000, IntervalQuarter, "Europe/Kyiv", 1711918800000}, // April 1, 0:00 +03:00, summer time
		{1704899727000, IntervalQuarter, "Europe/Amsterdam", 1711922400000},
		{1711929600000, IntervalQuarter, "Europe/Kyiv", 1719781200000},      // July 1
		{1711929600000, IntervalQuarter, "America/New_York", 1711944000000}, // still March there: April 1, 0:00 -04:00
		{1704899727000, IntervalMonth, "GMT+2", 1706738400000},              // Java's GMT+2 is east of Greenwich
		{1704899727000, IntervalMonth, "+02:00", 1706738400000},
		{1704899727000, IntervalMonth, "EST", 1706763600000}, // ThingsBoard's link: America/New_York
		{1704899727000, IntervalMonth, "", 1706745600000},    // UTC
		// São Paulo moved its clocks from 0:00 to 1:00 on Sunday, November 4,
		// 2018: that day starts at 1:00 -02:00 (3:00 UTC), as Java resolves the
		// gap, not at 23:00 the day before.
		{1541127600000, IntervalWeek, "America/Sao_Paulo", 1541300400000},    // from Friday, November 2
		{1541127600000, IntervalWeekISO, "America/Sao_Paulo", 1541383200000}, // Monday, November 5, 0:00 -02:00
		// Before 1970 and far ahead.
		{-86400000 * 400, IntervalMonth, "UTC", time.Date(1968, 12, 1, 0, 0, 0, 0, time.UTC).UnixMilli()},
		{time.Date(2400, 2, 29, 12, 0, 0, 0, time.UTC).UnixMilli(), IntervalQuarter, "UTC", time.Date(2400, 4, 1, 0, 0, 0, 0, time.UTC).UnixMilli()},
	} {
		if got := periodEnd(c.ts, c.typ, zone(c.zone)); got != c.want {
			t.Errorf("periodEnd(%d, %d, %q) = %d (%s), want %d (%s)", c.ts, c.typ, c.zone,
				got, time.UnixMilli(got).UTC(), c.want, time.UnixMilli(c.want).UTC())
		}
	}
}

func TestCalendarEdges(t *testing.T) {
	got := calendarEdges(1704899727000, 1706738400001, IntervalWeek, time.FixedZone("Kyiv winter", 2*3600))
	want := []int64{1704899727000, 1705183200000, 1705788000000, 1706392800000, 1706738400001}
	if len(got) != len(want) {
		t.Fatalf("edges %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("edges %v, want %v", got, want)
		}
	}
	if got := calendarEdges(5, 5, IntervalMonth, time.UTC); got != nil {
		t.Errorf("an empty range has edges %v", got)
	}
	// The last period of int64 ends past what time.Time gives back: clipped.
	got = calendarEdges(1<<63-1000, 1<<63-1, IntervalQuarter, time.UTC)
	if len(got) != 2 || got[1] != 1<<63-1 {
		t.Errorf("edges at the end of int64: %v", got)
	}
}

func TestParseZoneID(t *testing.T) {
	for s, off := range map[string]int{
		"Z": 0, "UTC": 0, "GMT": 0, "UT": 0, "GMT+0": 0, "GMT-0": 0, "+2": 7200, "+02": 7200, "-05:30": -19800,
		"+0530": 19800, "+01:02:03": 3723, "+010203": 3723, "UTC+2": 7200, "GMT-03:00": -10800, "UT+18": 64800,
	} {
		loc, ok := ParseZoneID(s)
		if !ok {
			t.Errorf("%q refused", s)
			continue
		}
		if _, got := time.Unix(0, 0).In(loc).Zone(); got != off {
			t.Errorf("%q: offset %d, want %d", s, got, off)
		}
	}
	for _, s := range []string{"Local", "local", "Mars/Olympus", "+19", "+2:00", "+02:60", "++2", "+-2", "UTC+", "GMT+2x", "+", "-"} {
		if _, ok := ParseZoneID(s); ok {
			t.Errorf("%q accepted", s)
		}
	}
}
