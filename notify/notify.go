// Package notify carries small messages between the nodes of a Sluice cluster:
// "this device's token changed", "a shared attribute of this device changed".
// Each node holds one subscription to the shared bus (Redis) and fans messages out
// to its local subscribers, so any number of waiting devices costs no extra
// connection. With the embedded default the bus is in-process.
package notify

import (
	"context"
	"sync"
)

// Notifier publishes to and subscribes on topics.
type Notifier interface {
	// Publish delivers msg to the subscribers of topic on every node, this one
	// included. Delivery is at most once: a node that is disconnected at the time
	// misses it (see Subscribe's onReset).
	Publish(ctx context.Context, topic string, msg []byte) error
	// Subscribe calls fn for every message on topic until cancel is called. fn runs
	// on the notifier's delivery goroutine: it must be quick and must not block.
	Subscribe(topic string, fn func(msg []byte)) (cancel func())
	// Close stops delivery.
	Close() error
}

// hub is the local fan-out that every Notifier uses: topic → subscribers.
type hub struct {
	mu   sync.RWMutex
	next uint64
	subs map[string]map[uint64]func([]byte)
}

func newHub() *hub { return &hub{subs: make(map[string]map[uint64]func([]byte))} }

func (h *hub) subscribe(topic string, fn func([]byte)) (cancel func(), first bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.next++
	id := h.next
	m := h.subs[topic]
	if m == nil {
		m = make(map[uint64]func([]byte))
		h.subs[topic] = m
		first = true
	}
	m[id] = fn
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			delete(h.subs[topic], id)
			if len(h.subs[topic]) == 0 {
				delete(h.subs, topic)
			}
		})
	}, first
}

// deliver calls every subscriber of topic. The callbacks run under the read lock,
// which is why they must not block or subscribe.
func (h *hub) deliver(topic string, msg []byte) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, fn := range h.subs[topic] {
		fn(msg)
	}
}

// Local is the in-process Notifier of the embedded default.
type Local struct{ h *hub }

// NewLocal returns an in-process Notifier.
func NewLocal() *Local { return &Local{h: newHub()} }

// Publish delivers msg to this process's subscribers, synchronously.
func (l *Local) Publish(_ context.Context, topic string, msg []byte) error {
	l.h.deliver(topic, msg)
	return nil
}

// Subscribe registers fn for topic.
func (l *Local) Subscribe(topic string, fn func([]byte)) (cancel func()) {
	cancel, _ = l.h.subscribe(topic, fn)
	return cancel
}

// Close does nothing: there is no connection.
func (l *Local) Close() error { return nil }
