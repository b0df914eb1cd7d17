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
#   rdmatest=bench        `make bench`: the ULP against perftest and rping
#   rdmatest=bench-a|b    `make bench` between two guests
#   rdmatest=stress       `make stress`: the fault suite with its full counts
#   rdmatest=kill-survivor|kill-victim  `make stress`'s two guests: the host
#                         kills the victim's QEMU mid-connection, rdmatest.kills times
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
	# Where the guest's time went: every check's wall time, slowest first
	# (see `check`); run.sh prints the first ten.
	[ -s /tmp/check-ms ] && sort -rn /tmp/check-ms |
		while read -r ms what; do kmsg "rdmatest: slow check: $what took $ms ms"; done
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
# check NAME COMMAND...: run COMMAND, pass if it exits 0 (its output is kept on
# failure); its wall time goes to /tmp/check-ms, for the report of the slowest.
check() {
	local ck_t0 ck_what="$suite.$1"
	name=$1; shift
	ck_t0=$(uptime_ms)
	check_timed "$@"
	echo "$(( $(uptime_ms) - ck_t0 )) $ck_what" >> /tmp/check-ms
}
check_timed() {
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
# SPLATS: what the kernel log says when something went wrong in it, as one
# extended regular expression: the list that ktap_collect.py applies to each
# guest's whole console on the host (tools/testing/kunit/splats), so that a
# check in here never knows fewer splats than the host's.
SPLATS=$(grep -v '^#' /lib/rdmatest/splats | grep . | tr '\n' '|')
SPLATS=${SPLATS%|}
# wait_for SECONDS COMMAND...: retry COMMAND every 0.2 s until it succeeds.
wait_for() {
	local tries=$(($1 * 5)); shift
	while [ $tries -gt 0 ]; do
		"$@" > /dev/null 2>&1 && return 0
		sleep 0.2; tries=$((tries - 1))
	done
	return 1
}
# finished_within SECONDS COMMAND...: true if COMMAND ended by itself within
# SECONDS, whatever its status (left in finished_rc); false if it had to be
# killed (busybox's timeout then exits 143, SIGTERM's status, not 124 as GNU's
# does).
finished_within() {
	timeout "$@"
	finished_rc=$?
	[ $finished_rc != 143 ]
}
# fails_by_itself SECONDS COMMAND...: true only if COMMAND fails of its own
# within SECONDS: not if it succeeds, not if it hangs.
fails_by_itself() { finished_within "$@" && [ $finished_rc != 0 ]; }
port_active() { rdma link show "$1/1" | grep -q 'state ACTIVE'; }
# add_link TYPE NAME NETDEV: RDMA device NAME of TYPE (rxe, siw) on NETDEV,
# its port active.
add_link() {
	local t0=$(uptime_ms)
	rdma link add "$2" type "$1" netdev "$3" || return 1
	kmsg "rdmatest: rdma link add $2 took $(( $(uptime_ms) - t0 )) ms"
	wait_for 10 port_active "$2"
}
add_rxe() { add_link rxe "$@"; }
# rxe's protocol counters (retransmissions, sequence errors, RNR), one line.
counters() {
	for f in /sys/class/infiniband/"$1"/ports/1/hw_counters/*; do
		v=$(cat "$f"); [ "$v" = 0 ] || printf '%s=%s ' "${f##*/}" "$v"
	done
}
# retries DEV: what DEV's port 1 counted of RC retransmission: its requests'
# ACK timeouts, the QPs that ran out of retries, the peers' requests it saw twice
retries() {
	local c
	for c in completer_retry_err retry_exceeded_err duplicate_request; do
		printf '%s=%s ' $c "$(cat /sys/class/infiniband/"$1"/ports/1/hw_counters/$c)"
	done
}
dmesg_count() { dmesg | grep -c "$1"; }
# (The hundredths lose a leading zero: "08" would be read as a bad octal number.)
uptime_ms() {
	local up cs
	read -r up _ < /proc/uptime
	cs=${up#*.}
	echo $(( ${up%.*} * 1000 + 10 * ${cs#0} ))
}

load_rxe() {
	modprobe rdma_rxe || { say "rdmatest: modprobe rdma_rxe failed"; return 1; }
}

# One guest: rxe0 on veth0 and rxe1 on veth1, the two ends of one veth pair.
# setup_veths: the loopback guest's two netdevs, with IPv4 and IPv6 addresses
# (no duplicate address detection: the addresses are usable at once; kept when
# a test takes the link down and up, as IPv4 addresses are).
setup_veths() {
	ip link set lo up
	for c in all default; do
		echo 0 > /proc/sys/net/ipv6/conf/$c/accept_dad
		echo 1 > /proc/sys/net/ipv6/conf/$c/keep_addr_on_down
	done
	ip link add veth0 type veth peer name veth1
	ip addr add 10.77.0.1/24 dev veth0
	ip addr add 10.77.1.1/24 dev veth1
	ip -6 addr add fd77::1/64 dev veth0 nodad
	ip -6 addr add fd77:1::1/64 dev veth1 nodad
	ip link set veth0 up
	ip link set veth1 up
}

setup_loopback() {
	setup_veths
	load_rxe && add_rxe rxe0 veth0 && add_rxe rxe1 veth1 && setup_siw
}

# Soft-iWARP beside soft-RoCE: siw0 on veth2 and siw1 on veth3, the two ends of
# a second veth pair (one RDMA device per netdev: rdma_cm finds an address's
# device by its netdev, and veth0 and veth1 are rxe's).
load_siw() {
	modprobe siw || { say "rdmatest: modprobe siw failed"; return 1; }
}
setup_siw_veths() {
	ip link add veth2 type veth peer name veth3 &&
		ip addr add 10.77.2.1/24 dev veth2 && ip addr add 10.77.3.1/24 dev veth3 &&
		ip link set veth2 up && ip link set veth3 up
}
setup_siw() {
	load_siw && setup_siw_veths && add_link siw siw0 veth2 && add_link siw siw1 veth3
}

# rping_pair ADDR PORT COUNT SIZE [ARGS...]: rping server and client over
# rdma_cm on ADDR:PORT (ARGS to both, e.g. -V to verify the data); both must
# exit 0. RPING_MS is the client's wall time.
rping_pair() {
	local a=$1 p=$2 n=$3 s=$4 t0
	shift 4
	timeout 300 rping -s -a "$a" -p "$p" -C "$n" -S "$s" "$@" > /tmp/rping-s 2>&1 &
	spid=$!
	wait_for 20 listening "$a" "$p"
	t0=$(uptime_ms)
	timeout 300 rping -c -a "$a" -p "$p" -C "$n" -S "$s" "$@" > /tmp/rping-c 2>&1
	crc=$?
	RPING_MS=$(( $(uptime_ms) - t0 ))
	wait $spid
	src=$?
	cat /tmp/rping-c /tmp/rping-s
	[ $crc = 0 ] && [ $src = 0 ]
}

# setup_suite: the loopback guest's devices, as the suite rdma_setup; kmemleak
# judges leaks from here on (what boot left behind is not ours).
setup_suite() {
	suite_begin rdma_setup
	check modprobe_rdma_rxe load_rxe
	setup_veths
	check rxe0_on_veth0_active add_rxe rxe0 veth0
	check rxe1_on_veth1_active add_rxe rxe1 veth1
	check modprobe_siw load_siw
	check veth2_veth3_up setup_siw_veths
	check siw0_on_veth2_active add_link siw siw0 veth2
	check siw1_on_veth3_active add_link siw siw1 veth3
	suite_end
	echo clear > /sys/kernel/debug/kmemleak 2>/dev/null
}

# kunit_suites: the kernel::rdma KUnit suites (they run when rdma_kunit loads),
# then the module-unload check. Needs rxe0 and rxe1.
kunit_suites() {
	# Let fail_nth (rdma_verbs' constructor-failure case) fail sleeping
	# allocations and single pages too, without a stack dump per failure.
	for f in /sys/kernel/debug/failslab /sys/kernel/debug/fail_page_alloc; do
		[ -d "$f" ] || continue
		echo N > "$f/ignore-gfp-wait"
		echo 0 > "$f/verbose"
	done
	[ -d /sys/kernel/debug/fail_page_alloc ] &&
		echo 0 > /sys/kernel/debug/fail_page_alloc/min-order

	insmod /lib/modules/extra/rdma_kunit.ko || say "rdmatest: insmod rdma_kunit failed"
	rmmod rdma_kunit
	kmsg "rdmatest: after rdma_kunit: rxe0 counters: $(counters rxe0)"

	# A module that leaves an RDMA request behind: its unload waits for it.
	suite_begin rdma_module_unload
	check unload_waits_for_callbacks orphan_unload
	suite_end
}

# --- modes ----------------------------------------------------------------------
mode_test() {
	case "$(arg rdmatest.only)" in
	cm) setup_loopback; ulp_cm; return ;;
	kunit) setup_loopback; kunit_suites; return ;;
	traffic) setup_loopback; ulp_traffic; return ;;
	samples) setup_loopback; samples_suite; return ;;
	nvmet) setup_loopback; nvmet_suite; return ;;
	nvme) setup_loopback; nvme_host_suite; return ;;
	stress) setup_loopback; stress_suite 2 100 10000 10000; return ;;
	esac
	setup_suite

	kunit_suites

	# The ULP: attaches to each device, follows link delete/add, detaches on rmmod.
	suite_begin rdma_rust_ulp
	check insmod insmod /lib/modules/extra/rdma_rust_ulp.ko
	check attached_rxe0 dmesg_has "rdma_rust_ulp: rxe0: attached"
	check attached_rxe1 dmesg_has "rdma_rust_ulp: rxe1: attached"
	check port_logged_active dmesg_has "rdma_rust_ulp: rxe0: port 1 ACTIVE link_layer Ethernet"
	check link_delete_returns timeout 30 rdma link delete rxe0
	check link_delete_frees_state dmesg_has "rdma_rust_ulp: rxe0: detached (0 runs stopped), device state freed"
	check link_add_attaches_again sh -c \
		'rdma link add rxe0 type rxe netdev veth0 && [ "$(dmesg | grep -c "rdma_rust_ulp: rxe0: attached")" = 2 ]'
	check rmmod timeout 30 rmmod rdma_rust_ulp
	check rmmod_frees_all sh -c \
		'[ "$(dmesg | grep -c "rdma_rust_ulp: rxe[01]: detached (0 runs stopped), device state freed")" = 3 ]'
	suite_end

	ulp_traffic
	ulp_cm

	samples_suite
	nvmet_suite
	# The NVMe-oF host, against the same targets (guest-nvme.sh).
	nvme_host_suite

	# rdma_cm + RC traffic on one rxe device, from user space (the peer the ULP
	# will later talk to): checks the image and the device, and gives a baseline.
	suite_begin rdma_loopback
	check rping_64B_x50 rping_pair 10.77.0.1 7174 50 64 -V
	check rping_4KiB_x50 rping_pair 10.77.0.1 7175 50 4096 -V
	suite_end

	# The fault suite, two cycles of each fault (the second finds what the
	# first left behind; `make stress` runs it in full): on the debug kernel a
	# cycle takes 10-60 s, on a slow host up to 60 s more.
	stress_suite 2 100 10000 10000

	leak_suite
}

# kmemleak_clean: kmemleak finds nothing left behind since it was last cleared.
# It reports only objects older than 5 s (and scans only when asked: no
# automatic scan in rdma.config), so what the last cases freed or leaked ages
# first; a scan it refuses (it disabled itself) fails. The file's size is
# always 0 (debugfs): its content is what counts.
kmemleak_clean() {
	local f=/sys/kernel/debug/kmemleak leaks
	[ -e $f ] || { echo "no $f (CONFIG_DEBUG_KMEMLEAK off?)"; return 1; }
	sleep 6
	echo scan > $f || { echo "kmemleak refused to scan:"; dmesg | grep -i kmemleak | tail -n 5; return 1; }
	sleep 1
	echo scan > $f || { echo "kmemleak refused to scan"; return 1; }
	leaks=$(cat $f)
	[ -z "$leaks" ] || { echo "$leaks"; return 1; }
}
# leak_suite: the same, as the suite rdma_leaks.
leak_suite() {
	suite_begin rdma_leaks
	check kmemleak_clean kmemleak_clean
	suite_end
}
dmesg_has() { dmesg | grep -q "$1"; }
# mark: a unique line in the kernel log; since_mark: the log after the last mark.
# (Counting lines before and after would break when old lines leave the ring.)
mark() { marks=$(( ${marks:-0} + 1 )); kmsg "rdmatest: mark $marks"; }
since_mark() { dmesg | sed -n "/rdmatest: mark $marks\$/,\$p"; }
since_mark_has() { since_mark | grep -q "$1"; }

# sample NAME CASE PATTERN [CASE PATTERN]...: loads samples/rdma_rust's
# rdma_rust_NAME.ko, expects each PATTERN in the log it writes (a CASE ending in
# @D, and its PATTERN, once for each of rxe0 and rxe1, @D standing for the
# device), unloads it, and expects the RDMA objects to be as in $sample_base.
sample() {
	local sp_name=$1 sp_case sp_pat sp_dev
	shift
	mark
	check "${sp_name}_insmod" insmod /lib/modules/extra/rdma_rust_$sp_name.ko
	while [ $# -ge 2 ]; do
		sp_case=$1 sp_pat=$2
		shift 2
		case $sp_case in
		*@D) for sp_dev in rxe0 rxe1; do
			check "${sp_name}_$(echo "$sp_case" | sed "s/@D/_$sp_dev/")" \
				since_mark_has "rdma_rust_$sp_name: $(echo "$sp_pat" | sed "s/@D/$sp_dev/")"
		done ;;
		*) check "${sp_name}_$sp_case" since_mark_has "rdma_rust_$sp_name: $sp_pat" ;;
		esac
	done
	check "${sp_name}_rmmod" timeout 30 rmmod rdma_rust_$sp_name
	check "${sp_name}_frees_all" wait_for 10 resources_same_as "$sample_base"
}

removed_twice() { [ "$(since_mark | grep -c 'rdma_rust_devices: rxe[01]: removed')" = 2 ]; }

# samples/: each module loaded with its output checked. The device lister also
# sees port events: the veth pair under rxe0 and rxe1 goes down and up.
samples_suite() {
	suite_begin rdma_samples
	rdma_resources > /tmp/res-samples
	sample_base=/tmp/res-samples
	# On siw0 each of these says why it does not run there: a QP made by hand.
	local iw="siw0: iWARP refuses a QP made by hand (EOPNOTSUPP): rdma_cm connects them"
	sample loopback rc_message@D "@D: RC loopback: 23 bytes sent, received and checked" iwarp_refused "$iw"
	sample ud_pingpong rounds@D "@D: UD ping-pong: 16 of 16 rounds of 64 bytes" iwarp_refused "$iw"
	sample fastreg write_read_invalidate@D \
		"@D: fast-registered MR: 4096 bytes written and read back, rkey refused after invalidation" \
		iwarp_refused "$iw"
	sample rw write_send_with_inv@D \
		"@D: rdma_rw: 16384 bytes written, answered with SEND_WITH_INV, rkey revoked" \
		iwarp_refused "$iw"
	# rdma_cm: the echo server stays loaded while the client comes and goes.
	rdma_resources > /tmp/res-samples-cm
	mark
	check cm_server_insmod insmod /lib/modules/extra/rdma_rust_cm_server.ko
	check cm_server_listening since_mark_has "rdma_rust_cm_server: listening on port 7471"
	rdma_resources > /tmp/res-samples-listening
	sample_base=/tmp/res-samples-listening
	# The client tries each device's address: rxe0, rxe1, siw0 and siw1 (on
	# iWARP the server's receives are posted before it accepts).
	local ok="RC echo over rdma_cm: 8 of 8 messages of 64 bytes" n d
	sample cm_client echoed_rxe0 "10\.77\.0\.1:7471: $ok" echoed_rxe1 "10\.77\.1\.1:7471: $ok" \
		echoed_siw0 "10\.77\.2\.1:7471: $ok" echoed_siw1 "10\.77\.3\.1:7471: $ok"
	sample_base=/tmp/res-samples
	for n in 0 1 2 3; do
		d=$( [ $n -lt 2 ] && echo rxe$n || echo siw$((n - 2)) )
		check "cm_server_accepted_$d" since_mark_has "rdma_rust_cm_server: 10\.77\.$n\.1:[0-9]*: connection accepted"
		check "cm_server_closed_$d" wait_for 10 since_mark_has "rdma_rust_cm_server: 10\.77\.$n\.1:[0-9]*: connection closed"
	done
	check cm_server_rmmod timeout 30 rmmod rdma_rust_cm_server
	check cm_server_frees_all wait_for 10 resources_same_as /tmp/res-samples-cm

	mark
	check devices_insmod insmod /lib/modules/extra/rdma_rust_devices.ko
	for d in rxe0 rxe1; do
		check "devices_${d}_limits" since_mark_has "rdma_rust_devices: $d: limits: [0-9]* QPs of [0-9]* requests"
		check "devices_${d}_port" since_mark_has "rdma_rust_devices: $d: port 1: Active, MTU [0-9]* (max 4096), link layer Ethernet, netdev veth"
		check "devices_${d}_ipv4_gid" since_mark_has "rdma_rust_devices: $d: port 1: GID [0-9]: 0000:0000:0000:0000:0000:ffff:0a4d:0[01]01 (RoCE v2)"
		check "devices_${d}_watching" since_mark_has "rdma_rust_devices: $d: watching port events"
	done
	check devices_link_down ip link set veth0 down
	check devices_event_down wait_for 20 since_mark_has "rdma_rust_devices: rxe0: port 1: event: DOWN"
	check devices_link_up ip link set veth0 up
	check devices_event_active wait_for 20 since_mark_has "rdma_rust_devices: rxe0: port 1: event: ACTIVE"
	check devices_ports_active_again wait_for 20 sh -c 'rdma link show rxe0/1 | grep -q "state ACTIVE" && rdma link show rxe1/1 | grep -q "state ACTIVE"'
	check devices_rmmod timeout 30 rmmod rdma_rust_devices
	check devices_removed removed_twice
	check devices_frees_all wait_for 10 resources_same_as /tmp/res-samples
	suite_end
}

# orphan_unload: rdma_kunit_orphan leaves a SEND behind that fails after a few
# seconds, in a handler of the module's own; `rmmod` right away must wait for
# it (kernel::rdma keeps the module until no callback of its can run), then
# every RDMA object is gone.
orphan_unload() {
	local t0 took
	rdma_resources > /tmp/res-orphan
	mark
	insmod /lib/modules/extra/rdma_kunit_orphan.ko || { echo "insmod failed"; return 1; }
	t0=$(uptime_ms)
	timeout 120 rmmod rdma_kunit_orphan || { since_mark; echo "rmmod failed"; return 1; }
	took=$(( $(uptime_ms) - t0 ))
	echo "rmmod took $took ms"
	since_mark | grep 'rdma_kunit_orphan\|kernel::rdma'
	since_mark | awk '/rdma_kunit_orphan: the orphaned SEND came back/ { back = NR }
		/kernel::rdma: module rdma_kunit_orphan is unloading with/ { waiting = NR }
		/kernel::rdma: module rdma_kunit_orphan: its last RDMA object is gone/ { gone = NR }
		END { exit !(waiting && back && gone && waiting < back && back < gone) }' ||
		{ echo "the unload did not wait for the handler"; return 1; }
	[ "$took" -ge 1000 ] || { echo "rmmod returned after $took ms"; return 1; }
	wait_for 10 resources_same_as /tmp/res-orphan ||
		{ rdma resource show; echo "RDMA objects left behind"; return 1; }
}

# to_console: kernel log lines from stdin on the console, indented, without
# their timestamps; show_log PATTERN: the kernel log's lines matching PATTERN
to_console() { sed 's/^\[[ 0-9.]*\] /  /' > /dev/console; }
show_log() { dmesg | grep "$1" | to_console; }

mode_run() {
	local c ok total msgs bytes errs cm_line samples_ok n splats nvme_line r nqn d
	say ""
	say "=== rdma-rust demo: soft-RoCE devices rxe0 (veth0) and rxe1 (veth1) ==="
	setup_loopback || { say "rxe setup failed"; return; }
	rdma link show > /dev/console
	say ""
	say "=== insmod rdma_rust_ulp.ko ==="
	insmod /lib/modules/extra/rdma_rust_ulp.ko
	show_log 'rdma_rust_ulp:'
	say ""
	say "=== RC and UD runs, driven from softirq completion handlers ==="
	total=0
	for c in "mode=rc op=send size=4096 count=1000 depth=16 dev=rxe0" \
		"mode=rc op=send_imm size=64 count=1000 depth=16 dev=rxe0" \
		"mode=rc op=write size=16384 count=300 depth=8 dev=rxe0" \
		"mode=rc op=read size=16384 count=300 depth=8 dev=rxe1" \
		"mode=ud op=send size=1024 count=1000 depth=16 dev=rxe1" \
		"mode=rc op=send size=4096 count=1000 depth=16 dev=rxe0 poll=workqueue" \
		"mode=rc op=send size=4096 count=1000 depth=16 dev=rxe0 poll=direct"; do
		total=$((total + 1))
		say "  echo '$c wait=1' > $ULP/ctl"
		ulp_ctl start $c wait=1 || say "  failed: $(dmesg | tail -n 1)"
	done
	say ""
	say "$ULP/stats (latencies are round trips of the request, in microseconds):"
	cat $ULP/stats > /dev/console
	set -- $(awk 'NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next }
		$1 ~ /^[0-9]+$/ { m += $(h["messages"]); b += $(h["bytes"]); e += $(h["errors"]) + $(h["corrupt"])
			if ($(h["state"]) == "done" && $(h["messages"]) == $(h["count"]) &&
				$(h["errors"]) == 0 && $(h["corrupt"]) == 0) n++ }
		END { print n + 0, m + 0, b + 0, e + 0 }' $ULP/stats)
	ok=$1 msgs=$2 bytes=$3 errs=$4
	say ""
	say "=== rdma_cm: the ULP's client against user-space rping -s -V ==="
	say "  rping -s -a 10.77.0.1 -p 7400 -V &"
	say "  echo 'start cm=client addr=10.77.0.1 port=7400 size=64 count=100 wait=1' > $ULP/ctl"
	if ulp_cm_ping_rping 10.77.0.1 7400 100 64 > /tmp/cm-run 2>&1; then
		cm_line="100 of 100 rping round trips of 64 B, validated by rping (exit 0)"
	else
		sed 's/^/  /' /tmp/cm-run > /dev/console
		cm_line="FAILED (see above)"
	fi
	ulp_row "$(ulp_last_id)" | sed 's/^/  /' > /dev/console
	say ""
	say "=== rdma link delete rxe1 ==="
	rdma link delete rxe1
	dmesg | grep 'rdma_rust_ulp:' | tail -n 1 | to_console
	say ""
	say "=== rmmod rdma_rust_ulp ==="
	rmmod rdma_rust_ulp
	dmesg | grep 'rdma_rust_ulp:' | tail -n 1 | to_console
	add_rxe rxe1 veth1 > /dev/null 2>&1
	say ""
	say "=== samples/rdma_rust: insmod, what each logged, rmmod ==="
	# (The kernel's own lines stay in dmesg, off the console: rxe reports the
	# WRITE that rdma_rust_fastreg makes fail on purpose.)
	echo 1 > /proc/sys/kernel/printk
	samples_ok=0 n=0
	insmod /lib/modules/extra/rdma_rust_cm_server.ko
	for c in loopback ud_pingpong fastreg rw cm_client devices; do
		n=$((n + 1))
		mark
		if insmod /lib/modules/extra/rdma_rust_$c.ko; then
			since_mark | grep "rdma_rust_$c:" | grep -v 'taints kernel' | to_console
			since_mark | grep "rdma_rust_$c:" | grep -q 'failed\|differs\|nothing to' ||
				samples_ok=$((samples_ok + 1))
			rmmod rdma_rust_$c
		else
			say "  insmod rdma_rust_$c.ko failed"
		fi
	done
	rmmod rdma_rust_cm_server
	show_log 'rdma_rust_cm_server:'
	say ""
	say "=== NVMe over Fabrics: rdma_rust_nvmet (configured in configfs) serving rdma_rust_nvme on rxe0 ==="
	nvme_line="FAILED (see above)"
	mark
	r=$CFS/rdma_rust_nvmet nqn=nqn.2026-11.org.rdma-rust:demo
	say "  insmod rdma_rust_nvmet.ko; cd $r"
	say "  mkdir subsystems/$nqn; echo 1 > subsystems/$nqn/attr_allow_any_host"
	say "  mkdir subsystems/$nqn/namespaces/1; echo 67108864 > subsystems/$nqn/namespaces/1/size"
	say "  echo 1 > subsystems/$nqn/namespaces/1/enable"
	say "  mkdir ports/1; echo rdma > ports/1/addr_trtype; echo ipv4 > ports/1/addr_adrfam"
	say "  echo 10.77.0.1 > ports/1/addr_traddr; echo 4420 > ports/1/addr_trsvcid"
	say "  ln -s $r/subsystems/$nqn ports/1/subsystems/$nqn"
	say "  insmod rdma_rust_nvme.ko"
	say "  echo transport=rdma,traddr=10.77.0.1,trsvcid=4420,nqn=$nqn,nr_io_queues=2,queue_size=32 > $HST_CTL"
	if tgt_load "$r" $((64 * 1048576)) && tgt_setup "$r" $nqn 1 10.77.0.1 4420 $((64 * 1048576)) &&
		hst_insmod > /dev/null &&
		hst_connect "transport=rdma,traddr=10.77.0.1,trsvcid=4420,nqn=$nqn,nr_io_queues=2,queue_size=32" > /dev/null &&
		wait_for 10 test -b /dev/rnvme${hst_inst}n1; then
		d=/dev/rnvme${hst_inst}n1
		dd if=/dev/urandom of=/tmp/demo bs=1M count=8 2> /dev/null
		if dd if=/tmp/demo of=$d bs=128k oflag=direct 2> /dev/null &&
			[ "$(dd if=$d bs=128k count=64 iflag=direct 2> /dev/null | md5sum)" = "$(md5sum < /tmp/demo)" ] &&
			mke2fs -q -F $d > /dev/null 2>&1 && e2fsck -f -n $d > /tmp/fsck 2>&1; then
			nvme_line="8 MiB written to $d and read back intact with direct I/O; ext2 made, e2fsck clean"
		fi
		say "  cat /sys/block/${d#/dev/}/wwid: $(cat /sys/block/${d#/dev/}/wwid)"
		say "  $HST_STATUS:"
		sed 's/^/    /' $HST_STATUS > /dev/console
		say "  echo disconnect=$hst_inst > $HST_CTL"
		hst_disconnect "$hst_inst" > /dev/null
	fi
	hst_loaded && rmmod rdma_rust_nvme
	tgt_teardown "$r" > /dev/null 2>&1
	tgt_unload "$r" > /dev/null 2>&1
	since_mark | grep 'rdma_rust_nvmet\?:' | to_console
	say ""
	say "=== summary ==="
	say "  ULP runs:     $ok of $total complete, $msgs messages, $bytes bytes, $errs errors or corrupt messages"
	say "  rdma_cm:      $cm_line"
	say "  samples:      $samples_ok of $n ran and logged success (cm_client against cm_server)"
	say "  NVMe-oF:      $nvme_line"
	splats=$(dmesg | grep -c -E "$SPLATS|KASAN")
	say "  kernel log:   $splats warnings or errors"
	say ""
	# For run.sh, which hides this line.
	if [ "$ok" = "$total" ] && [ "$errs" = 0 ] && [ "$cm_line" != "FAILED (see above)" ] &&
		[ "$samples_ok" = "$n" ] && [ "$nvme_line" != "FAILED (see above)" ] && [ "$splats" = 0 ]; then
		say "rdmatest: demo: ok"
	else
		say "rdmatest: demo: failed"
	fi
}

# The ULP's checks (one guest) and the two-guest checks, sourced here.
. /lib/rdmatest/ulp.sh
. /lib/rdmatest/peers.sh
. /lib/rdmatest/bench.sh
. /lib/rdmatest/nvmet-hostile.sh
. /lib/rdmatest/bench-blk.sh
. /lib/rdmatest/stress.sh
. /lib/rdmatest/nvmet.sh
. /lib/rdmatest/nvmet-paths.sh
. /lib/rdmatest/nvmet-cfs.sh
. /lib/rdmatest/nvmet-peers.sh
. /lib/rdmatest/nvme.sh
. /lib/rdmatest/nvme-bad.sh

case "$mode" in
test) mode_test ;;
run) mode_run ;;
peer-a) mode_peer_a ;;
peer-b) mode_peer_b ;;
bench) mode_bench ;;
bench-a) mode_bench_cross a ;;
bench-b) mode_bench_cross b ;;
stress) mode_stress ;;
kill-survivor) mode_kill_survivor ;;
kill-victim) mode_kill_victim ;;
*) say "rdmatest: unknown mode '$mode'"; sh ;;
esac
