package engine

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // views name IANA zones; a host without zoneinfo must still know them

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

// EntityAnalyticsView is the entity type of saved analytics views.
const EntityAnalyticsView = "ANALYTICS_VIEW"

const kindView = "analyticsView"

// View is a saved analytics view (analytics.md, Part 1): which devices, which
// fields make the columns, which filters apply, over which range and time zone.
type View struct {
	ID          EntityID     `json:"id"`
	CreatedTime int64        `json:"createdTime"`
	TenantID    EntityID     `json:"tenantId"`
	Name        string       `json:"name"`
	Type        string       `json:"type"`
	Source      ViewSource   `json:"source"`
	Fields      []ViewField  `json:"fields"`
	Filters     []ViewFilter `json:"filters"`
	Range       ViewRange    `json:"range"`
	TimeZone    string       `json:"timeZone"`
	Sort        []ViewSort   `json:"sort"`
	Version     int64        `json:"version"`
}

// ViewSource selects the devices of a view: those of one device profile.
type ViewSource struct {
	DeviceProfile string `json:"deviceProfile"`
}

// ViewField is one column. Source is one of the Source* constants; TELEMETRY
// needs Key and Aggregation, ATTRIBUTE Key and Scope, DATE a Grouping (RAW with
// GroupBy and GroupByAmount).
type ViewField struct {
	Label         string `json:"label"`
	Source        string `json:"source"`
	Key           string `json:"key,omitempty"`
	Scope         string `json:"scope,omitempty"`
	Aggregation   string `json:"aggregation,omitempty"`
	Grouping      string `json:"grouping,omitempty"`
	GroupBy       string `json:"groupBy,omitempty"`
	GroupByAmount int64  `json:"groupByAmount,omitempty"`
}

// ViewFilter keeps only devices whose field matches; Name is what a report
// request's filters override. An empty Values list lets everything through.
type ViewFilter struct {
	Name      string      `json:"name"`
	Field     FilterField `json:"field"`
	Condition string      `json:"condition"`
	Values    []string    `json:"values"`
}

// FilterField is the field a filter tests: a device dimension.
type FilterField struct {
	Source string `json:"source"`
	Key    string `json:"key,omitempty"`
	Scope  string `json:"scope,omitempty"`
}

// ViewRange is ABSOLUTE [StartTs, EndTs) or a RELATIVE Preset in the view's zone.
type ViewRange struct {
	Type    string `json:"type"`
	Preset  string `json:"preset,omitempty"`
	StartTs int64  `json:"startTs,omitempty"`
	EndTs   int64  `json:"endTs,omitempty"`
}

// ViewSort orders the rows by the column Label, ASC or DESC.
type ViewSort struct {
	Label string `json:"label"`
	Order string `json:"order"`
}

// Field sources.
const (
	SourceEntityName  = "ENTITY_NAME"
	SourceEntityLabel = "ENTITY_LABEL"
	SourceEntityType  = "ENTITY_TYPE"
	SourceOwner       = "OWNER"
	SourceAttribute   = "ATTRIBUTE"
	SourceTelemetry   = "TELEMETRY"
	SourceDate        = "DATE"
)

var (
	viewTypes    = []string{"TABLE", "LINE_CHART", "BAR_CHART", "PIE_CHART", "SCATTER_PLOT", "HEAT_MAP", "CARD"}
	aggregations = map[string]storage.ReportAggs{
		"AVG": storage.ReportAvg, "SUM": storage.ReportSum, "MIN": storage.ReportMin, "MAX": storage.ReportMax,
		"COUNT": storage.ReportCount, "UNIQ": storage.ReportUniq, "LATEST": storage.ReportLatest, "DELTA": storage.ReportDelta,
	}
	// rawUnits are the RAW grouping's groupBy values.
	rawUnits = map[string]storage.BucketUnit{
		"MINUTE": storage.BucketMinute, "HOUR": storage.BucketHour, "DAY": storage.BucketDay, "WEEK": storage.BucketWeek,
		"MONTH": storage.BucketMonth, "QUARTER": storage.BucketQuarter, "YEAR": storage.BucketYear,
	}
	// groupings are the fixed date options (Trendz's names: DAY is the day of the
	// week, DATE the day of the month).
	groupings = map[string]storage.BucketUnit{
		"MINUTE": storage.BucketMinuteOfHour, "HOUR": storage.BucketHourOfDay, "DAY": storage.BucketDayOfWeek,
		"DATE": storage.BucketDayOfMonth, "FULL_MINUTE": storage.BucketMinute, "FULL_HOUR": storage.BucketHour,
		"FULL_DATE": storage.BucketDay, "FULL_QUARTER": storage.BucketQuarter, "START_OF_WEEK": storage.BucketWeek,
		"WEEK_OF_YEAR": storage.BucketWeekOfYear, "WEEK_OF_MONTH": storage.BucketWeekOfMonth,
		"MONTH": storage.BucketMonthOfYear, "YEARMONTH": storage.BucketMonth, "QUARTER": storage.BucketQuarterOfYear,
		"YEAR": storage.BucketYear,
	}
	textConditions    = []string{"ONE_OF", "NOT_ONE_OF", "STARTS_WITH", "ENDS_WITH", "CONTAINS"}
	numericConditions = []string{"GT", "GTE", "LT", "LTE"}
)

func badView(format string, args ...any) *Error {
	return Errorf(CodeBadRequestParams, "Invalid analytics view: "+format, args...)
}

// SaveView creates (zero id) or updates a view of p's tenant; tenant admins only.
// The view is checked (validateView) and stored normalised.
func (e *Engine) SaveView(ctx context.Context, p *Principal, in *View) (*View, error) {
	if err := requireRole(p, TenantAdmin); err != nil {
		return nil, err
	}
	if in.ID.ID != uuid.Nil {
		return e.updateView(ctx, p, in)
	}
	v := *in
	v.ID = newEntityID(EntityAnalyticsView, newID())
	v.CreatedTime, v.Version = e.now().UnixMilli(), 1
	v.TenantID = newEntityID(EntityTenant, p.TenantID)
	if err := e.validateView(ctx, &v); err != nil {
		return nil, err
	}
	if err := e.putRecord(ctx, kindView, v.ID.ID, p.TenantID, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

var errViewVersion = versionConflict("Analytics view")

// updateView is SaveView of an existing view. It is written only over the
// version it was checked against, as saveDevice: one overtaken by another write
// (an update, a profile rename moving its source) is made again over it, so the
// rename is not undone (the old profile name then fails validation), and one
// whose view was deleted meanwhile is 404, not the view brought back.
func (e *Engine) updateView(ctx context.Context, p *Principal, in *View) (*View, error) {
	for range maxReplaceTries {
		old, prev, err := loadRecord[View](ctx, e, kindView, in.ID.ID)
		if err != nil {
			return nil, notFound(err)
		}
		if old.TenantID.ID != p.TenantID {
			return nil, ErrNotFound // as GetView: another tenant's view is not found
		}
		// A client's version (ThingsBoard's optimistic lock) must be the
		// stored one; none (0) overwrites.
		if err := staleVersion("Analytics view", in.Version, old.Version); err != nil {
			return nil, err
		}
		v := *in
		v.ID, v.TenantID, v.CreatedTime, v.Version = old.ID, old.TenantID, old.CreatedTime, old.Version+1
		if err := e.validateView(ctx, &v); err != nil {
			return nil, err
		}
		err = e.replaceRecord(ctx, kindView, v.ID.ID, p.TenantID, prev, &v)
		switch {
		case errors.Is(err, storage.ErrChanged) && in.Version != 0:
			return nil, errViewVersion // the version the client named is gone
		case errors.Is(err, storage.ErrChanged):
			continue
		case err != nil:
			return nil, notFound(err)
		}
		return &v, nil
	}
	return nil, errChangedMeanwhile
}

// GetView returns a view of p's tenant; tenant admins and customer users (who run
// reports) may read views. Another tenant's view is not found.
func (e *Engine) GetView(ctx context.Context, p *Principal, id uuid.UUID) (*View, error) {
	if err := requireRole(p, TenantAdmin, CustomerUser); err != nil {
		return nil, err
	}
	v, err := getRecord[View](ctx, e, kindView, id)
	if err != nil {
		return nil, notFound(err)
	}
	if v.TenantID.ID != p.TenantID {
		return nil, ErrNotFound
	}
	return v, nil
}

// ListViews returns a page of the views of p's tenant.
func (e *Engine) ListViews(ctx context.Context, p *Principal, pl PageLink) (PageData[*View], error) {
	if err := requireRole(p, TenantAdmin, CustomerUser); err != nil {
		return PageData[*View]{}, err
	}
	all, err := listRecords[View](ctx, e, kindView, p.TenantID)
	if err != nil {
		return PageData[*View]{}, err
	}
	return makePage(all, pl, viewPages)
}

// DeleteView removes a view of p's tenant; tenant admins only.
func (e *Engine) DeleteView(ctx context.Context, p *Principal, id uuid.UUID) error {
	if err := requireRole(p, TenantAdmin); err != nil {
		return err
	}
	if _, err := e.GetView(ctx, p, id); err != nil {
		return err
	}
	return notFound(e.deleteRecord(ctx, kindView, id))
}

var viewPages = pageSpec[*View]{
	text: func(v *View) string { return v.Name },
	keys: map[string]func(*View) sortKey{
		"id":          func(v *View) sortKey { return idKey(v.ID.ID) },
		"createdTime": func(v *View) sortKey { return numKey(v.CreatedTime) },
		"name":        func(v *View) sortKey { return strKey(v.Name) },
		"type":        func(v *View) sortKey { return strKey(v.Type) },
	},
}

// validateView checks v and fills defaults: type TABLE, time zone UTC, range
// RELATIVE THIS_WEEK, RAW groupBy DAY, sort order ASC.
func (e *Engine) validateView(ctx context.Context, v *View) error {
	if strings.TrimSpace(v.Name) == "" {
		return badView("name should be specified")
	}
	if v.Type == "" {
		v.Type = "TABLE"
	}
	if !contains(viewTypes, v.Type) {
		return badView("unknown type %q (one of %s)", v.Type, strings.Join(viewTypes, ", "))
	}
	if v.Source.DeviceProfile == "" {
		return badView("source.deviceProfile should be specified")
	}
	if _, err := lookupRecord[DeviceProfile](ctx, e, kindProfile, profileNameKey(v.TenantID.ID, v.Source.DeviceProfile)); err != nil {
		return ifNotFound(err, badView("unknown source: no device profile %q", v.Source.DeviceProfile))
	}
	if v.TimeZone == "" {
		v.TimeZone = "UTC"
	}
	if _, err := time.LoadLocation(v.TimeZone); err != nil || strings.EqualFold(v.TimeZone, "local") {
		return badView("unknown time zone %q (an IANA name such as Europe/Kyiv)", v.TimeZone)
	}
	if len(v.Fields) == 0 {
		return badView("fields should not be empty")
	}
	labels := map[string]bool{}
	dates := 0
	for i := range v.Fields {
		f := &v.Fields[i]
		if strings.TrimSpace(f.Label) == "" {
			return badView("field %d has no label", i+1)
		}
		if labels[f.Label] {
			return badView("duplicate label %q", f.Label)
		}
		labels[f.Label] = true
		if err := validateField(f); err != nil {
			return err
		}
		if f.Source == SourceDate {
			if dates++; dates > 1 {
				return badView("only one DATE field is allowed (%q is the second)", f.Label)
			}
		}
	}
	names := map[string]bool{}
	if v.Filters == nil {
		v.Filters = []ViewFilter{}
	}
	for i := range v.Filters {
		f := &v.Filters[i]
		if strings.TrimSpace(f.Name) == "" {
			return badView("filter %d has no name", i+1)
		}
		if names[f.Name] {
			return badView("duplicate filter name %q", f.Name)
		}
		names[f.Name] = true
		if err := validateFilter(f); err != nil {
			return err
		}
	}
	if err := validateRange(&v.Range); err != nil {
		return err
	}
	if v.Sort == nil {
		v.Sort = []ViewSort{}
	}
	for i := range v.Sort {
		s := &v.Sort[i]
		if !labels[s.Label] {
			return badView("sort by %q, which is no field label", s.Label)
		}
		s.Order = strings.ToUpper(s.Order)
		if s.Order == "" {
			s.Order = "ASC"
		}
		if s.Order != "ASC" && s.Order != "DESC" {
			return badView("sort order of %q must be ASC or DESC, not %q", s.Label, s.Order)
		}
	}
	return nil
}

func validateField(f *ViewField) error {
	if f.Source != SourceTelemetry && f.Aggregation != "" {
		return badView("field %q: only TELEMETRY fields take an aggregation", f.Label)
	}
	switch f.Source {
	case SourceEntityName, SourceEntityLabel, SourceEntityType, SourceOwner:
	case SourceAttribute:
		if f.Key == "" {
			return badView("attribute field %q has no key", f.Label)
		}
		if _, ok := storage.ParseScope(f.Scope); !ok {
			return badView("attribute field %q: unknown scope %q (CLIENT_SCOPE, SHARED_SCOPE or SERVER_SCOPE)", f.Label, f.Scope)
		}
	case SourceTelemetry:
		if f.Key == "" {
			return badView("telemetry field %q has no key", f.Label)
		}
		if f.Aggregation == "" {
			return badView("telemetry field %q needs an aggregation (AVG, SUM, MIN, MAX, COUNT, UNIQ, LATEST or DELTA)", f.Label)
		}
		if _, ok := aggregations[f.Aggregation]; !ok {
			return badView("telemetry field %q: unknown aggregation %q", f.Label, f.Aggregation)
		}
	case SourceDate:
		if f.Grouping == "" {
			f.Grouping = "RAW"
		}
		if f.Grouping == "RAW" {
			if f.GroupBy == "" {
				f.GroupBy = "DAY"
			}
			if _, ok := rawUnits[f.GroupBy]; !ok {
				return badView("date field %q: unknown groupBy %q (MINUTE, HOUR, DAY, WEEK, MONTH, QUARTER or YEAR)", f.Label, f.GroupBy)
			}
			if f.GroupByAmount < 0 || f.GroupByAmount > maxGroupByAmount {
				return badView("date field %q: groupByAmount must be 0 to %d", f.Label, maxGroupByAmount)
			}
		} else if _, ok := groupings[f.Grouping]; !ok {
			return badView("date field %q: unknown grouping %q", f.Label, f.Grouping)
		}
	default:
		return badView("field %q: unknown source %q", f.Label, f.Source)
	}
	return nil
}

func validateFilter(f *ViewFilter) error {
	switch f.Field.Source {
	case SourceEntityName, SourceEntityLabel, SourceEntityType, SourceOwner:
	case SourceAttribute:
		if f.Field.Key == "" {
			return badView("filter %q: attribute field has no key", f.Name)
		}
		if _, ok := storage.ParseScope(f.Field.Scope); !ok {
			return badView("filter %q: unknown attribute scope %q", f.Name, f.Field.Scope)
		}
	default:
		return badView("filter %q is on an unknown field (source %q; filters take ENTITY_NAME, ENTITY_LABEL, ENTITY_TYPE, OWNER or ATTRIBUTE)",
			f.Name, f.Field.Source)
	}
	if f.Condition == "" {
		f.Condition = "ONE_OF"
	}
	if f.Values == nil {
		f.Values = []string{}
	}
	return checkCondition(f.Name, f.Condition, f.Values)
}

// maxGroupByAmount bounds a RAW date field's units per bucket, far above any
// use (a million years) and far below where a bucket's length in ms would wrap.
const maxGroupByAmount = 1_000_000

// checkCondition checks a filter's condition and values (also those a report
// request puts in): comparisons take one number.
func checkCondition(name, cond string, values []string) error {
	switch {
	case contains(textConditions, cond):
	case contains(numericConditions, cond):
		if len(values) > 1 {
			return badView("filter %q: %s takes one value", name, cond)
		}
		for _, s := range values {
			// ParseFloat also takes NaN and Inf, which compare with nothing.
			if f, err := strconv.ParseFloat(s, 64); err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				return badView("filter %q: %s needs a number, not %q", name, cond, s)
			}
		}
	default:
		return badView("filter %q: unknown condition %q", name, cond)
	}
	return nil
}

func validateRange(r *ViewRange) error {
	if r.Type == "" && r.Preset == "" && r.StartTs == 0 && r.EndTs == 0 {
		r.Type, r.Preset = "RELATIVE", "THIS_WEEK"
	}
	switch r.Type {
	case "ABSOLUTE":
		if r.EndTs <= r.StartTs {
			return badView("absolute range needs startTs < endTs")
		}
	case "RELATIVE":
		if _, ok := presets[r.Preset]; !ok {
			return badView("unknown relative range preset %q", r.Preset)
		}
	default:
		return badView("range type must be ABSOLUTE or RELATIVE, not %q", r.Type)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// renameProfileViews points the views of tenant that report on the profile
// named from at its new name to: a view names its profile, and would report
// nothing after a rename. Each over its latest version.
func (e *Engine) renameProfileViews(ctx context.Context, tenant uuid.UUID, from, to string) error {
	views, err := listRecords[View](ctx, e, kindView, tenant)
	if err != nil {
		return err
	}
	for _, v := range views {
		if v.Source.DeviceProfile != from {
			continue
		}
		if err := e.renameViewSource(ctx, v.ID.ID, from, to); err != nil && !errors.Is(err, storage.ErrNotFound) {
			return err
		}
	}
	return nil
}

func (e *Engine) renameViewSource(ctx context.Context, id uuid.UUID, from, to string) error {
	for range maxReplaceTries {
		v, prev, err := loadRecord[View](ctx, e, kindView, id)
		if err != nil {
			return err
		}
		if v.Source.DeviceProfile != from {
			return nil
		}
		v.Source.DeviceProfile = to
		v.Version++
		err = e.replaceRecord(ctx, kindView, id, v.TenantID.ID, prev, v)
		if !errors.Is(err, storage.ErrChanged) {
			return err
		}
	}
	return errChangedMeanwhile
}
