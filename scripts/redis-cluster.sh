#!/bin/sh
# redis-cluster.sh starts (when not answering) a 3-master Redis Cluster on loopback
# ports 7001-7003 for the storage/redis and notify cluster tests, forms the cluster
# when it is not formed yet, waits until it reports cluster_state:ok, then prints
# the environment the tests read:
#
#   eval "$(scripts/redis-cluster.sh)" && go test ./storage/redis ./notify
#
# scripts/services.sh calls it last. Idempotent: a second run with the cluster up
# only prints the export. The nodes keep no data (no RDB, no AOF); their cluster
# configuration lives under /tmp/sluice-redis-cluster, so a restart after a
# reboot rejoins the same cluster. Progress goes to stderr so stdout stays
# eval-able. Needs redis-server and redis-cli (scripts/services.sh installs them).
set -eu

PORTS="7001 7002 7003"
HOST=127.0.0.1
DIR=${SLUICE_REDIS_CLUSTER_DIR:-/tmp/sluice-redis-cluster}
WAIT_SECONDS=${SERVICES_WAIT_SECONDS:-60}

log() { echo "redis-cluster: $*" >&2; }

for cmd in redis-server redis-cli; do
	if ! command -v "$cmd" >/dev/null 2>&1; then
		log "$cmd is missing: run scripts/services.sh (it installs Redis)"
		exit 1
	fi
done

cli() {
	port=$1
	shift
	redis-cli -h "$HOST" -p "$port" "$@" 2>/dev/null
}

node_up() { [ "$(cli "$1" ping)" = PONG ]; }

# info_field PORT FIELD prints FIELD of CLUSTER INFO on PORT (empty when down).
info_field() {
	cli "$1" cluster info | tr -d '\r' | sed -n "s/^$2://p"
}

all_up() {
	for p in $PORTS; do node_up "$p" || return 1; done
}

cluster_ok() {
	for p in $PORTS; do
		[ "$(info_field "$p" cluster_state)" = ok ] || return 1
	done
}

# formed: every slot is assigned and every node knows the other two.
formed() {
	for p in $PORTS; do
		[ "$(info_field "$p" cluster_slots_assigned)" = 16384 ] || return 1
		[ "$(info_field "$p" cluster_known_nodes)" = 3 ] || return 1
	done
}

wait_for() {
	name=$1
	check=$2
	i=0
	until $check; do
		i=$((i + 1))
		if [ "$i" -gt "$((WAIT_SECONDS * 5))" ]; then
			log "$name within ${WAIT_SECONDS}s failed; logs in $DIR"
			exit 1
		fi
		sleep 0.2
	done
}

mkdir -p "$DIR"
for p in $PORTS; do
	node_up "$p" && continue
	log "starting redis-server on $HOST:$p"
	redis-server --port "$p" --bind "$HOST" --cluster-enabled yes \
		--cluster-config-file "$DIR/nodes-$p.conf" --dir "$DIR" \
		--logfile "$DIR/redis-$p.log" --daemonize yes --save "" --appendonly no >&2
done
wait_for "starting the nodes" all_up

if ! formed; then
	# A half-formed cluster (an interrupted create, a node whose config was lost)
	# cannot be completed by --cluster create: reset every node to an empty,
	# clusterless one first. The nodes hold only test data.
	log "forming the cluster"
	for p in $PORTS; do
		cli "$p" flushall >/dev/null || true
		cli "$p" cluster reset hard >/dev/null
	done
	# shellcheck disable=SC2046
	redis-cli --cluster create $(for p in $PORTS; do echo "$HOST:$p"; done) \
		--cluster-replicas 0 --cluster-yes >&2
fi
wait_for "reaching cluster_state:ok" cluster_ok
log "cluster is up"
addrs=""
for p in $PORTS; do addrs="$addrs${addrs:+,}$HOST:$p"; done
echo "export REDIS_CLUSTER_ADDRS=$addrs"
