package ingest

import "github.com/VictoriaMetrics/metrics"

// Write-path metrics, counted where the work happens. Points are data points (one
// key at one timestamp).
var (
	pointsAccepted    = metrics.NewCounter(`sluice_points_accepted_total`) // durable and acknowledged
	pointsFailed      = metrics.NewCounter(`sluice_points_rejected_total{reason="storage"}`)
	pointsOverloaded  = metrics.NewCounter(`sluice_points_rejected_total{reason="queue_full"}`)
	batchRows         = metrics.NewHistogram(`sluice_ingest_batch_rows`)
	batchDuration     = metrics.NewHistogram(`sluice_ingest_commit_duration_seconds`)
	spoolDelivered    = metrics.NewCounter(`sluice_spool_delivered_rows_total`)
	spoolDeliverError = metrics.NewCounter(`sluice_spool_delivery_errors_total`)
	spoolDamaged      = metrics.NewCounter(`sluice_spool_damaged_segments_total`) // found at start: the records in damaged bytes are not delivered
	spoolDeadLetter   = metrics.NewCounter(`sluice_spool_dead_letter_rows_total`) // refused by the history store for themselves, moved to a dead-letter file
	spoolFull         = metrics.NewCounter(`sluice_points_rejected_total{reason="spool_full"}`)
)
