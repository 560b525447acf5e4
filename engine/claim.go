package engine

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"

	"github.com/bytedance/sonic"
	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// Device claiming (compat §1.8, §3). A device opens a claiming window with a
// secret key (RegisterClaim); a customer user who knows the device's name and
// the key claims it within the window (ClaimDevice) and the device is assigned
// to the user's customer. The window is a "claim" record in storage.Entities, so
// every node sees it; its unique value "device:<id>" makes a second registration
// while one is open a no-op (ThingsBoard's cache putIfAbsent). A tenant may
// instead set the server attribute claimingData {"secretKey","expirationTime"}
// (server-side claiming); the device-side record wins when both exist.

const kindClaim = "claim"

// Server attributes of claiming, named as in ThingsBoard.
const (
	claimingAllowedKey = "claimingAllowed"
	claimingDataKey    = "claimingData"
)

// Outcomes of ClaimDevice (ThingsBoard's ClaimResponse).
const (
	ClaimSuccess = "SUCCESS"
	ClaimFailure = "FAILURE"
	ClaimClaimed = "CLAIMED"
)

// ClaimResult is the outcome of ClaimDevice: Device is set only on ClaimSuccess.
type ClaimResult struct {
	Device   *Device `json:"device"`
	Response string  `json:"response"`
}

var (
	errAlreadyClaimed  = &Error{Code: CodeBadRequestParams, Msg: "Device is already claimed by a customer!"}
	errClaimNotAllowed = &Error{Code: CodeBadRequestParams, Msg: "Claiming is not allowed for this device: the server attribute claimingAllowed is not true"}
)

// claimRecord is an open claiming window. The secret key is kept as its SHA-256
// (hex), never in clear.
type claimRecord struct {
	ID             uuid.UUID `json:"id"`
	DeviceID       uuid.UUID `json:"deviceId"`
	SecretHash     string    `json:"secretHash"`
	ExpirationTime int64     `json:"expirationTime"` // unix ms
}

func claimDeviceKey(device uuid.UUID) string { return "device:" + device.String() }

// secretHash is the SHA-256 of a secret key, in hex.
func secretHash(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// sameSecret compares two secret hashes in constant time. Hashing first keeps
// the length of the secret out of the timing too. "Both empty" is equality.
func sameSecret(hashA, hashB string) bool {
	return subtle.ConstantTimeCompare([]byte(hashA), []byte(hashB)) == 1
}

// RegisterClaim opens a claiming window for dev with secretKey, valid for
// durationMs milliseconds (≤ 0: Config.ClaimDuration). A window still open is kept as it is (a
// second request does not change its key or end); an expired one is replaced.
// An assigned device is errAlreadyClaimed; with Config.ClaimNotByDefault a device
// without the server attribute claimingAllowed=true is errClaimNotAllowed.
func (e *Engine) RegisterClaim(ctx context.Context, dev *Device, secretKey string, durationMs int64) error {
	// Read the device again: the token cache may hold it from before an assignment.
	d, err := e.loadDevice(ctx, dev.UUID())
	if err != nil {
		return ifNotFound(err, errInvalidToken)
	}
	if !isNull(d.CustomerID.ID) {
		return errAlreadyClaimed
	}
	if e.cfg.ClaimNotByDefault {
		allowed, err := e.claimingAllowed(ctx, d.UUID())
		if err != nil {
			return err
		}
		if !allowed {
			return errClaimNotAllowed
		}
	}
	if durationMs <= 0 {
		durationMs = e.cfg.ClaimDuration.Milliseconds()
	}
	now := e.now().UnixMilli()
	rec := claimRecord{ID: newID(), DeviceID: d.UUID(), SecretHash: secretHash(secretKey),
		ExpirationTime: addMillis(now, durationMs)}
	old, err := lookupRecord[claimRecord](ctx, e, kindClaim, claimDeviceKey(d.UUID()))
	switch {
	case err == nil && now <= old.ExpirationTime:
		return nil
	case err == nil:
		if err := e.deleteRecord(ctx, kindClaim, old.ID); err != nil && !errors.Is(err, storage.ErrNotFound) {
			return err
		}
	case !errors.Is(err, storage.ErrNotFound):
		return err
	}
	err = e.putRecord(ctx, kindClaim, rec.ID, d.TenantID(), &rec, claimDeviceKey(d.UUID()))
	if errors.Is(err, storage.ErrConflict) {
		return nil // a concurrent request opened a window first: it stands
	}
	return err
}

// addMillis is now+d, saturating instead of overflowing for absurd durations.
func addMillis(now, d int64) int64 {
	if d > math.MaxInt64-now {
		return math.MaxInt64
	}
	return now + d
}

// claimingAllowed reports whether the server attribute claimingAllowed is the
// boolean true.
func (e *Engine) claimingAllowed(ctx context.Context, device uuid.UUID) (bool, error) {
	attrs, err := e.store.GetAttributes(ctx, device, storage.ServerScope, []string{claimingAllowedKey})
	if err != nil {
		return false, err
	}
	return len(attrs) == 1 && attrs[0].Value.Type == kv.Bool && attrs[0].Value.Bool, nil
}

// errClaimedMeanwhile stops a claim of a device assigned since the claimer
// looked; errNothingToDo a reclaim of a device given back meanwhile.
var (
	errClaimedMeanwhile = errors.New("device assigned meanwhile")
	errNothingToDo      = errors.New("device unassigned meanwhile")
)

// ClaimDevice lets a customer user claim the device of that name in its tenant
// with secretKey. An unknown name is ErrNotFound. The checks run in
// ThingsBoard's order (ClaimDevicesServiceImpl.claimDevice): with no window
// open the result is ClaimClaimed when the device already belongs to a
// customer, else ClaimFailure; with one, an expired window or a key that
// differs is ClaimFailure whoever owns the device (a failed attempt ends a
// device-side window, so a key cannot be guessed by repeated tries); the right
// key on a device a customer has already is ClaimClaimed and removes the
// claiming data as a success does; otherwise the device is assigned to the
// user's customer, the window and the server attributes claimingAllowed and
// claimingData are removed, and the result is ClaimSuccess with the device.
func (e *Engine) ClaimDevice(ctx context.Context, p *Principal, deviceName, secretKey string) (*ClaimResult, error) {
	if err := requireRole(p, CustomerUser); err != nil {
		return nil, err
	}
	d, err := lookupRecord[Device](ctx, e, kindDevice, deviceNameKey(p.TenantID, deviceName))
	if err != nil {
		return nil, notFound(err)
	}
	rec, err := e.claimWindow(ctx, d)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return noClaimWindow(d), nil
	}
	valid := e.now().UnixMilli() <= rec.ExpirationTime && sameSecret(rec.SecretHash, secretHash(secretKey))
	if rec.ID != uuid.Nil {
		// Consuming the record is what makes one claimer win a race: only one
		// Delete finds it. The others come after it, when no window is open.
		err := e.deleteRecord(ctx, kindClaim, rec.ID)
		if errors.Is(err, storage.ErrNotFound) {
			return noClaimWindow(d), nil
		}
		if err != nil {
			return nil, err
		}
	}
	if !valid {
		return &ClaimResult{Response: ClaimFailure}, nil
	}
	if !isNull(d.CustomerID.ID) {
		return e.claimedAlready(ctx, d)
	}
	// Only onto a device still unassigned: a claimingData window is not used
	// up, and a claim or an assignment on another node may have come first.
	claimed, err := e.putDeviceCustomer(ctx, d.ID.ID, newEntityID(EntityCustomer, p.CustomerID), func(d *Device) error {
		if !isNull(d.CustomerID.ID) {
			return errClaimedMeanwhile
		}
		return nil
	})
	if errors.Is(err, errClaimedMeanwhile) {
		return e.claimedAlready(ctx, d)
	}
	if err != nil {
		return nil, notFound(err)
	}
	if err := e.dropClaimingData(ctx, claimed); err != nil {
		return nil, err
	}
	return &ClaimResult{Device: claimed, Response: ClaimSuccess}, nil
}

// noClaimWindow is the answer of a claim of d when no window is open.
func noClaimWindow(d *Device) *ClaimResult {
	if !isNull(d.CustomerID.ID) {
		return &ClaimResult{Response: ClaimClaimed}
	}
	return &ClaimResult{Response: ClaimFailure}
}

// claimedAlready answers the right key for d, which a customer has: the
// claiming data goes as on a success (ThingsBoard's removeClaimingSavedData).
func (e *Engine) claimedAlready(ctx context.Context, d *Device) (*ClaimResult, error) {
	if err := e.dropClaimingData(ctx, d); err != nil {
		return nil, err
	}
	return &ClaimResult{Response: ClaimClaimed}, nil
}

// dropClaimingData deletes the server attributes claimingAllowed and
// claimingData of d, which a claim used.
func (e *Engine) dropClaimingData(ctx context.Context, d *Device) error {
	_, err := e.store.DeleteAttributes(ctx, d.UUID(), storage.ServerScope, []string{claimingAllowedKey, claimingDataKey})
	return err
}

// claimWindow returns the device-side window of d, else the one of its server
// attribute claimingData (with a zero ID), else nil. A claimingData that does
// not parse is no window.
func (e *Engine) claimWindow(ctx context.Context, d *Device) (*claimRecord, error) {
	rec, err := lookupRecord[claimRecord](ctx, e, kindClaim, claimDeviceKey(d.UUID()))
	if err == nil {
		return rec, nil
	}
	if !errors.Is(err, storage.ErrNotFound) {
		return nil, err
	}
	attrs, err := e.store.GetAttributes(ctx, d.UUID(), storage.ServerScope, []string{claimingDataKey})
	if err != nil || len(attrs) == 0 {
		return nil, err
	}
	v := attrs[0].Value
	if v.Type != kv.JSON && v.Type != kv.String {
		return nil, nil
	}
	secret, exp, ok := parseClaimingData(v.Str)
	if !ok {
		// Not the parser's error: it quotes the text, which holds the secret key.
		e.cfg.Logger.Warn("server attribute claimingData is not {\"secretKey\",\"expirationTime\"}; the device cannot be claimed with it",
			"device", d.UUID())
		return nil, nil
	}
	return &claimRecord{DeviceID: d.UUID(), SecretHash: secretHash(secret), ExpirationTime: exp}, nil
}

// parseClaimingData reads claimingData as ThingsBoard's Jackson reads it into
// ClaimData{String secretKey; long expirationTime}: a scalar secretKey is its
// text (a number as written, 123 as "123"), expirationTime a number (a
// fraction dropped) or a string holding an integer, and a null or absent one
// is "" or 0 (expired).
func parseClaimingData(text string) (secret string, exp int64, ok bool) {
	var data struct {
		SecretKey      json.RawMessage `json:"secretKey"`
		ExpirationTime json.RawMessage `json:"expirationTime"`
	}
	if err := sonic.UnmarshalString(text, &data); err != nil {
		return "", 0, false
	}
	if secret, ok = jsonText(data.SecretKey); !ok {
		return "", 0, false
	}
	if exp, ok = jsonLong(data.ExpirationTime); !ok {
		return "", 0, false
	}
	return secret, exp, true
}

// jsonText is a JSON scalar as Jackson reads it into a String: a string's
// value, a number's or a boolean's literal, "" for null or nothing.
func jsonText(raw json.RawMessage) (string, bool) {
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return "", true
	case raw[0] == '"':
		var s string
		err := sonic.Unmarshal(raw, &s)
		return s, err == nil
	case raw[0] == '{' || raw[0] == '[':
		return "", false
	}
	return string(raw), true
}

// jsonLong is a JSON value as Jackson reads it into a long: an integer, a
// number truncated toward zero, a string holding an integer (spaces around
// it allowed), 0 for null, nothing, or a string blank or "null".
func jsonLong(raw json.RawMessage) (int64, bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, true
	}
	if raw[0] == '"' {
		var s string
		if err := sonic.Unmarshal(raw, &s); err != nil {
			return 0, false
		}
		if s = strings.TrimSpace(s); s == "" || s == "null" {
			return 0, true
		}
		n, err := strconv.ParseInt(s, 10, 64)
		return n, err == nil
	}
	if n, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
		return n, true
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || math.IsNaN(f) || f < math.MinInt64 || f >= math.MaxInt64 {
		return 0, false // not a number (true, an object), or past a long
	}
	return int64(f), true
}

// ReclaimDevice gives the device of that name back: it becomes unassigned and
// any open claiming window ends; with Config.ClaimNotByDefault the server
// attribute claimingAllowed is set to true again so it can be claimed anew.
// Tenant admins may reclaim any device of their tenant, customer users only
// their customer's devices. An unassigned device only loses its window.
func (e *Engine) ReclaimDevice(ctx context.Context, p *Principal, deviceName string) error {
	if err := requireRole(p, TenantAdmin, CustomerUser); err != nil {
		return err
	}
	d, err := lookupRecord[Device](ctx, e, kindDevice, deviceNameKey(p.TenantID, deviceName))
	if err != nil {
		return notFound(err)
	}
	if p.Authority == CustomerUser && d.CustomerID.ID != p.CustomerID {
		return ErrPermissionDenied
	}
	if err := e.dropClaim(ctx, d.UUID()); err != nil {
		return err
	}
	if isNull(d.CustomerID.ID) {
		return nil
	}
	_, err = e.putDeviceCustomer(ctx, d.ID.ID, newEntityID(EntityCustomer, NullUUID), func(d *Device) error {
		switch {
		case isNull(d.CustomerID.ID):
			return errNothingToDo // given back meanwhile (a second reclaim): done
		case p.Authority == CustomerUser && d.CustomerID.ID != p.CustomerID:
			return ErrPermissionDenied // reassigned meanwhile: no longer the user's to give back
		}
		return nil
	})
	if errors.Is(err, errNothingToDo) {
		return nil
	}
	if err != nil {
		return notFound(err)
	}
	if !e.cfg.ClaimNotByDefault {
		return nil
	}
	return e.SaveAttributes(ctx, d.UUID(), storage.ServerScope,
		[]kv.Entry{{Key: claimingAllowedKey, Value: kv.BoolValue(true)}})
}

// dropClaim ends the device-side claiming window of a device, if any. Device
// deletion calls it so no window outlives its device.
func (e *Engine) dropClaim(ctx context.Context, device uuid.UUID) error {
	rec, err := lookupRecord[claimRecord](ctx, e, kindClaim, claimDeviceKey(device))
	if errors.Is(err, storage.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := e.deleteRecord(ctx, kindClaim, rec.ID); err != nil && !errors.Is(err, storage.ErrNotFound) {
		return err
	}
	return nil
}
