package engine

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// Device activity, as ThingsBoard's device state service keeps it: a device is
// active from any request it makes with its token until it has been silent for
// its inactivity timeout (the server attribute inactivityTimeout in ms, else
// Config.InactivityTimeout, 10 minutes by default).
//
// Each node notes the last request of each device in memory and writes it as the
// SERVER_SCOPE attribute lastActivityTime every activityInterval (ThingsBoard's
// transport reports its sessions' last activity every 3 s). ThingsBoard also
// stores the flag "active", set by a periodic check on the node that owns the
// device; Sluice's nodes own no devices, so "active" is derived from
// lastActivityTime whenever it is read (DeviceAttributes, DeviceInfo) and no
// node has to sweep for devices that went quiet.

// Attribute names of the device state, as ThingsBoard's.
const (
	attrActive            = "active"
	attrLastActivityTime  = "lastActivityTime"
	attrInactivityTimeout = "inactivityTimeout"
)

// activityInterval is how often a node writes its devices' last activity. A
// variable for tests.
var activityInterval = 3 * time.Second

const activityShards = 64

// activity is a node's last request time per device not yet written.
type activity struct {
	shards [activityShards]activityShard

	start   sync.Once
	flushMu sync.Mutex // one flush at a time
	quit    chan struct{}
	done    chan struct{}
	stop    sync.Once
}

type activityShard struct {
	mu sync.Mutex
	m  map[uuid.UUID]int64
	_  [48]byte // keep shards on separate cache lines
}

// noteActivity records a request of device id at ms; the writer starts with the
// first one.
func (e *Engine) noteActivity(id uuid.UUID, ms int64) {
	a := &e.activity
	a.start.Do(func() {
		a.quit, a.done = make(chan struct{}), make(chan struct{})
		go e.activityWriter()
	})
	sh := &a.shards[id[15]%activityShards]
	sh.mu.Lock()
	if sh.m == nil {
		sh.m = map[uuid.UUID]int64{}
	}
	if ms > sh.m[id] {
		sh.m[id] = ms
	}
	sh.mu.Unlock()
}

// activityWriter writes the noted activity every activityInterval until
// closeActivity.
func (e *Engine) activityWriter() {
	a := &e.activity
	defer close(a.done)
	tick := time.NewTicker(activityInterval)
	defer tick.Stop()
	for {
		select {
		case <-a.quit:
			return
		case <-tick.C:
			ctx, cancel := context.WithTimeout(context.Background(), activityInterval)
			e.flushActivity(ctx)
			cancel()
		}
	}
}

// flushActivity writes each noted device's lastActivityTime. A noted time
// stays noted until it is written (so a read in between still sees it), and
// one the store did not take (it is down) is tried with the next flush.
func (e *Engine) flushActivity(ctx context.Context) {
	a := &e.activity
	a.flushMu.Lock()
	defer a.flushMu.Unlock()
	type seen struct {
		id uuid.UUID
		ms int64
	}
	var all []seen
	for i := range a.shards {
		sh := &a.shards[i]
		sh.mu.Lock()
		for id, ms := range sh.m {
			all = append(all, seen{id, ms})
		}
		sh.mu.Unlock()
	}
	failed := 0
	var lastErr error
	for len(all) > 0 {
		n := min(len(all), activityBatch)
		chunk := all[:n]
		all = all[n:]
		writes := make([]storage.EntityAttributes, len(chunk))
		entries := make([]kv.Entry, len(chunk))
		for i, s := range chunk {
			entries[i] = kv.Entry{Key: attrLastActivityTime, Ts: s.ms, Value: kv.LongValue(s.ms)}
			writes[i] = storage.EntityAttributes{EntityID: s.id, Attrs: entries[i : i+1]}
		}
		err := ctx.Err()
		if err == nil {
			err = e.store.SaveAttributesOf(ctx, storage.ServerScope, writes)
		}
		if err != nil {
			lastErr = err
			failed += len(chunk)
			continue
		}
		for _, s := range chunk {
			// Forgotten once written, unless a later request was noted meanwhile.
			sh := &a.shards[s.id[15]%activityShards]
			sh.mu.Lock()
			if sh.m[s.id] == s.ms {
				delete(sh.m, s.id)
			}
			sh.mu.Unlock()
		}
	}
	if failed > 0 {
		e.cfg.Logger.Warn("cannot write the last activity of devices; keeping it for the next write", "devices", failed, "err", lastErr)
	}
}

// activityBatch is how many devices' activity one store call writes: one
// sync on the embedded store, one pipeline on Redis.
const activityBatch = 1000

// closeActivity stops the writer and writes what is left, within ctx.
func (e *Engine) closeActivity(ctx context.Context) {
	a := &e.activity
	started := false
	a.start.Do(func() {}) // no writer starts after this
	a.stop.Do(func() {
		if a.quit != nil {
			started = true
			close(a.quit)
		}
	})
	if started {
		<-a.done
	}
	e.flushActivity(ctx)
}

// deviceState is what ThingsBoard's state service would say of a device now.
type deviceState struct {
	active       bool
	lastActivity int64 // ms; 0: never
	changed      int64 // when active last changed, ms: the lastUpdateTs of "active"
}

// stateOf derives the state of device d from its stored server attributes
// (lastActivityTime, inactivityTimeout; others are ignored) and what this node
// noted but has not written yet.
func (e *Engine) stateOf(d *Device, server []kv.Entry) deviceState {
	st := deviceState{changed: d.CreatedTime}
	timeout := e.cfg.InactivityTimeout.Milliseconds()
	for _, a := range server {
		switch a.Key {
		case attrLastActivityTime:
			if a.Value.Type == kv.Long {
				st.lastActivity = a.Value.Long
			}
		case attrInactivityTimeout:
			// ThingsBoard takes a positive number of ms; anything else is the default.
			if n, ok := a.Value.Numeric(); ok && n >= 1 && n < 1<<62 {
				timeout = int64(n)
			}
		}
	}
	if ms := e.pendingActivity(d.ID.ID); ms > st.lastActivity {
		st.lastActivity = ms
	}
	if st.lastActivity == 0 {
		return st
	}
	now := e.now().UnixMilli()
	if end := st.lastActivity + timeout; end > now {
		st.active, st.changed = true, st.lastActivity
	} else {
		st.changed = end
	}
	return st
}

// pendingActivity is the last request of device id this node noted and has
// not written yet (0: none).
func (e *Engine) pendingActivity(id uuid.UUID) int64 {
	sh := &e.activity.shards[id[15]%activityShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.m[id]
}

// deviceStateKeys are the stored attributes stateOf reads.
var deviceStateKeys = []string{attrInactivityTimeout, attrLastActivityTime}

// deviceStates derives the state of each device from its stored attributes.
func (e *Engine) deviceStates(ctx context.Context, devices []*Device) (map[uuid.UUID]deviceState, error) {
	out := make(map[uuid.UUID]deviceState, len(devices))
	for _, d := range devices {
		attrs, err := e.store.GetAttributes(ctx, d.ID.ID, storage.ServerScope, deviceStateKeys)
		if err != nil {
			return nil, err
		}
		out[d.ID.ID] = e.stateOf(d, attrs)
	}
	return out, nil
}

// withActive adds the derived "active" to a device's SERVER_SCOPE attributes
// attrs, which were read for keys (nil: all) and hold deviceStateKeys too;
// those two are then dropped again unless keys asked for them. A stored
// "active" (a client's write) is replaced.
func (e *Engine) withActive(d *Device, attrs []kv.Entry, keys []string) []kv.Entry {
	st := e.stateOf(d, attrs)
	out := attrs[:0]
	for _, a := range attrs {
		if a.Key != attrActive && (keys == nil || slices.Contains(keys, a.Key)) {
			out = append(out, a)
		}
	}
	if keys != nil && !slices.Contains(keys, attrActive) {
		return out
	}
	i := 0
	for i < len(out) && out[i].Key < attrActive {
		i++
	}
	return slices.Insert(out, i, kv.Entry{Key: attrActive, Ts: st.changed, Value: kv.BoolValue(st.active)})
}
