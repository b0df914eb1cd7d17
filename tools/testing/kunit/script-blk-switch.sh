#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# Who switches to whom, and who wakes whom, per I/O, on both disks: a script
# for the bench guest (sourced by guest-bench.sh, with its helpers and
# guest-bench-blk.sh's), which needs perf in the guest's image:
#
#   RDMATEST_BINS=/usr/bin/perf RDMATEST_SCRIPT=tools/testing/kunit/script-blk-switch.sh \
#     BENCH_CASES=script BENCH_TOPOLOGY=loopback FLAVOR=release make bench
#
# For 4 KiB random writes at depth 32 (or the cases of `BENCH_PROF=RW:QD:BS,...`),
# fio runs 6 s on the C pair's disk, then on the Rust one's (BENCH_PAIR), three rounds,
# under `perf record -a` of the scheduler's switches and wake-ups (the
# `sched_waking` event, in the waker's context: `sched_wakeup` may fire on the
# woken task's CPU, in whatever ran there) and the softirqs run. The console
# gets, per run (the `SWITCH` sections of the bench log), the context
# switches per I/O, then per I/O each kind that reached 0.01: `PREV -> NEXT`
# switches, `wake TASK by WAKER` and `softirq NAME`.
# Tasks are named by their command without digits (`kworker/u:-rx` is one of
# rxe's unbound kworkers, `kworker/:H` a per-CPU high-priority one: the
# core's completion workqueue; a kworker's name is that of the last
# workqueue it ran, cut to 15 characters). The profile script counts the
# switches; this one says which they are.

SW_SECS=6
# sw_count IOS: reads `perf script -F comm,cpu,event,trace` lines; prints the
# switches per I/O, then each kind's count per I/O.
sw_count() {
	awk -v ios="$1" '
		function task(s) { gsub(/[0-9]/, "", s); return s }
		$0 ~ /sched:sched_switch:/ {
			p = $0; sub(/.*prev_comm=/, "", p); sub(/ prev_pid=.*/, "", p)
			n = $0; sub(/.*next_comm=/, "", n); sub(/ next_pid=.*/, "", n)
			k[task(p) " -> " task(n)]++; all++
		}
		$0 ~ /sched:sched_waking:/ {
			t = $0; sub(/.*comm=/, "", t); sub(/ pid=.*/, "", t)
			k["wake " task(t) " by " task($1)]++
		}
		$0 ~ /irq:softirq_entry:/ {
			s = $0; sub(/.*action=/, "", s); sub(/\].*/, "", s)
			k["softirq " s]++
		}
		END {
			if (ios <= 0) { print "no I/O counted"; exit }
			printf "switches %.3f per I/O\n", all / ios
			fflush()
			for (x in k) if (k[x] / ios >= 0.01) printf "%6.3f  %s\n", k[x] / ios, x | "sort -k2"
			close("sort -k2")
		}'
}
# sw_one RW QD BS SIDE DEV: one traced run and its counts.
sw_one() {
	local rw=$1 qd=$2 bs=$3 side=$4 d=$5 data=/tmp/perf.sw ios
	rm -f /tmp/fio.out
	blkb_perf_fio $data "$d" "$rw" "$bs" "$qd" $SW_SECS \
		-e sched:sched_switch -e sched:sched_waking -e irq:softirq_entry || {
		bench_say "fail case=switch_${rw}_qd$qd side=$side round=0"
		rm -f $data
		return
	}
	ios=$(grep -o 'issued rwts: total=[0-9]*,[0-9]*' /tmp/fio.out | tr -dc '0-9,' |
		awk -F, '{ print $1 + $2 }')
	{
		echo "=== SWITCH $rw $bs QD$qd $side /dev/$d: $(grep -o 'IOPS=[^,]*' /tmp/fio.out) ios=$ios"
		/usr/bin/perf script -i $data -F comm,cpu,event,trace 2> /dev/null |
			sw_count "${ios:-0}"
	} > /dev/console
	rm -f $data
}
blkb_script_cases "randwrite:32:4k" 3 sw_one
