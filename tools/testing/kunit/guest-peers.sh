#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# The two-guest topology: peer-a and peer-b, two RoCE hosts joined by a QEMU
# socket network (rping, the ULP between the guests, over rdma_cm too).
# Sourced by guest-init.sh (the VM's /init), whose helpers it uses.

# Two guests on the 10.88.0.0/24 and fd88::/64 networks of a QEMU socket backend.
setup_peer() {
	ip link set lo up
	ip addr add "$1/24" dev eth0
	ip -6 addr add "$2/64" dev eth0 nodad
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
# nc_recv PORT [SECS]: what one sender hands to PORT (waits up to SECS, 180 s
# by default)
nc_recv() { timeout "${2:-180}" nc -l -p "$1" < /dev/null; }
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

# RDMA between the guests: b's server run is the target (registered when it is
# connected, listed on its `target` line), a's client WRITEs or READs it.
# ulp_peer_rdma_client OP VALIDATE PORT: PORT..PORT+3 carry the exchange.
ulp_peer_rdma_client() {
	local eb ea id tgt n=50 p=$3
	eb=$(nc_recv "$p"); [ -n "$eb" ] || { echo "no endpoint from the server"; return 1; }
	ulp_ctl start role=client dev=rxe0 mode=rc op="$1" size=16k depth=8 count=$n \
		validate="$2" peer="$eb" hold=1 || return 1
	id=$(ulp_last_id); ea=$(ulp_endpoint "$id")
	nc_send 10.88.0.2 $((p + 1)) "$ea" || { echo "the server did not take our endpoint"; return 1; }
	tgt=$(nc_recv $((p + 2))); [ -n "$tgt" ] || { echo "no target from the server"; return 1; }
	echo "server target $tgt"
	ulp_ctl go id="$id" remote="$tgt" && ulp_ctl wait id="$id" || return 1
	nc_send 10.88.0.2 $((p + 3)) done
	ulp_clean "$id" "$n" 0
}
ulp_peer_rdma_server() {
	local eb ea id tgt p=$2
	ulp_ctl start role=server dev=rxe0 mode=rc op="$1" size=16k depth=8 || return 1
	id=$(ulp_last_id); eb=$(ulp_endpoint "$id")
	nc_send 10.88.0.1 "$p" "$eb" || { echo "the client did not take our endpoint"; return 1; }
	ea=$(nc_recv $((p + 1))); [ -n "$ea" ] || { echo "no endpoint from the client"; return 1; }
	ulp_ctl connect id="$id" peer="$ea" || return 1
	tgt=$(ulp_target "$id")
	[ -n "$tgt" ] || { cat $ULP/stats; echo "no target line"; return 1; }
	nc_send 10.88.0.1 $((p + 2)) "$tgt" || return 1
	[ "$(nc_recv $((p + 3)))" = done ] || { echo "the client did not finish"; return 1; }
	ulp_ctl stop id="$id" || return 1
	ulp_row "$id"
	[ "$(ulp_stat "$id" errors)" = 0 ]
}

# UD may drop datagrams: what did not arrive is counted, and may be no more
# than ud_loss_bound allows.
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
	ud_arrived "ULP UD between the guests" "$got" "$n" &&
		[ "$(ulp_stat "$id" corrupt)" = 0 ] &&
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
# The same over IPv6.
cm_peer_a_rping_serves6() {
	timeout 300 rping -s -a fd88::1 -p 7306 -V > /tmp/rping-srv 2>&1
	rc=$?
	rping_log /tmp/rping-srv "rping -s -a fd88::1 -p 7306 -V (exit $rc)"
	[ $rc = 0 ]
}
cm_peer_b_ulp_to_rping6() {
	ulp_cm_start cm=client addr=fd88::1 port=7306 size=64 count="$count" wait=1 || return 1
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
	ud_arrived "ULP UD over rdma_cm between the guests" "$got" "$count" &&
		[ "$(ulp_stat "$id" corrupt)" = 0 ] &&
		[ "$(ulp_stat "$id" dup)" = 0 ] && [ "$(ulp_stat "$id" errors)" = 0 ]
}
cm_peer_a_ud_client() {
	local id
	ulp_cm_start cm=client mode=ud addr=10.88.0.2 port=7304 size=1024 count="$count" wait=1 || return 1
	id=$(ulp_last_id)
	nc_send 10.88.0.2 5006 done
	[ "$(ulp_stat "$id" messages)" = "$count" ] && [ "$(ulp_stat "$id" errors)" = 0 ]
}
# Multicast between the guests: two receivers on b joined to one group, the
# sender on a; each datagram reaches both of b's QPs.
cm_peer_b_mcast_receivers() {
	local r1 r2
	ulp_ctl start cm=server mode=ud addr=10.88.0.2 port=7307 mcast=239.88.0.7 count="$count" size=1024 || return 1
	r1=$(ulp_last_id)
	ulp_ctl start cm=server mode=ud addr=10.88.0.2 port=7308 mcast=239.88.0.7 count="$count" size=1024 ||
		{ ulp_ctl stop id="$r1"; return 1; }
	r2=$(ulp_last_id)
	nc_send 10.88.0.1 5007 joined || { ulp_ctl stop all; echo "the sender did not take our word"; return 1; }
	[ "$(nc_recv 5008)" = done ] || { ulp_ctl stop all; echo "the sender did not finish"; return 1; }
	mcast_receivers_ok "$count" "$r1" "$r2"
}
cm_peer_a_mcast_sender() {
	local id
	[ "$(nc_recv 5007)" = joined ] || { echo "the receivers did not join"; return 1; }
	ulp_ctl start cm=client mode=ud addr=10.88.0.1 port=7309 mcast=239.88.0.7 count="$count" size=1024 wait=1
	id=$(ulp_last_id)
	nc_send 10.88.0.2 5008 done
	ulp_row "$id"
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

# --- soft-iWARP between the guests: siw0 on each guest's second NIC, eth1
# (peer-a 10.89.0.1, peer-b 10.89.0.2; run.sh's peers gives each guest a
# second QEMU network). rdma_cm's iw_cm speaks TCP underneath, so a connect
# before the listen is refused by TCP rather than by the CM: the listener's
# side says "listening" (nc) before the other connects. Fewer round trips
# than on rxe0: each crosses two guests' TCP stacks under TCG.
SIW_A=10.89.0.1 SIW_B=10.89.0.2
SIW_PEER_COUNT=20
setup_peer_siw() {
	ip addr add "$1/24" dev eth1 && ip link set eth1 up && load_siw && add_link siw siw0 eth1
}
# siw_rping_listen ADDR PORT HOST WORD_PORT: `rping -s -V` on ADDR:PORT for one
# client, its listen told to HOST; waits for the client's run to end.
siw_rping_listen() {
	local rc
	timeout 300 rping -s -a "$1" -p "$2" -V > /tmp/rping-srv 2>&1 &
	local pid=$!
	wait_for 20 listening "$1" "$2" ||
		{ kill $pid; nc_send "$3" "$4" failed; echo "rping -s did not listen"; return 1; }
	nc_send "$3" "$4" listening || { kill $pid; echo "the peer did not take our word"; return 1; }
	wait $pid
	rc=$?
	rping_log /tmp/rping-srv "rping -s -a $1 -p $2 -V (exit $rc)"
	[ $rc = 0 ]
}
# siw_ulp_listen ADDR PORT TOTAL HOST WORD_PORT [ARGS...]: the ULP's server on
# ADDR:PORT, its listen told to HOST; TOTAL round trips, all intact.
siw_ulp_listen() {
	local a=$1 p=$2 n=$3 h=$4 w=$5 id
	shift 5
	ulp_ctl start cm=server addr="$a" port="$p" count="$n" "$@" ||
		{ nc_send "$h" "$w" failed; return 1; }
	id=$(ulp_last_id)
	nc_send "$h" "$w" listening || { ulp_ctl stop id="$id"; echo "the peer did not take our word"; return 1; }
	ulp_ctl wait id="$id" || { ulp_row "$id"; ulp_ctl stop id="$id"; return 1; }
	ulp_clean "$id" "$n" 1
}
# siw0's RDMA resources: siw_res_mark before the rows, siw_res_back after
# (an iWARP connection's end waits for its TCP close: given up to 30 s).
siw_res() { rdma_resources | grep '^siw0: '; }
siw_res_mark() { siw_res > /tmp/siw-res; }
siw_res_back() {
	wait_for 30 eval 'siw_res | cmp -s - /tmp/siw-res' ||
		{ echo "siw0 before: $(cat /tmp/siw-res)"; echo "siw0 now: $(siw_res)"; return 1; }
}
# siw_after_listen WORD_PORT CMD...: CMD once the peer says it listens.
siw_after_listen() {
	local w=$1
	shift
	[ "$(nc_recv "$w")" = listening ] || { echo "the peer did not listen"; return 1; }
	"$@"
}
# siw_ulp_client ADDR PORT SIZE: the ULP's client, COUNT round trips.
siw_ulp_client() {
	ulp_ctl start cm=client addr="$1" port="$2" size="$3" count=$SIW_PEER_COUNT wait=1 || return 1
	ulp_clean "$(ulp_last_id)" $SIW_PEER_COUNT 0
}

# --- The peer killed mid-connection: the host kills the victim guest's QEMU
# (SIGKILL: no FIN, no DREQ, no goodbye; the wire just goes quiet) while the
# survivor has runs going to it: an RC SEND run (endpoints by hand), an rdma_cm
# client run to the victim's server, and a connection of the victim's client to
# the survivor's server. The survivor's client runs must end with an error
# within KILL_BOUND_S of the kill: each request to the dead peer is sent 7 times
# (retry count 6, the kernel::rdma default), the ACK timeout apart (4.096 us *
# 2^17 = 537 ms, what rdma_cm gives RoCE), then fails with RetryExcErr: 3.8 s
# after the last ACK. RC itself has no keep-alive: a side waiting for its peer
# with nothing in flight (a ping client between round trips, found by this
# test) would wait for ever, so the ULP's CM connections probe a peer quiet for
# 2 s with a zero-length RDMA WRITE, which fails the same way: at most ~7 s.
# The bound allows for that, for TCG, and for the host's reaper (it looks for
# the victim's word twice a second). The server's connection fails too, and
# stopping the server run frees it. UD is left out: a UD sender completes
# whether anyone listens, and a UD receiver cannot tell silence from death.
# NVMe over Fabrics too: the victim serves a namespace (rdma_rust_nvmet) to
# the survivor's host (rdma_rust_nvme), whose controller is idle at the kill,
# so that only its keep-alive can notice: within 2 x KATO (kill_nvme_seen).
# Nothing may fail before the kill: an error between two live peers is not the
# detection of a dead one. So the load is light (the RC run two deep, the ping
# clients 1 KiB): every run keeps requests in flight, which is all the test
# needs. At the full load used before (depth 16, 4 KiB pings, and the
# retired block driver's 64 KiB reads) each guest's one vCPU was saturated:
# the shell took 30 s to read 25 counters, ACK timeouts came by the dozen before
# the kill (a victim counted 49), and one CI run saw live QPs exhaust their
# retries 6 s before the kill was asked. Light, three kills
# in a row saw 0-3 ACK timeouts before the kill, and detection 4-8.5 s after.
KILL_BOUND_S=15
VICTIM=10.88.0.2 SURVIVOR=10.88.0.1
# victim_serve: the victim's side; ends with the host killing this guest. rxe0
# and the ULP come back if an earlier test took them away. VICTIM_ALSO, if
# set, is a command that sets up more for the survivor to see killed (after
# the survivor's baseline: what it sets up must be gone when the survivor
# checks that everything is back); its failure is logged, and the kill goes on.
victim_serve() {
	local id ea
	[ -e /sys/class/infiniband/rxe0 ] || add_rxe rxe0 eth0 || return 1
	[ -d $ULP ] || insmod $ULP_KO || return 1
	[ "$(nc_recv 5031)" = listening ] || { echo "the survivor did not start"; return 1; }
	[ -z "${VICTIM_ALSO:-}" ] || $VICTIM_ALSO || kmsg "rdmatest: peer kill: '$VICTIM_ALSO' failed"
	ulp_ctl start role=server dev=rxe0 mode=rc op=send size=4096 count=$HUGE || return 1
	id=$(ulp_last_id)
	nc_send $SURVIVOR 5032 "$(ulp_endpoint "$id")" || return 1
	ea=$(nc_recv 5033); [ -n "$ea" ] || { echo "no endpoint from the survivor"; return 1; }
	ulp_ctl connect id="$id" peer="$ea" || return 1
	ulp_ctl start cm=server addr=$VICTIM port=7310 size=4096 count=$HUGE || return 1
	ulp_cm_start cm=client addr=$SURVIVOR port=7311 size=1024 count=$HUGE || return 1
	tgt_load $NVMP_ROOT $KILL_NS_SIZE && tgt_setup $NVMP_ROOT $KILL_NQN 2 $VICTIM $KILL_SVC $KILL_NS_SIZE ||
		{ echo "the NVMe-oF target was not set up"; return 1; }
	nc_send $SURVIVOR 5034 ready || return 1
	[ "$(nc_recv 5035)" = kill ] || { echo "no word from the survivor"; return 1; }
	# run.sh's reaper kills this guest's QEMU when it sees this on the console.
	say "rdmatest: kill this guest"
	sleep 600
}

# have_rxe0_on_eth0: rxe0 is there, added on eth0 if a test took it away.
have_rxe0_on_eth0() { [ -e /sys/class/infiniband/rxe0 ] || add_rxe rxe0 eth0; }

# peer_says PORT WORD [SECS]: the other guest said WORD on PORT (within
# SECS, 180 by default).
peer_says() {
	local w
	w=$(nc_recv "$1" "${3:-180}")
	[ "$w" = "$2" ] || { echo "expected '$2' from the peer on port $1, got '$w'"; return 1; }
}

# kill_watch ID...: waits up to KILL_BOUND_S seconds after $kill_t0 for each
# run to be over (state ended: its requests are back, and `wait` frees what it
# holds; or done), writing "ID MS" (MS since $kill_t0) to /tmp/kill-ends.
kill_watch() {
	local kw_id kw_left=$* kw_rest
	: > /tmp/kill-ends
	while [ -n "$kw_left" ] && [ $(( $(uptime_ms) - kill_t0 )) -lt $((KILL_BOUND_S * 1000)) ]; do
		kw_rest=
		for kw_id in $kw_left; do
			if [ "$(ulp_stat "$kw_id" state)" != running ]; then
				echo "$kw_id $(( $(uptime_ms) - kill_t0 ))" >> /tmp/kill-ends
			else
				kw_rest="$kw_rest $kw_id"
			fi
		done
		kw_left=$kw_rest
		sleep 0.1
	done
	[ -z "$kw_left" ] || { echo "runs$kw_left still running ${KILL_BOUND_S} s after the kill"; return 1; }
}

# The victim's NVMe-oF target (rdma_rust_nvmet, one namespace, on port
# KILL_SVC of its address), and the survivor's host (rdma_rust_nvme)
# connected to it with a KILL_KATO s keep-alive timeout, reconnect_delay 1
# and ctrl_loss_tmo KILL_LOSS.
KILL_NQN=nqn.2026-11.org.rdma-rust:peer-kill KILL_SVC=4423 KILL_NS_SIZE=$((8 * 1024 * 1024))
KILL_KATO=5 KILL_LOSS=5

kill_nvme_lost() { since_mark | grep -q "rdma_rust_nvme: rnvme$1: connection to .* lost"; }
# kill_nvme_seen N: (the survivor, after the kill) controller N, idle, so
# that only its keep-alive could notice: the admin queue failed (a Keep Alive
# without an answer, or its SEND's retries exhausted) and the controller
# said its connection was lost within 2 x KATO of the kill; it was given up
# (dead) within 60 s (ctrl_loss_tmo, and the reconnect then under way to the
# dead address), fails a read at once, and disconnects.
kill_nvme_seen() {
	local t_kill t_lost d bound=$((2 * KILL_KATO * 1000))
	wait_for $((2 * KILL_KATO + 5)) kill_nvme_lost "$1" ||
		{ since_mark | grep rdma_rust_nvme; echo "controller $1 did not notice the kill"; return 1; }
	t_kill=$(nvmp_log_ms "rdmatest: peer kill: asked")
	t_lost=$(nvmp_log_ms "rdma_rust_nvme: rnvme$1: connection to")
	d=$((t_lost - t_kill))
	since_mark | grep 'rdma_rust_nvme: queue 0: .*: the controller reconnects' ||
		{ since_mark | grep rdma_rust_nvme; echo "not the admin queue (the keep-alive's) that failed first"; return 1; }
	stress_say "peer kill: the NVMe-oF host's keep-alive noticed the dead target $d ms after the kill was asked (KATO $KILL_KATO s)"
	[ "$d" -ge 0 ] && [ "$d" -le $bound ] ||
		{ echo "noticed $d ms after the kill was asked: expected within 2 x KATO ($bound ms)"; return 1; }
	wait_for 60 hst_expect "$1" state dead > /dev/null || { cat $HST_STATUS; echo "not dead within 60 s"; return 1; }
	fails_by_itself 5 dd if=/dev/rnvme${1}n1 of=/dev/null bs=4k count=1 iflag=direct 2> /dev/null ||
		{ echo "the dead controller's disk answered a read, or not within 5 s"; return 1; }
	hst_disconnect "$1"
}

# survivor_cycle: one victim, started, used and killed; the survivor's runs end
# with RetryExcErr within the bound, its NVMe-oF host notices by keep-alive
# (kill_nvme_seen), everything is freed, nothing hangs.
survivor_cycle() {
	local srv rc cm eb ends id n t why=
	hst_loaded || hst_insmod || return 1
	baseline kill
	kmsg "rdmatest: peer kill: retransmissions at the start: $(retries rxe0)"
	wait_for 180 ping -c 1 -W 1 $VICTIM || { echo "the victim did not come up"; return 1; }
	ulp_ctl start cm=server addr=$SURVIVOR port=7311 size=4096 count=$HUGE || return 1
	srv=$(ulp_last_id)
	nc_send $VICTIM 5031 listening || { ulp_ctl stop id="$srv"; echo "the victim did not answer"; return 1; }
	eb=$(nc_recv 5032); [ -n "$eb" ] || { ulp_ctl stop all; echo "no endpoint from the victim"; return 1; }
	ulp_ctl start role=client dev=rxe0 mode=rc op=send size=4096 depth=2 count=$HUGE peer="$eb" hold=1 || return 1
	rc=$(ulp_last_id)
	nc_send $VICTIM 5033 "$(ulp_endpoint "$rc")" || return 1
	[ "$(nc_recv 5034)" = ready ] || { ulp_ctl stop all; echo "the victim is not ready"; return 1; }
	ulp_ctl go id="$rc" || return 1
	ulp_cm_start cm=client addr=$VICTIM port=7310 size=1024 count=$HUGE || return 1
	cm=$(ulp_last_id)
	wait_for 60 all_moving "$rc" "$cm" "$srv" || { cat $ULP/stats; ulp_ctl stop all; echo "not all runs move data"; return 1; }
	hst_connect "$(hst_opts $VICTIM $KILL_SVC $KILL_NQN keep_alive_tmo=$KILL_KATO,reconnect_delay=1,ctrl_loss_tmo=$KILL_LOSS)" > /tmp/kill-connect ||
		{ ulp_ctl stop all; cat /tmp/kill-connect; echo "no controller of the victim's target"; return 1; }
	n=$hst_inst
	wait_for 10 test -b /dev/rnvme${n}n1 &&
		dd if=/dev/rnvme${n}n1 of=/dev/null bs=4k count=16 iflag=direct 2> /dev/null ||
		why="rnvme${n}n1 did not read before the kill"
	mark
	# Nothing may have failed yet: an error between two live peers is not the
	# detection of a dead one.
	kmsg "rdmatest: peer kill: retransmissions before the kill: $(retries rxe0)"
	for id in $rc $cm $srv; do
		[ "$(ulp_stat "$id" state)" = running ] || why="$why; run $id ended before the kill"
	done
	[ "$(hst_field "$n" state)" = live ] || why="$why; controller $n was not live before the kill"
	nc_send $VICTIM 5035 kill ||
		{ ulp_ctl stop all; hst_disconnect_all > /dev/null 2>&1; echo "the victim did not take the word"; return 1; }
	kill_t0=$(uptime_ms)
	kmsg "rdmatest: peer kill: asked"
	kill_watch "$rc" "$cm" || why="$why; runs did not end in time"
	kmsg "rdmatest: peer kill: retransmissions after the kill: $(retries rxe0)"
	ulp_row "$rc"; ulp_row "$cm" | tail -n 1; ulp_row "$srv" | tail -n 1
	while read -r id t; do
		stress_say "peer kill: run $id ended with an error $t ms after the kill was asked (bound ${KILL_BOUND_S} s)"
	done < /tmp/kill-ends
	kill_nvme_seen "$n" > /tmp/kill-nvme 2>&1 || why="$why; $(tr '\n' ' ' < /tmp/kill-nvme)"
	# Whatever kill_nvme_seen found, no controller is left for the next cycle.
	hst_disconnect_all > /dev/null 2>&1
	for id in $rc $cm; do
		[ "$(ulp_stat "$id" errors)" -gt 0 ] || why="$why; run $id ended without an error"
		since_mark | grep -q "run $id: .*RetryExcErr" || why="$why; run $id: no RetryExcErr in the log"
		# Frees what the run holds; it reports the run's errors (EIO), which are expected.
		finished_within 30 sh -c "echo wait id=$id > $ULP/ctl" 2> /dev/null ||
			why="$why; wait id=$id hung"
	done
	# The server's connection to the dead client: stopped, promptly.
	timeout 30 sh -c "echo stop id=$srv > $ULP/ctl" || why="$why; stopping the server run failed or hung"
	back_to_baseline kill || why="$why; resources not back to the baseline"
	[ -z "$why" ] || { since_mark | tail -n 30; echo "${why#; }"; return 1; }
}

mode_peer_a() {
	suite_begin rdma_peer_a
	check rxe0_on_eth0 setup_peer 10.88.0.1 fd88::1
	check siw0_on_eth1 setup_peer_siw $SIW_A
	check ping_peer wait_for 60 ping -c 1 -W 1 10.88.0.2
	check ping_peer_eth1 wait_for 60 ping -c 1 -W 1 $SIW_B
	# One connection: the client's run; -V verifies every payload.
	check rping_server timeout 240 rping -s -a 10.88.0.1 -C "$count" -S "$size" -V
	kmsg "rdmatest: peer-a rxe0 counters: $(counters rxe0)"
	check ulp_insmod insmod /lib/modules/extra/rdma_rust_ulp.ko
	check ulp_rc_client_to_peer ulp_peer_rc_client
	check ulp_ud_client_to_peer ulp_peer_ud_client
	check ulp_rdma_write_to_peer ulp_peer_rdma_client write 0 5011
	check ulp_rdma_read_from_peer_validated ulp_peer_rdma_client read 1 5021
	check cm_rping_client_to_peer_ulp_server cm_peer_a_rping_to_ulp
	check cm_rping_server_for_peer_ulp_client cm_peer_a_rping_serves
	check cm_rping_server_for_peer_ulp_client_ipv6 cm_peer_a_rping_serves6
	check cm_ulp_rc_server_for_peer cm_peer_a_rc_server
	check cm_ulp_ud_client_to_peer cm_peer_a_ud_client
	check cm_ulp_multicast_sender cm_peer_a_mcast_sender
	# soft-iWARP (siw0 on eth1): stock rping, then the ULP against it both
	# ways, then ULP to ULP.
	siw_res_mark
	check siw_rping_server siw_rping_listen $SIW_A 7311 $SIW_B 5031
	check siw_rping_client_to_peer_ulp_server \
		siw_after_listen 5032 rping_to $SIW_B 7312 $SIW_PEER_COUNT 4096
	check siw_rping_server_for_peer_ulp_client siw_rping_listen $SIW_A 7313 $SIW_B 5033
	check siw_ulp_rc_server_for_peer siw_ulp_listen $SIW_A 7314 $SIW_PEER_COUNT $SIW_B 5034 size=4096
	check siw_resources_back siw_res_back
	check cm_peer_link_delete_seen cm_peer_a_link_delete_server
	cat $ULP/stats | while IFS= read -r l; do kmsg "rdmatest: peer-a: $l"; done
	check ulp_rmmod timeout 30 rmmod rdma_rust_ulp
	suite_end

	# The core's R/W API on its MR path: this guest boots with
	# ib_core.force_mr=1, and rdma_storage's cases check that the path is taken.
	# No newline: the parameter is taken verbatim.
	printf rdma_storage > /sys/module/kunit/parameters/filter_glob
	insmod /lib/modules/extra/rdma_kunit.ko || say "rdmatest: insmod rdma_kunit failed"
	rmmod rdma_kunit

	# The NVMe-oF target, b the host (guest-nvmet-peers.sh).
	mode_nvmet_peer_target

	# Last: b is killed mid-connection, a controller of b's host on the
	# target too; the target's side of that is rdma_nvmet_peer_kill.
	suite_begin rdma_peer_a_kill
	check ulp_insmod insmod $ULP_KO
	check peer_killed_mid_connection survivor_cycle
	check ulp_rmmod timeout 30 rmmod rdma_rust_ulp
	check nvme_host_rmmod hst_rmmod
	suite_end
	mode_nvmet_peer_kill
}

mode_peer_b() {
	suite_begin rdma_peer_b
	check rxe0_on_eth0 setup_peer 10.88.0.2 fd88::2
	check siw0_on_eth1 setup_peer_siw $SIW_B
	check ping_peer wait_for 60 ping -c 1 -W 1 10.88.0.1
	check ping_peer_eth1 wait_for 60 ping -c 1 -W 1 $SIW_A
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
	check ulp_rdma_write_target_for_peer ulp_peer_rdma_server write 5011
	check ulp_rdma_read_target_for_peer ulp_peer_rdma_server read 5021
	check cm_ulp_server_for_peer_rping cm_peer_b_serve_rping
	check cm_ulp_client_to_peer_rping_server cm_peer_b_ulp_to_rping
	check cm_ulp_client_to_peer_rping_server_ipv6 cm_peer_b_ulp_to_rping6
	check cm_ulp_rc_client_to_peer cm_peer_b_rc_client
	check cm_ulp_ud_server_for_peer cm_peer_b_ud_server
	check cm_ulp_multicast_two_receivers cm_peer_b_mcast_receivers
	siw_res_mark
	check siw_rping_client siw_after_listen 5031 rping_to $SIW_A 7311 $SIW_PEER_COUNT 64
	check siw_ulp_server_for_peer_rping siw_ulp_listen $SIW_B 7312 $SIW_PEER_COUNT $SIW_A 5032
	check siw_ulp_client_to_peer_rping_server siw_after_listen 5033 siw_ulp_client $SIW_A 7313 64
	check siw_ulp_rc_client_to_peer siw_after_listen 5034 siw_ulp_client $SIW_A 7314 4096
	check siw_resources_back siw_res_back
	check cm_link_delete_under_connection cm_peer_b_link_delete_client
	cat $ULP/stats | while IFS= read -r l; do kmsg "rdmatest: peer-b: $l"; done
	check ulp_rmmod timeout 30 rmmod rdma_rust_ulp
	# The link delete above took rxe0 away: the NVMe-oF rows need it.
	check rxe0_back_on_eth0 have_rxe0_on_eth0
	suite_end
	# The stock NVMe-oF host to a's target (guest-nvmet-peers.sh).
	mode_nvmet_peer_host
	# Last: peer-a's peer_killed_mid_connection kills this guest, with a
	# controller on a's target whose keep-alive then stops.
	[ -n "$nvmt_skip" ] || VICTIM_ALSO=nvmp_keep_alive_connect
	victim_serve
}

# `make stress`'s two guests: the survivor stays up while run.sh boots the
# victim rdmatest.kills times, killing each mid-connection.
mode_kill_survivor() {
	local kills
	kills=$(arg rdmatest.kills); kills=${kills:-1}
	suite_begin rdma_peer_kill
	check rxe0_on_eth0 setup_peer $SURVIVOR fd88::1
	echo clear > /sys/kernel/debug/kmemleak 2>/dev/null
	baseline none
	check ulp_insmod insmod $ULP_KO
	: > /tmp/stress-why
	check peer_kill_cycles stress_kind peer_kill "$kills" survivor_cycle
	[ ! -s /tmp/stress-why ] || cat /tmp/stress-why > /dev/console
	check ulp_rmmod timeout 60 rmmod rdma_rust_ulp
	check nvme_host_rmmod hst_rmmod
	check back_to_baseline back_to_baseline none
	# The release kernel has no kmemleak.
	[ "$(arg rdmatest.flavor)" = release ] || check kmemleak_clean kmemleak_clean
	suite_end
}
mode_kill_victim() {
	setup_peer $VICTIM fd88::2 && victim_serve
}
