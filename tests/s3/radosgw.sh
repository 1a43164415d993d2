#!/usr/bin/env bash
# A real one-node Ceph RADOS Gateway on loopback, for tests and benchmarks.
#
#   radosgw.sh start DIR [BUCKET]   bring up mon + bluestore OSD + radosgw under
#                                   DIR, create a user and BUCKET (default
#                                   ckpt-test), write DIR/env
#   radosgw.sh stop DIR             stop every daemon of DIR, empty DIR
#   radosgw.sh status DIR           exit 0 when the gateway answers
#
# Everything lives under DIR: ceph.conf, keyring, mon and OSD data, the
# sparse block file, logs, pid files and admin sockets. Nothing goes to
# /etc/ceph, /var/lib/ceph or systemd, and every port, the fsid and the
# keys are fresh, so several instances can run on one machine at once.
# `source DIR/env` sets AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
# AWS_ENDPOINT_URL, AWS_REGION (and AWS_DEFAULT_REGION) and S3_BUCKET.
#
# Environment:
#   RGW_START_TIMEOUT   seconds to wait for each stage (default 120)
#   RGW_BLOCK_SIZE      size of the sparse OSD block file (default 64G;
#                       only what is written takes disk space)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
py=${PYTHON3:-python3}
s3util=("$py" "$here/s3util.py")
timeout_s=${RGW_START_TIMEOUT:-120}

die() {
	echo "radosgw.sh: $*" >&2
	exit 1
}

# Print the last lines of every log of DIR, to explain a failed start.
dump_logs() {
	local d=$1 f
	for f in "$d"/log/*; do
		[ -f "$f" ] || continue
		echo "---- tail of $f ----" >&2
		tail -n 25 "$f" >&2
	done
}

# alive DIR NAME: the daemon NAME of DIR still runs (pid file present, the
# process exists and its command line names DIR's config, so a recycled pid
# of an unrelated process is never taken for ours).
alive() {
	local pidf=$1/run/$2.pid pid
	[ -f "$pidf" ] || return 1
	pid=$(cat "$pidf")
	[ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$1/ceph.conf"
}

# kill_daemon DIR NAME: SIGTERM, then SIGKILL after a few seconds (radosgw
# may ignore SIGTERM), then wait until the process is gone.
kill_daemon() {
	local d=$1 name=$2 pid
	alive "$d" "$name" || return 0
	pid=$(cat "$d/run/$name.pid")
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 1 30); do
		alive "$d" "$name" || return 0
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	for _ in $(seq 1 100); do
		alive "$d" "$name" || return 0
		sleep 0.1
	done
	echo "radosgw.sh: $name (pid $pid) survives SIGKILL" >&2
	return 1
}

# launch DIR NAME CMD...: run a daemon in the foreground of a background job
# (so its pid is ours to record and it stays in the caller's process group,
# where a test runner's timeout kill reaches it too).
launch() {
	local d=$1 name=$2
	shift 2
	"$@" </dev/null >>"$d/log/$name.out" 2>&1 &
	echo $! >"$d/run/$name.pid"
}

ceph_cli() {
	timeout 60 ceph -c "$dir/ceph.conf" --connect-timeout 30 "$@"
}

cmd_start() {
	dir=$1
	local bucket=${2:-ckpt-test} b start_ns
	start_ns=$(date +%s%N)
	for b in ceph-mon ceph-osd radosgw radosgw-admin monmaptool ceph-authtool ceph; do
		command -v "$b" >/dev/null ||
			die "$b not found (install radosgw ceph-mon ceph-osd ceph-common: scripts/install-deps.sh)"
	done
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	[ -e "$dir/ceph.conf" ] && die "$dir already holds an instance (stop it first)"
	mkdir -p "$dir"/{log,run,mon,osd,rgw,tmp}

	local ports mon_port rgw_port fsid osd_uuid
	mapfile -t ports < <("${s3util[@]}" freeport 2)
	mon_port=${ports[0]}
	rgw_port=${ports[1]}
	fsid=$(cat /proc/sys/kernel/random/uuid)
	osd_uuid=$(cat /proc/sys/kernel/random/uuid)

	# auth none inside the cluster saves the cephx key plumbing; radosgw
	# still checks every S3 request's SigV4 signature against its users.
	cat >"$dir/ceph.conf" <<EOF
# Written by tests/s3/radosgw.sh: a throwaway one-node test cluster.
[global]
fsid = $fsid
mon_host = v2:127.0.0.1:$mon_port
public_addr = 127.0.0.1
cluster_addr = 127.0.0.1
public_network = 127.0.0.0/8
ms_bind_msgr1 = false
auth_cluster_required = none
auth_service_required = none
auth_client_required = none
# radosgw otherwise insists on the "secure" mode towards the mon, which
# auth none cannot provide (its mon session then fails with -13).
ms_mon_client_mode = crc
ms_mon_service_mode = crc
ms_mon_cluster_mode = crc
ms_client_mode = crc
ms_service_mode = crc
ms_cluster_mode = crc
keyring = $dir/keyring
run_dir = $dir/run
crash_dir = $dir/tmp
mon_cluster_log_file = $dir/log/cluster.log
osd_pool_default_size = 1
osd_pool_default_min_size = 1
mon_allow_pool_size_one = true
mon_warn_on_pool_no_redundancy = false
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_pool_default_pg_autoscale_mode = off
mon_max_pg_per_osd = 1000
osd_crush_chooseleaf_type = 0
# A loaded two-core machine must not mark the only OSD down.
osd_heartbeat_grace = 120
mon_osd_report_timeout = 900

[mon]
mon_data = $dir/mon/\$cluster-\$id
admin_socket = $dir/run/\$name.asok
log_file = $dir/log/\$name.log
mon_data_avail_warn = 1
mon_data_avail_crit = 0

[osd]
osd_data = $dir/osd/\$cluster-\$id
osd_objectstore = bluestore
# The block file lives outside osd_data (bluestore's own symlink points at it).
bluestore_block_path = $dir/osd-block
bluestore_block_create = true
bluestore_block_size = ${RGW_BLOCK_SIZE:-64G}
bluestore_fsck_on_mount = false
osd_memory_target = 1073741824
admin_socket = $dir/run/\$name.asok
log_file = $dir/log/\$name.log

[client.rgw]
rgw_frontends = beast endpoint=127.0.0.1:$rgw_port
rgw_data = $dir/rgw
admin_socket = $dir/run/\$name.asok
log_file = $dir/log/\$name.log
rgw_enable_usage_log = false
EOF

	# From here on a failure stops whatever did start; the logs stay in DIR
	# until `stop DIR`.
	rc=0
	trap 'rc=$?; if [ $rc -ne 0 ]; then dump_logs "$dir"; kill_all "$dir" || true; fi' EXIT

	ceph-authtool --create-keyring "$dir/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
	monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$mon_port]" "$dir/tmp/monmap" >/dev/null
	ceph-mon -c "$dir/ceph.conf" --mkfs -i a --monmap "$dir/tmp/monmap" --keyring "$dir/keyring" \
		>>"$dir/log/mkfs.out" 2>&1 || die "ceph-mon --mkfs failed"
	launch "$dir" mon.a ceph-mon -c "$dir/ceph.conf" -f -i a

	local osd_id
	osd_id=$(ceph_cli osd new "$osd_uuid" 2>>"$dir/log/mkfs.out") || die "ceph osd new failed (mon not answering?)"
	[ "$osd_id" = 0 ] || die "unexpected OSD id '$osd_id'"
	mkdir -p "$dir/osd/ceph-0"
	ceph-osd -c "$dir/ceph.conf" -i 0 --mkfs --osd-uuid "$osd_uuid" >>"$dir/log/mkfs.out" 2>&1 ||
		die "ceph-osd --mkfs failed"
	launch "$dir" osd.0 ceph-osd -c "$dir/ceph.conf" -f -i 0

	# radosgw creates its pools at start; they only become usable once the
	# OSD is up, so wait for that first (bounded).
	local deadline=$((SECONDS + timeout_s))
	until [ "$(ceph_cli osd stat -f json 2>/dev/null | "$py" -c 'import json,sys; print(json.load(sys.stdin).get("num_up_osds", 0))' 2>/dev/null)" = 1 ]; do
		alive "$dir" osd.0 || die "ceph-osd exited during start"
		[ $SECONDS -lt $deadline ] || die "OSD not up after $timeout_s s"
		sleep 0.5
	done

	launch "$dir" client.rgw radosgw -c "$dir/ceph.conf" -n client.rgw -f
	local endpoint=http://127.0.0.1:$rgw_port
	"${s3util[@]}" wait-http "$endpoint/" "$timeout_s" || die "radosgw not serving on $endpoint"
	alive "$dir" client.rgw || die "radosgw exited during start"

	# The user gets keys generated by radosgw-admin; they go only into DIR/env.
	local user_json
	user_json=$(timeout 60 radosgw-admin -c "$dir/ceph.conf" user create --uid=ckpt-test \
		--display-name="ckpt test user" 2>>"$dir/log/admin.out") || die "radosgw-admin user create failed"
	(
		umask 077
		printf '%s' "$user_json" | "$py" -c '
import json, shlex, sys
key = json.load(sys.stdin)["keys"][0]
print("export AWS_ACCESS_KEY_ID=%s" % shlex.quote(key["access_key"]))
print("export AWS_SECRET_ACCESS_KEY=%s" % shlex.quote(key["secret_key"]))
' >"$dir/env"
		cat >>"$dir/env" <<EOF
export AWS_ENDPOINT_URL=$endpoint
export AWS_REGION=us-east-1
export AWS_DEFAULT_REGION=us-east-1
export AWS_EC2_METADATA_DISABLED=true
export S3_BUCKET=$bucket
export S3_SERVER=radosgw
EOF
	)
	# shellcheck disable=SC1091
	(source "$dir/env" && "${s3util[@]}" request PUT "$endpoint/$bucket" >"$dir/log/bucket.out" 2>&1) ||
		die "creating bucket $bucket failed: $(cat "$dir/log/bucket.out")"

	trap - EXIT
	local ms=$((($(date +%s%N) - start_ns) / 1000000))
	echo "radosgw.sh: $endpoint ready in $((ms / 1000)).$(printf %03d $((ms % 1000))) s, bucket $bucket; source $dir/env"
}

cmd_stop() {
	local d=$1
	[ -d "$d" ] || return 0
	d=$(cd "$d" && pwd)
	# Only a directory this script set up is emptied.
	if [ ! -f "$d/ceph.conf" ] || ! grep -q '^# Written by tests/s3/radosgw.sh' "$d/ceph.conf"; then
		[ -z "$(ls -A "$d")" ] && return 0
		die "$d is not a radosgw.sh instance; not touching it"
	fi
	kill_all "$d" || die "some daemons of $d would not stop; left $d in place"
	find "$d" -mindepth 1 -delete
}

kill_all() {
	local rc=0 name
	for name in client.rgw osd.0 mon.a; do
		kill_daemon "$1" "$name" || rc=1
	done
	return $rc
}

cmd_status() {
	local d=$1
	[ -f "$d/env" ] || return 1
	# shellcheck disable=SC1091
	(source "$d/env" && "${s3util[@]}" wait-http "$AWS_ENDPOINT_URL/" 5 2>/dev/null)
}

case "${1:-}" in
start) [ $# -ge 2 ] || die "usage: radosgw.sh start DIR [BUCKET]"; cmd_start "$2" "${3:-}" ;;
stop) [ $# -eq 2 ] || die "usage: radosgw.sh stop DIR"; cmd_stop "$2" ;;
status) [ $# -eq 2 ] || die "usage: radosgw.sh status DIR"; cmd_status "$2" ;;
*) die "usage: radosgw.sh start DIR [BUCKET] | stop DIR | status DIR" ;;
esac
