package fleet

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-iot/sluice/loadtest"
	"github.com/sluice-iot/sluice/loadtest/report"
)

// rpcPollers are devices that long-poll GET /api/v1/{token}/rpc for server-side
// RPC requests, one poll at a time each, and reply {"status":"ok"} to what they get.
// The route may not exist on a server: its answers are counted by status like any
// other, and a device waits before polling again after anything but an RPC or a
// poll timeout, so a missing route costs little.
type rpcPollers struct {
	client  *client
	timeout time.Duration

	mu    sync.Mutex
	stats report.RPC
}

// backoff is how long a poller waits after a failed poll.
const backoff = time.Second

// run polls as the devices of tokens until ctx ends; first bounds their first
// polls instead (see poll).
func (p *rpcPollers) run(ctx, first context.Context, tokens []string) {
	p.stats.Pollers = len(tokens)
	var wg sync.WaitGroup
	for _, token := range tokens {
		wg.Go(func() { p.poll(ctx, first, token) })
	}
	wg.Wait()
}

// poll polls as one device until ctx ends. The first poll, and the reply to what
// it brings, run until firstCtx ends instead, which is later (an Abort, not the
// end of the run), so every poller is counted at least once however short the run.
func (p *rpcPollers) poll(ctx, firstCtx context.Context, token string) {
	path := "/api/v1/" + token + "/rpc"
	query := "?timeout=" + strconv.FormatInt(p.timeout.Milliseconds(), 10)
	for first := true; ; first = false {
		callCtx := ctx
		if first {
			callCtx = firstCtx
		}
		status, body, err := p.get(callCtx, path+query)
		if callCtx.Err() != nil {
			return // a poll cut short by the end of the run is not counted
		}
		wait := p.count(status, err, body)
		if id, ok := rpcID(status, body); ok {
			status, _, err = p.post(callCtx, path+"/"+strconv.FormatInt(id, 10), `{"status":"ok"}`)
			if callCtx.Err() != nil {
				return
			}
			p.countReply(status, err)
		}
		if wait {
			select {
			case <-ctx.Done():
			case <-time.After(min(backoff, p.timeout)):
			}
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// count records one poll and reports whether the device should wait before the next.
func (p *rpcPollers) count(status int, err error, body []byte) (wait bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.transport(err)
		return true
	}
	p.stats.Polls++
	p.status(status)
	_, delivered := rpcID(status, body)
	switch {
	case delivered:
		p.stats.Delivered++
	case status == http.StatusOK || status == http.StatusRequestTimeout:
		p.stats.Empty++
	default:
		p.stats.Failed++
		return true
	}
	return false
}

func (p *rpcPollers) countReply(status int, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.transport(err)
		return
	}
	p.status(status)
	if status >= 200 && status < 300 {
		p.stats.Replies++
	} else {
		p.stats.Failed++
	}
}

func (p *rpcPollers) status(s int) {
	if p.stats.Status == nil {
		p.stats.Status = map[string]int64{}
	}
	p.stats.Status[strconv.Itoa(s)]++
}

func (p *rpcPollers) transport(err error) {
	if p.stats.TransportErrors == nil {
		p.stats.TransportErrors = map[string]int64{}
	}
	p.stats.Failed++
	p.stats.TransportErrors[loadtest.Classify(err)]++
}

// report returns the counts so far.
func (p *rpcPollers) report() *report.RPC {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.stats
	if r.Status == nil {
		r.Status = map[string]int64{}
	}
	if r.TransportErrors == nil {
		r.TransportErrors = map[string]int64{}
	}
	return &r
}

// rpcID returns the id of the RPC request a 200 poll answer carries.
func rpcID(status int, body []byte) (int64, bool) {
	if status != http.StatusOK || len(body) == 0 {
		return 0, false
	}
	var req struct {
		ID     *int64 `json:"id"`
		Method string `json:"method"`
	}
	if json.Unmarshal(body, &req) != nil || req.ID == nil {
		return 0, false
	}
	return *req.ID, true
}

func (p *rpcPollers) get(ctx context.Context, path string) (int, []byte, error) {
	return p.send(ctx, http.MethodGet, path, "")
}

func (p *rpcPollers) post(ctx context.Context, path, body string) (int, []byte, error) {
	return p.send(ctx, http.MethodPost, path, body)
}

// send is one device API call, bounded by the poll timeout plus a margin for the
// server to answer it.
func (p *rpcPollers) send(ctx context.Context, method, path, body string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout+10*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, p.client.base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := p.client.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, err
}
