#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# /init of the rdma-rust test VM (busybox sh). The kernel command line picks
# what to do:
#   rdmatest=test         one guest: two rxe devices, KUnit suites, ULP checks,
#                         rping over rdma_cm on one device (loopback)
#   rdmatest=run          one guest: show the ULP attaching to rxe devices
#   rdmatest=peer-a|b     one of two guests joined by a QEMU socket network:
#                         a is 10.88.0.1 (rping server), b 10.88.0.2 (client)
# Results are printed as KTAP suites on /dev/kmsg, next to the kernel's own.

export PATH=/usr/bin:/bin:/sbin:/usr/sbin
# busybox sh prefers its applets to PATH for bare names; iproute2's ip is
# needed (busybox ip cannot create veth pairs).
ip() { /usr/bin/ip "$@"; }
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mount -t debugfs debugfs /sys/kernel/debug
mount -t tmpfs tmpfs /tmp
mkdir -p /dev/pts /var/run && mount -t devpts devpts /dev/pts

arg() { sed -n "s/.* $1=\\([^ ]*\\).*/\\1/p" /proc/cmdline; }
mode=$(arg rdmatest)
count=$(arg rdmatest.count); count=${count:-500}
size=$(arg rdmatest.size); size=${size:-4096}

kmsg() { echo "$*" > /dev/kmsg; }
say() { echo "$*" > /dev/console; }
shutdown() {
	kmsg "rdmatest: done"
	# `make run` boots with `quiet`: the host needs the marker on the console too.
	grep -qw quiet /proc/cmdline && say "rdmatest: done"
	sync
	reboot -f
}
trap shutdown EXIT
# A hung test must show up as a hung task well before the host's timeout.
echo 30 > /proc/sys/kernel/hung_task_timeout_secs 2>/dev/null

# --- KTAP output of the shell's own checks -----------------------------------
# suite_begin NAME; case_ok NAME | case_fail NAME REASON... | case_skip NAME WHY;
# suite_end prints the suite (cases are buffered: the plan needs their count).
suite_begin() { suite=$1; ncase=0; nfail=0; : > /tmp/cases; }
case_ok() { ncase=$((ncase + 1)); echo "    ok $ncase $1" >> /tmp/cases; }
case_skip() { ncase=$((ncase + 1)); echo "    ok $ncase $1 # SKIP $2" >> /tmp/cases; }
case_fail() {
	ncase=$((ncase + 1)); nfail=$((nfail + 1))
	name=$1; shift
	for line in "$@"; do echo "    # $line" >> /tmp/cases; done
	echo "    not ok $ncase $name" >> /tmp/cases
}
# check NAME COMMAND...: run COMMAND, pass if it exits 0 (its output is kept on failure)
check() {
	name=$1; shift
	if "$@" > /tmp/out 2>&1; then
		case_ok "$name"
	else
		rc=$?
		set -- "'$*' exited with $rc"
		while IFS= read -r l; do set -- "$@" "$l"; done < /tmp/out
		case_fail "$name" "$@"
	fi
}
suite_end() {
	kmsg "    KTAP version 1"
	kmsg "    # Subtest: $suite"
	kmsg "    1..$ncase"
	while IFS= read -r l; do kmsg "$l"; done < /tmp/cases
	if [ "$nfail" = 0 ]; then kmsg "ok 1 $suite"; else kmsg "not ok 1 $suite"; fi
}

# --- helpers ------------------------------------------------------------------
# wait_for SECONDS COMMAND...: retry COMMAND every 0.2 s until it succeeds.
wait_for() {
	n=$(($1 * 5)); shift
	while [ $n -gt 0 ]; do
		"$@" > /dev/null 2>&1 && return 0
		sleep 0.2; n=$((n - 1))
	done
	return 1
}
port_active() { rdma link show "$1/1" | grep -q 'state ACTIVE'; }
add_rxe() {
	rdma link add "$1" type rxe netdev "$2" && wait_for 10 port_active "$1"
}
# rxe's protocol counters (retransmissions, sequence errors, RNR), one line.
counters() {
	for f in /sys/class/infiniband/"$1"/ports/1/hw_counters/*; do
		v=$(cat "$f"); [ "$v" = 0 ] || printf '%s=%s ' "${f##*/}" "$v"
	done
}
dmesg_count() { dmesg | grep -c "$1"; }
uptime_ms() { read -r up _ < /proc/uptime; echo $(( ${up%.*} * 1000 + 10 * ${up#*.} )); }

load_rxe() {
	modprobe rdma_rxe || { say "rdmatest: modprobe rdma_rxe failed"; return 1; }
}

# One guest: rxe0 on veth0 and rxe1 on veth1, the two ends of one veth pair.
setup_loopback() {
	ip link set lo up
	ip link add veth0 type veth peer name veth1
	ip addr add 10.77.0.1/24 dev veth0
	ip addr add 10.77.1.1/24 dev veth1
	ip link set veth0 up
	ip link set veth1 up
	load_rxe && add_rxe rxe0 veth0 && add_rxe rxe1 veth1
}

# rping_pair ADDR COUNT SIZE: rping server and client over rdma_cm on ADDR,
# with data verification (-V); both must exit 0.
rping_pair() {
	rping -s -a "$1" -C "$2" -S "$3" -V > /tmp/rping-s 2>&1 &
	spid=$!
	sleep 1
	rping -c -a "$1" -C "$2" -S "$3" -V > /tmp/rping-c 2>&1
	crc=$?
	wait $spid
	src=$?
	cat /tmp/rping-c /tmp/rping-s
	[ $crc = 0 ] && [ $src = 0 ]
}

# --- modes ----------------------------------------------------------------------
mode_test() {
	suite_begin rdma_setup
	check modprobe_rdma_rxe load_rxe
	ip link set lo up
	ip link add veth0 type veth peer name veth1
	ip addr add 10.77.0.1/24 dev veth0
	ip addr add 10.77.1.1/24 dev veth1
	ip link set veth0 up
	ip link set veth1 up
	check rxe0_on_veth0_active add_rxe rxe0 veth0
	check rxe1_on_veth1_active add_rxe rxe1 veth1
	suite_end

	# Leaks are judged against this point: what boot left behind is not ours.
	echo clear > /sys/kernel/debug/kmemleak 2>/dev/null

	# Let fail_nth (rdma_verbs' constructor-failure case) fail sleeping
	# allocations and single pages too, without a stack dump per failure.
	for f in /sys/kernel/debug/failslab /sys/kernel/debug/fail_page_alloc; do
		[ -d "$f" ] || continue
		echo N > "$f/ignore-gfp-wait"
		echo 0 > "$f/verbose"
	done
	[ -d /sys/kernel/debug/fail_page_alloc ] &&
		echo 0 > /sys/kernel/debug/fail_page_alloc/min-order

	# kernel::rdma KUnit suites: they run when the module loads.
	insmod /lib/modules/extra/rdma_kunit.ko || say "rdmatest: insmod rdma_kunit failed"
	rmmod rdma_kunit
	kmsg "rdmatest: after rdma_kunit: rxe0 counters: $(counters rxe0)"

	# The ULP: attaches to each device, follows link delete/add, detaches on rmmod.
	suite_begin rdma_rust_ulp
	check insmod insmod /lib/modules/extra/rdma_rust_ulp.ko
	check attached_rxe0 dmesg_has "rdma_rust_ulp: rxe0: attached"
	check attached_rxe1 dmesg_has "rdma_rust_ulp: rxe1: attached"
	check port_logged_active dmesg_has "rdma_rust_ulp: rxe0: port 1 ACTIVE link_layer Ethernet"
	check link_delete_returns timeout 30 rdma link delete rxe0
	check link_delete_frees_state dmesg_has "rdma_rust_ulp: rxe0: detached, device state freed"
	check link_add_attaches_again sh -c \
		'rdma link add rxe0 type rxe netdev veth0 && [ "$(dmesg | grep -c "rdma_rust_ulp: rxe0: attached")" = 2 ]'
	check rmmod timeout 30 rmmod rdma_rust_ulp
	check rmmod_frees_all sh -c \
		'[ "$(dmesg | grep -c "rdma_rust_ulp: rxe[01]: detached, device state freed")" = 3 ]'
	suite_end

	# samples/: an RC message through a loopback QP pair on each device.
	suite_begin rdma_samples
	check insmod_loopback insmod /lib/modules/extra/rdma_rust_loopback.ko
	for d in rxe0 rxe1; do
		check "${d}_rc_message" dmesg_has "rdma_rust_loopback: $d: RC loopback: 23 bytes sent, received and checked"
	done
	check rmmod_loopback timeout 30 rmmod rdma_rust_loopback
	suite_end

	# rdma_cm + RC traffic on one rxe device, from user space (the peer the ULP
	# will later talk to): checks the image and the device, and gives a baseline.
	suite_begin rdma_loopback
	check rping_64B_x50 rping_pair 10.77.0.1 50 64
	check rping_4KiB_x50 rping_pair 10.77.0.1 50 4096
	suite_end

	suite_begin rdma_leaks
	if [ -e /sys/kernel/debug/kmemleak ]; then
		echo scan > /sys/kernel/debug/kmemleak; sleep 1
		echo scan > /sys/kernel/debug/kmemleak
		if [ -s /sys/kernel/debug/kmemleak ]; then
			set --
			while IFS= read -r l; do set -- "$@" "$l"; done < /sys/kernel/debug/kmemleak
			case_fail kmemleak_clean "$@"
		else
			case_ok kmemleak_clean
		fi
	else
		case_fail kmemleak_clean "no /sys/kernel/debug/kmemleak (CONFIG_DEBUG_KMEMLEAK off?)"
	fi
	suite_end
}
dmesg_has() { dmesg | grep -q "$1"; }

mode_run() {
	say ""
	say "=== rdma-rust demo: soft-RoCE devices rxe0 (veth0) and rxe1 (veth1) ==="
	setup_loopback || { say "rxe setup failed"; return; }
	rdma link show > /dev/console
	say ""
	say "=== insmod rdma_rust_ulp.ko ==="
	insmod /lib/modules/extra/rdma_rust_ulp.ko
	dmesg | grep 'rdma_rust_ulp:' | sed 's/^\[[ 0-9.]*\] /  /' > /dev/console
	say ""
	say "=== rdma link delete rxe1 ==="
	rdma link delete rxe1
	dmesg | grep 'rdma_rust_ulp:' | tail -n 1 | sed 's/^\[[ 0-9.]*\] /  /' > /dev/console
	say ""
	say "=== rmmod rdma_rust_ulp ==="
	rmmod rdma_rust_ulp
	dmesg | grep 'rdma_rust_ulp:' | tail -n 1 | sed 's/^\[[ 0-9.]*\] /  /' > /dev/console
	say ""
	say "=== insmod samples/rdma_rust/rdma_rust_loopback.ko (one RC message per device) ==="
	insmod /lib/modules/extra/rdma_rust_loopback.ko
	dmesg | grep 'rdma_rust_loopback: rxe' | sed 's/^\[[ 0-9.]*\] /  /' > /dev/console
	rmmod rdma_rust_loopback
	say ""
}

# Two guests on the 10.88.0.0/24 network of a QEMU socket backend.
setup_peer() {
	ip link set lo up
	ip addr add "$1/24" dev eth0
	ip link set eth0 up
	load_rxe && add_rxe rxe0 eth0
}

mode_peer_a() {
	suite_begin rdma_peer_a
	check rxe0_on_eth0 setup_peer 10.88.0.1
	check ping_peer wait_for 60 ping -c 1 -W 1 10.88.0.2
	# One connection: the client's run; -V verifies every payload.
	check rping_server timeout 240 rping -s -a 10.88.0.1 -C "$count" -S "$size" -V
	kmsg "rdmatest: peer-a rxe0 counters: $(counters rxe0)"
	suite_end
}

mode_peer_b() {
	suite_begin rdma_peer_b
	check rxe0_on_eth0 setup_peer 10.88.0.2
	check ping_peer wait_for 60 ping -c 1 -W 1 10.88.0.1
	ping -c 20 -i 0.05 10.88.0.1 | tail -n 1 > /tmp/ping
	# The server may not be listening yet: retry while the connection is refused.
	start=$(uptime_ms)
	ok=0
	for _ in $(seq 1 30); do
		if timeout 240 rping -c -a 10.88.0.1 -C "$count" -S "$size" -V > /tmp/rping 2>&1; then
			ok=1; break
		fi
		grep -q -i 'reject\|refused\|unreachable\|connect error' /tmp/rping || break
		sleep 1; start=$(uptime_ms)
	done
	ms=$(( $(uptime_ms) - start ))
	if [ $ok = 1 ]; then
		case_ok "rping_${size}B_x${count}"
	else
		set -- "rping client failed:"
		while IFS= read -r l; do set -- "$@" "$l"; done < /tmp/rping
		case_fail "rping_${size}B_x${count}" "$@"
	fi
	kmsg "rdmatest: peer-b rxe0 counters: $(counters rxe0)"
	kmsg "rdmatest: rping $count x $size B to the peer took $ms ms ($(( ms * 1000 / count )) us per round trip); ping: $(cat /tmp/ping)"
	suite_end
}

case "$mode" in
test) mode_test ;;
run) mode_run ;;
peer-a) mode_peer_a ;;
peer-b) mode_peer_b ;;
*) say "rdmatest: unknown mode '$mode'"; sh ;;
esac
