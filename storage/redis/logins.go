package redis

import (
	"context"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-iot/sluice/storage"
)

var _ storage.LoginGuard = (*Store)(nil)

// Failed logins: a hash per key (user name, client address) with the count
// "c", the start of its counting window "f" and the end of its lockout "l"
// (unix ms), in one cluster slot ({login}) so that one script sees a user and
// an address together. The node-local guard of the engine (lockout.go) works
// the same way; this one holds for every node.

// admitLoginScript: KEYS are the keys to count, ARGV now, window (ms), then a
// limit per key. 1 admits the attempt (counted against each key), 0 refuses
// it (a key is locked, or was locked now on reaching its limit). Only a key
// whose state changed is written: a refused attempt creates nothing, so a
// locked address cannot fill Redis with the user names it tries.
var admitLoginScript = goredis.NewScript(`
local now, window = tonumber(ARGV[1]), tonumber(ARGV[2])
local ok = true
local st = {}
for i = 1, #KEYS do
  local v = redis.call('HMGET', KEYS[i], 'c', 'f', 'l')
  local c, f, l = tonumber(v[1]) or 0, tonumber(v[2]) or now, tonumber(v[3]) or 0
  local changed = false
  if now >= l and now - f >= window then
    c, f = 0, now
  end
  if now < l then
    ok = false
  elseif c >= tonumber(ARGV[2 + i]) then
    l, c, f = now + window, 0, now
    ok = false
    changed = true
  end
  st[i] = {c, f, l, changed}
end
for i = 1, #KEYS do
  local c, f, l, changed = st[i][1], st[i][2], st[i][3], st[i][4]
  if ok then
    c = c + 1
    changed = true
  end
  if changed then
    redis.call('HSET', KEYS[i], 'c', c, 'f', f, 'l', l)
    redis.call('PEXPIRE', KEYS[i], math.max(l, f + window) - now + 1000)
  end
end
if ok then
  return 1
end
return 0`)

// loginSucceededScript: KEYS[1] (the user) is forgotten, the others' counts
// taken back by one.
var loginSucceededScript = goredis.NewScript(`
redis.call('DEL', KEYS[1])
for i = 2, #KEYS do
  if (tonumber(redis.call('HGET', KEYS[i], 'c')) or 0) > 0 then
    redis.call('HINCRBY', KEYS[i], 'c', -1)
  end
end
return 0`)

func (s *Store) loginKeys(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = s.prefix + "{login}:" + k
	}
	return out
}

// AdmitLogin counts a login attempt for every node (see storage.LoginGuard).
func (s *Store) AdmitLogin(ctx context.Context, now time.Time, keys []string, limits []int, window time.Duration) (bool, error) {
	if err := s.check(); err != nil {
		return false, err
	}
	args := make([]any, 0, 2+len(limits))
	args = append(args, strconv.FormatInt(now.UnixMilli(), 10), strconv.FormatInt(window.Milliseconds(), 10))
	for _, l := range limits {
		args = append(args, l)
	}
	n, err := admitLoginScript.Run(ctx, s.rdb, s.loginKeys(keys), args...).Int()
	if err != nil {
		return false, fail("count a login attempt", err)
	}
	return n == 1, nil
}

// LoginSucceeded forgets a user's failures (see storage.LoginGuard).
func (s *Store) LoginSucceeded(ctx context.Context, keys []string) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := loginSucceededScript.Run(ctx, s.rdb, s.loginKeys(keys)).Err(); err != nil {
		return fail("forget failed logins", err)
	}
	return nil
}
