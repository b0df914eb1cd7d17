#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# `make bench` in the guest (rdmatest=bench, on the release kernel): each case
# runs its peer (perftest, rping) and the ULP in interleaved rounds (peer, ULP,
# ULP, peer, peer, ULP, ...: the side that goes first changes from one round to
# the next, so neither always runs on what the other left behind) on rxe0, QP
# pairs on one device, and prints one line per
# timed run on the console:
#
#   rdmabench: run case=C side=peer|ulp round=R value=V p99=P msgs=M cpu_us=U
#
# value is msgs/s, MB/s (10^6 bytes/s), round trips/s or the p50 latency in
# microseconds, as the case's kind says; cpu_us is the CPU time of the whole
# guest (user, system, irq, softirq: /proc/stat) per message over the run,
# setup included on both sides. Besides those: `rdmabench: check` lines for
# each case's validated run (timed runs do not validate), `rdmabench: alloc`
# for allocations on the ULP's per-message path and `rdmabench: floor` for
# what rxe itself costs. tools/testing/kunit/bench_report.py makes the table,
# the CSV and the chart. Sourced by guest-init.sh, whose helpers it uses.

BENCH_ADDR=10.77.0.1
# siw0's (veth2): the rping and RC cases on soft-iWARP.
BENCH_SIW_ADDR=10.77.2.1
bench_say() { echo "rdmabench: $*" > /dev/console; }

# Busy time of every CPU since boot, in USER_HZ ticks (10 ms): user, nice,
# system, irq and softirq (steal is the host's, not the guest's).
cpu_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8; exit }' /proc/stat; }
# per_s MSGS MICROSECONDS: messages per second
per_s() { awk -v m="$1" -v us="$2" 'BEGIN { printf "%.0f", m * 1e6 / (us > 0 ? us : 1) }'; }
# bench_sides N: both sides in the order of run N (odd: the peer first).
bench_sides() { if [ $(($1 % 2)) = 1 ]; then echo peer ulp; else echo ulp peer; fi; }
# side_cfgs KIND OP N: the runs of round N of a case, in order, as SIDE:CFG
# (the ULP's configuration is "-"; the peer's, peer_cfgs').
side_cfgs() {
	local side cfg
	for side in $(bench_sides "$3"); do
		if [ $side = ulp ]; then
			echo ulp:-
		else
			for cfg in $(peer_cfgs "$1" "$2"); do echo peer:$cfg; done
		fi
	done
}
# Every server of a run (perftest's TCP exchange, rdma_cm listeners) gets a port
# of its own; taken in the caller's shell, not in a $(...) subshell.
BENCH_PORT=20000
next_port() { BENCH_PORT=$((BENCH_PORT + 1)); }
tcp_listening() {
	awk -v p="$(printf '%04X' "$1")" '$2 ~ ":" p "$" && $4 == "0A" { f = 1 } END { exit !f }' \
		/proc/net/tcp
}

# The case's message count: about $BENCH_BYTES bytes, within [MIN, MAX]
# messages. Quick mode (a check that every case runs, no figure): at most 300
# messages and 8 MiB, but 16 at least; the minimum of 200 made 200 MiB of the
# 1 MiB cases, 50 s a side on the test kernel. Rounded down to a multiple of 8.
bench_count() {
	local size=$1 min=${2:-200} max=${3:-20000} n quick
	n=$((BENCH_BYTES / size))
	[ "$n" -ge "$min" ] || n=$min
	[ "$n" -le "$max" ] || n=$max
	if [ -n "$BENCH_QUICK" ]; then
		quick=$(((8 << 20) / size))
		[ "$quick" -le 300 ] || quick=300
		[ "$quick" -ge 16 ] || quick=16
		[ "$n" -le "$quick" ] || n=$quick
	fi
	# A multiple of perftest's post list (it refuses any other count).
	echo $((n / PEER_LIST * PEER_LIST))
}
# The queue depth of both sides: deep for small messages, shallower for
# large ones (the ULP keeps 2 x depth receive buffers of the message size, UD 4 x).
bench_depth() { if [ "$1" -le 65536 ]; then echo 32; else echo 8; fi; }

# --- the peer: perftest and rping ----------------------------------------------
# The peer's configurations in the throughput cases, the ratio taken against
# the better one (bench_report.py), so that the ULP is compared with perftest
# at its best, not at its defaults:
#   base   perftest's defaults: it busy-polls, and moderates its completions
#          already (one per 100 requests, capped at the depth);
#   list   --post_list 8: 8 requests a post, as the ULP chains its SENDs and
#          WRITEs (-Q 8 beside it was no faster: 40,658 and 37,343 msgs/s
#          against 48,285 and 40,702 without, 64 B SENDs, same boot);
#   event  --post_list 8 and -e: it sleeps on CQ events, as the ULP's softirq
#          handlers let it; the CPU per message is compared with this one.
#          Not for WRITE: perftest 4.5 has no event mode there ("Events
#          feature not available on WRITE verb"), and the WRITE cases compare
#          the CPU with the busy-polling list.
# On 2 vCPUs the event mode was often the fastest too (64 B SENDs, one boot:
# 62,387 msgs/s with -e against 26,597 busy-polling), as a spinning process
# takes a CPU from rxe's own tasks.
PEER_LIST=8
# has_events OP_OR_TOOL: whether perftest has an event mode for the op (not
# for WRITE, ib_write_bw). Nor for SEND on siw0: ib_send_bw -e -l 8 -R there
# stalled in 2 rounds of 3 (its receiver: no message for 120 s, 592 of 1024
# received), where the busy-polling runs and ib_read_bw -e did not.
has_events() { case $1 in *write* | rc_send_siw) return 1 ;; esac; }
# perf_event_arg TOOL ROLE: -e for ROLE (client or server) of TOOL in event
# mode: the client, and the server of ib_send_bw, the only server that polls
# (the servers of ib_write_bw and ib_read_bw refuse -e).
perf_event_arg() { case $2:$1 in client:* | server:ib_send_bw) printf '%s' -e ;; esac; }
# peer_cfgs KIND OP: the peer's configurations of a case.
peer_cfgs() {
	case $1 in
	rate | bw) echo "base list$(has_events "$2" && echo ' event')" ;;
	*) echo base ;;
	esac
}
# perf_op_args OP DEPTH: perftest's arguments for an RC op beside the depth:
# the SEND receiver's receives, the READs in flight.
perf_op_args() {
	case $1 in
	rc_send) echo "-r $((2 * $2))" ;;
	rc_read) echo "-o $2" ;;
	esac
}
# op_dev OP: the device of a case's op: siw0 for the *_siw ones.
op_dev() { case $1 in *_siw) echo siw0 ;; *) echo rxe0 ;; esac; }
# peer_cfg_args CFG: perftest's arguments for CFG (-e is perf_run's, below).
peer_cfg_args() { case $1 in list | event) echo "-l $PEER_LIST" ;; esac; }

# perf_run TOOL PORT SIZE COUNT DEPTH [ARGS...]: a perftest server and client
# on rxe0; prints "MSGS_PER_S MB_PER_S" (bw tools: perftest's MsgRate, and its
# average BW in MiB/s as 10^6 bytes/s) or "P50 P99" in us (lat tools), and
# logs the result line it took. PERF_EVENTS=1: event mode (perf_event_arg).
# PERF_RECEIVER=1: the figures of the receiving side
# (UD: what arrived). A result of 0 fails: it is no figure (but for
# PERF_NO_FIGURE=1, a run that is timed by its CPU only: bench_fixed's 16
# messages, where perftest's UD receiver in event mode was seen to print 0).
# perftest's no figure exits 2 (bench_one runs such a run once more).
perf_run() {
	local tool=$1 port=$2 size=$3 n=$4 depth=$5 cev= sev= to=127.0.0.1
	shift 5
	local common="-d ${PERF_DEV:-rxe0} -s $size -n $n -F -p $port"
	# PERF_CM_ADDR: rdma_cm connects the QPs (-R), the client to that address.
	[ -z "${PERF_CM_ADDR:-}" ] || { common="$common -R"; to=$PERF_CM_ADDR; }
	case $tool in
	*_bw) common="$common -t $depth" ;;
	esac
	if [ -n "${PERF_EVENTS:-}" ]; then
		cev=$(perf_event_arg $tool client)
		sev=$(perf_event_arg $tool server)
	fi
	timeout 300 /usr/bin/$tool $common $sev "$@" > /tmp/perf-s 2>&1 &
	local spid=$!
	wait_for 20 tcp_listening "$port" || { kill $spid 2> /dev/null; cat /tmp/perf-s >&2; echo "server did not listen" >&2; return 1; }
	timeout 300 /usr/bin/$tool $common $cev "$@" $to > /tmp/perf-c 2>&1
	local crc=$?
	wait $spid
	local src=$?
	if [ $crc != 0 ] || [ $src != 0 ]; then
		cat /tmp/perf-c /tmp/perf-s >&2
		return 1
	fi
	# The client's result line; ib_send_bw's client was seen to print zeros
	# (256 x 256 KiB), where its server, the receiver, has the figures (the
	# servers of ib_write_bw and ib_read_bw have none).
	local f=/tmp/perf-c
	[ $tool != ib_send_bw ] || ! awk '/MsgRate/ { getline; exit !($5 == 0) }' $f || f=/tmp/perf-s
	[ -z "${PERF_RECEIVER:-}" ] || f=/tmp/perf-s
	bench_say "note $tool $cev $* ($([ $f = /tmp/perf-c ] && echo client || echo server)): $(awk '/#bytes/ { getline; print; exit }' $f)"
	case $tool in
	*_lat)
		# #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9%
		awk '/t_typical/ { getline; print $5, $8; exit }' $f ;;
	*)
		# #bytes #iterations BW_peak BW_average MsgRate[Mpps]
		awk '/MsgRate/ { getline; printf "%.0f %.2f\n", $5 * 1e6, $4 * 1.048576; exit }' $f ;;
	esac | awk -v any="${PERF_NO_FIGURE:-}" '$1 + 0 > 0 || any { print; ok = 1 }
		END { if (!ok) { print "perftest reported no figure, or 0" > "/dev/stderr"; exit 2 } }'
}

# rping_time ADDR PORT SIZE COUNT [-V]: rping server and client over rdma_cm on ADDR;
# prints the client's wall time in ms. rping's client exits 255 when its CM
# thread reads the event channel its main thread has just destroyed at the
# end of a run ("rdma_get_cm_event: Bad file descriptor", rdma-core's
# teardown race): that pair runs once more, and the report says so; any
# other failure fails the case.
rping_time() {
	local addr=$1 port=$2 size=$3 n=$4 try
	shift 4
	for try in 1 2; do
		if rping_pair "$addr" "$port" "$n" "$size" "$@" > /tmp/rping-pair 2>&1; then
			echo "$RPING_MS"
			return 0
		fi
		[ $try = 1 ] && grep -q 'rdma_get_cm_event: Bad file descriptor' /tmp/rping-pair || break
		bench_say "note rping's client lost its teardown race (rdma_get_cm_event: Bad file descriptor); the pair ran again"
	done
	cat /tmp/rping-pair >&2
	return 1
}

# --- the ULP -------------------------------------------------------------------------
# ulp_timed KEY=VALUE...: one unvalidated run to its end; prints "MESSAGES
# ELAPSED_US P50_US P99_US RECEIVED LOST" from its row of the stats table.
ulp_timed() {
	ulp_ctl start dev="${ULP_DEV:-rxe0}" validate=0 wait=1 "$@" || return 1
	local id
	id=$(ulp_last_id)
	[ "$(ulp_stat "$id" errors)" = 0 ] || { ulp_row "$id" >&2; return 1; }
	echo "$(ulp_stat "$id" messages) $(ulp_stat "$id" elapsed_us) $(ulp_stat "$id" lat_p50_us)" \
		"$(ulp_stat "$id" lat_p99_us) $(ulp_stat "$id" received) $(ulp_stat "$id" lost)"
}

# ulp_rping_time ADDR PORT SIZE COUNT [validate=1]: the ULP's rping-protocol
# client against its own server on ADDR; prints the client's wall time in ms.
ulp_rping_time() {
	local addr=$1 port=$2 size=$3 n=$4 val=${5:-validate=0} t0 t1 sid rc
	ulp_ctl start cm=server addr="$addr" port="$port" count="$n" $val || return 1
	sid=$(ulp_last_id)
	t0=$(uptime_ms)
	ulp_ctl start cm=client addr="$addr" port="$port" size="$size" count="$n" $val wait=1
	rc=$?
	t1=$(uptime_ms)
	ulp_ctl stop id="$sid"
	[ $rc = 0 ] || return 1
	ulp_clean "$(ulp_last_id)" "$n" 0 > /tmp/ulp-rping 2>&1 || { cat /tmp/ulp-rping >&2; return 1; }
	echo $((t1 - t0))
}

# The core's shared CQ pool (ib_cq_pool_get: nvme-rdma's and nvmet-rdma's CQs)
# keeps its CQs, idle ("users 0"), until the device goes: the RDMA resources
# without them.
pool_cqs() { rdma resource show cq | grep -c ' users 0 .*comm \[ib_core\]'; }
# Each device's line less that device's idle pool CQs (siw0 and siw1 sit
# beside rxe0, whose pool it is): the pool's CQs come first in one stream
# as "pool DEV:" lines, then the devices' lines.
rdma_resources_but_pool() {
	{
		rdma resource show cq | awk '/ users 0 .*comm \[ib_core\]/ {
			for (i = 1; i < NF; i++) if ($i == "dev") print "pool", $(i + 1) ":" }'
		rdma_resources
	} | awk '$1 == "pool" { p[$2]++; next }
		{ for (i = 1; i < NF; i++) if ($i == "cq") $(i + 1) -= p[$1]; print }'
}
resources_but_pool_same_as() { rdma_resources_but_pool | cmp -s - "$1"; }

# --- cases -----------------------------------------------------------------------------
# A case: NAME KIND OP SIZE. KIND is what the figure is: rate (msgs/s), bw
# (MB/s), lat (p50/p99 half round trip, us, as perftest reports it) or rt
# (round trips/s).
BENCH_CASES="
rc_send_64 rate rc_send 64
rc_send_4k bw rc_send 4096
rc_send_64k bw rc_send 65536
rc_write_4k bw rc_write 4096
rc_write_64k bw rc_write 65536
rc_read_4k bw rc_read 4096
rc_read_64k bw rc_read 65536
ud_send_64 rate ud_send 64
ud_send_1k rate ud_send 1024
lat_send_64 lat lat_send 64
lat_write_64 lat lat_write 64
rping_64 rt rping 64
rping_4k rt rping 4096
rping_64_siw rt rping_siw 64
rping_4k_siw rt rping_siw 4096
rc_send_64k_siw bw rc_send_siw 65536
rc_write_64k_siw bw rc_write_siw 65536
rc_read_64k_siw bw rc_read_siw 65536
"
# The size sweep (the chart): SEND and WRITE, 64 B to 1 MiB; sizes the cases
# above already cover are not run twice.
BENCH_SWEEP="64 256 1024 4096 16384 65536 262144 1048576"
sweep_cases() {
	local op s
	for op in send write; do
		for s in $BENCH_SWEEP; do
			case "$op $s" in
			"send 64" | "send 4096" | "send 65536" | "write 4096" | "write 65536") continue ;;
			esac
			echo "sweep_${op}_$s bw rc_$op $s"
		done
	done
}

# The ULP's control keys for OP at SIZE, DEPTH. Its data-path options, as an
# A/B of each (3 runs each way, same boot) found them: SENDs and WRITEs posted
# 8 to a chain (64 B SEND +10 %, 4 KiB and 64 KiB WRITE +10-15 %), READs one by
# one (a chain of 8 was 20 % slower), no inline (no gain over the noise).
# On siw0 one post per message: there batch=1 made 613 and 706 MB/s of 64 KiB
# SENDs and WRITEs where batch=8 had made 491 and 469 (3 rounds each, two
# boots of 2026-11-29), as perftest's own best there is without a post list.
# BENCH_ULP_FAST replaces these for every op.
ulp_args() {
	local op=${1%_siw} size=$2 depth=$3 fast=${ULP_FAST-batch=8}
	[ "$op" = "$1" ] || fast=${ULP_FAST-}
	case $op in
	rc_send) echo "mode=rc op=send size=$size depth=$depth $fast" ;;
	rc_write) echo "mode=rc op=write size=$size depth=$depth $fast" ;;
	rc_read) echo "mode=rc op=read size=$size depth=$depth ${ULP_FAST-}" ;;
	ud_send) echo "mode=ud op=send size=$size depth=$depth $fast" ;;
	lat_send) echo "mode=rc op=send size=$size pingpong=1 $ULP_LAT" ;;
	lat_write) echo "mode=rc op=write size=$size pingpong=1 $ULP_LAT" ;;
	esac
}

# bench_n KIND SIZE: the messages of a timed run of a case.
bench_n() {
	case $1 in
	lat) bench_count 64 2000 "${BENCH_LAT_COUNT:-5000}" ;;
	rt) bench_count 64 200 "${BENCH_RT_COUNT:-3000}" ;;
	*) bench_count "$2" ;;
	esac
}

# bench_exec OP SIZE SIDE CFG N PORT: one run of N messages by SIDE (the peer
# in configuration CFG); prints what its tool reported (perf_run's, rping's
# wall time in ms, ulp_timed's).
bench_exec() {
	local op=$1 size=$2 side=$3 cfg=$4 n=$5 port=$6 depth ev=
	depth=$(bench_depth "$size")
	if [ "$side" = ulp ]; then
		case $op in
		rping) ulp_rping_time $BENCH_ADDR $port "$size" "$n" ;;
		rping_siw) ulp_rping_time $BENCH_SIW_ADDR $port "$size" "$n" ;;
		*) ULP_DEV=$(op_dev "$op") ulp_timed $(ulp_args "$op" "$size" "$depth") count="$n" ;;
		esac
		return
	fi
	[ "$cfg" != event ] || ev=1
	case $op in
	# perftest on siw0: rdma_cm connects its QPs (-R), to siw0's address.
	rc_*_siw) PERF_DEV=siw0 PERF_CM_ADDR=$BENCH_SIW_ADDR PERF_EVENTS=$ev \
		perf_run ib_$(echo "${op%_siw}" | sed 's/^rc_//')_bw $port "$size" "$n" "$depth" \
			$(perf_op_args "${op%_siw}" "$depth") $(peer_cfg_args $cfg) ;;
	rc_send) PERF_EVENTS=$ev perf_run ib_send_bw $port "$size" "$n" "$depth" $(perf_op_args $op "$depth") $(peer_cfg_args $cfg) ;;
	# perftest's UD receiver waits for every datagram and fails when rxe
	# drops one (no receive posted in time): it keeps 512 posted; the ULP
	# keeps 4 x depth and counts its losses. Both report what arrived.
	ud_send) PERF_EVENTS=$ev PERF_RECEIVER=1 perf_run ib_send_bw $port "$size" "$n" "$depth" -r 512 -c UD $(peer_cfg_args $cfg) ;;
	rc_write) PERF_EVENTS=$ev perf_run ib_write_bw $port "$size" "$n" "$depth" $(peer_cfg_args $cfg) ;;
	rc_read) PERF_EVENTS=$ev perf_run ib_read_bw $port "$size" "$n" "$depth" $(perf_op_args $op "$depth") $(peer_cfg_args $cfg) ;;
	lat_send) perf_run ib_send_lat $port "$size" "$n" 1 ;;
	lat_write) perf_run ib_write_lat $port "$size" "$n" 1 ;;
	rping) rping_time $BENCH_ADDR $port "$size" "$n" ;;
	rping_siw) rping_time $BENCH_SIW_ADDR $port "$size" "$n" ;;
	esac
}

# What a side costs before and after its messages (the peer's process
# start-up, perftest's TCP exchange, both sides' QPs and buffers) stays out
# of its figures: perftest times its own loop and the ULP its messages, and
# the CPU per message and rping's round trips are taken over the messages
# past a run of BENCH_FIXED_N of the same side and configuration, before the
# rounds. (perftest's start-up alone was 540 ms of CPU under TCG, 27 us a
# message of a 20,000-message run; the ULP's, 20-30 ms.) Quick mode, which
# gives no figure, runs too few messages for the difference to mean
# anything, and measures no fixed cost.
BENCH_FIXED_N=16
# bench_fixed CASE OP SIZE SIDE CFG: that run; keeps "TICKS MS" (MS: rping's
# wall time) in /tmp/fixed-CASE-SIDE-CFG.
bench_fixed() {
	local case=$1 op=$2 size=$3 side=$4 cfg=$5 c0 out ms=0
	next_port
	c0=$(cpu_ticks)
	out=$(PERF_NO_FIGURE=1 bench_exec "$op" "$size" "$side" "$cfg" $BENCH_FIXED_N $BENCH_PORT) || {
		bench_say "fail case=$case side=$side cfg=$cfg round=0 (the $BENCH_FIXED_N-message run of the fixed costs)"
		return 1
	}
	local ticks=$(( $(cpu_ticks) - c0 ))
	case $op in rping*) ms=$out ;; esac
	echo "$ticks $ms" > /tmp/fixed-$case-$side-$cfg
	bench_say "fixed case=$case side=$side cfg=$cfg msgs=$BENCH_FIXED_N ticks=$ticks ms=$ms"
}

# bench_one CASE KIND OP SIZE SIDE CFG ROUND: one timed run; prints its line.
bench_one() {
	local case=$1 kind=$2 op=$3 size=$4 side=$5 cfg=$6 round=$7
	local n c0 c1 out value p99=0 msgs lost=0 fixed_t=0 fixed_ms=0 fixed_n=0
	n=$(bench_n "$kind" "$size")
	local rc try
	# perftest times a run by the cycle counter of whatever CPU it runs on;
	# in a TCG guest whose kernel marks the TSC unstable (the clocksource
	# watchdog's "skewed" message) an end stamp was once seen behind the
	# start one and the client printed zeros (ib_write_bw -l 8, 64 B, in the
	# CI run of 9b5a283). A peer run with no figure (perf_run's 2) runs once
	# more, said in the report, its CPU counted afresh; a second one, or any
	# other failure, fails the case.
	for try in 1 2; do
		next_port
		c0=$(cpu_ticks)
		out=$(bench_exec "$op" "$size" "$side" "$cfg" "$n" $BENCH_PORT)
		rc=$?
		c1=$(cpu_ticks)
		[ $try = 1 ] && [ $rc = 2 ] && [ "$side" = peer ] || break
		bench_say "note case=$case cfg=$cfg round=$round: perftest reported no figure (its client: $(awk '/#bytes/ { getline; print; exit }' /tmp/perf-c)); it ran again"
	done
	if [ $rc != 0 ] || [ -z "$out" ]; then
		bench_say "fail case=$case side=$side cfg=$cfg round=$round"
		return 1
	fi
	if [ -f /tmp/fixed-$case-$side-$cfg ]; then
		read -r fixed_t fixed_ms < /tmp/fixed-$case-$side-$cfg
		fixed_n=$BENCH_FIXED_N
	fi
	msgs=$n
	set -- $out
	case "$side:$kind" in
	peer:rate) value=$1 ;;
	peer:bw) value=$2 ;;
	peer:lat) value=$1; p99=$2 ;;
	# Round trips past the fixed run's, over the time past its time.
	*:rt) msgs=$((n - fixed_n))
		value=$(awk -v n=$msgs -v ms=$(($1 - fixed_ms)) 'BEGIN { printf "%.1f", (ms > 0 ? n * 1000 / ms : 0) }') ;;
	# UD: the datagrams that arrived, over the sender's time.
	ulp:rate) msgs=$1; [ "$op" != ud_send ] || { msgs=$5; lost=$6; }
		value=$(per_s "$msgs" "$2") ;;
	ulp:bw) msgs=$1; [ "$op" != ud_send ] || { msgs=$5; lost=$6; }
		value=$(awk -v m="$msgs" -v us="$2" -v s="$size" 'BEGIN { printf "%.2f", m * s / us }') ;;
	# The ULP measures round trips; perftest reports half of one.
	ulp:lat) msgs=$1; value=$(awk -v us="$3" 'BEGIN { printf "%.2f", us / 2 }')
		p99=$(awk -v us="$4" 'BEGIN { printf "%.2f", us / 2 }') ;;
	esac
	if ! awk -v v="$value" 'BEGIN { exit !(v + 0 > 0) }'; then
		bench_say "fail case=$case side=$side cfg=$cfg round=$round (a figure of 0: $out)"
		return 1
	fi
	local cpu t=$((c1 - c0 - fixed_t)) m=$msgs
	# rt's msgs are already past the fixed run's.
	[ "$kind" = rt ] || m=$((msgs - fixed_n))
	[ "$t" -ge 0 ] || t=0
	cpu=$(awk -v t=$t -v m="$m" 'BEGIN { printf "%.2f", t * 10000 / (m > 0 ? m : 1) }')
	bench_say "run case=$case side=$side cfg=$cfg round=$round value=$value p99=$p99 msgs=$msgs lost=$lost cpu_us=$cpu"
}

# bench_check CASE KIND OP SIZE: the case's validated run, before timing.
bench_check() {
	local case=$1 kind=$2 op=$3 size=$4 depth n=200 what
	depth=$(bench_depth "$size")
	[ "$size" -le 65536 ] || n=32
	case $op in
	rping | rping_siw)
		local a=$BENCH_ADDR
		[ $op = rping ] || a=$BENCH_SIW_ADDR
		next_port; local p1=$BENCH_PORT
		next_port; local p2=$BENCH_PORT
		if rping_time $a $p1 "$size" 50 -V > /dev/null && ulp_rping_time $a $p2 "$size" 50 validate=1 > /dev/null; then
			bench_say "check case=$case ok rping -V and the ULP validated 50 round trips each"
		else
			bench_say "check case=$case FAIL"
		fi
		return ;;
	esac
	local ok=ulp_clean
	# UD may drop a datagram: counted as lost, never hidden.
	[ "$op" != ud_send ] || ok=ulp_ud_ok
	if ulp_ctl start dev="$(op_dev "$op")" validate=1 wait=1 $(ulp_args "$op" "$size" "$depth") count=$n &&
		$ok "$(ulp_last_id)" "$n" 0 > /tmp/check 2>&1; then
		what="the ULP validated $n messages"
		[ "$op" != ud_send ] || what="$what ($(ulp_stat "$(ulp_last_id)" lost) lost)"
		[ "$kind" = lat ] || what="$what (perftest has no data check)"
		bench_say "check case=$case ok $what"
	else
		cat /tmp/check > /dev/console
		bench_say "check case=$case FAIL"
	fi
}

# Allocations on the ULP's per-message path: kmem events by call stack during
# a run of N and of 10 x N messages; the stacks through the ULP or
# kernel::rdma must not grow with the messages.
TRACING=/sys/kernel/tracing
bench_alloc() {
	local n ours total key='hist:keys=common_stacktrace:vals=hitcount' e
	[ -d $TRACING/events/kmem ] || mount -t tracefs tracefs $TRACING 2> /dev/null
	[ -d $TRACING/events/kmem ] || { bench_say "alloc unavailable (no tracefs)"; return; }
	for n in 1000 10000; do
		for e in kmalloc kmem_cache_alloc; do echo "$key" > $TRACING/events/kmem/$e/trigger; done
		ulp_ctl start dev=rxe0 validate=0 wait=1 $(ulp_args rc_send 64 32) count=$n
		for e in kmalloc kmem_cache_alloc; do
			cat $TRACING/events/kmem/$e/hist
			echo "!$key" > $TRACING/events/kmem/$e/trigger
		done > /tmp/hist
		set -- $(awk '/common_stacktrace/ { ours = 0 } /rdma_rust_ulp|4rdma/ { ours = 1 }
			/hitcount:/ { for (i = 1; i <= NF; i++) if ($i == "hitcount:") h = $(i + 1);
				all += h; if (ours) mine += h }
			END { print mine + 0, all + 0 }' /tmp/hist)
		bench_say "alloc case=rc_send_64 msgs=$n ulp_and_kernel_rdma=$1 all=$2"
		[ "$1" = 0 ] || grep -B2 -A14 'rdma_rust_ulp\|4rdma' /tmp/hist | head -60 > /dev/console
	done
}

# What rxe costs by itself, measured by both sides at their cheapest: the
# message rate of 1-byte messages of each op (64 deep; the ULP in batches of
# 8, perftest busy-polling and in event mode, with a post list of 8), where
# the bytes cost nothing, and the byte rate of 1 MiB messages of each RC op,
# where the per-message work is negligible against the bytes. The report
# takes the best figure of each, and says whose it is, as what rxe allows.
bench_floor() {
	local op out n tool depth args cfg
	n=$(bench_count 1 2000 40000)
	for op in "rc send" "rc write" "rc read" "ud send"; do
		set -- $op
		out=$(ulp_timed mode=$1 op=$2 size=1 depth=64 batch=8 count="$n") &&
			bench_say "floor what=${1}_${2}_1B tool=ulp msgs_per_s=$(set -- $out; per_s "$1" "$2")"
		case $op in
		"rc send") tool=ib_send_bw depth=64 args="-r 128" ;;
		"rc write") tool=ib_write_bw depth=64 args= ;;
		"rc read") tool=ib_read_bw depth=32 args="-o 32" ;;
		"ud send") tool=ib_send_bw depth=64 args="-r 512 -c UD" ;;
		esac
		for cfg in list event; do
			[ $cfg != event ] || has_events $tool || continue
			next_port
			out=$(PERF_EVENTS=$([ $cfg = event ] && echo 1) perf_run $tool $BENCH_PORT 1 "$n" $depth $args $(peer_cfg_args $cfg)) &&
				bench_say "floor what=${1}_${2}_1B tool=peer cfg=$cfg msgs_per_s=${out%% *}"
		done
	done
	n=$(bench_count 1048576 16 256)
	for op in send write read; do
		out=$(ulp_timed mode=rc op=$op size=1m depth=8 count="$n") &&
			bench_say "floor what=rc_${op}_1M tool=ulp MB_per_s=$(set -- $out; awk -v m="$1" -v us="$2" 'BEGIN { printf "%.1f", m * 1048576 / us }')"
		case $op in
		send) args="-r 16" ;;
		write) args= ;;
		read) args="-o 8" ;;
		esac
		for cfg in base event; do
			[ $cfg != event ] || has_events $op || continue
			next_port
			out=$(PERF_EVENTS=$([ $cfg = event ] && echo 1) perf_run ib_${op}_bw $BENCH_PORT 1048576 "$n" 8 $args) &&
				bench_say "floor what=rc_${op}_1M tool=peer cfg=$cfg MB_per_s=${out#* }"
		done
	done
}

mode_bench() {
	BENCH_ROUNDS=$(arg rdmatest.rounds); BENCH_ROUNDS=${BENCH_ROUNDS:-3}
	BENCH_QUICK=$(arg rdmatest.quick)
	BENCH_BYTES=$(arg rdmatest.bytes); BENCH_BYTES=${BENCH_BYTES:-67108864}
	LAT_REPS=$(arg rdmatest.lat_reps); LAT_REPS=${LAT_REPS:-3}
	[ -z "$BENCH_QUICK" ] || LAT_REPS=1
	# The ULP's data-path options in the timed throughput runs (unset: ulp_args').
	[ -z "$(arg rdmatest.ulp_fast)" ] || ULP_FAST=$(arg rdmatest.ulp_fast | tr , ' ')
	# The latency runs busy-poll a direct CQ, as perftest's latency tools poll
	# theirs (same boot, softirq handlers: p50 223 us vs ib_send_lat's 102 us;
	# spinning: 95 us vs 134 us, and 79 vs 65 in the next boot: within the
	# noise). rdmatest.ulp_lat=none: the default poll.
	ULP_LAT=$(arg rdmatest.ulp_lat | tr , ' ')
	case $ULP_LAT in
	'') ULP_LAT='poll=direct spin=1' ;;
	none) ULP_LAT= ;;
	esac
	setup_veths
	load_rxe && add_rxe rxe0 veth0 || { bench_say "rxe setup failed"; return; }
	# Without siw the *_siw cases fail; the others run.
	setup_siw || bench_say "siw setup failed: the *_siw cases will fail"
	insmod /lib/modules/extra/rdma_rust_ulp.ko || { bench_say "insmod failed"; return; }
	bench_say "start rounds=$BENCH_ROUNDS bytes=$BENCH_BYTES quick=${BENCH_QUICK:-0} cpus=$(nproc) ulp_fast='${ULP_FAST-batch=8 (read, siw0: none)}' ulp_lat='$ULP_LAT'"
	rdma_resources_but_pool > /tmp/res-before
	if [ "$(arg rdmatest.cases)" = script ]; then
		. /lib/rdmatest/script.sh
		bench_say "end"
		return
	fi
	local r c k o s only
	printf '%s\n%s\n' "$BENCH_CASES" "$(sweep_cases)" | grep . > /tmp/bench-cases
	# rdmatest.cases=A,B: only those cases (and no floor or allocation count).
	only=$(arg rdmatest.cases)
	if [ -n "$only" ]; then
		echo "$only" | tr , '\n' | while read -r c; do grep "^$c " /tmp/bench-cases; done > /tmp/bench-only
		mv /tmp/bench-only /tmp/bench-cases
	fi
	while read -r c k o s; do
		bench_say "case case=$c kind=$k op=$o size=$s"
		bench_check "$c" "$k" "$o" "$s" < /dev/null
		ulp_ctl clear
	done < /tmp/bench-cases
	local rep reps cfg sc
	[ -n "$BENCH_QUICK" ] || while read -r c k o s; do
		bench_fixed "$c" "$o" "$s" ulp - < /dev/null
		for cfg in $(peer_cfgs "$k" "$o"); do
			bench_fixed "$c" "$o" "$s" peer $cfg < /dev/null
		done
		ulp_ctl clear
	done < /tmp/bench-cases
	# A latency run takes a second and its p50 moves by a third from run to
	# run under TCG: those cases take BENCH_LAT_REPS (3) pairs per round.
	for r in $(seq 1 "$BENCH_ROUNDS"); do
		while read -r c k o s; do
			reps=1
			[ "$k" != lat ] || reps=$LAT_REPS
			for rep in $(seq 1 "$reps"); do
				for sc in $(side_cfgs "$k" "$o" $((r + rep - 1))); do
					bench_one "$c" "$k" "$o" "$s" ${sc%%:*} ${sc#*:} "$r" < /dev/null
				done
			done
			ulp_ctl clear
		done < /tmp/bench-cases
	done
	# rdma_rust_nvmet against nvmet-rdma, the stock host on both:
	# rdmatest.cases=nvmf runs only those.
	case ",$only," in
	,, | *,nvmf,*) bench_nvmf ;;
	esac
	# rdma_rust_nvme against nvme-rdma, nvmet-rdma the target of both:
	# rdmatest.cases=nvmh runs only those.
	case ",$only," in
	,, | *,nvmh,*) bench_nvmh ;;
	esac
	# rdma_rust_nvme + rdma_rust_nvmet against nvme-rdma + nvmet-rdma:
	# rdmatest.cases=nvmp runs only those.
	case ",$only," in
	,, | *,nvmp,*) bench_nvmp ;;
	esac
	if [ -z "$only" ]; then
		bench_floor
		bench_alloc
	fi
	ulp_ctl clear
	rmmod rdma_rust_ulp
	if wait_for 10 resources_but_pool_same_as /tmp/res-before; then
		bench_say "resources back to where they were"
	else
		bench_say "resources LEFT BEHIND: $(rdma resource show | tr '\n' ';')"
	fi
	bench_say "end"
}

# --- two guests: a (10.88.0.1) is the server or target, b (10.88.0.2) sends --
# Both walk the same cases and rounds. Each run is a fixed exchange of words
# over TCP (nc_send / nc_recv of guest-peers.sh) on ports of its own: every
# step sends its word even when its part failed ("fail"), so that one failed
# run cannot leave the two guests out of step. b prints the run lines; a
# prints `cpu` lines with its own CPU time, which the report adds.
BENCH_XCASES="
cross_send_4k bw cross_send 4096
cross_write_64k bw cross_write 65536
"
XPORT=6000

# cross_tool OP: the perftest tool and its extra arguments for a cross case.
cross_tool() {
	case $1 in
	cross_send) echo "ib_send_bw -r $((2 * $2))" ;;
	*) echo "ib_write_bw" ;;
	esac
}

# cross_a CASE OP SIZE SIDE CFG ROUND N DEPTH: a's part of one run.
cross_a() {
	local case=$1 op=$2 size=$3 side=$4 cfg=$5 round=$6 n=$7 depth=$8 p=$XPORT c0 id ea word ev=
	c0=$(cpu_ticks)
	if [ "$side" = peer ]; then
		set -- $(cross_tool "$op" "$depth")
		[ "$cfg" != event ] || ev=$(perf_event_arg $1 server)
		timeout 300 /usr/bin/$1 -d rxe0 -s "$size" -n "$n" -t "$depth" -F -p "$p" $2 $3 $ev $(peer_cfg_args "$cfg") > /tmp/perf-s 2>&1 &
		local spid=$!
		word=go
		wait_for 20 tcp_listening "$p" || word=fail
		nc_send 10.88.0.2 $((p + 1)) $word
		[ $word = go ] || kill $spid 2> /dev/null
		wait $spid || { tail -n 5 /tmp/perf-s > /dev/console; bench_say "fail case=$case side=peer round=$round host=a"; }
	else
		local what="op=send count=$n"
		[ "$op" = cross_send ] || what="op=write"
		id=
		ulp_ctl start role=server dev=rxe0 mode=rc $what size="$size" depth="$depth" validate=0 && id=$(ulp_last_id)
		nc_send 10.88.0.2 $((p + 1)) "$( [ -n "$id" ] && ulp_endpoint "$id" || echo fail)"
		ea=$(nc_recv $((p + 2)))
		word=fail
		if [ -n "$id" ] && [ -n "$ea" ] && [ "$ea" != fail ] && ulp_ctl connect id="$id" peer="$ea"; then
			word="ready $(ulp_target "$id")"
		fi
		nc_send 10.88.0.2 $((p + 3)) "$word"
		# The client says when it is done: a SEND server ends with its last
		# message, a WRITE target only when stopped.
		nc_recv $((p + 4)) > /dev/null
		[ -z "$id" ] || ulp_ctl stop id="$id"
	fi
	bench_say "cpu case=$case side=$side cfg=$cfg round=$round host=a ticks=$(( $(cpu_ticks) - c0 ))"
}

# cross_b CASE OP SIZE SIDE CFG ROUND N DEPTH: b's part; prints the run line.
cross_b() {
	local case=$1 op=$2 size=$3 side=$4 cfg=$5 round=$6 n=$7 depth=$8 p=$XPORT c0 out= id= eb r ev=
	c0=$(cpu_ticks)
	if [ "$side" = peer ]; then
		set -- $(cross_tool "$op" "$depth")
		[ "$cfg" != event ] || ev=$(perf_event_arg $1 client)
		if [ "$(nc_recv $((p + 1)))" = go ] &&
			timeout 300 /usr/bin/$1 -d rxe0 -s "$size" -n "$n" -t "$depth" -F -p "$p" $2 $3 $ev $(peer_cfg_args "$cfg") 10.88.0.1 > /tmp/perf-c 2>&1; then
			bench_say "note $1 $ev $(peer_cfg_args "$cfg") between the guests: $(awk '/#bytes/ { getline; print; exit }' /tmp/perf-c)"
			# A figure of 0 is no figure: the run failed.
			out=$(awk '/MsgRate/ { getline; if ($4 + 0 > 0) printf "%.2f", $4 * 1.048576; exit }' /tmp/perf-c)
		else
			tail -n 5 /tmp/perf-c > /dev/console
		fi
	else
		local what="op=send validate=0"
		[ "$op" = cross_send ] || what="op=write validate=0"
		eb=$(nc_recv $((p + 1)))
		[ -n "$eb" ] && [ "$eb" != fail ] &&
			ulp_ctl start role=client dev=rxe0 mode=rc $what size="$size" depth="$depth" \
				count="$n" peer="$eb" hold=1 && id=$(ulp_last_id)
		nc_send 10.88.0.1 $((p + 2)) "$( [ -n "$id" ] && ulp_endpoint "$id" || echo fail)"
		r=$(nc_recv $((p + 3)))
		if [ -n "$id" ] && [ "${r%% *}" = ready ]; then
			if [ "$op" = cross_send ]; then
				ulp_ctl go id="$id"
			else
				ulp_ctl go id="$id" remote="${r#ready }"
			fi && ulp_ctl wait id="$id"
		fi
		nc_send 10.88.0.1 $((p + 4)) done
		if [ -n "$id" ] && [ "$(ulp_stat "$id" errors)" = 0 ] && [ "$(ulp_stat "$id" messages)" = "$n" ]; then
			out=$(awk -v m="$n" -v us="$(ulp_stat "$id" elapsed_us)" -v s="$size" 'BEGIN { printf "%.2f", m * s / us }')
		else
			[ -z "$id" ] || ulp_row "$id" > /dev/console
		fi
	fi
	if [ -z "$out" ]; then
		bench_say "fail case=$case side=$side cfg=$cfg round=$round"
		return 1
	fi
	local t=$(( $(cpu_ticks) - c0 ))
	bench_say "run case=$case side=$side cfg=$cfg round=$round value=$out p99=0 msgs=$n lost=0 cpu_us=$(awk -v t=$t -v m="$n" 'BEGIN { printf "%.2f", t * 10000 / m }')"
}

mode_bench_cross() {
	local host=$1 ip other
	BENCH_ROUNDS=$(arg rdmatest.rounds); BENCH_ROUNDS=${BENCH_ROUNDS:-3}
	BENCH_QUICK=$(arg rdmatest.quick)
	BENCH_BYTES=$(arg rdmatest.bytes); BENCH_BYTES=${BENCH_BYTES:-67108864}
	if [ "$host" = a ]; then ip=10.88.0.1 other=10.88.0.2; else ip=10.88.0.2 other=10.88.0.1; fi
	setup_peer $ip fd88::${ip##*.} || { bench_say "rxe setup failed"; return; }
	insmod /lib/modules/extra/rdma_rust_ulp.ko || { bench_say "insmod failed"; return; }
	wait_for 60 ping -c 1 -W 1 $other || { bench_say "fail: no route to $other"; return; }
	# What one round trip costs between the guests, before the runs.
	if [ "$host" = b ]; then
		bench_say "note ICMP to the other guest: $(ping -c 20 -i 0.05 $other | tail -n 1)"
		local t0
		t0=$(uptime_ms)
		rping_to 10.88.0.1 7600 50 4096 > /dev/null &&
			bench_say "note rping 50 x 4 KiB to the other guest: $(( $(uptime_ms) - t0 )) ms"
		t0=$(uptime_ms)
		rping_to 10.88.0.1 7601 50 64 > /dev/null &&
			bench_say "note rping 50 x 64 B to the other guest: $(( $(uptime_ms) - t0 )) ms"
	else
		timeout 300 rping -s -a $ip -p 7601 -C 50 -S 64 -V > /dev/null 2>&1 &
		timeout 300 rping -s -a $ip -p 7600 -C 50 -S 4096 -V > /dev/null 2>&1
		wait
	fi
	echo "$BENCH_XCASES" | grep . > /tmp/bench-cases
	local r c k o s n side cfg sc depth=16
	[ "$host" = a ] || while read -r c k o s; do
		bench_say "case case=$c kind=$k op=$o size=$s"
	done < /tmp/bench-cases
	for r in $(seq 1 "$BENCH_ROUNDS"); do
		while read -r c k o s; do
			# A quarter of the loopback runs' bytes: the two guests share the host's cores.
			n=$(BENCH_BYTES=$((BENCH_BYTES / 4)) bench_count "$s" 100 2000)
			for sc in $(side_cfgs "$k" "$o" "$r"); do
				side=${sc%%:*} cfg=${sc#*:}
				XPORT=$((XPORT + 10))
				if [ "$host" = a ]; then
					cross_a "$c" "$o" "$s" $side $cfg "$r" "$n" $depth < /dev/null
				else
					cross_b "$c" "$o" "$s" $side $cfg "$r" "$n" $depth < /dev/null
				fi
				[ "$r" != 1 ] || bench_say "note $host rxe0 counters after $c ($side $cfg): $(counters rxe0)"
				ulp_ctl clear
			done
		done < /tmp/bench-cases
	done
	bench_say "end"
}
