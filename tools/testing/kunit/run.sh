#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# `make test` and `make run`: build what changed, boot the VM(s), report.
#
#   run.sh test   one guest (loopback topology) + two guests (two RoCE hosts);
#                 prints the KUnit report and ends with "N passed, N failed"
#   run.sh run    one guest: rxe devices, the ULP attaching to them
#   run.sh bench  (FLAVOR=release) the ULP against perftest and rping, timed;
#                 prints the table and writes bench.csv and bench.png
#   run.sh stress the fault suite on FLAVOR's kernel (guest-stress.sh): its
#                 report, then "N passed, N failed" like `test`
#
# Environment: ONLY (one suite: kunit, traffic, cm, samples, nvmet, nvme,
# stress, or peers), NVMET_TARGET (the targets of the nvmet and nvme suites: c,
# the kernel's nvmet-rdma; rust, rdma_rust_nvmet; both, the default when this
# tree has drivers/rdma_rust_nvmet, else c), RDMA_RUST_CACHE (build cache),
# RDMA_RUST_LOGS (logs), SERIAL
# (1: the topologies one after the other, the default below four cores),
# VM_TIMEOUT (seconds per boot, default 1800, bench 4200, `stress`: 7200), STRESS_KILLS (`stress`: times
# the peer guest is killed mid-connection, default 5), STRESS_PART (`stress`: guest or
# peers, one part only), PEER_COUNT/PEER_SIZE (rping
# between the two guests), TOPOLOGY=loopback|peers|all (default all),
# RDMATEST_EXTRA (more loopback-guest arguments; rdmatest.only=cm runs only the
# rdma_cm suite there, rdmatest.only=traffic only the ULP traffic suite,
# rdmatest.only=stress only the fault suite's short version,
# rdmatest.only=samples only the samples/ suite,
# rdmatest.only=nvmet only the NVMe-oF target's, rdmatest.only=nvme only the
# NVMe-oF host's (rdma_rust_nvme),
# rdmatest.only=kunit only the KUnit suites and the module unload check, for
# quick iterations).
. "$(dirname "$0")/lib.sh"

mode=${1:-test}
# ONLY=SUITE, the quick loop (Documentation/testing.rst): one suite of the
# loopback guest, or the two guests alone.
case ${ONLY:-} in
'') ;;
peers) TOPOLOGY=peers ;;
kunit | traffic | cm | samples | nvmet | nvme | stress)
	TOPOLOGY=loopback RDMATEST_EXTRA="rdmatest.only=$ONLY ${RDMATEST_EXTRA:-}" ;;
*) die "ONLY=$ONLY: one of kunit, traffic, cm, samples, nvmet, nvme, stress (the loopback guest's suites) or peers" ;;
esac
# The nvmet (and nvme) suite's targets: the Rust one only where this tree builds it (the
# module cache is shared between clones), and nvmet-rdma beside it as the
# reference that tells the target's failures from the script's.
if [ -z "${NVMET_TARGET:-}" ]; then
	if [ -d "$PROJECT_DIR/drivers/rdma_rust_nvmet" ]; then
		NVMET_TARGET=both
	else
		NVMET_TARGET=c
	fi
fi
case $NVMET_TARGET in
c) nvmet_suites=rdma_nvmet_c ;;
rust) nvmet_suites=rdma_nvmet_rust,rdma_nvmet_configfs,rdma_nvmet_hostile ;;
both) nvmet_suites=rdma_nvmet_c,rdma_nvmet_rust,rdma_nvmet_configfs,rdma_nvmet_hostile ;;
*) die "NVMET_TARGET=$NVMET_TARGET: c (nvmet-rdma), rust (rdma_rust_nvmet) or both" ;;
esac
# A guest's timeout is there to catch a hang, not to time the suites. The
# loopback guest of make test takes about 6 min on a 2-core host (2026-11-28,
# with KASAN's inline checks; it took 20 with outline ones), so 30 min leaves
# a host 2.5 times slower room and ends a hang well inside CI's 90; a bench
# (rounds of every case) and the fault suite keep longer ones.
case $mode in
test | run) VM_TIMEOUT=${VM_TIMEOUT:-1800} ;;
*) VM_TIMEOUT=${VM_TIMEOUT:-4200} ;;
esac
TOPOLOGY=${TOPOLOGY:-all}
PEER_COUNT=${PEER_COUNT:-100}
PEER_SIZE=${PEER_SIZE:-4096}

t0=$(date +%s)
lock_tree
# SKIP_BUILD=1 re-runs the VMs on what was built last.
[ -n "${SKIP_BUILD:-}" ] || "$KUNIT_DIR/build.sh"
# The bench guests and make test's loopback guest boot the image with fio and
# nvme-cli when they run the nvmet or nvme suite (all, ONLY=nvmet or ONLY=nvme).
"$KUNIT_DIR/mkinitramfs.sh"
t_build=$(($(date +%s) - t0))

run_dir=$LOGS/$mode-$(date +%Y%m%d-%H%M%S)
mkdir -p "$run_dir"
ln -sfn "$run_dir" "$LOGS/latest"
# The guests boot copies, so that another build may use the tree meanwhile;
# removed when the run ends (the logs stay).
boot=$run_dir/boot
mkdir -p "$boot"
cp "${BZIMAGE:-$KSRC/arch/x86/boot/bzImage}" "$boot/bzImage"
cp "$IMAGES/initramfs.cpio.gz" "$boot/"
# Only a bench, the fault suite and the NVMe-oF suites boot the image with fio and
# nvme-cli (44 MB): the loopback guest when it runs its nvmet, nvme or stress
# suite (the NVMe-oF host's port removals), the test topology's peers always (the
# NVMe-oF suites between them, guest-nvmet-peers.sh).
nvmet_image= peers_image=
case "$mode:${RDMATEST_EXTRA:-}" in
bench:* | stress:* | test:*rdmatest.only=nvmet* | test:*rdmatest.only=nvme | test:*"rdmatest.only=nvme "*) nvmet_image=1 ;;
test:*rdmatest.only=stress*) nvmet_image=1 ;;
test:*rdmatest.only=*) ;;
test:*) nvmet_image=1 ;;
esac
[ "$mode" != test ] || [ "$TOPOLOGY" = loopback ] || peers_image=1
[ -z "$nvmet_image$peers_image" ] || cp "$IMAGES/initramfs-bench.cpio.gz" "$boot/"
unlock_tree
trap 'rm -rf "$boot"' EXIT
BZIMAGE=$boot/bzImage
IMAGES=$boot

# vm NAME CMDLINE [QEMU ARGS...]: boots one guest, console to $run_dir/NAME.log;
# its status goes to $run_dir/NAME.status ("ok" or why not).
# watchdog_thresh=30 puts the soft-lockup report at 60 s instead of 20 s: under
# TCG, three guests share two host cores (the peers niced) and a guest's vCPU
# was seen to go 22-26 s without running (inside `rdma link add`, rxe's softirq
# work), which the guest reports as a soft lockup. A real lockup is still
# reported, and a hang still ends in the VM timeout; the RCU stall report
# moves from 21 s to 60 s for the same reason (seen once on peer-a). log_buf_len=4M: the
# shell checks read dmesg, and the default ring dropped early lines.
vm() {
	local name=$1 cmdline=$2 rc status
	shift 2
	local log=$run_dir/$name.log
	# In a subshell whose stderr is the log: a guest killed by reaper takes
	# timeout with it (it dies of its child's signal), and the shell's "Killed"
	# goes there.
	( timeout -k 10 "$VM_TIMEOUT" nice -n "${VM_NICE:-0}" qemu-system-x86_64 \
		-nographic -no-reboot -monitor none -cpu max,la57=off -m "${VM_MEM:-512}" \
		-pidfile "$run_dir/$name.pid" \
		-kernel "$BZIMAGE" -initrd "${VM_INITRD:-$IMAGES/initramfs.cpio.gz}" \
		-append "console=ttyS0 panic=-1 oops=panic printk.devkmsg=on acpi=noirq watchdog_thresh=30 rcupdate.rcu_cpu_stall_timeout=60 log_buf_len=4M $cmdline" \
		"$@" < /dev/null > "$log" 2>&1; exit $? ) 2>> "$log" && rc=0 || rc=$?
	if [ -e "$run_dir/$name.killed" ]; then
		# Killed by reaper on the guest's request: its checks ended before that.
		status=ok
	elif [ $rc = 124 ] || [ $rc = 137 ]; then
		status="timed out after ${VM_TIMEOUT}s (hang)"
	elif [ $rc != 0 ]; then
		status="qemu exited with $rc"
	elif ! grep -q 'rdmatest: done' "$log"; then
		status="guest stopped before its tests finished (panic?)"
	else
		status=ok
	fi
	echo "$status" > "$run_dir/$name.status"
}

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# reaper NAME: SIGKILLs guest NAME's QEMU when the guest asks for it on its
# console ("rdmatest: kill this guest"): for the survivor of a peer killed
# mid-connection, the peer just goes quiet. Returns when the guest is gone.
reaper() {
	local log=$run_dir/$1.log pid
	while [ ! -e "$run_dir/$1.status" ]; do
		if grep -q 'rdmatest: kill this guest' "$log" 2> /dev/null; then
			pid=$(cat "$run_dir/$1.pid" 2> /dev/null) || pid=
			if [ -n "$pid" ]; then
				touch "$run_dir/$1.killed"
				kill -9 "$pid"
				return 0
			fi
		fi
		sleep 0.5
	done
}

# peer_nets ID: the -netdev options of net ID for guest a (line 1) and guest b
# (line 2), on their own host ports. PEERS_NET=dgram (the default) joins them
# by UDP datagrams, one per frame; PEERS_NET=socket by QEMU's TCP stream (a
# listens, b connects).
peer_nets() {
	local port port_b
	port=$(free_port)
	case ${PEERS_NET:-dgram} in
	socket)
		echo "socket,id=$1,listen=127.0.0.1:$port"
		echo "socket,id=$1,connect=127.0.0.1:$port" ;;
	dgram)
		port_b=$(free_port)
		[ "$port_b" != "$port" ] || port_b=$(free_port)
		echo "dgram,id=$1,local.type=inet,local.host=127.0.0.1,local.port=$port,remote.type=inet,remote.host=127.0.0.1,remote.port=$port_b"
		echo "dgram,id=$1,local.type=inet,local.host=127.0.0.1,local.port=$port_b,remote.type=inet,remote.host=127.0.0.1,remote.port=$port" ;;
	*) echo "PEERS_NET=$PEERS_NET: socket or dgram" >&2; return 1 ;;
	esac
}

# peers NAME_A CMDLINE_A NAME_B CMDLINE_B: two guests joined by two QEMU
# networks (peer_nets): eth0, rxe0's (RoCE), and eth1, siw0's (iWARP; a netdev
# of its own, as rdma_cm finds a device by the address's netdev). VM_NICE
# applies to both; b may ask to be killed (reaper).
peers() {
	local n0 n1
	n0=$(peer_nets n0) && n1=$(peer_nets n1) || return 1
	vm "$1" "$2" -smp 1 -netdev "$(echo "$n0" | sed -n 1p)" \
		-device virtio-net-pci,netdev=n0,mac=52:54:00:88:00:01 \
		-netdev "$(echo "$n1" | sed -n 1p)" \
		-device virtio-net-pci,netdev=n1,mac=52:54:00:89:00:01 &
	local pa=$!
	if [ "${PEERS_NET:-dgram}" = socket ]; then
		local port
		for port in $(echo "$n0 $n1" | grep -o 'listen=127.0.0.1:[0-9]*' | cut -d: -f2); do
			for _ in $(seq 50); do
				ss -ltn | grep -q "127.0.0.1:$port " && break
				sleep 0.2
			done
		done
	fi
	vm "$3" "$4" -smp 1 -netdev "$(echo "$n0" | sed -n 2p)" \
		-device virtio-net-pci,netdev=n0,mac=52:54:00:88:00:02 \
		-netdev "$(echo "$n1" | sed -n 2p)" \
		-device virtio-net-pci,netdev=n1,mac=52:54:00:89:00:02 &
	local pb=$!
	reaper "$3"
	wait $pa $pb
}

# kill_pair CYCLES: `make stress`'s peer killed mid-connection: the survivor
# (kill-survivor) stays up while the victim is booted CYCLES times
# (kill-victim-N), each killed by reaper mid-connection. Joined by datagrams:
# each new victim takes its predecessor's address and port.
kill_pair() {
	local port_a port_b i status=ok
	port_a=$(free_port)
	port_b=$(free_port)
	[ "$port_b" != "$port_a" ] || port_b=$(free_port)
	VM_NICE=10 vm kill-survivor "rdmatest=kill-survivor rdmatest.flavor=$FLAVOR rdmatest.kills=$1" -smp 1 \
		-netdev "dgram,id=n0,local.type=inet,local.host=127.0.0.1,local.port=$port_a,remote.type=inet,remote.host=127.0.0.1,remote.port=$port_b" \
		-device virtio-net-pci,netdev=n0,mac=52:54:00:88:00:01 &
	local pa=$!
	for i in $(seq 1 "$1"); do
		VM_NICE=10 VM_TIMEOUT=900 vm "kill-victim-$i" "rdmatest=kill-victim" -smp 1 \
			-netdev "dgram,id=n0,local.type=inet,local.host=127.0.0.1,local.port=$port_b,remote.type=inet,remote.host=127.0.0.1,remote.port=$port_a" \
			-device virtio-net-pci,netdev=n0,mac=52:54:00:88:00:02 &
		reaper "kill-victim-$i"
		wait $!
		[ -e "$run_dir/kill-victim-$i.killed" ] || status="victim $i was not killed: $(cat "$run_dir/kill-victim-$i.status")"
	done
	wait $pa
	[ "$status" = ok ] || echo "$status" > "$run_dir/kill-survivor.status"
}

# The test topology's two guests. ib_core.force_mr=1: peer-a runs rdma_storage
# again on the MR path of the core's R/W API (reported as rdma_storage_mr). The
# loopback guest has more to do: the peers take the CPU it leaves (VM_NICE).
test_peers() {
	local common="rdmatest.count=$PEER_COUNT rdmatest.size=$PEER_SIZE"
	VM_NICE=10 VM_INITRD=${peers_image:+$IMAGES/initramfs-bench.cpio.gz} peers peer-a "rdmatest=peer-a $common ib_core.force_mr=1" \
		peer-b "rdmatest=peer-b $common"
}

if [ "$mode" = run ]; then
	log "booting the VM (TCG; about a minute)"
	vm run "rdmatest=run quiet" -smp 2 -net none
	sed -n '/=== rdma-rust demo/,/rdmatest: done/p' "$run_dir/run.log" | grep -v 'rdmatest: done\|rdmatest: demo:\|reboot:'
	status=$(cat "$run_dir/run.status")
	[ "$status" = ok ] || die "VM: $status (log: $run_dir/run.log)"
	grep -q 'rdma_rust_ulp: rxe0: attached' "$run_dir/run.log" || die "the ULP did not attach (log: $run_dir/run.log)"
	grep -q 'rdmatest: demo: ok' "$run_dir/run.log" ||
		die "the demo did not run clean: see its summary above (log: $run_dir/run.log)"
	exit 0
fi

if [ "$mode" = bench ]; then
	# BENCH_QUICK=1 (CI): one round of small counts, to keep the bench from
	# rotting: every case runs and validates, no figure. It may also run on the
	# test kernel (FLAVOR=debug run.sh bench), whose debug options then watch
	# the bench's paths (rdma.config has the tracing and SysV IPC it needs).
	# BENCH_ROUNDS, BENCH_BYTES: rounds, and bytes per throughput run.
	[ "$FLAVOR" = release ] || [ -n "${BENCH_QUICK:-}" ] ||
		die "make bench times the release kernel only (FLAVOR=release; BENCH_QUICK=1 runs on either)"
	if [ -n "${BENCH_QUICK:-}" ]; then
		extra="rdmatest.rounds=1 rdmatest.quick=1"
	else
		extra="rdmatest.rounds=${BENCH_ROUNDS:-3}"
	fi
	[ -z "${BENCH_BYTES:-}" ] || extra="$extra rdmatest.bytes=$BENCH_BYTES"
	[ -z "${BENCH_LAT_REPS:-}" ] || extra="$extra rdmatest.lat_reps=$BENCH_LAT_REPS"
	# BENCH_CASES=a,b: only those cases; BENCH_CASES=script runs RDMATEST_SCRIPT.
	[ -z "${BENCH_CASES:-}" ] || extra="$extra rdmatest.cases=$BENCH_CASES"
	# Data-path keys of the ULP's timed runs, for experiments (comma-separated).
	[ -z "${BENCH_ULP_FAST:-}" ] || extra="$extra rdmatest.ulp_fast=$BENCH_ULP_FAST"
	[ -z "${BENCH_ULP_LAT:-}" ] || extra="$extra rdmatest.ulp_lat=$BENCH_ULP_LAT"
	# The cases of script-blk-profile.sh and script-blk-trace.sh (RW:QD:BS,...;
	# e.g. read:8:128k).
	[ -z "${BENCH_PROF:-}" ] || extra="$extra rdmatest.prof=$BENCH_PROF"
	# The scripts' second disk: that of the pair nvmf, nvmh or nvmp (the default).
	[ -z "${BENCH_PAIR:-}" ] || extra="$extra rdmatest.pair=$BENCH_PAIR"
	# script-blk-trace.sh: rxe's work items and the context switches too.
	[ -z "${BENCH_TRACE_ALL:-}" ] || extra="$extra rdmatest.trace_all=1"
	t1=$(date +%s)
	log "one guest on the $FLAVOR kernel: the ULP against perftest and rping (log: $run_dir/bench.log)"
	logs=() status=ok
	if [ "${BENCH_TOPOLOGY:-all}" != peers ]; then
		VM_MEM=1024 VM_INITRD=$IMAGES/initramfs-bench.cpio.gz \
			vm bench "rdmatest=bench $extra" -smp 2 -net none
		logs+=("$run_dir/bench.log")
		[ "$(cat "$run_dir/bench.status")" = ok ] || status="bench: $(cat "$run_dir/bench.status")"
	fi
	if [ "${BENCH_TOPOLOGY:-all}" != loopback ] && [ "${BENCH_CASES:-}" != script ]; then
		log "two guests on the $FLAVOR kernel (logs: $run_dir/bench-a.log, $run_dir/bench-b.log)"
		peers bench-a "rdmatest=bench-a $extra" bench-b "rdmatest=bench-b $extra"
		logs+=("$run_dir/bench-a.log" "$run_dir/bench-b.log")
		for g in bench-a bench-b; do
			[ "$(cat "$run_dir/$g.status")" = ok ] || status="$g: $(cat "$run_dir/$g.status")"
		done
	fi
	log "build ${t_build}s, bench VMs $(($(date +%s) - t1))s; logs in $run_dir"
	# A kernel splat in a bench guest fails the bench, as it fails a test.
	python3 - "$KUNIT_DIR" "${logs[@]}" <<-'EOF' || status="kernel splat in a bench guest (above)"
		import sys
		sys.path.insert(0, sys.argv[1])
		from ktap_collect import splat_lines
		bad = 0
		for log in sys.argv[2:]:
		    splats = splat_lines(open(log, errors='replace').read().splitlines())
		    for line in splats[:20]:
		        print(f'{log}: {line}')
		    bad |= bool(splats)
		sys.exit(bad)
	EOF
	rc=0
	python3 "$KUNIT_DIR/bench_report.py" --out "$run_dir" \
		--title "make bench ($(date +%F), $(nproc) host cores, TCG, $FLAVOR kernel)" \
		--expect-guests ${#logs[@]} "${logs[@]}" || rc=$?
	[ "$status" = ok ] || die "$status (logs in $run_dir)"
	exit $rc
fi

[ "$mode" = test ] || [ "$mode" = stress ] || die "usage: run.sh test|run|bench|stress"

# The release kernel has no doctests (release.config): they run at every boot.
guests=() expect=
[ "$FLAVOR" = release ] || expect=rust_doctests_kernel
t1=$(date +%s)
if [ "$mode" = stress ]; then
	# STRESS_CYCLES (link, netdev and rmmod cycles each), STRESS_HOSTILE
	# (control strings), STRESS_RPINGS (rping round trips each way, to and
	# from the ULP), STRESS_RC (validated RC messages), STRESS_UD (UD
	# datagrams). 100 cycles of each fault on both kernels (on the debug
	# kernel, where `rdma link add` takes ~1.7 s, they take about an hour).
	# The debug kernel moves ~220 UD datagrams/s: 100,000 would outlast the
	# ULP's 300 s wait for a run. It gets 10,000 of each kind of message.
	cycles=${STRESS_CYCLES:-100}
	if [ "$FLAVOR" = release ]; then
		nrc=${STRESS_RC:-1000000} nud=${STRESS_UD:-100000}
	else
		nrc=${STRESS_RC:-10000} nud=${STRESS_UD:-10000}
	fi
	# STRESS_PART=guest (the one-guest faults) or peers (the peer killed): one part only.
	part=${STRESS_PART:-all}
	if [ "$part" != peers ]; then
		log "one guest on the $FLAVOR kernel: the fault suite, $cycles cycles of each fault (log: $run_dir/stress.log)"
		VM_INITRD=${nvmet_image:+$IMAGES/initramfs-bench.cpio.gz} \
			VM_TIMEOUT=${STRESS_TIMEOUT:-7200} vm stress "rdmatest=stress rdmatest.flavor=$FLAVOR rdmatest.cycles=$cycles rdmatest.hostile=${STRESS_HOSTILE:-1000} rdmatest.rc_messages=$nrc rdmatest.ud_datagrams=$nud rdmatest.rpings=${STRESS_RPINGS:-1000}" \
			-smp 2 -net none
		guests+=(--guest "stress=$run_dir/stress.log=$(cat "$run_dir/stress.status")")
		expect+=,rdma_setup,rdma_stress
		[ "$FLAVOR" = release ] || expect+=,rdma_leaks
	fi
	if [ "$part" != guest ]; then
		kills=${STRESS_KILLS:-5}
		log "two guests on the $FLAVOR kernel: the peer's QEMU killed mid-connection, $kills times (log: $run_dir/kill-survivor.log)"
		kill_pair "$kills"
		guests+=(--guest "kill=$run_dir/kill-survivor.log=$(cat "$run_dir/kill-survivor.status")")
		# Each victim's console up to its kill gets the splat scan of every
		# guest (its kill_victim_N_kernel_log case): a KASAN or lockdep report
		# before the kill is a failure, whatever the survivor saw.
		for i in $(seq 1 "$kills"); do
			guests+=(--guest "kill_victim_$i=$run_dir/kill-victim-$i.log=$(cat "$run_dir/kill-victim-$i.status")")
		done
		expect+=,rdma_peer_kill
	fi
	TOPOLOGY=none
fi
if [ "$TOPOLOGY" != peers ] && [ "$TOPOLOGY" != none ]; then
	log "one guest, loopback topology (log: $run_dir/loopback.log)"
	VM_INITRD=${nvmet_image:+$IMAGES/initramfs-bench.cpio.gz} \
		vm loopback "rdmatest=test rdmatest.nvmet_target=$NVMET_TARGET ${RDMATEST_EXTRA:-}" -smp 2 -net none &
	lpid=$!
fi
if [ "$TOPOLOGY" != loopback ] && [ "$TOPOLOGY" != none ]; then
	# After the loopback guest on fewer than four cores (SERIAL=0 forces
	# both at once, SERIAL=1 one after the other): three guests on two cores
	# were measured at 1.45 s per cross-guest rping round trip (ICMP 328 ms)
	# and ran past the 900 s VM timeout, against 0.29 s and 287 s for the
	# two peers alone.
	serial=${SERIAL:-$([ "$(nproc)" -ge 4 ] && echo 0 || echo 1)}
	[ "$serial" = 0 ] || [ -z "${lpid:-}" ] || wait "$lpid"
	log "two guests, two RoCE hosts (logs: $run_dir/peer-a.log, $run_dir/peer-b.log)"
	test_peers
fi
wait
t_vm=$(($(date +%s) - t1))

if [ "$TOPOLOGY" != peers ] && [ "$TOPOLOGY" != none ]; then
	guests+=(--guest "loopback=$run_dir/loopback.log=$(cat "$run_dir/loopback.status")")
	kunit=rdma_device,rdma_verbs,rdma_soundness,rdma_storage,rdma_async,rdma_client,rdma_module_unload
	case "${RDMATEST_EXTRA:-}" in
	*rdmatest.only=kunit*) expect+=,$kunit ;;
	*rdmatest.only=cm*) expect+=,rdma_ulp_cm ;;
	*rdmatest.only=traffic*) expect+=,rdma_ulp_traffic ;;
	*rdmatest.only=stress*) expect+=,rdma_stress ;;
	*rdmatest.only=samples*) expect+=,rdma_samples ;;
	*rdmatest.only=nvmet*) expect+=,$nvmet_suites ;;
	*rdmatest.only=nvme | *"rdmatest.only=nvme "*) expect+=,rdma_nvme_host ;;
	*) expect+=,rdma_setup,$kunit,rdma_rust_ulp,rdma_ulp_traffic,rdma_ulp_cm,rdma_samples,$nvmet_suites,rdma_nvme_host,rdma_loopback,rdma_stress,rdma_leaks ;;
	esac
fi
if [ "$TOPOLOGY" != loopback ] && [ "$TOPOLOGY" != none ]; then
	guests+=(--guest "peer_a=$run_dir/peer-a.log=$(cat "$run_dir/peer-a.status")")
	guests+=(--guest "peer_b=$run_dir/peer-b.log=$(cat "$run_dir/peer-b.status")")
	expect+=,rdma_peer_a,rdma_peer_b,rdma_storage_mr,rdma_peer_a_kill
	expect+=,rdma_nvmet_peer_target,rdma_nvmet_peer_host,rdma_nvmet_peer_kill
fi

python3 "$KUNIT_DIR/ktap_collect.py" --expect "$expect" "${guests[@]}" \
	--rename peer_a:rdma_storage=rdma_storage_mr --out "$run_dir/results.ktap"
python3 "$KSRC/tools/testing/kunit/kunit.py" parse --json="$run_dir/results.json" \
	< "$run_dir/results.ktap" | tee "$run_dir/kunit.txt" || true
grep -h 'rdmatest: rping\|rdmastress: peer kill' "$run_dir"/peer-[ab].log 2>/dev/null | sed 's/^\[[ 0-9.]*\] //' || true
# Why a suite skipped all its rows (the KTAP report shows only that it did).
grep -h 'rdmatest: .*: every row skipped: ' "$run_dir"/loopback.log 2>/dev/null | sed 's/^\[[ 0-9.]*\] //' || true
# Where each guest's time went: its ten slowest checks (the log has them all).
for f in "$run_dir"/*.log; do
	g=${f##*/}
	grep 'rdmatest: slow check: ' "$f" 2> /dev/null | head -n 10 |
		sed "s/^\[[ 0-9.]*\] rdmatest: slow check: /${g%.log}: /" || true
done

log "build ${t_build}s, VMs ${t_vm}s; logs in $run_dir"
# The fault suite's report: one line per kind of fault and guest; its cycles
# are those run ("3 of 100" when a splat stopped them early).
stress_report() {
	awk -v k="$FLAVOR" 'BEGIN { printf "%-8s %-14s %-9s %8s %9s %10s\n", "kernel", "guest", "fault", "cycles", "failures", "wall time" }
		/rdmastress: kind=/ { g = FILENAME; sub(".*/", "", g); sub("[.]log$", "", g); delete f
			for (i = 1; i <= NF; i++) if (split($i, kv, "=") == 2) f[kv[1]] = kv[2]
			c = f["cycles"]; if (f["planned"] != "" && f["planned"] != c) c = c " of " f["planned"]
			printf "%-8s %-14s %-9s %8s %9s %9.1fs\n", k, g, f["kind"], c, f["failures"], f["ms"] / 1000 }
		/rdmastress: (rc messages|ud datagrams|rping round trips)=/ { sub(".*rdmastress: ", ""); more = more k ": " $0 "\n" }
		/rdmastress: link add profile: ms [0-9]/ { sub(".*profile: ms ", ""); more = more k ": rdma link add, three times (ms): " $0 "\n" }
		/rdmastress: peer kill: run [0-9]+ ended/ { for (i = 1; i <= NF; i++) if ($i == "error") t = $(i + 1)
			kn++; if (t > kt) kt = t }
		/rdmastress: peer kill: the NVMe-oF host.s keep-alive noticed/ { for (i = 1; i <= NF; i++) if ($i == "target") t = $(i + 1)
			dn++; if (t > dt) dt = t }
		END { printf "%s", more
			if (kn) printf "%s: peer killed: %d client runs ended with an error, at most %.1f s after the kill was asked\n", k, kn, kt / 1000
			if (dn) printf "%s: peer killed: %d NVMe-oF controllers (rdma_rust_nvme, idle) noticed by keep-alive, at most %.1f s after the kill was asked\n", k, dn, dt / 1000 }' "$@" | tee "$run_dir/stress.txt"
}
if [ "$mode" = stress ]; then
	stress_report $(ls "$run_dir"/stress.log "$run_dir"/kill-survivor.log 2> /dev/null)
elif grep -q 'rdmastress: kind=' "$run_dir/loopback.log" 2> /dev/null; then
	stress_report "$run_dir/loopback.log"
fi
rc=0
python3 - "$run_dir/results.json" "$KUNIT_DIR/known-upstream-failures" <<'EOF' || rc=$?
import json, sys
tree = json.load(open(sys.argv[1]))
known = {l.strip() for l in open(sys.argv[2]) if l.strip() and not l.startswith('#')}
passed = failed = skipped = 0
known_failed, our_skips, failures = [], [], []
# Which provider a row ran on: soft-iWARP's rows name siw or iWARP (their
# suite or themselves); every other row of an RDMA suite is soft-RoCE's (the
# doctests run before any device, the VM and kernel-log rows are the guest's).
providers = {'siw': {}, 'rxe': {}}
def no_device(suite):
    return suite.startswith('rust_doctests') or suite.endswith(('_kernel_log', '_vm'))
def walk(group, suite):
    global passed, failed, skipped
    for sub in group.get('sub_groups', []):
        walk(sub, sub['name'])
    for case in group.get('test_cases', []):
        name, status = case['name'], case['status']
        on = 'siw' if any(w in f'{suite}.{name}'.lower() for w in ('siw', 'iwarp')) else 'rxe'
        if not no_device(suite):
            providers[on][suite] = providers[on].get(suite, 0) + 1
        if status == 'PASS':
            passed += 1
        elif status == 'SKIP':
            skipped += 1
            if not suite.startswith('rust_doctests'):
                our_skips.append(f'{suite}.{name}')
        elif f'{suite}.{name}' in known:
            known_failed.append(f'{suite}.{name}')
        else:
            failed += 1
            failures.append(f'{suite}.{name}')
walk(tree, '')
for f in failures:
    print(f'FAILED: {f}')
for k in known_failed:
    print(f'known upstream failure (not ours; neither passed nor failed): {k}')
for s in our_skips:
    print(f'SKIPPED (the harness must provide what it needs): {s}')
for on, what in (('rxe', 'soft-RoCE (rxe0, rxe1)'), ('siw', 'soft-iWARP (siw0, siw1)')):
    suites = providers[on]
    if suites:
        print(f'on {what}: {sum(suites.values())} rows: ' +
              ', '.join(f'{k} {v}' for k, v in sorted(suites.items()) if k))
# A skip of ours is a failure (the harness must provide what a case needs).
failed += len(our_skips)
print(f'{skipped} skipped ({len(our_skips)} of them ours, counted as failed)')
print(f'{passed} passed, {failed} failed')
sys.exit(1 if failed or passed == 0 else 0)
EOF
exit $rc
