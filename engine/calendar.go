package engine

import (
	"strconv"
	"strings"
	"time"
)

// IntervalType is how an aggregated history read cuts time: ThingsBoard's
// IntervalType. Calendar types cut at local midnights of a time zone, so
// their buckets differ in length.
type IntervalType uint8

const (
	IntervalMilliseconds IntervalType = iota // buckets of Interval ms from startTs
	IntervalWeek                             // Sunday to Saturday
	IntervalWeekISO                          // Monday to Sunday
	IntervalMonth
	IntervalQuarter
)

// ParseIntervalType accepts ThingsBoard's names, case-sensitive as Spring
// binds an enum; empty is MILLISECONDS.
func ParseIntervalType(s string) (IntervalType, bool) {
	switch s {
	case "", "MILLISECONDS":
		return IntervalMilliseconds, true
	case "WEEK":
		return IntervalWeek, true
	case "WEEK_ISO":
		return IntervalWeekISO, true
	case "MONTH":
		return IntervalMonth, true
	case "QUARTER":
		return IntervalQuarter, true
	}
	return 0, false
}

// nominal is the length ThingsBoard counts a calendar interval as against the
// cap on the number of buckets (AggregationParams.getInterval).
func (t IntervalType) nominal() int64 {
	const day = 24 * 60 * 60 * 1000
	switch t {
	case IntervalWeek, IntervalWeekISO:
		return 7 * day
	case IntervalMonth:
		return 30 * day
	case IntervalQuarter:
		return 90 * day
	}
	return 0
}

// zoneLinks are the short names ThingsBoard resolves itself
// (AggregationParams.TZ_LINKS).
var zoneLinks = map[string]string{
	"EST": "America/New_York", "GMT+0": "GMT", "GMT-0": "GMT", "HST": "US/Hawaii",
	"MST": "America/Phoenix", "ROC": "Asia/Taipei",
}

// ParseZoneID reads a time zone as Java's ZoneId.of does: a region such as
// Europe/Kyiv, Z, an offset (+02, +02:00, -0530, +02:00:00), or UTC, GMT or UT
// with or without an offset (GMT+2 is two hours east, unlike the POSIX
// Etc/GMT+2). Empty is UTC. "Local" is refused: it would be the server's zone.
func ParseZoneID(s string) (*time.Location, bool) {
	if link, ok := zoneLinks[s]; ok {
		s = link
	}
	switch s {
	case "", "Z", "UTC", "GMT", "UT":
		return time.UTC, true
	}
	for _, prefix := range []string{"UTC", "GMT", "UT"} {
		if len(s) > len(prefix) && strings.HasPrefix(s, prefix) && (s[len(prefix)] == '+' || s[len(prefix)] == '-') {
			off, ok := parseOffset(s[len(prefix):])
			return time.FixedZone(s, off), ok
		}
	}
	if s[0] == '+' || s[0] == '-' {
		off, ok := parseOffset(s)
		return time.FixedZone(s, off), ok
	}
	if strings.EqualFold(s, "local") {
		return nil, false
	}
	loc, err := time.LoadLocation(s)
	return loc, err == nil
}

// parseOffset reads ±h, ±hh, ±hh:mm, ±hhmm, ±hh:mm:ss or ±hhmmss (ZoneOffset.of)
// into seconds east of UTC, within ±18 hours.
func parseOffset(s string) (int, bool) {
	sign := 1
	if s[0] == '-' {
		sign = -1
	}
	s = s[1:]
	var parts []string
	switch {
	case len(s) == 1 || len(s) == 2:
		parts = []string{s}
	case len(s) == 4:
		parts = []string{s[:2], s[2:]}
	case len(s) == 5 && s[2] == ':':
		parts = []string{s[:2], s[3:]}
	case len(s) == 6:
		parts = []string{s[:2], s[2:4], s[4:]}
	case len(s) == 8 && s[2] == ':' && s[5] == ':':
		parts = []string{s[:2], s[3:5], s[6:]}
	default:
		return 0, false
	}
	secs, unit := 0, 3600
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || p[0] == '+' || i > 0 && n > 59 {
			return 0, false
		}
		secs += n * unit
		unit /= 60
	}
	if secs > 18*3600 {
		return 0, false
	}
	return sign * secs, true
}

// calendarEdges cuts [start, end) at the calendar boundaries of t in loc, as
// ThingsBoard's aggregation does: the first bucket runs from start to the end
// of its week, month or quarter, the last is clipped to end
// (AbstractChunkedAggregationTimeseriesDao, TimeUtils.calculateIntervalEnd).
func calendarEdges(start, end int64, t IntervalType, loc *time.Location) []int64 {
	if end <= start {
		return nil
	}
	edges := []int64{start}
	for cur := start; cur < end; {
		next := periodEnd(cur, t, loc)
		if next <= cur || next > end { // past the end, or past what time.Time holds
			next = end
		}
		edges = append(edges, next)
		cur = next
	}
	return edges
}

// periodEnd is the first instant of the week, month or quarter after the one
// holding ts in loc.
func periodEnd(ts int64, t IntervalType, loc *time.Location) int64 {
	at := time.UnixMilli(ts).In(loc)
	y, m, d := at.Date()
	switch t {
	case IntervalWeek:
		d += 7 - int(at.Weekday()) // Sunday is 0
	case IntervalWeekISO:
		d += 7 - (int(at.Weekday())+6)%7
	case IntervalMonth:
		m, d = m+1, 1
	case IntervalQuarter:
		m, d = (m-1)/3*3+4, 1
	}
	return localMidnight(y, m, d, loc)
}

// localMidnight is the instant of 00:00 on the day in loc, resolved as Java's
// ZonedDateTime does: a midnight in a gap (a clock moved forward at 00:00) is
// shifted later by the gap, to the gap's end; a midnight that occurs twice is
// the earlier one.
func localMidnight(y int, m time.Month, d int, loc *time.Location) int64 {
	t := time.Date(y, m, d, 0, 0, 0, 0, loc)
	wall := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	if t.Hour() == 0 && t.Minute() == 0 && t.Day() == wall.Day() {
		return t.UnixMilli()
	}
	// In a gap Go takes the offset after it, which lands before the gap;
	// Java reads the wall clock with the offset before it.
	_, before := t.Zone()
	return wall.UnixMilli() - int64(before)*1000
}
