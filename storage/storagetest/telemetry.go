package storagetest

import (
	"math"
	"testing"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

func testTelemetry(t *testing.T, open func(t *testing.T) storage.Backend) {
	t.Run("WriteThenRead", func(t *testing.T) {
		b := open(t)
		id := uuid.New()
		// Keys that prefix each other must not bleed into each other.
		write(t, b, id,
			long(100, "temp", 20), long(200, "temp", 21),
			double(150, "temperature", 20.5),
			str(120, "t", "on"),
		)
		got, err := b.Latest(t.Context(), id, nil)
		must(t, err)
		checkEntries(t, "Latest(all)", got, []kv.Entry{
			str(120, "t", "on"), long(200, "temp", 21), double(150, "temperature", 20.5),
		})
		got, err = b.Latest(t.Context(), id, []string{"temperature", "missing", "temp"})
		must(t, err)
		checkEntries(t, "Latest(keys)", got, []kv.Entry{double(150, "temperature", 20.5), long(200, "temp", 21)})

		keys, err := b.SeriesKeys(t.Context(), id)
		must(t, err)
		checkStrings(t, "SeriesKeys", keys, []string{"t", "temp", "temperature"})

		got, err = b.Read(t.Context(), storage.ReadQuery{EntityID: id, Key: "temp", StartTs: 0, EndTs: 1000})
		must(t, err)
		checkEntries(t, "Read", got, []kv.Entry{long(200, "temp", 21), long(100, "temp", 20)})
	})

	t.Run("ManyMonthsInOneWrite", func(t *testing.T) {
		// A backfill or a device with a bad clock: 150 points a month apart.
		// ClickHouse partitions history by month, and current releases refuse an
		// INSERT block over 100 partitions unless told otherwise.
		b := open(t)
		id := uuid.New()
		const month = int64(31 * 24 * 3600 * 1000)
		var want []kv.Entry
		for i := range int64(150) {
			want = append(want, long(1_500_000_000_000+i*month, "v", i))
		}
		write(t, b, id, want...)
		got, err := b.Read(t.Context(), storage.ReadQuery{EntityID: id, Key: "v", StartTs: 0, EndTs: math.MaxInt64, Limit: 1000, Asc: true})
		must(t, err)
		checkEntries(t, "Read", got, want)
	})

	t.Run("Empty", func(t *testing.T) {
		b := open(t)
		id := uuid.New()
		must(t, b.Write(t.Context(), nil))
		got, err := b.Latest(t.Context(), id, nil)
		must(t, err)
		checkEntries(t, "Latest(all)", got, nil)
		got, err = b.Latest(t.Context(), id, []string{"a"})
		must(t, err)
		checkEntries(t, "Latest(keys)", got, nil)
		keys, err := b.SeriesKeys(t.Context(), id)
		must(t, err)
		checkStrings(t, "SeriesKeys", keys, nil)
		got, err = b.Read(t.Context(), storage.ReadQuery{EntityID: id, Key: "a", StartTs: 0, EndTs: 1000})
		must(t, err)
		checkEntries(t, "Read", got, nil)
	})

	t.Run("SameTsReplaces", func(t *testing.T) {
		b := open(t)
		id := uuid.New()
		write(t, b, id, long(100, "k", 1))
		write(t, b, id, str(100, "k", "second"))
		// Within one call too: the later row wins.
		write(t, b, id, long(200, "j", 1), long(200, "j", 2))
		for _, tc := range []struct {
			key  string
			want kv.Entry
		}{
			{"k", str(100, "k", "second")},
			{"j", long(200, "j", 2)},
		} {
			got, err := b.Read(t.Context(), storage.ReadQuery{EntityID: id, Key: tc.key, StartTs: 0, EndTs: 1000})
			must(t, err)
			checkEntries(t, "Read "+tc.key, got, []kv.Entry{tc.want})
			got, err = b.Latest(t.Context(), id, []string{tc.key})
			must(t, err)
			checkEntries(t, "Latest "+tc.key, got, []kv.Entry{tc.want})
		}
	})

	t.Run("LatestIsNewestTs", func(t *testing.T) {
		b := open(t)
		id := uuid.New()
		write(t, b, id, long(200, "k", 2))
		write(t, b, id, long(100, "k", 1)) // late arrival
		write(t, b, id, long(400, "j", 4), long(300, "j", 3))
		got, err := b.Latest(t.Context(), id, nil)
		must(t, err)
		checkEntries(t, "Latest", got, []kv.Entry{long(400, "j", 4), long(200, "k", 2)})
		got, err = b.Read(t.Context(), storage.ReadQuery{EntityID: id, Key: "k", StartTs: 0, EndTs: 1000})
		must(t, err)
		checkEntries(t, "Read", got, []kv.Entry{long(200, "k", 2), long(100, "k", 1)})
	})

	t.Run("EqualTsLaterWins", func(t *testing.T) {
		b := open(t)
		id := uuid.New()
		write(t, b, id, long(100, "k", 1))
		write(t, b, id, long(100, "k", 2))
		got, err := b.Latest(t.Context(), id, []string{"k"})
		must(t, err)
		checkEntries(t, "Latest", got, []kv.Entry{long(100, "k", 2)})
	})

	t.Run("Types", func(t *testing.T) {
		b := open(t)
		id := uuid.New()
		want := []kv.Entry{
			{Ts: 1, Key: "bool_false", Value: kv.BoolValue(false)},
			{Ts: 2, Key: "bool_true", Value: kv.BoolValue(true)},
			double(3, "double", 0.1),
			double(4, "double_max", math.MaxFloat64),
			double(5, "double_neg", -1.5e-300),
			double(6, "double_tiny", math.SmallestNonzeroFloat64),
			{Ts: 7, Key: "json", Value: kv.JSONValue(`{"a":[1,2.5,{"b":null}],"s":"é\"x"}`)},
			long(8, "long_max", math.MaxInt64),
			long(9, "long_min", math.MinInt64),
			long(10, "long_neg", -1),
			long(11, "long_zero", 0),
			str(12, "str_empty", ""),
			str(13, "str_unicode", "héllo, 世界 🌍\n\t\"quoted\" \\"),
			str(14, "température °C", "key in unicode"),
		}
		write(t, b, id, want...)
		got, err := b.Latest(t.Context(), id, nil)
		must(t, err)
		checkEntries(t, "Latest", got, want)
		for _, e := range want {
			got, err := b.Read(t.Context(), storage.ReadQuery{EntityID: id, Key: e.Key, StartTs: 0, EndTs: 100})
			must(t, err)
			checkEntries(t, "Read "+e.Key, got, []kv.Entry{e})
		}
	})

	t.Run("EntityIsolation", func(t *testing.T) {
		b := open(t)
		// Ids next to each other in byte order catch prefix scans that overrun.
		a := uuid.MustParse("11111111-1111-4111-8111-111111111110")
		c := uuid.MustParse("11111111-1111-4111-8111-111111111111")
		write(t, b, a, long(100, "k", 1), long(100, "only_a", 1))
		write(t, b, c, long(100, "k", 2), long(200, "k", 3))
		for _, tc := range []struct {
			id     uuid.UUID
			latest []kv.Entry
			hist   []kv.Entry
		}{
			{a, []kv.Entry{long(100, "k", 1), long(100, "only_a", 1)}, []kv.Entry{long(100, "k", 1)}},
			{c, []kv.Entry{long(200, "k", 3)}, []kv.Entry{long(200, "k", 3), long(100, "k", 2)}},
		} {
			got, err := b.Latest(t.Context(), tc.id, nil)
			must(t, err)
			checkEntries(t, "Latest "+tc.id.String(), got, tc.latest)
			got, err = b.Read(t.Context(), storage.ReadQuery{EntityID: tc.id, Key: "k", StartTs: 0, EndTs: 1000})
			must(t, err)
			checkEntries(t, "Read "+tc.id.String(), got, tc.hist)
		}
		must(t, b.DeleteEntitySeries(t.Context(), a))
		got, err := b.Latest(t.Context(), a, nil)
		must(t, err)
		checkEntries(t, "Latest of deleted entity", got, nil)
		got, err = b.Latest(t.Context(), c, nil)
		must(t, err)
		checkEntries(t, "Latest of neighbour", got, []kv.Entry{long(200, "k", 3)})
	})
}
