#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# Where one I/O's time goes, step by step, on both disks: a script for the
# bench guest (sourced by guest-bench.sh, with its helpers and
# guest-bench-blk.sh's), which needs perf in the guest's image:
#
#   RDMATEST_BINS=/usr/bin/perf RDMATEST_SCRIPT=tools/testing/kunit/script-blk-trace.sh \
#     BENCH_CASES=script BENCH_TOPOLOGY=loopback FLAVOR=release make bench
#
# At queue depth 1 one I/O is in flight at a time, so every event between a
# request's issue and its completion belongs to it. For 4 KiB random writes and
# reads (or the cases of `BENCH_PROF=RW:1:BS,...`), fio runs 2 s on
# the C pair's disk, then on the Rust one's (BENCH_PAIR), three rounds, under
# `perf record -a` of the block layer's issue and completion and the core's CQ
# events (a CQ's handler scheduling its poll, the poll starting, each poll
# that returned completions); with `BENCH_TRACE_ALL=1` also the workqueue
# items queued (rxe's tasks are, when a request is posted or a packet
# arrives) and started (rxe's tasks and the CQs' polls, told apart by their
# work item), the context switches, and the softirqs run (entry and exit).
# The console gets, per run (the `TRACE` sections of the bench log):
#   - four phases of an I/O, mean and median in us: A from the issue to the
#     first CQ scheduled (the initiator's submission, rxe carrying the command
#     and the target's receive completing), B from there to that CQ's poll
#     (the target's workqueue waking), C from the poll to the next CQ
#     scheduled (the target's work and its answer, or the command's SEND
#     acknowledged), D from there to the completion (the initiator's CQ
#     handler and whatever is still to come);
#   - each step, on whatever CPU, when it first came in the I/Os that had it;
#   - the commonest sequences of steps (each labelled with its CPU), their
#     I/Os averaged (those over 2 ms left out).
# Tracing costs time of its own: the latencies are for comparing the steps of
# the two stacks in one boot, not for the table.

TRACE_SECS=2
TRACE_EVENTS=block:block_getrq,block:block_rq_issue,block:block_rq_complete,rdma_core:cq_schedule
TRACE_EVENTS=$TRACE_EVENTS,rdma_core:cq_process,rdma_core:cq_poll
# BENCH_TRACE_ALL=1 (rdmatest.trace_all=1): rxe's work items and the context
# switches too (more steps, and a slower I/O).
[ "$(arg rdmatest.trace_all)" != 1 ] ||
	TRACE_EVENTS=$TRACE_EVENTS,workqueue:workqueue_queue_work,workqueue:workqueue_execute_start,sched:sched_switch,irq:softirq_entry,irq:softirq_exit
# Rounds of peer then ULP: one run of each moves by 10-25 % from run to run.
TRACE_ROUNDS=3
# trace_steps DEV: reads `perf script` lines; prints the phases, the steps and
# the commonest sequences of the I/Os of DEV (major,minor).
trace_steps() {
	awk -v dev="$1" '
	function label(ev, rest,   a, n, w, fn) {
		if (ev == "rdma_core:cq_schedule") { sub(/.*cq.id=/, "", rest); return "sched:cq" rest + 0 }
		if (ev == "rdma_core:cq_process") { sub(/.*cq.id=/, "", rest); return "poll-start:cq" rest + 0 }
		if (ev == "rdma_core:cq_poll") {
			n = split(rest, a, " ")
			if (a[n] + 0 == 0) return ""
			sub(/.*cq.id=/, "", rest); return "polled:cq" (rest + 0) "x" a[n] + 0
		}
		if (ev == "workqueue:workqueue_execute_start") {
			# "work struct 0x...: function NAME": one name per work item.
			split(rest, a, " ")
			w = a[3]; sub(/:$/, "", w)
			if (!(w in work)) work[w] = ++nwork
			return "work" work[w] ":" a[5]
		}
		if (ev == "workqueue:workqueue_queue_work") {
			# "work struct=0x... function=NAME workqueue=...": where a work item is
			# queued (an rxe task: a request posted, or a packet arrived).
			split(rest, a, " ")
			w = a[2]; sub(/^struct=/, "", w)
			fn = a[3]; sub(/^function=/, "", fn)
			if (!(w in work)) work[w] = ++nwork
			return "queue:work" work[w] ":" fn
		}
		if (ev == "irq:softirq_entry" || ev == "irq:softirq_exit") {
			# "vec=N [action=NAME]": a softirq run (a CQ poll in softirq, a
			# packet, a timer), at the end of an interrupt or where bottom halves
			# are enabled again (spin_unlock_bh).
			sub(/.*action=/, "", rest); sub(/\].*/, "", rest)
			return (ev == "irq:softirq_entry" ? "softirq:" : "softirq-end:") rest
		}
		if (ev == "sched:sched_switch") {
			sub(/.*next_comm=/, "", rest); sub(/ .*/, "", rest); sub(/[\/:0-9]*$/, "", rest)
			return "run:" rest
		}
		return ""
	}
	{
		ev = ""; t = -1; cpu = ""
		for (i = 1; i <= NF; i++) {
			if ($i ~ /^\[[0-9]+\]$/) { cpu = substr($i, 2, length($i) - 2) + 0 }
			else if (t < 0 && $i ~ /^[0-9]+\.[0-9]+:$/) { t = substr($i, 1, length($i) - 1) + 0 }
			else if ($i ~ /^[a-z_]+:[a-z_]+:$/) { ev = substr($i, 1, length($i) - 1); f = i; break }
		}
		if (ev == "" || t < 0) next
		rest = ""
		for (i = f + 1; i <= NF; i++) rest = rest " " $i
		# The request allocated for the bio: before the driver is called, so the
		# submission paths compare from here (a driver marks its request issued
		# wherever it likes: nvme-rdma after building its command, a Rust
		# blk-mq driver before its queue_rq). A step before the issue, if any.
		if (ev == "block:block_getrq") { if ($(f + 1) == dev) { tg = t; gcpu = cpu }; next }
		if (ev == "block:block_rq_issue" || ev == "block:block_rq_complete") {
			if ($(f + 1) != dev) next
			if (ev == "block:block_rq_issue") {
				on = 1; t0 = t; n = 0; sig = "issue@" cpu; sx = ""; px = -1; sy = -1
				if (tg > 0 && t - tg < 0.002) { n++; lab[n] = "getrq@" gcpu; dt[n] = (tg - t) * 1e6; sig = sig " " lab[n] }
				tg = 0
				next
			}
			if (!on) next
			on = 0; total = (t - t0) * 1e6; all++; allsum += total
			if (total > 2000) { slow++; next }
			n++; lab[n] = "complete@" cpu; dt[n] = total; sig = sig " " lab[n]
			# The four phases, where the I/O has them: A issue to the first CQ scheduled
			# (the target), B to its poll, C from there to the next CQ scheduled (the
			# initiator), D from that to the completion.
			if (sx != "" && px >= 0 && sy >= 0) {
				ph["A"] = tx; ph["B"] = px - tx; ph["C"] = sy - px; ph["D"] = total - sy
				for (p in ph) { psum[p] += ph[p]; b = int(ph[p]); if (b > 1999) b = 1999; if (b < 0) b = 0; hist[p, b]++ }
				np++
			}
			if (++cnt[sig] == 1) nsig++; steps[sig] = n
			for (i = 1; i <= n; i++) { sum[sig, i] += dt[i]; name[sig, i] = lab[i] }
			# Each step without its CPU, where it first came in the I/O.
			for (i = 1; i <= n; i++) {
				l = lab[i]; sub(/@[0-9]+$/, "", l)
				if ((l, all) in seen) continue
				seen[l, all] = 1; fsum[l] += dt[i]; if (++fcnt[l] == 1) nf++
			}
			next
		}
		if (!on) next
		l = label(ev, rest)
		if (l == "") next
		d = (t - t0) * 1e6
		if (l ~ /^sched:/) {
			if (sx == "") { sx = l; tx = d }
			else if (sy < 0 && l != sx) sy = d
		} else if (sx != "" && px < 0 && l == "poll-start:" substr(sx, 7)) px = d
		n++; lab[n] = l "@" cpu; dt[n] = (t - t0) * 1e6; sig = sig " " lab[n]
	}
	END {
		printf "%d I/Os, mean %.1f us; %d over 2 ms left out; %d sequences\n", all, all ? allsum / all : 0, slow, nsig
		printf "phases (us, mean/median, %d I/Os):", np
		split("A B C D", order, " ")
		for (k = 1; k <= 4; k++) {
			p = order[k]; c = 0; med = 0
			for (b = 0; b < 2000; b++) { c += hist[p, b]; if (c * 2 >= np) { med = b; break } }
			printf " %s %.1f/%d", p, np ? psum[p] / np : 0, med
		}
		printf "\n"
		print "each step, the first time it came in an I/O: mean us after the issue, I/Os"
		for (k = 1; k <= nf; k++) {
			best = ""
			for (l in fcnt) if (!(l in fshown) && (best == "" || fsum[l] / fcnt[l] < fsum[best] / fcnt[best])) best = l
			fshown[best] = 1
			if (fcnt[best] * 20 >= all) printf "  %8.1f  %-28s %d\n", fsum[best] / fcnt[best], best, fcnt[best]
		}
		for (k = 1; k <= 4; k++) {
			best = ""; bc = 0
			for (s in cnt) if (!(s in shown) && cnt[s] > bc) { best = s; bc = cnt[s] }
			if (best == "") break
			shown[best] = 1
			printf "sequence %d: %d I/Os\n", k, bc
			for (i = 1; i <= steps[best]; i++) printf "  %8.1f  %s\n", sum[best, i] / bc, name[best, i]
		}
	}'
}
# trace_one RW QD BS SIDE DEV: one traced run and its steps.
trace_one() {
	local rw=$1 qd=$2 bs=$3 side=$4 d=$5 data=/tmp/perf.$4
	if [ "$qd" != 1 ]; then
		bench_say "fail case=trace side=$side round=0 (rdmatest.prof: $rw:$qd:$bs: the trace takes QD 1 only)"
		return
	fi
	blkb_perf_fio $data "$d" "$rw" "$bs" 1 $TRACE_SECS -e "$TRACE_EVENTS" ||
		bench_say "fail case=trace_${rw}_$bs side=$side round=0"
	{
		echo "=== TRACE $rw $bs QD1 $side /dev/$d: $(grep -o 'IOPS=[^,]*' /tmp/fio.out)"
		/usr/bin/perf script -i $data -F cpu,time,event,trace 2> /dev/null |
			trace_steps "$(tr : , < /sys/block/$d/dev)"
	} > /dev/console
	rm -f $data
}
blkb_script_cases "randwrite:1:4k randread:1:4k" $TRACE_ROUNDS trace_one
