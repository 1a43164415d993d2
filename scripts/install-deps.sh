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
	libcurl4-openssl-dev  # libcurl: ckptd's webhook events (and the S3 tier)
	libxml2-dev       # libxml2: parsing S3 replies (listings, errors) in the S3 client
	libmicrohttpd-dev # ckptd's Prometheus metrics endpoint (GET /metrics)
	libsystemd-dev    # sd_notify: ckptd's readiness and watchdog under systemd (Type=notify)
	libfabric-dev libfabric-bin  # the peer link between the daemons of a multi-node job (fi_info for diagnosis)
	libfuse3-dev fuse3  # tests/powercut: ckpt-powerfs, a FUSE file system that drops unsynced data
	# fuzzers and sanitizers
	clang llvm libclang-rt-14-dev
	# benchmark reference and test helpers
	fio python3 util-linux procps psmisc e2fsprogs coreutils
	prometheus        # tests/integration/metrics-prometheus.sh scrapes ckptd with a real server
	# tests/s3/radosgw.sh: a real one-node Ceph RADOS Gateway (S3) on loopback
	radosgw ceph-mon ceph-osd ceph-base ceph-common
	awscli            # tests/s3 self-tests: an independent S3 client (aws s3api)
	libopenmpi-dev openmpi-bin manpages-ja  # ckpt-train (MPI) and its default Japanese corpus
	systemd groff-base  # tests/dist: systemd-analyze verify of ckptd.service; groff -ww on the man pages
)

# moto 5 (an S3 server that checks SigV4) for tests/s3client/moto.sh. Not in
# Debian 12: CI's python3 on PATH already has it (with boto3); elsewhere pip
# installs it for that python3.
if ! python3 -c 'import moto, boto3, flask' 2>/dev/null; then
	echo "install-deps: installing moto[server] for $(command -v python3) (S3 client tests)"
	python3 -m pip install --quiet 'moto[server]==5.2.1' 2>/dev/null ||
		python3 -m pip install --quiet --break-system-packages 'moto[server]==5.2.1' ||
		echo "install-deps: WARNING: could not install moto; the s3-moto test will fail" >&2
fi

# The Python package's tests (tests/python) and `pip install .`: torch
# 2.13.0 for the python3 on PATH, pinned exactly (its CPU build; a looser
# spec can pull a multi-GB CUDA build), with pytest, numpy and meson-python.
if ! python3 -c 'import torch, pytest, numpy, mesonpy; assert torch.__version__.split("+")[0] == "2.13.0"' 2>/dev/null; then
	echo "install-deps: installing torch==2.13.0, pytest, numpy, meson-python for $(command -v python3) (Python tests)"
	python3 -m pip install --quiet torch==2.13.0 pytest numpy meson-python 2>/dev/null ||
		python3 -m pip install --quiet --break-system-packages torch==2.13.0 pytest numpy meson-python ||
		echo "install-deps: WARNING: could not install torch; the python-* tests will fail" >&2
fi

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
