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
	local tries=$(($1 * 5)); shift
	while [ $tries -gt 0 ]; do
		"$@" > /dev/null 2>&1 && return 0
		sleep 0.2; tries=$((tries - 1))
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
	if [ "$(arg rdmatest.only)" = cm ]; then
		setup_loopback; ulp_cm; return
	fi
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
	check link_delete_frees_state dmesg_has "rdma_rust_ulp: rxe0: detached (0 runs stopped), device state freed"
	check link_add_attaches_again sh -c \
		'rdma link add rxe0 type rxe netdev veth0 && [ "$(dmesg | grep -c "rdma_rust_ulp: rxe0: attached")" = 2 ]'
	check rmmod timeout 30 rmmod rdma_rust_ulp
	check rmmod_frees_all sh -c \
		'[ "$(dmesg | grep -c "rdma_rust_ulp: rxe[01]: detached (0 runs stopped), device state freed")" = 3 ]'
	suite_end

	ulp_traffic
	ulp_cm

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
# mark: a unique line in the kernel log; since_mark: the log after the last mark.
# (Counting lines before and after would break when old lines leave the ring.)
mark() { marks=$(( ${marks:-0} + 1 )); kmsg "rdmatest: mark $marks"; }
since_mark() { dmesg | sed -n "/rdmatest: mark $marks\$/,\$p"; }
since_mark_has() { since_mark | grep -q "$1"; }

# --- rdma_rust_ulp's control interface ----------------------------------------
ULP=/sys/kernel/debug/rdma_rust_ulp
ulp_ctl() { echo "$*" > $ULP/ctl; }
# ulp_stat ID COLUMN: one cell of the stats table (columns by header name)
ulp_stat() {
	awk -v id="$1" -v col="$2" \
		'NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next } $1 == id { print $(h[col]) }' \
		$ULP/stats
}
ulp_last_id() { awk 'NR > 1 && $1 ~ /^[0-9]+$/ && $1 + 0 > m { m = $1 + 0 } END { print m + 0 }' $ULP/stats; }
# ulp_endpoint ID: this host's QP of a server or client run, as peer= takes it
ulp_endpoint() { awk -v id="$1" '$1 == "endpoint" && $2 == id { print $5 }' $ULP/stats; }
ulp_row() { awk -v id="$1" 'NR == 1 || $1 == id' $ULP/stats; }
# ulp_clean ID COUNT RECV: run ID is done and moved COUNT messages with no error,
# loss, duplicate or corruption (and received them all if RECV is 1)
ulp_clean() {
	ulp_row "$1"
	[ "$(ulp_stat "$1" state)" = done ] || { echo "run $1 not done"; return 1; }
	[ "$(ulp_stat "$1" messages)" = "$2" ] || { echo "run $1: messages != $2"; return 1; }
	local col
	for col in errors lost dup corrupt; do
		[ "$(ulp_stat "$1" $col)" = 0 ] || { echo "run $1: $col != 0"; return 1; }
	done
	[ "$3" = 0 ] || [ "$(ulp_stat "$1" received)" = "$2" ] ||
		{ echo "run $1: received != $2"; return 1; }
}
# ulp_run COUNT RECV KEY=VALUE...: a run to its end (wait=1), then ulp_clean
ulp_run() {
	n=$1; r=$2; shift 2
	ulp_ctl start "$@" count="$n" wait=1 || { echo "start $* failed"; return 1; }
	ulp_clean "$(ulp_last_id)" "$n" "$r"
}

# bad_ctl: every malformed or out-of-range control string is refused with an
# error (EINVAL, or ENODEV for a missing device), logs why, and starts nothing.
bad_ctl() {
	rows=$(wc -l < $ULP/stats)
	bad=0
	for c in "bogus" "start" "start dev=nosuch" "start dev=rxe0 mode=xx" \
		"start dev=rxe0 size=0" "start dev=rxe0 size=abc" "start dev=rxe0 size=8m" \
		"start dev=rxe0 depth=0" "start dev=rxe0 depth=5000" "start dev=rxe0 count=0" \
		"start dev=rxe0 count=99999999999" "start dev=rxe0 validate=2" \
		"start dev=rxe0 frob=1" "start dev=rxe0 size" "start dev=rxe0 poll=irq" \
		"start dev=rxe0 mode=ud size=4096" "start dev=rxe0 mode=ud op=write" \
		"start dev=rxe0 op=write size=65536 depth=64" "start dev=rxe0 size=4 validate=1" \
		"stop" "stop id=999" "stop id=x" "wait id=999 extra" "clear now"; do
		mark
		if ulp_ctl "$c" 2> /tmp/err; then
			echo "accepted: '$c'"; bad=1
		elif ! since_mark | grep -q 'rdma_rust_ulp: '; then
			echo "refused without a message: '$c'"; bad=1
		fi
	done
	[ "$(wc -l < $ULP/stats)" = "$rows" ] || { echo "a refused command started a run"; bad=1; }
	return $bad
}

# The RDMA objects of each device (a re-added device gets a new index).
rdma_resources() { rdma resource show | sed 's/^[0-9]*: //' | sort; }
resources_same() { rdma_resources | cmp -s - /tmp/res-before; }
# (User-space peers such as rping give their objects back as their files close:
# allow a few seconds.)
resources_as_before() {
	wait_for 10 resources_same && return 0
	rdma_resources > /tmp/res-after
	diff /tmp/res-before /tmp/res-after
	rdma resource show cm_id; rdma resource show pd; rdma resource show cq
	return 1
}

# ulp_device_totals: each device's line sums the messages and errors of its rows.
ulp_device_totals() {
	awk 'NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next }
		$1 ~ /^[0-9]+$/ { m[$2] += $(h["messages"]); e[$2] += $(h["errors"]); n[$2]++ }
		$1 == "device" { seen[$2] = 1
			if ($0 !~ " runs=" n[$2] + 0 " " || $0 !~ " messages=" m[$2] + 0 " " || $0 !~ " errors=" e[$2] + 0 " ") {
				print "mismatch: " $0; bad = 1 } }
		END { for (d in n) if (!seen[d]) { print "no device line for " d; bad = 1 }; exit bad }' $ULP/stats
}

# ulp_stop_mid_run: a long run is stopped part-way and gives everything back.
ulp_stop_mid_run() {
	ulp_ctl start mode=rc op=send size=1024 count=1000000000 dev=rxe0 || return 1
	id=$(ulp_last_id)
	sleep 2
	[ "$(ulp_stat "$id" state)" = running ] || { ulp_row "$id"; echo "not running"; return 1; }
	ulp_ctl stop id="$id" || return 1
	ulp_row "$id"
	[ "$(ulp_stat "$id" state)" = done ] && [ "$(ulp_stat "$id" messages)" -gt 0 ] &&
		[ "$(ulp_stat "$id" errors)" = 0 ] && [ "$(ulp_stat "$id" corrupt)" = 0 ]
}

# ulp_concurrent: three runs at once on two devices, waited for together.
ulp_concurrent() {
	local rc_send rc_write ud_send id running=0
	ulp_ctl start mode=rc op=send size=4096 count=300 dev=rxe0 || return 1
	rc_send=$(ulp_last_id)
	ulp_ctl start mode=rc op=write size=4096 count=300 dev=rxe1 || return 1
	rc_write=$(ulp_last_id)
	ulp_ctl start mode=ud op=send size=512 count=300 dev=rxe0 || return 1
	ud_send=$(ulp_last_id)
	for id in $rc_send $rc_write $ud_send; do
		[ "$(ulp_stat "$id" state)" = done ] || running=$((running + 1))
	done
	[ $running -ge 2 ] || { echo "only $running runs in flight together"; return 1; }
	ulp_ctl wait all || return 1
	ulp_clean "$rc_send" 300 1 && ulp_clean "$rc_write" 300 0 && ulp_ud_ok "$ud_send" 300
}

# ulp_ud_ok ID COUNT: a UD run: every datagram sent, none corrupt or
# duplicated, and every one either received or counted as lost.
ulp_ud_ok() {
	ulp_row "$1"
	[ "$(ulp_stat "$1" state)" = done ] && [ "$(ulp_stat "$1" messages)" = "$2" ] &&
		[ "$(ulp_stat "$1" errors)" = 0 ] && [ "$(ulp_stat "$1" corrupt)" = 0 ] &&
		[ "$(ulp_stat "$1" dup)" = 0 ] &&
		[ $(( $(ulp_stat "$1" received) + $(ulp_stat "$1" lost) )) = "$2" ]
}

# ulp_ud_run COUNT KEY=VALUE...: a UD run to its end, then ulp_ud_ok
ulp_ud_run() {
	n=$1; shift
	ulp_ctl start "$@" count="$n" wait=1 || { echo "start $* failed"; return 1; }
	ulp_ud_ok "$(ulp_last_id)" "$n"
}
# ulp_has ID COLUMN VALUE
ulp_has() { ulp_row "$1"; [ "$(ulp_stat "$1" "$2")" = "$3" ]; }
# ulp_above ID COLUMN N: the cell is a number above N
ulp_above() { [ "$(ulp_stat "$1" "$2")" -gt "$3" ] 2> /dev/null; }

# ulp_link_delete_mid_run: deleting a device under a run stops and frees the
# run from remove(), promptly; the device comes back and runs again.
ulp_link_delete_mid_run() {
	rdma resource show
	ulp_ctl start mode=rc op=send size=1024 count=1000000000 dev=rxe1 || return 1
	id=$(ulp_last_id)
	sleep 1
	t0=$(uptime_ms)
	mark
	timeout 30 rdma link delete rxe1 || { echo "rdma link delete failed"; return 1; }
	echo "rdma link delete took $(( $(uptime_ms) - t0 )) ms"
	since_mark | grep -q "rdma_rust_ulp: rxe1: detached (1 runs stopped)" ||
		{ echo "no detach message"; return 1; }
	[ -z "$(ulp_stat "$id" state)" ] || { echo "run $id still listed"; return 1; }
	add_rxe rxe1 veth1 || { echo "rxe1 did not come back"; return 1; }
	ulp_run 100 1 mode=rc op=send size=4096 dev=rxe1
}

# ulp_rmmod_mid_run: unloading the module under runs on both devices.
ulp_rmmod_mid_run() {
	ulp_ctl start mode=rc op=write size=4096 count=1000000000 dev=rxe0 || return 1
	ulp_ctl start mode=ud op=send size=1024 count=1000000000 dev=rxe1 || return 1
	sleep 1
	mark
	timeout 30 rmmod rdma_rust_ulp || { echo "rmmod failed"; return 1; }
	n=$(since_mark | grep -c 'rdma_rust_ulp: rxe[01]: detached (1 runs stopped)')
	[ "$n" = 2 ] || { since_mark; echo "$n devices reported a stopped run"; return 1; }
}

# The ULP's traffic: each op over RC, UD, each poll context, concurrency, bad
# input, stop, device removal and rmmod under load.
ulp_traffic() {
	suite_begin rdma_ulp_traffic
	m=/lib/modules/extra/rdma_rust_ulp.ko
	rdma_resources > /tmp/res-before
	check param_depth_0_refused sh -c "! insmod $m default_depth=0 && dmesg | grep -q 'default_depth=0: must be 1..=1024'"
	check param_poll_refused sh -c "! insmod $m default_poll=irq && dmesg | grep -q 'default_poll=irq: must be'"
	check param_max_runs_refused sh -c "! insmod $m max_runs=0 && dmesg | grep -q 'max_runs=0: must be'"
	check insmod_with_params insmod $m default_depth=8 default_poll=softirq max_runs=8
	check params_applied dmesg_has "rdma_rust_ulp: loaded (default_depth=8 default_poll=softirq max_runs=8)"
	check rc_send_4KiB ulp_run 300 1 mode=rc op=send size=4096 dev=rxe0
	check rc_send_imm_64B ulp_run 500 1 mode=rc op=send_imm size=64 dev=rxe0
	check rc_write_16KiB ulp_run 100 0 mode=rc op=write size=16384 depth=8 dev=rxe0
	check rc_read_16KiB ulp_run 100 0 mode=rc op=read size=16384 depth=8 dev=rxe0
	check rc_send_4KiB_workqueue ulp_run 300 1 mode=rc op=send size=4096 poll=workqueue dev=rxe0
	check rc_send_4KiB_direct ulp_run 300 1 mode=rc op=send size=4096 poll=direct dev=rxe0
	check rc_write_workqueue ulp_run 100 0 mode=rc op=write size=4096 poll=workqueue dev=rxe1
	check rc_read_direct ulp_run 100 0 mode=rc op=read size=4096 poll=direct dev=rxe1
	check ud_send_1KiB ulp_ud_run 300 mode=ud op=send size=1024 dev=rxe0
	check ud_send_direct ulp_ud_run 300 mode=ud op=send size=256 poll=direct dev=rxe1
	check ud_send_imm_512B ulp_ud_run 300 mode=ud op=send_imm size=512 poll=workqueue dev=rxe0
	check default_depth_used ulp_has 1 depth 8
	check device_totals ulp_device_totals
	check concurrent_runs ulp_concurrent
	check bad_input_refused bad_ctl
	check stop_mid_run ulp_stop_mid_run
	check link_delete_mid_run ulp_link_delete_mid_run
	check rmmod_mid_run ulp_rmmod_mid_run
	check resources_released resources_as_before
	suite_end
}

# --- rdma_rust_ulp over rdma_cm -----------------------------------------------
# listening ADDR PORT: some rdma_cm id listens on ADDR:PORT
listening() { rdma resource show cm_id | grep LISTEN | grep -q "src-addr $1:$2 "; }
# rping_log FILE WHAT: rping's output for the log (first and last lines)
rping_log() {
	head -n 2 "$1" | while IFS= read -r l; do kmsg "rdmatest: $2: $l"; done
	tail -n 2 "$1" | while IFS= read -r l; do kmsg "rdmatest: $2: $l"; done
}
# ulp_cm_start KEY=VALUE...: start a CM client, retrying while the server is not
# listening yet (refused) for up to 120 s
ulp_cm_start() {
	local i
	for i in $(seq 1 120); do
		mark
		ulp_ctl start "$@" && return 0
		since_mark | grep -q 'rejected the connection (reason 8)\|unreachable' || return 1
		sleep 1
	done
	return 1
}
# ulp_cm_serve_rping ADDR PORT COUNT SIZE...: the ULP listens on ADDR:PORT, and
# `rping -c -v -V` pings it COUNT times with each SIZE in turn: rping exits 0 and
# prints every ping; the server run counts every round trip, all intact.
ulp_cm_serve_rping() {
	local a=$1 port=$2 n=$3 id rc size total=0
	shift 3
	for size in "$@"; do total=$((total + n)); done
	ulp_ctl start cm=server addr="$a" port="$port" count="$total" || return 1
	id=$(ulp_last_id)
	for size in "$@"; do
		timeout 300 rping -c -a "$a" -p "$port" -C "$n" -S "$size" -v -V > /tmp/rping-ulp 2> /tmp/rping-ulp.err
		rc=$?
		cat /tmp/rping-ulp.err >> /tmp/rping-ulp
		rping_log /tmp/rping-ulp "rping -c -a $a -p $port -C $n -S $size -v -V (exit $rc)"
		[ $rc = 0 ] || { tail -n 5 /tmp/rping-ulp; ulp_ctl stop id="$id"; return 1; }
		# -v prints each ping's data as it came back.
		[ "$(grep -c 'ping data: rdma-ping-' /tmp/rping-ulp)" = "$n" ] &&
			grep -q "ping data: rdma-ping-$((n - 1)): " /tmp/rping-ulp ||
			{ grep -v 'ping data: rdma-ping-' /tmp/rping-ulp | head; echo "rping printed $(grep -c 'ping data: rdma-ping-' /tmp/rping-ulp) of $n pings"; ulp_ctl stop id="$id"; return 1; }
	done
	ulp_ctl wait id="$id" || return 1
	ulp_clean "$id" "$total" 1
}
# rping_to ADDR PORT COUNT SIZE: `rping -c -v -V` to a server on another host,
# retried while it is not listening yet; rping exits 0 and prints every ping.
rping_to() {
	local i rc
	for i in $(seq 1 60); do
		timeout 300 rping -c -a "$1" -p "$2" -C "$3" -S "$4" -v -V > /tmp/rping-to 2> /tmp/rping-to.err
		rc=$?
		[ $rc = 0 ] && break
		grep -q -i 'reject\|refused\|unreachable\|connect error' /tmp/rping-to.err || break
		sleep 1
	done
	cat /tmp/rping-to.err >> /tmp/rping-to
	rping_log /tmp/rping-to "rping -c -a $1 -p $2 -C $3 -S $4 -v -V (exit $rc)"
	[ $rc = 0 ] || { tail -n 5 /tmp/rping-to; return 1; }
	[ "$(grep -c 'ping data: rdma-ping-' /tmp/rping-to)" = "$3" ] &&
		grep -q "ping data: rdma-ping-$(($3 - 1)): " /tmp/rping-to
}
# ulp_cm_ping_rping ADDR PORT COUNT SIZE: `rping -s -V` listens; the ULP's
# client pings it COUNT times, validating each round trip; rping exits 0.
ulp_cm_ping_rping() {
	local a=$1 port=$2 n=$3 size=$4 id pid rc src
	rping -s -a "$a" -p "$port" -V > /tmp/rping-srv 2>&1 &
	pid=$!
	wait_for 20 listening "$a" "$port" || { kill $pid; echo "rping -s is not listening"; return 1; }
	ulp_ctl start cm=client addr="$a" port="$port" size="$size" count="$n" wait=1
	rc=$?
	id=$(ulp_last_id)
	wait_for 30 sh -c "! kill -0 $pid 2> /dev/null" || kill $pid
	wait $pid
	src=$?
	rping_log /tmp/rping-srv "rping -s -a $a -p $port -V (exit $src)"
	[ $rc = 0 ] || { echo "the ULP client failed"; return 1; }
	ulp_clean "$id" "$n" 0 && [ $src = 0 ]
}
# ulp_cm_pair ADDR PORT MODE COUNT SIZE: a ULP server and a ULP client
ulp_cm_pair() {
	local a=$1 port=$2 mode=$3 n=$4 size=$5 sid cid
	ulp_ctl start cm=server mode="$mode" addr="$a" port="$port" count="$n" size="$size" || return 1
	sid=$(ulp_last_id)
	ulp_ctl start cm=client mode="$mode" addr="$a" port="$port" count="$n" size="$size" wait=1 ||
		{ ulp_ctl stop id="$sid"; return 1; }
	cid=$(ulp_last_id)
	if [ "$mode" = ud ]; then
		# UD may drop datagrams: what did not arrive is counted, not hidden.
		wait_for 10 ulp_has "$sid" received "$n" || ulp_ctl stop id="$sid"
		ulp_ctl wait id="$sid"
		ulp_row "$cid"; ulp_row "$sid"
		kmsg "rdmatest: ULP UD over rdma_cm to $a: $(ulp_stat "$sid" received) of $n datagrams arrived"
		[ "$(ulp_stat "$cid" messages)" = "$n" ] && [ "$(ulp_stat "$cid" errors)" = 0 ] &&
			[ "$(ulp_stat "$sid" received)" -gt 0 ] && [ "$(ulp_stat "$sid" corrupt)" = 0 ] &&
			[ "$(ulp_stat "$sid" dup)" = 0 ] && [ "$(ulp_stat "$sid" errors)" = 0 ]
	else
		ulp_ctl wait id="$sid" || return 1
		ulp_clean "$cid" "$n" 0 && ulp_clean "$sid" "$n" 1
	fi
}
# ulp_cm_refused: no listener on the port: REJECTED, a clean error, no run left
ulp_cm_refused() {
	mark
	! ulp_ctl start cm=client addr=10.77.0.1 port=7299 count=10 || { echo "start succeeded"; return 1; }
	since_mark | grep -q 'rejected the connection (reason 8)' || { since_mark; return 1; }
}
# ulp_cm_unreachable: nobody has the address: the resolution fails, no hang
ulp_cm_unreachable() {
	mark
	! timeout 60 sh -c "echo start cm=client addr=10.77.0.99 port=7299 > $ULP/ctl" || return 1
	since_mark | grep -q 'cannot resolve 10.77.0.99:7299' || { since_mark; return 1; }
}
# ulp_cm_too_big: a server that cannot take the client's buffer rejects it with
# private data saying what it takes; the client reports it
ulp_cm_too_big() {
	local sid
	ulp_ctl start cm=server addr=10.77.0.1 port=7206 size=1024 || return 1
	sid=$(ulp_last_id)
	mark
	! ulp_ctl start cm=client addr=10.77.0.1 port=7206 size=4096 count=10 || return 1
	ulp_ctl stop id="$sid"
	since_mark | grep -q 'rejected the connection: it takes buffers up to 1024 bytes' || { since_mark; return 1; }
}
# ulp_cm_link_delete: `rdma link delete` under an established connection (both
# ends on rxe1): both runs stop and free everything from remove(), promptly.
ulp_cm_link_delete() {
	ulp_ctl start cm=server addr=10.77.1.1 port=7207 || return 1
	ulp_ctl start cm=client addr=10.77.1.1 port=7207 count=1000000000 || return 1
	id=$(ulp_last_id)
	sleep 1
	[ "$(ulp_stat "$id" messages)" -gt 0 ] || { ulp_row "$id"; echo "no pings yet"; return 1; }
	mark
	timeout 30 rdma link delete rxe1 || { echo "rdma link delete failed"; return 1; }
	since_mark | grep -q "rdma_rust_ulp: rxe1: detached (2 runs stopped)" || { since_mark; return 1; }
	add_rxe rxe1 veth1 || { echo "rxe1 did not come back"; return 1; }
	ulp_cm_pair 10.77.1.1 7208 rc 50 256
}
# The ULP over rdma_cm in one guest: against rping both ways, against itself
# (RC and UD), refused and unreachable peers, device removal under a connection.
ulp_cm() {
	suite_begin rdma_ulp_cm
	rdma_resources > /tmp/res-before
	check insmod insmod /lib/modules/extra/rdma_rust_ulp.ko
	check rping_client_to_ulp_server ulp_cm_serve_rping 10.77.0.1 7201 1000 64 4096
	check ulp_client_to_rping_server ulp_cm_ping_rping 10.77.0.1 7202 1000 64
	check ulp_client_to_ulp_server_rc ulp_cm_pair 10.77.0.1 7203 rc 300 4096
	check ulp_client_to_ulp_server_ud ulp_cm_pair 10.77.0.1 7204 ud 300 1024
	check no_listener_rejected ulp_cm_refused
	check no_host_unreachable ulp_cm_unreachable
	check oversize_rejected_with_reason ulp_cm_too_big
	check link_delete_under_connection ulp_cm_link_delete
	check rmmod timeout 30 rmmod rdma_rust_ulp
	check resources_released resources_as_before
	suite_end
}

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
	say "=== RC and UD runs, driven from softirq completion handlers ==="
	for c in "mode=rc op=send size=4096 count=1000 depth=16 dev=rxe0" \
		"mode=rc op=send_imm size=64 count=1000 depth=16 dev=rxe0" \
		"mode=rc op=write size=16384 count=300 depth=8 dev=rxe0" \
		"mode=rc op=read size=16384 count=300 depth=8 dev=rxe1" \
		"mode=ud op=send size=1024 count=1000 depth=16 dev=rxe1" \
		"mode=rc op=send size=4096 count=1000 depth=16 dev=rxe0 poll=workqueue" \
		"mode=rc op=send size=4096 count=1000 depth=16 dev=rxe0 poll=direct"; do
		say "  echo '$c wait=1' > $ULP/ctl"
		ulp_ctl start $c wait=1 || say "  failed: $(dmesg | tail -n 1)"
	done
	say ""
	say "$ULP/stats:"
	cat $ULP/stats > /dev/console
	ok=$(awk 'NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next }
		$(h["state"]) == "done" && $(h["messages"]) == $(h["count"]) &&
		$(h["errors"]) == 0 && $(h["corrupt"]) == 0 { n++ } END { print n + 0 }' $ULP/stats)
	say "rdmatest: demo: $ok of 7 runs complete without errors"
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

# --- rdma_rust_ulp between the two guests: b runs the servers, a the clients;
# endpoints (QPN:GID:PSN) travel over TCP with nc.
ULP_PEER_COUNT=100
# nc_send HOST PORT TEXT: hand TEXT to the listener on HOST:PORT (retried for 120 s)
nc_send() {
	local i
	for i in $(seq 1 240); do
		echo "$3" | timeout 10 nc "$1" "$2" 2>/dev/null && return 0
		sleep 0.5
	done
	return 1
}
# nc_recv PORT: what one sender hands to PORT (waits up to 180 s)
nc_recv() { timeout 180 nc -l -p "$1" < /dev/null; }
# ulp_server_clean ID COUNT: a server run received COUNT messages, all intact
ulp_server_clean() {
	ulp_row "$1"
	[ "$(ulp_stat "$1" state)" = done ] && [ "$(ulp_stat "$1" received)" = "$2" ] &&
		[ "$(ulp_stat "$1" errors)" = 0 ] && [ "$(ulp_stat "$1" lost)" = 0 ] &&
		[ "$(ulp_stat "$1" dup)" = 0 ] && [ "$(ulp_stat "$1" corrupt)" = 0 ]
}

ulp_peer_rc_client() {
	local eb ea id n=$ULP_PEER_COUNT
	eb=$(nc_recv 5001); [ -n "$eb" ] || { echo "no endpoint from the server"; return 1; }
	echo "server endpoint $eb"
	ulp_ctl start role=client dev=rxe0 mode=rc op=send size=4096 count=$n peer="$eb" hold=1 || return 1
	id=$(ulp_last_id); ea=$(ulp_endpoint "$id")
	nc_send 10.88.0.2 5002 "$ea" || { echo "the server did not take our endpoint"; return 1; }
	[ "$(nc_recv 5003)" = ready ] || { echo "the server did not connect"; return 1; }
	ulp_ctl go id="$id" && ulp_ctl wait id="$id" || return 1
	ulp_clean "$id" "$n" 0
}

ulp_peer_ud_client() {
	local eb id n=$ULP_PEER_COUNT
	eb=$(nc_recv 5004); [ -n "$eb" ] || { echo "no endpoint from the server"; return 1; }
	ulp_ctl start role=client dev=rxe0 mode=ud op=send size=1024 count=$n peer="$eb" wait=1 || return 1
	id=$(ulp_last_id)
	nc_send 10.88.0.2 5005 done
	ulp_clean "$id" "$n" 0
}

ulp_peer_rc_server() {
	local eb ea id n=$ULP_PEER_COUNT
	ulp_ctl start role=server dev=rxe0 mode=rc op=send size=4096 count=$n || return 1
	id=$(ulp_last_id); eb=$(ulp_endpoint "$id")
	nc_send 10.88.0.1 5001 "$eb" || { echo "the client did not take our endpoint"; return 1; }
	ea=$(nc_recv 5002); [ -n "$ea" ] || { echo "no endpoint from the client"; return 1; }
	echo "client endpoint $ea"
	ulp_ctl connect id="$id" peer="$ea" || return 1
	nc_send 10.88.0.1 5003 ready || return 1
	ulp_ctl wait id="$id" || return 1
	ulp_server_clean "$id" "$n"
}

# UD may drop datagrams: what did not arrive is counted, not hidden.
ulp_peer_ud_server() {
	local eb id got n=$ULP_PEER_COUNT
	ulp_ctl start role=server dev=rxe0 mode=ud op=send size=1024 count=$n || return 1
	id=$(ulp_last_id); eb=$(ulp_endpoint "$id")
	nc_send 10.88.0.1 5004 "$eb" || { echo "the client did not take our endpoint"; return 1; }
	[ "$(nc_recv 5005)" = done ] || { echo "the client did not finish"; return 1; }
	wait_for 10 ulp_has "$id" received "$n"
	got=$(ulp_stat "$id" received)
	[ "$got" = "$n" ] || ulp_ctl stop id="$id"
	ulp_row "$id"
	echo "UD between the guests: $got of $n datagrams arrived"
	kmsg "rdmatest: ULP UD between the guests: $got of $n datagrams arrived"
	[ "$got" -gt 0 ] && [ "$(ulp_stat "$id" corrupt)" = 0 ] &&
		[ "$(ulp_stat "$id" dup)" = 0 ] && [ "$(ulp_stat "$id" errors)" = 0 ]
}

# --- rdma_rust_ulp over rdma_cm between the guests (peer-a 10.88.0.1, peer-b
# 10.88.0.2); a client retries until its server listens. Cross-guest round
# trips take ~0.2 s under TCG, so these use the peers' count (100), not 1000.
# a: rping -c to b's ULP server (both sizes); b: the server's side.
cm_peer_b_serve_rping() {
	local id n=$count
	ulp_ctl start cm=server addr=10.88.0.2 port=7301 count=$((2 * n)) || return 1
	id=$(ulp_last_id)
	ulp_ctl wait id="$id" || { ulp_row "$id"; ulp_ctl stop id="$id"; return 1; }
	ulp_clean "$id" $((2 * n)) 1
}
cm_peer_a_rping_to_ulp() { rping_to 10.88.0.2 7301 "$count" 64 && rping_to 10.88.0.2 7301 "$count" 4096; }
# a: `rping -s` for b's ULP client; b: the ULP client, validating each round trip.
cm_peer_a_rping_serves() {
	timeout 300 rping -s -a 10.88.0.1 -p 7302 -V > /tmp/rping-srv 2>&1
	rc=$?
	rping_log /tmp/rping-srv "rping -s -a 10.88.0.1 -p 7302 -V (exit $rc)"
	[ $rc = 0 ]
}
cm_peer_b_ulp_to_rping() {
	ulp_cm_start cm=client addr=10.88.0.1 port=7302 size=64 count="$count" wait=1 || return 1
	ulp_clean "$(ulp_last_id)" "$count" 0
}
# ULP to ULP, RC (a serves) and UD (b serves).
cm_peer_a_rc_server() {
	local id
	ulp_ctl start cm=server addr=10.88.0.1 port=7303 size=4096 count="$count" || return 1
	id=$(ulp_last_id)
	ulp_ctl wait id="$id" || { ulp_row "$id"; ulp_ctl stop id="$id"; return 1; }
	ulp_clean "$id" "$count" 1
}
cm_peer_b_rc_client() {
	ulp_cm_start cm=client addr=10.88.0.1 port=7303 size=4096 count="$count" wait=1 || return 1
	ulp_clean "$(ulp_last_id)" "$count" 0
}
cm_peer_b_ud_server() {
	local id got
	ulp_ctl start cm=server mode=ud addr=10.88.0.2 port=7304 size=1024 count="$count" || return 1
	id=$(ulp_last_id)
	[ "$(nc_recv 5006)" = done ] || { ulp_ctl stop id="$id"; echo "the client did not finish"; return 1; }
	wait_for 10 ulp_has "$id" received "$count" || ulp_ctl stop id="$id"
	ulp_ctl wait id="$id"
	got=$(ulp_stat "$id" received)
	ulp_row "$id"
	kmsg "rdmatest: ULP UD over rdma_cm between the guests: $got of $count datagrams arrived"
	[ "$got" -gt 0 ] && [ "$(ulp_stat "$id" corrupt)" = 0 ] &&
		[ "$(ulp_stat "$id" dup)" = 0 ] && [ "$(ulp_stat "$id" errors)" = 0 ]
}
cm_peer_a_ud_client() {
	local id
	ulp_cm_start cm=client mode=ud addr=10.88.0.2 port=7304 size=1024 count="$count" wait=1 || return 1
	id=$(ulp_last_id)
	nc_send 10.88.0.2 5006 done
	[ "$(ulp_stat "$id" messages)" = "$count" ] && [ "$(ulp_stat "$id" errors)" = 0 ]
}
# b deletes its device under a connection to a's server: b's run is stopped
# and freed by remove(); a's server sees the disconnect and frees the
# connection; neither hangs.
cm_peer_a_link_delete_server() {
	local id
	mark
	ulp_ctl start cm=server addr=10.88.0.1 port=7305 size=4096 || return 1
	id=$(ulp_last_id)
	wait_for 240 since_mark_has "run $id: 10.88.0.2:[0-9]* disconnected after" ||
		{ ulp_row "$id"; since_mark; ulp_ctl stop id="$id"; echo "no disconnect seen"; return 1; }
	ulp_row "$id"
	[ "$(ulp_stat "$id" messages)" -gt 0 ] && [ "$(ulp_stat "$id" errors)" = 0 ] &&
		ulp_ctl stop id="$id"
}
cm_peer_b_link_delete_client() {
	local id t0
	ulp_cm_start cm=client addr=10.88.0.1 port=7305 size=4096 count=1000000000 || return 1
	id=$(ulp_last_id)
	wait_for 60 ulp_above "$id" messages 2 ||
		{ ulp_row "$id"; echo "no round trips"; return 1; }
	mark
	t0=$(uptime_ms)
	timeout 60 rdma link delete rxe0 || { echo "rdma link delete failed"; return 1; }
	echo "rdma link delete took $(( $(uptime_ms) - t0 )) ms"
	since_mark | grep -q "rdma_rust_ulp: rxe0: detached (1 runs stopped)" || { since_mark; return 1; }
}

mode_peer_a() {
	suite_begin rdma_peer_a
	check rxe0_on_eth0 setup_peer 10.88.0.1
	check ping_peer wait_for 60 ping -c 1 -W 1 10.88.0.2
	# One connection: the client's run; -V verifies every payload.
	check rping_server timeout 240 rping -s -a 10.88.0.1 -C "$count" -S "$size" -V
	kmsg "rdmatest: peer-a rxe0 counters: $(counters rxe0)"
	check ulp_insmod insmod /lib/modules/extra/rdma_rust_ulp.ko
	check ulp_rc_client_to_peer ulp_peer_rc_client
	check ulp_ud_client_to_peer ulp_peer_ud_client
	check cm_rping_client_to_peer_ulp_server cm_peer_a_rping_to_ulp
	check cm_rping_server_for_peer_ulp_client cm_peer_a_rping_serves
	check cm_ulp_rc_server_for_peer cm_peer_a_rc_server
	check cm_ulp_ud_client_to_peer cm_peer_a_ud_client
	check cm_peer_link_delete_seen cm_peer_a_link_delete_server
	cat $ULP/stats | while IFS= read -r l; do kmsg "rdmatest: peer-a: $l"; done
	check ulp_rmmod timeout 30 rmmod rdma_rust_ulp
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
	check ulp_insmod insmod /lib/modules/extra/rdma_rust_ulp.ko
	check ulp_rc_server_from_peer ulp_peer_rc_server
	check ulp_ud_server_from_peer ulp_peer_ud_server
	check cm_ulp_server_for_peer_rping cm_peer_b_serve_rping
	check cm_ulp_client_to_peer_rping_server cm_peer_b_ulp_to_rping
	check cm_ulp_rc_client_to_peer cm_peer_b_rc_client
	check cm_ulp_ud_server_for_peer cm_peer_b_ud_server
	check cm_link_delete_under_connection cm_peer_b_link_delete_client
	cat $ULP/stats | while IFS= read -r l; do kmsg "rdmatest: peer-b: $l"; done
	check ulp_rmmod timeout 30 rmmod rdma_rust_ulp
	suite_end
}

case "$mode" in
test) mode_test ;;
run) mode_run ;;
peer-a) mode_peer_a ;;
peer-b) mode_peer_b ;;
*) say "rdmatest: unknown mode '$mode'"; sh ;;
esac
