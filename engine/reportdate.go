package engine

import (
	"math"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/sluice-iot/sluice/storage"
)

// dateAxis is the DATE field of a report: how time is cut (storage.Bucket, on the
// wall clock of the view's zone), which buckets the range has, and their labels.
type dateAxis struct {
	grouping string // RAW or a fixed option; "" when the view has no DATE field
	bucket   storage.Bucket
	// zone covers the range and, before it, the whole first bucket, so that the
	// start of a bucket that began before the range is known too.
	zone []storage.ZoneShift
}

const msDay = int64(24 * time.Hour / time.Millisecond)

func newDateAxis(fields []ViewField, loc *time.Location, start, end int64) dateAxis {
	var a dateAxis
	for _, f := range fields {
		if f.Source != SourceDate {
			continue
		}
		a.grouping = f.Grouping
		if f.Grouping == "RAW" {
			a.bucket = storage.Bucket{Unit: rawUnits[f.GroupBy], Amount: max(f.GroupByAmount, 1)}
		} else {
			a.bucket = storage.Bucket{Unit: groupings[f.Grouping], Amount: 1}
		}
	}
	// The first bucket starts at most this long before the range: amount × a year
	// (or less), capped; ISO weeks of year need the week before the 1st.
	lookback := min(max(a.bucket.Amount, 1)*370*msDay, 100*370*msDay)
	a.zone = zoneShifts(loc, start-lookback, end)
	return a
}

// zoneShifts lists loc's UTC offsets from `from` until `to`. Each turn moves
// past one zone period (two a year in a zone with DST, one before the zone's
// first change), so the range, which reportRange keeps within years ±10000,
// bounds the walk: some 20,000 turns at most, a few milliseconds.
func zoneShifts(loc *time.Location, from, to int64) []storage.ZoneShift {
	t := time.UnixMilli(from).In(loc)
	var out []storage.ZoneShift
	for {
		if off := int64(offsetAt(t)) * 1000; len(out) == 0 || out[len(out)-1].OffsetMs != off {
			out = append(out, storage.ZoneShift{From: t.UnixMilli(), OffsetMs: off})
		}
		_, next := t.ZoneBounds()
		if next.IsZero() {
			return out // no change after t
		}
		if !next.After(t) {
			// Go's rules for the years past the zone's table give an end that
			// is not after t for all of Dec 31 UTC of a leap year (2040, 2044,
			// …). Step to the next UTC day instead, and find an offset change
			// on the way, if there is one, by bisection.
			next = t.UTC().Truncate(24 * time.Hour).Add(24 * time.Hour).In(loc)
			if offsetAt(t) != offsetAt(next) {
				next = firstChange(t, next)
			}
		}
		if next.UnixMilli() >= to {
			return out
		}
		t = next
	}
}

func offsetAt(t time.Time) int { _, off := t.Zone(); return off }

// firstChange is the first millisecond in (a, b] whose offset is not a's,
// given that b's is not.
func firstChange(a, b time.Time) time.Time {
	lo, hi := a.UnixMilli(), b.UnixMilli()
	off := offsetAt(a)
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if offsetAt(time.UnixMilli(mid).In(a.Location())) == off {
			lo = mid
		} else {
			hi = mid
		}
	}
	return time.UnixMilli(hi).In(a.Location())
}

// storageZone is the part of the zone a back end needs: from the shift in force
// at start on.
func (a dateAxis) storageZone(start int64) []storage.ZoneShift {
	i := 0
	for i+1 < len(a.zone) && a.zone[i+1].From <= start {
		i++
	}
	z := slices.Clone(a.zone[i:])
	z[0].From = min(z[0].From, start)
	return z
}

// epochAt returns the first instant whose wall time is w; when w falls into a gap
// (spring forward), the first instant after it.
func (a dateAxis) epochAt(w int64) int64 {
	// Offsets are less than a day, so only the shifts from two days before w
	// on can hold it; a long range's zone has thousands before.
	first := max(sort.Search(len(a.zone), func(i int) bool { return a.zone[i].From > w-2*msDay })-1, 0)
	best := int64(math.MaxInt64)
	for i := first; i < len(a.zone) && a.zone[i].From <= w+2*msDay; i++ {
		z := a.zone[i]
		t := w - z.OffsetMs
		lo, hi := z.From, int64(math.MaxInt64)
		if i == 0 {
			lo = math.MinInt64
		}
		if i+1 < len(a.zone) {
			hi = a.zone[i+1].From
		}
		if t >= lo && t < hi && t < best {
			best = t
		}
	}
	if best != math.MaxInt64 {
		return best
	}
	for _, z := range a.zone[max(first, 1):] {
		if z.From+z.OffsetMs > w {
			return z.From
		}
	}
	return w - a.zone[len(a.zone)-1].OffsetMs
}

func (a dateAxis) wall(ts int64) int64 { return storage.WallMs(a.zone, ts) }

// timeline is the bucket unit whose buckets are walked to find the keys of a.
func (a dateAxis) timeline() storage.Bucket {
	switch a.bucket.Unit {
	case storage.BucketMinuteOfHour:
		return storage.Bucket{Unit: storage.BucketMinute}
	case storage.BucketHourOfDay:
		return storage.Bucket{Unit: storage.BucketHour}
	case storage.BucketDayOfWeek, storage.BucketDayOfMonth, storage.BucketWeekOfMonth:
		return storage.Bucket{Unit: storage.BucketDay}
	case storage.BucketWeekOfYear:
		return storage.Bucket{Unit: storage.BucketWeek}
	case storage.BucketMonthOfYear:
		return storage.Bucket{Unit: storage.BucketMonth}
	case storage.BucketQuarterOfYear:
		return storage.Bucket{Unit: storage.BucketQuarter}
	}
	return a.bucket
}

// foldSize is how many distinct keys a fold unit has at most.
var foldSize = map[storage.BucketUnit]int{
	storage.BucketMinuteOfHour: 60, storage.BucketHourOfDay: 24, storage.BucketDayOfWeek: 7,
	storage.BucketDayOfMonth: 31, storage.BucketWeekOfYear: 53, storage.BucketWeekOfMonth: 6,
	storage.BucketMonthOfYear: 12, storage.BucketQuarterOfYear: 4,
}

// startWall is the wall time at which the timeline bucket key starts.
func startWall(b storage.Bucket, key int64) int64 {
	switch b.Unit {
	case storage.BucketMonth, storage.BucketQuarter, storage.BucketYear:
		return storage.MonthStartMs(key)
	}
	return key
}

// nextKey is the key of the timeline bucket after key.
func nextKey(b storage.Bucket, key int64) int64 {
	n := max(b.Amount, 1)
	switch b.Unit {
	case storage.BucketMinute, storage.BucketHour:
		step := int64(time.Minute / time.Millisecond)
		if b.Unit == storage.BucketHour {
			step *= 60
		}
		dayEnd := storage.Bucket{Unit: storage.BucketDay}.Key(key) + msDay
		return b.Key(min(key+n*step, dayEnd))
	case storage.BucketDay:
		return key + n*msDay
	case storage.BucketWeek:
		return key + 7*n*msDay
	case storage.BucketMonth:
		return key + n
	case storage.BucketQuarter:
		return key + 3*n
	}
	return key + 12*n // BucketYear
}

// keys lists the bucket keys of [start, end) in ascending order: every timeline
// bucket the range touches (those wholly inside a DST gap have no instant and are
// left out), or every fold value the range reaches. Without a DATE field there
// is one bucket, 0.
func (a dateAxis) keys(start, end int64) ([]int64, error) {
	if a.grouping == "" {
		return []int64{0}, nil
	}
	// The latest wall time in the range: at its end, or just before a shift
	// back (fall back) inside it.
	last := a.wall(end - 1)
	for _, z := range a.zone {
		if z.From > start && z.From < end {
			last = max(last, a.wall(z.From-1))
		}
	}
	tl := a.timeline()
	fold, isFold := foldSize[a.bucket.Unit]
	seen := map[int64]bool{}
	var out []int64
	for k := tl.Key(a.wall(start)); startWall(tl, k) <= last; k = nextKey(tl, k) {
		if tl.Unit == storage.BucketMinute || tl.Unit == storage.BucketHour {
			// A bucket exists when its first instant's wall time is in it.
			if tl.Key(a.wall(a.epochAt(startWall(tl, k)))) != k {
				continue
			}
		}
		key := k
		if isFold {
			key = a.bucket.Key(startWall(tl, k))
			if seen[key] {
				continue
			}
			seen[key] = true
		}
		out = append(out, key)
		if isFold && len(out) == fold {
			break
		}
		if !isFold && len(out) > maxReportBuckets {
			return nil, Errorf(CodeBadRequestParams,
				"The date grouping gives more than %d buckets over this range; group by a longer unit or shorten the range", maxReportBuckets)
		}
	}
	slices.Sort(out)
	return out, nil
}

var dayNames = []string{"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"}

// label is the cell of bucket key: RAW gives the bucket's first instant as epoch
// ms text (as Trendz does), the fixed options their label text.
func (a dateAxis) label(key int64) any {
	b := a.bucket
	if _, fold := foldSize[b.Unit]; fold {
		switch b.Unit {
		case storage.BucketDayOfWeek:
			return dayNames[key-1]
		case storage.BucketWeekOfYear:
			return "W" + strconv.FormatInt(key, 10)
		case storage.BucketMonthOfYear:
			return time.Month(key).String()
		}
		return strconv.FormatInt(key, 10)
	}
	w := startWall(b, key)
	if a.grouping == "RAW" {
		return strconv.FormatInt(a.epochAt(w), 10)
	}
	t := time.UnixMilli(w).UTC()
	switch a.grouping {
	case "FULL_MINUTE":
		return t.Format("2006-01-02 15:04")
	case "FULL_HOUR":
		return t.Format("2006-01-02 15")
	case "FULL_QUARTER":
		return strconv.Itoa(t.Year()) + "-Q" + strconv.Itoa((int(t.Month())-1)/3+1)
	case "YEARMONTH":
		return t.Format("2006-Jan")
	case "YEAR":
		return strconv.Itoa(t.Year())
	}
	return t.Format("2006-01-02") // FULL_DATE, START_OF_WEEK
}
