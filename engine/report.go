package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// ReportRequest is the body of POST …/publicApi/buildReport. A zero range bound
// means the view's own; a filter with an empty list keeps the view's values.
type ReportRequest struct {
	ViewConfigID string              `json:"viewConfigId"`
	RangeStartTs int64               `json:"rangeStartTs"`
	RangeEndTs   int64               `json:"rangeEndTs"`
	Filters      map[string][]string `json:"filters"`
}

// Report is a built report: the field labels, and one row of cells per group and
// date bucket. A cell is nil, a string, an int64, a float64, a bool or
// json.RawMessage (a LATEST JSON value).
type Report struct {
	ColumnLabels []string
	Rows         [][]any
}

// MarshalJSON writes {"columnLabels":[…],"dataTable":[{label: cell, …}, …]} with
// each row's keys in column order.
func (r *Report) MarshalJSON() ([]byte, error) {
	labels, err := json.Marshal(r.ColumnLabels)
	if err != nil {
		return nil, err
	}
	quoted := make([][]byte, len(r.ColumnLabels))
	for i, l := range r.ColumnLabels {
		quoted[i], _ = json.Marshal(l)
	}
	b := append([]byte(`{"columnLabels":`), labels...)
	b = append(b, `,"dataTable":[`...)
	for i, row := range r.Rows {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '{')
		for j, cell := range row {
			if j > 0 {
				b = append(b, ',')
			}
			b = append(append(b, quoted[j]...), ':')
			if b, err = appendCell(b, cell); err != nil {
				return nil, err
			}
		}
		b = append(b, '}')
	}
	return append(b, "]}"...), nil
}

func appendCell(b []byte, cell any) ([]byte, error) {
	switch c := cell.(type) {
	case nil:
		return append(b, "null"...), nil
	case float64:
		return strconv.AppendFloat(b, c, 'g', -1, 64), nil
	case int64:
		return strconv.AppendInt(b, c, 10), nil
	case json.RawMessage:
		return append(b, c...), nil
	}
	v, err := json.Marshal(cell)
	return append(b, v...), err
}

// CellText is a cell as CSV text: empty for nil, numbers as in JSON.
func CellText(cell any) string {
	switch c := cell.(type) {
	case nil:
		return ""
	case string:
		return c
	case float64:
		return strconv.FormatFloat(c, 'g', -1, 64)
	case int64:
		return strconv.FormatInt(c, 10)
	case bool:
		return strconv.FormatBool(c)
	case json.RawMessage:
		return string(c)
	}
	return ""
}

const (
	// maxReportBuckets bounds the date buckets of one report, maxReportCells its size.
	maxReportBuckets = 10000
	maxReportCells   = 5_000_000
)

var errUnknownView = &Error{Code: CodeBadRequestParams, Msg: "Unknown view: viewConfigId names no view of your tenant"}

// BuildReport runs the saved view req.ViewConfigID for p: tenant admins over their
// tenant's devices, customer users over their customer's. Another tenant's view,
// like a missing one, is a 400 (the report API has no 404).
func (e *Engine) BuildReport(ctx context.Context, p *Principal, req ReportRequest) (*Report, error) {
	if err := requireRole(p, TenantAdmin, CustomerUser); err != nil {
		return nil, err
	}
	if req.ViewConfigID == "" {
		return nil, Errorf(CodeBadRequestParams, "viewConfigId is required")
	}
	id, err := ParseID(req.ViewConfigID)
	if err != nil {
		return nil, err
	}
	view, err := getRecord[View](ctx, e, kindView, id)
	if err != nil {
		return nil, ifNotFound(err, errUnknownView)
	}
	if view.TenantID.ID != p.TenantID {
		return nil, errUnknownView
	}
	filters, err := overrideFilters(view.Filters, req.Filters)
	if err != nil {
		return nil, err
	}
	loc, err := time.LoadLocation(view.TimeZone)
	if err != nil {
		return nil, badView("unknown time zone %q", view.TimeZone)
	}
	start, end, err := e.reportRange(view.Range, loc, req.RangeStartTs, req.RangeEndTs)
	if err != nil {
		return nil, err
	}
	axis := newDateAxis(view.Fields, loc, start, end)
	buckets, err := axis.keys(start, end)
	if err != nil {
		return nil, err
	}
	devices, err := e.reportDevices(ctx, p, view)
	if err != nil {
		return nil, err
	}
	dims, err := e.dimensions(ctx, p.TenantID, devices, view.Fields, filters)
	if err != nil {
		return nil, err
	}
	groups, q := groupDevices(devices, dims, view.Fields, filters)
	if len(groups)*len(buckets) > maxReportCells/len(view.Fields) {
		return nil, Errorf(CodeBadRequestParams, "The report would have %d rows; narrow the filters, the range or the date grouping",
			len(groups)*len(buckets))
	}
	q.StartTs, q.EndTs, q.Bucket = start, end, axis.bucket
	q.Zone = axis.storageZone(start)
	for _, f := range view.Fields {
		if f.Source == SourceTelemetry {
			q.Aggs |= aggregations[f.Aggregation]
			if !slices.Contains(q.Keys, f.Key) {
				q.Keys = append(q.Keys, f.Key)
			}
		}
	}
	var rows []storage.ReportRow
	if len(q.Keys) > 0 && len(q.Devices) > 0 {
		rep, ok := e.store.(storage.Reporter)
		if !ok {
			return nil, Errorf(CodeGeneral, "This storage back end cannot build reports")
		}
		if rows, err = rep.Report(ctx, q); err != nil {
			return nil, err
		}
	}
	return buildTable(view, groups, buckets, axis, rows), nil
}

// overrideFilters applies a request's filter values to the view's filters. A key
// names a filter exactly or, failing that, case-insensitively; an empty list
// keeps the view's values.
func overrideFilters(view []ViewFilter, req map[string][]string) ([]ViewFilter, error) {
	out := slices.Clone(view)
	for name, values := range req {
		i := slices.IndexFunc(out, func(f ViewFilter) bool { return f.Name == name })
		if i < 0 {
			i = slices.IndexFunc(out, func(f ViewFilter) bool { return strings.EqualFold(f.Name, name) })
		}
		if i < 0 {
			return nil, Errorf(CodeBadRequestParams, "Unknown filter %q: the view has no filter of that name", name)
		}
		if len(values) == 0 {
			continue
		}
		if err := checkCondition(out[i].Name, out[i].Condition, values); err != nil {
			return nil, Errorf(CodeBadRequestParams, "%s", strings.TrimPrefix(err.Error(), "Invalid analytics view: "))
		}
		out[i].Values = values
	}
	return out, nil
}

// presets are the relative ranges: [start of the unit holding now + From units,
// … + To units). "Last N" is the current unit and the N-1 before it, "Next N" the
// N after the current one. LAST_YEAR (the last 365 days up to now) is apart.
var presets = map[string]struct {
	unit     string
	from, to int
}{
	"TODAY": {"DAY", 0, 1}, "YESTERDAY": {"DAY", -1, 0}, "TOMORROW": {"DAY", 1, 2},
	"LAST_7_DAYS": {"DAY", -6, 1}, "LAST_14_DAYS": {"DAY", -13, 1}, "LAST_30_DAYS": {"DAY", -29, 1}, "LAST_90_DAYS": {"DAY", -89, 1},
	"NEXT_7_DAYS": {"DAY", 1, 8}, "NEXT_14_DAYS": {"DAY", 1, 15}, "NEXT_30_DAYS": {"DAY", 1, 31},
	"THIS_WEEK": {"WEEK", 0, 1}, "PREV_WEEK": {"WEEK", -1, 0}, "NEXT_WEEK": {"WEEK", 1, 2},
	"LAST_2_WEEKS": {"WEEK", -1, 1}, "LAST_3_WEEKS": {"WEEK", -2, 1}, "LAST_4_WEEKS": {"WEEK", -3, 1},
	"THIS_MONTH": {"MONTH", 0, 1}, "PREV_MONTH": {"MONTH", -1, 0}, "NEXT_MONTH": {"MONTH", 1, 2},
	"LAST_3_MONTHS": {"MONTH", -2, 1}, "LAST_6_MONTHS": {"MONTH", -5, 1}, "LAST_12_MONTHS": {"MONTH", -11, 1},
	"THIS_YEAR": {"YEAR", 0, 1}, "PREV_YEAR": {"YEAR", -1, 0}, "NEXT_YEAR": {"YEAR", 1, 2}, "LAST_3_YEARS": {"YEAR", -2, 1},
	"LAST_YEAR": {"", 0, 0},
}

// reportRange resolves the view's range at now in loc; a non-zero request bound
// replaces the view's.
func (e *Engine) reportRange(r ViewRange, loc *time.Location, reqStart, reqEnd int64) (int64, int64, error) {
	start, end := r.StartTs, r.EndTs
	if r.Type == "RELATIVE" && (reqStart == 0 || reqEnd == 0) {
		start, end = relativeRange(r.Preset, e.now().In(loc))
	}
	if reqStart != 0 {
		start = reqStart
	}
	if reqEnd != 0 {
		end = reqEnd
	}
	if end <= start {
		return 0, 0, Errorf(CodeBadRequestParams, "rangeEndTs must be after rangeStartTs")
	}
	// Clients send Long.MIN and Long.MAX for "unbounded", where a wall time
	// (ts + offset) and the date buckets past it overflow int64. The range is
	// cut to the years a report covers, wide enough for any real history.
	start, end = max(start, minReportTs), min(end, maxReportTs)
	if end <= start {
		return 0, 0, Errorf(CodeBadRequestParams, "The range must overlap the years -9999 to 9999, which reports cover")
	}
	return start, end, nil
}

// minReportTs and maxReportTs bound the range of a report: from the first
// instant of the year -9999 to the last of 9999 (UTC). Within them, wall times,
// bucket keys and the zone's shifts are all far from overflowing, and the zone
// walk (zoneShifts) stays short.
var (
	minReportTs = time.Date(-9999, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	maxReportTs = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
)

func relativeRange(preset string, now time.Time) (int64, int64) {
	p := presets[preset]
	loc := now.Location()
	day := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, loc)
	shift := func(t time.Time, n int) time.Time { return t.AddDate(0, 0, n) }
	base := day
	switch p.unit {
	case "WEEK":
		base = day.AddDate(0, 0, -((int(day.Weekday()) + 6) % 7))
		shift = func(t time.Time, n int) time.Time { return t.AddDate(0, 0, 7*n) }
	case "MONTH":
		base = time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, loc)
		shift = func(t time.Time, n int) time.Time { return t.AddDate(0, n, 0) }
	case "YEAR":
		base = time.Date(now.Year(), 1, 1, 0, 0, 0, 0, loc)
		shift = func(t time.Time, n int) time.Time { return t.AddDate(n, 0, 0) }
	case "":
		return now.AddDate(0, 0, -365).UnixMilli(), now.UnixMilli()
	}
	return shift(base, p.from).UnixMilli(), shift(base, p.to).UnixMilli()
}

// reportDevices lists the devices of the view's profile that p may see.
func (e *Engine) reportDevices(ctx context.Context, p *Principal, v *View) ([]*Device, error) {
	all, err := listRecords[Device](ctx, e, kindDevice, p.TenantID)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(d *Device) bool {
		return d.Type != v.Source.DeviceProfile || !e.canSeeDevice(p, d)
	}), nil
}

// dimRef names a device dimension: a field or filter source, key and scope.
type dimRef struct{ source, key, scope string }

// dimensions resolves, per device, the value of every dimension the fields and
// filters use; a missing attribute (or label) is absent from the map.
func (e *Engine) dimensions(ctx context.Context, tenant uuid.UUID, devices []*Device, fields []ViewField, filters []ViewFilter) ([]map[dimRef]kv.Value, error) {
	refs := map[dimRef]bool{}
	for _, f := range fields {
		if f.Source != SourceTelemetry && f.Source != SourceDate {
			refs[dimRef{f.Source, f.Key, f.Scope}] = true
		}
	}
	for _, f := range filters {
		refs[dimRef{f.Field.Source, f.Field.Key, f.Field.Scope}] = true
	}
	attrKeys := map[storage.Scope][]string{}
	var owners map[uuid.UUID]string
	tenantTitle := ""
	for r := range refs {
		switch r.source {
		case SourceAttribute:
			sc, _ := storage.ParseScope(r.scope)
			attrKeys[sc] = append(attrKeys[sc], r.key)
		case SourceOwner:
			if owners != nil {
				continue
			}
			cs, err := listRecords[Customer](ctx, e, kindCustomer, tenant)
			if err != nil {
				return nil, err
			}
			owners = map[uuid.UUID]string{}
			for _, c := range cs {
				owners[c.ID.ID] = c.Title
			}
			// A tenant gone meanwhile has no title; any other failure (the
			// store down, the report cancelled) fails the report rather than
			// answer its devices' owner blank.
			switch t, err := getRecord[Tenant](ctx, e, kindTenant, tenant); {
			case err == nil:
				tenantTitle = t.Title
			case !errors.Is(err, storage.ErrNotFound):
				return nil, err
			}
		}
	}
	for sc := range attrKeys {
		slices.Sort(attrKeys[sc])
	}
	out := make([]map[dimRef]kv.Value, len(devices))
	for i, d := range devices {
		m := map[dimRef]kv.Value{}
		for r := range refs {
			switch r.source {
			case SourceEntityName:
				m[r] = kv.StringValue(d.Name)
			case SourceEntityLabel:
				if d.Label != "" {
					m[r] = kv.StringValue(d.Label)
				}
			case SourceEntityType:
				m[r] = kv.StringValue(d.Type)
			case SourceOwner:
				// An unassigned device belongs to its tenant.
				title, ok := owners[d.CustomerID.ID]
				if !ok {
					title = tenantTitle
				}
				m[r] = kv.StringValue(title)
			}
		}
		out[i] = m
	}
	if len(attrKeys) == 0 {
		return out, nil
	}
	// One attribute read per device and scope: with Redis each is a round trip,
	// so several run at once.
	var (
		wg   sync.WaitGroup
		errs = make([]error, attrReaders)
	)
	for w := range attrReaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(devices); i += attrReaders {
				for sc, keys := range attrKeys {
					attrs, err := e.store.GetAttributes(ctx, devices[i].ID.ID, sc, keys)
					if err != nil {
						errs[w] = err
						return
					}
					for _, a := range attrs {
						out[i][dimRef{SourceAttribute, a.Key, sc.String()}] = a.Value
					}
				}
			}
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// attrReaders is how many attribute reads a report runs at once.
const attrReaders = 16

// matches reports whether a device's dimension value passes the filter.
func matches(f ViewFilter, v kv.Value, ok bool) bool {
	if len(f.Values) == 0 {
		return true
	}
	text := v.Text()
	switch f.Condition {
	case "ONE_OF":
		return ok && slices.ContainsFunc(f.Values, func(s string) bool { return oneOf(v, s) })
	case "NOT_ONE_OF":
		return !ok || !slices.ContainsFunc(f.Values, func(s string) bool { return oneOf(v, s) })
	case "STARTS_WITH", "ENDS_WITH", "CONTAINS":
		test := map[string]func(string, string) bool{"STARTS_WITH": strings.HasPrefix, "ENDS_WITH": strings.HasSuffix, "CONTAINS": strings.Contains}[f.Condition]
		return ok && slices.ContainsFunc(f.Values, func(s string) bool { return test(text, s) })
	}
	// Comparisons: the value as a number, against the filter's one number.
	n, isNum := v.Numeric()
	if !isNum {
		var err error
		n, err = strconv.ParseFloat(text, 64)
		isNum = err == nil
	}
	want, _ := strconv.ParseFloat(f.Values[0], 64)
	if !ok || !isNum {
		return false
	}
	switch f.Condition {
	case "GT":
		return n > want
	case "GTE":
		return n >= want
	case "LT":
		return n < want
	}
	return n <= want
}

// oneOf reports whether v is the ONE_OF filter value s. A number (Long or
// Double) is s when s is the same number: the long 2 and the double 2.0 both
// print as 2 in a report, so "2" and "2.0" each select both. Other values
// match by their text, so the string "2" is only the filter value "2".
func oneOf(v kv.Value, s string) bool {
	switch v.Type {
	case kv.Long:
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return n == v.Long // exact, also past 2^53
		}
		f, err := strconv.ParseFloat(s, 64)
		return err == nil && sameNumber(v.Long, f)
	case kv.Double:
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return sameNumber(n, v.Double)
		}
		f, err := strconv.ParseFloat(s, 64)
		return err == nil && f == v.Double
	}
	return v.Text() == s
}

// sameNumber reports whether n and f are one number, exactly: float64(n)
// rounds longs past 2^53, and 2^53+1 is not the double 2^53.
func sameNumber(n int64, f float64) bool {
	if f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
		return false
	}
	return int64(f) == n
}

// groupKey appends the part of a group key that tells v apart: its kind, then
// its value. Longs and Doubles are one kind, compared by number (2 and 2.0 are
// one group), so a whole Double is keyed as the integer it is; a string is
// apart from any number ("1" and 1 are two groups).
func groupKey(b *strings.Builder, v kv.Value) {
	switch v.Type {
	case kv.Long:
		b.WriteByte('n')
		b.WriteString(strconv.FormatInt(v.Long, 10))
		return
	case kv.Double:
		b.WriteByte('n')
		f := v.Double
		if f == math.Trunc(f) && f >= math.MinInt64 && f < math.MaxInt64 {
			b.WriteString(strconv.FormatInt(int64(f), 10)) // also -0 as 0
		} else {
			// Not whole (or NaN, Inf): never the text of an integer.
			b.WriteString(strconv.FormatFloat(f, 'g', -1, 64))
		}
		return
	}
	b.WriteByte(byte('0' + v.Type))
	b.WriteString(v.Text())
}

// group is one distinct tuple of dimension values: its cells in field order
// (nil at non-dimension fields).
type group struct{ cells []any }

// groupDevices drops the devices the filters refuse and numbers the distinct
// dimension tuples of the rest, in sorted order. Values are told apart as
// groupKey does; a group shows the values of its first device in that order.
func groupDevices(devices []*Device, dims []map[dimRef]kv.Value, fields []ViewField, filters []ViewFilter) ([]group, storage.ReportQuery) {
	type member struct {
		id    uuid.UUID
		key   string
		cells []any
	}
	var members []member
	for i, d := range devices {
		pass := true
		for _, f := range filters {
			v, ok := dims[i][dimRef{f.Field.Source, f.Field.Key, f.Field.Scope}]
			if pass = matches(f, v, ok); !pass {
				break
			}
		}
		if !pass {
			continue
		}
		cells := make([]any, len(fields))
		var key strings.Builder
		for j, f := range fields {
			if !isDimension(f) {
				continue
			}
			v, ok := dims[i][dimRef{f.Source, f.Key, f.Scope}]
			if ok {
				cells[j] = valueCell(v)
				key.WriteByte(1)
				groupKey(&key, v)
			}
			key.WriteByte(0)
		}
		members = append(members, member{d.ID.ID, key.String(), cells})
	}
	slices.SortStableFunc(members, func(a, b member) int { return compareCells(a.cells, b.cells) })
	var (
		groups []group
		q      storage.ReportQuery
		index  = map[string]uint32{}
	)
	for _, m := range members {
		g, ok := index[m.key]
		if !ok {
			g = uint32(len(groups))
			index[m.key] = g
			groups = append(groups, group{cells: m.cells})
		}
		q.Devices = append(q.Devices, m.id)
		q.Groups = append(q.Groups, g)
	}
	// Without a dimension field there is one group, the whole set, also when no
	// device is in it: clients read dataTable[0][label] as a card's value, so
	// the row is there (COUNT 0, SUM null, …) as when devices have no data.
	if len(groups) == 0 && !slices.ContainsFunc(fields, isDimension) {
		groups = []group{{cells: make([]any, len(fields))}}
	}
	return groups, q
}

// isDimension: the field is a device dimension (rows group by it), not
// aggregated telemetry or the date.
func isDimension(f ViewField) bool { return f.Source != SourceTelemetry && f.Source != SourceDate }

// valueCell turns a stored value into a report cell with its JSON type.
func valueCell(v kv.Value) any {
	switch v.Type {
	case kv.Bool:
		return v.Bool
	case kv.Long:
		return v.Long
	case kv.Double:
		return finite(v.Double)
	case kv.JSON:
		return json.RawMessage(v.Str)
	}
	return v.Str
}

func finite(f float64) any {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil
	}
	return f
}

// compareCell orders cells: numbers before text before other kinds, nil last.
func compareCell(a, b any) int {
	rank := func(c any) (int, float64, string) {
		switch v := c.(type) {
		case nil:
			return 3, 0, ""
		case int64:
			return 0, float64(v), ""
		case float64:
			return 0, v, ""
		case string:
			return 1, 0, v
		}
		return 2, 0, CellText(c)
	}
	ra, na, sa := rank(a)
	rb, nb, sb := rank(b)
	return cmp.Or(cmp.Compare(ra, rb), cmp.Compare(na, nb), cmp.Compare(sa, sb))
}

func compareCells(a, b []any) int {
	for i := range a {
		if c := compareCell(a[i], b[i]); c != 0 {
			return c
		}
	}
	return 0
}

type aggKey struct {
	group  uint32
	key    string
	bucket int64
}

// buildTable lays out one row per group and bucket (empty buckets included),
// rows ordered by the dimensions, then the date, then the view's sort.
func buildTable(v *View, groups []group, buckets []int64, axis dateAxis, rows []storage.ReportRow) *Report {
	byKey := make(map[aggKey]*storage.ReportRow, len(rows))
	for i := range rows {
		r := &rows[i]
		byKey[aggKey{r.Group, r.Key, r.Bucket}] = r
	}
	rep := &Report{ColumnLabels: make([]string, len(v.Fields)), Rows: [][]any{}}
	for i, f := range v.Fields {
		rep.ColumnLabels[i] = f.Label
	}
	type line struct {
		cells  []any
		bucket int64
	}
	var lines []line
	for g, gr := range groups {
		for _, b := range buckets {
			cells := slices.Clone(gr.cells)
			for i, f := range v.Fields {
				switch f.Source {
				case SourceDate:
					cells[i] = axis.label(b)
				case SourceTelemetry:
					cells[i] = aggCell(f.Aggregation, byKey[aggKey{uint32(g), f.Key, b}])
				}
			}
			lines = append(lines, line{cells, b})
		}
	}
	for i := len(v.Sort) - 1; i >= 0; i-- {
		s := v.Sort[i]
		col := slices.IndexFunc(v.Fields, func(f ViewField) bool { return f.Label == s.Label })
		slices.SortStableFunc(lines, func(a, b line) int {
			var c int
			if v.Fields[col].Source == SourceDate {
				c = cmp.Compare(a.bucket, b.bucket)
			} else if c = compareCell(a.cells[col], b.cells[col]); a.cells[col] == nil || b.cells[col] == nil {
				return c // nil stays last either way
			}
			if s.Order == "DESC" {
				return -c
			}
			return c
		})
	}
	for _, l := range lines {
		rep.Rows = append(rep.Rows, l.cells)
	}
	return rep
}

// aggCell is the cell of an aggregation over r; with no data (r nil, or nothing
// numeric for a numeric aggregation) COUNT and UNIQ are 0 and the others null.
func aggCell(agg string, r *storage.ReportRow) any {
	switch agg {
	case "COUNT":
		if r == nil {
			return int64(0)
		}
		return r.Count
	case "UNIQ":
		if r == nil {
			return int64(0)
		}
		return r.Uniq
	case "LATEST":
		if r == nil || r.Count == 0 {
			return nil
		}
		return valueCell(r.Latest)
	}
	if r == nil || r.NumCount == 0 {
		return nil
	}
	switch agg {
	case "AVG":
		return finite(roundSum(roundSum(r.Sum) / float64(r.NumCount)))
	case "SUM":
		return finite(roundSum(r.Sum))
	case "MIN":
		return finite(r.Min)
	case "MAX":
		return finite(r.Max)
	}
	return finite(roundSum(r.Delta)) // DELTA
}

// roundSum rounds a sum of doubles (SUM, AVG, DELTA) to 15 significant digits,
// so that both back ends give one number (analytics.md: identical tables).
// Float addition depends on the order of the terms, and each back end adds in
// its own (ClickHouse's even varies with its parts and threads): the same
// points may sum to 21.9 on one and 21.900000000000002 on the other. Both sum
// with compensation, which keeps them within a unit or two in the last place
// (the 16th-17th digit) of the exact sum, whatever the order and however many
// points; 15 digits drop that, and the cell is the shortest text of the value.
// They can still round apart when the exact sum lies within that error of
// halfway between two 15-digit numbers: sums of decimal readings lie far from
// it, but on ClickHouse points of both signs that cancel (a sum near 0 of
// large values) err by up to a unit of their magnitudes, not of the sum.
// MIN, MAX and LATEST are stored values, the same everywhere: not rounded.
// Whole numbers below 2^53 are kept: they add exactly in any order, and 15
// digits would cut such sums past 10^15.
func roundSum(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) || (f == math.Trunc(f) && math.Abs(f) < 1<<53) {
		return f
	}
	r, _ := strconv.ParseFloat(strconv.FormatFloat(f, 'g', 15, 64), 64)
	return r
}
