package engine

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"strings"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

// APIKeyPrefix starts every API key value (ThingsBoard's security.api_key.value_prefix).
const APIKeyPrefix = "tb_"

// apiKeyRandomBytes is the entropy of a key: 64 bytes, 86 base64url characters.
const apiKeyRandomBytes = 64

var (
	errAPIKeyExpired      = &Error{Code: CodeAuthentication, Msg: "API key is expired"}
	errAPIKeyDescBlank    = &Error{Code: CodeBadRequestParams, Msg: "Validation error: description must not be blank"}
	errAPIKeyBadExpiry    = &Error{Code: CodeBadRequestParams, Msg: "Validation error: expirationTime must not be negative"}
	errAPIKeyUserChange   = &Error{Code: CodeBadRequestParams, Msg: "API key user can't be changed"}
	errAPIKeyExpiryChange = &Error{Code: CodeBadRequestParams, Msg: "API key expiration time can't be changed"}
)

// APIKeyInfo is an API key without its value (compat §7.7). ExpirationTime is unix
// ms, 0 for never; Expired is computed when the key is read.
type APIKeyInfo struct {
	ID             EntityID `json:"id"`
	CreatedTime    int64    `json:"createdTime"`
	TenantID       EntityID `json:"tenantId"`
	UserID         EntityID `json:"userId"`
	ExpirationTime int64    `json:"expirationTime"`
	Description    string   `json:"description"`
	Enabled        bool     `json:"enabled"`
	Expired        bool     `json:"expired"`
}

// APIKeyRequest is the body of POST /api/apiKey: a new key without an ID, or an
// update of the description and the state of the key with that ID (the other
// fields must be the key's own). Enabled may be left out: a new key is then
// enabled, and an update keeps the key's state. ApiKeyInfo's other fields, which
// a client may send back as it read them, are ignored.
type APIKeyRequest struct {
	ID             EntityID `json:"id"`
	UserID         EntityID `json:"userId"`
	ExpirationTime int64    `json:"expirationTime"`
	Description    string   `json:"description"`
	Enabled        *bool    `json:"enabled"`
}

// APIKey is the answer of POST /api/apiKey: Value is set only when the key is
// created, and null afterwards.
type APIKey struct {
	APIKeyInfo
	Value *string `json:"value"`
}

// apiKeyRecord is a stored key: its info and the SHA-256 (hex) of its value.
type apiKeyRecord struct {
	APIKeyInfo
	Hash string `json:"hash"`
}

func (e *Engine) apiKeyInfo(r *apiKeyRecord) *APIKeyInfo {
	info := r.APIKeyInfo
	info.Expired = r.expired(e.now().UnixMilli())
	return &info
}

func (r *apiKeyRecord) expired(nowMs int64) bool {
	return r.ExpirationTime > 0 && nowMs >= r.ExpirationTime
}

// canManageKeysOf: every user manages its own keys, a tenant admin those of the
// users of its tenant, the system administrator those of tenant admins and
// other system administrators (ThingsBoard's SysAdminPermissions: any user
// but a customer's).
func canManageKeysOf(p *Principal, u *User) bool {
	switch {
	case u.ID.ID == p.UserID:
		return true
	case p.Authority == TenantAdmin:
		return u.TenantID.ID == p.TenantID
	case p.Authority == SysAdmin:
		return u.Authority == TenantAdmin || u.Authority == SysAdmin
	}
	return false
}

// keyOwner loads the user whose keys p wants to manage: unknown is 404, out of
// reach 403.
func (e *Engine) keyOwner(ctx context.Context, p *Principal, userID uuid.UUID) (*User, error) {
	if err := requireRole(p, SysAdmin, TenantAdmin, CustomerUser); err != nil {
		return nil, err
	}
	u, err := getRecord[User](ctx, e, kindUser, userID)
	if err != nil {
		return nil, notFound(err)
	}
	if !canManageKeysOf(p, u) {
		return nil, ErrPermissionDenied
	}
	return u, nil
}

// SaveAPIKey creates an API key (zero ID) for in.UserID (the caller when not
// given) and returns it with its value, which is never shown again; only its
// SHA-256 is stored. With an ID it updates the description and enabled flag of an
// existing key (value null); userId and expirationTime cannot change.
func (e *Engine) SaveAPIKey(ctx context.Context, p *Principal, in *APIKeyRequest) (*APIKey, error) {
	if err := requireRole(p, SysAdmin, TenantAdmin, CustomerUser); err != nil {
		return nil, err
	}
	if err := checkAPIKeyDescription(in.Description); err != nil {
		return nil, err
	}
	if in.ID.ID != uuid.Nil {
		info, err := e.updateAPIKey(ctx, p, in.ID.ID, func(r *apiKeyRecord) error {
			if in.UserID.ID != uuid.Nil && in.UserID.ID != r.UserID.ID {
				return errAPIKeyUserChange
			}
			if in.ExpirationTime != r.ExpirationTime {
				return errAPIKeyExpiryChange
			}
			r.Description = in.Description
			if in.Enabled != nil {
				r.Enabled = *in.Enabled
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		return &APIKey{APIKeyInfo: *info}, nil
	}
	// A time already past is accepted, as ThingsBoard's ApiKeyDataValidator
	// does: the key is created expired (expired: true) and refused when used.
	if in.ExpirationTime < 0 {
		return nil, errAPIKeyBadExpiry
	}
	userID := in.UserID.ID
	if userID == uuid.Nil {
		userID = p.UserID
	}
	u, err := e.keyOwner(ctx, p, userID)
	if err != nil {
		return nil, err
	}
	raw := make([]byte, apiKeyRandomBytes)
	rand.Read(raw)
	value := APIKeyPrefix + base64.RawURLEncoding.EncodeToString(raw)
	r := &apiKeyRecord{
		APIKeyInfo: APIKeyInfo{
			ID:             newEntityID(EntityAPIKey, newID()),
			CreatedTime:    e.now().UnixMilli(),
			TenantID:       newEntityID(EntityTenant, orNull(u.TenantID.ID)),
			UserID:         u.ID,
			ExpirationTime: in.ExpirationTime,
			Description:    in.Description,
			Enabled:        in.Enabled == nil || *in.Enabled,
		},
		Hash: sha256Hex(value),
	}
	if err := e.putAPIKey(ctx, r); err != nil {
		return nil, err
	}
	return &APIKey{APIKeyInfo: *e.apiKeyInfo(r), Value: &value}, nil
}

// checkAPIKeyDescription: ThingsBoard's ApiKeyInfo has @NotBlank and @Length
// (255) on the description.
func checkAPIKeyDescription(description string) error {
	if strings.TrimSpace(description) == "" {
		return errAPIKeyDescBlank
	}
	return checkLengths("description", description)
}

// putAPIKey stores a new key and forgets what this node cached of it.
func (e *Engine) putAPIKey(ctx context.Context, r *apiKeyRecord) error {
	err := e.putRecord(ctx, kindAPIKey, r.ID.ID, r.TenantID.ID, r, apiKeyHashKey(r.Hash))
	if err != nil {
		return err
	}
	e.evictAPIKeyEverywhere(r.Hash)
	return nil
}

// apiKeyFor loads a key whose owner p manages, with its stored data:
// unknown is 404, out of reach 403.
func (e *Engine) apiKeyFor(ctx context.Context, p *Principal, id uuid.UUID) (*apiKeyRecord, []byte, error) {
	if err := requireRole(p, SysAdmin, TenantAdmin, CustomerUser); err != nil {
		return nil, nil, err
	}
	r, data, err := loadRecord[apiKeyRecord](ctx, e, kindAPIKey, id)
	if err != nil {
		return nil, nil, notFound(err)
	}
	if _, err := e.keyOwner(ctx, p, r.UserID.ID); err != nil {
		return nil, nil, err
	}
	return r, data, nil
}

// ListAPIKeys returns a page of the keys of a user p manages, without values.
// TextSearch matches the description; sort properties are createdTime,
// expirationTime, description and enabled.
func (e *Engine) ListAPIKeys(ctx context.Context, p *Principal, userID uuid.UUID, pl PageLink) (PageData[*APIKeyInfo], error) {
	u, err := e.keyOwner(ctx, p, userID)
	if err != nil {
		return PageData[*APIKeyInfo]{}, err
	}
	all, err := listRecords[apiKeyRecord](ctx, e, kindAPIKey, orNull(u.TenantID.ID))
	if err != nil {
		return PageData[*APIKeyInfo]{}, err
	}
	var infos []*APIKeyInfo
	for _, r := range all {
		if r.UserID.ID == userID {
			infos = append(infos, e.apiKeyInfo(r))
		}
	}
	return makePage(infos, pl, apiKeyPages)
}

// SetAPIKeyDescription changes the description of a key p manages.
func (e *Engine) SetAPIKeyDescription(ctx context.Context, p *Principal, id uuid.UUID, description string) (*APIKeyInfo, error) {
	if err := checkAPIKeyDescription(description); err != nil {
		return nil, err
	}
	return e.updateAPIKey(ctx, p, id, func(r *apiKeyRecord) error { r.Description = description; return nil })
}

// SetAPIKeyEnabled enables or disables a key p manages; a disabled key is refused
// at once on this node.
func (e *Engine) SetAPIKeyEnabled(ctx context.Context, p *Principal, id uuid.UUID, enabled bool) (*APIKeyInfo, error) {
	return e.updateAPIKey(ctx, p, id, func(r *apiKeyRecord) error { r.Enabled = enabled; return nil })
}

// updateAPIKey applies change to a key p manages and stores it only if no other
// write changed or deleted the key since it was read; else it reads it again
// (a deleted key is 404). So an update from a node that still has the key
// cached as enabled, even one made with the key itself, cannot undo its
// disabling, and none brings a deleted key back.
func (e *Engine) updateAPIKey(ctx context.Context, p *Principal, id uuid.UUID, change func(*apiKeyRecord) error) (*APIKeyInfo, error) {
	for range maxReplaceTries {
		r, prev, err := e.apiKeyFor(ctx, p, id)
		if err != nil {
			return nil, err
		}
		if err := change(r); err != nil {
			return nil, err
		}
		err = e.replaceRecord(ctx, kindAPIKey, r.ID.ID, r.TenantID.ID, prev, r, apiKeyHashKey(r.Hash))
		if errors.Is(err, storage.ErrChanged) {
			continue
		}
		if err != nil {
			return nil, notFound(err)
		}
		e.evictAPIKeyEverywhere(r.Hash)
		return e.apiKeyInfo(r), nil
	}
	return nil, errChangedMeanwhile
}

// DeleteAPIKey deletes a key p manages; it is refused at once on this node.
func (e *Engine) DeleteAPIKey(ctx context.Context, p *Principal, id uuid.UUID) error {
	r, _, err := e.apiKeyFor(ctx, p, id)
	if err != nil {
		return err
	}
	return notFound(e.removeAPIKey(ctx, r))
}

func (e *Engine) removeAPIKey(ctx context.Context, r *apiKeyRecord) error {
	err := e.deleteRecord(ctx, kindAPIKey, r.ID.ID)
	e.evictAPIKeyEverywhere(r.Hash)
	if errors.Is(err, storage.ErrNotFound) {
		return nil
	}
	return err
}

// principalFromAPIKey authenticates an API key value as its owning user (compat
// §7.7): unknown is "Invalid username or password", disabled "User account is not
// active", expired "API key is expired". Keys are found by the SHA-256 of the
// value and the hashes compared in constant time.
func (e *Engine) principalFromAPIKey(ctx context.Context, value string) (*Principal, error) {
	if !strings.HasPrefix(value, APIKeyPrefix) {
		return nil, ErrBadCredentials
	}
	h := sha256Hex(value)
	r, err := e.apiKeys.get(e.now(), h, func() (*apiKeyRecord, error) {
		return lookupRecord[apiKeyRecord](ctx, e, kindAPIKey, apiKeyHashKey(h))
	})
	if err != nil {
		return nil, ifNotFound(err, ErrBadCredentials)
	}
	if subtle.ConstantTimeCompare([]byte(r.Hash), []byte(h)) != 1 {
		return nil, ErrBadCredentials
	}
	if !r.Enabled {
		return nil, errUserNotActive
	}
	if r.expired(e.now().UnixMilli()) {
		return nil, errAPIKeyExpired
	}
	st, err := e.userState(ctx, r.UserID.ID)
	if err != nil {
		return nil, err
	}
	if st.gone {
		return nil, ErrBadCredentials
	}
	if !st.enabled {
		return nil, errUserNotActive
	}
	p := st.principal
	return &p, nil
}
