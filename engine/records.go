package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/bytedance/sonic"
	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

// Record kinds in storage.Entities.
const (
	kindTenant      = "tenant"
	kindCustomer    = "customer"
	kindUser        = "user"
	kindUserCreds   = "userCredentials"
	kindProfile     = "deviceProfile"
	kindDevice      = "device"
	kindCredentials = "credentials"
	kindAPIKey      = "apiKey"
)

// Unique index values. Every name that ThingsBoard keeps unique per tenant carries
// the tenant id, so two tenants may use the same names.
func deviceNameKey(tenant uuid.UUID, name string) string {
	return "name:" + tenant.String() + "/" + name
}
func profileNameKey(tenant uuid.UUID, name string) string {
	return "name:" + tenant.String() + "/" + name
}
func defaultProfileKey(tenant uuid.UUID) string { return "default:" + tenant.String() }
func provisionKeyKey(key string) string         { return "provisionKey:" + key }
func customerTitleKey(tenant uuid.UUID, title string) string {
	return "title:" + tenant.String() + "/" + title
}

// emailKey lower-cases the address: e-mail is how users log in, and Tenant@x and
// tenant@x must not become two accounts.
func emailKey(email string) string           { return "email:" + strings.ToLower(email) }
func tokenKey(token string) string           { return "token:" + token }
func credsDeviceKey(device uuid.UUID) string { return "device:" + device.String() }
func activateTokenKey(hash string) string    { return "activateToken:" + hash }
func apiKeyHashKey(hash string) string       { return "keyhash:" + hash }

// putRecord encodes v and stores it with its unique values. storage.ErrConflict
// comes back wrapped so callers can turn it into the ThingsBoard message.
func (e *Engine) putRecord(ctx context.Context, kind string, id, owner uuid.UUID, v any, unique ...string) error {
	return e.writeRecord(ctx, kind, id, owner, nil, v, unique)
}

// replaceRecord is putRecord on the condition that the stored record still
// holds prev, the data it was read with (loadRecord): storage.ErrChanged when
// another write came between, storage.ErrNotFound when it was deleted.
func (e *Engine) replaceRecord(ctx context.Context, kind string, id, owner uuid.UUID, prev []byte, v any, unique ...string) error {
	return e.writeRecord(ctx, kind, id, owner, &prev, v, unique)
}

// writeRecord encodes v and stores it: with Put, or with Replace over *prev.
func (e *Engine) writeRecord(ctx context.Context, kind string, id, owner uuid.UUID, prev *[]byte, v any, unique []string) error {
	b, err := sonic.Marshal(v)
	if err != nil {
		return fmt.Errorf("cannot encode %s %s: %w", kind, id, err)
	}
	r := storage.Record{Kind: kind, ID: id, Owner: owner, Data: b, Unique: unique}
	if prev == nil {
		err = e.store.Put(ctx, r)
	} else {
		err = e.store.Replace(ctx, r, *prev)
	}
	if err != nil {
		return fmt.Errorf("cannot save %s %s: %w", kind, id, err)
	}
	return nil
}

// maxReplaceTries bounds the reads and replaces of one read-modify-write that
// other writes keep overtaking.
const maxReplaceTries = 8

// errChangedMeanwhile answers a read-modify-write that kept being overtaken.
var errChangedMeanwhile = &Error{Code: CodeVersionConflict, Msg: "The entity was changed by another request meanwhile; retry"}

// changedOrGone maps the errors of a single Replace: overtaken is
// errChangedMeanwhile (409, the caller retries), deleted is ErrNotFound.
func changedOrGone(err error) error {
	if errors.Is(err, storage.ErrChanged) {
		return errChangedMeanwhile
	}
	return notFound(err)
}

func (e *Engine) deleteRecord(ctx context.Context, kind string, id uuid.UUID) error {
	if err := e.store.Delete(ctx, kind, id); err != nil {
		return fmt.Errorf("cannot delete %s %s: %w", kind, id, err)
	}
	return nil
}

// getRecord loads the record of (kind, id); a missing one is storage.ErrNotFound.
func getRecord[T any](ctx context.Context, e *Engine, kind string, id uuid.UUID) (*T, error) {
	v, _, err := loadRecord[T](ctx, e, kind, id)
	return v, err
}

// loadRecord is getRecord that also returns the stored data, for replaceRecord.
func loadRecord[T any](ctx context.Context, e *Engine, kind string, id uuid.UUID) (*T, []byte, error) {
	r, err := e.store.Get(ctx, kind, id)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot load %s %s: %w", kind, id, err)
	}
	v, err := decodeRecord[T](r)
	return v, r.Data, err
}

// lookupRecord loads the record holding the unique value; a missing one is storage.ErrNotFound.
func lookupRecord[T any](ctx context.Context, e *Engine, kind, unique string) (*T, error) {
	v, _, err := lookupLoad[T](ctx, e, kind, unique)
	return v, err
}

// lookupLoad is lookupRecord that also returns the stored data, for replaceRecord.
func lookupLoad[T any](ctx context.Context, e *Engine, kind, unique string) (*T, []byte, error) {
	r, err := e.store.Lookup(ctx, kind, unique)
	if err != nil {
		// The unique value may hold a token or an e-mail: keep it out of the error.
		return nil, nil, fmt.Errorf("cannot look up %s: %w", kind, err)
	}
	v, err := decodeRecord[T](r)
	return v, r.Data, err
}

// listRecords loads every record of kind owned by owner.
func listRecords[T any](ctx context.Context, e *Engine, kind string, owner uuid.UUID) ([]*T, error) {
	rs, err := e.store.List(ctx, kind, owner)
	if err != nil {
		return nil, fmt.Errorf("cannot list %s of %s: %w", kind, owner, err)
	}
	out := make([]*T, 0, len(rs))
	for _, r := range rs {
		v, err := decodeRecord[T](r)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func decodeRecord[T any](r storage.Record) (*T, error) {
	v := new(T)
	if err := sonic.Unmarshal(r.Data, v); err != nil {
		return nil, fmt.Errorf("cannot decode %s %s: %w", r.Kind, r.ID, err)
	}
	return v, nil
}

// fmtConflict is a unique-value clash that no ThingsBoard message describes.
func fmtConflict(kind string, id uuid.UUID) error {
	return fmt.Errorf("%s %s: %w", kind, id, storage.ErrConflict)
}
