// Package pebblelog routes Pebble's log lines to log/slog. Both Pebble users (the
// embedded back end and the ingest spool) share it.
package pebblelog

import (
	"context"
	"fmt"
	"log/slog"
)

// Logger implements pebble.Logger over an slog.Logger: informational chatter at
// Debug, errors at Error.
type Logger struct{ L *slog.Logger }

func (p Logger) Infof(format string, args ...any) {
	if p.L.Enabled(context.Background(), slog.LevelDebug) {
		p.L.Debug(fmt.Sprintf(format, args...))
	}
}

func (p Logger) Errorf(format string, args ...any) {
	p.L.Error(fmt.Sprintf(format, args...))
}

// Fatalf must not return: Pebble calls it on corruption and broken invariants.
func (p Logger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.L.Error(msg)
	panic("pebble: " + msg)
}
