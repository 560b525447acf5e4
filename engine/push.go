package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// Server → device push for the device long polls (compat §1.4, §2). A change meant
// for a device is published once on the notifier, as the exact body the device
// will receive (a large one as a notice of its keys, sharedUpdateMsg), on a topic
// of that device. A poll on any node subscribes to that
// topic locally (the notifier's fan-out: no connection of its own) and answers the
// first message. Nothing is queued: a change while no poll is open is lost, as in
// ThingsBoard.
const (
	sharedTopicPrefix = "attr:"   // + device id: body of a shared-attribute change
	deviceTopicPrefix = "device:" // + device id: device lifecycle, payload deviceDeleted or credentialsChanged
)

// Payloads of the device lifecycle topic.
const (
	deviceDeleted = "deleted"
	// credentialsChanged ends open polls with 408, as ThingsBoard closes the
	// device's sessions: the device polls again with its new token.
	credentialsChanged = "credentials"
)

// ErrDeviceDeleted ends a poll whose device was deleted while it waited (403, as
// ThingsBoard answers "Device was deleted!").
var ErrDeviceDeleted = &Error{Code: CodePermissionDenied, Msg: "Device was deleted!"}

func sharedTopic(id uuid.UUID) string { return sharedTopicPrefix + id.String() }
func deviceTopic(id uuid.UUID) string { return deviceTopicPrefix + id.String() }

// WaitSharedAttributes waits up to timeout for the next change of a shared
// attribute of the device, made on any node by SaveAttributes or DeleteAttributes.
// token is the one the poll came with. It returns the body to send the device,
// {"k":v,...} with only the keys of that change or {"deleted":[...]}, with ok =
// true; ok = false when timeout passed first, or when the device's credentials
// changed (the token may be revoked; 408, as ThingsBoard closes the device's
// sessions). When the node's notifications were interrupted meanwhile (a
// resync), a change may have been lost: the poll then answers the shared
// attributes of the device updated since it started (resyncSkew before, see
// sharedSince), {"k":v,...}, and keeps waiting when there are none. A deletion of the
// device is ErrDeviceDeleted; ctx ending is ctx.Err(); a poll past a long-poll
// cap is a *LimitError at once (see admitPoll).
// The body may be shared with other waiters: callers must not modify it.
func (e *Engine) WaitSharedAttributes(ctx context.Context, deviceID uuid.UUID, token string, timeout time.Duration) (body []byte, ok bool, err error) {
	body, err = e.waitPush(ctx, deviceID, token, timeout)
	switch {
	case err == errSessionClosed:
		return nil, false, nil
	case err != nil && ctx.Err() != nil:
		return nil, false, ctx.Err() // a read cut short by ctx: the poll ended, it did not fail
	}
	return body, body != nil, err
}

// errSessionClosed ends a poll whose token no longer names its device (its
// credentials changed): answered as a timeout.
var errSessionClosed = errors.New("the device's credentials changed")

// maxInlinePush is the largest change published as the body itself. A larger
// one is published as a notice of its keys, and each poll reads their values:
// Redis cuts a subscriber whose output buffer passes 32 MB (its default
// client-output-buffer-limit for pub/sub), and every node's one subscription
// would go with it, for a save well within the body limit.
const maxInlinePush = 64 << 10

// keysNotice starts a notice of changed keys: each key as a uvarint length
// and its bytes. A body starts with '{'.
const keysNotice = 0

// sharedUpdateMsg is what a shared-attribute save publishes: the body, or a
// notice of its keys when the body is large.
func sharedUpdateMsg(attrs []kv.Entry) []byte {
	body := sharedUpdateBody(attrs)
	if len(body) <= maxInlinePush {
		return body
	}
	msg := []byte{keysNotice}
	for _, a := range attrs {
		msg = binary.AppendUvarint(msg, uint64(len(a.Key)))
		msg = append(msg, a.Key...)
	}
	return msg
}

// noticeKeys reads the keys of a notice (sharedUpdateMsg).
func noticeKeys(msg []byte) []string {
	var keys []string
	for rest := msg[1:]; len(rest) > 0; {
		n, w := binary.Uvarint(rest)
		if w <= 0 || n > uint64(len(rest)-w) {
			break // not from sharedUpdateMsg
		}
		keys = append(keys, string(rest[w:w+int(n)]))
		rest = rest[w+int(n):]
	}
	return keys
}

// waitPush answers the first change of the device's shared attributes for its
// long poll; nil body and nil error when timeout passed first. It subscribes
// before anything else can happen, so a change published after the call starts
// is never missed; the notifier's resync (evict.go), which says some messages
// may have been lost, is watched as the RPC poll watches it (WaitRPC).
func (e *Engine) waitPush(ctx context.Context, deviceID uuid.UUID, token string, timeout time.Duration) ([]byte, error) {
	// What a resync answers is what changed from here on (sharedSince); taken
	// before the poll counts as open (OpenPolls).
	since := e.now().Add(-resyncSkew).UnixMilli()
	release, err := e.admitPoll(deviceID)
	if err != nil {
		return nil, err
	}
	defer release()
	// Room for a second message: a large change is a notice whose keys the poll
	// reads, and when they were deleted meanwhile the deletion, published right
	// after, is what it answers.
	got := make(chan []byte, 2)
	// The callbacks run on the notifier's delivery goroutine: never block it.
	cancelMsg := e.cfg.Notifier.Subscribe(sharedTopic(deviceID), func(msg []byte) {
		select {
		case got <- msg:
		default: // one poll answers one change; later ones are for the next poll
		}
	})
	defer cancelMsg()
	gone, cancelGone := e.deviceGone(deviceID)
	defer cancelGone()

	t := time.NewTimer(timeout)
	defer t.Stop()
	resynced := false
	for {
		// Taken before the look, so a resync during it is seen next.
		lost := e.resync.wait()
		// The device may have been deleted, or its token changed, before the
		// subscriptions (since the caller checked the token) or in a resync's
		// gap: neither would be heard of again.
		if err := e.pollerCurrent(ctx, deviceID, token); err != nil {
			return nil, err
		}
		if resynced {
			if body, err := e.sharedSince(ctx, deviceID, since); err != nil || body != nil {
				return body, err
			}
		}
		resynced = false
		select {
		case msg := <-got:
			if body, err := e.sharedChange(ctx, deviceID, msg); err != nil || body != nil {
				return body, err
			}
			// A large change whose keys have all been deleted since: nothing
			// to answer yet; what comes next (as a rule that deletion) is.
		case <-lost:
			resynced = true
			if !e.resyncPause(ctx, t.C) {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				// The timeout came during the pause: look before the 408
				// all the same, for a change lost in the gap would be lost
				// for good (the device's next poll starts after it).
				return e.resyncLook(ctx, deviceID, token, since)
			}
		case why := <-gone:
			if why == deviceDeleted {
				return nil, ErrDeviceDeleted
			}
			return nil, errSessionClosed
		case <-t.C:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// resyncLook is the last look of a poll whose timeout came in its pause
// after a resync: its token checked as every look does, then what changed
// since it started (sharedSince); nil body and nil error when nothing did.
func (e *Engine) resyncLook(ctx context.Context, deviceID uuid.UUID, token string, since int64) ([]byte, error) {
	if err := e.pollerCurrent(ctx, deviceID, token); err != nil {
		return nil, err
	}
	return e.sharedSince(ctx, deviceID, since)
}

// pollerCurrent is nil while token still names the device: ErrDeviceDeleted
// once the device has no credentials (deleted, or being deleted: they go
// first), errSessionClosed once they are another token. A token cache hit
// costs no storage read; a deletion or credential change evicts the token
// here before its device message could have been delivered, and DropCaches
// empties the cache before it fires the resync.
func (e *Engine) pollerCurrent(ctx context.Context, deviceID uuid.UUID, token string) error {
	d, err := e.DeviceByToken(ctx, token)
	if err == nil && d.UUID() == deviceID {
		return nil
	}
	if err != nil && !errors.Is(err, errInvalidToken) {
		return err
	}
	switch _, err := e.credentialsOf(ctx, deviceID); {
	case errors.Is(err, storage.ErrNotFound):
		return ErrDeviceDeleted
	case err != nil:
		return err
	}
	return errSessionClosed
}

// sharedChange is the body of a published change (sharedUpdateMsg): the message
// itself, or for a notice the current values of its keys; nil when none of them
// is left.
func (e *Engine) sharedChange(ctx context.Context, deviceID uuid.UUID, msg []byte) ([]byte, error) {
	if len(msg) == 0 || msg[0] != keysNotice {
		return msg, nil
	}
	attrs, err := e.store.GetAttributes(ctx, deviceID, storage.SharedScope, noticeKeys(msg))
	if err != nil || len(attrs) == 0 {
		return nil, err
	}
	return sharedUpdateBody(attrs), nil
}

// resyncSkew is how far before a poll's start a shared attribute's update may
// be dated and still be answered after a resync (sharedSince). The update is
// dated by the clock of the node that saved it (SaveAttributes: lastUpdateTs),
// the poll's start by this node's: with the nodes' clocks apart by up to this
// much, a change saved after the poll started, which the poll may have missed,
// is never taken for one the device had before it polled.
const resyncSkew = 5 * time.Second

// sharedSince is what a poll answers after a resync, when a change may have
// been lost: the device's shared attributes whose last update (the entry's
// Ts, its lastUpdateTs) is at or after since, as one save would publish them
// ({"k":v,...}; a device applies updates idempotently); nil when there are
// none, and the poll keeps waiting. Not every shared attribute: after a Redis
// reconnect every open poll of the node resyncs at once, and answering each
// device its whole state would be a spurious update for all of them (fw_* and
// sw_* keys included, which can restart a device's OTA flow). An attribute
// updated up to resyncSkew before the poll started may be answered although
// the device had it; a deletion lost in the gap is not answered: nothing
// records deletions.
func (e *Engine) sharedSince(ctx context.Context, deviceID uuid.UUID, since int64) ([]byte, error) {
	attrs, err := e.store.GetAttributes(ctx, deviceID, storage.SharedScope, nil)
	if err != nil {
		return nil, err
	}
	attrs = slices.DeleteFunc(attrs, func(a kv.Entry) bool { return a.Ts < since })
	if len(attrs) == 0 {
		return nil, nil
	}
	return sharedUpdateBody(attrs), nil
}

// clientKey holds, in a wait's context, how to see whether its client is still
// there (WithClient).
type clientKey struct{}

// ErrClientGone ends a device's RPC poll whose client has closed its
// connection, before the poll takes an RPC it could not hand over.
var ErrClientGone = errors.New("the polling client has gone")

// WithClient tells the waits of ctx how to see whether their client is still
// there: a device's RPC poll asks right before it takes an RPC, which a poll
// answered to no one would lose.
func WithClient(ctx context.Context, there func() bool) context.Context {
	return context.WithValue(ctx, clientKey{}, there)
}

// clientThere reports what ctx's WithClient says; true without one.
func clientThere(ctx context.Context) bool {
	there, _ := ctx.Value(clientKey{}).(func() bool)
	return there == nil || there()
}

// deviceGone signals, on any node, the device's deletion (deviceDeleted) or a
// change of its credentials (credentialsChanged): either ends its open polls.
func (e *Engine) deviceGone(deviceID uuid.UUID) (<-chan string, func()) {
	gone := make(chan string, 1)
	// The callback runs on the notifier's delivery goroutine: never block it.
	cancel := e.cfg.Notifier.Subscribe(deviceTopic(deviceID), func(msg []byte) {
		if why := string(msg); why == deviceDeleted || why == credentialsChanged {
			select {
			case gone <- why:
			default:
			}
		}
	})
	return gone, cancel
}

// OpenPolls is the number of device long polls waiting on this node.
func (e *Engine) OpenPolls() int64 { return e.polls.Load() }

// publishPush sends msg to the polls of topic on every node. Best effort: the
// change itself is already stored, and a poll that misses it reads it later.
func (e *Engine) publishPush(ctx context.Context, topic string, msg []byte) {
	if err := e.cfg.Notifier.Publish(ctx, topic, msg); err != nil {
		e.cfg.Logger.Warn("cannot notify waiting devices", "topic", topic, "err", err)
	}
}

// sharedUpdateBody is {"k":v,...} of a save, native JSON types as the device API
// reads them. A key given twice counts once, with its last value (what is stored).
func sharedUpdateBody(attrs []kv.Entry) []byte {
	var last map[string]int
	if len(attrs) > 1 {
		last = make(map[string]int, len(attrs))
		for i, a := range attrs {
			last[a.Key] = i
		}
	}
	buf := append(make([]byte, 0, 64*len(attrs)), '{')
	n := 0
	for i, a := range attrs {
		if last != nil && last[a.Key] != i {
			continue
		}
		if n > 0 {
			buf = append(buf, ',')
		}
		n++
		buf = kv.AppendJSONString(buf, a.Key)
		buf = append(buf, ':')
		buf = a.Value.AppendJSON(buf)
	}
	return append(buf, '}')
}

// sharedDeleteBody is {"deleted":["k1",...]}.
func sharedDeleteBody(keys []string) []byte {
	buf := append(make([]byte, 0, 16+24*len(keys)), `{"deleted":[`...)
	for i, k := range keys {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = kv.AppendJSONString(buf, k)
	}
	return append(buf, ']', '}')
}
