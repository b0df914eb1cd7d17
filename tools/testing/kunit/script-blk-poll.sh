#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# rdma_rust_blk's two completion contexts against each other, in one boot: a
# script for the bench guest (sourced by guest-bench.sh, with its helpers and
# guest-bench-blk.sh's):
#
#   RDMATEST_SCRIPT=tools/testing/kunit/script-blk-poll.sh BENCH_CASES=script \
#     BENCH_ROUNDS=7 BENCH_TOPOLOGY=loopback FLAVOR=release make bench
#
# One volume, two disks connected to it with make bench's queues and depth:
# rrbd0 with `poll=softirq` (the context of nvme-rdma's completions) in the
# table's peer column, rrbd1 with the default `poll=workqueue` (the core's
# high-priority completion workqueue) in the ULP column, so each ratio is
# workqueue / softirq. Then make bench's block cases, as make bench runs them
# (a verified pattern on each disk first, which is also the warm-up; rounds
# that alternate the first disk). bench_report.py makes the table of the log,
# and pools boots, as for make bench.

# poll_up: the volume and its two disks.
poll_up() {
	local c=/sys/kernel/debug/rdma_rust_blk/ctl p
	insmod /lib/modules/extra/rdma_rust_blk.ko || return 1
	echo "export name=bench size=${BLKB_MB}m addr=$BENCH_ADDR port=4421" > $c || return 1
	for p in softirq workqueue; do
		echo "connect addr=$BENCH_ADDR port=4421 name=bench queues=$BLKB_QUEUES depth=$BLKB_DEPTH poll=$p" > $c ||
			return 1
	done
	[ -b /dev/rrbd0 ] && [ -b /dev/rrbd1 ]
}
poll_down() {
	local c=/sys/kernel/debug/rdma_rust_blk/ctl
	echo "disconnect dev=rrbd1" > $c
	echo "disconnect dev=rrbd0" > $c
	rmmod rdma_rust_blk
}

if poll_up; then
	bench_say "note blk: peer /dev/rrbd0 (rdma_rust_blk, poll=softirq), ulp /dev/rrbd1 (rdma_rust_blk, poll=workqueue), one volume of $BLKB_MB MiB; $BLKB_QUEUES queues of depth $BLKB_DEPTH each; fio $(/usr/bin/fio --version) libaio O_DIRECT"
	blkb_compare rrbd0 rrbd1
else
	bench_say "fail case=blk_setup side=ulp round=0 (two rdma_rust_blk disks)"
fi
poll_down
