#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# The NVMe over Fabrics host's checks (the suite rdma_nvme_host), in one guest:
# rdma_rust_nvme, the project's host, against a target on rxe0's address:
# connect through its control device, what its status says, one disk per
# namespace, fio with verification, ext4, disconnect with everything given
# back, bad option strings refused with a message, a port where nothing
# listens, rmmod with a controller connected.
#
# The same rows run against each target of guest-nvmet.sh (rdmatest.nvmet_target,
# run.sh's NVMET_TARGET), configured by its functions (tgt_load, tgt_setup,
# tgt_teardown, tgt_unload), two namespaces each:
#   c:    the kernel's own nvmet-rdma, two brd RAM disks: the reference, which
#         tells a failure of the host from one of the script (rows c_*);
#   rust: rdma_rust_nvmet, two RAM namespaces (rows rust_*).
# A target whose module is not in the image, or the host's, SKIPs its rows
# with the reason (printed after the results; a skip of ours fails make test).
# Sourced by guest-init.sh after guest-nvmet.sh, whose helpers it uses
# (nvmt_check, nvmt_fio_dev, nvmt_ext4_dev, nvmt_resources_back,
# nvmt_leak_mark, nvmt_kmemleak_clean, nvmt_targets), as it uses guest-init.sh's
# (check, mark, since_mark, wait_for, kmsg).
#
# The driver's interface:
#   /dev/rdma_rust_nvme-fabrics  open read-write, write one nvme-fabrics option
#                         string (transport=rdma,traddr=,trsvcid=,nqn=, ...),
#                         read back "instance=N,cntlid=M\n"; a bad string fails
#                         the write with EINVAL and logs "rdma_rust_nvme: ...";
#                         "disconnect=N" deletes controller N
#   /dev/rnvme<N>n<NSID>  a disk per active namespace
#   /sys/kernel/debug/rdma_rust_nvme/status  one line per controller:
#                         ctrl N state S traddr A trsvcid P subnqn Q cntlid M
#                         io_queues I queue_size D disks D1,D2 completed C errors E

HST_KO=/lib/modules/extra/rdma_rust_nvme.ko
HST_CTL=/dev/rdma_rust_nvme-fabrics
HST_DBG=/sys/kernel/debug/rdma_rust_nvme
HST_STATUS=$HST_DBG/status
# Each of the two namespaces: 16 MiB of RAM (ext4 fits; fio writes at most 2).
HST_SIZE=$((16 * 1024 * 1024))
# A port of rxe0's address where nothing listens.
HST_NO_LISTENER=4499
# What the connect asks for (io_queues is this or the number of CPUs, if fewer).
HST_QUEUES=2
HST_DEPTH=32

hst_loaded() { grep -q '^rdma_rust_nvme ' /proc/modules; }

# hst_kmod_present NAME: the kernel module NAME (nvmet-rdma, brd) is in the
# image, as a module or built in.
hst_kmod_present() {
	local m
	m=/lib/modules/$(uname -r)
	grep -q "/$1\\.ko" "$m/modules.dep" "$m/modules.builtin" 2> /dev/null
}

# hst_ctl OPTIONS [reply]: OPTIONS written to the control device in one write
# (echo -n: on a failed write its message names the errno), then, with
# `reply`, what the same open file reads back, on stdout. In a shell of its
# own (a redirection that fails must not end /init) and within 60 s: a write
# that hangs fails (status 143).
hst_ctl() {
	# shellcheck disable=SC2016 # expanded by the inner shell
	timeout 60 sh -c 'exec 3<> "$1" && echo -n "$2" >&3 &&
		if [ -n "$3" ]; then dd bs=4096 count=1 <&3 2> /dev/null; fi' \
		sh $HST_CTL "$1" "${2:-}"
}

# hst_opts ADDR SVCID NQN [MORE]: a connect's option string.
hst_opts() { echo "transport=rdma,traddr=$1,trsvcid=$2,nqn=$3${4:+,$4}"; }

# hst_field N KEY: KEY's value on controller N's line of the status file.
hst_field() {
	awk -v n="$1" -v k="$2" '$1 == "ctrl" && $2 == n {
		for (i = 3; i < NF; i += 2) if ($i == k) print $(i + 1) }' $HST_STATUS
}
# hst_expect N KEY VALUE: controller N's KEY is VALUE.
hst_expect() {
	local v
	v=$(hst_field "$1" "$2")
	[ "$v" = "$3" ] || { echo "controller $1: $2 '$v', expected '$3'"; return 1; }
}

# hst_disks_left: the host's disks still in /sys/block or /dev, one a line.
hst_disks_left() {
	local d
	for d in /sys/block/rnvme* /dev/rnvme*; do
		[ -e "$d" ] && echo "$d"
	done
}

hst_no_disks() { [ -z "$(hst_disks_left)" ]; }

# hst_none: no controller: the status file reads empty, and no disk is left.
hst_none() {
	local s d
	s=$(cat $HST_STATUS) || { echo "cannot read $HST_STATUS"; return 1; }
	[ -z "$s" ] || { echo "$HST_STATUS:"; echo "$s"; echo "expected no controller"; return 1; }
	d=$(hst_disks_left)
	[ -z "$d" ] || { echo "$d"; echo "disks left (above)"; return 1; }
}

# hst_disconnect_all: whatever controller a failed row left, deleted (quiet).
hst_disconnect_all() {
	local n
	umount /mnt/nvmt 2> /dev/null
	[ -r $HST_STATUS ] || return 0
	awk '$1 == "ctrl" { print $2 }' $HST_STATUS > /tmp/nvh-left
	while read -r n; do
		hst_ctl "disconnect=$n" < /dev/null > /dev/null 2>&1
	done < /tmp/nvh-left
	wait_for 10 hst_none
}

# hst_logged_own: since the last mark, the driver logged a line of its own.
hst_logged_own() { since_mark | grep -qE '(^|\] )rdma_rust_nvme: '; }

# hst_ios DEV: the I/Os the disk DEV (/dev/rnvmeXnY) completed.
hst_ios() { awk '{ print $1 + $5 }' "/sys/block/${1#/dev/}/stat"; }

# hst_writing DEV IOS [MORE]: DEV completed MORE (8) I/Os more than IOS: a
# background writer started before is at work on it. A fault must wait for
# that: fio opens its file only once its thread runs (seconds under TCG), and
# a disk gone by then would be a new regular file to it (hence
# --allow_file_create=0 as well).
hst_writing() { [ "$(hst_ios "$1")" -ge $(($2 + ${3:-8})) ]; }

# --- recovery ------------------------------------------------------------------------
# hst_bg_writer DEV DEPTH SECS OUT [FIO ARGS...]: a 4 KiB random writer at
# depth DEPTH on DEV for SECS seconds, in the background (its pid in
# /tmp/hst-bg.pid, its report in OUT), returning once it is at work on DEV
# (hst_writing); a writer that did no I/O within 30 s is killed.
hst_bg_writer() {
	local dev=$1 depth=$2 secs=$3 out=$4 ios
	shift 4
	ios=$(hst_ios "$dev") || { echo "no disk $dev"; return 1; }
	$FIO --name=bg --filename="$dev" --allow_file_create=0 --direct=1 --ioengine=libaio \
		--rw=randwrite --bs=4k --iodepth="$depth" --size=8m --time_based --runtime="$secs" \
		--thread --output="$out" "$@" > /dev/null 2>&1 &
	echo $! > /tmp/hst-bg.pid
	wait_for 30 hst_writing "$dev" "$ios" && return 0
	kill "$(cat /tmp/hst-bg.pid)" 2> /dev/null
	wait "$(cat /tmp/hst-bg.pid)"
	echo "fio did no I/O on $dev within 30 s"
	return 1
}

# hst_fault_under_fio N SECS LEAD BACK CMD...: controller N under a verifying
# writer (hst_bg_writer, depth 8) for SECS seconds; after LEAD seconds CMD (the fault, and its end, if it
# has one) runs: fio ends with no error and its data verified, and within
# BACK seconds the controller is live again with more reconnects than before.
hst_fault_under_fio() {
	local n=$1 secs=$2 lead=$3 back=$4 r0 f rc=0
	shift 4
	r0=$(hst_field "$n" reconnects)
	[ -n "$r0" ] || { cat $HST_STATUS; echo "no controller $n"; return 1; }
	hst_bg_writer "/dev/rnvme${n}n1" 8 "$secs" /tmp/nvh-bg \
		--verify=crc32c --verify_backlog=16 --verify_fatal=1 || return 1
	sleep "$lead"
	"$@" || { echo "the fault ($*) failed"; rc=1; }
	wait "$(cat /tmp/hst-bg.pid)"
	f=$?
	[ $f = 0 ] && grep -q 'err= 0' /tmp/nvh-bg ||
		{ cat /tmp/nvh-bg; echo "fio exited with $f: expected 0 and err= 0"; rc=1; }
	wait_for "$back" hst_back "$n" "$r0" ||
		{ cat $HST_STATUS; echo "not live again with a reconnect within $back s"; rc=1; }
	return $rc
}

# hst_back N R0: controller N is live and counted more reconnects than R0.
hst_back() { [ "$(hst_field "$1" state)" = live ] && [ "$(hst_field "$1" reconnects)" -gt "$2" ]; }

# hst_port_away ROOT NQN SECS: the target's port taken from the subsystem for
# SECS seconds, then given back.
hst_port_away() {
	tgt_unlink "$1" "$2" 1 || { echo "unlinking the port failed"; return 1; }
	sleep "$3"
	tgt_link "$1" "$2" 1 || { echo "linking the port again failed"; return 1; }
}

# hst_outage ROOT NQN N: controller N (reconnect_delay 1, ctrl_loss_tmo 30)
# under a 14 s verifying writer; the target's port away for 5 s: fio ends
# with no error and its data verified, the controller is live again and
# counted a reconnect.
hst_outage() {
	hst_fault_under_fio "$3" 14 2 10 hst_port_away "$1" "$2" 5 || return 1
	kmsg "rdmatest: nvme host: fio through the outage: $(grep -o 'IOPS=[^,]*' /tmp/nvh-bg | tr '\n' ' ')"
}

# --- identity, events, loss ---------------------------------------------------------
# (The bad-target helpers, hst_bad_target and its kin, are in guest-nvme-bad.sh.)

# hst_identity N NQN: controller N's disks show the identity nvme's disks
# show, in /sys/block/DISK/: wwid "uuid." and the namespace's UUID (tgt_ns
# gives each its own), nsid, uuid, serial and model as the subsystem was
# given them (attr_serial, attr_model; nvme's padding kept), a firmware
# revision, subsysnqn NQN; the files are read-only.
hst_identity() {
	local d=/sys/block/rnvme${1}n1 f u1=${NVMT_UUID%??}01 u2=${NVMT_UUID%??}02
	for f in wwid nsid uuid serial model firmware_rev subsysnqn; do
		[ -r $d/$f ] || { ls $d; echo "no $d/$f"; return 1; }
	done
	[ "$(cat $d/wwid)" = "uuid.$u1" ] || { echo "wwid '$(cat $d/wwid)', expected uuid.$u1"; return 1; }
	[ "$(cat /sys/block/rnvme${1}n2/wwid)" = "uuid.$u2" ] ||
		{ echo "rnvme${1}n2's wwid '$(cat /sys/block/rnvme${1}n2/wwid)', expected uuid.$u2"; return 1; }
	[ "$(cat $d/nsid)" = 1 ] || { echo "nsid '$(cat $d/nsid)', expected 1"; return 1; }
	[ "$(cat $d/uuid)" = "$u1" ] || { echo "uuid '$(cat $d/uuid)', expected $u1"; return 1; }
	[ "$(sed 's/ *$//' $d/serial)" = "$NVMT_SERIAL" ] || { echo "serial '$(cat $d/serial)', expected $NVMT_SERIAL"; return 1; }
	[ "$(sed 's/ *$//' $d/model)" = "$NVMT_MODEL" ] || { echo "model '$(cat $d/model)', expected $NVMT_MODEL"; return 1; }
	[ -n "$(sed 's/ *$//' $d/firmware_rev)" ] || { echo "no firmware revision"; return 1; }
	[ "$(cat $d/subsysnqn)" = "$2" ] || { echo "subsysnqn '$(cat $d/subsysnqn)', expected $2"; return 1; }
	! sh -c "echo x > $d/wwid" 2> /dev/null || { echo "$d/wwid took a write"; return 1; }
	for f in wwid nsid uuid nguid eui serial model firmware_rev subsysnqn; do
		[ -e $d/$f ] && kmsg "rdmatest: nvme: rnvme${1}n1 $f: $(cat $d/$f)"
	done
	return 0
}

# hst_aer_ns N ROOT NQN ON: namespace 2 of subsystem NQN disabled (ON 0) or
# enabled again (ON 1) in the target's configfs, with controller N connected:
# the target sends a Namespace Attribute Changed notice, and within 10 s the
# host logged the event, counted it (async_events), and rnvmeNn2 is gone (or
# back, and reads).
hst_aer_ns() {
	local e0
	e0=$(hst_field "$1" async_events)
	[ -n "$e0" ] || { cat $HST_STATUS; echo "no controller $1"; return 1; }
	mark
	echo "$4" > "$2/subsystems/$3/namespaces/2/enable" || { echo "writing $4 to namespace 2's enable failed"; return 1; }
	wait_for 10 hst_disk_is "$1" 2 "$4" ||
		{ since_mark | grep rdma_rust_nvme; cat $HST_STATUS; echo "rnvme${1}n2 not $( [ "$4" = 0 ] && echo gone || echo back) within 10 s"; return 1; }
	[ "$(hst_field "$1" async_events)" -gt "$e0" ] 2> /dev/null || { cat $HST_STATUS; echo "no asynchronous event counted"; return 1; }
	since_mark | grep "rdma_rust_nvme: rnvme$1: asynchronous event: type 2 information 0x0 log page 0x4" ||
		{ since_mark | grep rdma_rust_nvme; echo "the host did not log the namespace notice"; return 1; }
	[ "$4" = 0 ] || dd if=/dev/rnvme${1}n2 of=/dev/null bs=4k count=1 iflag=direct 2> /dev/null ||
		{ echo "rnvme${1}n2 does not read"; return 1; }
}
# hst_disk_is N NSID ON: rnvmeNnNSID is there (ON 1) or not (ON 0).
hst_disk_is() {
	if [ "$3" = 0 ]; then [ ! -e /sys/block/rnvme${1}n$2 ]; else [ -b /dev/rnvme${1}n$2 ]; fi
}

# hst_loss ROOT NQN N TMO: controller N (reconnect_delay 1, ctrl_loss_tmo TMO)
# under a writer; the port taken away for good: the writer sees an I/O error
# within TMO + 10 s, the controller is dead and fails new I/O at once. The
# port comes back after.
hst_loss() {
	local t0 t1 rc=0
	hst_bg_writer "/dev/rnvme${3}n1" 4 120 /tmp/nvh-loss || return 1
	tgt_unlink "$1" "$2" 1 || { echo "unlinking the port failed"; return 1; }
	t0=$(date +%s)
	wait_for $(($4 + 10)) sh -c "! kill -0 $(cat /tmp/hst-bg.pid) 2> /dev/null"
	t1=$(date +%s)
	if kill -0 "$(cat /tmp/hst-bg.pid)" 2> /dev/null; then
		kill "$(cat /tmp/hst-bg.pid)"
		wait "$(cat /tmp/hst-bg.pid)"
		tgt_link "$1" "$2" 1
		echo "the writer was still running $(($4 + 10)) s after the port went"
		return 1
	fi
	wait "$(cat /tmp/hst-bg.pid)" || rc=$?
	tgt_link "$1" "$2" 1 || { echo "linking the port again failed"; return 1; }
	grep -q 'err= *[1-9]' /tmp/nvh-loss || [ $rc != 0 ] ||
		{ cat /tmp/nvh-loss; echo "the writer ended without an error"; return 1; }
	hst_expect "$3" state dead || { cat $HST_STATUS; return 1; }
	! dd if="/dev/rnvme${3}n1" of=/dev/null bs=4k count=1 iflag=direct 2> /dev/null ||
		{ echo "a read of the dead controller's disk succeeded"; return 1; }
	kmsg "rdmatest: nvme host: the writer failed $((t1 - t0)) s after the port went (ctrl_loss_tmo $4 s)"
}

# hst_link_delete N: rdma link delete rxe0 (both the host's and the target's
# device) under a writer on controller N's first disk: the host's client
# deletes the controller before rdma_cm tears its ids down, the writer fails
# within 30 s, the disks and the status line go, nothing hangs.
hst_link_delete() {
	local t0 rc=0
	hst_bg_writer "/dev/rnvme${1}n1" 4 120 /tmp/hst-linkdel || return 1
	t0=$(uptime_ms)
	timeout 60 rdma link delete rxe0 || { kill "$(cat /tmp/hst-bg.pid)"; echo "rdma link delete rxe0 failed or hung"; return 1; }
	wait_for 30 sh -c "! kill -0 $(cat /tmp/hst-bg.pid) 2> /dev/null" ||
		{ kill "$(cat /tmp/hst-bg.pid)"; echo "the writer still ran 30 s after the link went"; return 1; }
	wait "$(cat /tmp/hst-bg.pid)" || rc=$?
	grep -q 'err= *[1-9]' /tmp/hst-linkdel || [ $rc != 0 ] ||
		{ cat /tmp/hst-linkdel; echo "the writer ended without an error"; return 1; }
	kmsg "rdmatest: nvme host: the writer failed $(( $(uptime_ms) - t0 )) ms after rdma link delete"
	wait_for 10 hst_none || { hst_none; return 1; }
}

# hst_rxe0_back: rxe0 there again (added back if the row before took it).
hst_rxe0_back() { port_active rxe0 || add_rxe rxe0 veth0; }

# --- the rows ---------------------------------------------------------------------
# hst_insmod: the module loads (not loaded before), its control device is
# there and its status file says no controller.
hst_insmod() {
	! hst_loaded || { echo "rdma_rust_nvme is loaded already"; return 1; }
	insmod $HST_KO || { echo "insmod $HST_KO failed"; return 1; }
	wait_for 5 test -c $HST_CTL || { echo "no character device $HST_CTL"; return 1; }
	hst_none
}

# hst_rmmod: the module unloads; its control device, its debugfs directory
# and every disk of its go with it.
hst_rmmod() {
	timeout 60 rmmod rdma_rust_nvme || { echo "rmmod rdma_rust_nvme failed"; return 1; }
	! hst_loaded || { echo "rdma_rust_nvme is still in /proc/modules"; return 1; }
	[ ! -e $HST_DBG ] || { echo "$HST_DBG is still there"; return 1; }
	wait_for 5 test ! -e $HST_CTL || { echo "$HST_CTL is still there"; return 1; }
	wait_for 5 hst_no_disks || { hst_disks_left; echo "disks left after rmmod (above)"; return 1; }
}

# hst_connect OPTIONS: the write is taken and the same file reads back one
# line, instance=N,cntlid=M (into hst_inst and hst_cntlid).
hst_connect() {
	local r
	hst_inst='' hst_cntlid=''
	hst_ctl "$1" reply > /tmp/nvh-reply 2> /tmp/nvh-err ||
		{ cat /tmp/nvh-err; echo "writing '$1' failed"; return 1; }
	r=$(sed -n 's/^instance=\([0-9][0-9]*\),cntlid=\([0-9][0-9]*\)$/\1 \2/p' /tmp/nvh-reply)
	if [ -z "$r" ] || [ "$(wc -l < /tmp/nvh-reply)" != 1 ] || [ "$(tail -c 1 /tmp/nvh-reply | wc -l)" != 1 ]; then
		echo "read back '$(cat /tmp/nvh-reply)': expected one line instance=N,cntlid=M, newline terminated"
		hst_disconnect_all
		return 1
	fi
	hst_inst=${r% *} hst_cntlid=${r#* }
	echo "instance $hst_inst, cntlid $hst_cntlid"
}

# hst_status_live N ADDR SVCID NQN CNTLID: the status file has one line, of
# controller N: live, with the address, subsystem and controller ID of the
# connect, and the queues it asked for.
hst_status_live() {
	local n=$1 q
	q=$(grep -c '^processor' /proc/cpuinfo)
	[ "$q" -lt $HST_QUEUES ] || q=$HST_QUEUES
	wait_for 10 hst_expect "$n" state live || { cat $HST_STATUS; hst_expect "$n" state live; return 1; }
	hst_expect "$n" traddr "$2" && hst_expect "$n" trsvcid "$3" && hst_expect "$n" subnqn "$4" &&
		hst_expect "$n" cntlid "$5" && hst_expect "$n" io_queues "$q" &&
		hst_expect "$n" queue_size $HST_DEPTH || { cat $HST_STATUS; return 1; }
	[ "$(grep -c '^ctrl ' $HST_STATUS)" = 1 ] || { cat $HST_STATUS; echo "expected one controller"; return 1; }
}

# hst_two_disks N SIZE: controller N lists two disks, rnvmeNn1 and rnvmeNn2,
# the only ones, block devices of SIZE bytes each; a block written to each
# reads back from it (two disks that were one namespace would not).
hst_two_disks() {
	local n=$1 d i sectors
	wait_for 10 hst_expect "$n" disks "rnvme${n}n1,rnvme${n}n2" ||
		{ cat $HST_STATUS; hst_expect "$n" disks "rnvme${n}n1,rnvme${n}n2"; return 1; }
	for i in 1 2; do
		d=rnvme${n}n$i
		wait_for 5 test -b "/dev/$d" || { echo "/dev/$d is not a block device"; return 1; }
		sectors=$(cat "/sys/block/$d/size" 2> /dev/null)
		[ "$sectors" = $(($2 / 512)) ] || { echo "$d: '$sectors' sectors, expected $(($2 / 512))"; return 1; }
	done
	[ "$(hst_disks_left | grep -c '^/sys/block/')" = 2 ] || { hst_disks_left; echo "expected two disks"; return 1; }
	for i in 1 2; do
		dd if=/dev/urandom of=/tmp/nvh-block$i bs=4k count=1 2> /dev/null
		dd if=/tmp/nvh-block$i of="/dev/rnvme${n}n$i" bs=4k count=1 oflag=direct 2> /dev/null ||
			{ echo "writing a block to rnvme${n}n$i failed"; return 1; }
	done
	for i in 1 2; do
		dd if="/dev/rnvme${n}n$i" of=/tmp/nvh-back$i bs=4k count=1 iflag=direct 2> /dev/null &&
			cmp -s /tmp/nvh-block$i /tmp/nvh-back$i ||
			{ echo "rnvme${n}n$i does not read back the block written to it"; return 1; }
	done
}

# hst_status_clean N CNTLID: after the I/O, controller N is still the live
# one of the connect (a keep-alive failure or a reconnect would have made a
# new one), completed commands and counted no error.
hst_status_clean() {
	local c e
	hst_expect "$1" state live && hst_expect "$1" cntlid "$2" || { cat $HST_STATUS; return 1; }
	c=$(hst_field "$1" completed) e=$(hst_field "$1" errors)
	case $c in
	'' | *[!0-9]*) cat $HST_STATUS; echo "completed '$c': not a number"; return 1 ;;
	esac
	[ "$e" = 0 ] && [ "$c" -gt 0 ] ||
		{ cat $HST_STATUS; echo "completed $c, errors '$e': expected some completed and 0 errors"; return 1; }
}

# hst_flush_fua N DISK: both targets report a volatile write cache (VWC), so
# DISK is "write back": an fsync of written data reaches the target as a
# Flush, and an O_SYNC direct write as writes with Force Unit Access, each
# counted on controller N's status line.
hst_flush_fua() {
	local f0 u0 f1 u1 wc
	wc=$(cat "/sys/block/$2/queue/write_cache" 2> /dev/null)
	[ "$wc" = "write back" ] || { echo "$2: write_cache '$wc', expected 'write back'"; return 1; }
	f0=$(hst_field "$1" flushes) u0=$(hst_field "$1" fua)
	dd if=/dev/urandom of="/dev/$2" bs=4k count=8 conv=fsync 2> /tmp/nvh-err ||
		{ cat /tmp/nvh-err; echo "a buffered write with fsync to $2 failed"; return 1; }
	$FIO --name=fua --filename="/dev/$2" --rw=write --bs=4k --size=8k --offset=32k \
		--ioengine=psync --direct=1 --sync=1 > /tmp/nvh-err 2>&1 ||
		{ cat /tmp/nvh-err; echo "an O_SYNC direct write to $2 failed"; return 1; }
	f1=$(hst_field "$1" flushes) u1=$(hst_field "$1" fua)
	[ "$f1" -gt "$f0" ] 2> /dev/null || { cat $HST_STATUS; echo "flushes $f0 -> $f1: the fsync sent no Flush"; return 1; }
	[ "$u1" -ge $((u0 + 2)) ] 2> /dev/null || { cat $HST_STATUS; echo "fua $u0 -> $u1: expected two FUA writes"; return 1; }
	echo "flushes $f0 -> $f1, fua $u0 -> $u1"
}

# hst_disconnect N: disconnect=N taken; the disks go and the status empties.
hst_disconnect() {
	umount /mnt/nvmt 2> /dev/null
	hst_ctl "disconnect=$1" 2> /tmp/nvh-err || { cat /tmp/nvh-err; echo "writing disconnect=$1 failed"; return 1; }
	wait_for 10 hst_none || hst_none
}

# hst_refused OPTIONS [ERRNO]: writing OPTIONS fails with ERRNO (a pattern of
# strerror texts; default EINVAL's), the driver logs why in a line of its own,
# and no controller is left.
hst_refused() {
	local want=${2:-Invalid argument}
	mark
	if hst_ctl "$1" > /dev/null 2> /tmp/nvh-err; then
		hst_disconnect_all
		echo "'$1' was taken: expected it refused ($want)"
		return 1
	fi
	grep -q "$want" /tmp/nvh-err || { cat /tmp/nvh-err; echo "'$1' failed, but not with '$want'"; return 1; }
	wait_for 2 hst_logged_own || { since_mark; echo "no line 'rdma_rust_nvme: ...' in the kernel log after '$1'"; return 1; }
	hst_none
}

# hst_no_listener NQN: a connect to a port where nothing listens fails by
# itself (within hst_ctl's 60 s), and leaves no controller.
hst_no_listener() {
	local rc=0 opts
	opts=$(hst_opts "$NVMT_ADDR" $HST_NO_LISTENER "$1")
	hst_ctl "$opts" reply > /tmp/nvh-reply 2> /tmp/nvh-err || rc=$?
	if [ $rc = 0 ]; then
		hst_disconnect_all
		echo "'$opts' was taken ($(cat /tmp/nvh-reply)): nothing listens there"
		return 1
	fi
	[ $rc != 143 ] || { echo "'$opts' did not end within 60 s"; return 1; }
	echo "refused: $(cat /tmp/nvh-err)"
	wait_for 10 hst_none || hst_none
}

# hst_rmmod_connected SVCID NQN: with a controller connected (both disks
# there) and I/O on the first, rmmod succeeds: the module's exit deletes the
# controller, the disks go with the module, the I/O fails, and files held
# open across it are closed after it without harm.
hst_rmmod_connected() {
	local n d rc=0
	hst_connect "$(hst_opts "$NVMT_ADDR" "$1" "$2" reconnect_delay=1,ctrl_loss_tmo=10)" || return 1
	n=$hst_inst d=/dev/rnvme${hst_inst}n1
	wait_for 10 test -b "/dev/rnvme${n}n2" || { cat $HST_STATUS; echo "no disk /dev/rnvme${n}n2"; return 1; }
	# Across the rmmod: a reader and a writer on the first disk, a process
	# holding it open (its last close then comes with the module gone), and
	# one holding the status file (whose read after the rmmod must fail:
	# debugfs refuses calls into a removed file).
	hst_io_start "$d" /tmp/nvh-rm
	(
		i=0
		while [ -d $HST_DBG ] && [ $i -lt 300 ]; do sleep 0.2; i=$((i + 1)); done
	) < "$d" > /dev/null 2>&1 &
	echo $! > /tmp/nvh-holder
	(
		i=0
		while [ -d $HST_DBG ] && [ $i -lt 300 ]; do sleep 0.2; i=$((i + 1)); done
		cat > /dev/null 2>&1
		echo $? > /tmp/nvh-files.rc
	) < $HST_STATUS &
	echo $! > /tmp/nvh-files
	wait_for 10 hst_completed_above "$n" 0 || { echo "no I/O completed before the rmmod"; rc=1; }
	hst_rmmod || rc=1
	wait_for 30 test -e /tmp/nvh-rm-reader -a -e /tmp/nvh-rm-writer ||
		{ kill $hst_io_pids 2> /dev/null; echo "the reader or the writer went on after the rmmod"; rc=1; }
	wait "$(cat /tmp/nvh-holder)" || { echo "the disk's holder failed"; rc=1; }
	wait "$(cat /tmp/nvh-files)"
	[ "$(cat /tmp/nvh-files.rc)" != 0 ] || { echo "a read of the removed status file succeeded"; rc=1; }
	return $rc
}

# hst_completed_above N C: controller N has completed more than C commands.
hst_completed_above() { [ "$(hst_field "$1" completed)" -gt "$2" ] 2> /dev/null; }

# hst_io_start DEV PREFIX: a reader (128 KiB) and a writer (4 KiB, then
# 128 KiB blocks) loop on DEV in the background until their I/O fails (or DEV
# is gone); each then writes the time (uptime_ms) to PREFIX-reader or
# PREFIX-writer. Their PIDs: $hst_io_pids.
hst_io_start() {
	rm -f "$2-reader" "$2-writer"
	(while dd if="$1" of=/dev/null bs=128k iflag=direct 2> /dev/null; do :; done
		uptime_ms > "$2-reader") &
	hst_io_pids=$!
	# A dd started after the disk went would create DEV as a file and write
	# to it for ever: the loop checks first, and such a file is removed.
	(while [ -b "$1" ] && dd if=/dev/zero of="$1" bs=4k count=64 oflag=direct 2> /dev/null &&
		dd if=/dev/zero of="$1" bs=128k count=8 seek=2 oflag=direct 2> /dev/null; do :; done
		[ -b "$1" ] || rm -f "$1"
		uptime_ms > "$2-writer") &
	hst_io_pids="$hst_io_pids $!"
}

# hst_target_rows T ROOT SVCID: every row against the target T (c or rust) of
# configfs root ROOT, its port on rxe0's address at SVCID: the host loaded,
# the target set up with two namespaces, then unloaded both, resources and
# kmemleak as before.
hst_target_rows() {
	local t=$1 root=$2 svc=$3 first=$4 nqn base long n rec
	local host_gate='' load_gate='' tgt_gate='' ctrl_gate='' disk_gate=''
	nqn=nqn.2026-11.org.rdma-rust:rdma_nvme_host-$t
	base=$(hst_opts "$NVMT_ADDR" "$svc" "$nqn")
	nvmt_skip=$hst_skip nvmt_gate=
	if [ -z "$nvmt_skip" ]; then
		case $t in
		c) hst_kmod_present nvmet-rdma && hst_kmod_present brd ||
			nvmt_skip="nvmet-rdma or brd is not in the image (CONFIG_NVME_TARGET_RDMA, CONFIG_BLK_DEV_RAM)" ;;
		rust) [ -e "$NVMT_RUST_KO" ] || nvmt_skip="rdma_rust_nvmet.ko is not in the image" ;;
		esac
	fi
	[ -z "$nvmt_skip" ] || kmsg "rdmatest: nvme: rdma_nvme_host, target $t: every row skipped: $nvmt_skip"
	kmsg "rdmatest: nvme: target $t: MemFree $(awk '/^MemFree:/ { print int($2 / 1024) }' /proc/meminfo) MiB before the rows"
	nvmt_resources > /tmp/nvmt-res
	nvmt_leak_mark
	mark

	nvmt_check "${t}_insmod" hst_insmod || host_gate="rdma_rust_nvme did not load (row ${t}_insmod)"
	nvmt_check "${t}_target_load" tgt_load "$root" $HST_SIZE 2 ||
		load_gate="the target did not load (row ${t}_target_load)"
	tgt_gate=$load_gate nvmt_gate=$load_gate
	nvmt_check "${t}_target_setup_two_namespaces" tgt_setup "$root" "$nqn" 1 "$NVMT_ADDR" "$svc" $HST_SIZE 2 ||
		tgt_gate=${tgt_gate:-"the target was not set up (row ${t}_target_setup_two_namespaces)"}

	# The connect: the queues asked for, keep-alive 5 s (the target ends a
	# controller whose keep-alives stop: the I/O rows would see it), this
	# guest's host NQN and ID.
	nvmt_gate=${host_gate:-$tgt_gate}
	nvmt_check "${t}_connect" hst_connect "$base,nr_io_queues=$HST_QUEUES,queue_size=$HST_DEPTH,keep_alive_tmo=5,hostnqn=$HST_HOSTNQN,hostid=$HST_HOSTID" ||
		ctrl_gate="no controller (row ${t}_connect)"
	n=$hst_inst
	nvmt_gate=${host_gate:-${tgt_gate:-$ctrl_gate}}
	nvmt_check "${t}_status_live" hst_status_live "$n" "$NVMT_ADDR" "$svc" "$nqn" "$hst_cntlid"
	nvmt_check "${t}_two_namespaces_two_disks" hst_two_disks "$n" $HST_SIZE ||
		disk_gate="no two disks (row ${t}_two_namespaces_two_disks)"
	# Small for the debug kernel under TCG (nvmet-rdma with the stock host
	# does ~200 IOPS at QD 1, ~450 at QD 32, ~35 of 128 KiB on a quiet host,
	# a third of that on a busy one): a few seconds each. Queue depth 32 on
	# the second namespace.
	nvmt_gate=${nvmt_gate:-$disk_gate}
	nvmt_check "${t}_identity_in_sysfs" hst_identity "$n" "$nqn"
	nvmt_check "${t}_fio_randwrite_4k_qd1_verify" nvmt_fio_dev "/dev/rnvme${n}n1" randwrite 4k 1 256k
	nvmt_check "${t}_fio_randwrite_4k_qd32_verify" nvmt_fio_dev "/dev/rnvme${n}n2" randwrite 4k 32 1m
	nvmt_check "${t}_fio_write_128k_verify" nvmt_fio_dev "/dev/rnvme${n}n1" write 128k 8 2m
	nvmt_check "${t}_ext4_fsck_clean" nvmt_ext4_dev "/dev/rnvme${n}n1" 1
	nvmt_check "${t}_fsync_flush_dsync_fua" hst_flush_fua "$n" "rnvme${n}n2"
	# The Asynchronous Event Request: both targets send a notice when a
	# namespace goes or comes.
	nvmt_check "${t}_aer_namespace_disabled_disk_removed" hst_aer_ns "$n" "$root" "$nqn" 0
	nvmt_check "${t}_aer_namespace_enabled_disk_added" hst_aer_ns "$n" "$root" "$nqn" 1
	nvmt_gate=${host_gate:-${tgt_gate:-$ctrl_gate}}
	nvmt_check "${t}_status_no_errors" hst_status_clean "$n" "$hst_cntlid"
	nvmt_gate=${host_gate:-$ctrl_gate}
	nvmt_check "${t}_disconnect_disks_gone" hst_disconnect "$n"
	[ -n "$host_gate" ] || hst_disconnect_all > /dev/null 2>&1

	# Over soft-iWARP, against nvmet-rdma (rdma_nvmet_rust has the stock
	# host on the Rust target there): a second port of the target on siw0's
	# address; data verified at depth 32 and in 128 KiB blocks.
	if [ "$t" = c ]; then
	nvmt_gate=$tgt_gate
	nvmt_check "${t}_siw_port_added" tgt_siw_port "$root" "$nqn" 2 "$svc" 1
	nvmt_gate=${host_gate:-$tgt_gate}
	nvmt_check "${t}_siw_connect" hst_connect "$(hst_opts $NVMT_SIW_ADDR "$svc" "$nqn"),nr_io_queues=$HST_QUEUES,queue_size=$HST_DEPTH,keep_alive_tmo=5,hostnqn=$HST_HOSTNQN,hostid=$HST_HOSTID" ||
		nvmt_gate=${nvmt_gate:-"no controller over siw0 (row ${t}_siw_connect)"}
	n=$hst_inst
	nvmt_check "${t}_siw_fio_randwrite_4k_qd32_verify" nvmt_fio_dev "/dev/rnvme${n}n2" randwrite 4k 32 1m
	nvmt_check "${t}_siw_fio_write_128k_verify" nvmt_fio_dev "/dev/rnvme${n}n1" write 128k 8 2m
	nvmt_check "${t}_siw_disconnect" hst_disconnect "$n"
	[ -n "$host_gate" ] || hst_disconnect_all > /dev/null 2>&1
	nvmt_gate=$tgt_gate
	nvmt_check "${t}_siw_port_removed" tgt_siw_port "$root" "$nqn" 2 "$svc" 0
	fi

	# Error recovery: the port taken away under I/O and given back within
	# ctrl_loss_tmo (the I/O goes on, verified), then for good (it fails).
	nvmt_gate=${host_gate:-$tgt_gate}
	rec=reconnect_delay=1,keep_alive_tmo=5,hostnqn=$HST_HOSTNQN,hostid=$HST_HOSTID
	nvmt_check "${t}_recovery_connect" hst_connect "$base,nr_io_queues=$HST_QUEUES,queue_size=$HST_DEPTH,ctrl_loss_tmo=30,$rec" ||
		nvmt_gate=${nvmt_gate:-"no controller (row ${t}_recovery_connect)"}
	n=$hst_inst
	nvmt_check "${t}_recovery_port_removed_io_resumes" hst_outage "$root" "$nqn" "$n"
	nvmt_check "${t}_recovery_disconnect" hst_disconnect "$n"
	[ -n "$host_gate" ] || hst_disconnect_all > /dev/null 2>&1
	nvmt_gate=${host_gate:-$tgt_gate}
	nvmt_check "${t}_loss_connect" hst_connect "$base,nr_io_queues=1,queue_size=$HST_DEPTH,ctrl_loss_tmo=5,$rec" ||
		nvmt_gate=${nvmt_gate:-"no controller (row ${t}_loss_connect)"}
	n=$hst_inst
	nvmt_check "${t}_loss_io_fails_after_ctrl_loss_tmo" hst_loss "$root" "$nqn" "$n" 5
	nvmt_check "${t}_loss_disconnect_dead" hst_disconnect "$n"
	[ -n "$host_gate" ] || hst_disconnect_all > /dev/null 2>&1

	# A bad target (rdma_rust_nvmet breaking a rule once, on purpose): each
	# ends the connection with the reason logged, then the recovery; no
	# request ended by the wrong completion.
	if [ "$t" = rust ]; then
		nvmt_gate=${host_gate:-$tgt_gate}
		nvmt_check "${t}_bad_target_connect" hst_connect "$base,nr_io_queues=1,queue_size=$HST_DEPTH,ctrl_loss_tmo=30,$rec" ||
			nvmt_gate=${nvmt_gate:-"no controller (row ${t}_bad_target_connect)"}
		n=$hst_inst
		nvmt_check "${t}_bad_target_misbehave_refused" hst_misbehave_refused
		nvmt_check "${t}_bad_target_unknown_cid" hst_bad_target "$n" unknown_cid "which is not in flight"
		nvmt_check "${t}_bad_target_stale_cid" hst_bad_target "$n" stale_cid "which is not in flight"
		nvmt_check "${t}_bad_target_wrong_rkey" hst_bad_target "$n" wrong_rkey "bogus remote invalidation\|receive failed"
		nvmt_check "${t}_bad_target_reserved_status" hst_bad_target "$n" reserved_status "impossible status"
		nvmt_check "${t}_bad_target_no_invalidate_local_inv" hst_local_inv "$n"
		nvmt_check "${t}_bad_target_no_answer_timeout" hst_timeout "$n"
		# Its Keep Alive (every 2.5 s: keep_alive_tmo=5) unanswered: the host's
		# keep-alive gives up on it after 2.5 s, when the next is due, and
		# reconnects, before the target's own 5-s timer would end it.
		nvmt_check "${t}_bad_target_keep_alive_unanswered" hst_bad_target "$n" keep_alive_unanswered "command 0x18 had no completion"
		nvmt_check "${t}_bad_target_disconnect" hst_disconnect "$n"
		[ -n "$host_gate" ] || hst_disconnect_all > /dev/null 2>&1
		nvmt_check "${t}_bad_target_absurd_id_ctrl_refused" hst_absurd_ctrl "$base,nr_io_queues=1,queue_size=$HST_DEPTH"
		nvmt_check "${t}_bad_target_absurd_id_ns_not_served" hst_absurd_ns "$base,nr_io_queues=1,queue_size=$HST_DEPTH"
		[ -n "$host_gate" ] || hst_disconnect_all > /dev/null 2>&1
	fi

	# Bad option strings, each otherwise a good connect to the target (taken,
	# it would connect): EINVAL, a message, no controller. Against the first
	# target only: parsing does not depend on it.
	if [ -n "$first" ]; then
		nvmt_gate=$host_gate
		long=$(awk -v p="$nqn" 'BEGIN { s = p "-"; while (length(s) < 300) s = s "x"; print s }')
		nvmt_check "${t}_refused_unknown_option" hst_refused "$base,bogus_option=1"
		nvmt_check "${t}_refused_missing_traddr" hst_refused "transport=rdma,trsvcid=$svc,nqn=$nqn"
		nvmt_check "${t}_refused_missing_nqn" hst_refused "transport=rdma,traddr=$NVMT_ADDR,trsvcid=$svc"
		nvmt_check "${t}_refused_transport_tcp" hst_refused "transport=tcp,traddr=$NVMT_ADDR,trsvcid=$svc,nqn=$nqn"
		nvmt_check "${t}_refused_queue_size_0" hst_refused "$base,queue_size=0"
		nvmt_check "${t}_refused_non_numeric" hst_refused "$base,nr_io_queues=two"
		nvmt_check "${t}_refused_duplicate_option" hst_refused "$base,trsvcid=$svc"
		nvmt_check "${t}_refused_nqn_too_long" hst_refused "$(hst_opts "$NVMT_ADDR" "$svc" "$long")"
		nvmt_check "${t}_refused_disconnect_unknown" hst_refused "disconnect=9999" 'Invalid argument\|No such file or directory'
		nvmt_check "${t}_no_listener_connect_fails" hst_no_listener "$nqn"
		[ -n "$host_gate" ] || hst_disconnect_all > /dev/null 2>&1
	fi

	# rmmod with a controller connected, then the module loaded again and
	# unloaded.
	nvmt_gate=${host_gate:-$tgt_gate}
	nvmt_check "${t}_rmmod_under_io_with_disk_held_open" hst_rmmod_connected "$svc" "$nqn"
	nvmt_gate=$host_gate
	nvmt_check "${t}_reinsert" hst_insmod || host_gate=${host_gate:-"rdma_rust_nvme did not load again (row ${t}_reinsert)"}

	# rdma link delete of the device under the host's I/O (the first target's
	# rows only: the device goes for every module), then rxe0 back.
	if [ -n "$first" ]; then
		nvmt_gate=${host_gate:-$tgt_gate}
		nvmt_check "${t}_link_delete_connect" hst_connect "$base,nr_io_queues=$HST_QUEUES,queue_size=$HST_DEPTH,ctrl_loss_tmo=30,$rec" ||
			nvmt_gate=${nvmt_gate:-"no controller (row ${t}_link_delete_connect)"}
		n=$hst_inst
		nvmt_check "${t}_link_delete_under_io_deletes_controller" hst_link_delete "$n"
		[ -n "$host_gate" ] || hst_disconnect_all > /dev/null 2>&1
		nvmt_gate=
		nvmt_check "${t}_rxe0_back" hst_rxe0_back
	fi
	nvmt_gate=$host_gate
	nvmt_check "${t}_rmmod" hst_rmmod
	if [ -z "$nvmt_skip" ] && hst_loaded; then
		hst_disconnect_all > /dev/null 2>&1
		timeout 60 rmmod rdma_rust_nvme 2> /dev/null
	fi

	# The target goes, and everything is as before the rows.
	nvmt_gate=$load_gate
	nvmt_check "${t}_target_teardown" tgt_teardown "$root"
	nvmt_check "${t}_target_unload" tgt_unload "$root"
	nvmt_gate=
	nvmt_check "${t}_rdma_resources_back" nvmt_resources_back
	nvmt_check "${t}_kmemleak_clean" nvmt_kmemleak_clean
}

# nvme_host_suite: the suite rdma_nvme_host: the rows against each target asked
# for (nvmt_targets: rdmatest.nvmet_target).
nvme_host_suite() {
	local targets
	targets=$(nvmt_targets)
	suite_begin rdma_nvme_host
	hst_skip=
	[ -e $HST_KO ] || hst_skip="rdma_rust_nvme.ko is not in the image (no drivers/rdma_rust_nvme in this tree?)"
	HST_HOSTID=$(cat /proc/sys/kernel/random/uuid)
	HST_HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:$HST_HOSTID
	case $targets in
	c | both) hst_target_rows c "$CFS/nvmet" 4420 first ;;
	esac
	case $targets in
	rust) hst_target_rows rust "$CFS/rdma_rust_nvmet" 4421 first ;;
	both) hst_target_rows rust "$CFS/rdma_rust_nvmet" 4421 ;;
	c) ;;
	*) case_fail targets "rdmatest.nvmet_target=$targets: c, rust or both" ;;
	esac
	suite_end
}
