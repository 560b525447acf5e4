#!/bin/sh
# services.sh installs (when missing) and starts (when not answering) the ClickHouse
# and Redis servers the storage/clickhouse and storage/redis tests run against, waits
# until both answer, starts the 3-master Redis Cluster of the cluster tests
# (scripts/redis-cluster.sh), then prints the environment the tests read:
#
#   eval "$(scripts/services.sh)" && go test ./storage/...
#
# Idempotent: a second run with everything up only prints the exports. Installing
# needs root (apt-get); progress goes to stderr so stdout stays eval-able.
set -eu

CH_PORT=9000
REDIS_PORT=6379
WAIT_SECONDS=${SERVICES_WAIT_SECONDS:-60}

log() { echo "services: $*" >&2; }

as_root() {
	if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

install_missing() {
	pkgs=""
	command -v clickhouse-server >/dev/null 2>&1 || pkgs="$pkgs clickhouse-server"
	command -v clickhouse-client >/dev/null 2>&1 || pkgs="$pkgs clickhouse-client"
	command -v redis-server >/dev/null 2>&1 || pkgs="$pkgs redis-server"
	command -v redis-cli >/dev/null 2>&1 || pkgs="$pkgs redis-tools"
	[ -z "$pkgs" ] && return 0
	log "installing$pkgs"
	as_root apt-get update -qq >&2
	# shellcheck disable=SC2086
	DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq $pkgs >&2
}

clickhouse_up() { clickhouse-client --port "$CH_PORT" -q 'SELECT 1' >/dev/null 2>&1; }
redis_up() { [ "$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null)" = PONG ]; }

start_clickhouse() {
	clickhouse_up && return 0
	log "starting clickhouse-server"
	# The Debian package does not start it without systemd; run it as its own user.
	as_root mkdir -p /var/log/clickhouse-server /var/lib/clickhouse
	as_root chown -R clickhouse:clickhouse /var/log/clickhouse-server /var/lib/clickhouse
	if [ "$(id -u)" -eq 0 ]; then
		su -s /bin/sh clickhouse -c 'nohup clickhouse-server --config-file=/etc/clickhouse-server/config.xml >/dev/null 2>&1 &'
	else
		sudo -u clickhouse sh -c 'nohup clickhouse-server --config-file=/etc/clickhouse-server/config.xml >/dev/null 2>&1 &'
	fi
}

start_redis() {
	redis_up && return 0
	log "starting redis-server"
	redis-server --daemonize yes --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no >&2
}

wait_for() {
	name=$1
	check=$2
	i=0
	until $check; do
		i=$((i + 1))
		if [ "$i" -gt "$((WAIT_SECONDS * 5))" ]; then
			log "$name did not answer within ${WAIT_SECONDS}s"
			exit 1
		fi
		sleep 0.2
	done
}

install_missing
start_clickhouse
start_redis
wait_for clickhouse clickhouse_up
wait_for redis redis_up
log "clickhouse and redis are up"
echo "export CLICKHOUSE_ADDR=127.0.0.1:$CH_PORT"
echo "export REDIS_ADDR=127.0.0.1:$REDIS_PORT"
# Last, so its export line follows the two above.
"$(dirname "$0")/redis-cluster.sh"
