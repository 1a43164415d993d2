#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# s3-bench: upload and download throughput of ckpt's S3 tier against the
# AWS CLI (`aws s3 cp --recursive` and `aws s3 sync`), the same bytes to
# and from the same S3 server, side by side in one run.
#
# The script starts its own Ceph RADOS Gateway (tests/s3/radosgw.sh) and a
# ckptd with --s3-url on it, and runs a job of N ranks (ckpt-test-rank)
# that saves one step of random tensors per repetition. Each repetition,
# in this order:
#   upload    ckpt: ckptd uploads the committed step by itself (its own
#             "uploaded ... seconds=" figure, cross-checked against the
#             commit's log time and the wall clock);
#             aws cp --recursive, then aws sync, of the same step directory
#             to a fresh prefix each;
#   download  ckpt-restore s3://.../JOB@STEP (fetch, fdatasync, verify,
#             commit); aws cp --recursive, then aws sync, of the same step
#             into fresh directories of the same file system, each
#             followed by an fsync of every file it wrote (`sync FILE...`),
#             as ckpt-restore fdatasyncs what it fetched.
# As root the page cache is dropped before every measurement, so every
# upload reads from the disk. Reported: medians per measurement and the
# throughput ratios ckpt / aws (> 1: ckpt is faster). See
# docs/BENCHMARKS.md, "S3 tier: upload and download vs the AWS CLI".
set -euo pipefail

usage() {
	cat <<'USAGE'
usage: bench/s3-bench.sh [options]
  --dir DIR             work area (default /var/tmp): radosgw, ckptd's root and
                        the downloads go to DIR/s3-bench-PID/, removed at the end
  --build DIR           build directory (default: build)
  --ranks N             ranks of the job (default 2)
  --bytes SIZE          bytes per step, all ranks together (default 1GiB;
                        suffixes KiB MiB GiB)
  --tensors N           tensors per rank (default 4)
  --reps R              repetitions (default 3)
  --s3-part-size SIZE   ckptd --s3-part-size (default: ckptd's default)
  --s3-parallel LIST    ckptd --s3-parallel; a comma list (e.g. 4,16) runs the
                        whole comparison once per value (default: ckptd's default)
  --restore-jobs N      ckpt-restore --jobs (default: its default)
  --no-drop-caches      do not drop the page cache before each measurement
  --keep                keep DIR/s3-bench-PID (radosgw stopped)
  -v                    print every repetition
USAGE
}

dir=/var/tmp
build=build
ranks=2
bytes_arg=1GiB
tensors=4
reps=3
part_size=
parallel_list=
restore_jobs=
drop=1
keep=0
verbose=0
while [ $# -gt 0 ]; do
	case $1 in
	--dir) dir=$2; shift 2 ;;
	--build) build=$2; shift 2 ;;
	--ranks) ranks=$2; shift 2 ;;
	--bytes) bytes_arg=$2; shift 2 ;;
	--tensors) tensors=$2; shift 2 ;;
	--reps) reps=$2; shift 2 ;;
	--s3-part-size) part_size=$2; shift 2 ;;
	--s3-parallel) parallel_list=$2; shift 2 ;;
	--restore-jobs) restore_jobs=$2; shift 2 ;;
	--no-drop-caches) drop=0; shift ;;
	--keep) keep=1; shift ;;
	-v) verbose=1; shift ;;
	-h|--help) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
done

die() { echo "s3-bench: $*" >&2; exit 1; }

to_bytes() {
	local v=$1 n unit
	n=${v%%[!0-9]*}
	unit=${v#"$n"}
	[ -n "$n" ] || return 1
	case $unit in
	""|B) echo "$n" ;;
	K|KiB) echo $((n << 10)) ;;
	M|MiB) echo $((n << 20)) ;;
	G|GiB) echo $((n << 30)) ;;
	*) return 1 ;;
	esac
}
bytes=$(to_bytes "$bytes_arg") || die "--bytes: '$bytes_arg' is not a size"
[[ $ranks =~ ^[1-9][0-9]*$ && $tensors =~ ^[1-9][0-9]*$ && $reps =~ ^[1-9][0-9]*$ ]] ||
	die "--ranks, --tensors and --reps take positive numbers"
per_rank=$((bytes / ranks))
per_tensor=$((per_rank / tensors))
[ "$per_tensor" -ge 4096 ] || die "--bytes too small for $ranks ranks x $tensors tensors"
IFS=, read -ra parallels <<<"${parallel_list:-}"
[ ${#parallels[@]} -gt 0 ] || parallels=("")

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
harness=$here/../tests/s3
ckptd=$build/ckptd/ckptd
rank_bin=$build/tests/integration/ckpt-test-rank
restore=$build/tools/ckpt-restore
for b in "$ckptd" "$rank_bin" "$restore"; do
	[ -x "$b" ] || die "$b not built (meson compile -C $build)"
done
ckptd=$(realpath "$ckptd")
rank_bin=$(realpath "$rank_bin")
restore=$(realpath "$restore")
AWS=aws
[ -x /usr/bin/aws ] && AWS=/usr/bin/aws
command -v "$AWS" >/dev/null || die "the AWS CLI is not installed"
[ -x /usr/bin/time ] || die "/usr/bin/time not found (Debian package 'time')"
have_strace=0
command -v strace >/dev/null && have_strace=1
[ -d "$dir" ] || die "$dir is not a directory"

can_drop=0
if [ "$drop" = 1 ]; then
	if [ "$(id -u)" = 0 ] && [ -w /proc/sys/vm/drop_caches ]; then
		can_drop=1
	else
		echo "s3-bench: not root: the page cache is NOT dropped; reads may come from memory" >&2
	fi
fi
drop_caches() {
	sync
	[ "$can_drop" = 1 ] && echo 3 >/proc/sys/vm/drop_caches
	return 0
}

# Room: ckptd's root (one step per repetition), the three uploads of each
# step inside radosgw's block file, three downloads each, per configuration;
# nothing is deleted inside a configuration (on a file system mounted with
# discard, the trim work of a deletion lands on the next measurement).
need=$((${#parallels[@]} * reps * 7 * bytes + (2 << 30)))
free=$(($(df -Pk "$dir" | awk 'NR == 2 { print $4 }') * 1024))
[ "$free" -ge "$need" ] || die "$dir has $((free >> 20)) MiB free, needs $((need >> 20)) MiB"

work=$(cd "$dir" && pwd)/s3-bench-$$
mkdir -p "$work"
rgw=$work/rgw
ckptd_pid=
cleanup() {
	local rc=$?
	set +e
	if [ -n "$ckptd_pid" ]; then
		kill "$ckptd_pid" 2>/dev/null
		wait "$ckptd_pid" 2>/dev/null
	fi
	if [ "$rc" -ne 0 ]; then
		for f in "$work"/*.log "$work"/*/*.log; do
			[ -f "$f" ] || continue
			echo "----- $f (last 15 lines) -----" >&2
			tail -n 15 "$f" >&2
		done
	fi
	[ -f "$rgw/env" ] && bash "$harness/radosgw.sh" stop "$rgw" >/dev/null 2>&1
	if [ "$rc" -ne 0 ]; then
		# The logs stay for a post-mortem, the gigabytes go.
		rm -rf "$work"/root* "$work"/dl*
		echo "s3-bench: FAILED; logs kept in $work" >&2
	elif [ "$keep" = 1 ]; then
		echo "s3-bench: files kept in $work"
	else
		rm -rf "$work"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Only the server's settings, never the machine's own AWS configuration.
for v in $(compgen -e | grep '^AWS_'); do unset "$v"; done
export AWS_CONFIG_FILE=$work/aws-config AWS_SHARED_CREDENTIALS_FILE=$work/aws-credentials
: >"$AWS_CONFIG_FILE"
: >"$AWS_SHARED_CREDENTIALS_FILE"
export AWS_PAGER=""
for v in $(compgen -e | grep '^CKPTD_'); do unset "$v"; done

bash "$harness/radosgw.sh" start "$rgw" s3bench >"$work/radosgw-start.log" 2>&1 ||
	die "radosgw did not start: $(tail -n 20 "$work/radosgw-start.log")"
# shellcheck disable=SC1091
. "$rgw/env"
bucket=$S3_BUCKET

now() { echo "$EPOCHREALTIME"; }
sub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a - b }'; }
# CPU seconds (user + system) of the processes whose pids are given.
cpu_of() {
	local p t=0 n
	for p in "$@"; do
		# Fields after the command name (which may hold spaces): utime and
		# stime are the 12th and 13th.
		n=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | awk '{ print $12 + $13 }')
		t=$((t + ${n:-0}))
	done
	awk -v t="$t" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", t / hz }'
}
server_pids() { cat "$rgw"/run/*.pid 2>/dev/null; }
server_cpu() {
	local p
	mapfile -t p < <(server_pids)
	cpu_of "${p[@]}"
}
# Seconds of an ISO-8601 log time stamp (UTC, milliseconds).
log_time() { date -u -d "$1" +%s.%N; }
# fsync every file under a directory (what the AWS CLI does not do).
sync_tree() { find "$1" -type f -exec sync {} +; }
# The seconds and user+sys CPU of one /usr/bin/time -f '%e %U %S' record.
time_secs() { awk '{ print $1 }' "$1"; }
# same_files A B: every file of A equals B's, and B has nothing else.
same_files() {
	local f n=0
	for f in "$1"/*; do
		cmp -s "$f" "$2/$(basename "$f")" || return 1
		n=$((n + 1))
	done
	[ "$(find "$2" -type f | wc -l)" -eq "$n" ]
}

# The AWS CLI's own start-up (python, botocore), a fixed cost in every aws figure.
aws_start=()
for _ in 1 2 3; do
	/usr/bin/time -f '%e %U %S' -o "$work/t" "$AWS" --endpoint-url "$AWS_ENDPOINT_URL" \
		s3 ls "s3://$bucket/nothing-here/" >/dev/null 2>&1 || true
	aws_start+=("$(time_secs "$work/t")")
done

# timed NAME CMD...: run CMD, record in R[$cfg_i,NAME] its seconds, in
# NAME_cpu its CPU seconds (user + system) and in NAME_srv the S3 server's.
# A download (NAME dn_cp, dn_sync) is then fsync'd file by file
# (`sync FILE...`): its time without that goes to NAME_nosync.
timed() {
	local name=$1 t0 t1 t2 s0 s1
	shift
	s0=$(server_cpu)
	t0=$(now)
	/usr/bin/time -f '%U %S' -o "$work/t" "$@" >"$work/cmd.log" 2>&1 ||
		die "$name failed: $* ($(tail -n 5 "$work/cmd.log"))"
	t1=$(now)
	case $name in
	dn_cp|dn_sync)
		sync_tree "${@: -1}"
		R[$cfg_i,${name}_nosync]+="$(sub "$t1" "$t0") "
		;;
	esac
	t2=$(now)
	s1=$(server_cpu)
	R[$cfg_i,$name]+="$(sub "$t2" "$t0") "
	R[$cfg_i,${name}_cpu]+="$(awk '{ printf "%.2f", $1 + $2 }' "$work/t") "
	R[$cfg_i,${name}_srv]+="$(sub "$s1" "$s0") "
}
last() { echo "${R[$cfg_i,$1]}" | awk '{ print $NF }'; }

med() { tr ' ' '\n' | grep . | sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print "nan"; else printf "%.3f\n", (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

echo "s3-bench: $ranks ranks x $((per_rank >> 20)) MiB ($tensors tensors each) per step," \
	"$reps repetitions; radosgw at $AWS_ENDPOINT_URL; dir $dir;" \
	"page cache $([ "$can_drop" = 1 ] && echo "dropped before each measurement" || echo "NOT dropped")"
echo "aws: $("$AWS" --version 2>&1 | awk '{ print $1 }'); its start-up (aws s3 ls of an empty prefix):" \
	"$(med <<<"${aws_start[*]}") s (median of 3)"

declare -A R # results: R[cfg,what] = "v1 v2 ..."
tables=()
cfg_i=0
for par in "${parallels[@]}"; do
	cfg_i=$((cfg_i + 1))
	job=bench$cfg_i
	root=$work/root$cfg_i
	dl=$work/dl$cfg_i
	mkdir -p "$root" "$dl"
	s3opts=()
	[ -n "$par" ] && s3opts+=(--s3-parallel "$par")
	[ -n "$part_size" ] && s3opts+=(--s3-part-size "$part_size")
	ropts=()
	[ -n "$restore_jobs" ] && ropts+=(--jobs "$restore_jobs")
	sock=$work/ckptd$cfg_i.sock
	clog=$work/ckptd$cfg_i.log
	slot=$((per_rank + (64 << 20)))
	"$ckptd" --config '' --root "$root" --socket "$sock" --staging-bytes $((ranks * slot)) \
		--slots-per-rank 1 --keep-last 0 --log-level info --metrics-listen off \
		--s3-url "s3://$bucket/ckpt" --s3-keep-last 0 "${s3opts[@]}" >"$clog" 2>&1 &
	ckptd_pid=$!
	for _ in $(seq 200); do
		[ -S "$sock" ] && break
		kill -0 "$ckptd_pid" 2>/dev/null || die "ckptd exited at start: $(tail -n 5 "$clog")"
		sleep 0.05
	done
	[ -S "$sock" ] || die "ckptd did not start"
	eff=$(grep -m1 -o "s3: tier on .* parallel=[0-9]*" "$clog" | sed "s/ url=[^ ]*//" || true)
	desc="ckptd s3_parallel=${par:-default} s3_part_size=${part_size:-default}"
	echo
	echo "== configuration $cfg_i: $desc"
	[ -n "$eff" ] && echo "   ckptd: $eff"

	for rep in $(seq 1 "$reps"); do
		step=$rep
		sdir=$(printf '%s/%s/step-%010d' "$root" "$job" "$step")
		s3step=$(printf 'ckpt/%s/step-%010d' "$job" "$step")

		# ---- upload: ckpt ----
		drop_caches
		pids=()
		for r in $(seq 0 $((ranks - 1))); do
			"$rank_bin" --socket "$sock" --job "$job" --rank "$r" --world "$ranks" \
				--seed "$rep" --tensors "$tensors" --min-bytes "$per_tensor" \
				--max-bytes "$per_tensor" --steps "$step" --wait --timeout-ms 600000 \
				>"$work/rank-$cfg_i-$rep-$r.log" 2>&1 &
			pids+=($!)
		done
		for p in "${pids[@]}"; do wait "$p" || die "a rank failed (see $work/rank-$cfg_i-$rep-*.log)"; done
		t_ranks=$(now)
		c0=$(cpu_of "$ckptd_pid")
		s0=$(server_cpu)
		pat="uploaded job=$job step=$step "
		for _ in $(seq 12000); do
			grep -q "$pat" "$clog" && break
			kill -0 "$ckptd_pid" 2>/dev/null || die "ckptd died during the upload"
			sleep 0.05
		done
		t_seen=$(now)
		line=$(grep "$pat" "$clog") || die "step $step was not uploaded within 10 minutes"
		c1=$(cpu_of "$ckptd_pid")
		s1=$(server_cpu)
		python3 "$harness/s3util.py" request HEAD "$AWS_ENDPOINT_URL/$bucket/$s3step/MANIFEST.json" \
			>/dev/null 2>&1 || die "MANIFEST.json of step $step is not on S3 after the upload was logged"
		up_bytes=$(sed -n 's/.* bytes=\([0-9]*\) .*/\1/p' <<<"$line")
		up_s=$(sed -n 's/.* seconds=\([0-9.]*\).*/\1/p' <<<"$line")
		cline=$(grep "committed job=$job step=$step " "$clog" | tail -n 1)
		from_commit=$(sub "$(log_time "${line%% *}")" "$(log_time "${cline%% *}")")
		wall=$(sub "$t_seen" "$t_ranks")
		R[$cfg_i,bytes]=$up_bytes
		R[$cfg_i,up_ckpt]+="$up_s "
		R[$cfg_i,up_ckpt_commit]+="$from_commit "

		R[$cfg_i,up_ckpt_cpu]+="$(sub "$c1" "$c0") "
		R[$cfg_i,up_ckpt_srv]+="$(sub "$s1" "$s0") "

		# ---- upload: aws cp, aws sync (same files, fresh prefixes) ----
		drop_caches
		timed up_cp "$AWS" --endpoint-url "$AWS_ENDPOINT_URL" \
			s3 cp --quiet --recursive "$sdir" "s3://$bucket/aws-cp/$job/rep-$rep/"
		drop_caches
		timed up_sync "$AWS" --endpoint-url "$AWS_ENDPOINT_URL" \
			s3 sync --quiet "$sdir" "s3://$bucket/aws-sync/$job/rep-$rep/"

		# ---- download: ckpt-restore (fetch + fdatasync, verify, commit) ----
		drop_caches
		d1=$dl/ckpt-$rep
		trace=()
		# Only fdatasync is traced (a seccomp filter lets every other call
		# run untraced): the fetch phase ends with the last file's.
		[ "$have_strace" = 1 ] &&
			trace=(strace -f --seccomp-bpf -qq -ttt -e trace=fdatasync -o "$work/strace")
		t_start=$(now)
		timed dn_ckpt "${trace[@]}" "$restore" --no-progress --quiet --exact "${ropts[@]}" \
			"s3://$bucket/ckpt/$job@$step" "$d1"
		fetch=nan
		if [ "$have_strace" = 1 ]; then
			# The 2 x ranks fdatasyncs of the fetch (shards and indexes): the
			# last completion, whether strace split the call or not.
			tend=$(grep 'fdatasync' "$work/strace" | grep -E '= 0$' |
				awk '{ print $2 }' | sort -g | sed -n "$((2 * ranks))p")
			[ -n "$tend" ] && fetch=$(sub "$tend" "$t_start")
		fi
		R[$cfg_i,dn_fetch]+="$fetch "
		same_files "$sdir" "$(printf '%s/%s/step-%010d' "$d1" "$job" "$step")" ||
			die "ckpt-restore's copy of step $step differs from the root's"

		# ---- download: aws cp, aws sync, each then fsync'd ----
		drop_caches
		timed dn_cp "$AWS" --endpoint-url "$AWS_ENDPOINT_URL" \
			s3 cp --quiet --recursive "s3://$bucket/$s3step/" "$dl/aws-cp-$rep/"
		same_files "$sdir" "$dl/aws-cp-$rep" || die "aws s3 cp's copy of step $step differs from the root's"
		drop_caches
		timed dn_sync "$AWS" --endpoint-url "$AWS_ENDPOINT_URL" \
			s3 sync --quiet "s3://$bucket/$s3step/" "$dl/aws-sync-$rep/"
		same_files "$sdir" "$dl/aws-sync-$rep" || die "aws s3 sync's copy of step $step differs from the root's"

		if [ "$verbose" = 1 ]; then
			printf '  rep %d up:   ckpt %s s (from the commit %s, wall %s; ckptd cpu %s s, server cpu %s s); load average %s\n' \
				"$rep" "$up_s" "$from_commit" "$wall" "$(last up_ckpt_cpu)" "$(last up_ckpt_srv)" \
				"$(cut -d' ' -f1-3 /proc/loadavg)"
			printf '  rep %d up:   aws cp %s s (cpu %s, server %s), aws sync %s s (cpu %s, server %s)\n' \
				"$rep" "$(last up_cp)" "$(last up_cp_cpu)" "$(last up_cp_srv)" \
				"$(last up_sync)" "$(last up_sync_cpu)" "$(last up_sync_srv)"
			printf '  rep %d down: ckpt-restore %s s (fetch %s; cpu %s, server %s),' \
				"$rep" "$(last dn_ckpt)" "$fetch" "$(last dn_ckpt_cpu)" "$(last dn_ckpt_srv)"
			printf ' aws cp %s s (+fsync %s; cpu %s, server %s), aws sync %s s (+fsync %s; cpu %s, server %s)\n' \
				"$(last dn_cp_nosync)" "$(last dn_cp)" "$(last dn_cp_cpu)" "$(last dn_cp_srv)" \
				"$(last dn_sync_nosync)" "$(last dn_sync)" "$(last dn_sync_cpu)" "$(last dn_sync_srv)"
		fi
	done
	nd=$(grep -c "durable job=$job .*direct=1" "$clog" || true)
	na=$(grep -c "durable job=$job " "$clog" || true)
	echo "   ckptd wrote $nd of $na shards with O_DIRECT (those are not in the page cache when the upload reads them)"
	kill "$ckptd_pid" 2>/dev/null
	wait "$ckptd_pid" 2>/dev/null || true
	ckptd_pid=
	tables+=("$cfg_i|$desc")
done

# ---- report ----
row() { # label bytes ckpt cp sync
	awk -v l="$1" -v b="$2" -v k="$3" -v c="$4" -v s="$5" 'BEGIN {
		mb = b / 1e6
		printf "| %s | %.2f (%.0f MB/s) | %.2f (%.0f MB/s) | %.2f (%.0f MB/s) | %.2f | %.2f |\n",
			l, k, mb / k, c, mb / c, s, mb / s, c / k, s / k
	}'
}
m() { med <<<"${R[$1,$2]}"; }
echo
echo "Medians of $reps; seconds (MB/s); ratio = ckpt throughput / aws throughput (> 1: ckpt faster)."
echo "Bytes per step: ${R[1,bytes]} ($(awk -v b="${R[1,bytes]}" 'BEGIN { printf "%.1f MiB", b / 1048576 }');" \
	"shards, indexes and manifest). aws downloads include an fsync of every file."
echo
echo "| configuration | direction | ckpt | aws s3 cp | aws s3 sync | ckpt / cp | ckpt / sync |"
echo "|---|---|---:|---:|---:|---:|---:|"
for t in "${tables[@]}"; do
	i=${t%%|*}
	d=${t#*|}
	b=${R[$i,bytes]}
	row "$d | upload" "$b" "$(m "$i" up_ckpt)" "$(m "$i" up_cp)" "$(m "$i" up_sync)"
	row "$d | download (ckpt-restore: fetch, verify, commit)" "$b" \
		"$(m "$i" dn_ckpt)" "$(m "$i" dn_cp)" "$(m "$i" dn_sync)"
	[ "$(m "$i" dn_fetch)" != nan ] &&
		row "$d | download, ckpt-restore's fetch phase only" "$b" \
			"$(m "$i" dn_fetch)" "$(m "$i" dn_cp)" "$(m "$i" dn_sync)"
done
echo
echo "CPU seconds per step (medians): client / S3 server (radosgw, OSD, mon)"
echo
echo "| configuration | direction | ckpt | aws s3 cp | aws s3 sync |"
echo "|---|---|---:|---:|---:|"
for t in "${tables[@]}"; do
	i=${t%%|*}
	d=${t#*|}
	echo "| $d | upload | $(m "$i" up_ckpt_cpu) / $(m "$i" up_ckpt_srv) |" \
		"$(m "$i" up_cp_cpu) / $(m "$i" up_cp_srv) | $(m "$i" up_sync_cpu) / $(m "$i" up_sync_srv) |"
	echo "| $d | download | $(m "$i" dn_ckpt_cpu) / $(m "$i" dn_ckpt_srv) |" \
		"$(m "$i" dn_cp_cpu) / $(m "$i" dn_cp_srv) | $(m "$i" dn_sync_cpu) / $(m "$i" dn_sync_srv) |"
done
echo
for t in "${tables[@]}"; do
	i=${t%%|*}
	echo "configuration $i: ckpt upload from the commit's log time to the upload's $(m "$i" up_ckpt_commit) s;" \
		"aws downloads without the fsync: cp $(m "$i" dn_cp_nosync) s, sync $(m "$i" dn_sync_nosync) s"
done
