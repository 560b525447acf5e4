package engine

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// Server-side RPC (compat §1.5, §1.6, §2). Every RPC, lightweight or persistent,
// is a record of kind "rpc", so a device polling any node finds what a REST call
// on any other node queued. A record is owned by its device while a poll may
// still have to look at it: a queued persistent RPC, any lightweight one (its
// call removes it). A persistent RPC that left the queue (delivered, answered,
// expired) moves to the device's "done" owner (rpcDoneOwner), so a poll lists
// what is pending, never the device's history (ThingsBoard's device actor
// likewise holds only pending RPCs). Nodes tell each other about changes
// through the notifier, never by waiting on storage:
//
//   - "rpcqueued:<device>": an RPC was queued; open polls of the device list again.
//   - "rpcdone:<rpc id>": a lightweight RPC was delivered or answered; the REST call
//     waiting for it reads its record.
//
// Timeouts are not written: a two-way record past its expirationTime reads as
// EXPIRED, so no timer on any node races with a device's reply. (A poll that
// meets a queued persistent RPC past expiry writes it EXPIRED, over the version
// it read, only to move it out of the queue.)
const (
	kindRPC      = "rpc"
	kindRPCClaim = "rpcClaim" // the unique "sent:<rpc id>": one poll delivers an RPC
	kindRPCSeq   = "rpcSeq"   // per device: the next integer request id
	kindRPCID    = "rpcId"    // the unique "rpc:<rpc id>": a caller's requestUUID names one RPC

	rpcQueuedTopicPrefix = "rpcqueued:"
	rpcDoneTopicPrefix   = "rpcdone:"
)

// EntityRPC is the entity type of persistent RPC ids.
const EntityRPC = "RPC"

// RPC statuses (ThingsBoard's RpcStatus). Sluice never stores SENT (an HTTP poll
// is delivered when it is answered) and deletes a record instead of marking it
// DELETED; as over ThingsBoard's HTTP transport, TIMEOUT never happens (a
// delivered two-way RPC that is not answered in time is EXPIRED).
const (
	RPCQueued     = "QUEUED"
	RPCSent       = "SENT"
	RPCDelivered  = "DELIVERED"
	RPCSuccessful = "SUCCESSFUL"
	RPCTimeout    = "TIMEOUT"
	RPCExpired    = "EXPIRED"
	RPCFailed     = "FAILED"
	RPCDeleted    = "DELETED"
)

var rpcStatuses = []string{RPCQueued, RPCSent, RPCDelivered, RPCSuccessful, RPCTimeout, RPCExpired, RPCFailed, RPCDeleted}

const (
	// rpcReplyGrace is how long after expiry a REST call still waits before it
	// reads the outcome, so a reply accepted just before expiry on another node
	// is not missed (ThingsBoard adds the same 1 s).
	rpcReplyGrace = time.Second
	// rpcKeep is how long after expiry the record of a lightweight RPC whose REST
	// call is gone (its node stopped) stays before a poll of the device removes it.
	rpcKeep = time.Minute
)

var errRPCNoMethod = &Error{Code: CodeBadRequestParams, Msg: "Invalid request body: 'method' is required"}

func rpcReqKey(device uuid.UUID, reqID int64) string {
	return "reqid:" + device.String() + "/" + strconv.FormatInt(reqID, 10)
}
func rpcClaimKey(rpc uuid.UUID) string              { return "sent:" + rpc.String() }
func rpcIDKey(rpc uuid.UUID) string                 { return "rpc:" + rpc.String() }
func rpcQueuedTopic(device uuid.UUID) string        { return rpcQueuedTopicPrefix + device.String() }
func rpcDoneTopic(rpc uuid.UUID) string             { return rpcDoneTopicPrefix + rpc.String() }
func (e *Engine) rpcLock(dev uuid.UUID) *sync.Mutex { return &e.rpcLocks[int(dev[15])%len(e.rpcLocks)] }

// rpcDoneSpace derives the done owners of devices from their ids.
var rpcDoneSpace = uuid.MustParse("5b0f3c1e-8d2a-4c55-9f1e-7a3d2b6c9e01")

// rpcDoneOwner owns a device's persistent RPCs that left its queue. It is a
// name-based UUID of the device id, so every node finds it and it is no
// entity's id.
func rpcDoneOwner(device uuid.UUID) uuid.UUID { return uuid.NewSHA1(rpcDoneSpace, device[:]) }

// rpcLocks serialise request id allocation per device on this node (striped).
type rpcLocks [64]sync.Mutex

// maxRPCWait is the longest a call waits for its device: the cap of a timeout,
// and of the expirationTime of an RPC that is not persistent, whose REST call
// holds a connection and a goroutine until then.
const maxRPCWait = 24 * time.Hour

// RPCRequest is the body of a REST server-side RPC call (compat §2).
type RPCRequest struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	// Timeout (ms) applies when ExpirationTime (epoch ms) is absent or 0. Both
	// end at most maxRPCWait from now, unless the RPC is persistent (its call
	// does not wait).
	Timeout        *int64          `json:"timeout"`
	ExpirationTime *int64          `json:"expirationTime"`
	Persistent     bool            `json:"persistent"`
	Retries        *int            `json:"retries"`
	AdditionalInfo json.RawMessage `json:"additionalInfo"`
	// ID is the RPC id the caller chose (ThingsBoard's requestUUID); uuid.Nil
	// gets a new one.
	ID uuid.UUID `json:"-"`
}

// rpcRecord is the stored form of an RPC.
type rpcRecord struct {
	ID             uuid.UUID       `json:"id"`
	CreatedTime    int64           `json:"createdTime"`
	TenantID       uuid.UUID       `json:"tenantId"`
	DeviceID       uuid.UUID       `json:"deviceId"`
	ReqID          int64           `json:"reqId"`
	Oneway         bool            `json:"oneway"`
	Persistent     bool            `json:"persistent"`
	ExpirationTime int64           `json:"expirationTime"`
	Method         string          `json:"method"`
	Params         json.RawMessage `json:"params"`
	Retries        *int            `json:"retries,omitempty"`
	AdditionalInfo json.RawMessage `json:"additionalInfo,omitempty"`
	Status         string          `json:"status"`
	// Reply is the device's reply body as it came (any bytes; SUCCESSFUL or FAILED).
	Reply []byte `json:"reply,omitempty"`
	// ClaimID is the rpcClaim record of the poll that delivered it.
	ClaimID uuid.UUID `json:"claimId"`
	// IDClaim is the rpcId record that reserves a caller-chosen id.
	IDClaim uuid.UUID `json:"idClaim,omitzero"`
}

// owner is where r is listed: its device while a poll may have to look at it,
// the device's done owner once a persistent RPC left the queue.
func (r *rpcRecord) owner() uuid.UUID {
	if r.Persistent && r.Status != RPCQueued {
		return rpcDoneOwner(r.DeviceID)
	}
	return r.DeviceID
}

// status is the status as of now (ms). Past its expiry an RPC still queued or
// delivered and not answered is EXPIRED, as ThingsBoard's
// processServerSideRpcTimeout saves it either way; a one-way RPC is done once
// delivered, so it stays DELIVERED.
func (r *rpcRecord) status(now int64) string {
	if now < r.ExpirationTime {
		return r.Status
	}
	switch r.Status {
	case RPCQueued:
		return RPCExpired
	case RPCSent, RPCDelivered:
		if r.Oneway {
			return r.Status
		}
		return RPCExpired
	}
	return r.Status
}

// RPC is a persistent RPC as GET /api/rpc/persistent/{rpcId} answers it
// (ThingsBoard's Rpc).
type RPC struct {
	ID             EntityID        `json:"id"`
	CreatedTime    int64           `json:"createdTime"`
	TenantID       EntityID        `json:"tenantId"`
	DeviceID       EntityID        `json:"deviceId"`
	ExpirationTime int64           `json:"expirationTime"`
	Request        RPCRequestInfo  `json:"request"`
	Response       json.RawMessage `json:"response"`
	Status         string          `json:"status"`
	AdditionalInfo json.RawMessage `json:"additionalInfo"`
}

// RPCRequestInfo is the request of an RPC (ThingsBoard's ToDeviceRpcRequest,
// whose additionalInfo is @JsonIgnore: only the RPC's own is shown).
type RPCRequestInfo struct {
	ID             uuid.UUID `json:"id"`
	TenantID       EntityID  `json:"tenantId"`
	DeviceID       EntityID  `json:"deviceId"`
	Oneway         bool      `json:"oneway"`
	ExpirationTime int64     `json:"expirationTime"`
	Body           RPCBody   `json:"body"`
	Persisted      bool      `json:"persisted"`
	Retries        *int      `json:"retries"`
}

// RPCBody is the method and its parameters; Params is JSON text, as ThingsBoard
// keeps it.
type RPCBody struct {
	Method string `json:"method"`
	Params string `json:"params"`
}

func (r *rpcRecord) view(now int64) *RPC {
	tenant, device := newEntityID(EntityTenant, r.TenantID), newEntityID(EntityDevice, r.DeviceID)
	v := &RPC{
		ID: newEntityID(EntityRPC, r.ID), CreatedTime: r.CreatedTime, TenantID: tenant, DeviceID: device,
		ExpirationTime: r.ExpirationTime, Status: r.status(now), AdditionalInfo: r.AdditionalInfo,
		Request: RPCRequestInfo{
			ID: r.ID, TenantID: tenant, DeviceID: device, Oneway: r.Oneway, ExpirationTime: r.ExpirationTime,
			Body: RPCBody{Method: r.Method, Params: string(r.Params)}, Persisted: r.Persistent,
			Retries: r.Retries,
		},
	}
	// A reply that is not JSON is shown as {"error":"<text>"}, as ThingsBoard's
	// processRpcResponses saves it (its status stays SUCCESSFUL; FAILED comes
	// from records of earlier Sluice versions).
	if len(r.Reply) > 0 {
		v.Response = r.Reply
		if !json.Valid(r.Reply) {
			v.Response, _ = json.Marshal(map[string]string{"error": string(r.Reply)})
		}
	}
	return v
}

// RPCOutcome says how a REST RPC call ended.
type RPCOutcome uint8

const (
	// RPCPersisted: a persistent RPC was stored; RPCResult.ID names it.
	RPCPersisted RPCOutcome = iota
	// RPCDone: a one-way RPC was delivered, or a two-way one answered with
	// RPCResult.Reply (JSON, or empty).
	RPCDone
	// RPCBadReply: the device answered with something that is not JSON.
	RPCBadReply
	// RPCNotDelivered: no poll of the device took the RPC before it expired.
	RPCNotDelivered
	// RPCNoReply: the device took a two-way RPC and did not answer in time.
	RPCNoReply
)

// RPCResult is the outcome of CallRPC.
type RPCResult struct {
	Outcome RPCOutcome
	ID      uuid.UUID
	Reply   []byte
}

// rpcDevice is the device p sends RPCs to or lists them of; a missing one is
// "Device with requested id wasn't found!", as ThingsBoard's AccessValidator
// answers on its RPC routes.
func (e *Engine) rpcDevice(ctx context.Context, p *Principal, deviceID uuid.UUID) (*Device, error) {
	dev, err := e.GetDevice(ctx, p, deviceID)
	if err == ErrNotFound {
		return nil, errDeviceIDNotFound
	}
	return dev, err
}

// CallRPC sends an RPC to a device p may see (tenant admin: its tenant's;
// customer user: its customer's; another tenant's is 403 as GetDevice answers).
// The RPC expires at req.ExpirationTime when given (> 0), else after
// max(RPCMinTimeout, req.Timeout or RPCDefaultTimeout). A persistent RPC is
// stored and RPCPersisted returned at once. Otherwise CallRPC waits for the
// outcome: a one-way RPC until a poll of the device takes it, a two-way one
// until the device answers, each at most until expiry (plus rpcReplyGrace).
// ctx ending ends the wait with ctx.Err() and drops the RPC; once the RPC is
// queued, storage calls no longer depend on ctx.
func (e *Engine) CallRPC(ctx context.Context, p *Principal, deviceID uuid.UUID, oneway bool, req *RPCRequest) (RPCResult, error) {
	dev, err := e.rpcDevice(ctx, p, deviceID)
	if err != nil {
		return RPCResult{}, err
	}
	r, err := e.newRPC(dev, oneway, req)
	if err != nil {
		return RPCResult{}, err
	}
	store := context.WithoutCancel(ctx)
	if r.Persistent {
		if r.ExpirationTime <= e.now().UnixMilli() {
			// Expired before it was queued: saved EXPIRED, as ThingsBoard's
			// processRpcRequest does, and never listed by a poll.
			r.Status = RPCExpired
		}
		if err := e.queueRPC(store, r, req.ID != uuid.Nil); err != nil {
			return RPCResult{}, err
		}
		return RPCResult{Outcome: RPCPersisted, ID: r.ID}, nil
	}

	// Subscribed before the RPC exists, so its delivery or reply is never missed;
	// and a resubscribe from then on, which may have lost it, is seen.
	lost := e.resync.wait()
	done := make(chan struct{}, 1)
	cancel := e.cfg.Notifier.Subscribe(rpcDoneTopic(r.ID), func([]byte) {
		select {
		case done <- struct{}{}:
		default:
		}
	})
	defer cancel()
	if err := e.queueRPC(store, r, req.ID != uuid.Nil); err != nil {
		return RPCResult{}, err
	}
	// A lightweight RPC lives as long as its call: whatever the outcome, it goes.
	defer e.removeRPC(store, r.ID)

	t := time.NewTimer(time.UnixMilli(r.ExpirationTime).Add(rpcReplyGrace).Sub(e.now()))
	defer t.Stop()
	for {
		select {
		case <-done:
			if res, final, err := e.rpcOutcome(store, r.ID, false); err != nil || final {
				return res, err
			}
		case <-lost: // the notifier resubscribed: the outcome may have come meanwhile
			lost = e.resync.wait()
			if res, final, err := e.rpcOutcome(store, r.ID, false); err != nil || final {
				return res, err
			}
		case <-t.C:
			res, _, err := e.rpcOutcome(store, r.ID, true)
			return res, err
		case <-ctx.Done():
			return RPCResult{}, ctx.Err()
		}
	}
}

// newRPC builds the record of a new RPC to dev.
func (e *Engine) newRPC(dev *Device, oneway bool, req *RPCRequest) (*rpcRecord, error) {
	if strings.TrimSpace(req.Method) == "" {
		return nil, errRPCNoMethod
	}
	params := []byte("{}")
	if len(req.Params) > 0 {
		var buf bytes.Buffer
		if err := json.Compact(&buf, req.Params); err != nil {
			return nil, Errorf(CodeBadRequestParams, "Invalid request body")
		}
		params = buf.Bytes()
	}
	now := e.now()
	exp := int64(0)
	if req.ExpirationTime != nil {
		exp = *req.ExpirationTime
	}
	if exp <= 0 {
		timeout := e.cfg.RPCDefaultTimeout
		if req.Timeout != nil {
			// Clamped first: a huge negative timeout would overflow the Duration.
			timeout = time.Duration(min(max(*req.Timeout, 0), int64(maxRPCWait/time.Millisecond))) * time.Millisecond
		}
		exp = now.Add(max(e.cfg.RPCMinTimeout, timeout)).UnixMilli()
	}
	if !req.Persistent {
		exp = min(exp, now.Add(maxRPCWait).UnixMilli())
	}
	info := req.AdditionalInfo
	if string(info) == "null" {
		info = nil
	}
	id := req.ID
	if id == uuid.Nil {
		id = newID()
	}
	return &rpcRecord{
		ID: id, CreatedTime: now.UnixMilli(), TenantID: dev.TenantID(), DeviceID: dev.UUID(),
		Oneway: oneway, Persistent: req.Persistent, ExpirationTime: exp,
		Method: req.Method, Params: params, Retries: req.Retries, AdditionalInfo: info, Status: RPCQueued,
	}, nil
}

type rpcSeq struct {
	Next int64 `json:"next"`
}

// queueRPC stores a new RPC with the device's next request id and wakes the
// device's polls on every node. The ids of a device increase: this node
// allocates them one at a time per device, and the unique index "reqid:" keeps
// two nodes from ever handing out the same id to two live RPCs. An RPC id the
// caller chose (chosenID) is reserved first, so it never replaces another RPC.
func (e *Engine) queueRPC(ctx context.Context, r *rpcRecord, chosenID bool) (err error) {
	if chosenID {
		if err := e.reserveRPCID(ctx, r); err != nil {
			return err
		}
		defer func() {
			if err != nil {
				e.releaseRPCID(ctx, r)
			}
		}()
	}
	mu := e.rpcLock(r.DeviceID)
	mu.Lock()
	defer mu.Unlock()
	next := int64(0)
	switch seq, err := getRecord[rpcSeq](ctx, e, kindRPCSeq, r.DeviceID); {
	case err == nil:
		next = seq.Next
	case !errors.Is(err, storage.ErrNotFound):
		return err
	}
	for tries := 0; ; tries++ {
		r.ReqID = next
		err := e.putRPC(ctx, r)
		if err == nil {
			break
		}
		if !errors.Is(err, storage.ErrConflict) || tries >= 1000 {
			return err
		}
		next++ // taken by an RPC queued on another node meanwhile
	}
	if err := e.advanceRPCSeq(ctx, r.DeviceID, r.ReqID); err != nil {
		// The RPC is queued; the unique index still keeps the next id from clashing.
		e.cfg.Logger.Warn("cannot advance the RPC request id", "device", r.DeviceID, "err", err)
	}
	if r.Status == RPCQueued {
		e.publishPush(ctx, rpcQueuedTopic(r.DeviceID), []byte(r.ID.String()))
	}
	return nil
}

// errRPCIDTaken answers a requestUUID that names an RPC already stored.
// ThingsBoard's save would merge over that RPC (JPA update by id); Sluice
// refuses, as a database insert would (400).
func errRPCIDTaken(id uuid.UUID) error {
	return Errorf(CodeBadRequestParams, "Invalid request body: requestUUID %s is the id of another RPC", id)
}

// reserveRPCID takes the unique "rpc:<id>" for an RPC id the caller chose, and
// checks that no RPC has it yet. Put would replace an RPC stored under the
// same id, so the reservation (a record of its own, unique on the id) is what
// keeps two calls with one requestUUID from both storing it; the check covers
// RPCs with ids of Sluice's own, which hold no reservation.
func (e *Engine) reserveRPCID(ctx context.Context, r *rpcRecord) error {
	claim := newID()
	err := e.putRecord(ctx, kindRPCID, claim, r.DeviceID, rpcClaim{RPC: r.ID, At: e.now().UnixMilli()}, rpcIDKey(r.ID))
	if errors.Is(err, storage.ErrConflict) {
		return errRPCIDTaken(r.ID)
	}
	if err != nil {
		return err
	}
	r.IDClaim = claim
	switch _, err := e.store.Get(ctx, kindRPC, r.ID); {
	case err == nil:
		e.releaseRPCID(ctx, r)
		return errRPCIDTaken(r.ID)
	case !errors.Is(err, storage.ErrNotFound):
		e.releaseRPCID(ctx, r)
		return fmt.Errorf("cannot check RPC id %s: %w", r.ID, err)
	}
	return nil
}

// releaseRPCID deletes r's id reservation, if any (best effort: one left
// behind only keeps that id from being chosen again).
func (e *Engine) releaseRPCID(ctx context.Context, r *rpcRecord) {
	if r.IDClaim == uuid.Nil {
		return
	}
	if err := e.deleteRecord(ctx, kindRPCID, r.IDClaim); err != nil && !errors.Is(err, storage.ErrNotFound) {
		e.cfg.Logger.Warn("cannot release an RPC id", "rpc", r.ID, "err", err)
	}
	r.IDClaim = uuid.Nil
}

// advanceRPCSeq moves the device's next request id past reqID, never back: a
// node that took a lower id and writes last must not undo another node's
// advance, or an id would be handed out again once its RPC is gone.
func (e *Engine) advanceRPCSeq(ctx context.Context, device uuid.UUID, reqID int64) error {
	for range maxReplaceTries {
		seq, prev, err := loadRecord[rpcSeq](ctx, e, kindRPCSeq, device)
		switch {
		case errors.Is(err, storage.ErrNotFound):
			return e.putRecord(ctx, kindRPCSeq, device, device, rpcSeq{Next: reqID + 1})
		case err != nil:
			return err
		case seq.Next > reqID:
			return nil
		}
		err = e.replaceRecord(ctx, kindRPCSeq, device, device, prev, rpcSeq{Next: reqID + 1})
		if !errors.Is(err, storage.ErrChanged) {
			return err
		}
	}
	return errChangedMeanwhile
}

func (e *Engine) putRPC(ctx context.Context, r *rpcRecord) error {
	return e.putRecord(ctx, kindRPC, r.ID, r.owner(), r, rpcReqKey(r.DeviceID, r.ReqID))
}

// replaceRPC stores r over the version read as prev: storage.ErrChanged when
// another node changed it meanwhile, storage.ErrNotFound when it was deleted (a
// deleted or expired RPC is never written back, so never delivered after that).
// The write moves it to the owner its new status calls for (rpcRecord.owner).
func (e *Engine) replaceRPC(ctx context.Context, r *rpcRecord, prev []byte) error {
	return e.replaceRecord(ctx, kindRPC, r.ID, r.owner(), prev, r, rpcReqKey(r.DeviceID, r.ReqID))
}

// rpcOutcome reads the outcome of a lightweight RPC; final is false while the
// RPC may still be delivered or answered. At the deadline every outcome is final.
func (e *Engine) rpcOutcome(ctx context.Context, id uuid.UUID, deadline bool) (res RPCResult, final bool, err error) {
	r, err := getRecord[rpcRecord](ctx, e, kindRPC, id)
	if errors.Is(err, storage.ErrNotFound) { // its device was deleted
		return RPCResult{Outcome: RPCNotDelivered}, true, nil
	}
	if err != nil {
		return RPCResult{}, true, err
	}
	switch r.Status {
	case RPCSuccessful:
		return RPCResult{Outcome: RPCDone, Reply: r.Reply}, true, nil
	case RPCFailed:
		return RPCResult{Outcome: RPCBadReply}, true, nil
	case RPCSent, RPCDelivered:
		return RPCResult{Outcome: RPCNoReply}, deadline, nil
	}
	return RPCResult{Outcome: RPCNotDelivered}, deadline, nil
}

// removeRPC deletes an RPC and the claim of its delivery. Best effort: a record
// left behind is removed by a later poll of the device (rpcKeep).
func (e *Engine) removeRPC(ctx context.Context, id uuid.UUID) {
	r, err := getRecord[rpcRecord](ctx, e, kindRPC, id)
	if err == nil {
		err = e.deleteRPC(ctx, r)
	}
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		e.cfg.Logger.Warn("cannot remove an RPC", "rpc", id, "err", err)
	}
}

// deleteRPC removes the record first and its delivery claim after it: while the
// claim exists no poll can take the RPC, and once it is gone a poll that listed
// the RPC earlier finds the record missing (takeRPC re-reads after claiming).
// The reservation of a caller-chosen id goes last, once no RPC has the id.
func (e *Engine) deleteRPC(ctx context.Context, r *rpcRecord) error {
	err := e.deleteRecord(ctx, kindRPC, r.ID)
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		return err
	}
	for _, c := range []struct {
		kind string
		id   uuid.UUID
	}{{kindRPCClaim, r.ClaimID}, {kindRPCID, r.IDClaim}} {
		if c.id == uuid.Nil {
			continue
		}
		if err := e.deleteRecord(ctx, c.kind, c.id); err != nil && !errors.Is(err, storage.ErrNotFound) {
			return err
		}
	}
	return err
}

// WaitRPC is the device's RPC poll (compat §1.5): it answers the device's oldest
// pending RPC at once, or waits up to timeout for one to be queued on any node.
// The body is {"id":n,"method":"…","params":…} and ok is true; ok is false when
// timeout passed first, or when the device's credentials changed (token, the one
// the poll came with, may be revoked). A deletion of the device is ErrDeviceDeleted; ctx ending
// is ctx.Err(); a client gone (WithClient) before an RPC is taken is
// ErrClientGone; a poll past a long-poll cap is a *LimitError at once (see
// admitPoll). The wait holds notifier subscriptions only, no storage connection.
func (e *Engine) WaitRPC(ctx context.Context, deviceID uuid.UUID, token string, timeout time.Duration) (body []byte, ok bool, err error) {
	release, err := e.admitPoll(deviceID)
	if err != nil {
		return nil, false, err
	}
	defer release()
	wake := make(chan struct{}, 1)
	// Subscribed before the first look, so an RPC queued after it is never missed.
	cancel := e.cfg.Notifier.Subscribe(rpcQueuedTopic(deviceID), func([]byte) {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	defer cancel()
	gone, cancelGone := e.deviceGone(deviceID)
	defer cancelGone()

	store := context.WithoutCancel(ctx)
	t := time.NewTimer(timeout)
	defer t.Stop()
	look := true // at the first pass, and after a resync
	for {
		lost := e.resync.wait()
		if !clientThere(ctx) {
			return nil, false, ErrClientGone
		}
		// A device deleted, or given new credentials, since the caller checked
		// its token and before the subscriptions above, or in a resync's gap,
		// would not be heard of again: its poll would hand the next RPC to a
		// revoked token. A token cache hit costs no storage read.
		if look {
			switch err := e.pollerCurrent(store, deviceID, token); {
			case err == errSessionClosed:
				return nil, false, nil // 408, as for a change heard of
			case err != nil:
				return nil, false, err
			}
		}
		look = false
		body, err := e.takeRPC(store, deviceID)
		if err != nil || body != nil {
			return body, body != nil, err
		}
		select {
		case <-wake:
		case <-lost: // the notifier resubscribed: an RPC may have been queued meanwhile
			look = true
			if !e.resyncPause(ctx, t.C) {
				return nil, false, ctx.Err() // nil: the timeout, during the pause
			}
		case why := <-gone:
			if why == deviceDeleted {
				return nil, false, ErrDeviceDeleted
			}
			return nil, false, nil // credentialsChanged: 408, as ThingsBoard
		case <-t.C:
			return nil, false, nil
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
}

// takeRPC delivers the device's pending RPC with the lowest request id, if any:
// it claims it (so one poll on one node delivers it), records it DELIVERED (a
// lightweight one-way RPC SUCCESSFUL: its call is done) and returns the body
// for the device. It lists only the records the device owns, so what it reads
// grows with the device's pending RPCs, not with its history. On the way it
// removes lightweight records long past expiry, whose REST call is gone, and
// moves persistent ones that can no longer be delivered to the done owner.
func (e *Engine) takeRPC(ctx context.Context, deviceID uuid.UUID) ([]byte, error) {
	all, prevs, err := e.listRPCs(ctx, deviceID)
	if err != nil {
		return nil, err
	}
	all = e.pruneRPCs(ctx, all)
	slices.SortFunc(all, func(a, b *rpcRecord) int { return cmp.Compare(a.ReqID, b.ReqID) })
	now := e.now().UnixMilli()
	retired := 0
	for _, r := range all {
		switch {
		case !r.Persistent && now > r.ExpirationTime+rpcKeep.Milliseconds():
			if err := e.deleteRPC(ctx, r); err != nil && !errors.Is(err, storage.ErrNotFound) {
				e.cfg.Logger.Warn("cannot remove an expired RPC", "rpc", r.ID, "err", err)
			}
			continue
		case r.Persistent && (r.Status != RPCQueued || now >= r.ExpirationTime):
			if retired < maxRetirePerPoll {
				e.retireRPC(ctx, r, prevs[r.ID], now)
				retired++
			}
			continue
		case r.Status != RPCQueued || now >= r.ExpirationTime:
			continue // a lightweight RPC its call still waits for
		}
		claimed, err := e.claimRPC(ctx, r)
		if err != nil {
			return nil, err
		}
		if !claimed {
			continue // another poll took it
		}
		// The listing may be stale: the RPC may have been delivered, answered and
		// removed (claim last) since. Only a record still queued is ours to send.
		release := func() {
			if derr := e.deleteRecord(ctx, kindRPCClaim, r.ClaimID); derr != nil && !errors.Is(derr, storage.ErrNotFound) {
				e.cfg.Logger.Warn("cannot release an RPC claim", "rpc", r.ID, "err", derr)
			}
		}
		cur, prev, err := loadRecord[rpcRecord](ctx, e, kindRPC, r.ID)
		if err != nil || cur.Status != RPCQueued {
			release()
			if err != nil && !errors.Is(err, storage.ErrNotFound) {
				return nil, err
			}
			continue
		}
		cur.ClaimID = r.ClaimID
		r = cur
		r.Status = RPCDelivered
		if r.Oneway && !r.Persistent {
			r.Status = RPCSuccessful
		}
		// Over the version read: an RPC deleted, or delivered by a poll that
		// took over a stale claim, meanwhile is not delivered (again).
		if err := e.replaceRPC(ctx, r, prev); err != nil {
			// Still queued, or gone: released, a later poll can take it. Kept,
			// no poll could until the claim went stale.
			release()
			if errors.Is(err, storage.ErrChanged) || errors.Is(err, storage.ErrNotFound) {
				continue
			}
			return nil, err
		}
		if r.Oneway && !r.Persistent {
			e.publishPush(ctx, rpcDoneTopic(r.ID), nil)
		}
		return deviceRPCBody(r), nil
	}
	return nil, nil
}

// maxRetirePerPoll bounds the writes one poll spends moving RPCs out of the
// queue, so a device back after a long time (many RPCs expired unpolled) or the
// first poll after an upgrade (every RPC still with its device) is not held for
// seconds; the polls after it move the rest.
const maxRetirePerPoll = 100

// listRPCs lists the RPC records owner owns, with the data each was read with.
func (e *Engine) listRPCs(ctx context.Context, owner uuid.UUID) ([]*rpcRecord, map[uuid.UUID][]byte, error) {
	rs, err := e.store.List(ctx, kindRPC, owner)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot list %s of %s: %w", kindRPC, owner, err)
	}
	out := make([]*rpcRecord, 0, len(rs))
	prevs := make(map[uuid.UUID][]byte, len(rs))
	for _, rec := range rs {
		r, err := decodeRecord[rpcRecord](rec)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, r)
		prevs[r.ID] = rec.Data
	}
	return out, prevs, nil
}

// retireRPC moves a persistent RPC that no poll will deliver out of its
// device's queue, over the version a poll listed (prev): one queued past its
// expiry is written EXPIRED (what it reads as anyway); one no longer queued is
// a record of an earlier Sluice version, which kept every RPC with its device,
// and only changes owner. Best effort: when the write fails (another node
// changed the RPC meanwhile, or storage), a later poll finds it again.
func (e *Engine) retireRPC(ctx context.Context, r *rpcRecord, prev []byte, now int64) {
	if r.Status == RPCQueued && now >= r.ExpirationTime {
		r.Status = RPCExpired
	}
	err := e.replaceRPC(ctx, r, prev)
	if err != nil && !errors.Is(err, storage.ErrChanged) && !errors.Is(err, storage.ErrNotFound) {
		e.cfg.Logger.Warn("cannot move a finished RPC out of its device's queue", "rpc", r.ID, "err", err)
	}
}

// rpcClaim is the record of a poll's claim to deliver an RPC.
type rpcClaim struct {
	RPC uuid.UUID `json:"rpc"`
	// At is when it was taken (ms); 0 in claims of earlier versions, which
	// are never taken over.
	At int64 `json:"at,omitempty"`
}

// rpcClaimStale is how old a claim of an RPC still queued may be before
// another poll takes it over: its poll took it and then failed to write the
// RPC delivered and to release it (its node was killed, or lost storage). A
// delivery takes milliseconds, and the RPC record's compare-and-set keeps two
// polls from both delivering even if a slow one comes back.
const rpcClaimStale = 30 * time.Second

// claimRPC takes the unique "sent:<rpc>" for a new claim record; false when
// another poll holds it. A stale claim is removed and taken over.
func (e *Engine) claimRPC(ctx context.Context, r *rpcRecord) (bool, error) {
	for range 2 {
		id := newID()
		now := e.now()
		err := e.putRecord(ctx, kindRPCClaim, id, r.DeviceID, rpcClaim{RPC: r.ID, At: now.UnixMilli()}, rpcClaimKey(r.ID))
		if err == nil {
			r.ClaimID = id
			return true, nil
		}
		if !errors.Is(err, storage.ErrConflict) {
			return false, err
		}
		held, err := e.store.Lookup(ctx, kindRPCClaim, rpcClaimKey(r.ID))
		if errors.Is(err, storage.ErrNotFound) {
			continue // released meanwhile
		}
		if err != nil {
			return false, fmt.Errorf("cannot look up an RPC claim: %w", err)
		}
		c, err := decodeRecord[rpcClaim](held)
		if err != nil {
			return false, err
		}
		// A claim of an earlier version has no time and is never taken over:
		// its node writes the RPC without comparing, so while both versions
		// run a take-over could deliver it twice.
		if c.At == 0 || now.Sub(time.UnixMilli(c.At)) < rpcClaimStale {
			return false, nil // another poll is delivering it
		}
		e.cfg.Logger.Warn("taking over a stale RPC claim", "rpc", r.ID, "claimedAt", c.At)
		if err := e.deleteRecord(ctx, kindRPCClaim, held.ID); err != nil && !errors.Is(err, storage.ErrNotFound) {
			return false, err
		}
	}
	return false, nil
}

// deviceRPCBody is {"id":n,"method":"…","params":…}.
func deviceRPCBody(r *rpcRecord) []byte {
	buf := make([]byte, 0, 40+len(r.Method)+len(r.Params))
	buf = append(buf, `{"id":`...)
	buf = strconv.AppendInt(buf, r.ReqID, 10)
	buf = append(buf, `,"method":`...)
	buf = kv.AppendJSONString(buf, r.Method)
	buf = append(buf, `,"params":`...)
	buf = append(buf, r.Params...)
	return append(buf, '}')
}

// ReplyRPC records the device's reply to its RPC reqID (compat §1.6) and wakes the
// REST call waiting for it on any node. A reply that is not JSON makes a
// lightweight RPC FAILED (the caller gets 406); a persistent one is SUCCESSFUL
// all the same, its response reading {"error":"<reply>"}, as ThingsBoard saves
// it. A stale reply (unknown id, one-way, already answered, expired) is ignored
// without error, as in ThingsBoard.
func (e *Engine) ReplyRPC(ctx context.Context, deviceID uuid.UUID, reqID int64, body []byte) error {
	for try := 0; ; try++ {
		r, prev, err := lookupLoad[rpcRecord](ctx, e, kindRPC, rpcReqKey(deviceID, reqID))
		if errors.Is(err, storage.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if r.Oneway || (r.Status != RPCDelivered && r.Status != RPCSent) || e.now().UnixMilli() >= r.ExpirationTime {
			e.cfg.Logger.Debug("stale RPC reply ignored", "device", deviceID, "requestId", reqID)
			return nil
		}
		r.Reply = slices.Clone(body)
		r.Status = RPCSuccessful
		if !r.Persistent && len(body) > 0 && !json.Valid(body) {
			r.Status = RPCFailed
		}
		// Over the version read: an RPC deleted meanwhile stays deleted, and of
		// two replies at once one wins, the other finds it answered.
		err = e.replaceRPC(ctx, r, prev)
		if errors.Is(err, storage.ErrNotFound) {
			return nil
		}
		if errors.Is(err, storage.ErrChanged) {
			if try < maxReplaceTries {
				continue
			}
			return errChangedMeanwhile
		}
		if err != nil {
			return err
		}
		if !r.Persistent {
			e.publishPush(ctx, rpcDoneTopic(r.ID), nil)
		}
		return nil
	}
}

// persistentRPC loads a persistent RPC whose device p may see.
func (e *Engine) persistentRPC(ctx context.Context, p *Principal, id uuid.UUID, roles ...string) (*rpcRecord, error) {
	if err := requireRole(p, roles...); err != nil {
		return nil, err
	}
	r, err := getRecord[rpcRecord](ctx, e, kindRPC, id)
	if err != nil {
		return nil, notFound(err)
	}
	if !r.Persistent {
		return nil, ErrNotFound
	}
	d, err := e.loadDevice(ctx, r.DeviceID)
	if err != nil {
		return nil, notFound(err)
	}
	if !e.canSeeDevice(p, d) {
		return nil, ErrPermissionDenied
	}
	return r, nil
}

// GetPersistentRPC returns a persistent RPC to a tenant admin of its tenant or a
// customer user of its device's customer.
func (e *Engine) GetPersistentRPC(ctx context.Context, p *Principal, id uuid.UUID) (*RPC, error) {
	r, err := e.persistentRPC(ctx, p, id, TenantAdmin, CustomerUser)
	if err != nil {
		return nil, err
	}
	if len(e.pruneRPCs(ctx, []*rpcRecord{r})) == 0 {
		return nil, ErrNotFound
	}
	return r.view(e.now().UnixMilli()), nil
}

// DeletePersistentRPC deletes a persistent RPC of p's tenant (tenant admins
// only); a pending one is then never delivered.
func (e *Engine) DeletePersistentRPC(ctx context.Context, p *Principal, id uuid.UUID) error {
	r, err := e.persistentRPC(ctx, p, id, TenantAdmin)
	if err != nil {
		return err
	}
	return notFound(e.deleteRPC(ctx, r))
}

// rpcPages sorts by ThingsBoard's sort properties; request and response by
// their JSON text, as its rpc table's varchar columns hold them (a request's
// text starts with its id), an absent response as NULL.
var rpcPages = pageSpec[*RPC]{
	text: func(r *RPC) string { return r.Request.Body.Method },
	keys: map[string]func(*RPC) sortKey{
		"id":             func(r *RPC) sortKey { return idKey(r.ID.ID) }, // ThingsBoard's default sort
		"createdTime":    func(r *RPC) sortKey { return numKey(r.CreatedTime) },
		"expirationTime": func(r *RPC) sortKey { return numKey(r.ExpirationTime) },
		"status":         func(r *RPC) sortKey { return strKey(r.Status) },
		"request": func(r *RPC) sortKey {
			b, _ := json.Marshal(r.Request)
			return strKey(string(b))
		},
		"response": func(r *RPC) sortKey {
			if len(r.Response) == 0 {
				return nullKey
			}
			return strKey(string(r.Response))
		},
	},
}

// ListPersistentRPCs returns a page of the persistent RPCs of a device p may see,
// only those of status when it is not empty. textSearch matches the method.
func (e *Engine) ListPersistentRPCs(ctx context.Context, p *Principal, deviceID uuid.UUID, status string, pl PageLink) (PageData[*RPC], error) {
	switch {
	case status == RPCDeleted:
		return PageData[*RPC]{}, Errorf(CodeBadRequestParams, "RpcStatus: DELETED")
	case status != "" && !slices.Contains(rpcStatuses, status):
		return PageData[*RPC]{}, Errorf(CodeBadRequestParams, "Invalid rpcStatus: %s", status)
	}
	if _, err := e.rpcDevice(ctx, p, deviceID); err != nil {
		return PageData[*RPC]{}, err
	}
	// The queued ones with the device, the others with its done owner.
	var all []*rpcRecord
	for _, owner := range []uuid.UUID{deviceID, rpcDoneOwner(deviceID)} {
		rs, err := listRecords[rpcRecord](ctx, e, kindRPC, owner)
		if err != nil {
			return PageData[*RPC]{}, err
		}
		all = append(all, rs...)
	}
	// In the order they were queued, which equal sort keys keep.
	slices.SortFunc(all, func(a, b *rpcRecord) int { return cmp.Compare(a.ReqID, b.ReqID) })
	all = e.pruneRPCs(ctx, all)
	now := e.now().UnixMilli()
	views := make([]*RPC, 0, len(all))
	for _, r := range all {
		if v := r.view(now); r.Persistent && (status == "" || v.Status == status) {
			views = append(views, v)
		}
	}
	return makePage(views, pl, rpcPages)
}

// pruneRPCs deletes the persistent RPCs among all (one device's) created longer
// ago than their tenant's rpcTtlDays, whatever their status, as ThingsBoard's
// clean-up does, and returns the others. There is no sweep: they go when their
// device's RPCs are next read (a poll: the queued ones; the REST list or get:
// any).
func (e *Engine) pruneRPCs(ctx context.Context, all []*rpcRecord) []*rpcRecord {
	if len(all) == 0 {
		return all
	}
	clock := e.now()
	l, err := e.tenantLimits(ctx, all[0].TenantID, clock)
	if err != nil || l.rpcTTL == 0 {
		return all // kept: pruning is housekeeping, the read goes on
	}
	before := clock.Add(-l.rpcTTL).UnixMilli()
	kept := all[:0]
	for _, r := range all {
		if !r.Persistent || r.CreatedTime >= before {
			kept = append(kept, r)
			continue
		}
		if err := e.deleteRPC(ctx, r); err != nil && !errors.Is(err, storage.ErrNotFound) {
			e.cfg.Logger.Warn("cannot remove an RPC past rpcTtlDays", "rpc", r.ID, "err", err)
		}
	}
	return kept
}

// removeDeviceRPCs deletes every RPC of a deleted device (queued or done) with
// its claims, id reservations and request id counter.
func (e *Engine) removeDeviceRPCs(ctx context.Context, deviceID uuid.UUID) error {
	for _, l := range []struct {
		kind  string
		owner uuid.UUID
	}{{kindRPC, deviceID}, {kindRPC, rpcDoneOwner(deviceID)}, {kindRPCClaim, deviceID}, {kindRPCID, deviceID}} {
		rs, err := e.store.List(ctx, l.kind, l.owner)
		if err != nil {
			return fmt.Errorf("cannot list %s of %s: %w", l.kind, l.owner, err)
		}
		for _, r := range rs {
			if err := e.deleteRecord(ctx, l.kind, r.ID); err != nil && !errors.Is(err, storage.ErrNotFound) {
				return err
			}
		}
	}
	if err := e.deleteRecord(ctx, kindRPCSeq, deviceID); err != nil && !errors.Is(err, storage.ErrNotFound) {
		return err
	}
	return nil
}
