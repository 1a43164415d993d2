#!/bin/bash
# SPDX-License-Identifier: MIT
# ckpt-train learns: on 2 ranks the loss of a tiny model falls from about
# ln(256) = 5.5 to well below 3 within 200 steps on the Japanese sample.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/lib-train.sh"

train_run 2 loss "${TINY[@]}" --steps 200 --log-every 10 --ckpt-mode off
first=$(awk '$1 == "step" && $2 == 1 { print $4 }' "$T/loss.log")
last=$(awk '$1 == "step" && $2 == 200 { print $4 }' "$T/loss.log")
[ -n "$first" ] && [ -n "$last" ] || fail "no loss lines for steps 1 and 200"
log "loss step 1: $first, step 200: $last"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(a > 5.0 && b < 3.0) }' ||
	fail "loss did not fall: step 1 $first, step 200 $last"
grep -q '^data .*ja-sample.txt' "$T/loss.log" || fail "did not train on the sample text"
log "pass"
