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
# rrbd1 with `poll=softirq` (the context of nvme-rdma's completions) in the
# table's peer column, rrbd0 with the default `poll=workqueue` (the core's
# high-priority completion workqueue) in the ULP column, so each ratio is
# workqueue / softirq. Then make bench's block cases, as make bench runs them
# (a verified pattern on each disk first, which is also the warm-up; rounds
# that alternate the first disk). bench_report.py makes the table of the log,
# and pools boots, as for make bench.

if blkb_rrbd_up > /dev/null && blkb_rrbd_connect poll=softirq && [ -b /dev/rrbd1 ]; then
	bench_say "note blk: peer /dev/rrbd1 (rdma_rust_blk, poll=softirq), ulp /dev/rrbd0 (rdma_rust_blk, poll=workqueue), one volume of $BLKB_MB MiB; $BLKB_QUEUES queues of depth $BLKB_DEPTH each; fio $(/usr/bin/fio --version) libaio O_DIRECT"
	blkb_compare rrbd1 rrbd0
else
	bench_say "fail case=blk_setup side=ulp round=0 (two rdma_rust_blk disks)"
fi
echo "disconnect dev=rrbd1" > /sys/kernel/debug/rdma_rust_blk/ctl
blkb_rrbd_down
