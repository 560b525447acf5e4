package fleet

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-iot/sluice/loadtest"
	"github.com/sluice-iot/sluice/loadtest/report"
)

// rpcPollers are devices that long-poll GET /api/v1/{token}/rpc for server-side
// RPC requests, one poll at a time each, and reply {"status":"ok"} to what they get.
// The route may not exist on a server: its answers are counted by status like any
// other, and a device waits before polling again after anything but an RPC or a
// poll timeout (408), so a missing route, or a server that answers every poll
// at once, costs little.
type rpcPollers struct {
	client  *client
	timeout time.Duration
	// sleep waits d or until ctx ends (nil: a timer); the tests replace it.
	sleep func(ctx context.Context, d time.Duration)

	started      time.Time    // when the first polls were sent
	firstPending atomic.Int64 // pollers whose first poll (and its reply) has not ended

	mu    sync.Mutex
	stats report.RPC
}

// backoff is how long a poller waits after a poll answered otherwise than with
// an RPC or a 408 (or not at all), unless the poll itself took long (slowPoll).
const backoff = time.Second

// run polls as the devices of tokens until ctx ends; first bounds their first
// polls instead (see poll).
func (p *rpcPollers) run(ctx, first context.Context, tokens []string) {
	p.mu.Lock()
	p.stats.Pollers = len(tokens)
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, token := range tokens {
		wg.Go(func() { p.poll(ctx, first, token) })
	}
	wg.Wait()
}

// start notes that n pollers are about to send their first polls; before run.
func (p *rpcPollers) start(n int) {
	p.started = time.Now()
	p.firstPending.Store(int64(n))
}

// firstPolls is how many pollers' first polls have not ended yet, and how long
// they may still take: until the poll timeout after they were sent (when the
// server keeps to it; the client's own bound is 10 s later).
func (p *rpcPollers) firstPolls(now time.Time) (pending int, left time.Duration) {
	return int(p.firstPending.Load()), max(p.started.Add(p.timeout).Sub(now), 0)
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
		sent := time.Now()
		status, body, err := p.get(callCtx, path+query)
		took := time.Since(sent)
		if callCtx.Err() != nil {
			if first { // cut short by an Abort: the report says so
				p.mu.Lock()
				p.stats.FirstPollsCut++
				p.mu.Unlock()
				p.firstPending.Add(-1)
			}
			return // a poll cut short by the end of the run is not counted
		}
		p.count(status, err, body)
		id, delivered := rpcID(status, body)
		if delivered {
			rstatus, _, rerr := p.post(callCtx, path+"/"+strconv.FormatInt(id, 10), `{"status":"ok"}`)
			if callCtx.Err() != nil {
				if first {
					p.firstPending.Add(-1)
				}
				return
			}
			p.countReply(rstatus, rerr)
		}
		if first {
			p.firstPending.Add(-1)
		}
		if p.mustWait(status, err, delivered, took) {
			p.wait(ctx, min(backoff, p.timeout))
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// mustWait tells whether a device waits (backoff) before its next poll after
// one that ended with status or err and took took. It polls again at once only
// after an RPC (it replied to it) or a 408 (the poll's timeout ran out: the
// server held it), or after a poll that itself took half the timeout or more.
// Anything else waits, a 200 without an RPC too: answered at once, it would
// otherwise have the device poll as fast as the server answers.
func (p *rpcPollers) mustWait(status int, err error, delivered bool, took time.Duration) bool {
	switch {
	case err == nil && (delivered || status == http.StatusRequestTimeout):
		return false
	case took >= p.timeout/2: // the poll was held: it does not flood the target
		return false
	}
	return true
}

func (p *rpcPollers) wait(ctx context.Context, d time.Duration) {
	if p.sleep != nil {
		p.sleep(ctx, d)
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// count records one poll.
func (p *rpcPollers) count(status int, err error, body []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.transport(err)
		return
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
	}
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
