#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# The NVMe-oF host's bad-target checks (rows rust_bad_target_*, in the suite
# rdma_nvme_host): rdma_rust_nvmet armed through its debugfs file misbehave to
# break one rule of the protocol once (or to bend one, or never to answer a
# command or a Keep Alive), and what the host must do about it: end the
# connection with the reason logged and recover, never end the wrong request,
# carry the command out again. Sourced by guest-init.sh after guest-nvme.sh, whose helpers it uses
# (hst_field, hst_fault_under_fio, hst_connect, hst_disconnect, hst_expect,
# HST_STATUS), as it uses guest-nvmet.sh's (nvmt_fio_dev) and
# guest-init.sh's (mark, since_mark).

HST_MISBEHAVE=/sys/kernel/debug/rdma_rust_nvmet/misbehave
hst_misbehave_fired() { sed -n 's/^misbehave .* fired \([0-9]*\)$/\1/p' /sys/kernel/debug/rdma_rust_nvmet/status; }

# hst_misbehave_refused: a fault rdma_rust_nvmet does not know, written to
# misbehave, is refused (the write fails) with a message that names the ones
# it knows, and nothing is armed.
hst_misbehave_refused() {
	mark
	! echo bogus_fault > $HST_MISBEHAVE 2> /dev/null || { echo "bogus_fault was taken"; return 1; }
	since_mark | grep 'rdma_rust_nvmet: misbehave: unknown fault (one of: none, unknown_cid, .*keep_alive_unanswered)' ||
		{ since_mark | grep rdma_rust_nvmet; echo "no message naming the faults"; return 1; }
	grep -q '^misbehave none ' /sys/kernel/debug/rdma_rust_nvmet/status ||
		{ grep misbehave /sys/kernel/debug/rdma_rust_nvmet/status; echo "something is armed"; return 1; }
}

# hst_bad_target N FAULT PATTERN: controller N (reconnect_delay 1) of
# rdma_rust_nvmet under a verifying 4 KiB writer (its verification reads are
# keyed, with remote invalidation); the target armed to break the rule FAULT
# once (its debugfs file misbehave): it did, the host logged PATTERN (the
# reason) and that the controller reconnects, fio ends with no error and its
# data verified (the bad completion ended no request, the right one was sent
# again), and the controller is live again with one more reconnect. The
# fault is armed before the writer starts, so that the writer's own I/O fires
# it however slow the guest: armed after a lead, it once came after the
# writer's last I/O on an overloaded host, and nothing fired.
hst_bad_target() {
	local f0 f1 rc=0
	f0=$(hst_misbehave_fired)
	[ -n "$f0" ] || { echo "no misbehave count"; return 1; }
	mark
	echo "$2" > $HST_MISBEHAVE || { echo "arming $2 failed"; return 1; }
	hst_fault_under_fio "$1" 5 0 10 true || rc=1
	echo none > $HST_MISBEHAVE
	[ $rc = 0 ] || return 1
	f1=$(hst_misbehave_fired)
	[ "$f1" -gt "$f0" ] 2> /dev/null || { echo "the target did not fire $2 (fired $f0 -> $f1)"; return 1; }
	since_mark | grep -q "rdma_rust_nvme: queue [0-9]*: .*\($3\).*: the controller reconnects" ||
		{ since_mark | grep 'rdma_rust_nvme\|misbehav'; echo "the host did not log '$3' and a reconnect"; return 1; }
	since_mark | grep 'rdma_rust_nvme: queue [0-9]*: .*: the controller reconnects' | head -n 1
}

# hst_io_timeout N MS: controller N's disks given an I/O timeout of MS
# milliseconds (the block layer's queue/io_timeout); prints the first disk's
# value before, to give back after. Fails if a disk refuses it.
hst_io_timeout() {
	local d old= rc=0
	for d in /sys/block/rnvme$1n*/queue/io_timeout; do
		[ -n "$old" ] || old=$(cat "$d" 2> /dev/null)
		echo "$2" > "$d" 2> /dev/null || { echo "setting $d to $2 failed" >&2; rc=1; }
	done
	[ -n "$old" ] || { echo "controller $1 has no disk" >&2; return 1; }
	echo "$old"
	return $rc
}

# hst_timeout N: controller N's disks given a 2 s I/O timeout and
# rdma_rust_nvmet armed never to complete one command (no_answer), under a
# verifying writer: the host counts the timeout, logs it, fails the queue and
# reconnects, and the command is carried out again (fio ends with no error and
# its data verified). The disks get their timeout back after.
hst_timeout() {
	local n=$1 t0 old rc=0
	t0=$(hst_field "$n" timeouts)
	[ -n "$t0" ] || { cat $HST_STATUS; echo "no controller $n"; return 1; }
	old=$(hst_io_timeout "$n" 2000) || rc=1
	[ $rc = 0 ] && hst_bad_target "$n" no_answer "a command timed out" || rc=1
	[ -z "$old" ] || hst_io_timeout "$n" "$old" > /dev/null || rc=1
	[ $rc = 0 ] || return 1
	[ "$(hst_field "$n" timeouts)" -gt "$t0" ] 2> /dev/null ||
		{ cat $HST_STATUS; echo "the host counted no timeout ($t0)"; return 1; }
}

# hst_local_inv N: controller N of rdma_rust_nvmet, armed to answer one
# command that asked for remote invalidation with a plain SEND (no_invalidate,
# which the protocol allows): the host invalidates the key itself (its
# local_inv count grows), a 1 MiB write-and-verify ends with no error, and
# the connection stays (no reconnect, still live).
hst_local_inv() {
	local n=$1 f0 l0 r0 rc=0
	f0=$(hst_misbehave_fired)
	l0=$(hst_field "$n" local_inv)
	r0=$(hst_field "$n" reconnects)
	[ -n "$f0" ] && [ -n "$l0" ] && [ -n "$r0" ] || { cat $HST_STATUS; echo "no controller $n, or no counts"; return 1; }
	echo no_invalidate > $HST_MISBEHAVE || { echo "arming no_invalidate failed"; return 1; }
	nvmt_fio_dev "/dev/rnvme${n}n1" write 4k 1 1m || rc=1
	echo none > $HST_MISBEHAVE
	[ $rc = 0 ] || return 1
	[ "$(hst_misbehave_fired)" -gt "$f0" ] 2> /dev/null || { echo "the target did not fire no_invalidate"; return 1; }
	[ "$(hst_field "$n" local_inv)" -gt "$l0" ] 2> /dev/null ||
		{ cat $HST_STATUS; echo "the host did not invalidate the key itself (local_inv $l0)"; return 1; }
	[ "$(hst_field "$n" reconnects)" = "$r0" ] && [ "$(hst_field "$n" state)" = live ] ||
		{ cat $HST_STATUS; echo "the controller reconnected, or is not live"; return 1; }
	kmsg "rdmatest: nvme host: local_inv $l0 -> $(hst_field "$n" local_inv) with no_invalidate"
}

# hst_absurd_ctrl OPTS: rdma_rust_nvmet armed to answer the next Identify
# Controller with absurd sizes (absurd_id_ctrl): a connect with OPTS is
# refused (EPROTO) with the reason logged, and leaves no controller.
hst_absurd_ctrl() {
	local f0 rc=0
	f0=$(hst_misbehave_fired)
	echo absurd_id_ctrl > $HST_MISBEHAVE || { echo "arming absurd_id_ctrl failed"; return 1; }
	hst_refused "$1" 'Protocol error' || rc=1
	echo none > $HST_MISBEHAVE
	[ $rc = 0 ] || return 1
	[ "$(hst_misbehave_fired)" -gt "$f0" ] 2> /dev/null || { echo "the target did not fire absurd_id_ctrl"; return 1; }
	since_mark | grep 'rdma_rust_nvme: .*Identify Controller: capsule sizes below the minimum' ||
		{ since_mark | grep 'rdma_rust_nvme'; echo "the host did not log why"; return 1; }
}

# hst_absurd_ns OPTS: rdma_rust_nvmet (two namespaces) armed to answer the
# next Identify Namespace with absurd sizes (absurd_id_ns): a connect with
# OPTS makes a controller that logs why namespace 1 is not served and serves
# namespace 2 alone, as nvme skips a namespace it cannot use; disconnected.
hst_absurd_ns() {
	local f0 n rc=0
	f0=$(hst_misbehave_fired)
	echo absurd_id_ns > $HST_MISBEHAVE || { echo "arming absurd_id_ns failed"; return 1; }
	mark
	hst_connect "$1" || rc=1
	echo none > $HST_MISBEHAVE
	[ $rc = 0 ] || return 1
	n=$hst_inst
	[ "$(hst_misbehave_fired)" -gt "$f0" ] 2> /dev/null || { echo "the target did not fire absurd_id_ns"; rc=1; }
	since_mark | grep 'rdma_rust_nvme: namespace 1: a block size other than 512 to 4096 bytes: not served' ||
		{ since_mark | grep 'rdma_rust_nvme'; echo "the host did not log why namespace 1 is not served"; rc=1; }
	hst_expect "$n" disks "rnvme${n}n2" || rc=1
	[ ! -e /sys/block/rnvme${n}n1 ] || { echo "rnvme${n}n1 was made"; rc=1; }
	hst_disconnect "$n" || rc=1
	return $rc
}
