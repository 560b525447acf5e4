package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluice-iot/sluice/internal/testenv"
	"github.com/sluice-iot/sluice/storage/redis"
)

// TestCheckSigningKey: a node whose JWT key differs from the one the node
// before it registered says so in its log; the same key says nothing.
func TestCheckSigningKey(t *testing.T) {
	addr := testenv.Service(t, "REDIS_ADDR")[0]
	ctx := context.Background()
	var b [6]byte
	rand.Read(b[:])
	rs, err := redis.Open(ctx, redis.Options{Addrs: []string{addr}, Prefix: "sluicetest:" + hex.EncodeToString(b[:]) + ":"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { rs.Drop(ctx); rs.Close() }()
	logs := new(testenv.Buffer)
	log := slog.New(slog.NewTextHandler(logs, nil))
	for _, key := range []string{"key-one-0123456789abcdef0123456789", "key-one-0123456789abcdef0123456789", "key-two-0123456789abcdef0123456789"} {
		if err := checkSigningKey(ctx, rs, []byte(key), log); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(logs.String(), "differs from the one the node started before it used"); n != 1 {
		t.Fatalf("%d warnings, want 1 (the third key only):\n%s", n, logs.String())
	}
	if strings.Contains(logs.String(), "key-one") || strings.Contains(logs.String(), "key-two") {
		t.Fatalf("a key reached the log:\n%s", logs.String())
	}
}
