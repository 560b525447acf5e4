package engine

import (
	"context"
	"testing"
	"time"
)

func TestLoginGuard(t *testing.T) {
	g := newLoginGuard(3, 5, time.Minute)
	t0 := time.Unix(1000, 0)
	f := func(at time.Duration, user, addr string, want bool) {
		t.Helper()
		if got := g.admit(t0.Add(at), user, addr); got != want {
			t.Fatalf("admit(+%v, %q, %q) = %v, want %v", at, user, addr, got, want)
		}
	}
	// Three failures of a user, the fourth attempt is refused, whatever the address.
	f(0, "a@x", "1.1.1.1", true)
	f(1, "A@x", "1.1.1.2", true)
	f(2, " a@x", "1.1.1.3", true)
	f(3, "a@x", "1.1.1.4", false)
	f(time.Second, "a@x", "", false)
	// Other users are not affected; the lockout ends after the window.
	f(time.Second, "b@x", "1.1.1.1", true)
	f(time.Minute+4, "a@x", "1.1.1.1", true)
	// A success forgets the user's failures and takes back the address count.
	g.success("a@x", "1.1.1.1")
	f(time.Minute+5, "a@x", "1.1.1.1", true)
	f(time.Minute+6, "a@x", "1.1.1.1", true)
	g.success("a@x", "1.1.1.1")

	// Five failures from one address lock it for every user.
	for i, u := range []string{"u1", "u2", "u3", "u4", "u5"} {
		f(time.Duration(i), u, "9.9.9.9", true)
	}
	f(10, "u6", "9.9.9.9", false)
	f(10, "u6", "8.8.8.8", true)
	f(time.Minute+11, "u7", "9.9.9.9", true)
	// Failures older than the window are forgotten.
	f(2*time.Hour, "c@x", "", true)
	f(2*time.Hour+1, "c@x", "", true)
	f(3*time.Hour, "c@x", "", true)
	f(3*time.Hour+1, "c@x", "", true)
	f(3*time.Hour+2, "c@x", "", true)
	f(3*time.Hour+3, "c@x", "", false)
}

func TestLoginLockout(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	te.cfg.LoginMaxFailures = 2
	te.logins = newLoginGuard(2, 100, 5*time.Minute)
	f := func(user, pw, addr string, want error) {
		t.Helper()
		if _, _, err := te.LoginFrom(ctx, addr, user, pw); err != want {
			t.Fatalf("LoginFrom(%q, %q, %q) = %v, want %v", addr, user, pw, err, want)
		}
	}
	f(DemoTenantAdminEmail, "wrong", "10.0.0.1", ErrBadCredentials)
	f(DemoTenantAdminEmail, "tenant", "10.0.0.1", nil) // a success resets the count
	f(DemoTenantAdminEmail, "wrong", "10.0.0.1", ErrBadCredentials)
	f(DemoTenantAdminEmail, "wrong", "10.0.0.2", ErrBadCredentials)
	f(DemoTenantAdminEmail, "tenant", "10.0.0.3", errAccountLocked) // even the right password
	f(DemoCustomerUserEmail, "customer", "10.0.0.1", nil)
	// Unknown users lock the same way, so a lockout tells nothing about an account.
	f("ghost@example.com", "x", "", ErrBadCredentials)
	f("ghost@example.com", "x", "", ErrBadCredentials)
	f("ghost@example.com", "x", "", errAccountLocked)
	te.now = func() time.Time { return time.Now().Add(5*time.Minute + time.Second) }
	f(DemoTenantAdminEmail, "tenant", "10.0.0.3", nil)
}

func TestAddrKey(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.7":                "192.0.2.7",
		"::ffff:192.0.2.7":         "192.0.2.7",
		"2001:db8:1:2:3:4:5:6":     "2001:db8:1:2::/64",
		"2001:db8:1:2:ffff::1":     "2001:db8:1:2::/64",
		"fe80::1%eth0":             "fe80::/64",
		"::1":                      "::/64",
		"":                         "",
		"not an address":           "not an address",
		"2001:db8:1:3:3:4:5:6":     "2001:db8:1:3::/64",
		"2001:0db8:0001:0002::abc": "2001:db8:1:2::/64",
	} {
		if got := addrKey(in); got != want {
			t.Errorf("addrKey(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestLoginLockoutIPv6Prefix: the addresses of one IPv6 /64 share one budget;
// another /64 has its own.
func TestLoginLockoutIPv6Prefix(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	te.logins = newLoginGuard(100, 3, 5*time.Minute)
	f := func(user, addr string, want error) {
		t.Helper()
		if _, _, err := te.LoginFrom(ctx, addr, user, "wrong"); err != want {
			t.Fatalf("LoginFrom(%q, %q) = %v, want %v", addr, user, err, want)
		}
	}
	f("u1@example.com", "2001:db8:1:2::1", ErrBadCredentials)
	f("u2@example.com", "2001:db8:1:2::2", ErrBadCredentials)
	f("u3@example.com", "2001:db8:1:2:aaaa:bbbb:cccc:dddd", ErrBadCredentials)
	f("u4@example.com", "2001:db8:1:2::4", errAccountLocked)
	f("u4@example.com", "2001:db8:1:3::4", ErrBadCredentials)
	f("u5@example.com", "192.0.2.1", ErrBadCredentials)
}
