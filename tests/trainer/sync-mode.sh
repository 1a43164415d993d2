#!/bin/bash
# SPDX-License-Identifier: MIT
# --ckpt-mode sync: every rank writes its own file per save step (blob
# header, then its slices of master, adam_m and adam_v), complete and with
# no temp file left; --ckpt-mode off writes nothing, neither there nor
# through ckptd. Both train to the last step.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/lib-train.sh"

NP=2
STEPS=60
EVERY=10
BLOB_BYTES=128 # sizeof(struct train_blob) in trainer/train.c
RUN=("${TINY[@]}" --steps $STEPS --log-every 10 --ckpt-every $EVERY)

mkdir -p "$T/sync" "$T/off"
train_run $NP sync "${RUN[@]}" --ckpt-mode sync --sync-dir "$T/sync"
grep -q "^step $STEPS loss" "$T/sync.log" || fail "sync run did not reach step $STEPS"
n_params=$(sed -n 's/^model: .*: \([0-9]*\) parameters;.*/\1/p' "$T/sync.log")
[ -n "$n_params" ] || fail "no parameter count in the log"
for s in $(seq $EVERY $EVERY $STEPS); do
	grep -q "^ckpt step $s committed (sync" "$T/sync.log" || fail "sync step $s not reported committed"
	for r in $(seq 0 $((NP - 1))); do
		f=$(printf '%s/step-%010d.rank-%06d' "$T/sync" "$s" "$r")
		[ -f "$f" ] || fail "missing $f"
		len=$((n_params * (r + 1) / NP - n_params * r / NP))
		want=$((BLOB_BYTES + 3 * 4 * len))
		got=$(stat -c %s "$f")
		[ "$got" -eq "$want" ] || fail "$f has $got bytes, expected $want"
		# The blob header records the step (little-endian u64 at byte 16).
		blob_step=$(od -An -t u8 -j 16 -N 8 "$f" | tr -d ' ')
		[ "$blob_step" = "$s" ] || fail "$f: blob says step '$blob_step', expected $s"
	done
done
files=$(find "$T/sync" -type f | wc -l)
[ "$files" -eq $((NP * STEPS / EVERY)) ] || fail "$files files in the sync dir, expected $((NP * STEPS / EVERY))"
[ -z "$(find "$T/sync" -name '*.tmp')" ] || fail "temp files left in the sync dir"
log "sync: $files files of the expected sizes"

# off: a ckptd is there and a sync dir is named, yet nothing is written.
ckptd_start d "$T/root" --keep-last 0
train_run $NP off "${RUN[@]}" --ckpt-mode off --sync-dir "$T/off" --socket "$(sock d)" --job off
grep -q "^step $STEPS loss" "$T/off.log" || fail "off run did not reach step $STEPS"
grep -q '^ckpt step' "$T/off.log" && fail "off run reported a save"
[ -z "$(ls -A "$T/off")" ] || fail "off run wrote into the sync dir: $(ls -A "$T/off")"
[ -e "$T/root/off" ] && fail "off run saved through ckptd"
ckptd_stop d
log "pass"
