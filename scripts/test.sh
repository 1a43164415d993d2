#!/usr/bin/env bash
# Install dependencies, build, and run every test suite twice: in a normal
# build (build/) and in an AddressSanitizer + UndefinedBehaviorSanitizer
# build (build-asan/). Exit status is non-zero if anything failed.
#
# Environment:
#   CKPT_SKIP_INSTALL=1   do not run scripts/install-deps.sh
#   CKPT_TEST_ARGS="..."  extra arguments for `meson test` (e.g. "--suite unit")
#   CKPT_JOBS=N           parallel build and test jobs (default: nproc)
#   CKPT_ASAN_CC=cc       compiler of build-asan/ (default: clang if installed;
#                         empty: meson's default). Applies when it is first set up.
set -uo pipefail

cd "$(dirname "$0")/.."

if [ "${CKPT_SKIP_INSTALL:-0}" != 1 ]; then
	scripts/install-deps.sh || exit 1
fi

jobs=${CKPT_JOBS:-$(nproc)}
read -r -a extra <<<"${CKPT_TEST_ARGS:-}"
status=0

# setup DIR CC [meson options...]: configure DIR once (with compiler CC,
# or meson's default if empty), reapply the options on later runs.
setup() {
	local dir=$1 compiler=$2
	shift 2
	if [ -f "$dir/meson-private/coredata.dat" ]; then
		meson configure "$dir" "$@" >/dev/null
	elif [ -n "$compiler" ]; then
		CC=$compiler meson setup "$dir" "$@"
	else
		meson setup "$dir" "$@"
	fi
}

# configure_build DIR CC [meson options...]: configure and build DIR; its
# output also goes to build-logs/DIR.log, which .ci/run shows when a build
# fails (the console output of a long run is cut).
configure_build() {
	local dir=$1 compiler=$2
	shift 2
	mkdir -p build-logs
	{ setup "$dir" "$compiler" "$@" && ninja -C "$dir" -j "$jobs"; } 2>&1 |
		tee "build-logs/$dir.log"
}

# run_suite DIR CC TIMEOUT_MULTIPLIER [meson options...]
run_suite() {
	local dir=$1 compiler=$2 mult=$3
	shift 3
	echo "==> $dir: configure and build"
	# A stale log would be read as this run's results by .ci/run.
	rm -f "$dir/meson-logs/testlog.json" "build-logs/$dir.gpu-failed.log"
	if ! configure_build "$dir" "$compiler" "$@"; then
		if [[ " $* " != *" -Dgpu=enabled "* ]]; then
			echo "==> $dir: BUILD FAILED" >&2
			status=1
			return
		fi
		# The CUDA variant is the one part that depends on a toolkit
		# outside Debian. If it does not build, say so loudly (.ci/run
		# reports it with the log) and still build and test the rest.
		mv "build-logs/$dir.log" "build-logs/$dir.gpu-failed.log"
		if [ -f "$dir/meson-logs/meson-log.txt" ]; then
			{ echo "---- last lines of $dir/meson-logs/meson-log.txt ----"
			  tail -n 40 "$dir/meson-logs/meson-log.txt"; } >>"build-logs/$dir.gpu-failed.log"
		fi
		echo "==> $dir: THE CUDA VARIANT OF ckpt-train DID NOT BUILD" \
			"(build-logs/$dir.gpu-failed.log); building without it" >&2
		if ! configure_build "$dir" "$compiler" -Dgpu=disabled; then
			echo "==> $dir: BUILD FAILED" >&2
			status=1
			return
		fi
	fi
	echo "==> $dir: meson test"
	if ! meson test -C "$dir" --num-processes "$jobs" \
		--timeout-multiplier "$mult" --print-errorlogs "${extra[@]}"; then
		status=1
	fi
}

# The sanitizer build uses clang where it is installed: a second compiler's
# warnings, and it builds the libFuzzer binaries too.
asan_cc=${CKPT_ASAN_CC-}
if [ -z "${CKPT_ASAN_CC+set}" ] && command -v clang >/dev/null; then
	asan_cc=clang
fi

# CUDA: meson finds the toolkit through nvcc on PATH, and the toolkit's
# default place is not on every PATH. Where there is one, build/ must
# build ckpt-train's GPU variant (-Dgpu=enabled: a broken CUDA build then
# fails instead of being left out); build-asan/ takes it where found.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
	export PATH=/usr/local/cuda/bin:$PATH
fi
gpu=()
if command -v nvcc >/dev/null; then
	gpu=(-Dgpu=enabled)
fi

run_suite build "" 1 "${gpu[@]}"
# The sanitizers slow everything down 2-5x; give the tests room.
run_suite build-asan "$asan_cc" 4 -Db_sanitize=address,undefined -Db_lundef=false

if [ $status -eq 0 ]; then
	echo "==> all tests passed (build/ and build-asan/)"
else
	echo "==> FAILURES (see above, and build*/meson-logs/testlog.txt)" >&2
fi
exit $status
