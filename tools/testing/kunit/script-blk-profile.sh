#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# Where the time of a block case goes, on both disks: a script for the bench
# guest (sourced by guest-bench.sh, with its helpers and guest-bench-blk.sh's),
# which needs perf in the guest's image:
#
#   RDMATEST_BINS=/usr/bin/perf RDMATEST_SCRIPT=tools/testing/kunit/script-blk-profile.sh \
#     BENCH_CASES=script BENCH_TOPOLOGY=loopback FLAVOR=release make bench
#
# For each of 4 KiB random write and read at queue depth 1 and random write at
# depth 32 (or the cases of `BENCH_PROF=RW:QD:BS,...`, e.g. `read:8:128k`),
# fio runs 8 s on the C pair's disk, then on the Rust one's, under
# `perf record -a` (cpu-clock samples of both CPUs, kernel symbols from
# /proc/kallsyms); the console gets each run's IOPS, what rxe0's hardware
# counters (packets, retries, NAKs) and the CPUs' context switches,
# interrupts and softirqs moved by, per I/O, its hottest symbols, its samples
# by command and by module, the functions of the two block stacks' modules
# and their hottest offsets (`PROFILE`, `COMM`, `DSO`, `MODULES`, `OFFSETS`
# sections of the bench log).
# The second disk is the Rust pair's (rdma_rust_nvme on rdma_rust_nvmet), or,
# with `BENCH_PAIR=nvmf` or `nvmh`, that of the bench cases of that prefix.
# Sampling costs time of its own: the IOPS are for reading the profile, not
# for the table; one 8 s run of a case moves by 10-25 % from run to run.

PROF_SECS=8
# hw_snap FILE: rxe0's non-zero hardware counters (guest-init.sh's
# `counters`), the context switches and interrupts of /proc/stat and the
# softirqs of /proc/softirqs (all CPUs), one "name value" per line; the delta
# below reads an absent one as 0.
hw_snap() {
	{
		counters rxe0 | tr ' ' '\n' | sed -n 's/^\(.*\)=/rxe0:\1 /p'
		awk '$1 == "ctxt" || $1 == "intr" { print "stat:" $1, $2 }' /proc/stat
		awk 'NR > 1 { n = 0; for (i = 2; i <= NF; i++) n += $i; sub(":", "", $1); print "softirq:" $1, n }' /proc/softirqs
	} > "$1"
}
# prof_report FILE SORT LIMIT [ARGS...]: perf's table, without its comments.
prof_report() {
	local data=$1 sort=$2 limit=$3
	shift 3
	/usr/bin/perf report -i "$data" --stdio --no-children --sort "$sort" \
		--percent-limit "$limit" "$@" 2> /dev/null | grep -v '^#' | grep -v '^$'
}
# The modules of the two block stacks: their own code, function by function.
PROF_MODULES='[rdma_rust_nvme],[rdma_rust_nvmet],[rdma_rxe],[nvme_rdma],[nvme_fabrics],[nvme_core],[nvmet],[nvmet_rdma],[brd]'
# prof_one RW QD BS SIDE DEV: one profiled run and its report.
prof_one() {
	local rw=$1 qd=$2 bs=$3 side=$4 d=$5 data=/tmp/perf.$4
	hw_snap /tmp/hw.before
	blkb_perf_fio $data "$d" "$rw" "$bs" "$qd" $PROF_SECS -e cpu-clock -F 1000 ||
		bench_say "fail case=profile_${rw}_qd$qd side=$side round=0"
	hw_snap /tmp/hw.after
	{
		echo "=== PROFILE $rw $bs QD$qd $side /dev/$d: $(grep -o 'IOPS=[^,]*' /tmp/fio.out)"
		# What rxe did meanwhile, per I/O (packets, retries, NAKs), and the CPUs
		# (context switches, interrupts, softirqs by kind).
		awk -v ios="$(grep -o 'issued rwts: total=[0-9]*,[0-9]*' /tmp/fio.out | tr -dc '0-9,' | tr , +)" '
			BEGIN { n = 0; split(ios, p, "+"); for (i in p) n += p[i] }
			FILENAME == ARGV[1] { b[$1] = $2; next }
			$2 != b[$1] { printf "%s +%d (%.2f per I/O)\n", $1, $2 - b[$1], ($2 - b[$1]) / (n > 0 ? n : 1) }
		' /tmp/hw.before /tmp/hw.after
		prof_report $data sym 0.4 | head -40
		echo "=== COMM $rw QD$qd $side"
		prof_report $data comm 1 | head -20
		echo "=== DSO $rw QD$qd $side"
		prof_report $data dso 0.5 | head -20
		echo "=== MODULES $rw QD$qd $side (% of all samples)"
		prof_report $data dso,sym 0.05 --dsos "$PROF_MODULES" | head -30
		# Where in those functions (offsets to match against `objdump -d` of the
		# same build's .ko; under TCG a sample lands where a translation block
		# starts, so an offset names the block after the cost, not the cost).
		echo "=== OFFSETS $rw QD$qd $side (samples by function+offset in the block stacks' modules)"
		/usr/bin/perf script -i "$data" -F ip,sym,symoff,dso 2> /dev/null |
			grep -E '[^a-z_](rdma_rust_nvme|rdma_rust_nvmet|nvme_rdma|nvme_fabrics|nvme_core|nvmet|nvmet_rdma|brd)([^a-z_]|$)' |
			awk '{ print $2 }' | sort | uniq -c | sort -rn | head -30
	} > /dev/console
	rm -f $data
}
blkb_script_cases "randwrite:1:4k randread:1:4k randwrite:32:4k" 1 prof_one
