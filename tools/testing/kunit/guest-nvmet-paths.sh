#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# The NVMe-oF target's paths and faults under I/O, with the stock host: native
# multipath over two ports (one port goes, the I/O goes on over the other),
# and a single path that goes away and comes back within the host's
# ctrl_loss_tmo (the port unlinked, the target's module unloaded): the host's
# reconnect loop runs and fio, running all the while, sees no error. (`rdma
# link delete` is a fault of the two-guest topology: in one guest the host
# shares the target's device, and nvme-rdma deletes a controller whose own
# device goes.) Rows of nvmt_target_suite (guest-nvmet.sh), whose
# functions they use; the kernel has CONFIG_NVME_MULTIPATH.

# How long the host waits between reconnects, and for how long it tries.
NVMT_RECONNECT="--reconnect-delay=1 --ctrl-loss-tmo=60"

# nvmt_ctrl_states NQN: the states of NQN's controllers, one line.
nvmt_ctrl_states() {
	local c
	for c in /sys/class/nvme/nvme*; do
		[ -e "$c/subsysnqn" ] && [ "$(cat "$c/subsysnqn")" = "$1" ] && printf '%s:%s ' "${c##*/}" "$(cat "$c/state")"
	done
	echo
}

# nvmt_live NQN N: N of NQN's controllers are live.
nvmt_live() { [ "$(nvmt_ctrl_states "$1" | grep -o ':live' | wc -l)" = "$2" ]; }

# nvmt_bg_fio NQN SECS [ARGS...]: fio on NQN's namespace in the background for
# SECS seconds, time-based random 4 KiB writes at QD 8 with crc32c headers,
# every 16 written read back and verified during the run (ARGS added, after:
# `--verify=0` for a namespace that loses its data); its pid in
# /tmp/nvmt-bg.pid, its report in /tmp/nvmt-bg. Returns once fio's I/O
# flows (guest-nvme.sh's hst_writing: NVMT_BG_IOS completed on the disk
# within 10 s; fio's verify reads never outnumber its writes, so 64 writes at
# least), so that a fault after it lands on I/O in flight.
NVMT_BG_IOS=128
nvmt_bg_fio() {
	local nqn=$1 secs=$2 dev start
	shift 2
	dev=$(nvmt_ns "$nqn") || { echo "no namespace of $nqn"; return 1; }
	start=$(hst_ios "$dev") || { echo "no disk $dev"; return 1; }
	$FIO --name=bg --filename="/dev/$dev" --direct=1 --ioengine=libaio --rw=randwrite --bs=4k \
		--iodepth=8 --size=8m --time_based --runtime="$secs" --verify=crc32c --verify_backlog=16 \
		--verify_fatal=1 --thread "$@" --output=/tmp/nvmt-bg > /dev/null 2>&1 &
	echo $! > /tmp/nvmt-bg.pid
	wait_for 10 hst_writing "$dev" "$start" $NVMT_BG_IOS && return 0
	echo "fio on /dev/$dev: fewer than $NVMT_BG_IOS I/Os in 10 s (stat: $(cat "/sys/block/$dev/stat" 2> /dev/null))"
	kill "$(cat /tmp/nvmt-bg.pid)" 2> /dev/null
	wait "$(cat /tmp/nvmt-bg.pid)" 2> /dev/null
	return 1
}

# nvmt_bg_fio_ok: the background fio ended with status 0 and no error, having
# done I/O.
nvmt_bg_fio_ok() {
	local rc=0
	wait "$(cat /tmp/nvmt-bg.pid)" || rc=$?
	grep -q 'err= 0' /tmp/nvmt-bg && [ $rc = 0 ] ||
		{ cat /tmp/nvmt-bg; echo "fio exited with $rc under the fault: expected 0 and err= 0"; return 1; }
	grep -q 'IOPS=' /tmp/nvmt-bg || { cat /tmp/nvmt-bg; echo "fio did no I/O"; return 1; }
	kmsg "rdmatest: nvmet: fio through the fault: $(grep -o 'IOPS=[^,]*' /tmp/nvmt-bg | tr '\n' ' ')"
}

# tgt_link ROOT NQN PORT_ID / tgt_unlink ROOT NQN PORT_ID: the subsystem on
# the port, or off it (the port stops listening with its last subsystem, and
# the subsystem's controllers through it end).
tgt_link() { ln -s "$1/subsystems/$2" "$1/ports/$3/subsystems/$2"; }
tgt_unlink() { rm "$1/ports/$3/subsystems/$2"; }

# nvmt_multipath ROOT NQN SVCID: a second port (ID 2, SVCID + 1) of the
# subsystem; the host connects through both: two live controllers and one
# namespace head.
nvmt_multipath() {
	local root=$1 nqn=$2 svc=$3
	tgt_port "$root" 2 $NVMT_ADDR $((svc + 1)) && tgt_link "$root" "$nqn" 2 || { echo "no second port"; return 1; }
	$NVME connect -t rdma -n "$nqn" -a $NVMT_ADDR -s "$svc" $NVMT_RECONNECT &&
		$NVME connect -t rdma -n "$nqn" -a $NVMT_ADDR -s $((svc + 1)) $NVMT_RECONNECT ||
		{ echo "nvme connect (two paths) failed"; return 1; }
	wait_for 10 nvmt_live "$nqn" 2 || { nvmt_ctrl_states "$nqn"; echo "expected two live controllers of $nqn"; return 1; }
	wait_for 10 nvmt_ns "$nqn" > /dev/null || { echo "no namespace head of $nqn"; return 1; }
	[ "$(ls /sys/block | grep -c '^nvme[0-9]*n[0-9]*$')" = 1 ] ||
		{ ls /sys/block; echo "expected one nvme block device (one head for both paths)"; return 1; }
}

# nvmt_path_down ROOT NQN: under fio, port 2 loses the subsystem: its path
# ends, the I/O goes on over port 1 with no error, one controller stays live.
nvmt_path_down() {
	nvmt_bg_fio "$2" 8 || return 1
	tgt_unlink "$1" "$2" 2 || { echo "unlinking port 2 failed"; return 1; }
	nvmt_bg_fio_ok || return 1
	nvmt_live "$2" 1 || { nvmt_ctrl_states "$2"; echo "expected one live controller of $2 after port 2 went"; return 1; }
}

# nvmt_paths_end ROOT NQN: both paths disconnected, port 2 removed.
nvmt_paths_end() {
	$NVME disconnect -n "$2" > /dev/null 2>&1
	rmdir "$1/ports/2"
	wait_for 10 nvmt_no_ctrl "$2" || { nvmt_ctrl_states "$2"; echo "controllers of $2 stayed"; return 1; }
}

# nvmt_outage NQN WHAT DOWN UP [FIO ARGS...]: one path (reconnect every
# second), fio running; the command DOWN takes the target away, UP brings it
# back 4 s later: the host reconnects by itself and fio sees no error.
nvmt_outage() {
	local nqn=$1 what=$2 down=$3 up=$4
	shift 4
	nvmt_bg_fio "$nqn" 14 "$@" || return 1
	$down || { echo "$what: taking the target away failed"; return 1; }
	sleep 4
	$up || { echo "$what: bringing the target back failed"; return 1; }
	wait_for 30 nvmt_live "$nqn" 1 || { nvmt_ctrl_states "$nqn"; echo "$what: the host did not reconnect within 30 s"; return 1; }
	nvmt_bg_fio_ok
}

# The faults of nvmt_outage, for the target of NVMT_ROOT, subsystem
# NVMT_NQN on port 1 at NVMT_SVC.
nvmt_port_off() { tgt_unlink "$NVMT_ROOT" "$NVMT_NQN" 1; }
nvmt_port_on() { tgt_link "$NVMT_ROOT" "$NVMT_NQN" 1; }
nvmt_module_off() { tgt_teardown "$NVMT_ROOT" > /dev/null && tgt_unload "$NVMT_ROOT"; }
nvmt_module_on() { tgt_load "$NVMT_ROOT" $NVMT_SIZE && tgt_setup "$NVMT_ROOT" "$NVMT_NQN" 1 $NVMT_ADDR "$NVMT_SVC" $NVMT_SIZE; }

# nvmt_connect_one NQN SVCID: one path to NQN, with the reconnect options.
nvmt_connect_one() {
	$NVME connect -t rdma -n "$1" -a $NVMT_ADDR -s "$2" $NVMT_RECONNECT || { echo "nvme connect failed"; return 1; }
	wait_for 10 nvmt_live "$1" 1 || { nvmt_ctrl_states "$1"; echo "no live controller of $1"; return 1; }
	wait_for 10 nvmt_ns "$1" > /dev/null || { echo "no namespace of $1"; return 1; }
}

# nvmt_paths_rows ROOT NQN SVCID: the rows, on a target set up (tgt_setup)
# with NQN on port 1 at SVCID and no host connected; leaves it so.
nvmt_paths_rows() {
	NVMT_ROOT=$1 NVMT_NQN=$2 NVMT_SVC=$3
	nvmt_check multipath_two_ports_one_head nvmt_multipath "$1" "$2" "$3"
	nvmt_check multipath_port_down_io_goes_on nvmt_path_down "$1" "$2"
	nvmt_check multipath_end nvmt_paths_end "$1" "$2"
	nvmt_check outage_connect nvmt_connect_one "$2" "$3"
	nvmt_check outage_port_removed_io_resumes nvmt_outage "$2" "port removed" nvmt_port_off nvmt_port_on
	# The module's namespace is new (zeroed) when it comes back: no verify.
	nvmt_check outage_module_unloaded_io_resumes nvmt_outage "$2" "module unloaded" nvmt_module_off nvmt_module_on --verify=0
	$NVME disconnect -n "$2" > /dev/null 2>&1
	wait_for 10 nvmt_no_ctrl "$2"
}
