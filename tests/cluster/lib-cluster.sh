# SPDX-License-Identifier: MIT
# Helpers for the multi-node tests (bash; sourced after ../integration/lib.sh).
#
# A "cluster" here is NODES ckptd daemons on this machine, one per node,
# sharing one checkpoint root ($ROOT) and talking over libfabric
# (tcp;ofi_rxm) on 127.0.0.1 only. Node K has a node-local directory
# $T/node-K (its socket lives there; wiping it is what "the node was
# replaced" means) and its log in $T/ckptd-nK.log. A job of NODES *
# RANKS_PER_NODE ranks puts rank R on node R / RANKS_PER_NODE.
#
# Every test gets its own cluster id, so rendezvous files of other runs
# (or of a test that failed half-way) never mix in.

: "${NODES:=3}"
: "${RANKS_PER_NODE:=2}"
ROOT=$T/root
CLUSTER_ID="t-$TEST_NAME-$$-$RANDOM"
RENDEZVOUS=$ROOT/.cluster/$CLUSTER_ID
WORLD=$((NODES * RANKS_PER_NODE))
PROMQL=$(dirname "${BASH_SOURCE[0]}")/../integration/promql.py
# Options every node gets; a test may append to it before starting nodes.
CLUSTER_OPTS=(--keep-last 0 --peer-timeout-ms 2000)

node_dir() { echo "$T/node-$1"; }
node_sock() { echo "$T/node-$1/ckptd.sock"; }
# node_of RANK: the node the rank runs on.
node_of() { echo $(($1 / RANKS_PER_NODE)); }
# ranks_of NODE: the ranks on that node.
ranks_of() { seq $(($1 * RANKS_PER_NODE)) $((($1 + 1) * RANKS_PER_NODE - 1)); }

# node_start K [ckptd options...]: start node K's daemon (name nK, so
# ckptd_stop/ckptd_kill9/ckptd_alive/metrics_port of lib.sh work with it),
# wait until its socket exists.
node_start() {
	local k=$1 name=n$1 sock i
	shift
	sock=$(node_sock "$k")
	mkdir -p "$(node_dir "$k")" "$ROOT"
	rm -f "$sock" "$T/$name.metrics-port"
	echo "=== start $(date +%T.%3N): node $k $* ===" >>"$T/ckptd-$name.log"
	"$CKPTD" --config '' --root "$ROOT" --socket "$sock" --log-level debug \
		--metrics-listen 127.0.0.1:0 --metrics-port-file "$T/$name.metrics-port" \
		--nodes "$NODES" --node-index "$k" --cluster-id "$CLUSTER_ID" \
		--fabric-provider 'tcp;ofi_rxm' --fabric-address 127.0.0.1 \
		"${CLUSTER_OPTS[@]}" "$@" >>"$T/ckptd-$name.log" 2>&1 &
	CKPTD_PID[$name]=$!
	for i in $(seq 1 300); do
		[ -S "$sock" ] && [ -s "$T/$name.metrics-port" ] && return 0
		if ! kill -0 "${CKPTD_PID[$name]}" 2>/dev/null; then
			wait "${CKPTD_PID[$name]}"
			fail "ckptd of node $k exited with status $? during start-up"
		fi
		sleep 0.05
	done
	fail "ckptd of node $k: socket $sock did not appear within 15 s"
}

# cluster_start [ckptd options...]: start every node (same options), then
# wait until every daemon sees every other one up.
cluster_start() {
	local k
	for k in $(seq 0 $((NODES - 1))); do
		node_start "$k" "$@"
	done
	cluster_wait_whole
}

# metrics NODE: node NODE's /metrics text; status 1 when unreachable.
metrics() {
	python3 "$PROMQL" get "http://127.0.0.1:$(metrics_port "n$1")/metrics"
}

# metric NODE NAME [LABEL=VALUE...]: the sum of NAME's series on node NODE
# whose labels include every LABEL=VALUE given (0 when there is none).
# Label order and extra labels do not matter.
metric() {
	local k=$1 name=$2 text
	shift 2
	# "unreachable" compares unequal to every number (and fails -eq etc.).
	text=$(metrics "$k") || { echo unreachable; return 1; }
	awk -v name="$name" -v want="$*" '
		/^#/ { next }
		{
			series = $1; labels = ""
			i = index(series, "{")
			if (i) { labels = substr(series, i + 1); series = substr(series, 1, i - 1) }
			if (series != name) next
			n = split(want, w, " ")
			for (j = 1; j <= n; j++) {
				eq = index(w[j], "=")
				l = substr(w[j], 1, eq - 1) "=\"" substr(w[j], eq + 1) "\""
				if (!index("," labels, "," l ",") && !index("," labels, "," l "}")) next
			}
			sum += $2
		}
		END { printf "%.17g\n", sum + 0 }' <<<"$text"
}

# wait_metric NODE NAME LABELS OP VALUE SECS: until `metric NODE NAME
# LABELS` OP VALUE holds (OP: -eq -gt -ge -lt; integers), else fail.
wait_metric() {
	local k=$1 name=$2 labels=$3 op=$4 want=$5 secs=$6 i got
	for i in $(seq 1 $((secs * 5))); do
		# shellcheck disable=SC2086
		got=$(metric "$k" "$name" $labels)
		got=${got%.*}
		test "$got" "$op" "$want" 2>/dev/null && return 0
		sleep 0.2
	done
	fail "node $k: $name{$labels} is $got after $secs s, expected $op $want"
}

# peers_up NODE: how many other nodes NODE reports up.
peers_up() {
	local k=$1 j n=0 v
	for j in $(seq 0 $((NODES - 1))); do
		[ "$j" = "$k" ] && continue
		v=$(metric "$k" ckpt_peer_up node="$j")
		[ "${v%.*}" = 1 ] && n=$((n + 1))
	done
	echo "$n"
}

# cluster_wait_whole [SECS]: every running daemon reports every other node
# up (ckpt_peer_up{node="J"} 1), within SECS (30).
cluster_wait_whole() {
	local secs=${1:-30} i k ok
	for i in $(seq 1 $((secs * 4))); do
		ok=1
		for k in $(seq 0 $((NODES - 1))); do
			ckptd_alive "n$k" || fail "ckptd of node $k is not running"
			[ "$(peers_up "$k")" -eq $((NODES - 1)) ] || { ok=0; break; }
		done
		[ "$ok" = 1 ] && return 0
		sleep 0.25
	done
	for k in $(seq 0 $((NODES - 1))); do
		metrics "$k" | grep '^ckpt_peer' | sed "s/^/node $k: /" >&2
	done
	fail "the group of $NODES nodes was not whole within $secs s"
}

# crank_start LOGNAME RANK [ckpt-test-rank options...]: start rank RANK of
# the WORLD-rank job on its node's daemon (background, pid in $LAST_PID).
crank_start() {
	local name=$1 r=$2
	shift 2
	rank_start "$name" --socket "$(node_sock "$(node_of "$r")")" --rank "$r" --world "$WORLD" "$@"
}

# cluster_ranks LOGPREFIX "RANKS" [options...]: start the given ranks (log
# LOGPREFIX-R), their pids in CRANK_PID[R].
declare -A CRANK_PID=()
cluster_ranks() {
	local prefix=$1 r
	local -a ranks
	read -r -a ranks <<<"$2"
	shift 2
	for r in "${ranks[@]}"; do
		crank_start "$prefix-$r" "$r" "$@"
		CRANK_PID[$r]=$LAST_PID
	done
}

# cluster_wait LOGPREFIX "RANKS": those ranks (of cluster_ranks) must exit 0.
cluster_wait() {
	local prefix=$1 r
	local -a ranks
	read -r -a ranks <<<"$2"
	for r in "${ranks[@]}"; do
		rank_wait "${CRANK_PID[$r]}" "$prefix-$r"
	done
}

# run_cluster_ranks LOGPREFIX [options...]: all WORLD ranks, each on its
# node, concurrently; all must exit 0.
run_cluster_ranks() {
	local prefix=$1
	shift
	cluster_ranks "$prefix" "$(seq 0 $((WORLD - 1)) | tr '\n' ' ')" "$@"
	cluster_wait "$prefix" "$(seq 0 $((WORLD - 1)) | tr '\n' ' ')"
}

# wait_handed_over PREFIX STEP "RANKS" ["LIVE"]: wait up to 120 s until each
# rank in RANKS (logging to $T/PREFIX-R.log) has handed over STEP (SAVE_OK);
# the ranks in LIVE must not end meanwhile.
wait_handed_over() {
	local prefix=$1 step=$2 ranks=$3 live=${4:-} want n i r
	want=$(wc -w <<<"$ranks")
	for i in $(seq 1 1200); do
		n=0
		for r in $ranks; do
			grep -q "rank $r step $step accepted" "$T/$prefix-$r.log" 2>/dev/null && n=$((n + 1))
		done
		[ "$n" -eq "$want" ] && return 0
		for r in $live; do
			kill -0 "${CRANK_PID[$r]}" 2>/dev/null ||
				fail "rank $r ended while step $step was being handed over: $(cat "$T/$prefix-$r.log")"
		done
		sleep 0.1
	done
	fail "ranks $ranks did not all hand over step $step within 120 s"
}

# no_manifest_for JOBDIR STEP SECS: no MANIFEST.json for STEP appears
# during SECS seconds.
no_manifest_for() {
	local m i
	m=$(stepdir "$1" "$2")/MANIFEST.json
	for i in $(seq 1 $(($3 * 10))); do
		[ -e "$m" ] && fail "step $2 of $1 was committed ($m exists)"
		sleep 0.1
	done
}

# rejected NODE: ckpt_peer_rejected_total summed over reasons on NODE.
rejected() { metric "$1" ckpt_peer_rejected_total; }

# cluster_train_wrapper: from now on lib-train.sh's train_run/train_start
# start each MPI rank on its node's daemon: CKPT_TRAIN becomes a wrapper
# that sets CKPT_SOCKET from the rank's Open MPI world rank.
cluster_train_wrapper() {
	: "${CKPT_TRAIN:?CKPT_TRAIN must name the ckpt-train binary}"
	cat >"$T/train-on-node" <<WRAP
#!/bin/bash
r=\${OMPI_COMM_WORLD_RANK:?not started by mpirun}
export CKPT_SOCKET="$T/node-\$((r / $RANKS_PER_NODE))/ckptd.sock"
exec "$CKPT_TRAIN" "\$@"
WRAP
	chmod +x "$T/train-on-node"
	CKPT_TRAIN=$T/train-on-node
}
