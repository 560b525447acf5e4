package engine

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

// The bytes of an OTA package are stored as records, so every node of a
// deployment reads them from the shared back end: one otaData record describes
// them, and otaChunk records hold them in pieces of otaChunkSize. Pieces keep the
// memory of one request bounded and let a ranged read fetch only what it needs.
//
// An upload writes its chunks under a fresh data id, then claims the package by
// putting the otaData record with the unique value package:<id>, then copies the
// description into the package info. The claim is what makes the bytes immutable:
// a second upload, even a racing one, loses it and its chunks are deleted.
const (
	kindOtaData  = "otaData"
	kindOtaChunk = "otaChunk"
	otaChunkSize = 1 << 20
	// otaCacheBytes bounds the chunks a node keeps in memory. Chunks never change
	// (a new upload has a new data id), so the cache needs no invalidation.
	otaCacheBytes = 64 << 20
)

// otaData describes the stored bytes of a package.
type otaData struct {
	PackageID         uuid.UUID `json:"packageId"`
	Size              int64     `json:"size"`
	FileName          string    `json:"fileName"`
	ContentType       string    `json:"contentType"`
	ChecksumAlgorithm string    `json:"checksumAlgorithm"`
	Checksum          string    `json:"checksum"`
}

func otaDataKey(pkg uuid.UUID) string { return "package:" + pkg.String() }

// otaChunkID names chunk i of the bytes dataID.
func otaChunkID(dataID uuid.UUID, i int64) uuid.UUID {
	return uuid.NewSHA1(dataID, strconv.AppendInt(nil, i, 10))
}

// writeOtaChunks stores everything r gives as chunks of dataID and returns the
// size written, also on error (so the caller can delete what was written).
func (e *Engine) writeOtaChunks(ctx context.Context, dataID uuid.UUID, r io.Reader) (int64, error) {
	var size int64
	for i := int64(0); ; i++ {
		// A fresh buffer per chunk: a back end may keep the slice it was given.
		buf := make([]byte, otaChunkSize)
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			rec := storage.Record{Kind: kindOtaChunk, ID: otaChunkID(dataID, i), Owner: dataID, Data: buf[:n]}
			if perr := e.store.Put(ctx, rec); perr != nil {
				return size, fmt.Errorf("cannot save OTA data chunk %d: %w", i, perr)
			}
			size += int64(n)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return size, nil
		}
		if err != nil {
			return size, fmt.Errorf("cannot read OTA package data: %w", err)
		}
	}
}

// deleteOtaChunks removes the chunks of size bytes of dataID.
func (e *Engine) deleteOtaChunks(ctx context.Context, dataID uuid.UUID, size int64) error {
	for i := int64(0); i*otaChunkSize < size; i++ {
		if err := e.store.Delete(ctx, kindOtaChunk, otaChunkID(dataID, i)); err != nil && !errors.Is(err, storage.ErrNotFound) {
			return fmt.Errorf("cannot delete OTA data chunk %d: %w", i, err)
		}
	}
	return nil
}

// claimOtaData makes the chunks of dataID the bytes of package r. When another
// upload claimed it first the answer is "data already set"; if that upload was
// interrupted before it updated the info, the info is finished here.
func (e *Engine) claimOtaData(ctx context.Context, r *otaRecord, dataID uuid.UUID, d *otaData) error {
	err := e.putRecord(ctx, kindOtaData, dataID, d.PackageID, d, otaDataKey(d.PackageID))
	if !errors.Is(err, storage.ErrConflict) {
		return err
	}
	rec, err := e.store.Lookup(ctx, kindOtaData, otaDataKey(d.PackageID))
	if err != nil {
		return errors.Join(errOtaDataSet, err)
	}
	other, err := decodeRecord[otaData](rec)
	if err != nil {
		return err
	}
	if !r.hasBytes() {
		if _, err := e.finishOtaData(ctx, r, rec.ID, other); err != nil {
			return err
		}
	}
	return errOtaDataSet
}

// deleteOtaData removes the stored bytes of a package, if any.
func (e *Engine) deleteOtaData(ctx context.Context, pkg uuid.UUID) error {
	rec, err := e.store.Lookup(ctx, kindOtaData, otaDataKey(pkg))
	if errors.Is(err, storage.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cannot look up OTA data of %s: %w", pkg, err)
	}
	d, err := decodeRecord[otaData](rec)
	if err != nil {
		return err
	}
	if err := e.deleteOtaChunks(ctx, rec.ID, d.Size); err != nil {
		return err
	}
	if err := e.deleteRecord(ctx, kindOtaData, rec.ID); err != nil && !errors.Is(err, storage.ErrNotFound) {
		return err
	}
	return nil
}

// otaChunk returns chunk i of dataID, from this node's cache when it can.
func (e *Engine) otaChunk(ctx context.Context, dataID uuid.UUID, i int64) ([]byte, error) {
	id := otaChunkID(dataID, i)
	if b, ok := e.otaCache.get(id); ok {
		return b, nil
	}
	rec, err := e.store.Get(ctx, kindOtaChunk, id)
	if err != nil {
		return nil, fmt.Errorf("cannot load OTA data chunk %d: %w", i, err)
	}
	e.otaCache.add(id, rec.Data)
	return rec.Data, nil
}

// otaReader reads bytes [off, end) of stored package bytes, chunk by chunk.
type otaReader struct {
	ctx      context.Context
	e        *Engine
	dataID   uuid.UUID
	off, end int64
	cur      []byte // the rest of the current chunk within the range
}

func (r *otaReader) Read(p []byte) (int, error) {
	if len(r.cur) == 0 {
		if r.off >= r.end {
			return 0, io.EOF
		}
		i := r.off / otaChunkSize
		chunk, err := r.e.otaChunk(r.ctx, r.dataID, i)
		if err != nil {
			return 0, err
		}
		lo, hi := r.off-i*otaChunkSize, min(int64(len(chunk)), r.end-i*otaChunkSize)
		if lo >= hi {
			return 0, fmt.Errorf("OTA data chunk %d of %s is shorter than its package", i, r.dataID)
		}
		r.cur = chunk[lo:hi]
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	r.off += int64(n)
	return n, nil
}

// chunkCache is a least-recently-used cache of OTA chunks up to otaCacheBytes.
// Its zero value is ready; cached slices are shared and never modified.
type chunkCache struct {
	mu    sync.Mutex
	size  int64
	order list.List // of *cachedChunk, most recently used first
	items map[uuid.UUID]*list.Element
}

type cachedChunk struct {
	id   uuid.UUID
	data []byte
}

func (c *chunkCache) get(id uuid.UUID) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[id]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*cachedChunk).data, true
}

func (c *chunkCache) add(id uuid.UUID, data []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.items == nil {
		c.items = make(map[uuid.UUID]*list.Element)
	}
	if _, ok := c.items[id]; ok {
		return
	}
	c.items[id] = c.order.PushFront(&cachedChunk{id: id, data: data})
	c.size += int64(len(data))
	for c.size > otaCacheBytes {
		old := c.order.Remove(c.order.Back()).(*cachedChunk)
		delete(c.items, old.id)
		c.size -= int64(len(old.data))
	}
}
