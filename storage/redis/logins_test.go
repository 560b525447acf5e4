package redis

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
)

func TestLoginGuard(t *testing.T)        { testLoginGuard(t, openTest(t)) }
func TestClusterLoginGuard(t *testing.T) { testLoginGuard(t, openClusterTest(t)) }

// testLoginGuard: the engine's lockout rules (engine/lockout.go), held in
// Redis: a user name's failures lock it for the window whichever node counts
// them, a success forgets them and gives back the address's attempt.
func testLoginGuard(t *testing.T, s *Store) {
	ctx := context.Background()
	now := time.UnixMilli(1_700_000_000_000)
	const window = 5 * time.Minute
	admit := func(at time.Time, keys ...string) bool {
		t.Helper()
		limits := []int{3, 5}[:len(keys)]
		ok, err := s.AdmitLogin(ctx, at, keys, limits, window)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	for i := range 3 {
		if !admit(now, "u:alice", "a:10.0.0.1") {
			t.Fatalf("attempt %d refused", i+1)
		}
	}
	if admit(now, "u:alice", "a:10.0.0.2") {
		t.Fatal("the fourth failure of a user admitted")
	}
	if admit(now.Add(window-time.Millisecond), "u:alice") {
		t.Fatal("admitted before the lockout ended")
	}
	if !admit(now.Add(window), "u:alice") {
		t.Fatal("refused after the lockout")
	}
	if err := s.LoginSucceeded(ctx, []string{"u:alice"}); err != nil {
		t.Fatal(err)
	}
	// The address counted 3 of alice's, and refuses past 5 over every name.
	for i, user := range []string{"u:bob", "u:carol"} {
		if !admit(now, user, "a:10.0.0.1") {
			t.Fatalf("address attempt %d refused", 4+i)
		}
	}
	if admit(now, "u:dave", "a:10.0.0.1") {
		t.Fatal("the address's sixth attempt admitted")
	}
	// A success takes back its attempt from the address.
	if err := s.LoginSucceeded(ctx, []string{"u:erin", "a:10.0.0.3"}); err != nil {
		t.Fatal(err)
	}
	if !admit(now, "u:erin", "a:10.0.0.3") {
		t.Fatal("a fresh address refused")
	}
}

// TestLoginGuardWritesOnlyChanges: attempts refused because an address is
// locked create no key for the user names they try.
func TestLoginGuardWritesOnlyChanges(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	now := time.UnixMilli(1_700_000_000_000)
	for i := range 3 {
		if ok, err := s.AdmitLogin(ctx, now, []string{"u:" + string(rune('a'+i)), "a:x"}, []int{5, 2}, time.Minute); err != nil || (ok != (i < 2)) {
			t.Fatalf("attempt %d: %v %v", i, ok, err)
		}
	}
	before, err := s.rdb.Keys(ctx, s.prefix+"{login}:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if ok, err := s.AdmitLogin(ctx, now, []string{"u:other" + string(rune('a'+i)), "a:x"}, []int{5, 2}, time.Minute); err != nil || ok {
			t.Fatalf("refused attempt %d: %v %v", i, ok, err)
		}
	}
	after, err := s.rdb.Keys(ctx, s.prefix+"{login}:*").Result()
	if err != nil || len(after) != len(before) {
		t.Fatalf("keys %d before, %d after: %v", len(before), len(after), err)
	}
}

// TestNoErrorsOnHealthyRedis: a new client and its first commands count no
// error on a healthy Redis (the client's own CLIENT SETINFO / MAINT_NOTIFICATIONS
// tries used to). A script's first NOSCRIPT happens only on a Redis that has
// not run it since it started, so this test does not always meet one.
func TestNoErrorsOnHealthyRedis(t *testing.T) {
	before := redisErrors.Get()
	s := openTest(t)
	ctx := context.Background()
	if err := s.NoteRewrite(ctx, uuid.New(), []string{"k"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AdmitLogin(ctx, time.Now(), []string{"u:x"}, []int{5}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := redisErrors.Get() - before; got != 0 {
		t.Fatalf("%d errors counted", got)
	}
}
