#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# rdma_rust_ulp's checks in one guest: its control interface, its traffic and
# its runs over rdma_cm.
# Sourced by guest-init.sh (the VM's /init), whose helpers it uses.

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
# ulp_target ID: an RDMA server run's target, as go ... remote= takes it
ulp_target() { awk -v id="$1" '$1 == "target" && $2 == id { print $4 }' $ULP/stats; }
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

# bad_ctl: every malformed or out-of-range control string (and one longer
# than the 1024 bytes ctl takes) is refused with an error (EINVAL, or ENODEV
# for a missing device), logs why, and starts nothing.
bad_ctl() {
	rows=$(wc -l < $ULP/stats)
	bad=0
	for c in "bogus" "start" "start dev=nosuch" "start dev=rxe0 mode=xx" \
		"start dev=rxe0 size=0" "start dev=rxe0 size=abc" "start dev=rxe0 size=8m" \
		"start dev=rxe0 depth=0" "start dev=rxe0 depth=5000" "start dev=rxe0 count=0" \
		"start dev=rxe0 count=99999999999" "start dev=rxe0 validate=2" \
		"start dev=rxe0 frob=1" "start dev=rxe0 size" "start dev=rxe0 poll=irq" \
		"start dev=rxe0 poll=unbound" "start dev=rxe0 poll=Softirq" \
		"start dev=rxe0 mode=ud size=4096" "start dev=rxe0 mode=ud op=write" \
		"start dev=rxe0 size=4 validate=1" \
		"start dev=rxe0 pool=1 poll=direct" "start dev=rxe0 pool=2" \
		"start cm=server addr=10.77.0.1 port=7299 mcast=239.1.1.1" \
		"start cm=server mode=ud addr=10.77.0.1 port=7299 mcast=10.1.1.1" \
		"start dev=rxe0 mode=ud mcast=239.1.1.1" \
		"start dev=rxe0 batch=9" "start dev=rxe0 depth=12 batch=8" "start dev=rxe0 batch=0" \
		"start dev=rxe0 op=write inline=1" "start dev=rxe0 mode=ud inline=1" \
		"start dev=rxe0 size=4096 inline=1" "start dev=rxe0 pingpong=1 mode=ud" \
		"start dev=rxe0 pingpong=1 op=read" "start dev=rxe0 pingpong=1 depth=4" \
		"start dev=rxe0 pingpong=2" "start dev=rxe0 spin=1" "start dev=rxe0 poll=direct spin=2" \
		"start dev=rxe0 dev=rxe0" "start dev=rxe0 count=5 count=5" "start dev=rxe0 fault=bad_rkey" \
		"start dev=rxe0 mode=ud fault=bad_rkey" "start dev=rxe0 fault=bad_qpn" "start dev=rxe0 fault=x" \
		"start dev=rxe0 cq=0" "start dev=rxe0 cq=99999999" "fail" "fail id=999" \
		"start cm=client addr=10.77.0.1 port=7299 batch=2" \
		"start dev=rxe0 op=write size=2m" "start dev=rxe0 op=write size=1m depth=128" \
		"start dev=rxe0 role=client op=write peer=1:00000000000000000000ffff0a4d0001:1 validate=0" \
		"start dev=rxe0 role=client op=write peer=1:00000000000000000000ffff0a4d0001:1 hold=1" \
		"go id=1 remote=xyz:1:1" "go id=1 remote=1:123456789:1000" "go id=1 remote=1:1" \
		"start dev=rxe0 role=server op=write size=64k depth=32" \
		"stop" "stop id=999" "stop id=x" "wait id=999 extra" "clear now" \
		"start dev=rxe0 $(printf '%1100s' '')"; do
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
resources_same_as() { rdma_resources | cmp -s - "$1"; }
resources_same() { resources_same_as /tmp/res-before; }
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

# ud_loss_bound: the most UD datagrams a run may lose, in percent of those
# sent. rxe drops a datagram when no receive is posted for it (its receiver's
# completions handled later than its sender's), and a network drops frames.
# Measured (Documentation/testing.rst): one guest, none lost in most runs, but
# 11 of 300 (3.7 %) in one poll=direct run on a loaded host; two guests, none
# of 2,800, whose frames also cross a host socket (QEMU's dgram backend) that
# drops them while the receiving QEMU does not run. 5 % on both: above what
# was seen, far below a run that lost most of its datagrams. Per topology
# ($mode: peer-a, peer-b are the two guests), should they come to differ.
ud_loss_bound() {
	case $mode in
	peer-*) echo 5 ;;
	*) echo 5 ;;
	esac
}
# ud_arrived WHAT RECEIVED COUNT: logs how many of COUNT datagrams sent arrived
# and how many did not; fails if more did not than ud_loss_bound allows.
ud_arrived() {
	local what=$1 got=$2 n=$3 lost bound
	bound=$(ud_loss_bound)
	[ -n "$got" ] || { echo "$what: no received count"; return 1; }
	lost=$((n - got))
	echo "$what: $got of $n datagrams arrived, $lost lost (at most $bound % may be)"
	kmsg "rdmatest: $what: $got of $n datagrams arrived, $lost lost (at most $bound % may be)"
	[ "$got" -le "$n" ] || { echo "$what: $got datagrams received, more than the $n sent"; return 1; }
	[ $((lost * 100)) -le $((n * bound)) ] ||
		{ echo "$what: $lost of $n datagrams lost, more than $bound %"; return 1; }
}

# ulp_ud_ok ID COUNT: a UD run: every datagram sent, none corrupt or
# duplicated, every one either received or counted as lost, and no more lost
# than ud_loss_bound allows.
ulp_ud_ok() {
	ulp_row "$1"
	kmsg "rdmatest: UD run $1: its sends waited for the receiver $(ulp_stat "$1" waits) times"
	ud_arrived "UD run $1" "$(ulp_stat "$1" received)" "$2" &&
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
# ulp_pingpong COUNT KEY=VALUE...: a ping-pong run to its end: COUNT round
# trips, each answer checked, and a round trip time recorded
ulp_pingpong() {
	n=$1; shift
	ulp_run "$n" 0 mode=rc pingpong=1 "$@" || return 1
	id=$(ulp_last_id)
	ulp_has "$id" depth 1 && ulp_positive "$id" lat_p50_us
}
# ulp_siw_ud_refused: a UD run on siw0 is refused (iWARP has no UD) with a
# message, and starts nothing.
ulp_siw_ud_refused() {
	local rows=$(wc -l < $ULP/stats)
	mark
	! ulp_ctl start mode=ud op=send size=64 count=10 dev=siw0 2> /dev/null || { echo "started"; return 1; }
	since_mark | grep -q 'rdma_rust_ulp: start: siw0: iWARP has no UD' || { since_mark; echo "no message"; return 1; }
	[ "$(wc -l < $ULP/stats)" = "$rows" ] || { echo "a run was listed"; return 1; }
}
# ulp_has ID COLUMN VALUE
ulp_has() { ulp_row "$1"; [ "$(ulp_stat "$1" "$2")" = "$3" ]; }
# ulp_above ID COLUMN N: the cell is a number above N
ulp_above() { [ "$(ulp_stat "$1" "$2")" -gt "$3" ] 2> /dev/null; }
# ulp_positive ID COLUMN: the cell is a number (decimals allowed) above 0
ulp_positive() { awk -v x="$(ulp_stat "$1" "$2")" 'BEGIN { exit !(x ~ /^[0-9.]+$/ && x + 0 > 0) }'; }

# ulp_server_client CLIENT_OP: a server run on rxe0 (SENDs, a count it never
# reaches, not validated) and a held client run on rxe0 (4 deep) connected to it, as two hosts
# would have them; sets srv and cli.
ulp_server_client() {
	ulp_ctl start role=server dev=rxe0 mode=rc op=send validate=0 size=4096 count=1000000000 || return 1
	srv=$(ulp_last_id)
	ulp_ctl start role=client dev=rxe0 mode=rc op="$1" validate=0 size=4096 depth=4 \
		count=1000000000 peer="$(ulp_endpoint "$srv")" hold=1 || return 1
	cli=$(ulp_last_id)
	ulp_ctl connect id="$srv" peer="$(ulp_endpoint "$cli")"
}
# ulp_ended ID: `wait` on run ID returns within 60 s, and the run is done
ulp_ended() {
	timeout 60 sh -c "echo wait id=$1 > $ULP/ctl" && [ "$(ulp_stat "$1" state)" = done ] ||
		{ ulp_row "$1"; echo "run $1 did not end"; return 1; }
}

# ulp_server_fails: a server run waits for a count of receives; when its QP
# fails it must end by itself, the failure counted once. First `fail` on the
# server: it ends with its flushed receives, and its client's SENDs go
# unanswered until their retries run out. Then a client's RDMA WRITE with an
# rkey the server does not have: the server's responder NAKs it and moves its
# QP to the error state with nothing to report but the flushed receives, and
# the server ends with that reported as its error.
ulp_server_fails() {
	local srv cli
	ulp_server_client send || return 1
	ulp_ctl go id="$cli" || return 1
	wait_for 30 ulp_above "$srv" received 50 || { ulp_row "$srv"; echo "nothing arrives"; return 1; }
	ulp_ctl fail id="$srv" || return 1
	ulp_ended "$srv" || return 1
	ulp_has "$srv" errors 1 && ulp_above "$srv" wc_flush 0 ||
		{ echo "failed server: not one error and its receives flushed"; return 1; }
	ulp_ended "$cli" || return 1
	ulp_above "$cli" wc_err 0 && ulp_above "$cli" errors 0 ||
		{ ulp_row "$cli"; echo "client of the failed server: no failed completion"; return 1; }
	ulp_ctl clear
	mark
	ulp_server_client write || return 1
	ulp_ctl go id="$cli" remote=1000:deadbe00:100000 || return 1
	ulp_ended "$srv" || return 1
	ulp_has "$srv" errors 1 && ulp_has "$srv" received 0 && ulp_has "$srv" wc_err 0 &&
		ulp_above "$srv" wc_flush 0 && since_mark_has "run $srv: receive was flushed" ||
		{ since_mark; echo "server behind a broken rule: not one error for its flushed receives"; return 1; }
	ulp_ended "$cli" || return 1
	ulp_has "$cli" errors 1 && ulp_has "$cli" wc_err 1 && ulp_has "$cli" messages 0 ||
		{ ulp_row "$cli"; echo "WRITE with a bad rkey: not one failed completion, counted once"; return 1; }
	ulp_ctl clear
}

# ulp_link_delete_mid_run: deleting a device under runs (one with its own CQ,
# one on a share of the device's CQ pool, which the core frees right after the
# clients' remove()) stops and frees the runs from remove(), promptly; the
# device comes back and runs again.
ulp_link_delete_mid_run() {
	rdma resource show
	ulp_ctl start mode=rc op=send size=1024 count=1000000000 dev=rxe1 || return 1
	id=$(ulp_last_id)
	ulp_ctl start mode=rc op=write size=4096 count=1000000000 pool=1 poll=workqueue dev=rxe1 || return 1
	pool_id=$(ulp_last_id)
	sleep 1
	t0=$(uptime_ms)
	mark
	timeout 30 rdma link delete rxe1 || { echo "rdma link delete failed"; return 1; }
	echo "rdma link delete took $(( $(uptime_ms) - t0 )) ms"
	since_mark | grep -q "rdma_rust_ulp: rxe1: detached (2 runs stopped)" ||
		{ echo "no detach message"; return 1; }
	[ -z "$(ulp_stat "$id" state)$(ulp_stat "$pool_id" state)" ] ||
		{ echo "run $id or $pool_id still listed"; return 1; }
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
	# The data path's options: chained posts (a count that is not a whole
	# number of batches too), inline sends, targets over several MRs, ping-pong.
	check rc_send_batch8 ulp_run 301 1 mode=rc op=send size=256 depth=16 batch=8 dev=rxe0
	check rc_write_batch4 ulp_run 150 0 mode=rc op=write size=4096 depth=8 batch=4 dev=rxe0
	check rc_read_batch4 ulp_run 150 0 mode=rc op=read size=4096 depth=8 batch=4 dev=rxe1
	check ud_send_imm_batch8 ulp_ud_run 300 mode=ud op=send_imm size=512 depth=16 batch=8 dev=rxe0
	check rc_send_inline ulp_run 300 1 mode=rc op=send size=128 inline=1 batch=2 dev=rxe0
	check rc_write_4MiB_target ulp_run 100 0 mode=rc op=write size=65536 depth=64 dev=rxe0
	check rc_read_1MiB_messages ulp_run 12 0 mode=rc op=read size=1m depth=4 dev=rxe1
	check pingpong_send ulp_pingpong 200 op=send size=64 inline=1 dev=rxe0
	check pingpong_write ulp_pingpong 200 op=write size=4096 poll=workqueue dev=rxe1
	check pingpong_spin ulp_pingpong 200 op=send size=64 poll=direct spin=1 dev=rxe0
	# On soft-iWARP the run's RC pair is connected by rdma_cm (siw0's veth2
	# address), every message checked as on rxe; UD is refused.
	check siw_rc_send_4KiB ulp_run 300 1 mode=rc op=send size=4096 dev=siw0
	check siw_rc_write_64KiB_batch8 ulp_run 100 0 mode=rc op=write size=65536 depth=8 batch=8 dev=siw0
	check siw_rc_read_16KiB ulp_run 100 0 mode=rc op=read size=16384 depth=8 dev=siw0
	check siw_pingpong_send ulp_pingpong 200 op=send size=64 inline=1 dev=siw0
	check siw_ud_refused ulp_siw_ud_refused
	# The pool's CQs stay until their device goes: rxe1, whose deletion below frees them.
	check rc_send_cq_pool ulp_run 300 1 mode=rc op=send size=4096 pool=1 dev=rxe1
	check ud_send_cq_pool ulp_ud_run 300 mode=ud op=send size=1024 pool=1 poll=workqueue dev=rxe1
	check default_depth_used ulp_has 1 depth 8
	check device_totals ulp_device_totals
	check concurrent_runs ulp_concurrent
	check bad_input_refused bad_ctl
	check stop_mid_run ulp_stop_mid_run
	check server_ends_when_its_qp_fails ulp_server_fails
	check link_delete_mid_run ulp_link_delete_mid_run
	check rmmod_mid_run ulp_rmmod_mid_run
	check resources_released resources_as_before
	suite_end
}

# --- rdma_rust_ulp over rdma_cm -----------------------------------------------
# listening ADDR PORT: some rdma_cm id listens on ADDR:PORT
listening() { rdma resource show cm_id | grep LISTEN | grep -q "src-addr $1:$2 "; }
# rping_log FILE WHAT: rping's output for the log: its first and last lines,
# each cut to 200 characters (/dev/kmsg refuses a record over 1 KiB, and -v
# prints a ping's whole payload: the 4 KiB ones were lost with a write error)
rping_log() {
	{ head -n 2 "$1"; tail -n 2 "$1"; } | cut -c 1-200 |
		while IFS= read -r l; do kmsg "rdmatest: $2: $l"; done
}
# stuck_report PID: what a process that hangs and its threads wait for (state,
# wait channel, kernel stack), beside the guest's TCP sockets (their queues
# tell data nobody reads from data never sent) and RDMA QPs, into the log
stuck_report() {
	local t l
	for t in /proc/$1/task/*; do
		kmsg "rdmatest: stuck $1 thread ${t##*/}: state $(cut -d ' ' -f 3 "$t/stat" 2> /dev/null) wchan $(cat "$t/wchan" 2> /dev/null)"
		cut -c 1-200 "$t/stack" 2> /dev/null | while IFS= read -r l; do kmsg "rdmatest: stuck $1 thread ${t##*/}:   $l"; done
	done
	cat /proc/net/tcp /proc/net/tcp6 2> /dev/null | cut -c 1-160 |
		while IFS= read -r l; do kmsg "rdmatest: stuck $1 tcp: $l"; done
	rdma resource show qp 2>&1 | cut -c 1-200 | while IFS= read -r l; do kmsg "rdmatest: stuck $1 qp: $l"; done
}
# rping_within SECONDS OUT ERR ARGS...: rping ARGS, stdout to OUT, stderr to
# ERR; not ended within SECONDS, it is reported (stuck_report) and killed,
# with 143 (SIGTERM's status, as busybox's timeout gives)
rping_within() {
	local secs=$1 n=$(($1 * 5)) out=$2 err=$3 pid
	shift 3
	rping "$@" > "$out" 2> "$err" &
	pid=$!
	while [ $n -gt 0 ] && kill -0 $pid 2> /dev/null; do sleep 0.2; n=$((n - 1)); done
	if kill -0 $pid 2> /dev/null; then
		echo "rping $* had not ended after $secs s" >> "$err"
		stuck_report $pid
		kill $pid
		wait $pid
		return 143
	fi
	wait $pid
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
# ULP_ADDR, if set, is the ULP's spelling of ADDR (a link-local scope as a number).
ulp_cm_serve_rping() {
	local a=$1 port=$2 n=$3 id rc size total=0
	shift 3
	for size in "$@"; do total=$((total + n)); done
	ulp_ctl start cm=server addr="${ULP_ADDR:-$a}" port="$port" count="$total" || return 1
	id=$(ulp_last_id)
	for size in "$@"; do
		timeout 300 rping -c -a "$a" -p "$port" -C "$n" -S "$size" -v -V > /tmp/rping-ulp 2> /tmp/rping-ulp.err
		rc=$?
		cat /tmp/rping-ulp.err >> /tmp/rping-ulp
		rping_log /tmp/rping-ulp "rping -c -a $a -p $port -C $n -S $size -v -V (exit $rc)"
		[ $rc = 0 ] || { tail -n 5 /tmp/rping-ulp | cut -c 1-200; ulp_ctl stop id="$id"; return 1; }
		# -v prints each ping's data as it came back.
		[ "$(grep -c 'ping data: rdma-ping-' /tmp/rping-ulp)" = "$n" ] &&
			grep -q "ping data: rdma-ping-$((n - 1)): " /tmp/rping-ulp ||
			{ grep -v 'ping data: rdma-ping-' /tmp/rping-ulp | head; echo "rping printed $(grep -c 'ping data: rdma-ping-' /tmp/rping-ulp) of $n pings"; ulp_ctl stop id="$id"; return 1; }
	done
	ulp_ctl wait id="$id" || return 1
	ulp_clean "$id" "$total" 1
}
# ulp_cm_link_local PORT: ulp_cm_serve_rping on veth0's IPv6 link-local address.
ulp_cm_link_local() {
	local ll idx
	ll=$(ip -6 addr show dev veth0 scope link | awk '/inet6/ { sub("/.*", "", $2); print $2; exit }')
	idx=$(cat /sys/class/net/veth0/ifindex)
	[ -n "$ll" ] || { echo "veth0 has no link-local address"; return 1; }
	ULP_ADDR="$ll%$idx" ulp_cm_serve_rping "$ll%veth0" "$1" 100 64
}
# rping_to ADDR PORT COUNT SIZE: `rping -c -v -V` to a server on another host,
# retried while it is not listening yet; rping exits 0 and prints every ping.
rping_to() {
	local i rc
	for i in $(seq 1 60); do
		# 20 pings take 2 s; the bound is short of what the peer waits
		# for our next word (nc_recv's 180 s), so that a hang here fails
		# this row, not every row after it on both guests.
		rping_within 90 /tmp/rping-to /tmp/rping-to.err -c -a "$1" -p "$2" -C "$3" -S "$4" -v -V
		rc=$?
		[ $rc = 0 ] && break
		grep -q -i 'reject\|refused\|unreachable\|connect error' /tmp/rping-to.err || break
		sleep 1
	done
	cat /tmp/rping-to.err >> /tmp/rping-to
	rping_log /tmp/rping-to "rping -c -a $1 -p $2 -C $3 -S $4 -v -V (exit $rc)"
	[ $rc = 0 ] || { tail -n 5 /tmp/rping-to | cut -c 1-200; echo "rping printed $(grep -c 'ping data: rdma-ping-' /tmp/rping-to) of $3 pings"; return 1; }
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
		ud_arrived "ULP UD over rdma_cm to $a" "$(ulp_stat "$sid" received)" "$n" &&
			[ "$(ulp_stat "$cid" messages)" = "$n" ] && [ "$(ulp_stat "$cid" errors)" = 0 ] &&
			[ "$(ulp_stat "$sid" corrupt)" = 0 ] &&
			[ "$(ulp_stat "$sid" dup)" = 0 ] && [ "$(ulp_stat "$sid" errors)" = 0 ]
	else
		ulp_ctl wait id="$sid" || return 1
		ulp_clean "$cid" "$n" 0 && ulp_clean "$sid" "$n" 1
	fi
}
# mcast_receivers_ok N ID...: receiver runs of a multicast group that was sent
# N datagrams: each got them all but what ud_loss_bound allows it to lose,
# none corrupt or duplicated. Stops them.
mcast_receivers_ok() {
	local n=$1 id ok=0; shift
	for id in "$@"; do
		if ! wait_for 10 ulp_has "$id" received "$n"; then
			t0=$(uptime_ms)
			ulp_ctl stop id="$id"
			echo "stopping receiver run $id took $(( $(uptime_ms) - t0 )) ms"
		fi
		ulp_ctl wait id="$id"
		ulp_row "$id"
		ud_arrived "multicast receiver run $id" "$(ulp_stat "$id" received)" "$n" &&
			[ "$(ulp_stat "$id" corrupt)" = 0 ] &&
			[ "$(ulp_stat "$id" dup)" = 0 ] && [ "$(ulp_stat "$id" errors)" = 0 ] || ok=1
	done
	return $ok
}
# ulp_cm_mcast: two receivers on rxe0 joined to one group, a sender on rxe1:
# each of its datagrams reaches both QPs; the group is left when the runs end.
ulp_cm_mcast() {
	local r1 r2 n=200
	ulp_ctl start cm=server mode=ud addr=10.77.0.1 port=7213 mcast=239.77.0.9 count=$n size=1024 || return 1
	r1=$(ulp_last_id)
	ulp_ctl start cm=server mode=ud addr=10.77.0.1 port=7214 mcast=239.77.0.9 count=$n size=1024 ||
		{ ulp_ctl stop id="$r1"; return 1; }
	r2=$(ulp_last_id)
	# On RoCE the CM joins the IP group on the netdev too, so that it takes the
	# packets: the group's MAC (01:00:5e and its low 23 bits) is on veth0.
	ip maddr show dev veth0 | grep -q 01:00:5e:4d:00:09 ||
		{ ip maddr show dev veth0; ulp_ctl stop all; echo "veth0 did not join the IP group"; return 1; }
	# The sender on veth0 too: the host's own multicast is looped back on the
	# interface that is a member (rxe1's veth1 would carry it to veth0 with a
	# source address of this host, which the IP layer drops as martian).
	ulp_ctl start cm=client mode=ud addr=10.77.0.1 port=7215 mcast=239.77.0.9 count=$n size=1024 wait=1 ||
		{ ulp_ctl stop all; return 1; }
	ulp_row "$(ulp_last_id)"
	[ "$(ulp_stat "$(ulp_last_id)" messages)" = "$n" ] || { ulp_ctl stop all; return 1; }
	mcast_receivers_ok $n "$r1" "$r2" || return 1
	# A receiver stopped while joined, its receives posted: stop frees it promptly.
	ulp_ctl start cm=server mode=ud addr=10.77.0.1 port=7216 mcast=239.77.0.9 count=$n size=1024 || return 1
	t0=$(uptime_ms)
	ulp_ctl stop id="$(ulp_last_id)" || return 1
	t=$(( $(uptime_ms) - t0 ))
	echo "stopping a joined receiver took $t ms"
	[ $t -lt 10000 ] || { echo "stop took $t ms"; return 1; }
	ulp_ctl clear
	# The runs gone, their ids have left the group, and the netdev the IP group.
	wait_for 10 sh -c "! ip maddr show dev veth0 | grep -q 01:00:5e:4d:00:09" ||
		{ ip maddr show dev veth0; echo "the group was not left"; return 1; }
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
	fails_by_itself 60 sh -c "echo start cm=client addr=10.77.0.99 port=7299 > $ULP/ctl" || return 1
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
# ulp_cm_link_delete TYPE DEV NETDEV ADDR PORT: `rdma link delete DEV` under an
# established connection (both ends on DEV, at ADDR): both runs stop and free
# everything from remove(), promptly; DEV (of TYPE, on NETDEV) comes back and
# carries a connection again (PORT + 1).
ulp_cm_link_delete() {
	local type=$1 dev=$2 ndev=$3 a=$4 p=$5 id
	ulp_ctl start cm=server addr="$a" port="$p" || return 1
	ulp_ctl start cm=client addr="$a" port="$p" count=1000000000 || return 1
	id=$(ulp_last_id)
	sleep 1
	[ "$(ulp_stat "$id" messages)" -gt 0 ] || { ulp_row "$id"; echo "no pings yet"; return 1; }
	mark
	timeout 30 rdma link delete "$dev" || { echo "rdma link delete failed"; return 1; }
	since_mark | grep -q "rdma_rust_ulp: $dev: detached (2 runs stopped)" || { since_mark; return 1; }
	add_link "$type" "$dev" "$ndev" || { echo "$dev did not come back"; return 1; }
	ulp_cm_pair "$a" $((p + 1)) rc 50 256
}
# ulp_cm_rmmod_under DEV ADDR PORT: the module unloaded under a connection on
# DEV (server and client both there): both runs stopped on its removal.
ulp_cm_rmmod_under() {
	local dev=$1 a=$2 p=$3 id
	# Whatever fails before the unload, the module goes: later suites load it.
	local give_up='ulp_ctl stop all; timeout 30 rmmod rdma_rust_ulp; return 1'
	ulp_ctl start cm=server addr="$a" port="$p" || eval "$give_up"
	ulp_ctl start cm=client addr="$a" port="$p" count=1000000000 || eval "$give_up"
	id=$(ulp_last_id)
	wait_for 10 ulp_above "$id" messages 0 || { ulp_row "$id"; echo "no pings yet"; eval "$give_up"; }
	mark
	timeout 30 rmmod rdma_rust_ulp || { since_mark; echo "rmmod failed"; return 1; }
	since_mark | grep -q "rdma_rust_ulp: $dev: detached (2 runs stopped)" || { since_mark; return 1; }
}
# ulp_cm_server_stops: the server run is stopped under a connected client (both
# ends on rxe1): the client's run ends with the error, and the client answers
# the server's DREQ when it comes (the DREP moves its QP, the only RC QP left on
# rxe1, to the error state, and its requests come back flushed), not only when
# its run is reaped.
client_qp_failed() {
	[ "$(rdma resource show qp link rxe1 | grep -c 'type RC')" = 1 ] &&
		rdma resource show qp link rxe1 | grep -q 'type RC state ERR'
}
ulp_cm_server_stops() {
	local sid cid
	ulp_ctl start cm=server addr=10.77.1.1 port=7209 || return 1
	sid=$(ulp_last_id)
	ulp_ctl start cm=client addr=10.77.1.1 port=7209 count=1000000000 ||
		{ ulp_ctl stop id="$sid"; return 1; }
	cid=$(ulp_last_id)
	wait_for 10 ulp_above "$cid" messages 0 || { ulp_ctl stop all; echo "no pings yet"; return 1; }
	mark
	ulp_ctl stop id="$sid" || { ulp_ctl stop all; return 1; }
	wait_for 30 since_mark_has "run $cid: disconnected after [0-9]* of 1000000000" ||
		{ since_mark; ulp_ctl stop all; return 1; }
	wait_for 10 client_qp_failed || { rdma resource show qp link rxe1; ulp_ctl stop all;
		echo "the client's QP is not alone in the error state"; return 1; }
	rdma resource show qp link rxe1 | while IFS= read -r l; do kmsg "rdmatest: after the server stopped: $l"; done
	ulp_ctl wait id="$cid"
	ulp_row "$cid"
	# One error, the disconnect: a ping still in flight to the stopped server
	# came back flushed (left unanswered, it would fail with RetryExcErr after
	# its retries, ~4 s, and move the QP to the error state that way).
	[ "$(ulp_stat "$cid" errors)" = 1 ] ||
		{ echo "the client counted $(ulp_stat "$cid" errors) errors, not 1"; return 1; }
	ulp_ctl clear
	[ "$(rdma resource show qp link rxe1 | grep -c 'type RC')" = 0 ] ||
		{ rdma resource show qp link rxe1; echo "a QP is left"; return 1; }
}
# The ULP over rdma_cm in one guest: against rping both ways, against itself
# (RC and UD), refused and unreachable peers, device removal under a connection.
ulp_cm() {
	suite_begin rdma_ulp_cm
	rdma_resources > /tmp/res-before
	check insmod insmod /lib/modules/extra/rdma_rust_ulp.ko
	# A hundred round trips each way: `make stress` makes a thousand (long_rping).
	check rping_client_to_ulp_server ulp_cm_serve_rping 10.77.0.1 7201 100 64 4096
	check rping_client_to_ulp_server_ipv6 ulp_cm_serve_rping fd77::1 7211 100 64 4096
	check rping_client_to_ulp_server_link_local ulp_cm_link_local 7212
	check ulp_client_to_rping_server ulp_cm_ping_rping 10.77.0.1 7202 100 64
	check ulp_client_to_ulp_server_rc ulp_cm_pair 10.77.0.1 7203 rc 300 4096
	check ulp_client_to_ulp_server_ud ulp_cm_pair 10.77.0.1 7204 ud 300 1024
	# The same RC rows on soft-iWARP (siw0, veth2's address): rdma_cm over
	# iw_cm, TCP underneath.
	check siw_rping_client_to_ulp_server ulp_cm_serve_rping 10.77.2.1 7221 100 64 4096
	check siw_ulp_client_to_rping_server ulp_cm_ping_rping 10.77.2.1 7222 100 64
	check siw_ulp_client_to_ulp_server_rc ulp_cm_pair 10.77.2.1 7223 rc 300 4096
	check ulp_multicast_two_receivers ulp_cm_mcast
	check no_listener_rejected ulp_cm_refused
	check no_host_unreachable ulp_cm_unreachable
	check oversize_rejected_with_reason ulp_cm_too_big
	check server_stop_answered_at_once ulp_cm_server_stops
	check link_delete_under_connection ulp_cm_link_delete rxe rxe1 veth1 10.77.1.1 7207
	check siw_link_delete_under_connection ulp_cm_link_delete siw siw1 veth3 10.77.3.1 7225
	# The module's last unload here is under a connection on siw0.
	check siw_rmmod_under_connection ulp_cm_rmmod_under siw0 10.77.2.1 7227
	check resources_released resources_as_before
	suite_end
}
