package clickhouse

import "github.com/VictoriaMetrics/metrics"

// Insert metrics of the telemetry tables (history and latest values): how long a
// batch insert takes, how many rows went in, and how many inserts failed.
var (
	insertDuration = metrics.NewHistogram(`sluice_clickhouse_insert_duration_seconds`)
	insertedRows   = metrics.NewCounter(`sluice_clickhouse_inserted_rows_total`)
	insertErrors   = metrics.NewCounter(`sluice_clickhouse_insert_errors_total`)
	// reportRetries counts reports run again because a delivery raced their
	// FINAL reads (Report).
	reportRetries = metrics.NewCounter(`sluice_clickhouse_report_retries_total`)
)
