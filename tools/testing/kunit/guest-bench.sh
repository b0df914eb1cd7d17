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
bench_say() { echo "rdmabench: $*" > /dev/console; }

# Busy time of every CPU since boot, in USER_HZ ticks (10 ms): user, nice,
# system, irq and softirq (steal is the host's, not the guest's).
cpu_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8; exit }' /proc/stat; }
# per_s MSGS MICROSECONDS: messages per second
per_s() { awk -v m="$1" -v us="$2" 'BEGIN { printf "%.0f", m * 1e6 / (us > 0 ? us : 1) }'; }
# bench_sides N: both sides in the order of run N (odd: the peer first).
bench_sides() { if [ $(($1 % 2)) = 1 ]; then echo peer ulp; else echo ulp peer; fi; }
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
# 1 MiB cases, 50 s a side on the test kernel.
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
	echo "$n"
}
# The queue depth of both sides: deep for small messages, shallower for
# large ones (the ULP keeps 2 x depth receive buffers of the message size).
bench_depth() { if [ "$1" -le 65536 ]; then echo 32; else echo 8; fi; }

# --- the peer: perftest and rping ----------------------------------------------
# perf_run TOOL PORT SIZE COUNT DEPTH [ARGS...]: a perftest server and client
# on rxe0; prints "MSGS_PER_S MB_PER_S" (bw tools: perftest's MsgRate, and its
# average BW in MiB/s as 10^6 bytes/s) or "P50 P99" in us (lat tools), and
# logs the client's result line.
perf_run() {
	local tool=$1 port=$2 size=$3 n=$4 depth=$5
	shift 5
	local common="-d rxe0 -s $size -n $n -F -p $port"
	case $tool in
	*_bw) common="$common -t $depth" ;;
	esac
	timeout 300 /usr/bin/$tool $common "$@" > /tmp/perf-s 2>&1 &
	local spid=$!
	wait_for 20 tcp_listening "$port" || { kill $spid 2> /dev/null; echo "server did not listen" >&2; return 1; }
	timeout 300 /usr/bin/$tool $common "$@" 127.0.0.1 > /tmp/perf-c 2>&1
	local crc=$?
	wait $spid
	local src=$?
	if [ $crc != 0 ] || [ $src != 0 ]; then
		cat /tmp/perf-c /tmp/perf-s >&2
		return 1
	fi
	# The client's result line; ib_send_bw's client was seen to print zeros
	# (256 x 256 KiB), where its server, the receiver, has the figures.
	local f=/tmp/perf-c
	awk '/MsgRate/ { getline; exit !($5 == 0) }' $f && f=/tmp/perf-s
	bench_say "note $tool $* ($([ $f = /tmp/perf-c ] && echo client || echo server)): $(awk '/#bytes/ { getline; print; exit }' $f)"
	case $tool in
	*_lat)
		# #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9%
		awk '/t_typical/ { getline; print $5, $8; exit }' $f ;;
	*)
		# #bytes #iterations BW_peak BW_average MsgRate[Mpps]
		awk '/MsgRate/ { getline; printf "%.0f %.2f\n", $5 * 1e6, $4 * 1.048576; exit }' $f ;;
	esac
}

# rping_time PORT SIZE COUNT [-V]: rping server and client over rdma_cm;
# prints the client's wall time in ms. rping's client exits 255 when its CM
# thread reads the event channel its main thread has just destroyed at the
# end of a run ("rdma_get_cm_event: Bad file descriptor", rdma-core's
# teardown race): that pair runs once more, and the report says so; any
# other failure fails the case.
rping_time() {
	local port=$1 size=$2 n=$3 try
	shift 3
	for try in 1 2; do
		if rping_pair $BENCH_ADDR "$port" "$n" "$size" "$@" > /tmp/rping-pair 2>&1; then
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
# ELAPSED_US P50_US P99_US" from its row of the stats table.
ulp_timed() {
	ulp_ctl start dev=rxe0 validate=0 wait=1 "$@" || return 1
	local id
	id=$(ulp_last_id)
	[ "$(ulp_stat "$id" errors)" = 0 ] || { ulp_row "$id" >&2; return 1; }
	echo "$(ulp_stat "$id" messages) $(ulp_stat "$id" elapsed_us) $(ulp_stat "$id" lat_p50_us) $(ulp_stat "$id" lat_p99_us)"
}

# ulp_rping_time PORT SIZE COUNT [validate=1]: the ULP's rping-protocol
# client against its own server; prints the client's wall time in ms.
ulp_rping_time() {
	local port=$1 size=$2 n=$3 val=${4:-validate=0} t0 t1 sid rc
	ulp_ctl start cm=server addr=$BENCH_ADDR port="$port" count="$n" $val || return 1
	sid=$(ulp_last_id)
	t0=$(uptime_ms)
	ulp_ctl start cm=client addr=$BENCH_ADDR port="$port" size="$size" count="$n" $val wait=1
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
rdma_resources_but_pool() {
	rdma_resources | awk -v p="$(pool_cqs)" '{ for (i = 1; i < NF; i++) if ($i == "cq") $(i + 1) -= p; print }'
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
# BENCH_ULP_FAST replaces these for every op.
ulp_args() {
	local op=$1 size=$2 depth=$3 fast=${ULP_FAST-batch=8}
	case $op in
	rc_send) echo "mode=rc op=send size=$size depth=$depth $fast" ;;
	rc_write) echo "mode=rc op=write size=$size depth=$depth $fast" ;;
	rc_read) echo "mode=rc op=read size=$size depth=$depth ${ULP_FAST-}" ;;
	ud_send) echo "mode=ud op=send size=$size depth=$depth $fast" ;;
	lat_send) echo "mode=rc op=send size=$size pingpong=1 $ULP_LAT" ;;
	lat_write) echo "mode=rc op=write size=$size pingpong=1 $ULP_LAT" ;;
	esac
}

# bench_one CASE KIND OP SIZE SIDE ROUND: one timed run; prints its line.
bench_one() {
	local case=$1 kind=$2 op=$3 size=$4 side=$5 round=$6
	local depth n c0 c1 out value p99=0 msgs
	depth=$(bench_depth "$size")
	case $kind in
	lat) n=$(bench_count 64 2000 "${BENCH_LAT_COUNT:-5000}") ;;
	rt) n=$(bench_count 64 200 "${BENCH_RT_COUNT:-3000}") ;;
	*) n=$(bench_count "$size") ;;
	esac
	next_port
	local port=$BENCH_PORT
	c0=$(cpu_ticks)
	if [ "$side" = peer ]; then
		case $op in
		rc_send) out=$(perf_run ib_send_bw $port "$size" "$n" "$depth" -r $((2 * depth))) ;;
		# perftest's UD receiver waits for every datagram and fails when rxe
		# drops one (no receive posted in time): it keeps 512 posted; the
		# ULP keeps 2 x depth and counts its losses. Both report the sender.
		ud_send) out=$(perf_run ib_send_bw $port "$size" "$n" "$depth" -r 512 -c UD) ;;
		rc_write) out=$(perf_run ib_write_bw $port "$size" "$n" "$depth") ;;
		rc_read) out=$(perf_run ib_read_bw $port "$size" "$n" "$depth" -o "$depth") ;;
		lat_send) out=$(perf_run ib_send_lat $port "$size" "$n" 1) ;;
		lat_write) out=$(perf_run ib_write_lat $port "$size" "$n" 1) ;;
		rping) out=$(rping_time $port "$size" "$n") ;;
		esac
	else
		case $op in
		rping) out=$(ulp_rping_time $port "$size" "$n") ;;
		*) out=$(ulp_timed $(ulp_args "$op" "$size" "$depth") count="$n") ;;
		esac
	fi
	local rc=$?
	c1=$(cpu_ticks)
	if [ $rc != 0 ] || [ -z "$out" ]; then
		bench_say "fail case=$case side=$side round=$round"
		return 1
	fi
	msgs=$n
	set -- $out
	case "$side:$kind" in
	peer:rate) value=$1 ;;
	peer:bw) value=$2 ;;
	peer:lat) value=$1; p99=$2 ;;
	*:rt) value=$(awk -v n="$n" -v ms="$1" 'BEGIN { printf "%.1f", n * 1000 / (ms > 0 ? ms : 1) }') ;;
	ulp:rate) msgs=$1; value=$(per_s "$1" "$2") ;;
	ulp:bw) msgs=$1; value=$(awk -v m="$1" -v us="$2" -v s="$size" 'BEGIN { printf "%.2f", m * s / us }') ;;
	# The ULP measures round trips; perftest reports half of one.
	ulp:lat) msgs=$1; value=$(awk -v us="$3" 'BEGIN { printf "%.2f", us / 2 }')
		p99=$(awk -v us="$4" 'BEGIN { printf "%.2f", us / 2 }') ;;
	esac
	local cpu
	cpu=$(awk -v t=$((c1 - c0)) -v m="$msgs" 'BEGIN { printf "%.2f", t * 10000 / (m > 0 ? m : 1) }')
	bench_say "run case=$case side=$side round=$round value=$value p99=$p99 msgs=$msgs cpu_us=$cpu"
}

# bench_check CASE KIND OP SIZE: the case's validated run, before timing.
bench_check() {
	local case=$1 kind=$2 op=$3 size=$4 depth n=200 what
	depth=$(bench_depth "$size")
	[ "$size" -le 65536 ] || n=32
	case $op in
	rping)
		next_port; local p1=$BENCH_PORT
		next_port; local p2=$BENCH_PORT
		if rping_time $p1 "$size" 50 -V > /dev/null && ulp_rping_time $p2 "$size" 50 validate=1 > /dev/null; then
			bench_say "check case=$case ok rping -V and the ULP validated 50 round trips each"
		else
			bench_say "check case=$case FAIL"
		fi
		return ;;
	esac
	local ok=ulp_clean
	# UD may drop a datagram: counted as lost, never hidden.
	[ "$op" != ud_send ] || ok=ulp_ud_ok
	if ulp_ctl start dev=rxe0 validate=1 wait=1 $(ulp_args "$op" "$size" "$depth") count=$n &&
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
# 8), where the bytes cost nothing, and the byte rate of 1 MiB messages of each
# RC op, where the per-message work is negligible against the bytes. The
# report takes the better side's figure of each as what rxe allows.
bench_floor() {
	local op out n args
	n=$(bench_count 1 2000 40000)
	for op in "rc send" "rc write" "rc read" "ud send"; do
		set -- $op
		out=$(ulp_timed mode=$1 op=$2 size=1 depth=64 batch=8 count="$n") &&
			bench_say "floor what=${1}_${2}_1B tool=ulp msgs_per_s=$(set -- $out; per_s "$1" "$2")"
		next_port
		case $op in
		"rc send") args="ib_send_bw $BENCH_PORT 1 $n 64 -r 128" ;;
		"rc write") args="ib_write_bw $BENCH_PORT 1 $n 64" ;;
		"rc read") args="ib_read_bw $BENCH_PORT 1 $n 32 -o 32" ;;
		"ud send") args="ib_send_bw $BENCH_PORT 1 $n 64 -r 512 -c UD" ;;
		esac
		out=$(perf_run $args) &&
			bench_say "floor what=${1}_${2}_1B tool=peer msgs_per_s=${out%% *}"
	done
	n=$(bench_count 1048576 16 256)
	for op in send write read; do
		out=$(ulp_timed mode=rc op=$op size=1m depth=8 count="$n") &&
			bench_say "floor what=rc_${op}_1M tool=ulp MB_per_s=$(set -- $out; awk -v m="$1" -v us="$2" 'BEGIN { printf "%.1f", m * 1048576 / us }')"
		next_port
		case $op in
		send) args="-r 16" ;;
		write) args= ;;
		read) args="-o 8" ;;
		esac
		out=$(perf_run ib_${op}_bw $BENCH_PORT 1048576 "$n" 8 $args) &&
			bench_say "floor what=rc_${op}_1M tool=peer MB_per_s=${out#* }"
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
	insmod /lib/modules/extra/rdma_rust_ulp.ko || { bench_say "insmod failed"; return; }
	bench_say "start rounds=$BENCH_ROUNDS bytes=$BENCH_BYTES quick=${BENCH_QUICK:-0} cpus=$(nproc) ulp_fast='${ULP_FAST-batch=8 (read: none)}' ulp_lat='$ULP_LAT'"
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
	# A latency run takes a second and its p50 moves by a third from run to
	# run under TCG: those cases take BENCH_LAT_REPS (3) pairs per round.
	local rep reps side
	for r in $(seq 1 "$BENCH_ROUNDS"); do
		while read -r c k o s; do
			reps=1
			[ "$k" != lat ] || reps=$LAT_REPS
			for rep in $(seq 1 "$reps"); do
				for side in $(bench_sides $((r + rep - 1))); do
					bench_one "$c" "$k" "$o" "$s" $side "$r" < /dev/null
				done
			done
			ulp_ctl clear
		done < /tmp/bench-cases
	done
	# rdma_rust_blk against nvme-rdma (guest-bench-blk.sh): rdmatest.cases=blk
	# runs only those.
	case ",$only," in
	,, | *,blk,*) bench_blk ;;
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

# cross_a CASE OP SIZE SIDE ROUND N DEPTH: a's part of one run.
cross_a() {
	local case=$1 op=$2 size=$3 side=$4 round=$5 n=$6 depth=$7 p=$XPORT c0 id ea word
	c0=$(cpu_ticks)
	if [ "$side" = peer ]; then
		set -- $(cross_tool "$op" "$depth")
		timeout 300 /usr/bin/$1 -d rxe0 -s "$size" -n "$n" -t "$depth" -F -p "$p" $2 $3 > /tmp/perf-s 2>&1 &
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
	bench_say "cpu case=$case side=$side round=$round host=a ticks=$(( $(cpu_ticks) - c0 ))"
}

# cross_b CASE OP SIZE SIDE ROUND N DEPTH: b's part; prints the run line.
cross_b() {
	local case=$1 op=$2 size=$3 side=$4 round=$5 n=$6 depth=$7 p=$XPORT c0 out= id= eb r
	c0=$(cpu_ticks)
	if [ "$side" = peer ]; then
		set -- $(cross_tool "$op" "$depth")
		if [ "$(nc_recv $((p + 1)))" = go ] &&
			timeout 300 /usr/bin/$1 -d rxe0 -s "$size" -n "$n" -t "$depth" -F -p "$p" $2 $3 10.88.0.1 > /tmp/perf-c 2>&1; then
			bench_say "note $1 between the guests: $(awk '/#bytes/ { getline; print; exit }' /tmp/perf-c)"
			out=$(awk '/MsgRate/ { getline; printf "%.2f", $4 * 1.048576; exit }' /tmp/perf-c)
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
		bench_say "fail case=$case side=$side round=$round"
		return 1
	fi
	local t=$(( $(cpu_ticks) - c0 ))
	bench_say "run case=$case side=$side round=$round value=$out p99=0 msgs=$n cpu_us=$(awk -v t=$t -v m="$n" 'BEGIN { printf "%.2f", t * 10000 / m }')"
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
	local r c k o s n side depth=16
	[ "$host" = a ] || while read -r c k o s; do
		bench_say "case case=$c kind=$k op=$o size=$s"
	done < /tmp/bench-cases
	for r in $(seq 1 "$BENCH_ROUNDS"); do
		while read -r c k o s; do
			# A quarter of the loopback runs' bytes: the two guests share the host's cores.
			n=$(BENCH_BYTES=$((BENCH_BYTES / 4)) bench_count "$s" 100 2000)
			for side in $(bench_sides "$r"); do
				XPORT=$((XPORT + 10))
				if [ "$host" = a ]; then
					cross_a "$c" "$o" "$s" $side "$r" "$n" $depth < /dev/null
				else
					cross_b "$c" "$o" "$s" $side "$r" "$n" $depth < /dev/null
				fi
				[ "$r" != 1 ] || bench_say "note $host rxe0 counters after $c ($side): $(counters rxe0)"
				ulp_ctl clear
			done
		done < /tmp/bench-cases
	done
	bench_say "end"
}
