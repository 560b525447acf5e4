// Package split composes one storage.Backend from a Telemetry back end and an
// Entities+Attributes back end: the production shape is ClickHouse for telemetry
// and Redis for platform state.
package split

import (
	"context"
	"errors"
	"io"

	"github.com/sluice-iot/sluice/storage"
)

// Telemetry is a telemetry back end that can be closed.
type Telemetry interface {
	storage.Telemetry
	io.Closer
}

// State is an entities and attributes back end that can be closed.
type State interface {
	storage.Attributes
	storage.Entities
	io.Closer
}

// Backend routes telemetry calls to one back end and the rest to the other.
type Backend struct {
	storage.Telemetry
	storage.Attributes
	storage.Entities
	// Reports builds reports: the telemetry back end when it is a
	// storage.Reporter, else whatever the caller sets (in production the spool
	// fronts ClickHouse, and reports go to ClickHouse itself).
	Reports storage.Reporter

	closers []io.Closer
}

var _ storage.Backend = (*Backend)(nil)

// New composes tel and state; Close closes both.
func New(tel Telemetry, state State) *Backend {
	b := &Backend{Telemetry: tel, Attributes: state, Entities: state, closers: []io.Closer{tel, state}}
	b.Reports, _ = tel.(storage.Reporter)
	return b
}

var _ storage.Reporter = (*Backend)(nil)

// Report delegates to Reports.
func (b *Backend) Report(ctx context.Context, q storage.ReportQuery) ([]storage.ReportRow, error) {
	if b.Reports == nil {
		return nil, errors.New("split: this back end has no report store")
	}
	return b.Reports.Report(ctx, q)
}

// Close closes both back ends and returns their errors joined.
func (b *Backend) Close() error {
	var errs []error
	for _, c := range b.closers {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
