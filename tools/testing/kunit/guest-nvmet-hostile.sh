#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# The hostile-host rows of rdma_rust_nvmet (issue 44): a raw NVMe/RDMA host,
# the target's debugfs file `probe` (drivers/rdma_rust_nvmet/hostile.rs),
# sends connection requests and capsules that a correct host never sends, and
# each row checks what the target answered: the NVMe/RDMA CM status of a
# refused request, the status of a command's completion (the 15-bit status
# with DNR, as include/linux/nvme.h has them: 0x4000 | code), or that the
# target ended the connection and said why in its log. Around the rows: a
# stock host (nvme-rdma) connected before them writes a pattern to the
# namespace; after them, through the same connection, the namespace reads
# back the same, and the kernel log has no splat.
#
# nvmet_hostile_rows ADDR runs them as KTAP cases of the current suite (the
# suite_begin and suite_end); nvmet_hostile_fuzz COUNT [SEED] is the seeded stream
# of random capsules and connection requests (make stress). Both need
# rdma_rust_nvmet loaded, rxe on ADDR, and guest-init.sh's helpers (check,
# mark, since_mark, wait_for, SPLATS). The target is configured through its
# configfs tree (nvh_setup) and emptied before it is unloaded (nvh_unload).
#
# Sourced by guest-init.sh (through the nvmet suite and guest-stress.sh).

HOSTILE_DBG=/sys/kernel/debug/rdma_rust_nvmet
HOSTILE_NQN=nqn.2026-11.io.rdma-rust:hostile
HOSTILE_FUZZ_NQN=nqn.2026-11.io.rdma-rust:fuzz
# The probe's host NQN (allowed), and the stock host's (allowed).
HOSTILE_HOST=nqn.2014-08.org.nvmexpress:uuid:7e57ab1e-0000-4000-8000-0000000000a1
HOSTILE_STOCK_ID=7e57ab1e-0000-4000-8000-0000000000a2
HOSTILE_STOCK=nqn.2014-08.org.nvmexpress:uuid:$HOSTILE_STOCK_ID
HOSTILE_PORT_ID=44
HOSTILE_SVC=4444
# 16 MiB: 4096 blocks of 4 KiB (the fuzz stream's I/O stays below 1032).
HOSTILE_SIZE=16777216
HOSTILE_BLOCKS=4096

# nvh_cfs: rdma_rust_nvmet's configfs tree (configfs mounted if it is not)
nvh_cfs() {
	grep -q ' /sys/kernel/config configfs ' /proc/mounts ||
		mount -t configfs none /sys/kernel/config || return 1
	echo /sys/kernel/config/rdma_rust_nvmet
}

# nvh_setup ADDR: the rows' subsystem (namespace 1 of 16 MiB, the probe's
# and the stock host's NQNs allowed, no other), the fuzz stream's (any host),
# both on a port of their own at ADDR:4444; configured through the configfs
# tree, as a user configures the target.
nvh_setup() {
	local c s f p h
	HOSTILE_ADDR=$1
	[ -w $HOSTILE_DBG/probe ] || { echo "no $HOSTILE_DBG/probe: is rdma_rust_nvmet loaded?"; return 1; }
	c=$(nvh_cfs) || { echo "configfs is not mounted"; return 1; }
	s=$c/subsystems/$HOSTILE_NQN f=$c/subsystems/$HOSTILE_FUZZ_NQN p=$c/ports/$HOSTILE_PORT_ID
	mkdir "$s" "$s/namespaces/1" && echo $HOSTILE_SIZE > "$s/namespaces/1/size" &&
		echo 1 > "$s/namespaces/1/enable" || { echo "the rows' subsystem could not be made"; return 1; }
	for h in $HOSTILE_HOST $HOSTILE_STOCK; do
		mkdir "$c/hosts/$h" && ln -s "$c/hosts/$h" "$s/allowed_hosts/$h" ||
			{ echo "host $h could not be allowed"; return 1; }
	done
	mkdir "$f" "$f/namespaces/1" && echo 1 > "$f/attr_allow_any_host" &&
		echo $HOSTILE_SIZE > "$f/namespaces/1/size" && echo 1 > "$f/namespaces/1/enable" ||
		{ echo "the fuzz stream's subsystem could not be made"; return 1; }
	mkdir "$p" && echo rdma > "$p/addr_trtype" && echo ipv4 > "$p/addr_adrfam" &&
		echo "$1" > "$p/addr_traddr" && echo $HOSTILE_SVC > "$p/addr_trsvcid" &&
		ln -s "$s" "$p/subsystems/$HOSTILE_NQN" && ln -s "$f" "$p/subsystems/$HOSTILE_FUZZ_NQN" ||
		{ echo "port $HOSTILE_PORT_ID could not be made"; return 1; }
}

# nvh_teardown: what nvh_setup made, removed (links first, then directories,
# leaves first), so that the module can be unloaded; says what stayed.
nvh_teardown() {
	local c=/sys/kernel/config/rdma_rust_nvmet n h
	[ -d $c ] || return 0
	rm -f "$c/ports/$HOSTILE_PORT_ID/subsystems/"*
	rmdir "$c/ports/$HOSTILE_PORT_ID" 2> /dev/null
	for n in $HOSTILE_NQN $HOSTILE_FUZZ_NQN; do
		[ -d "$c/subsystems/$n" ] || continue
		rm -f "$c/subsystems/$n/allowed_hosts/"*
		echo 0 > "$c/subsystems/$n/namespaces/1/enable" 2> /dev/null
		rmdir "$c/subsystems/$n/namespaces/1" "$c/subsystems/$n" 2> /dev/null
	done
	for h in $HOSTILE_HOST $HOSTILE_STOCK; do
		rmdir "$c/hosts/$h" 2> /dev/null
	done
	[ -z "$(ls $c/subsystems)$(ls $c/ports)$(ls $c/hosts)" ] ||
		{ echo "left in $c: $(ls $c/subsystems $c/ports $c/hosts | tr '\n' ' ')"; return 1; }
}

# nvh_unload: the tree emptied and the module unloaded
nvh_unload() { nvh_teardown && timeout 60 rmmod rdma_rust_nvmet; }

# --- the stock host -------------------------------------------------------------
# nvh_disk: the block device of the stock host's namespace of the rows'
# subsystem (nvmeXnY, whose device, a controller or a multipath subsystem,
# names the subsystem)
nvh_disk() {
	local b
	for b in /sys/block/nvme*n1; do
		[ -e "$b" ] || continue
		[ "$(cat "$b/device/subsysnqn" 2> /dev/null)" = $HOSTILE_NQN ] && { echo "${b##*/}"; return 0; }
	done
	return 1
}

# nvh_stock_connect: nvme-rdma connected to the rows' subsystem (through
# /dev/nvme-fabrics, as nvme-cli does), its disk there
nvh_stock_connect() {
	modprobe nvme-rdma || { echo "modprobe nvme-rdma failed"; return 1; }
	echo "transport=rdma,traddr=$HOSTILE_ADDR,trsvcid=$HOSTILE_SVC,nqn=$HOSTILE_NQN,hostnqn=$HOSTILE_STOCK,hostid=$HOSTILE_STOCK_ID" \
		> /dev/nvme-fabrics || { echo "the stock host could not connect"; return 1; }
	wait_for 10 nvh_disk || { echo "no disk of $HOSTILE_NQN after the connect"; return 1; }
}

# nvh_stock_disconnect: the stock host's controllers of the subsystem deleted
nvh_stock_disconnect() {
	local c
	for c in /sys/class/nvme/nvme*; do
		[ "$(cat "$c/subsysnqn" 2> /dev/null)" = $HOSTILE_NQN ] && echo 1 > "$c/delete_controller"
	done
	wait_for 10 nvh_no_disk || { echo "the stock host's disk is still there"; return 1; }
}
nvh_no_disk() { ! nvh_disk > /dev/null; }

# nvh_sum: the namespace's checksum, read through the stock host with no
# page cache in between
nvh_sum() {
	local d
	d=$(nvh_disk) || { echo "the stock host has no disk"; return 1; }
	echo 3 > /proc/sys/vm/drop_caches
	dd if=/dev/$d bs=1M 2> /dev/null | md5sum | cut -d' ' -f1
}

# nvh_fill: a pattern written to the whole namespace by the stock host,
# its checksum kept in /tmp/hostile-sum
nvh_fill() {
	local d
	d=$(nvh_disk) || { echo "the stock host has no disk"; return 1; }
	dd if=/dev/urandom of=/dev/$d bs=1M count=$((HOSTILE_SIZE >> 20)) 2> /dev/null && sync ||
		{ echo "writing the pattern failed"; return 1; }
	nvh_sum > /tmp/hostile-sum && [ -n "$(cat /tmp/hostile-sum)" ]
}

# nvh_same_sum: the namespace reads back what nvh_fill wrote, through
# the stock host's connection made before the rows
nvh_same_sum() {
	local now
	now=$(nvh_sum) || return 1
	[ "$now" = "$(cat /tmp/hostile-sum)" ] ||
		{ echo "the namespace's checksum changed: $(cat /tmp/hostile-sum) before the rows, $now after"; return 1; }
}

# --- one probe ------------------------------------------------------------------
# nvh_probe TAG FIELDS...: a probe of the rows' subsystem, as the probe's
# host, with FIELDS (later ones win); what it logged goes to /tmp/hostile-out
nvh_probe() {
	local tag=$1
	shift
	mark
	echo "probe addr=$HOSTILE_ADDR port=$HOSTILE_SVC tag=$tag subnqn=$HOSTILE_NQN hostnqn=$HOSTILE_HOST $*" \
		> $HOSTILE_DBG/probe || { echo "the probe '$*' failed"; since_mark | tail -n 5; return 1; }
	since_mark | sed -n "s/.*rdma_rust_nvmet: hostile $tag: //p" > /tmp/hostile-out
	grep -qx done /tmp/hostile-out || { cat /tmp/hostile-out; echo "the probe did not finish"; return 1; }
}

# nvh_seen WHAT QID CID: the status of the last completion of kind WHAT
# (connect, enable, cqe) for command CID on queue QID in /tmp/hostile-out
nvh_seen() {
	awk -v w="$1" -v q="qid=$2" -v c="cid=$3" '$1 == w && $2 == q && $3 == c { s = $4 } END { sub("status=", "", s); print s }' /tmp/hostile-out
}

# nvh_expect WANT WHAT QID CID: the completion has status WANT
nvh_expect() {
	local got
	got=$(nvh_seen "$2" "$3" "$4")
	[ "$got" = "$1" ] && return 0
	cat /tmp/hostile-out
	echo "expected the $2 completion of command $4 on queue $3 with status $1, saw ${got:-none}"
	return 1
}

# nvh_cm_refused STATUS FIELDS...: the connection request is rejected with the
# NVMe/RDMA CM status STATUS (nvme_rdma_cm_status)
nvh_cm_refused() {
	local want=$1
	shift
	nvh_probe cm "$@" || return 1
	grep -qx "rejected status=$want reason=28" /tmp/hostile-out && return 0
	cat /tmp/hostile-out
	echo "expected a reject with status $want (consumer defined, reason 28)"
	return 1
}

# nvh_connect_refused STATUS QID FIELDS...: the Connect of queue QID (the probed
# one) completes with STATUS
nvh_connect_refused() {
	local want=$1 qid=$2
	shift 2
	nvh_probe connect "$@" && nvh_expect "$want" connect "$qid" 65520
}

# nvh_cmd_status STATUS QID FIELDS...: the raw capsule with command id 1 on queue
# QID completes with STATUS
nvh_cmd_status() {
	local want=$1 qid=$2
	shift 2
	nvh_probe cmd "$@" && nvh_expect "$want" cqe "$qid" 1
}

# nvh_cmd_ends WHY FIELDS...: the target ends the connection, logging WHY
nvh_cmd_ends() {
	local why=$1
	shift
	nvh_probe end "$@" || return 1
	grep -q "^ended by the target" /tmp/hostile-out ||
		{ cat /tmp/hostile-out; echo "expected the target to end the connection"; return 1; }
	since_mark | grep -q "rdma_rust_nvmet: queue .*$why.*: connection ended" ||
		{ since_mark | grep rdma_rust_nvmet | tail -n 5; echo "expected the target to log '$why'"; return 1; }
}

# nvh_silent_host KATO: a host that sends nothing after its admin queue is up has
# its controller ended after its keep-alive timeout (the target checks every
# 0.5 s: within KATO + 2 s here, not before KATO)
nvh_silent_host() {
	local ms
	nvh_probe silent kato="$1" silent=$(($1 + 5000)) || return 1
	ms=$(sed -n 's/^ended by the target after \([0-9]*\) ms$/\1/p' /tmp/hostile-out)
	[ -n "$ms" ] || { cat /tmp/hostile-out; echo "the target kept a silent host's controller"; return 1; }
	[ "$ms" -ge "$1" ] && [ "$ms" -le $(($1 + 2000)) ] ||
		{ echo "a silent host with KATO $1 ms was ended after $ms ms"; return 1; }
	since_mark | grep -q "no keep-alive within its timeout: ended" ||
		{ echo "the target did not say why it ended the controller"; return 1; }
}

# nvh_stock_untouched FILE: the stock host's controller neither failed nor
# reconnected after the mark in FILE
nvh_stock_untouched() {
	local s
	s=$(dmesg | sed -n "/rdmatest: mark $(cat "$1")\$/,\$p" | grep -E 'nvme nvme[0-9]+: .*(recovery|reconnect|Reconnect|failed)' | head -n 3)
	[ -z "$s" ] || { echo "the stock host's connection was disturbed:"; echo "$s"; return 1; }
}

# nvh_no_splat_since FILE: the kernel log has no splat after the mark in FILE
nvh_no_splat_since() {
	local s
	s=$(dmesg | sed -n "/rdmatest: mark $(cat "$1")\$/,\$p" | grep -E "$SPLATS" | head -n 3)
	[ -z "$s" ] || { echo "kernel splat:"; echo "$s"; return 1; }
}

# --- the rows -------------------------------------------------------------------
# nvmet_hostile_rows ADDR: every row, as cases of the current suite
nvmet_hostile_rows() {
	local io="io=1" rd="opc=2 nsid=1"
	check hostile_setup nvh_setup "$1" || return 1
	check hostile_stock_connect nvh_stock_connect
	check hostile_stock_fill nvh_fill
	mark
	echo $marks > /tmp/hostile-mark
	# Connection requests (nvme_rdma_cm_req). The CM pads the private data to
	# 56 bytes with zeroes: short private data reads as hrqsize 0.
	check cm_bad_recfmt nvh_cm_refused 2 recfmt=1
	check cm_short_private_data nvh_cm_refused 5 pdlen=4
	check cm_admin_hsqsize_over_32 nvh_cm_refused 4 hsqsize=32
	check cm_io_hsqsize_over_256 nvh_cm_refused 4 $io hsqsize=256
	check cm_hrqsize_zero nvh_cm_refused 5 hrqsize=0
	# No responder resources: the target could not read a write's data.
	check cm_no_responder_resources nvh_cm_refused 7 ird=0
	# Connect: 0x4184 CONNECT_INVALID_HOST, 0x4182 CONNECT_INVALID_PARAM,
	# 0x400c CMD_SEQ_ERROR
	check connect_host_not_allowed nvh_connect_refused 0x4184 0 \
		hostnqn=nqn.2014-08.org.nvmexpress:uuid:7e57ab1e-0000-4000-8000-0000000000ff
	check connect_unknown_subnqn nvh_connect_refused 0x4182 0 subnqn=nqn.2026-11.io.rdma-rust:nothing
	check connect_wrong_qid nvh_connect_refused 0x4182 0 cqid=1
	check connect_admin_static_cntlid nvh_connect_refused 0x4182 0 cntlid=1
	check connect_admin_sqsize_over nvh_connect_refused 0x4182 0 sqsize=32
	check connect_sqsize_zero nvh_connect_refused 0x4182 0 sqsize=0
	check connect_keyed_len_short nvh_connect_refused 0x400f 0 connect=0 cmd opc=0x7f nsid=1 len=512 cid=65520
	check connect_io_wrong_cntlid nvh_connect_refused 0x4182 1 $io cntlid=0x7777
	check connect_io_sqsize_over nvh_connect_refused 0x4182 1 $io sqsize=128
	# A queue ID over the 16 I/O queues a controller may have: refused by the
	# connection request already (INVALID_QID), before any Connect.
	check cm_io_qid_over_max nvh_cm_refused 3 $io qid=17
	check connect_io_other_host nvh_connect_refused 0x4182 1 $io chostnqn=$HOSTILE_STOCK
	check connect_io_other_subsys nvh_connect_refused 0x4182 1 $io csubnqn=$HOSTILE_FUZZ_NQN
	check connect_io_before_enable nvh_connect_refused 0x400c 1 $io enable=0
	check connect_twice nvh_cmd_status 0x400c 0 cmd opc=0x7f nsid=1 len=1024
	# Commands out of sequence
	check command_before_connect nvh_cmd_status 0x400c 0 connect=0 cmd opc=6 cdw10=1 len=4096
	check command_before_enable nvh_cmd_status 0x400c 0 enable=0 cmd opc=6 cdw10=1 len=4096
	# SGL descriptors the target does not offer (SGLS): 0x4011 SGL_INVALID_TYPE
	check sgl_data_block_address nvh_cmd_status 0x4011 0 cmd opc=6 cdw10=1 len=4096 sgl=0x00
	check sgl_segment nvh_cmd_status 0x4011 0 cmd opc=6 cdw10=1 len=4096 sgl=0x20
	check sgl_keyed_subtype nvh_cmd_status 0x4011 1 $io cmd $rd len=4096 sgl=0x41
	check sgl_inline_for_a_read nvh_cmd_status 0x4011 1 $io cmd $rd len=4096 sgl=inline
	check sgl_prp_psdt nvh_cmd_status 0x4002 1 $io cmd $rd len=4096 flags=0
	# Past the namespace: 0x4080 LBA_RANGE
	check lba_read_past_end nvh_cmd_status 0x4080 1 $io cmd $rd cdw10=$HOSTILE_BLOCKS len=4096
	check lba_write_across_end nvh_cmd_status 0x4080 1 $io cmd opc=1 nsid=1 cdw10=$((HOSTILE_BLOCKS - 1)) cdw12=1 len=8192
	check lba_write_wraps nvh_cmd_status 0x4080 1 $io cmd opc=1 nsid=1 cdw10=0xffffffff cdw11=0xffffffff len=4096
	check lba_write_zeroes_past_end nvh_cmd_status 0x4080 1 $io cmd opc=8 nsid=1 cdw10=$HOSTILE_BLOCKS
	check lba_dsm_range_past_end nvh_dsm_past_end
	# In-capsule data: 0x400f SGL_INVALID_DATA, 0x4016 SGL_INVALID_OFFSET
	check inline_shorter_than_sgl nvh_cmd_status 0x400f 1 $io cmd opc=1 nsid=1 sgl=inline len=4096 data=512
	check inline_offset nvh_cmd_status 0x4016 1 $io cmd opc=1 nsid=1 sgl=inline off=16 len=4096 data=4096
	check inline_on_admin_queue nvh_cmd_status 0x400f 0 connect=0 cmd opc=0x7f nsid=1 sgl=inline len=1024
	check inline_past_admin_capsule nvh_cmd_ends "a capsule's receive failed" connect=0 cmd opc=0x7f nsid=1 sgl=inline len=1024 data=1024
	check inline_past_io_capsule nvh_cmd_ends "a capsule's receive failed" $io cmd opc=1 nsid=1 sgl=inline len=8192 cdw12=1 data=8192
	# Namespaces: 0x400b INVALID_NS
	check nsid_zero nvh_cmd_status 0x400b 1 $io cmd opc=2 nsid=0 len=4096
	check nsid_unknown nvh_cmd_status 0x400b 1 $io cmd opc=2 nsid=7 len=4096
	check nsid_broadcast_io nvh_cmd_status 0x400b 1 $io cmd opc=1 nsid=0xffffffff len=4096
	check nsid_zero_identify nvh_cmd_status 0x400b 0 cmd opc=6 cdw10=0 nsid=0 len=4096
	# Lengths that do not match the command's: 0x400f SGL_INVALID_DATA
	check length_read_short nvh_cmd_status 0x400f 1 $io cmd $rd len=512
	check length_write_long nvh_cmd_status 0x400f 1 $io cmd opc=1 nsid=1 len=8192
	check length_identify nvh_cmd_status 0x400f 0 cmd opc=6 cdw10=1 len=4095
	check length_flush_with_data nvh_cmd_status 0x400f 1 $io cmd opc=0 nsid=1 len=4096
	# More than MDTS (32 blocks): 0x4002 INVALID_FIELD
	check length_over_mdts nvh_cmd_status 0x4002 1 $io cmd opc=1 nsid=1 cdw12=32 len=135168
	# A keyed SGL with a key the host never registered: the target's RDMA READ
	# fails and the connection ends
	check keyed_unknown_rkey nvh_cmd_ends "data transfer failed" $io cmd opc=1 nsid=1 len=4096 key=0x1234
	# A command id in flight (a held Asynchronous Event Request's): 0x4003
	check cid_in_flight nvh_cmd_status 0x4003 0 cmd opc=12 wait=0 cmd opc=0x18
	# Opcodes: 0x4001 INVALID_OPCODE
	check opcode_unknown_admin nvh_cmd_status 0x4001 0 cmd opc=0x55
	check opcode_unknown_io nvh_cmd_status 0x4001 1 $io cmd opc=0x55 nsid=1
	check opcode_admin_on_io nvh_cmd_status 0x4001 1 $io cmd opc=6 cdw10=1 nsid=1 len=4096
	# A capsule shorter than a command: the connection ends
	check capsule_short nvh_cmd_ends "shorter than a command" cmd opc=0x18 size=32
	check capsule_short_io nvh_cmd_ends "shorter than a command" $io cmd $rd len=4096 size=63
	# What a correct host may do: a read with invalidate is answered by SEND
	# with invalidate of its rkey
	check read_with_invalidate nvh_read_invalidates
	check silent_host nvh_silent_host 2000
	check hostile_no_splat nvh_no_splat_since /tmp/hostile-mark
	check hostile_checksum_unchanged nvh_same_sum
	check hostile_stock_untouched nvh_stock_untouched /tmp/hostile-mark
	check hostile_stock_disconnect nvh_stock_disconnect
}

# nvh_dsm_past_end: a Dataset Management (deallocate) whose one range passes the
# end of the namespace: its 16 bytes are read from the probe's buffer, which
# holds the I/O queue's Connect data, the host identifier "rust-nvmet-probe"
# first: a length of 0x6d766e2d blocks at LBA 0x65626f72702d7465
nvh_dsm_past_end() {
	nvh_cmd_status 0x4080 1 io=1 cmd opc=9 nsid=1 cdw11=4 len=16
}

# nvh_read_invalidates: a read with a keyed SGL asking for invalidation completes
# with status 0 and the completion invalidated an rkey
nvh_read_invalidates() {
	nvh_probe inv io=1 cmd opc=2 nsid=1 len=4096 sgl=inv || return 1
	grep -q '^cqe qid=1 cid=1 status=0x0 .* inv=0x[0-9a-f]*$' /tmp/hostile-out && return 0
	cat /tmp/hostile-out
	echo "expected a completion with status 0 that invalidated the buffer's rkey"
	return 1
}

# --- the fuzz stream --------------------------------------------------------------
# nvmet_hostile_fuzz COUNT [SEED]: COUNT random capsules and connection requests
# (the seed is printed: `echo "fuzz ... seed=N count=N" > probe` replays the
# stream) against the fuzz subsystem, with the stock host connected to the
# rows' subsystem: no splat, no hang (the stream must end within COUNT / 10 +
# 60 s), the stock host's namespace reads back what it wrote before, through
# the same connection. After nvh_setup.
nvmet_hostile_fuzz() {
	local n=$1 seed=${2:-$(( $(uptime_ms) % 1000000007 ))} pid t rc=0
	nvh_disk > /dev/null || nvh_stock_connect || return 1
	nvh_fill || return 1
	mark
	echo $marks > /tmp/hostile-mark
	kmsg "rdmatest: nvmet fuzz seed=$seed count=$n"
	echo "fuzz addr=$HOSTILE_ADDR port=$HOSTILE_SVC subnqn=$HOSTILE_FUZZ_NQN hostnqn=$HOSTILE_HOST seed=$seed count=$n" \
		> $HOSTILE_DBG/probe &
	pid=$!
	t=$((n / 10 + 60))
	wait_for $t dmesg_has "hostile fuzz: seed=$seed capsules=" ||
		{ echo "the fuzz stream (seed $seed) did not end within $t s"; return 1; }
	wait $pid || { echo "the fuzz stream (seed $seed) failed"; rc=1; }
	dmesg | grep "hostile fuzz: seed=$seed capsules=" | sed 's/^\[[ 0-9.]*\] //'
	nvh_no_splat_since /tmp/hostile-mark || rc=1
	nvh_same_sum || rc=1
	nvh_stock_untouched /tmp/hostile-mark || rc=1
	[ $rc = 0 ] || echo "the fuzz stream's seed: $seed"
	return $rc
}
