#!/bin/bash
# SPDX-License-Identifier: MIT
# Own memory, the first restore tier: ranks killed with SIGKILL after a
# commit leave their arenas to ckptd, and the restarted ranks restore the
# newest step from that memory (tier=memory), every byte checked by the
# rank; an older step comes from the root. Ranks that say goodbye leave
# nothing behind. The memory goes back when a new rank needs the staging
# room, and when a rank of the job saves again.
. "$(dirname "$0")/lib.sh"

ROOT=$T/root
JOB=$ROOT/om
OPTS=(--socket "$(sock d)" --job om --seed 21 --tensors 4 --min-bytes 64K --max-bytes 4M)

# metric NAME LABELS: the value of one series (0 when absent).
metric() {
	curl -s "http://127.0.0.1:$(metrics_port d)/metrics" |
		awk -v n="$1" -v l="$2" '($1 == n || $1 ~ "^"n"[{]") && (l == "" || index($1, l)) { v = $2 }
			END { print v + 0 }'
}

ckptd_start d "$ROOT" --keep-last 0 --staging-bytes 160MiB

log "2 ranks commit step 1 and exit; then they commit step 2 and are killed with SIGKILL"
run_ranks 2 s1 "${OPTS[@]}" --steps 1 --wait
pids=()
for r in 0 1; do
	rank_start "crash-$r" "${OPTS[@]}" --rank "$r" --world 2 --steps 2,3 --wait \
		--sleep-between-ms 20000
	pids+=("$LAST_PID")
done
for i in $(seq 1 300); do
	grep -q "step 2 committed" "$T/crash-0.log" && grep -q "step 2 committed" "$T/crash-1.log" &&
		break
	sleep 0.1
done
grep -q "step 2 committed" "$T/crash-1.log" || fail "step 2 did not commit"
kill -9 "${pids[@]}"
wait "${pids[@]}" 2>/dev/null
for r in 0 1; do
	for i in $(seq 1 100); do
		grep_log ckptd-d "keeping a departed rank's shard in memory job=om rank=$r step=2 " && break
		sleep 0.1
	done
	grep_log ckptd-d "keeping a departed rank's shard in memory job=om rank=$r step=2 " ||
		fail "ckptd did not keep rank $r's arena"
done

log "the restarted ranks restore step 2 from memory"
run_ranks 2 r2 "${OPTS[@]}" --restore latest --expect-step 2
for r in 0 1; do
	grep_log ckptd-d "restored job=om step=2 rank=$r .*tier=memory" || fail "rank $r's restore did not come from memory"
done
mem=$(metric ckpt_restore_bytes_total 'tier="memory"')
[ "$(metric ckpt_restore_bytes_total 'tier="root"')" = 0 ] || fail "a restore of step 2 read the root"
[ "$mem" -gt 0 ] || fail "ckpt_restore_bytes_total{tier=\"memory\"} is $mem"

log "step 1 is not in memory: it comes from the root"
run_ranks 2 r1 "${OPTS[@]}" --restore 1 --expect-step 1
[ "$(metric ckpt_restore_bytes_total 'tier="root"')" -gt 0 ] || fail "step 1 did not come from the root"

log "ranks that say goodbye leave nothing behind"
run_ranks 2 bye --socket "$(sock d)" --job gb --seed 3 --tensors 2 --min-bytes 64K --max-bytes 1M \
	--steps 1 --wait
grep_log ckptd-d "keeping a departed rank's shard in memory job=gb" && fail "kept the arena of a rank that said goodbye"

# 160 MiB of staging: 2 x 24 MiB kept; the new rank needs 2 x 60 MiB.
log "a new rank that needs the room gets it"
used=$(metric ckpt_staging_used_bytes '')
[ "$used" -gt 0 ] || fail "no staging memory in use while two arenas are kept ($used)"
run_ranks 1 big --socket "$(sock d)" --job big --seed 4 --tensors 1 --min-bytes 52M --max-bytes 52M \
	--steps 1 --wait
grep_log ckptd-d "memory of a departed rank given back for a new one job=om" ||
	fail "the kept memory was not given back to a new rank"

log "a rank of the job that saves again drops what is left"
run_ranks 2 s4 "${OPTS[@]}" --steps 4 --wait
[ "$(metric ckpt_staging_used_bytes '')" = 0 ] || fail "staging memory still in use: $(metric ckpt_staging_used_bytes '')"
run_ranks 2 r4 "${OPTS[@]}" --restore latest --expect-step 4
verify_all "$JOB" >/dev/null
ckptd_stop d
log "pass"
