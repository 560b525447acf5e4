package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/ingest"
	"github.com/sluice-iot/sluice/internal/testenv"
	"github.com/sluice-iot/sluice/internal/version"
	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
	"github.com/sluice-iot/sluice/storage/clickhouse"
)

// runDeadLetter runs `sluice deadletter args…` with the environment env and
// returns its exit code, stdout and stderr.
func runDeadLetter(env []string, args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := deadletter("", args, env, &out, &errOut)
	return code, out.String(), errOut.String()
}

// spoolWithDeadLetter makes a data folder whose spool holds one dead-letter
// file of rows, and returns the folder, the file's path and the rows'
// versions.
func spoolWithDeadLetter(t *testing.T, rows []storage.Row) (string, string, []uint64) {
	t.Helper()
	data := t.TempDir()
	spool := filepath.Join(data, "spool")
	if err := os.Mkdir(spool, 0o755); err != nil {
		t.Fatal(err)
	}
	base := version.Reserve(len(rows))
	vers := make([]uint64, len(rows))
	for i := range vers {
		vers[i] = base + uint64(i)
	}
	path, err := ingest.WriteDeadLetter(spool, rows, vers)
	if err != nil {
		t.Fatal(err)
	}
	return data, path, vers
}

func deadRows(id uuid.UUID, values ...kv.Value) []storage.Row {
	rows := make([]storage.Row, len(values))
	for i, v := range values {
		rows[i] = storage.Row{TenantID: uuid.New(), EntityID: id,
			Entry: kv.Entry{Ts: 1_700_000_000_000 + int64(i), Key: "k", Value: v}}
	}
	return rows
}

// TestDeadLetterCommandUsage: no command, an unknown one or the wrong number
// of files prints the usage and exits 2.
func TestDeadLetterCommandUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"bogus"}, {"list", "x"}, {"show"}, {"show", "a", "b"}, {"replay"}} {
		code, out, errOut := runDeadLetter([]string{"SLUICE_DATA_DIR=" + t.TempDir()}, args...)
		if code != 2 || out != "" || !strings.HasPrefix(errOut, "usage: sluice") {
			t.Errorf("deadletter %q: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
}

// TestDeadLetterCommandListShow: list names the file with its rows; show, by
// that name, prints each row as a line of JSON, values JSON has no number for
// as strings.
func TestDeadLetterCommandListShow(t *testing.T) {
	id := uuid.New()
	rows := deadRows(id, kv.LongValue(7), kv.DoubleValue(math.Inf(1)), kv.JSONValue(`{"a":`), kv.BoolValue(true))
	data, path, vers := spoolWithDeadLetter(t, rows)
	env := []string{"SLUICE_DATA_DIR=" + data}
	name := filepath.Base(path)

	code, out, errOut := runDeadLetter(env, "list")
	if code != 0 || errOut != "" {
		t.Fatalf("list: exit %d, %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !slices.Equal(strings.Fields(lines[2]), []string{name, "4", fileSize(t, path), "0"}) {
		t.Fatalf("list printed:\n%s", out)
	}

	code, out, errOut = runDeadLetter(env, "show", name)
	if code != 0 || errOut != "" {
		t.Fatalf("show: exit %d, %s", code, errOut)
	}
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("show printed:\n%s", out)
	}
	want := []string{"7", `"+Inf"`, `"{\"a\":"`, "true"}
	types := []string{"LONG", "DOUBLE", "JSON", "BOOLEAN"}
	for i, line := range lines {
		var got struct {
			EntityID uuid.UUID       `json:"entityId"`
			Key      string          `json:"key"`
			Ts       int64           `json:"ts"`
			Type     string          `json:"type"`
			Value    json.RawMessage `json:"value"`
			Version  uint64          `json:"version"`
		}
		if err := json.Unmarshal([]byte(line), &got); err != nil {
			t.Fatalf("line %d %q: %v", i, line, err)
		}
		if got.EntityID != id || got.Key != "k" || got.Ts != rows[i].Ts || got.Type != types[i] || string(got.Value) != want[i] || got.Version != vers[i] {
			t.Errorf("line %d: %s", i, line)
		}
	}
}

func fileSize(t *testing.T, path string) string {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return strconv.FormatInt(st.Size(), 10)
}

// TestDeadLetterCommandNoSpool: list without a spool folder says so.
func TestDeadLetterCommandNoSpool(t *testing.T) {
	code, _, errOut := runDeadLetter([]string{"SLUICE_DATA_DIR=" + t.TempDir()}, "list")
	if code != 1 || !strings.Contains(errOut, "no spool folder") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

// TestDeadLetterCommandReplayUnavailable: a replay while ClickHouse cannot be
// reached fails and leaves the spool folder as it was.
func TestDeadLetterCommandReplayUnavailable(t *testing.T) {
	data, path, _ := spoolWithDeadLetter(t, deadRows(uuid.New(), kv.LongValue(1)))
	before, _ := os.ReadFile(path)
	env := []string{"SLUICE_DATA_DIR=" + data, "CLICKHOUSE_ADDR=127.0.0.1:1", "REDIS_ADDR=127.0.0.1:1"}
	code, out, errOut := runDeadLetter(env, "replay", filepath.Base(path))
	if code != 1 || out != "" || !strings.Contains(errOut, "no file changed") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
		t.Fatal("the file changed")
	}
	if names, _ := filepath.Glob(filepath.Join(data, "spool", "*")); len(names) != 1 {
		t.Fatalf("spool folder holds %v", names)
	}
}

// testDatabase names a ClickHouse database of the test's own, dropped when
// it ends, and returns the name and a connection to the server.
func testDatabase(t *testing.T, prefix string) (string, ch.Conn, string) {
	t.Helper()
	addr := testenv.Service(t, "CLICKHOUSE_ADDR")[0]
	var b [6]byte
	rand.Read(b[:])
	db := prefix + hex.EncodeToString(b[:])
	conn, err := ch.Open(&ch.Options{Addr: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db)
		conn.Close()
	})
	return addr, conn, db
}

// TestDeadLetterCommandReplayClickHouse replays a file into a real ClickHouse
// with the node's configuration variables: the target is printed, the rows
// are stored in CLICKHOUSE_DATABASE and the file is renamed; replaying the
// name again fails, the file being gone.
func TestDeadLetterCommandReplayClickHouse(t *testing.T) {
	addr, conn, db := testDatabase(t, "sluice_test_deadletter_cli_")
	// The database as a node leaves it: a replay creates nothing.
	store, err := clickhouse.Open(context.Background(), clickhouse.Options{Addrs: []string{addr}, Database: db})
	if err != nil {
		t.Fatal(err)
	}
	store.Close()
	id := uuid.New()
	data, path, _ := spoolWithDeadLetter(t, deadRows(id, kv.LongValue(1), kv.StringValue("two"), kv.DoubleValue(3.5)))
	env := []string{"SLUICE_DATA_DIR=" + data, "CLICKHOUSE_ADDR=" + addr, "CLICKHOUSE_DATABASE=" + db, "REDIS_ADDR=127.0.0.1:1"}

	code, out, errOut := runDeadLetter(env, "replay", path)
	target := "replaying into ClickHouse at " + addr + ", database " + db + "\n"
	if code != 0 || errOut != "" || !strings.HasPrefix(out, target) || !strings.Contains(out, "3 of 3 rows written") {
		t.Fatalf("replay: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, err := os.Stat(path + ".replayed"); err != nil {
		t.Fatal(err)
	}
	var n uint64
	if err := conn.QueryRow(context.Background(), "SELECT count() FROM "+db+".telemetry FINAL WHERE entity_id = toUUID(?)", id.String()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Fatalf("%d rows in ClickHouse, want 3", n)
	}
	if code, _, errOut := runDeadLetter(env, "replay", path); code != 1 || errOut == "" {
		t.Fatalf("second replay: exit %d, stderr %q", code, errOut)
	}
	// The renamed file is refused by name: replayed already.
	if code, _, errOut := runDeadLetter(env, "replay", path+".replayed"); code != 1 || !strings.Contains(errOut, "replayed already") {
		t.Fatalf("replay of the .replayed file: exit %d, stderr %q", code, errOut)
	}
	if _, err := os.Stat(path + ".replayed.replayed"); !os.IsNotExist(err) {
		t.Fatalf("the replayed file was replayed again: %v", err)
	}
}

// TestDeadLetterCommandReplayNoDatabase: a replay into a database that does
// not exist (a wrong CLICKHOUSE_DATABASE) fails, naming the address and the
// database, creates nothing and changes no file.
func TestDeadLetterCommandReplayNoDatabase(t *testing.T) {
	addr, conn, db := testDatabase(t, "sluice_test_deadletter_nodb_")
	data, path, _ := spoolWithDeadLetter(t, deadRows(uuid.New(), kv.LongValue(1)))
	before, _ := os.ReadFile(path)
	env := []string{"SLUICE_DATA_DIR=" + data, "CLICKHOUSE_ADDR=" + addr, "CLICKHOUSE_DATABASE=" + db, "REDIS_ADDR=127.0.0.1:1"}
	code, out, errOut := runDeadLetter(env, "replay", path)
	if code != 1 || out != "" || !strings.Contains(errOut, "no file changed") ||
		!strings.Contains(errOut, addr) || !strings.Contains(errOut, db) || !strings.Contains(errOut, "no database") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	var n uint64
	if err := conn.QueryRow(context.Background(), "SELECT count() FROM system.databases WHERE name = ?", db).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("the replay created the database %s", db)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
		t.Fatal("the file changed")
	}
	if names, _ := filepath.Glob(filepath.Join(data, "spool", "*")); len(names) != 1 {
		t.Fatalf("spool folder holds %v", names)
	}
}

// TestDeadLetterCommandReplayEmptyDatabase: a database that exists without
// Sluice's tables (another application's, or one created by hand) is
// refused the same way, and left without tables.
func TestDeadLetterCommandReplayEmptyDatabase(t *testing.T) {
	addr, conn, db := testDatabase(t, "sluice_test_deadletter_empty_")
	if err := conn.Exec(context.Background(), "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	data, path, _ := spoolWithDeadLetter(t, deadRows(uuid.New(), kv.LongValue(1)))
	env := []string{"SLUICE_DATA_DIR=" + data, "CLICKHOUSE_ADDR=" + addr, "CLICKHOUSE_DATABASE=" + db, "REDIS_ADDR=127.0.0.1:1"}
	code, out, errOut := runDeadLetter(env, "replay", filepath.Base(path))
	if code != 1 || out != "" || !strings.Contains(errOut, db) || !strings.Contains(errOut, "no table telemetry") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	var n uint64
	if err := conn.QueryRow(context.Background(), "SELECT count() FROM system.tables WHERE database = ?", db).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("the replay created %d tables in %s", n, db)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
}

// TestDeadLetterCommandReplayOldSchema: a database a node of an earlier
// version left, its schema not migrated to this version's, is refused: the
// replay migrates nothing.
func TestDeadLetterCommandReplayOldSchema(t *testing.T) {
	addr, conn, db := testDatabase(t, "sluice_test_deadletter_old_")
	ctx := context.Background()
	for _, stmt := range []string{
		"CREATE DATABASE " + db,
		"CREATE TABLE " + db + ".telemetry (x UInt8) ENGINE = Memory",
		"CREATE TABLE " + db + ".telemetry_repeats (x UInt8) ENGINE = Memory",
		"CREATE TABLE " + db + ".schema_migrations (version UInt32, name String) ENGINE = Memory",
		"INSERT INTO " + db + ".schema_migrations SELECT toUInt32(1), 'telemetry history'",
	} {
		if err := conn.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	data, path, _ := spoolWithDeadLetter(t, deadRows(uuid.New(), kv.LongValue(1)))
	env := []string{"SLUICE_DATA_DIR=" + data, "CLICKHOUSE_ADDR=" + addr, "CLICKHOUSE_DATABASE=" + db, "REDIS_ADDR=127.0.0.1:1"}
	code, out, errOut := runDeadLetter(env, "replay", path)
	if code != 1 || out != "" || !strings.Contains(errOut, "schema version 1") || !strings.Contains(errOut, "no file changed") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM "+db+".schema_migrations").Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d migrations recorded (%v): the replay migrated", n, err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
}
