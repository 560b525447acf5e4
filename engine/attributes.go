package engine

import (
	"context"
	"errors"
	"slices"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// SaveAttributes stores attrs in scope with lastUpdateTs = now. It returns once
// they are durable. Keys and values may alias request memory; storage copies them.
// A SHARED_SCOPE save is then pushed to the device's open long polls on every
// node (WaitSharedAttributes): every server-side writer of shared attributes (REST,
// OTA, rules) goes through here so devices see it.
func (e *Engine) SaveAttributes(ctx context.Context, entityID uuid.UUID, scope storage.Scope, attrs []kv.Entry) error {
	if len(attrs) == 0 {
		return nil
	}
	now := e.now().UnixMilli()
	for i := range attrs {
		attrs[i].Ts = now
	}
	if err := e.store.SaveAttributes(ctx, entityID, scope, attrs); err != nil {
		return err
	}
	if scope == storage.SharedScope {
		e.publishPush(ctx, sharedTopic(entityID), sharedUpdateMsg(attrs))
	}
	return nil
}

// Attributes returns the attributes of keys (nil: all) in scope, sorted by key.
// A device's SERVER_SCOPE holds "active" too, derived from its last activity
// (activity.go).
func (e *Engine) Attributes(ctx context.Context, entityID uuid.UUID, scope storage.Scope, keys []string) ([]kv.Entry, error) {
	if scope != storage.ServerScope {
		return e.store.GetAttributes(ctx, entityID, scope, keys)
	}
	d, err := e.loadDevice(ctx, entityID)
	if errors.Is(err, storage.ErrNotFound) {
		return e.store.GetAttributes(ctx, entityID, scope, keys) // not a device
	}
	if err != nil {
		return nil, err
	}
	read := keys
	if keys != nil {
		read = slices.Clone(keys)
		for _, k := range deviceStateKeys {
			if !slices.Contains(read, k) {
				read = append(read, k)
			}
		}
	}
	attrs, err := e.store.GetAttributes(ctx, entityID, scope, read)
	if err != nil {
		return nil, err
	}
	return e.withActive(d, attrs, keys), nil
}

// DeleteAttributes removes keys from scope. Removed SHARED_SCOPE keys (those that
// existed) are pushed to the device's open long polls as {"deleted":[...]}.
func (e *Engine) DeleteAttributes(ctx context.Context, entityID uuid.UUID, scope storage.Scope, keys []string) error {
	if len(keys) == 0 {
		return Errorf(CodeBadRequestParams, "Empty keys: []")
	}
	deleted, err := e.store.DeleteAttributes(ctx, entityID, scope, keys)
	if err != nil {
		return err
	}
	if scope == storage.SharedScope && len(deleted) > 0 {
		e.publishPush(ctx, sharedTopic(entityID), sharedDeleteBody(inRequestOrder(keys, deleted)))
	}
	return nil
}

// inRequestOrder is the keys of deleted in the order keys asked for them, each
// once: ThingsBoard pushes a deletion with the request's keys.
func inRequestOrder(keys, deleted []string) []string {
	left := make(map[string]bool, len(deleted))
	for _, k := range deleted {
		left[k] = true
	}
	out := make([]string, 0, len(deleted))
	for _, k := range keys {
		if left[k] {
			out = append(out, k)
			delete(left, k)
		}
	}
	return out
}

// AttributeKeys lists the attribute keys of the given scopes, sorted and unique.
func (e *Engine) AttributeKeys(ctx context.Context, entityID uuid.UUID, scopes ...storage.Scope) ([]string, error) {
	seen := make(map[string]struct{})
	var keys []string
	for _, sc := range scopes {
		attrs, err := e.Attributes(ctx, entityID, sc, nil)
		if err != nil {
			return nil, err
		}
		for _, a := range attrs {
			if _, ok := seen[a.Key]; !ok {
				seen[a.Key] = struct{}{}
				keys = append(keys, a.Key)
			}
		}
	}
	sortStrings(keys)
	return keys, nil
}
