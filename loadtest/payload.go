package loadtest

import "strconv"

// PointsPerRow is the number of data points (key-values) in one row of AppendTelemetry.
const PointsPerRow = 4

// AppendTelemetry appends a ThingsBoard telemetry body to dst: for rows == 1 the
// object {"ts":ts,"values":{…}}, otherwise the array [{"ts","values"},…] of rows rows
// at ts, ts+1, … ms. Each row holds PointsPerRow values (a double, a long, a boolean,
// a string), the shape of the codec benchmarks' batch.
func AppendTelemetry(dst []byte, ts int64, rows int) []byte {
	if rows == 1 {
		return appendRow(dst, ts)
	}
	dst = append(dst, '[')
	for i := range rows {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendRow(dst, ts+int64(i))
	}
	return append(dst, ']')
}

func appendRow(dst []byte, ts int64) []byte {
	dst = append(dst, `{"ts":`...)
	dst = strconv.AppendInt(dst, ts, 10)
	dst = append(dst, `,"values":{"temperature":`...)
	dst = strconv.AppendInt(dst, 20+ts%10, 10)
	dst = append(dst, '.')
	dst = strconv.AppendInt(dst, ts%7, 10)
	dst = append(dst, `,"humidity":`...)
	dst = strconv.AppendInt(dst, 40+ts%50, 10)
	dst = append(dst, `,"active":true,"status":"ok"}}`...)
	return dst
}

// Telemetry returns a Generator that posts bodies of rows rows (AppendTelemetry),
// worker w to paths[w % len(paths)] (one device's telemetry path each, say). Request
// seq of worker w starts at base + (seq*connections + w)*rows ms, so the timestamps
// of a run never repeat, even when every worker posts as one device, and every point
// is a distinct (key, ts).
func Telemetry(paths []string, rows, connections int, base int64) Generator {
	return func(worker int, seq uint64, r *Request) {
		ts := base + (int64(seq)*int64(connections)+int64(worker))*int64(rows)
		r.Path = paths[worker%len(paths)]
		r.Body = AppendTelemetry(r.Body, ts, rows)
		r.Points = rows * PointsPerRow
	}
}
