#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# The fault suite: faults by the hundred under running, validated traffic, the
# way blktests treats a driver. `make stress` runs it with its full counts on
# the debug and the release kernel; `make test` runs a few cycles of each.
# After every cycle: no kernel splat, the RDMA objects and the module
# references back to their baseline. Each kind of fault is one KTAP case, and
# one "rdmastress:" line (kind, cycles, failures, wall time) for the report.
# Sourced by guest-init.sh after guest-ulp.sh, whose helpers it uses.

ULP_KO=/lib/modules/extra/rdma_rust_ulp.ko
STRESS_PORT=7700
HUGE=1000000000

stress_say() { kmsg "rdmastress: $*"; }

# module_refs: the reference counts of the RDMA core's modules (those built as
# modules), one line each: a leaked reference shows up here.
module_refs() {
	local m
	for m in ib_core ib_cm iw_cm rdma_cm ib_uverbs rdma_ucm rdma_rxe; do
		[ -e /sys/module/$m/refcnt ] && echo "$m $(cat /sys/module/$m/refcnt)"
	done
	return 0
}

# baseline NAME: what the RDMA core holds now, to compare each cycle against
baseline() { { rdma_resources; module_refs; } > "/tmp/base-$1"; }
same_as_baseline() { { rdma_resources; module_refs; } | cmp -s - "/tmp/base-$1"; }
# back_to_baseline NAME: within 10 s (user-space peers free as their files close)
back_to_baseline() {
	wait_for 10 same_as_baseline "$1" && return 0
	{ rdma_resources; module_refs; } | diff "/tmp/base-$1" -
	return 1
}

# runs_active DEV: how many of DEV's runs still hold resources (running or ended)
runs_active() {
	awk -v d="$1" 'NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next }
		$1 ~ /^[0-9]+$/ && $2 == d && $(h["state"]) != "done" { n++ } END { print n + 0 }' $ULP/stats
}
# all_moving ID...: every one of the runs has moved data
all_moving() {
	awk -v ids=" $* " 'NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next }
		$1 ~ /^[0-9]+$/ && index(ids, " " $1 " ") && $(h["messages"]) > 0 { n++ }
		END { exit n != split(ids, a, " ") }' $ULP/stats
}

# stress_traffic DEV ADDR: long validated runs on DEV, each seen moving data:
# RC SEND, RDMA WRITE and READ, a UD run, and an rdma_cm connection (a ULP
# server and client on ADDR, speaking rping's protocol).
stress_traffic() {
	local dev=$1 a=$2 ids=
	# Shallow queues: six runs at full depth keep the debug kernel's two CPUs
	# in softirq, and the shell driving the faults waits seconds per command.
	for c in "mode=rc op=send size=1024 depth=4" "mode=rc op=write size=4096 depth=4" \
		"mode=rc op=read size=4096 depth=4" "mode=ud op=send size=256 depth=4"; do
		ulp_ctl start dev="$dev" $c count=$HUGE || { echo "start $c failed"; return 1; }
		ids="$ids $(ulp_last_id)"
	done
	STRESS_PORT=$((STRESS_PORT + 1))
	ulp_ctl start cm=server addr="$a" port=$STRESS_PORT count=$HUGE || { echo "cm server failed"; return 1; }
	ulp_cm_start cm=client addr="$a" port=$STRESS_PORT size=4096 count=$HUGE ||
		{ echo "cm client failed"; return 1; }
	ids="$ids $(ulp_last_id)"
	# One read of the stats for all of them: under this load each read takes seconds.
	wait_for 30 all_moving $ids || { cat $ULP/stats; echo "not all of runs$ids move data"; return 1; }
}

# stress_kind KIND CYCLES FUNCTION [ARGS]: FUNCTION CYCLES times; a cycle
# fails if FUNCTION fails or the kernel log reports a splat during it (the
# cycles stop there: a kernel that splatted proves nothing more). The first
# failures' output goes to the log; the case fails if any cycle did. The
# report line gives the cycles run, and the cycles asked for.
stress_kind() {
	# Names of their own: the helpers of guest-ulp.sh set globals (n, r, id).
	local sk_kind=$1 sk_n=$2 sk_fn=$3 sk_i sk_ran=0 sk_fails=0 sk_t0 sk_splat
	shift 3
	sk_t0=$(uptime_ms)
	for sk_i in $(seq 1 "$sk_n"); do
		# Not mark: the cycles use marks of their own.
		stress_say "cycle $sk_kind $sk_i"
		sk_ran=$sk_i
		if ! "$sk_fn" "$@" > /tmp/stress-out 2>&1; then
			sk_fails=$((sk_fails + 1))
			[ $sk_fails -gt 3 ] || { echo "cycle $sk_i:"; tail -n 20 /tmp/stress-out; } >> /tmp/stress-why
		fi
		sk_splat=$(dmesg | sed -n "/rdmastress: cycle $sk_kind $sk_i\$/,\$p" | grep -E "$SPLATS" | head -n 3)
		if [ -n "$sk_splat" ]; then
			sk_fails=$((sk_fails + 1))
			{ echo "cycle $sk_i: kernel splat:"; echo "$sk_splat"; } >> /tmp/stress-why
			break
		fi
	done
	stress_say "kind=$sk_kind cycles=$sk_ran planned=$sk_n failures=$sk_fails ms=$(( $(uptime_ms) - sk_t0 ))"
	[ $sk_fails = 0 ]
}

# --- the faults ------------------------------------------------------------------
# link_cycle: `rdma link delete` of rxe1 under traffic on it, then `rdma link add`:
# the ULP stops and frees the device's runs from remove(), the device comes back.
link_cycle() {
	stress_traffic rxe1 10.77.1.1 || return 1
	local running
	running=$(runs_active rxe1)
	mark
	timeout 60 rdma link delete rxe1 || { echo "rdma link delete failed"; return 1; }
	since_mark | grep -q "rdma_rust_ulp: rxe1: detached ($running runs stopped)" ||
		{ since_mark | grep 'rdma_rust_ulp: rxe1' | tail -n 3; echo "no detach message for $running runs"; return 1; }
	[ "$(runs_active rxe1)" = 0 ] || { echo "rxe1 still has runs"; return 1; }
	add_rxe rxe1 veth1 || { echo "rxe1 did not come back"; return 1; }
	wait_for 10 dmesg_has "rdma_rust_ulp: rxe1: attached" || return 1
	back_to_baseline ulp
}

# rmmod_cycle: insmod the ULP, traffic on rxe0, rmmod (which stops and frees
# every run); the module is gone, and so is everything it held. The
# sample module, which holds RDMA objects while loaded, comes and goes with it.
rmmod_cycle() {
	insmod $ULP_KO || { echo "insmod failed"; return 1; }
	insmod /lib/modules/extra/rdma_rust_loopback.ko || { rmmod rdma_rust_ulp; echo "insmod sample failed"; return 1; }
	# The traffic on one device: both take the debug kernel two minutes a cycle.
	stress_traffic rxe0 10.77.0.1
	local rc=$?
	timeout 60 rmmod rdma_rust_ulp || { echo "rmmod failed"; return 1; }
	timeout 60 rmmod rdma_rust_loopback || { echo "rmmod of the sample failed"; return 1; }
	[ ! -e /sys/module/rdma_rust_ulp ] || { echo "rdma_rust_ulp still loaded"; return 1; }
	[ $rc = 0 ] && back_to_baseline none
}

# netdev_cycle: the netdev under rxe1 goes down and up under traffic: the ULP's
# event registration sees the port go DOWN and come back ACTIVE; the runs
# either go on or end with an error, and `stop all` ends them in bounded time.
netdev_cycle() {
	stress_traffic rxe1 10.77.1.1 || return 1
	mark
	ip link set veth1 down
	sleep 1
	ip link set veth1 up
	wait_for 30 port_active rxe1 || { echo "rxe1's port did not come back"; return 1; }
	wait_for 30 port_active rxe0 || { echo "rxe0's port did not come back"; return 1; }
	wait_for 10 since_mark_has "rdma_rust_ulp: rxe1: port 1: DOWN" || { echo "no DOWN event"; return 1; }
	wait_for 10 since_mark_has "rdma_rust_ulp: rxe1: port 1: ACTIVE" || { echo "no ACTIVE event"; return 1; }
	timeout 60 sh -c "echo stop all > $ULP/ctl" || { echo "stop all failed or hung"; return 1; }
	ulp_ctl clear
	back_to_baseline ulp
}

# qp_error_cycle: a run's QPs forced into the error state mid-run (`fail`): the
# run ends by itself, its requests flushed and the error counted.
qp_error_cycle() {
	local id
	ulp_ctl start dev=${1:-rxe0} mode=rc op=send size=4096 depth=16 count=$HUGE || return 1
	id=$(ulp_last_id)
	wait_for 30 all_moving "$id" || { ulp_row "$id"; echo "run $id moves nothing"; return 1; }
	ulp_ctl fail id="$id" || { echo "fail id=$id refused"; return 1; }
	timeout 60 sh -c "echo wait id=$id > $ULP/ctl" || { ulp_row "$id"; echo "the failed run did not end"; return 1; }
	ulp_row "$id"
	[ "$(ulp_stat "$id" state)" = done ] && ulp_above "$id" errors 0 && ulp_above "$id" wc_flush 0 ||
		{ echo "not done with an error and flushed requests"; return 1; }
	ulp_ctl clear
	back_to_baseline ulp
}

# The same on soft-iWARP (siw0), whose RC pair rdma_cm connects.
siw_qp_error_cycle() { qp_error_cycle siw0; }

# bad_rkey_cycle: an RDMA WRITE run (every other cycle: READ) with an rkey the
# target does not have: its first completion fails (remote access error),
# the run stops and ends with the error counted, having moved nothing.
FAULT_N=0
bad_rkey_cycle() {
	local id op=write dev=${1:-rxe0}
	FAULT_N=$((FAULT_N + 1))
	[ $((FAULT_N % 2)) = 0 ] || op=read
	timeout 60 sh -c "echo start dev=$dev mode=rc op=$op size=4096 depth=8 count=1000 fault=bad_rkey wait=1 > $ULP/ctl" ||
		{ echo "the run did not end"; return 1; }
	id=$(ulp_last_id)
	ulp_row "$id"
	[ "$(ulp_stat "$id" state)" = done ] && ulp_above "$id" errors 0 || { echo "not done with an error"; return 1; }
	# An iWARP WRITE completes once it is on the wire: the target's
	# TERMINATE (the rkey is not its) stops the QP some WRITEs later, and
	# those that follow are flushed.
	if [ $op = write ] && [ "$dev" != "${dev#siw}" ]; then
		[ "$(ulp_stat "$id" messages)" -lt 1000 ] || { echo "all 1000 WRITEs completed"; return 1; }
	else
		ulp_has "$id" messages 0 || { echo "something moved"; return 1; }
	fi
	ulp_ctl clear
	back_to_baseline ulp
}
# The same on soft-iWARP (siw0), whose RC pair rdma_cm connects.
siw_bad_rkey_cycle() { bad_rkey_cycle siw0; }

# ud_fault_cycle: UD datagrams with the wrong Q_Key (every other cycle: to a
# QP number nobody has): the receiving side drops them all; the sender's run
# completes, and every datagram is counted lost, none received.
ud_fault_cycle() {
	local id f=bad_qkey
	FAULT_N=$((FAULT_N + 1))
	[ $((FAULT_N % 2)) = 0 ] || f=bad_qpn
	ulp_ctl start dev=rxe0 mode=ud op=send size=256 depth=16 count=200 fault=$f wait=1 ||
		{ echo "start fault=$f failed"; return 1; }
	id=$(ulp_last_id)
	ulp_row "$id"
	[ "$(ulp_stat "$id" state)" = done ] && ulp_has "$id" messages 200 && ulp_has "$id" errors 0 &&
		ulp_has "$id" received 0 && ulp_has "$id" lost 200 ||
		{ echo "fault=$f: not 200 sent, 0 received, 200 lost"; return 1; }
	ulp_ctl clear
	back_to_baseline ulp
}

# small_cq_cycle: a run whose CQ is too small for its queues (64 sends and 128
# receives into 16 entries) is refused up front, with a message, and leaves
# nothing behind.
small_cq_cycle() {
	local rows
	rows=$(wc -l < $ULP/stats)
	mark
	! ulp_ctl start dev=rxe0 mode=rc op=send size=4096 depth=64 cq=16 2> /dev/null ||
		{ echo "accepted"; return 1; }
	since_mark | grep -q 'rdma_rust_ulp: .*could not be built' || { since_mark | tail -n 3; echo "no message"; return 1; }
	[ "$(wc -l < $ULP/stats)" = "$rows" ] || { echo "a run is listed"; return 1; }
	back_to_baseline ulp
}

# --- hostile control strings -----------------------------------------------------
# hostile I: the I-th hostile control string (generated, reproducible), as
# bytes on stdout. None is a valid command, in whole or in any part a partial
# write makes of it.
hostile() {
	local i=$1 r
	r=$(awk -v i="$i" 'BEGIN { srand(i); print int(rand() * 1000000) }')
	case $((i % 12)) in
	0) head -c $((r % 200 + 1)) /dev/urandom ;;
	1) printf 'start dev=rxe0\000 count=%d' "$r" ;;
	2) printf 'start dev=rxe0 size=%d%s' "$r" "$(head -c 2000 /dev/zero | tr '\0' 9)" ;;
	3) printf 'start dev=%s' "$(head -c $((r % 300 + 65)) /dev/zero | tr '\0' x)" ;;
	4) printf 'start dev=rxe0 frob%d=1' "$r" ;;
	5) printf 'start dev=rxe0 count=%d count=%d' "$r" "$r" ;;
	6) printf 'start dev=rxe0 size=-%d' "$r" ;;
	7) printf 'start dev=rxe0 depth=0 count=%d' "$r" ;;
	8) printf 'start dev=rxe0 count=1%019d' "$r" ;;
	9) printf 'stop id=-%d' "$r" ;;
	10) printf 'go id=%d remote=%d:%d' "$r" "$r" "$r" ;;
	11) printf 'start dev=rxe0 mode=ud op=read size=%d' "$r" ;;
	esac
}

# hostile_write FILE: write FILE to the control file in one write, or in
# pieces of 5 bytes (every third string): every write must be refused.
hostile_write() {
	local f=$1 i=$2
	if [ $((i % 3)) = 0 ] && [ "$(wc -c < "$f")" -gt 5 ]; then
		! dd if="$f" of=$ULP/ctl bs=5 2> /dev/null
	else
		! dd if="$f" of=$ULP/ctl bs=4096 2> /dev/null
	fi
}

# hostile_writer FIRST LAST: strings FIRST..LAST; prints how many were accepted
hostile_writer() {
	local i bad=0
	for i in $(seq "$1" "$2"); do
		hostile "$i" > /tmp/hostile-$1
		[ -s /tmp/hostile-$1 ] || continue
		hostile_write /tmp/hostile-$1 "$i" || { bad=$((bad + 1)); echo "accepted: string $i" >&2; }
	done
	echo $bad
}

# hostile_ctl N: N hostile strings through the control file, by 4 writers at
# once: each refused with a message, and the ULP's state and the RDMA objects
# identical before and after.
hostile_ctl() {
	local n=$1 q w bad=0 before msgs
	q=$((n / 4))
	cp $ULP/stats /tmp/stats-before
	baseline hostile
	before=$(dmesg | grep -c 'rdma_rust_ulp: ')
	for w in 0 1 2 3; do
		hostile_writer $((w * q + 1)) $((w * q + q)) > /tmp/hostile-count-$w &
	done
	wait
	for w in 0 1 2 3; do bad=$((bad + $(cat /tmp/hostile-count-$w))); done
	msgs=$(( $(dmesg | grep -c 'rdma_rust_ulp: ') - before ))
	echo "$((4 * q)) strings, $bad accepted, $msgs messages logged"
	[ $bad = 0 ] || return 1
	[ $msgs -ge $((4 * q)) ] || { echo "fewer messages than refused writes"; return 1; }
	cmp -s $ULP/stats /tmp/stats-before || { diff /tmp/stats-before $ULP/stats; echo "stats changed"; return 1; }
	back_to_baseline hostile
}

# --- long validated runs ---------------------------------------------------------
# long_rc N: one validated RC SEND run of N messages: none lost, duplicated or corrupt
long_rc() {
	ulp_run "$1" 1 mode=rc op=send size=64 depth=64 batch=8 dev=rxe0 || return 1
	local id
	id=$(ulp_last_id)
	stress_say "rc messages=$1 received=$(ulp_stat "$id" received) lost=$(ulp_stat "$id" lost) dup=$(ulp_stat "$id" dup) corrupt=$(ulp_stat "$id" corrupt)"
}
# long_rping N: N rping round trips of 64 B and N of 4 KiB from user-space
# rping's client to the ULP's server, then N from the ULP's client to rping's
# server, each validated by both sides (rdma_ulp_cm's checks, at scale).
long_rping() {
	ulp_cm_serve_rping 10.77.0.1 7231 "$1" 64 4096 || return 1
	ulp_cm_ping_rping 10.77.0.1 7232 "$1" 64 || return 1
	stress_say "rping round trips=$1 each way, validated"
}
# long_ud N: N validated UD datagrams: none duplicated or corrupt, every one
# received or counted lost; the losses are reported
long_ud() {
	ulp_ud_run "$1" mode=ud op=send size=256 depth=64 dev=rxe0 || return 1
	local id
	id=$(ulp_last_id)
	stress_say "ud datagrams=$1 received=$(ulp_stat "$id" received) lost=$(ulp_stat "$id" lost)"
}

# nvmet_fuzz_cycle N: the NVMe-oF target's hostile host, a seeded stream of N
# random capsules and connection requests (guest-nvmet-hostile.sh), beside a
# stock host's connection, on rxe1; the target and nvme-rdma loaded for it and
# gone after, and rxe1 deleted and added again: the stock host's CQs stay in
# the core's CQ pool of the device (ib_cq_pool_get) until the device goes.
nvmet_fuzz_cycle() {
	local rc=0
	insmod /lib/modules/extra/rdma_rust_nvmet.ko || { echo "insmod rdma_rust_nvmet failed"; return 1; }
	nvh_setup 10.77.1.1 && nvmet_hostile_fuzz "$1" || rc=1
	nvh_stock_disconnect || rc=1
	nvh_unload || { echo "rmmod rdma_rust_nvmet failed"; rc=1; }
	modprobe -r nvme-rdma || { echo "modprobe -r nvme-rdma failed"; rc=1; }
	timeout 60 rdma link delete rxe1 && add_rxe rxe1 veth1 || { echo "rxe1 did not come back"; rc=1; }
	return $rc
}

# --- the NVMe-oF host under port removals ------------------------------------------
# rdma_rust_nvme connected to nvmet-rdma (a brd namespace on rxe1's address),
# reconnect_delay 1 and ctrl_loss_tmo 30; each cycle takes the port from the
# subsystem for a second under a verifying fio. guest-nvme.sh's and
# guest-nvmet.sh's helpers (hst_*, tgt_*).
STRESS_NVME_ROOT=/sys/kernel/config/nvmet
STRESS_NVME_NQN=nqn.2026-11.org.rdma-rust:stress
STRESS_NVME_SVC=4430
STRESS_NVME_SIZE=$((16 * 1024 * 1024))
STRESS_NVME_ADDR=10.77.1.1

# nvme_port_up: the target served, the host loaded and connected, its disk
# there (stress_nvme: the controller's instance).
nvme_port_up() {
	[ -e $HST_KO ] || { echo "rdma_rust_nvme.ko is not in the image"; return 1; }
	[ -x "$FIO" ] || { echo "no fio in the image"; return 1; }
	tgt_load $STRESS_NVME_ROOT $STRESS_NVME_SIZE &&
		tgt_setup $STRESS_NVME_ROOT $STRESS_NVME_NQN 1 $STRESS_NVME_ADDR $STRESS_NVME_SVC $STRESS_NVME_SIZE ||
		{ echo "nvmet-rdma was not set up"; return 1; }
	insmod $HST_KO || { echo "insmod $HST_KO failed"; return 1; }
	hst_connect "$(hst_opts $STRESS_NVME_ADDR $STRESS_NVME_SVC $STRESS_NVME_NQN reconnect_delay=1,ctrl_loss_tmo=30)" ||
		return 1
	wait_for 10 test -b "/dev/rnvme${hst_inst}n1" || { echo "no /dev/rnvme${hst_inst}n1"; return 1; }
	stress_nvme=$hst_inst
}

# nvme_port_cycle: a verifying 4 KiB writer (6 s); after 1 s the port is
# taken away, after another second given back: fio ends with no error and its
# data verified, the controller is live again with one more reconnect within 30 s.
nvme_port_cycle() {
	hst_fault_under_fio "$stress_nvme" 6 1 30 hst_port_away $STRESS_NVME_ROOT $STRESS_NVME_NQN 1
}

# nvme_port_down: disconnected, the host unloaded, the target torn down and
# unloaded; then rxe1 deleted and added again, which frees the idle CQs that
# nvmet-rdma left in the core's CQ pool (the device's until it goes), so that
# the suite's baseline holds.
nvme_port_down() {
	local rc=0
	hst_disconnect_all > /dev/null 2>&1
	if hst_loaded; then hst_rmmod || rc=1; fi
	tgt_teardown $STRESS_NVME_ROOT > /dev/null 2>&1
	tgt_teardown $STRESS_NVME_ROOT || rc=1
	tgt_unload $STRESS_NVME_ROOT || { echo "nvmet-rdma did not unload"; rc=1; }
	timeout 60 rdma link delete rxe1 && add_rxe rxe1 veth1 || { echo "rxe1 did not come back"; rc=1; }
	return $rc
}

# stress_suite CYCLES HOSTILE RC_MSGS UD_MSGS [PINGS [NVMET_FUZZ]]: the fault
# suite, as the KTAP suite rdma_stress; PINGS rping round trips each way with
# long_rping (`make stress` only: make test's rdma_ulp_cm makes a hundred);
# NVMET_FUZZ capsules of the NVMe-oF target's fuzz stream (default 200). Needs
# rxe0 and rxe1 (siw0 for the siw_* kinds), and the ULP not loaded.
stress_suite() {
	local cycles=$1 nhostile=$2 nrc=$3 nud=$4 nping=${5:-0} nfuzz=${6:-200}
	suite_begin rdma_stress
	: > /tmp/stress-why
	baseline none
	check stress_insmod insmod $ULP_KO
	baseline ulp
	stress_say "start cycles=$cycles hostile=$nhostile rc_messages=$nrc ud_datagrams=$nud"
	for kind in link netdev qp_error bad_rkey ud_fault small_cq siw_qp_error siw_bad_rkey; do
		check "${kind}_cycles" stress_kind "$kind" "$cycles" "${kind}_cycle"
		[ ! -s /tmp/stress-why ] || { cat /tmp/stress-why > /dev/console; : > /tmp/stress-why; }
	done
	check hostile_ctl stress_kind hostile 1 hostile_ctl "$nhostile"
	check nvmet_fuzz stress_kind nvmet_fuzz 1 nvmet_fuzz_cycle "$nfuzz"
	check long_rc stress_kind long_rc 1 long_rc "$nrc"
	check long_ud stress_kind long_ud 1 long_ud "$nud"
	stress_nvme=
	check nvme_port_up nvme_port_up
	if [ -n "$stress_nvme" ]; then
		check nvme_port_cycles stress_kind nvme_port "$cycles" nvme_port_cycle
		[ ! -s /tmp/stress-why ] || { cat /tmp/stress-why > /dev/console; : > /tmp/stress-why; }
	else
		check nvme_port_cycles sh -c 'echo "no controller: row nvme_port_up failed"; exit 1'
	fi
	check nvme_port_down nvme_port_down
	check nvme_port_back_to_baseline back_to_baseline ulp
	[ "$nping" = 0 ] || check long_rping stress_kind long_rping 1 long_rping "$nping"
	check stress_rmmod timeout 60 rmmod rdma_rust_ulp
	check rmmod_cycles stress_kind rmmod "$cycles" rmmod_cycle
	[ ! -s /tmp/stress-why ] || cat /tmp/stress-why > /dev/console
	check back_to_baseline back_to_baseline none
	suite_end
}

# link_add_profile DEV NETDEV: where `rdma link add` spends its time, over
# three deletes and adds of DEV: as often as the shell can (every 100-250 ms
# on the debug kernel), the state and CPU time of the `rdma` process
# (/proc/PID/stat) and the kernel stacks of both CPUs (sysrq-l: an NMI
# backtrace of each, running or not; /proc/PID/stack shows only a sleeping
# task). Logged as
# "rdmastress: link add profile" lines: the share of samples it was running,
# its system time, which tasks the CPUs were running, the functions they were
# in and the most frequent frames of their stacks (at any depth).
link_add_profile() {
	local pid n=0 t0 st kpid level round ms=
	: > /tmp/states
	# The backtraces go to the log only (not the slow serial console), and
	# are read as they come (the ring buffer would not hold them all).
	read -r level _ < /proc/sys/kernel/printk
	echo 1 > /proc/sys/kernel/printk
	cat /dev/kmsg > /tmp/kmsg-profile &
	kpid=$!
	for round in 1 2 3; do
		rdma link delete "$1" 2> /dev/null
		t0=$(uptime_ms)
		rdma link add "$1" type rxe netdev "$2" &
		pid=$!
		while st=$(cat /proc/$pid/stat 2> /dev/null); do
			# After the command name in parentheses: state, ... utime (12th), stime (13th).
			echo "${st##*) }" | awk '{ print $1, $12, $13 }' >> /tmp/states
			n=$((n + 1))
			[ -w /proc/sysrq-trigger ] && echo l > /proc/sysrq-trigger
		done
		wait $pid
		ms="$ms $(( $(uptime_ms) - t0 ))"
		wait_for 10 port_active "$1"
	done
	sleep 1
	kill $kpid
	echo "$level" > /proc/sys/kernel/printk
	# What the console did not show meanwhile: a splat in it goes there now, so
	# that the run's log check sees it. Not the "Call Trace:" of each sysrq-l
	# backtrace asked for here (a real splat has its own first line).
	sed 's/^[^;]*;//' /tmp/kmsg-profile | grep -E "$SPLATS" | grep -vx 'Call Trace:' | while read -r l; do
		say "rdmastress: during the link add profile: $l"
	done
	stress_say "link add profile: ms$ms, $n samples, $(awk '
		$1 == "R" { r++ } { n++; u = $2; s = $3 }
		END { printf "running in %d%% of them", 100 * r / (n ? n : 1) }' /tmp/states)"
	# /dev/kmsg records: "prio,seq,usec,flags;text". One sample per "NMI
	# backtrace for cpu" block; the sysrq writer's own CPU (the shell: comm init
	# or sh) is left out.
	sed 's/^[^;]*;//' /tmp/kmsg-profile | awk '
		/NMI backtrace for cpu/ { blk++; comm = ""; inb = 1; delete seen; next }
		!inb { next }
		/^CPU: / { for (i = 1; i < NF; i++) if ($i == "Comm:") comm = $(i + 1); if (comm == "sh" || comm == "init") inb = 0; else tasks[comm]++; next }
		/^RIP: / { f = $2; sub(/^[0-9]+:/, "", f); sub(/\+0x.*/, "", f); rip[f]++; total++; next }
		/^ *<\/TASK>/ || /^ *<\/IRQ>/ { next }
		/^ +[a-zA-Z_][a-zA-Z0-9_.]*\+0x/ { f = $1; if (f == "?") next; sub(/\+0x.*/, "", f); if (!(f in seen)) { seen[f] = 1; frames[f]++ } }
		END {
			printf "backtraces %d\n", total
			for (t in tasks) printf "task %5.1f%% %s\n", 100 * tasks[t] / (total ? total : 1), t
			for (f in rip) printf "rip %5.1f%% %s\n", 100 * rip[f] / (total ? total : 1), f
			for (f in frames) printf "frame %5.1f%% %s\n", 100 * frames[f] / (total ? total : 1), f
		}' > /tmp/profile
	{
		grep '^backtraces' /tmp/profile
		grep '^task' /tmp/profile | sort -k2 -rn | head -n 5
		grep '^rip' /tmp/profile | sort -k2 -rn | head -n 10
		grep '^frame' /tmp/profile | sort -k2 -rn | head -n 30
	} | while IFS= read -r l; do stress_say "link add profile: $l"; done
}

# `make stress`: one guest, the full counts (rdmatest.cycles, .hostile,
# .rc_messages, .ud_datagrams, .rpings, .nvmet_fuzz on the command line).
mode_stress() {
	local cycles nhostile nrc nud nfuzz
	cycles=$(arg rdmatest.cycles); cycles=${cycles:-100}
	nhostile=$(arg rdmatest.hostile); nhostile=${nhostile:-1000}
	nrc=$(arg rdmatest.rc_messages); nrc=${nrc:-1000000}
	nud=$(arg rdmatest.ud_datagrams); nud=${nud:-100000}
	nping=$(arg rdmatest.rpings); nping=${nping:-1000}
	nfuzz=$(arg rdmatest.nvmet_fuzz); nfuzz=${nfuzz:-10000}
	setup_suite
	link_add_profile rxe1 veth1
	stress_suite "$cycles" "$nhostile" "$nrc" "$nud" "$nping" "$nfuzz"
	# The release kernel has no kmemleak: the debug kernel's run checks leaks.
	[ "$(arg rdmatest.flavor)" = release ] || leak_suite
}
