#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# The NVMe-oF target between the two guests: rdma_rust_nvmet on peer-a
# (10.88.0.1), the stock host (nvme-rdma, nvme-cli) on peer-b (10.88.0.2).
# Three suites:
#   rdma_nvmet_peer_target (a) and rdma_nvmet_peer_host (b): discover,
#     connect, fio with verification, ext4, disconnect with the target's
#     controllers and connections back to 0; then the target guest's rxe0
#     deleted under the host's fio and added back: the target listens again
#     (its repair ticker), the host's reconnect loop reconnects, fio sees no
#     error; then the project's host (rdma_rust_nvme, guest-nvme.sh's rows)
#     in place of the stock one: the Rust pair between the guests; then both
#     hosts again through a second port on siw0 (soft-iWARP on eth1);
#   rdma_nvmet_peer_kill (a): b connects again with a 5 s keep-alive timeout
#     just before rdma_peer_a_kill kills its QEMU; the target ends that
#     controller for want of keep-alives within 2 x KATO, and everything is
#     given back (configuration, module, RDMA resources, kmemleak).
# The target is configured through configfs by guest-nvmet.sh's functions
# (tgt_setup, ...), the host checks are its rows' (nvmt_connect, nvmt_fio,
# nvmt_outage, ...); the guests exchange words with guest-peers.sh's
# nc_send/nc_recv (ports 5050-5062) and guest-peers.sh's peer_says.
# Sourced by guest-init.sh.

NVMP_TARGET=10.88.0.1 NVMP_HOST=10.88.0.2
NVMP_ROOT=$CFS/rdma_rust_nvmet
NVMP_NQN=nqn.2026-11.org.rdma-rust:peers
NVMP_SVC=4420
NVMP_SIZE=$((16 * 1024 * 1024))
NVMP_STATUS=/sys/kernel/debug/rdma_rust_nvmet/status
# The host connected when b is killed: its own NQN, so that the target's log
# names it, and a 5 s keep-alive timeout.
NVMP_KA_ID=7e57ab1e-0000-4000-8000-00000000ca11
NVMP_KA_HOST=nqn.2014-08.org.nvmexpress:uuid:$NVMP_KA_ID
NVMP_KATO=5

# nvmp_skip_unless_built: the rows skip, saying why, when the image has no
# rdma_rust_nvmet.ko (both guests boot the same image: both skip).
nvmp_skip_unless_built() {
	nvmt_skip= nvmt_gate=
	[ -e $NVMT_RUST_KO ] && return 0
	nvmt_skip="rdma_rust_nvmet.ko is not in the image (no drivers/rdma_rust_nvmet in this tree)"
	kmsg "rdmatest: nvmet: $suite: every row skipped: $nvmt_skip"
}

# nvmp_status CTRLS CONNS [PORT]: the target's debugfs status shows CTRLS
# controllers and CONNS connections on port PORT (1: rxe0's).
nvmp_status() {
	grep -qx "controllers $1" $NVMP_STATUS && grep -qx "port ${3:-1} connections $2" $NVMP_STATUS
}
# nvmp_status_is CTRLS CONNS [PORT]: the same within 10 s (the target ends
# its queues from work items); says what it saw if not.
nvmp_status_is() {
	wait_for 10 nvmp_status "$@" && return 0
	cat $NVMP_STATUS
	echo "target status: expected $1 controllers and $2 connections on port ${3:-1}"
	return 1
}

# nvmp_word_then_status PORT WORD CTRLS CONNS SECS [TARGET_PORT]: b said WORD
# on PORT within SECS (it is connected, or has disconnected), and the
# target's status agrees.
nvmp_word_then_status() {
	peer_says "$1" "$2" "$5" || return 1
	nvmp_status_is "$3" "$4" "${6:-1}"
}

# nvmp_tell PORT ROW: tell the target guest on PORT how row ROW went (ok or
# failed), so that it never waits out its timeout; nothing when both skip or
# the target guest is not there to hear it (nvmp_alone).
nvmp_tell() {
	local w=ok
	[ -z "$nvmt_skip" ] && [ -z "$nvmp_alone" ] || return 0
	grep -q "^    not ok [0-9]* $2\$" /tmp/cases && w=failed
	nc_send $NVMP_TARGET "$1" "$w" || echo "the target guest did not take the word on port $1"
}

# nvmp_link_outage: (a) on b's word, rxe0 deleted under the host's I/O and
# added back 4 s later; the port listens again within 15 s (the repair ticker
# tries every 5 s); then the word back. The word goes back even if the port
# did not listen (b's fio is waiting for it), and the row then fails.
nvmp_link_outage() {
	local t0 why=
	peer_says 5053 fault 180 || return 1
	mark
	t0=$(uptime_ms)
	timeout 60 rdma link delete rxe0 || why="rdma link delete rxe0 failed"
	echo "rdma link delete took $(( $(uptime_ms) - t0 )) ms"
	wait_for 10 since_mark_has "rdma_rust_nvmet: port 1: its RDMA device is going away" ||
		why="${why:-port 1 did not lose its listener with its device}"
	sleep 4
	add_rxe rxe0 eth0 || why="${why:-rdma link add rxe0 failed}"
	wait_for 15 since_mark_has "rdma_rust_nvmet: port 1: listening on $NVMP_TARGET" ||
		why="${why:-port 1 did not listen again within 15 s of rdma link add}"
	nc_send $NVMP_HOST 5054 back || why="${why:-the host did not take the word}"
	[ -z "$why" ] || { since_mark | grep 'rdma_rust_nvmet\|rxe'; echo "$why"; return 1; }
}

# nvmp_ask_fault / nvmp_target_back: (b) nvmt_outage's DOWN and UP against
# the other guest: ask for the outage, wait until the target is back.
nvmp_ask_fault() { nc_send $NVMP_TARGET 5053 fault; }
nvmp_target_back() { peer_says 5054 back 120; }

# nvmp_host_outage: (b) guest-nvmet-paths.sh's outage row with the target
# guest's rdma link delete as the fault: the host reconnects within 30 s and
# fio sees no error; and the host did lose the controller (it logged its
# reconnect), so that a fault that did nothing does not pass.
nvmp_host_outage() {
	mark
	nvmt_outage "$NVMP_NQN" "rdma link delete on the target guest" nvmp_ask_fault nvmp_target_back || return 1
	since_mark_has "nvme[0-9]*: Successfully reconnected" ||
		{ since_mark | grep nvme; echo "the host logged no 'Successfully reconnected': the fault did not reach it"; return 1; }
}

# nvmp_keep_alive_connect: (b, just before rdma_peer_a_kill kills it, from
# victim_serve) a controller with a 5 s keep-alive timeout, as NVMP_KA_HOST.
nvmp_keep_alive_connect() {
	nvmt_connect "$NVMP_NQN" $NVMP_TARGET $NVMP_SVC --hostnqn=$NVMP_KA_HOST --hostid=$NVMP_KA_ID \
		-k $NVMP_KATO > /tmp/nvmp-ka 2>&1 ||
		{ while read -r l; do kmsg "rdmatest: nvmet: keep-alive connect: $l"; done < /tmp/nvmp-ka; return 1; }
	kmsg "rdmatest: nvmet: connected as $NVMP_KA_HOST with a $NVMP_KATO s keep-alive timeout"
}

# nvmp_log_ms TEXT: the kernel time (ms since boot) of the last log line
# that begins with TEXT (not a failed row's copy of it in a diagnostic);
# nothing if there is none.
nvmp_log_ms() {
	dmesg | awk -v t="$1" '{ ts = $0; sub(/^\[ */, "", ts); split(ts, a, "] ")
		if (substr(ts, length(a[1]) + 3, length(t)) == t) ms = int(a[1] * 1000) }
		END { if (ms != "") print ms }'
}

# nvmp_keep_alive_ended: (a, after rdma_peer_a_kill) the target had a
# controller of NVMP_KA_HOST with NVMP_KATO s of keep-alive, and ended it
# for want of keep-alives within 2 x KATO of the kill (asked: the reaper
# kills within a second of that).
nvmp_keep_alive_ended() {
	local cid t_kill t_end d bound=$((2 * NVMP_KATO * 1000))
	cid=$(dmesg | sed -n "s/.*rdma_rust_nvmet: controller \([0-9]*\): $NVMP_KA_HOST connected to $NVMP_NQN through port 1 (keep-alive $((NVMP_KATO * 1000)) ms)\$/\1/p" | tail -n 1)
	[ -n "$cid" ] || { echo "the target logged no controller of $NVMP_KA_HOST with keep-alive $((NVMP_KATO * 1000)) ms"; return 1; }
	t_kill=$(nvmp_log_ms "rdmatest: peer kill: asked")
	[ -n "$t_kill" ] || { echo "no 'rdmatest: peer kill: asked' in the log: the peer was not killed"; return 1; }
	t_end=$(nvmp_log_ms "rdma_rust_nvmet: controller $cid of $NVMP_KA_HOST on $NVMP_NQN: no keep-alive within its timeout: ended")
	[ -n "$t_end" ] || { dmesg | grep "rdma_rust_nvmet: controller $cid "; echo "controller $cid was not ended for want of keep-alives"; return 1; }
	d=$((t_end - t_kill))
	kmsg "rdmatest: nvmet: the killed host's controller $cid ended by keep-alive $d ms after the kill was asked (KATO $NVMP_KATO s)"
	[ "$d" -gt 0 ] && [ "$d" -le $bound ] ||
		{ echo "controller $cid ended $d ms after the kill was asked: expected within 2 x KATO ($bound ms)"; return 1; }
}

# nvmp_status_after_kill: (a) the target shows 0 controllers and 0
# connections (the row runs ~40 s after the kill, far past 2 x KATO). If it
# does not, how long it holds the dead host's connections is measured (up to
# 120 s after the kill) for the message.
nvmp_status_after_kill() {
	local t_kill
	wait_for 10 nvmp_status 0 0 && return 0
	cat $NVMP_STATUS
	t_kill=$(nvmp_log_ms "rdmatest: peer kill: asked")
	while ! nvmp_status 0 0 && [ $(( $(uptime_ms) - ${t_kill:-0} )) -lt 120000 ]; do
		sleep 1
	done
	if nvmp_status 0 0; then
		echo "the connections went $(( ($(uptime_ms) - t_kill) / 1000 )) s after the kill was asked"
	else
		echo "still there 120 s after the kill was asked:"; cat $NVMP_STATUS
	fi
	echo "target status: expected 0 controllers and 0 connections on port 1 once the killed host's controller ended"
	return 1
}

# rdma_nvmet_peer_target: peer-a's side; leaves the target set up for the
# host that rdma_peer_a_kill kills. The waits for b's words: the first comes
# after b's discover and connect, the second after its fio and ext4 rows
# (the slow ones), the third a few seconds after the outage.
mode_nvmet_peer_target() {
	local tgt_gate=
	NVMT_ADDR=$NVMP_TARGET
	suite_begin rdma_nvmet_peer_target
	nvmp_skip_unless_built
	nvmt_resources > /tmp/nvmt-res
	nvmt_leak_mark
	nvmt_check target_load tgt_load $NVMP_ROOT $NVMP_SIZE || tgt_gate="the target did not load (row target_load)"
	nvmt_gate=$tgt_gate
	nvmt_check target_setup tgt_setup $NVMP_ROOT $NVMP_NQN 1 $NVMP_TARGET $NVMP_SVC $NVMP_SIZE ||
		tgt_gate=${tgt_gate:-"the target was not set up (row target_setup)"}
	nvmt_gate=$tgt_gate
	# The host's rows wait for this word: it goes whatever happened (with a
	# gate set, this guest's rows below do not run and b's do not either).
	if [ -z "$nvmt_skip" ]; then
		if [ -z "$tgt_gate" ]; then nc_send $NVMP_HOST 5050 ready; else nc_send $NVMP_HOST 5050 failed; fi
	fi
	# One controller of two connections: the admin queue and one I/O queue
	# (the host guest has one CPU).
	nvmt_check host_controller_seen nvmp_word_then_status 5051 ok 1 2 180
	nvmt_check host_disconnect_gives_back nvmp_word_then_status 5052 ok 0 0 600
	nvmt_check link_delete_under_host_io nvmp_link_outage
	nvmt_check outage_disconnect_gives_back nvmp_word_then_status 5055 ok 0 0 180
	# The project's host (rdma_rust_nvme) on b: the Rust pair across the
	# guests, one controller of two connections again.
	local skip0=$nvmt_skip
	[ -e $HST_KO ] || nvmt_skip="rdma_rust_nvme.ko is not in the image (no drivers/rdma_rust_nvme in this tree)"
	nvmt_check rust_host_controller_seen nvmp_word_then_status 5056 ok 1 2 180
	nvmt_check rust_host_disconnect_gives_back nvmp_word_then_status 5057 ok 0 0 600
	# soft-iWARP: port 2 on siw0's address (eth1); b's stock host, then its
	# Rust host, through it.
	nvmt_skip=$skip0 nvmt_gate=$tgt_gate
	NVMT_SIW_ADDR=$SIW_A
	nvmt_check siw_port_added tgt_siw_port $NVMP_ROOT $NVMP_NQN 2 $NVMP_SVC 1 ||
		nvmt_gate=${nvmt_gate:-"no port on siw0 (row siw_port_added)"}
	# b listens for this word only if it heard "ready" on 5050.
	if [ -z "$nvmt_skip" ] && [ -z "$tgt_gate" ]; then
		if [ -z "$nvmt_gate" ]; then nc_send $NVMP_HOST 5058 ready; else nc_send $NVMP_HOST 5058 failed; fi
	fi
	nvmt_check siw_host_controller_seen nvmp_word_then_status 5059 ok 1 2 180 2
	nvmt_check siw_host_disconnect_gives_back nvmp_word_then_status 5060 ok 0 0 300 2
	[ -e $HST_KO ] || nvmt_skip="rdma_rust_nvme.ko is not in the image (no drivers/rdma_rust_nvme in this tree)"
	nvmt_check siw_rust_host_controller_seen nvmp_word_then_status 5061 ok 1 2 180 2
	nvmt_check siw_rust_host_disconnect_gives_back nvmp_word_then_status 5062 ok 0 0 300 2
	nvmt_skip=$skip0
	nvmt_check siw_port_removed tgt_siw_port $NVMP_ROOT $NVMP_NQN 2 $NVMP_SVC 0
	suite_end
}

# rdma_nvmet_peer_host: peer-b's side. A row that fails stops the rows that
# need what it did (nvmt_gate), and each step's word still goes to the target
# guest (nvmp_tell; "failed" for a fault that will not come).
mode_nvmet_peer_host() {
	local ctrl_gate=
	NVMT_ADDR=$NVMP_TARGET nvmp_alone=
	suite_begin rdma_nvmet_peer_host
	nvmp_skip_unless_built
	mark
	nvmt_check host_setup nvmt_host_setup
	nvmt_check target_ready peer_says 5050 ready 600 ||
		nvmp_alone="the target guest is not ready (row target_ready)"
	nvmt_gate=$nvmp_alone
	nvmt_check discover_lists_subsystem nvmt_discover $NVMP_NQN $NVMP_TARGET $NVMP_SVC
	nvmt_check connect_one_namespace nvmt_connect $NVMP_NQN $NVMP_TARGET $NVMP_SVC ||
		ctrl_gate="no controller (row connect_one_namespace)"
	nvmp_tell 5051 connect_one_namespace
	nvmt_gate=${nvmp_alone:-$ctrl_gate}
	# Small: cross-guest I/O on the debug kernel is slower than in one guest.
	nvmt_check fio_randwrite_4k_qd32_verify nvmt_fio $NVMP_NQN randwrite 4k 32 2m
	nvmt_check fio_write_128k_verify nvmt_fio $NVMP_NQN write 128k 8 4m
	nvmt_check ext4_fsck_remount_checksums nvmt_ext4 $NVMP_NQN
	nvmt_check disconnect_device_gone nvmt_disconnect $NVMP_NQN
	nvmt_gate=$nvmp_alone
	nvmt_check host_logged_no_errors nvmt_host_quiet
	$NVME disconnect-all > /dev/null 2>&1
	nvmp_tell 5052 disconnect_device_gone
	nvmt_check outage_connect nvmt_connect_one $NVMP_NQN $NVMP_SVC ||
		nvmt_gate=${nvmt_gate:-"no controller (row outage_connect)"}
	# The target guest's outage row waits for the word that asks for the fault.
	[ -z "$nvmt_gate" ] || [ -n "$nvmp_alone" ] || [ -n "$nvmt_skip" ] || nc_send $NVMP_TARGET 5053 failed
	nvmt_check outage_link_delete_io_resumes nvmp_host_outage
	nvmt_gate=$nvmp_alone
	nvmt_check outage_disconnect nvmt_disconnect $NVMP_NQN
	$NVME disconnect-all > /dev/null 2>&1
	nvmp_tell 5055 outage_disconnect
	local skip0=$nvmt_skip
	nvmp_rust_host_rows $NVMP_TARGET '' 5056 5057 2m 4m full
	nvmt_skip=$skip0
	nvmp_siw_host_rows
	nvmt_skip=$skip0
	suite_end
}

# nvmp_siw_host_rows: (b) both hosts again, through the target's port on
# siw0 (soft-iWARP, eth1): the stock one (connect, fio with verification,
# disconnect), then rdma_rust_nvme (the same, and rmmod).
nvmp_siw_host_rows() {
	local gate=
	nvmt_gate=$nvmp_alone
	nvmt_check siw_target_ready peer_says 5058 ready 300 ||
		gate="the target has no port on siw0 (row siw_target_ready)"
	# Without that port the target's siw rows do not run: no word goes to them.
	local nvmp_alone=${nvmp_alone:-$gate}
	nvmt_gate=$nvmp_alone
	nvmt_check siw_connect nvmt_connect $NVMP_NQN $SIW_A $NVMP_SVC ||
		nvmt_gate=${nvmt_gate:-"no controller over siw0 (row siw_connect)"}
	nvmp_tell 5059 siw_connect
	nvmt_check siw_fio_randwrite_4k_qd32_verify nvmt_fio $NVMP_NQN randwrite 4k 32 512k
	nvmt_check siw_fio_write_128k_verify nvmt_fio $NVMP_NQN write 128k 8 1m
	nvmt_check siw_disconnect_device_gone nvmt_disconnect $NVMP_NQN
	$NVME disconnect-all > /dev/null 2>&1
	nvmp_tell 5060 siw_disconnect_device_gone
	nvmp_rust_host_rows $SIW_A siw_ 5061 5062 512k 1m
}

# nvmp_rust_host_rows ADDR PREFIX WORD1 WORD2 SIZE4K SIZE128K [full]: (b) the
# project's host, rdma_rust_nvme, against the target at ADDR (guest-nvme.sh's
# rows, named PREFIXrust_host_*; the target hears WORD1 after the connect and
# WORD2 after the disconnect): connect, fio with verification (SIZE4K of 4 KiB
# random writes at QD 32, SIZE128K of 128 KiB writes), with "full" also ext4,
# a Flush for fsync and FUA for O_SYNC writes and no error counted;
# disconnect with the target's controller and connections gone, rmmod.
nvmp_rust_host_rows() {
	local addr=$1 p=$2 w1=$3 w2=$4 s4=$5 s128=$6 full=${7:-} n= gate= id
	id=$(cat /proc/sys/kernel/random/uuid)
	nvmt_gate=$nvmp_alone
	[ -e $HST_KO ] || nvmt_skip="rdma_rust_nvme.ko is not in the image (no drivers/rdma_rust_nvme in this tree)"
	nvmt_check ${p}rust_host_insmod hst_insmod || gate="rdma_rust_nvme did not load (row ${p}rust_host_insmod)"
	nvmt_gate=${nvmp_alone:-$gate}
	nvmt_check ${p}rust_host_connect hst_connect \
		"$(hst_opts $addr $NVMP_SVC $NVMP_NQN "keep_alive_tmo=5,hostnqn=nqn.2014-08.org.nvmexpress:uuid:$id,hostid=$id")" ||
		gate=${gate:-"no controller (row ${p}rust_host_connect)"}
	n=$hst_inst
	nvmp_tell $w1 ${p}rust_host_connect
	nvmt_gate=${nvmp_alone:-$gate}
	nvmt_check ${p}rust_host_fio_randwrite_4k_qd32_verify nvmt_fio_dev "/dev/rnvme${n}n1" randwrite 4k 32 $s4
	nvmt_check ${p}rust_host_fio_write_128k_verify nvmt_fio_dev "/dev/rnvme${n}n1" write 128k 8 $s128
	if [ -n "$full" ]; then
		nvmt_check ${p}rust_host_ext4_fsck_clean nvmt_ext4_dev "/dev/rnvme${n}n1" 1
		nvmt_check ${p}rust_host_fsync_flush_dsync_fua hst_flush_fua "$n" "rnvme${n}n1"
		nvmt_check ${p}rust_host_status_no_errors hst_status_clean "$n" "$hst_cntlid"
	fi
	nvmt_check ${p}rust_host_disconnect hst_disconnect "$n"
	hst_disconnect_all > /dev/null 2>&1
	nvmp_tell $w2 ${p}rust_host_disconnect
	nvmt_gate=
	hst_loaded || nvmt_gate="rdma_rust_nvme is not loaded"
	nvmt_check ${p}rust_host_rmmod hst_rmmod
}

# rdma_nvmet_peer_kill: (a, after rdma_peer_a_kill) the killed host's
# controller ended by keep-alive, then everything given back.
mode_nvmet_peer_kill() {
	suite_begin rdma_nvmet_peer_kill
	nvmp_skip_unless_built
	nvmt_check host_killed_keep_alive_ends_controller nvmp_keep_alive_ended
	nvmt_check status_zero_after_kill nvmp_status_after_kill
	nvmt_check teardown_leaves_nothing tgt_teardown $NVMP_ROOT
	nvmt_check target_unload tgt_unload $NVMP_ROOT
	nvmt_check rdma_resources_back nvmt_resources_back
	nvmt_check kmemleak_clean nvmt_kmemleak_clean
	suite_end
}
