#!/usr/bin/env bash
# Install every Debian 12 package needed to build ckpt and run all its tests.
# Idempotent: when everything is already there it only checks and returns.
# Needs root (or sudo).
set -euo pipefail

packages=(
	# toolchain and build system
	build-essential meson ninja-build pkg-config git ca-certificates
	# libraries (see "Dependencies" in README.md)
	liburing-dev      # io_uring: ckptd's shard writes and restore reads
	libssl-dev        # OpenSSL libcrypto: SHA-256 index digests
	libjansson-dev    # MANIFEST.json and ckpt-inspect --json
	libisal-dev       # ISA-L: fast CRC-32C of checksum chunks
	libinih-dev       # ckptd config file parsing
	libzstd-dev       # zstd: S3 tier compression
	# fuzzers and sanitizers
	clang llvm libclang-rt-14-dev
	# benchmark reference and test helpers
	fio python3 util-linux procps psmisc e2fsprogs coreutils
	libopenmpi-dev openmpi-bin manpages-ja  # ckpt-train (MPI) and its default Japanese corpus
)

missing=()
for p in "${packages[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
		missing+=("$p")
	fi
done

if [ ${#missing[@]} -eq 0 ]; then
	echo "install-deps: all ${#packages[@]} packages present"
	exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null || { echo "install-deps: run as root (or install sudo)" >&2; exit 1; }
	sudo=(sudo)
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
	"${missing[@]}" >/dev/null
echo "install-deps: done"
