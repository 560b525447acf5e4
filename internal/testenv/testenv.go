// Package testenv tells integration tests where the real services are. The
// rule lives here once: a test that needs a service reads its address from the
// environment (scripts/services.sh prints the exports), skips when it is unset,
// and fails instead when SLUICE_REQUIRE_SERVICES=1, as CI sets it, so that no
// integration test skips in CI.
package testenv

import (
	"os"
	"testing"
)

// Service returns the value of the environment variables names, in order; if any
// is unset the test is skipped, or failed under SLUICE_REQUIRE_SERVICES=1.
func Service(tb testing.TB, names ...string) []string {
	tb.Helper()
	vals := make([]string, len(names))
	for i, n := range names {
		vals[i] = os.Getenv(n)
		if vals[i] != "" {
			continue
		}
		if os.Getenv("SLUICE_REQUIRE_SERVICES") == "1" {
			tb.Fatalf("%s is unset but SLUICE_REQUIRE_SERVICES=1: start the servers with eval \"$(scripts/services.sh)\"", n)
		}
		tb.Skipf("%s is unset; eval \"$(scripts/services.sh)\" to run this test against the real service", n)
	}
	return vals
}
