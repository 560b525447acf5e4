package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/sluice-iot/sluice/storage"
)

// errAccountLocked is ThingsBoard's answer while logins are locked.
var errAccountLocked = &Error{Code: CodeAuthentication, Msg: "User account is locked due to security policy"}

// maxGuardEntries bounds each map of loginGuard; past it, entries that neither
// count recent failures nor lock are dropped.
const maxGuardEntries = 100_000

// admitLogin counts a login attempt of user from addr ("" for none), or
// refuses it while either is locked: in the back end when it counts for every
// node (storage.LoginGuard: Redis), else on this node.
func (e *Engine) admitLogin(ctx context.Context, user, addr string) (bool, error) {
	user, addr = strings.ToLower(strings.TrimSpace(user)), addrKey(addr)
	g := storage.LoginGuardOf(e.store)
	if g == nil {
		return e.logins.admit(e.now(), user, addr), nil
	}
	keys, limits := []string{userKey(user)}, []int{e.cfg.LoginMaxFailures}
	if addr != "" {
		keys, limits = append(keys, "a:"+addr), append(limits, e.cfg.LoginMaxAddressFailures)
	}
	return g.AdmitLogin(ctx, e.now(), keys, limits, e.cfg.LoginLockout)
}

// addrKey is what a client address counts as in the per-address budget. An
// IPv6 address counts by its /64: a single subscriber is routinely given a
// whole /64, and keyed by full address it would have 2^64 budgets. An IPv4
// address (also IPv4-mapped) counts whole; what does not parse is kept as it is.
func addrKey(addr string) string {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return addr
	}
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return a.String()
	}
	p, _ := a.Prefix(64) // cannot fail: an IPv6 address without a zone
	return p.String()
}

// userKey names a user name in the back end's login guard: its SHA-256, so
// that what anyone may type as a user name is neither stored in clear nor
// larger than a hash.
func userKey(user string) string {
	h := sha256.Sum256([]byte(user))
	return "u:" + hex.EncodeToString(h[:16])
}

// loginSucceeded takes back the attempt admitLogin counted and forgets the
// user's failures.
func (e *Engine) loginSucceeded(ctx context.Context, user, addr string) error {
	user, addr = strings.ToLower(strings.TrimSpace(user)), addrKey(addr)
	g := storage.LoginGuardOf(e.store)
	if g == nil {
		e.logins.success(user, addr)
		return nil
	}
	keys := []string{userKey(user)}
	if addr != "" {
		keys = append(keys, "a:"+addr)
	}
	return g.LoginSucceeded(ctx, keys)
}

// loginGuard counts failed logins per user name and per client address and locks
// logins after too many within a window, on this node: the guard of a back end
// without storage.LoginGuard (the embedded default, one node).
type loginGuard struct {
	maxUser, maxAddr int
	window           time.Duration // counting window and lockout length

	mu    sync.Mutex
	users map[string]*failures // lower-cased user name → failures
	addrs map[string]*failures
}

type failures struct {
	count  int       // attempts not known to have succeeded, since first
	first  time.Time // start of the counting window
	locked time.Time // logins refused until then
}

func newLoginGuard(maxUser, maxAddr int, window time.Duration) *loginGuard {
	return &loginGuard{maxUser: maxUser, maxAddr: maxAddr, window: window,
		users: make(map[string]*failures), addrs: make(map[string]*failures)}
}

// admit counts one login attempt of user from addr ("" for none), or refuses it
// while either is locked. An attempt counts as a failure until success is called,
// so concurrent guesses cannot outrun the limit: at most max attempts per window.
func (g *loginGuard) admit(now time.Time, user, addr string) bool {
	user = strings.ToLower(strings.TrimSpace(user))
	g.mu.Lock()
	defer g.mu.Unlock()
	fu := g.entry(g.users, user, now)
	var fa *failures
	if addr != "" {
		fa = g.entry(g.addrs, addr, now)
	}
	ok := g.allow(fu, g.maxUser, now)
	if fa != nil {
		ok = g.allow(fa, g.maxAddr, now) && ok
	}
	if !ok {
		return false
	}
	fu.count++
	if fa != nil {
		fa.count++
	}
	return true
}

// success takes back the attempt admit counted and forgets the user's failures.
func (g *loginGuard) success(user, addr string) {
	user = strings.ToLower(strings.TrimSpace(user))
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.users, user)
	if fa := g.addrs[addr]; fa != nil && fa.count > 0 {
		fa.count--
	}
}

// entry returns the failures of key, starting a new window when the old one ended.
func (g *loginGuard) entry(m map[string]*failures, key string, now time.Time) *failures {
	f := m[key]
	if f == nil {
		if len(m) >= maxGuardEntries {
			g.prune(m, now)
		}
		f = &failures{first: now}
		m[key] = f
	}
	if now.Before(f.locked) {
		return f
	}
	if now.Sub(f.first) >= g.window {
		f.count, f.first = 0, now
	}
	return f
}

// allow reports whether another attempt may run, locking f when it may not.
func (g *loginGuard) allow(f *failures, limit int, now time.Time) bool {
	if now.Before(f.locked) {
		return false
	}
	if f.count >= limit {
		f.locked, f.count, f.first = now.Add(g.window), 0, now
		return false
	}
	return true
}

// prune drops entries that no longer matter; if that frees nothing (a flood of
// fresh names), it drops every entry that does not lock.
func (g *loginGuard) prune(m map[string]*failures, now time.Time) {
	n := len(m)
	for k, f := range m {
		if !now.Before(f.locked) && now.Sub(f.first) >= g.window {
			delete(m, k)
		}
	}
	if len(m) < n {
		return
	}
	for k, f := range m {
		if !now.Before(f.locked) {
			delete(m, k)
		}
	}
}
