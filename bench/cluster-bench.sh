#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# cluster-bench: ckptd's multi-node mode, side by side in one run, on one
# host (each "node" is a ckptd with its own socket and directory, all of
# them sharing one checkpoint root and talking over libfabric tcp;ofi_rxm
# on 127.0.0.1).
#
#  1. Commit latency for 2, 4 and 8 daemons (2 ranks per daemon, small
#     shards, --wait), against one daemon holding all the ranks of the same
#     job (no peer link): the median of the leader's last_vote_seconds (the
#     last vote arriving at the leader .. manifest durable and commit
#     announced), of its seconds (step opened at the leader .. committed),
#     and of what the ranks see from save to committed: with --wait every
#     save of ckpt-test-rank begins right after the previous step's outcome,
#     so the time between two "committed" lines of a rank (time-stamped by
#     this script as they are printed) is the rank's save .. committed. The
#     first step of every run warms up and is left out.
#  2. Partner-copy bandwidth against raw libfabric: 2 daemons, 1 rank each,
#     one shard of --copy-bytes per rank; node 0's rank is copied into
#     node 1's partner memory (node 0 gets 1 MiB of partner memory, so it
#     refuses node 1's copy and the copy runs one way, as fabric-bench
#     does); bytes / seconds of ckptd's "partner copy sent" line, against
#     fabric-bench with the same bytes, 1 MiB pieces, 8 in flight, tagged.
#     Every repetition runs one of each in turn, after two untimed steps
#     (the partner faults in fresh memory for those; later copies reuse
#     the buffer a newer commit freed, as periodic checkpoints do).
#  3. Restore of a lost node: 3 daemons, 2 ranks each, --restore-bytes per
#     rank; one step committed, node 1's daemon killed (SIGKILL) and
#     replaced by a fresh one, the wall clock of node 1's two ranks
#     restoring in parallel (ckpt-test-rank --restore latest, every byte
#     checked) from node 2's memory (tier partner); then node 1 and node 2
#     killed and replaced, so nothing is in memory any more, and the same
#     restore from the root (tier root). The page cache is dropped (as
#     root) before each restore.
#
# Output: human-readable lines, one JSON line per measurement (starting
# with '{"bench":"cluster"'), and a Markdown table at the end. The load
# average is printed with every measurement: the figures mean little on a
# busy host. Everything lives in DIR/cluster-bench-PID (removed at the end
# unless --keep, kept on failure); every daemon started is stopped on exit.
set -euo pipefail
export LC_ALL=C # EPOCHREALTIME and printf with a decimal point

usage() {
	cat <<'USAGE'
usage: bench/cluster-bench.sh [options]
  --build DIR          meson build directory (default: build); the binaries
                       below default to DIR/ckptd/ckptd,
                       DIR/tests/integration/ckpt-test-rank and
                       DIR/bench/fabric-bench
  --ckptd PATH         ckptd binary
  --rank PATH          ckpt-test-rank binary
  --fabric-bench PATH  fabric-bench binary
  --dir DIR            scratch space: the checkpoint roots and logs go to
                       DIR/cluster-bench-PID/ (default: $TMPDIR or /tmp)
  --reps N             repetitions of every measurement (default 3)
  --only LIST          run only these parts: commit,copy,restore (default all)
  --daemons LIST       daemon counts for the commit latency (default 2,4,8)
  --steps N            steps counted per commit-latency run (default 10;
                       one more is saved first to warm up)
  --copy-bytes SIZE    shard per rank for the partner copy (default 512M)
  --restore-bytes SIZE state per rank for the restore, in 4 tensors
                       (default 256M)
  --peer-timeout-ms MS ckptd's peer_timeout_ms (default 10000)
  --no-drop-caches     do not drop the page cache before the restores
  --keep               keep DIR/cluster-bench-PID
  -h, --help           show this help
SIZE: a number with an optional K, M or G (powers of 1024).
USAGE
}

build=build
ckptd=
rankbin=
fabric=
dir=${TMPDIR:-/tmp}
reps=3
only=commit,copy,restore
daemons_list=2,4,8
steps=10
copy_bytes=512M
restore_bytes=256M
peer_timeout=10000
drop=1
keep=0
while [ $# -gt 0 ]; do
	case $1 in
	--build) build=$2; shift 2 ;;
	--ckptd) ckptd=$2; shift 2 ;;
	--rank) rankbin=$2; shift 2 ;;
	--fabric-bench) fabric=$2; shift 2 ;;
	--dir) dir=$2; shift 2 ;;
	--reps) reps=$2; shift 2 ;;
	--only) only=$2; shift 2 ;;
	--daemons) daemons_list=$2; shift 2 ;;
	--steps) steps=$2; shift 2 ;;
	--copy-bytes) copy_bytes=$2; shift 2 ;;
	--restore-bytes) restore_bytes=$2; shift 2 ;;
	--peer-timeout-ms) peer_timeout=$2; shift 2 ;;
	--no-drop-caches) drop=0; shift ;;
	--keep) keep=1; shift ;;
	-h|--help) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
done
: "${ckptd:=$build/ckptd/ckptd}"
: "${rankbin:=$build/tests/integration/ckpt-test-rank}"
: "${fabric:=$build/bench/fabric-bench}"

die() { echo "cluster-bench: $*" >&2; exit 1; }
say() { echo "cluster-bench: $*"; }

# to_bytes SIZE: bytes of a size with an optional K/M/G (KiB/MiB/GiB) unit.
to_bytes() {
	local s=$1 n u
	[[ $s =~ ^([0-9]+)([KkMmGg]?)(i?B)?$ ]] || die "not a size: $s"
	n=${BASH_REMATCH[1]}
	u=${BASH_REMATCH[2]}
	case $u in
	K|k) echo $((n << 10)) ;;
	M|m) echo $((n << 20)) ;;
	G|g) echo $((n << 30)) ;;
	*) echo "$n" ;;
	esac
}
posint() { [[ $2 =~ ^[1-9][0-9]*$ ]] || die "$1 must be a positive number: $2"; }
posint --reps "$reps"
posint --steps "$steps"
posint --peer-timeout-ms "$peer_timeout"
copy_b=$(to_bytes "$copy_bytes")
restore_b=$(to_bytes "$restore_bytes")
if [ "$copy_b" -lt 4096 ] || [ "$restore_b" -lt 16384 ]; then die "--copy-bytes must be >= 4K, --restore-bytes >= 16K"; fi
IFS=, read -ra daemon_counts <<<"$daemons_list"
for n in "${daemon_counts[@]}"; do posint --daemons "$n"; done
want() { [[ ,$only, == *,$1,* ]]; }
for p in ${only//,/ }; do
	case $p in commit|copy|restore) ;; *) die "--only: unknown part $p" ;; esac
done

for b in "$ckptd" "$rankbin"; do
	[ -x "$b" ] || die "$b not built (give --build DIR or the path)"
done
if want copy; then
	[ -x "$fabric" ] || die "$fabric not built (libfabric missing?)"
fi
command -v curl >/dev/null || die "curl not found (needed to read the daemons' metrics)"
[ -d "$dir" ] || die "$dir is not a directory"

mib() { awk -v b="$1" 'BEGIN { printf "%.0f MiB", b / 1048576 }'; }
# Disk: every commit-latency step is small; the copy keeps its steps
# (keep_last 2), the restore writes one step per repetition.
need=$((256 << 20))
if want copy; then need=$((need + 4 * copy_b)); fi
if want restore; then need=$((need + 6 * restore_b)); fi
free=$(($(df -Pk "$dir" | awk 'NR == 2 { print $4 }') * 1024))
[ "$free" -ge "$need" ] || die "$dir has $(mib "$free") free, needs $(mib "$need")"

work=$(cd "$dir" && pwd)/cluster-bench-$$
mkdir -p "$work"
results=$work/results
: >"$results"

# ---- processes -------------------------------------------------------------

declare -A DPID=()   # "CLUSTERDIR:K" -> pid of that node's daemon
declare -a RPIDS=()  # ranks started
cleanup() {
	local rc=$? p f
	set +e
	for p in "${RPIDS[@]}"; do
		kill -9 "$p" 2>/dev/null
	done
	for p in "${DPID[@]}"; do
		kill -9 "$p" 2>/dev/null
	done
	for p in "${RPIDS[@]}" "${DPID[@]}"; do
		wait "$p" 2>/dev/null
	done
	if [ "$rc" -ne 0 ]; then
		while IFS= read -r f; do
			echo "----- $f (last 15 lines) -----" >&2
			tail -n 15 "$f" >&2
		done < <(find "$work" -name '*.log' -newer "$results" -mmin -5 2>/dev/null | sort | tail -n 12)
		echo "cluster-bench: FAILED; files kept in $work" >&2
	elif [ "$keep" = 1 ]; then
		echo "cluster-bench: files kept in $work"
	else
		rm -rf "$work"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

load() { cut -d' ' -f1-3 /proc/loadavg; }
load1() { cut -d' ' -f1 /proc/loadavg; }

# node_start CL NODES K [ckptd options...]: start node K of the cluster in
# directory CL (root CL/root, socket CL/nK/sock, log CL/nK.log, appended
# across restarts; the node-local directory CL/nK is wiped first: a fresh
# node). Waits until the socket and the metrics port are there.
node_start() {
	local cl=$1 nodes=$2 k=$3 nd pid
	shift 3
	nd=$cl/n$k
	rm -rf "$nd"
	mkdir -p "$nd" "$cl/root"
	echo "=== start $(date +%T.%N): node $k of $nodes $* ===" >>"$cl/n$k.log"
	"$ckptd" --config '' --root "$cl/root" --socket "$nd/sock" --log-level info \
		--metrics-listen 127.0.0.1:0 --metrics-port-file "$nd/port" \
		--nodes "$nodes" --node-index "$k" --cluster-id "cb$$-$(basename "$cl")" \
		--fabric-provider 'tcp;ofi_rxm' --fabric-address 127.0.0.1 \
		--peer-timeout-ms "$peer_timeout" --keep-last 2 --slots-per-rank 1 \
		"$@" >>"$cl/n$k.log" 2>&1 &
	pid=$!
	DPID[$cl:$k]=$pid
	for _ in $(seq 1 600); do
		[ -S "$nd/sock" ] && [ -s "$nd/port" ] && return 0
		kill -0 "$pid" 2>/dev/null || die "ckptd node $k ($cl) exited at start"
		sleep 0.05
	done
	die "ckptd node $k ($cl) did not start within 30 s"
}

# node_kill9 CL K: SIGKILL node K's daemon (a lost node).
node_kill9() {
	local key=$1:$2
	kill -9 "${DPID[$key]}" 2>/dev/null || true
	wait "${DPID[$key]}" 2>/dev/null || true
	unset "DPID[$key]"
}

# cluster_stop CL: SIGTERM every daemon of CL, SIGKILL after 20 s.
cluster_stop() {
	local cl=$1 key
	for key in "${!DPID[@]}"; do
		[ "${key%:*}" = "$cl" ] && kill "${DPID[$key]}" 2>/dev/null
	done
	for key in "${!DPID[@]}"; do
		[ "${key%:*}" = "$cl" ] || continue
		for _ in $(seq 1 200); do
			kill -0 "${DPID[$key]}" 2>/dev/null || break
			sleep 0.1
		done
		kill -9 "${DPID[$key]}" 2>/dev/null || true
		wait "${DPID[$key]}" 2>/dev/null || true
		unset "DPID[$key]"
	done
}

# metrics CL K: node K's /metrics text.
metrics() { curl -sf --max-time 5 "http://127.0.0.1:$(cat "$1/n$2/port")/metrics"; }

# cluster_whole CL NODES: wait (60 s) until every daemon reports every
# other node up (ckpt_peer_up{node="J"} 1).
cluster_whole() {
	local cl=$1 nodes=$2 k up
	[ "$nodes" -gt 1 ] || return 0
	for _ in $(seq 1 240); do
		up=0
		for k in $(seq 0 $((nodes - 1))); do
			up=$((up + $(metrics "$cl" "$k" | grep -Ec '^ckpt_peer_up\{[^}]*\} 1$' || true)))
		done
		[ "$up" -eq $((nodes * (nodes - 1))) ] && return 0
		sleep 0.25
	done
	die "cluster $cl: the $nodes daemons did not all see each other within 60 s"
}

# stamp: prefix every line with the time it was read (seconds, µs).
stamp() {
	local l
	while IFS= read -r l; do
		printf '%s %s\n' "$EPOCHREALTIME" "$l"
	done
}

# rank_start LOG [ckpt-test-rank options...]: start one rank, its output
# time-stamped into LOG; pid in $RPID.
rank_start() {
	local log=$1
	shift
	"$rankbin" --timeout-ms 180000 "$@" > >(stamp >"$log") 2>&1 &
	RPID=$!
	RPIDS+=("$RPID")
}

# ranks_wait PID...: every rank must exit 0.
ranks_wait() {
	local p bad=0
	for p in "$@"; do
		wait "$p" || bad=1
	done
	[ "$bad" = 0 ] || die "a rank failed"
}

# wait_line FILE REGEX SECS: until a line of FILE matches.
wait_line() {
	local _
	for _ in $(seq 1 $(($3 * 10))); do
		grep -Eq "$2" "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	die "no line matching '$2' in $1 within $3 s"
}

drop_note=
drop_caches() {
	sync
	[ "$drop" = 1 ] || return 0
	if ! (echo 3 >/proc/sys/vm/drop_caches) 2>/dev/null; then
		[ -n "$drop_note" ] || say "could not drop the page cache (not root?): restores may read from it"
		drop_note="page cache NOT dropped"
		drop=0
	fi
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (!NR) { print "nan"; exit } ; print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# kv FILE KEY: every KEY=value of FILE's lines, one per line.
kv() { grep -o "[[:space:]]$2=[^[:space:]]*" "$1" | cut -d= -f2; }
fmt() { awk -v v="$1" -v f="$2" 'BEGIN { if (v == "nan" || v == "") print "n/a"; else printf f, v }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "nan" || b == "nan" || b == 0) print "nan"; else printf "%.3f", a / b }'; }
json_num() { if [ "$1" = nan ] || [ -z "$1" ]; then echo null; else echo "$1"; fi; }

say "ckptd $ckptd; ckpt-test-rank $rankbin; fabric-bench $fabric"
say "$(nproc) CPUs; $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo) memory; scratch $work; reps $reps"
say "load at start: $(load)  ($(uptime))"

# ---- 1. commit latency -----------------------------------------------------

# commit_run NODES RPN REP: one cluster of NODES daemons with RPN ranks
# each saving steps 1..steps+1 with --wait; appends step 2.. to the
# per-configuration sample files.
commit_run() {
	local nodes=$1 rpn=$2 rep=$3 world cl tag r k pids=() f
	world=$((nodes * rpn))
	tag=$nodes-$world
	cl=$work/commit-$tag-r$rep
	for k in $(seq 0 $((nodes - 1))); do
		node_start "$cl" "$nodes" "$k" --staging-bytes 256MiB --partner-memory 0
	done
	cluster_whole "$cl" "$nodes"
	for r in $(seq 0 $((world - 1))); do
		rank_start "$cl/rank-$r.log" --socket "$cl/n$((r / rpn))/sock" --job j --rank "$r" \
			--world "$world" --steps "$(seq -s, 1 $((steps + 1)))" --wait \
			--tensors 4 --min-bytes 16K --max-bytes 64K --seed $((rep + 1))
		pids+=("$RPID")
	done
	ranks_wait "${pids[@]}"
	for r in $(seq 0 $((world - 1))); do
		wait_line "$cl/rank-$r.log" ' done: ' 10
	done
	f=$cl/n0.log
	[ "$(grep -c 'coord: committed job=j ' "$f")" -eq $((steps + 1)) ] ||
		die "$cl: expected $((steps + 1)) commits in the leader's log"
	grep 'coord: committed job=j ' "$f" | grep -v ' step=1 ' >"$cl/commits"
	kv "$cl/commits" last_vote_seconds >>"$work/lv-$tag"
	kv "$cl/commits" seconds >>"$work/open-$tag"
	# The rank's save .. committed: between two "committed" lines of a rank.
	for r in $(seq 0 $((world - 1))); do
		awk '$4 == "step" && $6 == "committed" { if (prev != "") printf "%.6f\n", $1 - prev; prev = $1 }' \
			"$cl/rank-$r.log" >>"$work/rank-$tag"
	done
	cluster_stop "$cl"
	[ "$keep" = 1 ] || rm -rf "$cl/root"
}

declare -A C_LV C_OPEN C_RANK C_LOAD
if want commit; then
	say "1. commit latency: ${daemon_counts[*]} daemons x 2 ranks against 1 daemon x the same ranks;" \
		"4 tensors of 16-64 KiB per rank, $steps steps counted per run (+1 warm-up), --wait"
	for rep in $(seq 1 "$reps"); do
		for n in "${daemon_counts[@]}"; do
			w=$((n * 2))
			for cfg in "1 $w" "$n 2"; do
				read -r nn rpn <<<"$cfg"
				t0=$EPOCHREALTIME
				commit_run "$nn" "$rpn" "$rep"
				say "  rep $rep: $nn daemon(s) x $rpn ranks done in $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s (load $(load))"
				load1 >>"$work/load-$nn-$w"
			done
		done
	done
	for n in "${daemon_counts[@]}"; do
		w=$((n * 2))
		for nn in 1 "$n"; do
			tag=$nn-$w
			C_LV[$tag]=$(median <"$work/lv-$tag")
			C_OPEN[$tag]=$(median <"$work/open-$tag")
			C_RANK[$tag]=$(median <"$work/rank-$tag")
			C_LOAD[$tag]=$(median <"$work/load-$tag")
			ns=$(wc -l <"$work/lv-$tag")
			say "  $nn daemon(s), $w ranks: last vote -> committed $(fmt "${C_LV[$tag]}" '%.4f') s," \
				"leader step open -> committed $(fmt "${C_OPEN[$tag]}" '%.4f') s," \
				"rank save -> committed $(fmt "${C_RANK[$tag]}" '%.4f') s (medians of $ns steps; load $(fmt "${C_LOAD[$tag]}" '%.2f'))"
			printf '{"bench":"cluster","measure":"commit_latency","daemons":%s,"ranks":%s,"ranks_per_daemon":%s,"steps":%s,"reps":%s,"last_vote_seconds_median":%s,"leader_open_to_commit_seconds_median":%s,"rank_save_to_commit_seconds_median":%s,"load1_median":%s}\n' \
				"$nn" "$w" $((w / nn)) "$ns" "$reps" "$(json_num "${C_LV[$tag]}")" \
				"$(json_num "${C_OPEN[$tag]}")" "$(json_num "${C_RANK[$tag]}")" "${C_LOAD[$tag]}" |
				tee -a "$results"
		done
	done
fi

# ---- 2. partner copy against raw libfabric ---------------------------------

P_CK='' P_FB='' P_RATIO='' P_LOAD='' P_BYTES=''
if want copy; then
	cl=$work/copy
	slot=$((copy_b + (64 << 20)))
	say "2. partner copy: 2 daemons x 1 rank, one shard of $(mib "$copy_b") per rank;" \
		"node 0 -> node 1 (node 1: partner_memory $(mib $((2 * copy_b + (64 << 20))))), against fabric-bench"
	node_start "$cl" 2 0 --staging-bytes "$slot" --partner-memory 1MiB
	node_start "$cl" 2 1 --staging-bytes "$slot" --partner-memory $((2 * copy_b + (64 << 20)))
	cluster_whole "$cl" 2
	: >"$work/copy-ck"
	: >"$work/copy-fb"
	: >"$work/copy-load"
	# Steps 1 and 2 are not timed: the partner faults in fresh memory for
	# them. From step 3 on it reuses the buffer of the copy that the
	# newer commit dropped, as it does for every periodic checkpoint.
	pids=()
	for r in 0 1; do
		rank_start "$cl/rank-$r-warm.log" --socket "$cl/n$r/sock" --job j --rank "$r" --world 2 \
			--steps 1,2 --wait --tensors 1 --min-bytes "$copy_b" --max-bytes "$copy_b"
		pids+=("$RPID")
	done
	ranks_wait "${pids[@]}"
	wait_line "$cl/n0.log" "partner copy sent job=j step=2 rank=0 node=1 " 120
	for rep in $(seq 1 "$reps"); do
		step=$((rep + 2))
		pids=()
		for r in 0 1; do
			rank_start "$cl/rank-$r-s$step.log" --socket "$cl/n$r/sock" --job j --rank "$r" --world 2 \
				--steps "$step" --wait --tensors 1 --min-bytes "$copy_b" --max-bytes "$copy_b"
			pids+=("$RPID")
		done
		ranks_wait "${pids[@]}"
		wait_line "$cl/n0.log" "partner copy sent job=j step=$step rank=0 node=1 " 120
		line=$(grep "partner copy sent job=j step=$step rank=0 node=1 " "$cl/n0.log")
		b=$(kv <(echo " $line") bytes)
		s=$(kv <(echo " $line") seconds)
		ck=$(awk -v b="$b" -v s="$s" 'BEGIN { printf "%.4f", b / s / 1e9 }')
		echo "$ck" >>"$work/copy-ck"
		P_BYTES=$b
		# fabric-bench: the same bytes, right after.
		fb_out=$("$fabric" --bytes "$b" --piece 1MiB --inflight 8 --reps 1 --mode tagged 2>&1) ||
			{ echo "$fb_out" >&2; die "fabric-bench failed"; }
		fb=$(sed -n 's/.*"gbps_median":\([0-9.eE+-]*\).*/\1/p' <<<"$fb_out")
		[ -n "$fb" ] || { echo "$fb_out" >&2; die "no gbps_median from fabric-bench"; }
		echo "$fb" >>"$work/copy-fb"
		load1 >>"$work/copy-load"
		say "  rep $rep: ckptd partner copy $b bytes in $s s = $ck GB/s; fabric-bench $fb GB/s (load $(load))"
	done
	cluster_stop "$cl"
	[ "$keep" = 1 ] || rm -rf "$cl/root"
	P_CK=$(median <"$work/copy-ck")
	P_FB=$(median <"$work/copy-fb")
	P_RATIO=$(ratio "$P_CK" "$P_FB")
	P_LOAD=$(median <"$work/copy-load")
	say "  partner copy $(fmt "$P_CK" '%.3f') GB/s, fabric-bench $(fmt "$P_FB" '%.3f') GB/s," \
		"ratio $P_RATIO (medians of $reps)"
	printf '{"bench":"cluster","measure":"partner_copy","bytes":%s,"piece":1048576,"inflight":8,"reps":%s,"ckptd_gbps_median":%s,"fabric_bench_gbps_median":%s,"ratio":%s,"ckptd_gbps":[%s],"fabric_bench_gbps":[%s],"load1_median":%s}\n' \
		"$P_BYTES" "$reps" "$(json_num "$P_CK")" "$(json_num "$P_FB")" "$(json_num "$P_RATIO")" \
		"$(paste -sd, "$work/copy-ck")" "$(paste -sd, "$work/copy-fb")" "$P_LOAD" | tee -a "$results"
fi

# ---- 3. restore of a lost node: partner memory against the root ------------

# restore_node1 CL REP TIER: node 1's two ranks (2 and 3) restore in
# parallel; appends the wall clock to restore-TIER and checks the tier in
# node 1's log.
restore_node1() {
	local cl=$1 rep=$2 tier=$3 t0 t1 pids=() r ms n
	local -a data=(--tensors 4 --min-bytes $((restore_b / 4)) --max-bytes $((restore_b / 4)) --seed "$rep")
	drop_caches
	local before
	before=$(grep -c "restore: restored job=j step=1 " "$cl/n1.log" || true)
	t0=$EPOCHREALTIME
	for r in 2 3; do
		rank_start "$cl/restore-$tier-$r.log" --socket "$cl/n1/sock" --job j --rank "$r" --world 6 \
			"${data[@]}" --restore latest --expect-step 1
		pids+=("$RPID")
	done
	ranks_wait "${pids[@]}"
	t1=$EPOCHREALTIME
	awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f\n", b - a }' >>"$work/restore-$tier"
	for r in 2 3; do
		wait_line "$cl/restore-$tier-$r.log" "restored step 1 ok" 10
	done
	# the ranks' own time: ckpt_restore_open .. every tensor read and checked
	ms=$(sed -n 's/.*restored step 1 ok (.*, \([0-9.]*\) ms)$/\1/p' "$cl"/restore-"$tier"-[23].log | sort -g | tail -n 1)
	echo "$ms" >>"$work/restore-$tier-rank"
	n=$(grep "restore: restored job=j step=1 " "$cl/n1.log" | tail -n +$((before + 1)) | grep -c " tier=$tier" || true)
	[ "$n" -eq 2 ] || { grep "restore: restored job=j step=1 " "$cl/n1.log" >&2; die "rep $rep: node 1 did not restore both ranks from tier $tier"; }
	local got
	got=$(metrics "$cl" 1 | awk -v t="$tier" '$1 ~ /^ckpt_restore_bytes_total\{/ && index($1, "ckpt_job=\"j\"") && index($1, "tier=\"" t "\"") { s += $2 } END { printf "%.0f", s }')
	echo "$got" >>"$work/restore-$tier-bytes"
	local fetch=
	if [ "$tier" = partner ]; then
		# node 1's own figure: the slower of its two fetches over the link
		fetch=$(grep "peer: fetched from partner memory job=j step=1 " "$cl/n1.log" | tail -n 2 |
			grep -o ' seconds=[0-9.]*' | cut -d= -f2 | sort -g | tail -n 1)
		echo "$fetch" >>"$work/restore-fetch"
		fetch="; slower fetch from node 2's memory $fetch s"
	fi
	say "  rep $rep: tier $tier: node 1's 2 ranks restored in $(tail -n 1 "$work/restore-$tier") s wall clock" \
		"(slowest rank's own restore $ms ms$fetch; ckpt_restore_bytes_total{tier=\"$tier\"} $got; load $(load))"
}

R_PART='' R_ROOT='' R_RATIO='' R_LOAD='' R_PART_RANK='' R_ROOT_RANK='' R_FETCH=''
if want restore; then
	slot=$((restore_b + (64 << 20)))
	pmem=$((4 * restore_b + (64 << 20)))
	say "3. restore of a lost node: 3 daemons x 2 ranks, $(mib "$restore_b") per rank (4 tensors);" \
		"node 1 replaced, its ranks restored from node 2's memory, then from the root"
	: >"$work/restore-load"
	for rep in $(seq 1 "$reps"); do
		cl=$work/restore-r$rep
		opts=(--staging-bytes $((2 * slot)) --partner-memory "$pmem" --partners 1)
		for k in 0 1 2; do
			node_start "$cl" 3 "$k" "${opts[@]}"
		done
		cluster_whole "$cl" 3
		# The job saves step 1 and stays connected (it would train on;
		# here it waits at a gate that never opens before step 2) until
		# node 2 holds node 1's ranks (2, 3); then the job dies with the
		# node. (A daemon forgets a job once its last rank is gone, and a
		# partner copy that completes after that is never marked as
		# committed, so ranks that exit at once would leave nothing to
		# restore from.)
		pids=()
		for r in $(seq 0 5); do
			rank_start "$cl/save-$r.log" --socket "$cl/n$((r / 2))/sock" --job j --rank "$r" --world 6 \
				--steps 1,2 --gate "2:$cl/never" --wait --tensors 4 --min-bytes $((restore_b / 4)) \
				--max-bytes $((restore_b / 4)) --seed "$rep"
			pids+=("$RPID")
		done
		for r in $(seq 0 5); do
			wait_line "$cl/save-$r.log" "rank $r step 1 committed" 300
		done
		for r in 2 3; do
			wait_line "$cl/n2.log" "partner copy received job=j step=1 rank=$r node=1 " 120
		done
		for p in "${pids[@]}"; do
			kill -9 "$p" 2>/dev/null || true
			wait "$p" 2>/dev/null || true
		done
		# node 1 is lost and replaced by a fresh daemon
		node_kill9 "$cl" 1
		node_start "$cl" 3 1 "${opts[@]}"
		cluster_whole "$cl" 3
		restore_node1 "$cl" "$rep" partner
		# now nothing in memory: node 1 and its partner node 2 replaced
		node_kill9 "$cl" 1
		node_kill9 "$cl" 2
		node_start "$cl" 3 2 "${opts[@]}"
		node_start "$cl" 3 1 "${opts[@]}"
		cluster_whole "$cl" 3
		restore_node1 "$cl" "$rep" root
		load1 >>"$work/restore-load"
		cluster_stop "$cl"
		[ "$keep" = 1 ] || rm -rf "$cl/root"
	done
	R_PART=$(median <"$work/restore-partner")
	R_ROOT=$(median <"$work/restore-root")
	R_PART_RANK=$(median <"$work/restore-partner-rank")
	R_FETCH=$(median <"$work/restore-fetch")
	R_ROOT_RANK=$(median <"$work/restore-root-rank")
	R_RATIO=$(ratio "$R_ROOT" "$R_PART")
	R_LOAD=$(median <"$work/restore-load")
	say "  2 x $(mib "$restore_b"): from partner memory $(fmt "$R_PART" '%.3f') s, from the root $(fmt "$R_ROOT" '%.3f') s:" \
		"root / partner $R_RATIO (medians of $reps)${drop_note:+; $drop_note}"
	printf '{"bench":"cluster","measure":"node_restore","ranks":2,"bytes_per_rank":%s,"reps":%s,"partner_seconds_median":%s,"root_seconds_median":%s,"root_over_partner":%s,"partner_rank_ms_median":%s,"root_rank_ms_median":%s,"partner_fetch_seconds_median":%s,"partner_seconds":[%s],"root_seconds":[%s],"page_cache_dropped":%s,"load1_median":%s}\n' \
		"$restore_b" "$reps" "$(json_num "$R_PART")" "$(json_num "$R_ROOT")" "$(json_num "$R_RATIO")" \
		"$(json_num "$R_PART_RANK")" "$(json_num "$R_ROOT_RANK")" "$(json_num "$R_FETCH")" \
		"$(paste -sd, "$work/restore-partner")" "$(paste -sd, "$work/restore-root")" \
		"$([ "$drop" = 1 ] && echo true || echo false)" "$R_LOAD" | tee -a "$results"
fi

# ---- the table ---------------------------------------------------------------

say "load at end: $(load)"
echo
echo "Markdown (medians of $reps; $(nproc) CPUs; load average during the run noted per row):"
echo
if want commit; then
	echo "| daemons x ranks | last vote -> committed (s) | leader: step open -> committed (s) | ranks: save -> committed (s) | 1 daemon, same ranks: last vote -> committed / save -> committed (s) | save -> committed vs 1 daemon | load |"
	echo "|---|---|---|---|---|---|---|"
	for n in "${daemon_counts[@]}"; do
		w=$((n * 2))
		a=$n-$w
		b=1-$w
		echo "| $n x 2 | $(fmt "${C_LV[$a]}" '%.4f') | $(fmt "${C_OPEN[$a]}" '%.4f') | $(fmt "${C_RANK[$a]}" '%.4f') | $(fmt "${C_LV[$b]}" '%.4f') / $(fmt "${C_RANK[$b]}" '%.4f') | $(fmt "$(ratio "${C_RANK[$a]}" "${C_RANK[$b]}")" '%.2fx') | $(fmt "${C_LOAD[$a]}" '%.1f') |"
	done
	echo
fi
if want copy; then
	echo "| partner copy ($(mib "$P_BYTES") shard, 1 MiB pieces, 8 in flight, tagged) | GB/s |"
	echo "|---|---|"
	echo "| ckptd partner copy (node 0 -> node 1) | $(fmt "$P_CK" '%.3f') |"
	echo "| fabric-bench (raw libfabric, tcp;ofi_rxm) | $(fmt "$P_FB" '%.3f') |"
	echo "| ckptd / fabric-bench | $(fmt "$P_RATIO" '%.2f') |"
	echo
fi
if want restore; then
	echo "| replaced node's restore (2 ranks x $(mib "$restore_b"), in parallel) | wall clock (s) | slowest rank's restore (ms) |"
	echo "|---|---|---|"
	echo "| from partner memory (tier partner; node 1's fetch over the link: $(fmt "$R_FETCH" '%.3f') s) | $(fmt "$R_PART" '%.3f') | $(fmt "$R_PART_RANK" '%.0f') |"
	echo "| from the root (tier root${drop_note:+, $drop_note}) | $(fmt "$R_ROOT" '%.3f') | $(fmt "$R_ROOT_RANK" '%.0f') |"
	echo "| root / partner | $(fmt "$R_RATIO" '%.2f') | $(fmt "$(ratio "$R_ROOT_RANK" "$R_PART_RANK")" '%.2f') |"
	echo
fi
