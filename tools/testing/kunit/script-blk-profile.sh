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
# prof_samples DATA: one line per sample of DATA, "MODULE FUNCTION OFFSET".
# Kernel addresses are placed here, by /proc/kallsyms: perf sizes a module's
# map by its /proc/modules size, which in 6.12 counts the module's data too,
# so one module's map can reach over the next one's text and that module's
# samples land in the wrong module, or in no function ([unknown]). User space
# is as perf names it (offset "-").
prof_samples() {
	{
		awk '$2 ~ /^[tT]$/ { print $1, 0, $3, ($4 == "" ? "[kernel]" : $4) }' /proc/kallsyms
		/usr/bin/perf script -i "$1" -F ip,sym,dso 2> /dev/null | awk '
			$1 ~ /^ffff/ { print $1, 1; next }
			{ d = $NF; gsub(/[()]/, "", d); sub(/.*\//, "", d); print "u", 2, d, $2 }'
	} | LC_ALL=C sort | awk '
		# The low 32 bits of a hex address (a function never spans 4 GiB).
		function low(s,   i, n) {
			n = 0; s = substr(s, length(s) - 7)
			for (i = 1; i <= length(s); i++)
				n = n * 16 + index("0123456789abcdef", substr(s, i, 1)) - 1
			return n
		}
		$2 == 0 { at = $1; fn = $3; mod = $4; next }
		$2 == 1 { o = low($1) - low(at); if (o < 0) o += 4294967296; printf "%s %s 0x%x\n", mod, fn, o; next }
		{ print "(" $3 ")", $4, "-" }'
}
# prof_top SAMPLES LIMIT KEY [MODULES]: the LIMIT commonest values of KEY
# (mod, fn, mod_fn or fn_off) among SAMPLES' lines (of MODULES only, a
# space-separated list of [name]s, if given), with their % of all samples.
prof_top() {
	awk -v key="$3" -v mods=" $4 " '
		{ n++ }
		mods != "  " && index(mods, " " $1 " ") == 0 { next }
		{ k = key == "mod" ? $1 : key == "fn" ? $2 : key == "mod_fn" ? $1 " " $2 : $2 "+" $3; c[k]++ }
		END { for (k in c) printf "%8d %6.2f%%  %s\n", c[k], 100 * c[k] / n, k }
	' "$1" | sort -rn | head -"$2"
}
# The modules of the two block stacks: their own code, function by function.
PROF_MODULES='[rdma_rust_nvme] [rdma_rust_nvmet] [rdma_rxe] [nvme_rdma] [nvme_fabrics] [nvme_core] [nvmet] [nvmet_rdma] [brd]'
# prof_one RW QD BS SIDE DEV: one profiled run and its report.
prof_one() {
	local rw=$1 qd=$2 bs=$3 side=$4 d=$5 data=/tmp/perf.$4
	hw_snap /tmp/hw.before
	blkb_perf_fio $data "$d" "$rw" "$bs" "$qd" $PROF_SECS -e cpu-clock -F 1000 ||
		bench_say "fail case=profile_${rw}_qd$qd side=$side round=0"
	hw_snap /tmp/hw.after
	prof_samples $data > /tmp/samples
	{
		echo "=== PROFILE $rw $bs QD$qd $side /dev/$d: $(grep -o 'IOPS=[^,]*' /tmp/fio.out), $(wc -l < /tmp/samples) samples"
		# What rxe did meanwhile, per I/O (packets, retries, NAKs), and the CPUs
		# (context switches, interrupts, softirqs by kind).
		awk -v ios="$(grep -o 'issued rwts: total=[0-9]*,[0-9]*' /tmp/fio.out | tr -dc '0-9,' | tr , +)" '
			BEGIN { n = 0; split(ios, p, "+"); for (i in p) n += p[i] }
			FILENAME == ARGV[1] { b[$1] = $2; next }
			$2 != b[$1] { printf "%s +%d (%.2f per I/O)\n", $1, $2 - b[$1], ($2 - b[$1]) / (n > 0 ? n : 1) }
		' /tmp/hw.before /tmp/hw.after
		prof_top /tmp/samples 40 fn
		echo "=== COMM $rw QD$qd $side"
		prof_report $data comm 1 | head -20
		echo "=== DSO $rw QD$qd $side"
		prof_top /tmp/samples 20 mod
		echo "=== MODULES $rw QD$qd $side (samples, % of all samples)"
		prof_top /tmp/samples 30 mod_fn "$PROF_MODULES"
		# Where in those functions (offsets to match against `objdump -d` of the
		# same build's .ko; under TCG a sample lands where a translation block
		# starts, so an offset names the block after the cost, not the cost).
		echo "=== OFFSETS $rw QD$qd $side (samples by function+offset in the block stacks' modules)"
		prof_top /tmp/samples 30 fn_off "$PROF_MODULES"
	} > /dev/console
	rm -f $data /tmp/samples
}
blkb_script_cases "randwrite:1:4k randread:1:4k randwrite:32:4k" 1 prof_one
