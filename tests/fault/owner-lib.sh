# SPDX-License-Identifier: MIT
# Helpers for the job ownership tests (bash; sourced after ../integration/lib.sh).
#
# Daemon a owns job "ja" of a two-rank world: steps 1-3 commit, then rank 0
# saves step 4 (durable on the root) while rank 1 waits at a gate, so step
# 4 stays in flight in a, with no manifest, until the test opens the gate.
ROOT=$T/root
JOB=$ROOT/ja
A_OPTS=(--socket "$(sock a)" --job ja --world 2 --seed 41 --tensors 4 --min-bytes 4K
	--max-bytes 1M --steps 1,2,3,4 --wait --timeout-ms 40000)

# start_inflight: start a (keep_last 0: it keeps every step) and the ranks,
# return once step 4 is in flight.
start_inflight() {
	local i
	ckptd_start a "$ROOT" --keep-last 0
	rank_start a-r0 "${A_OPTS[@]}" --rank 0
	R0=$LAST_PID
	rank_start a-r1 "${A_OPTS[@]}" --rank 1 --gate "4:$T/gate"
	R1=$LAST_PID
	for i in $(seq 1 200); do
		[ -e "$(stepdir "$JOB" 4)/rank-000000.index" ] && return 0
		sleep 0.05
	done
	fail "step 4 of job ja did not become durable on rank 0 within 10 s"
}

# finish_inflight: open the gate; both ranks must see steps 1-4 commit.
finish_inflight() {
	touch "$T/gate"
	rank_wait "$R0" a-r0
	rank_wait "$R1" a-r1
}
