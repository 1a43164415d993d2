#!/bin/bash
# SPDX-License-Identifier: MIT
# ckpt-plan against reality: for ckpt-train's model at two sizes and two
# world sizes, given as the model description ckpt-train --describe-model
# prints, the planner's per-rank shard and index bytes equal, to the byte,
# the files a real ckptd wrote and what ckpt-inspect reports of them; its
# slot size and staging per node equal what that ckptd handed the ranks
# (its log); and a ckptd configuration whose staging cannot hold the
# planned slots is warned about (exit status 1) while one that can is not.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/../trainer/lib-train.sh"
: "${CKPT_PLAN:?CKPT_PLAN must name the ckpt-plan binary}"

SLOTS=3
CHUNK=64KiB # several chunks per tensor at the larger size: the index grows
ckptd_start d "$T/root" --keep-last 0 --slots-per-rank $SLOTS --chunk-size $CHUNK

# plan_field OUT RANK COLUMN: a column of the --ranks table.
plan_field() {
	awk -v r="$2" -v c="$3" '
		$1 == "rank" && $2 == "elements" { for (i = 1; i <= NF; i++) col[$i] = i; next }
		(c in col) && $1 == r { print $col[c] }' <<<"$1"
}

checked=0
for size in "48 2" "700 3"; do
	set -- $size
	hidden=$1 layers=$2
	for np in 2 3; do
		job="plan-h$hidden-w$np"
		model=(--hidden "$hidden" --layers "$layers")
		timeout 60 "$MPIRUN" -np 1 "$CKPT_TRAIN" "${TINY[@]}" "${model[@]}" \
			--describe-model >"$T/$job.model.json" 2>"$T/$job.describe.log" ||
			fail "$job: ckpt-train --describe-model failed (see $job.describe.log)"
		train_run "$np" "$job" "${TINY[@]}" "${model[@]}" --steps 4 --ckpt-every 4 \
			--socket "$(sock d)" --job "$job" --no-resume
		grep -q '^ckpt step 4 committed' "$T/$job.log" || fail "$job: step 4 was not committed"
		step=$(stepdir "$T/root/$job" 4)
		plan=$("$CKPT_PLAN" --model-file "$T/$job.model.json" --world "$np" --ranks \
			--job "$job" --chunk-size $CHUNK --slots-per-rank $SLOTS 2>&1) ||
			fail "$job: ckpt-plan exited $?: $plan"
		inspect=$("$CKPT_INSPECT" "$step" 2>&1) || fail "$job: ckpt-inspect $step: $inspect"
		staging=0
		for r in $(seq 0 $((np - 1))); do
			f=$(printf '%s/rank-%06d' "$step" "$r")
			for kind in shard index; do
				want=$(plan_field "$plan" "$r" "${kind}_bytes")
				got=$(stat -c %s "$f.$kind")
				[ -n "$want" ] || fail "$job: no ${kind}_bytes for rank $r in: $plan"
				[ "$got" = "$want" ] ||
					fail "$job: rank $r: $f.$kind has $got bytes, ckpt-plan says $want"
			done
			# ckpt-inspect prints ranks in order: the r-th shard_bytes line.
			seen=$(awk -v r="$r" '$1 == "shard_bytes" && n++ == r { print $2 }' <<<"$inspect")
			want=$(plan_field "$plan" "$r" shard_bytes)
			[ "$seen" = "$want" ] ||
				fail "$job: rank $r: ckpt-inspect reports shard_bytes $seen, ckpt-plan $want"
			# What ckptd handed this rank: slots and slot size, from its log.
			line=$(grep "rank connected job=$job rank=$r " "$T/ckptd-d.log" | tail -n 1)
			[ -n "$line" ] || fail "$job: ckptd logged no connect of rank $r"
			slot=$(sed -n 's/.* slot_bytes=\([0-9]*\).*/\1/p' <<<"$line")
			slots=$(sed -n 's/.* slots=\([0-9]*\) .*/\1/p' <<<"$line")
			want=$(plan_field "$plan" "$r" slot_bytes)
			[ "$slot" = "$want" ] ||
				fail "$job: rank $r: ckptd's slot is $slot bytes, ckpt-plan says $want"
			[ "$slots" = "$SLOTS" ] || fail "$job: rank $r: ckptd gave $slots slots, not $SLOTS"
			staging=$((staging + slots * slot))
			checked=$((checked + 1))
		done
		planned=$(sed -n 's/^ckptd staging per node: \([0-9]*\) bytes.*/\1/p' <<<"$plan")
		[ "$planned" = "$staging" ] ||
			fail "$job: ckptd staged $staging bytes for the node, ckpt-plan says $planned"
		log "$job: $np ranks' shard, index and slot bytes as planned; staging $staging bytes"
	done
done

# The staging check against a ckptd configuration: too small, then enough.
job="plan-h700-w3"
need=$("$CKPT_PLAN" --model-file "$T/$job.model.json" --world 3 --slots-per-rank $SLOTS |
	sed -n 's/^ckptd staging per node: \([0-9]*\) bytes.*/\1/p')
printf '# too small\n[ckptd]\nstaging_bytes = %s\nslots_per_rank = %s\n' $((need - 4096)) $SLOTS \
	>"$T/small.conf"
out=$("$CKPT_PLAN" --model-file "$T/$job.model.json" --world 3 --ckptd-config "$T/small.conf" 2>&1)
rc=$?
[ "$rc" -eq 1 ] || fail "a config without room for the slots: exit status $rc, not 1: $out"
grep -q "small.conf: staging_bytes .* cannot hold the planned slots: 3 ranks x $SLOTS slots" \
	<<<"$out" || fail "no staging warning naming the config: $out"
printf 'staging_bytes = %s\nslots_per_rank = %s\n' "$need" $SLOTS >"$T/enough.conf"
out=$("$CKPT_PLAN" --model-file "$T/$job.model.json" --world 3 --ckptd-config "$T/enough.conf" 2>&1) ||
	fail "a config with room for the slots: exit status $?: $out"
grep -q warning <<<"$out" && fail "a warning for a config that has room: $out"
printf 'staging_bytes = 1 GiB\n' >"$T/bad.conf"
out=$("$CKPT_PLAN" --model-file "$T/$job.model.json" --world 3 --ckptd-config "$T/bad.conf" 2>&1)
rc=$?
[ "$rc" -eq 2 ] && grep -q 'bad.conf:1: staging_bytes' <<<"$out" ||
	fail "a malformed size: exit status $rc, and the error should name file and line: $out"
ckptd_stop d
log "pass: $checked ranks checked"
