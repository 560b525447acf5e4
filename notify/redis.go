package notify

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is the cluster Notifier: Publish is a Redis PUBLISH on "<prefix><topic>";
// each node holds ONE pattern subscription to "<prefix>*" and fans out locally.
type Redis struct {
	client redis.UniversalClient
	prefix string
	h      *hub
	ps     *redis.PubSub
	done   chan struct{}
	once   sync.Once
	log    *slog.Logger
	// closing is set by Close: the error that ends Receive then is the
	// close, not an interruption worth a warning.
	closing atomic.Bool
}

// NewRedis subscribes once to every topic under prefix (e.g. "sluice:") and starts
// delivering. onReset, when not nil, is called whenever the subscription is
// (re)established, after which messages published while it was down are lost:
// callers drop caches that those messages would have invalidated.
func NewRedis(ctx context.Context, client redis.UniversalClient, prefix string, log *slog.Logger, onReset func()) (*Redis, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Redis{client: client, prefix: prefix, h: newHub(), done: make(chan struct{}), log: log}
	r.ps = client.PSubscribe(ctx, prefix+"*")
	// Wait for the subscription confirmation so a Publish right after NewRedis
	// returns is seen by this node too.
	if _, err := r.ps.Receive(ctx); err != nil {
		r.ps.Close()
		return nil, err
	}
	go r.loop(onReset)
	return r, nil
}

func (r *Redis) loop(onReset func()) {
	defer close(r.done)
	backoff := 50 * time.Millisecond
	for {
		m, err := r.ps.Receive(context.Background())
		if err != nil {
			if errors.Is(err, redis.ErrClosed) || r.closing.Load() {
				return
			}
			// The next Receive reconnects and resubscribes; messages in between are
			// lost. Back off so a Redis that refuses connections is not hammered.
			r.log.Warn("notification subscription interrupted", "err", err, "retryIn", backoff)
			time.Sleep(backoff)
			backoff = min(backoff*2, time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		switch m := m.(type) {
		case *redis.Message:
			r.h.deliver(strings.TrimPrefix(m.Channel, r.prefix), []byte(m.Payload))
		case *redis.Subscription:
			if onReset != nil {
				onReset()
			}
		}
	}
}

// Publish sends msg to topic on every node.
func (r *Redis) Publish(ctx context.Context, topic string, msg []byte) error {
	return r.client.Publish(ctx, r.prefix+topic, msg).Err()
}

// Subscribe registers fn for topic on this node; no Redis command is sent.
func (r *Redis) Subscribe(topic string, fn func([]byte)) (cancel func()) {
	cancel, _ = r.h.subscribe(topic, fn)
	return cancel
}

// Close ends the subscription.
func (r *Redis) Close() error {
	var err error
	r.once.Do(func() {
		r.closing.Store(true)
		err = r.ps.Close()
		<-r.done
	})
	return err
}
