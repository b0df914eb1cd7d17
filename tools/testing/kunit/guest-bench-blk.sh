#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# `make bench`'s block cases: the Rust NVMe over Fabrics roles against the
# kernel's, in the bench guest on the same rxe0 (loopback), with the same tool
# on both disks. The peer is always the C pair: nvmet with the RDMA transport,
# a namespace on a RAM disk (brd) of the ULP's size, every block written
# before timing (blkb_prewrite), and the nvme-rdma host (`nvme connect`). The
# ULP's disk is, by case prefix:
#
#   nvmf_*: rdma_rust_nvmet's RAM namespace, through the nvme-rdma host;
#   nvmh_*: nvmet-rdma's namespace, through rdma_rust_nvme;
#   nvmp_*: rdma_rust_nvmet's RAM namespace through rdma_rust_nvme (the Rust
#           pair against the C pair).
#
# Both with two I/O queues of the same depth. fio (libaio, O_DIRECT) runs each
# case on one disk, then the other, round after round (the first disk changes
# from round to round, as for the other cases), and the lines are those
# of guest-bench.sh (`rdmabench: run case=...`): IOPS, MB/s, or the p50 and p99
# completion latency in us of the QD 1 runs; cpu_us is the guest's CPU time per
# I/O. Before the timed runs, fio writes and verifies a pattern on each disk.
# Sourced by guest-init.sh; uses guest-bench.sh's helpers.

BLKB_MB=64
BLKB_DEPTH=64
BLKB_QUEUES=2
BLKB_NQN=rdma-bench
NVMET=/sys/kernel/config/nvmet

# A case: NAME KIND RW BS QD, the name without its pair's prefix. The QD 1
# cases also give the latency rows (NAME_lat, kind blklat).
BLKB_CASES="
randread_4k_qd1 iops randread 4k 1
randwrite_4k_qd1 iops randwrite 4k 1
randread_4k_qd32 iops randread 4k 32
randwrite_4k_qd32 iops randwrite 4k 32
read_128k_qd8 bw read 128k 8
write_128k_qd8 bw write 128k 8
"

# mem_avail_kib: MemAvailable of /proc/meminfo, for the note below.
mem_avail_kib() { awk '/^MemAvailable:/ { print $2 }' /proc/meminfo; }
# blkb_prewrite DEV: every block of the RAM disk written once (fio, O_DIRECT),
# before anything is timed: brd allocates a page on the first write to it and
# reads zeros from one never written, where the Rust targets' RAM volumes are
# allocated whole; both targets then serve the same kind of memory. The
# proof is fio's own count of what it wrote (`io=` of its WRITE line), which
# must be the whole disk: brd was just loaded, so each write was a first one
# (brd keeps no I/O statistics of its own). The memory it took is only a
# note: MemFree moved by 56-86 MiB for 64 MiB across runs (reclaim, and the
# runs before giving memory back, overlap the prewrite), too noisy for a bar.
blkb_prewrite() {
	local before io
	before=$(mem_avail_kib)
	/usr/bin/fio --name=prewrite --filename=/dev/$1 --direct=1 --ioengine=libaio --rw=write \
		--bs=1m --iodepth=4 --size=${BLKB_MB}m --thread --output=/tmp/fio.prewrite > /dev/null 2>&1 ||
		{ cat /tmp/fio.prewrite >&2; return 1; }
	io=$(sed -n 's/^ *WRITE:.* io=\([^ ,]*\).*/\1/p' /tmp/fio.prewrite)
	bench_say "note brd: prewritten before timing: fio wrote $io to a fresh $BLKB_MB MiB disk; MemAvailable went down by $(( (before - $(mem_avail_kib)) / 1024 )) MiB"
	[ "$io" = "$BLKB_MB.0MiB" ] ||
		{ echo "$1: fio wrote '$io', not the disk's $BLKB_MB MiB: not preallocated" >&2; cat /tmp/fio.prewrite >&2; return 1; }
}

# blkb_nvme_up: an NVMe-oF target on rxe0's address with a brd namespace, and
# the nvme-rdma host connected to it; prints the disk's name.
blkb_nvme_up() {
	local p=$NVMET/ports/1 s=$NVMET/subsystems/$BLKB_NQN id d
	modprobe brd rd_nr=1 rd_size=$((BLKB_MB * 1024)) max_part=0 || return 1
	# brd goes if its disk cannot be measured: the next case loads a new one
	# (one already written would take no memory and fail that case too).
	blkb_prewrite ram0 || { modprobe -r brd; return 1; }
	modprobe nvmet-rdma && modprobe nvme-rdma || return 1
	[ -d $NVMET ] || mount -t configfs none /sys/kernel/config || return 1
	mkdir $s && echo 1 > $s/attr_allow_any_host && mkdir $s/namespaces/1 &&
		printf /dev/ram0 > $s/namespaces/1/device_path && echo 1 > $s/namespaces/1/enable &&
		mkdir $p && echo rdma > $p/addr_trtype && echo ipv4 > $p/addr_adrfam &&
		echo $BENCH_ADDR > $p/addr_traddr && echo 4420 > $p/addr_trsvcid &&
		ln -s $s $p/subsystems/$BLKB_NQN || return 1
	# nvme-cli makes a host NQN from the machine's DMI UUID, which does not
	# match the host ID it makes: give it both.
	id=$(cat /proc/sys/kernel/random/uuid)
	/usr/bin/nvme connect -t rdma -a $BENCH_ADDR -s 4420 -n $BLKB_NQN -i $BLKB_QUEUES -Q $BLKB_DEPTH \
		--hostnqn=nqn.2014-08.org.nvmexpress:uuid:$id --hostid=$id >&2 || return 1
	for _ in $(seq 1 50); do
		d=$(ls /sys/block | grep '^nvme[0-9]*n1$' | head -n 1)
		[ -z "$d" ] || { echo "$d"; return 0; }
		sleep 0.2
	done
	return 1
}
blkb_nvme_down() {
	/usr/bin/nvme disconnect -n $BLKB_NQN > /dev/null
	rm -f $NVMET/ports/1/subsystems/$BLKB_NQN
	rmdir $NVMET/ports/1
	echo 0 > $NVMET/subsystems/$BLKB_NQN/namespaces/1/enable
	rmdir $NVMET/subsystems/$BLKB_NQN/namespaces/1 $NVMET/subsystems/$BLKB_NQN
	modprobe -r nvme-rdma nvmet-rdma brd
}

# blkb_fio_job DEV RW BS QD SECONDS: the options of every timed fio job, one
# per word: direct I/O by libaio on /dev/DEV for SECONDS, in a thread (no fork
# per job).
blkb_fio_job() {
	echo "--filename=/dev/$1 --direct=1 --ioengine=libaio --rw=$2 --bs=$3 --iodepth=$4" \
		"--time_based --runtime=$5 --thread"
}

# blkb_fio DEV RW BS QD SECONDS [ARGS...]: one fio job on /dev/DEV; prints
# "IOS IOPS MB_PER_S P50_US P99_US" of the job's direction (completion latency).
blkb_fio() {
	local dev=$1 rw=$2 bs=$3 qd=$4 secs=$5 out
	shift 5
	# The terse (v3) line has the figures.
	out=$(/usr/bin/fio --name=bench $(blkb_fio_job "$dev" "$rw" "$bs" "$qd" "$secs") \
		--size=${BLKB_MB}m --ramp_time=1 --group_reporting --output-format=terse \
		--terse-version=3 --percentile_list=50:99 "$@" 2> /tmp/fio.err) ||
		{ cat /tmp/fio.err >&2; return 1; }
	# Fields (1-based): 5 error; read 6 KiB, 7 KiB/s, 8 IOPS, 18-37 completion
	# latency percentiles "P%=US"; write: the same 41 fields on.
	echo "$out" | awk -F';' -v rw=$rw -v bs=$bs '
		$1 != 3 { next }
		{ o = (rw ~ /write/) ? 41 : 0
		  if ($5 != 0) { print "fio error " $5 > "/dev/stderr"; exit 1 }
		  for (i = 18 + o; i <= 37 + o; i++) { split($i, kv, "=")
			if (kv[1] == "50.000000%") p50 = kv[2]; if (kv[1] == "99.000000%") p99 = kv[2] }
		  n = bs; sub(/k$/, "", n); ios = $(6 + o) / n
		  printf "%d %d %.2f %s %s\n", ios, $(8 + o), $(7 + o) * 1.024 / 1000, p50, p99; found = 1; exit }
		END { exit !found }'
}

# blkb_check DEV: fio writes a pattern (random 4 KiB and sequential
# 128 KiB, QD 16) over the first 16 MiB and verifies every block read back.
blkb_check() {
	local dev=$1 what= job
	for job in "randwrite 4k" "write 128k"; do
		set -- $job
		/usr/bin/fio --name=check --filename=/dev/$dev --direct=1 --ioengine=libaio --rw=$1 \
			--bs=$2 --iodepth=16 --size=16m --verify=crc32c --do_verify=1 --verify_fatal=1 \
			--thread --output=/tmp/fio.check > /dev/null 2>&1 ||
			{ cat /tmp/fio.check > /dev/console; return 1; }
		what="$what $1/$2"
	done
	echo "$what"
}

# blkb_script_cases DEFAULT ROUNDS FUNC: the loop of the scripts of one's own
# that look into both disks (script-blk-profile.sh, script-blk-trace.sh,
# script-blk-switch.sh): both disks up, perf allowed to see the kernel, then
# for each case of rdmatest.prof (`BENCH_PROF=RW:QD:BS,...`; DEFAULT if none)
# and ROUNDS rounds of the C pair's disk then the ULP's, FUNC RW QD BS SIDE
# DEV; both disks down. The ULP's disk is that of the pair rdmatest.pair
# (`BENCH_PAIR=nvmf|nvmh|nvmp`, as the bench cases of that prefix; nvmp, the
# Rust pair, by default).
blkb_script_cases() {
	local default=$1 rounds=$2 func=$3 cases c rw qd bs side d nvme rust pair
	cases=$(arg rdmatest.prof | tr , ' ')
	pair=$(arg rdmatest.pair)
	case ${pair:=nvmp} in
	nvmf | nvmh | nvmp) ;;
	*) bench_say "fail case=script side=ulp round=0 (rdmatest.pair=$pair: not nvmf, nvmh or nvmp)"; return ;;
	esac
	nvme=$(blkb_nvme_up) || { bench_say "fail case=script side=peer round=0 (nvme-rdma)"; return; }
	rust=$(${pair}_rust_up) || { bench_say "fail case=script side=ulp round=0 (${pair}_rust_up)"; ${pair}_rust_down > /dev/null 2>&1; blkb_nvme_down; return; }
	echo 0 > /proc/sys/kernel/kptr_restrict
	echo -1 > /proc/sys/kernel/perf_event_paranoid
	for c in ${cases:-$default}; do
		rw=${c%%:*} qd=${c#*:} bs=${c##*:}
		qd=${qd%%:*}
		case "$c:$rw:$qd:$bs" in
		"$rw:$qd:$bs:$rw:$qd:$bs") ;;
		*)
			bench_say "fail case=script side=peer round=0 (rdmatest.prof: $c is not RW:QD:BS)"
			continue ;;
		esac
		for side in $(seq 1 "$rounds" | sed 's/.*/peer ulp/'); do
			if [ $side = peer ]; then d=$nvme; else d=$rust; fi
			$func "$rw" "$qd" "$bs" $side "$d"
		done
	done
	${pair}_rust_down
	blkb_nvme_down
}

# blkb_perf_fio DATA DEV RW BS QD SECS PERF_ARGS...: fio's job on /dev/DEV
# under `perf record -a PERF_ARGS...`, into DATA; fio's report in
# /tmp/fio.out.
blkb_perf_fio() {
	local data=$1 dev=$2 rw=$3 bs=$4 qd=$5 secs=$6
	shift 6
	/usr/bin/perf record -q -a "$@" -o "$data" -- \
		/usr/bin/fio --name=script $(blkb_fio_job "$dev" "$rw" "$bs" "$qd" "$secs") \
		--output=/tmp/fio.out > /dev/null 2>&1
}

# blkb_one CASE KIND RW BS QD SIDE DEV ROUND: one timed run; its line (and the
# latency line of a QD 1 case).
blkb_one() {
	local case=$1 kind=$2 rw=$3 bs=$4 qd=$5 side=$6 dev=$7 round=$8 c0 c1 out secs=4 value cpu
	[ -z "$BENCH_QUICK" ] || secs=1
	c0=$(cpu_ticks)
	out=$(blkb_fio "$dev" "$rw" "$bs" "$qd" $secs 2> /tmp/blkb.err)
	c1=$(cpu_ticks)
	if [ -z "$out" ]; then
		tail -n 5 /tmp/blkb.err > /dev/console
		bench_say "fail case=$case side=$side round=$round"
		return 1
	fi
	set -- $out
	# The guest's CPU time over the whole run (ramp included) per I/O timed.
	cpu=$(awk -v t=$((c1 - c0)) -v m="$1" 'BEGIN { printf "%.2f", t * 10000 / (m > 0 ? m : 1) }')
	case $kind in
	iops) value=$2 ;;
	bw) value=$3 ;;
	esac
	bench_say "run case=$case side=$side round=$round value=$value p99=0 msgs=$1 cpu_us=$cpu"
	[ "$qd" != 1 ] ||
		bench_say "run case=${case}_lat side=$side round=$round value=$4 p99=$5 msgs=$1 cpu_us=$cpu"
}

# blkb_compare PEER_DEV ULP_DEV OP: the block cases on two disks that are up:
# a verified pattern on each, then the timed rounds (the peer column's figures
# from /dev/PEER_DEV, the ULP's from /dev/ULP_DEV). OP names the cases
# (OP_randread_4k_qd1, ...) and their op.
blkb_compare() {
	local peer=$1 ulp=$2 op=$3 r c k rw bs qd what side d
	echo "$BLKB_CASES" | grep . | sed "s/^/${op}_/" > /tmp/blkb-cases
	while read -r c k rw bs qd; do
		bench_say "case case=$c kind=$k op=$op size=$(( ${bs%k} * 1024 ))"
		[ "$qd" != 1 ] || bench_say "case case=${c}_lat kind=blklat op=$op size=$(( ${bs%k} * 1024 ))"
	done < /tmp/blkb-cases
	for side in peer ulp; do
		if [ $side = peer ]; then c=$peer; else c=$ulp; fi
		if what=$(blkb_check "$c"); then
			bench_say "check case=${op}_$side ok fio wrote and verified (crc32c)$what on /dev/$c"
		else
			bench_say "check case=${op}_$side FAIL"
		fi
	done
	for r in $(seq 1 "$BENCH_ROUNDS"); do
		while read -r c k rw bs qd; do
			for side in $(bench_sides "$r"); do
				if [ $side = peer ]; then d=$peer; else d=$ulp; fi
				blkb_one "$c" "$k" "$rw" "$bs" "$qd" $side "$d" "$r" < /dev/null
			done
		done < /tmp/blkb-cases
	done
}

# blkb_pair OP WHAT PEER_UP ULP_UP ULP_DOWN NOTE STATUS: the peer's disk
# (PEER_UP prints its name; always nvmet-rdma's, blkb_nvme_up) and the ULP's
# (ULP_UP), the block cases on them (named OP_*), both down; the RDMA
# resources back to where they were. NOTE says what the two disks are (after
# their names), STATUS is the Rust module's status file, logged after the
# runs; WHAT names the cases in the resources' line.
blkb_pair() {
	local op=$1 what=$2 peer_up=$3 ulp_up=$4 ulp_down=$5 note=$6 status=$7 peer ulp
	rdma_resources_but_pool > /tmp/blkb-res
	peer=$($peer_up) || { bench_say "fail case=${op}_setup side=peer round=0 ($peer_up)"; return 1; }
	ulp=$($ulp_up) || { bench_say "fail case=${op}_setup side=ulp round=0 ($ulp_up)"; $ulp_down > /dev/null 2>&1; blkb_nvme_down; return 1; }
	bench_say "note $op: peer /dev/$peer, ulp /dev/$ulp: $note; $BLKB_MB MiB, $BLKB_QUEUES queues of depth $BLKB_DEPTH; fio $(/usr/bin/fio --version) libaio O_DIRECT"
	blkb_compare "$peer" "$ulp" "$op"
	bench_say "note $op: $status: $(tr '\n' ' ' < "$status")"
	$ulp_down
	blkb_nvme_down
	if wait_for 10 resources_but_pool_same_as /tmp/blkb-res; then
		bench_say "resources back to where they were after the $what cases (but the core's CQ pool: $(pool_cqs) idle CQs)"
	else
		bench_say "fail case=${op}_resources: LEFT BEHIND by the $what cases: $(rdma resource show | tr '\n' ';')"
		bench_say "note ${op}_resources: before $(tr '\n' ';' < /tmp/blkb-res) now $(rdma_resources_but_pool | tr '\n' ';')"
		# Whose they are: each QP, PD and CQ with the module (comm) that made it.
		bench_say "note ${op}_resources: $(rdma resource show qp | tr '\n' ';') $(rdma resource show pd | tr '\n' ';') $(rdma resource show cq | tr '\n' ';')"
	fi
}

# --- NVMe over Fabrics: rdma_rust_nvmet against nvmet-rdma --------------------
# The same host (nvme-rdma, nvme-cli) and the same fio jobs on two targets in
# the same boot: nvmet-rdma with its brd namespace (blkb_nvme_up, port 4420)
# as the peer, rdma_rust_nvmet with a RAM namespace of the same size (port
# 4422, configured through its configfs tree as nvmet's is) as the ULP; both
# with BLKB_QUEUES I/O queues of depth BLKB_DEPTH.
NVMF_NQN=rdma-bench-rust
NVMF_CFS=/sys/kernel/config/rdma_rust_nvmet

# nvmf_target_up: rdma_rust_nvmet's subsystem, RAM namespace and port (4422),
# configured through its configfs tree as nvmet's is.
nvmf_target_up() {
	local p=$NVMF_CFS/ports/2 s=$NVMF_CFS/subsystems/$NVMF_NQN
	insmod /lib/modules/extra/rdma_rust_nvmet.ko || return 1
	mkdir $s && echo 1 > $s/attr_allow_any_host && mkdir $s/namespaces/1 &&
		echo $((BLKB_MB * 1048576)) > $s/namespaces/1/size && echo 1 > $s/namespaces/1/enable &&
		mkdir $p && echo rdma > $p/addr_trtype && echo ipv4 > $p/addr_adrfam &&
		echo $BENCH_ADDR > $p/addr_traddr && echo 4422 > $p/addr_trsvcid &&
		ln -s $s $p/subsystems/$NVMF_NQN
}
nvmf_target_down() {
	rm -f $NVMF_CFS/ports/2/subsystems/$NVMF_NQN
	rmdir $NVMF_CFS/ports/2
	echo 0 > $NVMF_CFS/subsystems/$NVMF_NQN/namespaces/1/enable
	rmdir $NVMF_CFS/subsystems/$NVMF_NQN/namespaces/1 $NVMF_CFS/subsystems/$NVMF_NQN
	rmmod rdma_rust_nvmet
}

# nvmf_rust_up: rdma_rust_nvmet up and the stock host connected to it; prints
# the disk's name (the nvmeXn1 that is new).
nvmf_rust_up() {
	local id d before
	nvmf_target_up || return 1
	before=$(ls /sys/block | grep '^nvme[0-9]*n1$')
	id=$(cat /proc/sys/kernel/random/uuid)
	/usr/bin/nvme connect -t rdma -a $BENCH_ADDR -s 4422 -n $NVMF_NQN -i $BLKB_QUEUES -Q $BLKB_DEPTH \
		--hostnqn=nqn.2014-08.org.nvmexpress:uuid:$id --hostid=$id >&2 || return 1
	for _ in $(seq 1 50); do
		d=$(ls /sys/block | grep '^nvme[0-9]*n1$' | grep -vxF "$before" | head -n 1)
		[ -z "$d" ] || { echo "$d"; return 0; }
		sleep 0.2
	done
	return 1
}
nvmf_rust_down() {
	/usr/bin/nvme disconnect -n $NVMF_NQN > /dev/null
	nvmf_target_down
}

# bench_nvmf: rdma_rust_nvmet against nvmet-rdma, the nvme-rdma host on both
# (nvmf_* rows).
bench_nvmf() {
	blkb_pair nvmf NVMe-oF blkb_nvme_up nvmf_rust_up nvmf_rust_down \
		"nvmet-rdma's brd namespace (prewritten) and rdma_rust_nvmet's RAM namespace, the nvme-rdma host on both" \
		/sys/kernel/debug/rdma_rust_nvmet/status
}

# --- NVMe over Fabrics hosts: rdma_rust_nvme against nvme-rdma ----------------
# The same target (nvmet-rdma, its brd namespace: blkb_nvme_up) and the same
# fio jobs through two hosts in the same boot: the stock host (nvme-rdma,
# nvme-cli) as the peer, rdma_rust_nvme (its options string written to
# /dev/rdma_rust_nvme-fabrics) as the ULP; both with BLKB_QUEUES I/O queues of
# depth BLKB_DEPTH. Each host's disk is a controller of its own on the one
# namespace: the runs take turns, never together.
NVMH_CTL=/dev/rdma_rust_nvme-fabrics

# nvmh_connect PORT NQN: rdma_rust_nvme loaded and connected to subsystem NQN
# at BENCH_ADDR:PORT; prints the disk's name.
nvmh_connect() {
	local id
	insmod /lib/modules/extra/rdma_rust_nvme.ko || return 1
	id=$(cat /proc/sys/kernel/random/uuid)
	printf 'transport=rdma,traddr=%s,trsvcid=%s,nqn=%s,nr_io_queues=%s,queue_size=%s,hostnqn=nqn.2014-08.org.nvmexpress:uuid:%s,hostid=%s' \
		$BENCH_ADDR "$1" "$2" $BLKB_QUEUES $BLKB_DEPTH "$id" "$id" > $NVMH_CTL || return 1
	for _ in $(seq 1 50); do
		[ ! -b /dev/rnvme0n1 ] || { echo rnvme0n1; return 0; }
		sleep 0.2
	done
	return 1
}
nvmh_rust_up() { nvmh_connect 4420 $BLKB_NQN; }
nvmh_rust_down() {
	echo disconnect=0 > $NVMH_CTL
	rmmod rdma_rust_nvme
}

# bench_nvmh: rdma_rust_nvme against the nvme-rdma host, nvmet-rdma's brd
# namespace the target of both (nvmh_* rows).
bench_nvmh() {
	blkb_pair nvmh "NVMe-oF host" blkb_nvme_up nvmh_rust_up nvmh_rust_down \
		"the nvme-rdma host and rdma_rust_nvme, both controllers of nvmet-rdma's brd namespace (prewritten)" \
		/sys/kernel/debug/rdma_rust_nvme/status
}

# --- NVMe over Fabrics pairs: Rust host and target against C host and target --
# The C pair (nvme-rdma + nvmet-rdma's brd namespace: blkb_nvme_up) as the
# peer, the Rust pair (rdma_rust_nvme + rdma_rust_nvmet's RAM namespace,
# port 4422) as the ULP; the same fio jobs, in the same boot.

nvmp_rust_up() { nvmf_target_up && nvmh_connect 4422 $NVMF_NQN; }
nvmp_rust_down() {
	nvmh_rust_down
	nvmf_target_down
}

# bench_nvmp: the Rust pair against the C pair (nvmp_* rows).
bench_nvmp() {
	blkb_pair nvmp "NVMe-oF pair" blkb_nvme_up nvmp_rust_up nvmp_rust_down \
		"the C pair (nvme-rdma host, nvmet-rdma's brd namespace, prewritten) and the Rust pair (rdma_rust_nvme host, rdma_rust_nvmet's RAM namespace)" \
		/sys/kernel/debug/rdma_rust_nvme/status
}
