package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/config"
	"github.com/sluice-iot/sluice/ingest"
	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/node"
	"github.com/sluice-iot/sluice/storage/clickhouse"
)

const deadLetterUsage = `usage: sluice [-config FILE] deadletter COMMAND

The rows ClickHouse kept refusing, which the spool moved to dead-letter files
in its folder (SLUICE_DATA_DIR/spool), with the node's configuration. It may
run while the node runs.

  list             the dead-letter files, their rows, sizes and damaged records
  show FILE        the rows of FILE as JSON lines
  replay FILE...   write the rows of each FILE to ClickHouse; rows it still
                   refuses go to a new dead-letter file; FILE is renamed to
                   FILE.replayed. It creates nothing in ClickHouse: the
                   database must hold the tables of a node of this version.

FILE is a name in the spool folder, or a path.
`

// deadletter runs `sluice deadletter args…` with the configuration file
// configPath (as run takes it) and the environment environ, and returns the
// exit code: 2 for a wrong command line, 1 for a failure.
func deadletter(configPath string, args, environ []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || !validArgs(args[0], len(args)-1) {
		fmt.Fprint(stderr, deadLetterUsage)
		return 2
	}
	cfg, err := config.Load(configFile(configPath), environ)
	if err != nil {
		fmt.Fprintf(stderr, "sluice: bad configuration:\n%v\n", err)
		return 1
	}
	// Where the node keeps its spool (node/backend.go).
	dir := filepath.Join(cfg.Data.Dir, "spool")
	switch args[0] {
	case "list":
		err = listDeadLetters(dir, stdout)
	case "show":
		err = showDeadLetter(inSpool(dir, args[1]), stdout, stderr)
	case "replay":
		err = replayDeadLetters(cfg, dir, args[1:], stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "sluice:", err)
		return 1
	}
	return 0
}

// validArgs reports whether cmd is a deadletter command that takes n files.
func validArgs(cmd string, n int) bool {
	switch cmd {
	case "list":
		return n == 0
	case "show":
		return n == 1
	case "replay":
		return n > 0
	}
	return false
}

// configFile is the configuration file run would read: path, else the
// default one when it exists.
func configFile(path string) string {
	if path == "" {
		if _, err := os.Stat(defaultConfigPath); err == nil {
			return defaultConfigPath
		}
	}
	return path
}

// inSpool resolves a FILE argument: a bare name is one in the spool folder,
// as list prints them.
func inSpool(dir, file string) string {
	if filepath.Base(file) == file {
		return filepath.Join(dir, file)
	}
	return file
}

func listDeadLetters(dir string, stdout io.Writer) error {
	files, err := ingest.ListDeadLetters(dir)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no spool folder at %s (the node keeps one only with ClickHouse, CLICKHOUSE_ADDR, in SLUICE_DATA_DIR)", dir)
	}
	if err != nil {
		return err
	}
	if len(files) == 0 {
		fmt.Fprintf(stdout, "no dead-letter files in %s\n", dir)
		return nil
	}
	fmt.Fprintf(stdout, "dead-letter files in %s:\n", dir)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FILE\tROWS\tBYTES\tDAMAGED")
	for _, f := range files {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", f.Name, f.Rows, f.Bytes, f.Damaged)
	}
	return tw.Flush()
}

// shownRow is a row as show prints it.
type shownRow struct {
	TenantID uuid.UUID `json:"tenantId"`
	EntityID uuid.UUID `json:"entityId"`
	Key      string    `json:"key"`
	Ts       int64     `json:"ts"`
	Type     string    `json:"type"`
	Value    any       `json:"value"`
	Version  uint64    `json:"version"`
}

func showDeadLetter(path string, stdout, stderr io.Writer) error {
	rows, vers, damaged, err := ingest.ReadDeadLetter(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	for i, r := range rows {
		row := shownRow{TenantID: r.TenantID, EntityID: r.EntityID, Key: r.Key, Ts: r.Ts,
			Type: r.Value.Type.String(), Value: jsonValue(r.Value), Version: vers[i]}
		if err := enc.Encode(row); err != nil {
			return fmt.Errorf("cannot print row %d of %s: %w", i, path, err)
		}
	}
	if damaged > 0 {
		fmt.Fprintf(stderr, "sluice: %s: %d damaged records could not be read\n", path, damaged)
	}
	return nil
}

// jsonValue is v for encoding/json. A JSON value is its text as a string: a
// refused one may not even be valid JSON. NaN and infinities, which JSON has
// no numbers for and which may be why a row was refused, are strings too.
func jsonValue(v kv.Value) any {
	switch v.Type {
	case kv.Bool:
		return v.Bool
	case kv.Long:
		return v.Long
	case kv.Double:
		if math.IsNaN(v.Double) || math.IsInf(v.Double, 0) {
			return strconv.FormatFloat(v.Double, 'g', -1, 64)
		}
		return v.Double
	}
	return v.Str
}

// replayDeadLetters replays each file into the configured ClickHouse, opened
// as the node opens it but without waiting for it, and without creating or
// migrating anything: a database that is not one a node of this version
// uses (a wrong CLICKHOUSE_DATABASE, or the defaults of a missing
// configuration file) is refused rather than created empty and written to.
// A replay while ClickHouse is unavailable fails and changes no file. The
// target is printed before anything is written.
func replayDeadLetters(cfg config.Config, dir string, files []string, stdout io.Writer) error {
	if !cfg.Production() {
		return errors.New("no ClickHouse configured (CLICKHOUSE_ADDR): there is nothing to replay into")
	}
	// Interrupted, a replay stops as when ClickHouse goes away: no file changed.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	opts := node.ClickHouseOptions(cfg)
	opts.NoMigrate = true
	target := clickHouseTarget(opts)
	ch, err := clickhouse.Open(ctx, opts)
	if err != nil {
		return fmt.Errorf("cannot use %s (CLICKHOUSE_ADDR, CLICKHOUSE_DATABASE); no file changed: %w", target, err)
	}
	defer ch.Close()
	fmt.Fprintf(stdout, "replaying into %s\n", target)
	var failed []error
	for _, f := range files {
		path := inSpool(dir, f)
		res, err := ingest.ReplayDeadLetter(ctx, ch, path)
		if err != nil {
			failed = append(failed, err)
			continue
		}
		printReplayed(stdout, path, res)
	}
	return errors.Join(failed...)
}

// clickHouseTarget names where a replay writes, as opts (the node's) say.
func clickHouseTarget(opts clickhouse.Options) string {
	db := opts.Database
	if db == "" {
		db = "sluice" // clickhouse.Open's default
	}
	t := fmt.Sprintf("ClickHouse at %s, database %s", strings.Join(opts.Addrs, ","), db)
	if opts.Cluster != "" {
		t += ", cluster " + opts.Cluster
	}
	return t
}

func printReplayed(w io.Writer, path string, res ingest.Replayed) {
	fmt.Fprintf(w, "%s: %d of %d rows written", path, res.Written, res.Rows)
	if res.Refused > 0 {
		fmt.Fprintf(w, ", %d still refused, moved to %s", res.Refused, res.RefusedTo)
	}
	if res.Damaged > 0 {
		fmt.Fprintf(w, ", %d damaged records not read (kept in the renamed file)", res.Damaged)
	}
	fmt.Fprintf(w, "; renamed to %s\n", res.RenamedTo)
}
