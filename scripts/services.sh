#!/bin/sh
# services.sh installs (when missing) and starts (when not answering) the ClickHouse
# and Redis servers the storage/clickhouse and storage/redis tests run against, waits
# until both answer, starts a second ClickHouse server that makes with the first a
# two-shard cluster for the ClickHouse cluster tests, starts the 3-master Redis
# Cluster of the cluster tests (scripts/redis-cluster.sh), then prints the
# environment the tests read:
#
#   eval "$(scripts/services.sh)" && go test ./storage/...
#
# Idempotent: a second run with everything up only prints the exports. Installing
# needs root (apt-get); progress goes to stderr so stdout stays eval-able.
set -eu

CH_PORT=9000
REDIS_PORT=6379
# The ClickHouse test cluster: shard 1 is the server on CH_PORT, shard 2 a second
# server on CH_SHARD2_PORT with its own data folder. No ZooKeeper is needed: the
# tables are not Replicated and Sluice does not use ON CLUSTER.
CH_CLUSTER=sluice_test_cluster
CH_SHARD2_PORT=9001
CH_SHARD2_DIR=/var/lib/clickhouse-sluice-shard2
CH_SHARD2_CONFIG=/etc/clickhouse-sluice-shard2/config.xml
CH_CLUSTER_CONFIG=/etc/clickhouse-server/config.d/sluice-test-cluster.xml
CH_THREADS_CONFIG=/etc/clickhouse-server/users.d/sluice-threads.xml
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

# remote_servers prints the definition of the test cluster.
remote_servers() {
	cat <<EOF
    <remote_servers>
        <$CH_CLUSTER>
            <shard><replica><host>127.0.0.1</host><port>$CH_PORT</port></replica></shard>
            <shard><replica><host>127.0.0.1</host><port>$CH_SHARD2_PORT</port></replica></shard>
        </$CH_CLUSTER>
    </remote_servers>
EOF
}

# write_file PATH writes stdin to PATH as root, unless PATH already holds it.
write_file() {
	content=$(cat)
	[ -f "$1" ] && [ "$(cat "$1")" = "$content" ] && return 0
	as_root mkdir -p "$(dirname "$1")"
	printf '%s\n' "$content" | as_root tee "$1" >/dev/null
}

# cluster_config tells the server on CH_PORT about the test cluster. A running
# server rereads config.d within seconds, so it needs no restart.
cluster_config() {
	{
		echo '<?xml version="1.0"?>'
		echo '<yandex>'
		remote_servers
		echo '</yandex>'
	} | write_file "$CH_CLUSTER_CONFIG"
}

# threads_config lets a query use every CPU. 18.16 defaults max_threads to the
# number of physical cores, which on a VM whose vCPUs are SMT siblings is half of
# them (1 on a 2-vCPU machine), and a report then runs on one core
# (configs/clickhouse/users.d has the same setting for production; both servers
# read users.xml, and a running server rereads users.d within seconds).
threads_config() {
	cat <<EOF | write_file "$CH_THREADS_CONFIG"
<?xml version="1.0"?>
<yandex>
    <profiles><default><max_threads>$(nproc)</max_threads></default></profiles>
</yandex>
EOF
}

# shard2_config is the whole configuration of the second server: native protocol
# on loopback only, small caches.
shard2_config() {
	cat <<EOF | write_file "$CH_SHARD2_CONFIG"
<?xml version="1.0"?>
<yandex>
    <logger>
        <level>warning</level>
        <log>/var/log/clickhouse-server/sluice-shard2.log</log>
        <errorlog>/var/log/clickhouse-server/sluice-shard2.err.log</errorlog>
        <size>100M</size>
        <count>2</count>
    </logger>
    <listen_host>127.0.0.1</listen_host>
    <tcp_port>$CH_SHARD2_PORT</tcp_port>
    <path>$CH_SHARD2_DIR/</path>
    <tmp_path>$CH_SHARD2_DIR/tmp/</tmp_path>
    <user_files_path>$CH_SHARD2_DIR/user_files/</user_files_path>
    <users_config>/etc/clickhouse-server/users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <mark_cache_size>268435456</mark_cache_size>
    <uncompressed_cache_size>268435456</uncompressed_cache_size>
$(remote_servers)
</yandex>
EOF
}

shard2_up() { clickhouse-client --port "$CH_SHARD2_PORT" -q 'SELECT 1' >/dev/null 2>&1; }

start_clickhouse_shard2() {
	shard2_up && return 0
	log "starting the second clickhouse-server (port $CH_SHARD2_PORT)"
	as_root mkdir -p /var/log/clickhouse-server "$CH_SHARD2_DIR"
	as_root chown -R clickhouse:clickhouse /var/log/clickhouse-server "$CH_SHARD2_DIR"
	cmd="nohup clickhouse-server --config-file=$CH_SHARD2_CONFIG >/dev/null 2>&1 &"
	if [ "$(id -u)" -eq 0 ]; then
		su -s /bin/sh clickhouse -c "$cmd"
	else
		sudo -u clickhouse sh -c "$cmd"
	fi
}

# cluster_known: both servers list the two shards of the test cluster.
cluster_known() {
	for p in "$CH_PORT" "$CH_SHARD2_PORT"; do
		n=$(clickhouse-client --port "$p" -q "SELECT count() FROM system.clusters WHERE cluster = '$CH_CLUSTER'" 2>/dev/null) || return 1
		[ "$n" = 2 ] || return 1
	done
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
cluster_config
threads_config
shard2_config
start_clickhouse
start_clickhouse_shard2
start_redis
wait_for clickhouse clickhouse_up
wait_for "the second clickhouse" shard2_up
wait_for "the clickhouse test cluster" cluster_known
wait_for redis redis_up
log "clickhouse, its test cluster and redis are up"
echo "export CLICKHOUSE_ADDR=127.0.0.1:$CH_PORT"
# The test cluster: its servers (the first takes the queries) and its name.
echo "export CLICKHOUSE_CLUSTER_ADDRS=127.0.0.1:$CH_PORT,127.0.0.1:$CH_SHARD2_PORT"
echo "export CLICKHOUSE_TEST_CLUSTER=$CH_CLUSTER"
echo "export REDIS_ADDR=127.0.0.1:$REDIS_PORT"
# Last, so its export line follows the two above.
"$(dirname "$0")/redis-cluster.sh"
