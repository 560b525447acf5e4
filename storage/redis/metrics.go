package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/VictoriaMetrics/metrics"
	goredis "github.com/redis/go-redis/v9"
)

// redisErrors counts commands (and pipelines) that failed: connection trouble and
// server errors. A missing key (redis.Nil) is an answer, not an error.
var redisErrors = metrics.NewCounter(`sluice_redis_errors_total`)

// errorHook counts failures on every command of the client.
type errorHook struct{}

func (errorHook) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			redisErrors.Inc()
		}
		return c, err
	}
}

func (errorHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		if counts(err) {
			redisErrors.Inc()
		}
		return err
	}
}

// counts tells the errors the metric counts: not a missing key (an answer),
// nor a script not loaded yet (Script.Run then sends it: the normal first run
// of each script on each server).
func counts(err error) bool {
	return err != nil && !errors.Is(err, goredis.Nil) && !strings.HasPrefix(err.Error(), "NOSCRIPT")
}

func (errorHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		err := next(ctx, cmds)
		if counts(err) {
			redisErrors.Inc()
		}
		return err
	}
}

// SetLogger sends go-redis's own messages (such as "failed to dial" while Redis
// is down) to l as structured warnings instead of its plain stderr lines. The
// client library has one logger per process.
func SetLogger(l *slog.Logger) { goredis.SetLogger(slogPrinter{l}) }

type slogPrinter struct{ l *slog.Logger }

func (p slogPrinter) Printf(ctx context.Context, format string, v ...any) {
	p.l.WarnContext(ctx, "redis client", "msg", fmt.Sprintf(format, v...))
}
