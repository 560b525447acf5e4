package storage

import (
	"sort"
	"time"
)

// The reference semantics of ReportQuery's buckets. The embedded back end calls
// these; other back ends compute the same numbers in their query language and are
// held to these by storagetest.RunReport.

const (
	msMinute = int64(time.Minute / time.Millisecond)
	msHour   = int64(time.Hour / time.Millisecond)
	msDay    = 24 * msHour
	msWeek   = 7 * msDay
	// mondayMs is the first Monday after the epoch (1970-01-05): weeks count from it.
	mondayMs = 4 * msDay
)

// WallMs returns the wall time of ts in zone (see ReportQuery) as epoch ms of
// the same wall clock in UTC. The zone of a long range has thousands of
// shifts (two a year with DST), so the one in force is found by bisection.
// ts + offset must not overflow: the engine keeps report ranges within years
// ±10000.
func WallMs(zone []ZoneShift, ts int64) int64 {
	// The first shift after ts; the one before it is in force.
	i := sort.Search(len(zone), func(i int) bool { return zone[i].From > ts })
	if i == 0 {
		return ts // before the first shift: UTC
	}
	return ts + zone[i-1].OffsetMs
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// Key returns the bucket key of a wall time (see BucketUnit).
func (b Bucket) Key(wall int64) int64 {
	n := max(b.Amount, 1)
	floor := func(v, step int64) int64 { return floorDiv(v, step) * step }
	switch b.Unit {
	case BucketMinute, BucketHour:
		unit := msMinute
		if b.Unit == BucketHour {
			unit = msHour
		}
		day := floor(wall, msDay)
		return day + floor(wall-day, n*unit)
	case BucketDay:
		return floor(wall, n*msDay)
	case BucketWeek:
		return floor(wall-mondayMs, n*msWeek) + mondayMs
	case BucketMinuteOfHour:
		return floorDiv(wall-floor(wall, msHour), msMinute)
	case BucketHourOfDay:
		return floorDiv(wall-floor(wall, msDay), msHour)
	case BucketDayOfWeek:
		return isoWeekday(floorDiv(wall, msDay))
	}
	t := time.UnixMilli(wall).UTC()
	months := int64(t.Year())*12 + int64(t.Month()) - 1
	switch b.Unit {
	case BucketMonth:
		return floor(months, n)
	case BucketQuarter:
		return floor(months, 3*n)
	case BucketYear:
		return floor(months, 12*n)
	case BucketDayOfMonth:
		return int64(t.Day())
	case BucketWeekOfYear:
		_, w := t.ISOWeek()
		return int64(w)
	case BucketWeekOfMonth:
		first := floorDiv(wall, msDay) - int64(t.Day()) + 1
		return (int64(t.Day())-1+isoWeekday(first)-1)/7 + 1
	case BucketMonthOfYear:
		return int64(t.Month())
	case BucketQuarterOfYear:
		return (int64(t.Month())-1)/3 + 1
	}
	return 0
}

// isoWeekday is 1 (Monday) … 7 (Sunday) of a day counted from 1970-01-01, a Thursday.
func isoWeekday(day int64) int64 { return (day%7+7+3)%7 + 1 }

// MonthStartMs is the wall ms of the first instant of a month key (year*12 + month-1).
func MonthStartMs(months int64) int64 {
	y, m := floorDiv(months, 12), months-floorDiv(months, 12)*12
	return time.Date(int(y), time.Month(m+1), 1, 0, 0, 0, 0, time.UTC).UnixMilli()
}
