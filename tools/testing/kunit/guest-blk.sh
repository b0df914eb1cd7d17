#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# rdma_rust_blk's checks (the suites rdma_blk, in one guest, and
# rdma_blk_peer_a/b, between two): a target exports a RAM volume on rxe0 and the
# initiator serves it as /dev/rrbd0, data verified end to end; bad control
# input; a file system; several hardware queues; the target going away
# (unexport, rdma link delete, rmmod) and rmmod or rdma link delete of the
# initiator under I/O. Sourced by guest-init.sh (the VM's /init), whose helpers
# it uses; the two-guest suites also use guest-peers.sh's nc_send/nc_recv.

BLK=/sys/kernel/debug/rdma_rust_blk
BLK_KO=/lib/modules/extra/rdma_rust_blk.ko
blk_ctl() { echo "$*" > $BLK/ctl; }
# blk_disk_has KEY=VALUE: the status line of rrbd0 says so
blk_disk_has() { grep -q "^  rrbd0 .* $1\( \|$\)" $BLK/status; }
# The volume of the tests: 16 MiB (two guests: 8), on the target's rxe0
# address (two guests: peer-b's).
VOL_MB=16
BLK_ADDR=10.77.0.1
blk_export() { blk_ctl export name=vol0 size=${VOL_MB}m addr=$BLK_ADDR port=7400; }
blk_connect() { blk_ctl connect addr=$BLK_ADDR port=7400 name=vol0 "$@" && [ -b /dev/rrbd0 ]; }
blk_capacity_ok() {
	[ "$(cat /sys/block/rrbd0/size)" = $((VOL_MB * 2048)) ] &&
		[ "$(cat /sys/block/rrbd0/queue/logical_block_size)" = 4096 ]
}
blk_disconnect() { blk_ctl disconnect dev=rrbd0 && [ ! -e /dev/rrbd0 ]; }
# blk_target_connections N: the target's status shows N connections to vol0.
blk_target_connections() { grep -q "^  vol0 .* connections=$1 " $BLK/status; }
# blk_disk_field KEY: the value of KEY in rrbd0's status line.
blk_disk_field() { sed -n "s/^  rrbd0 .* $1=\([0-9]*\).*/\1/p" $BLK/status; }
# blk_clean: rrbd0 is live, with nothing in flight, no error, no timeout and no
# block request that could not be ended (unended: a reference to it was still
# held, which the driver's bookkeeping must never let happen).
blk_clean() {
	blk_disk_has state=live && blk_disk_has in_flight=0 && blk_disk_has errors=0 &&
		blk_disk_has timeouts=0 && blk_disk_has unended=0 || { cat $BLK/status; return 1; }
}
# dd_md5 DD-ARGS...: the md5sum of what dd reads; fails, with dd's message, if
# dd does (a pipeline's status would be md5sum's).
dd_md5() {
	local sum
	sum=$({ dd "$@" 2> /tmp/dd.err; echo $? > /tmp/dd.rc; } | md5sum)
	[ "$(cat /tmp/dd.rc)" = 0 ] || { cat /tmp/dd.err; return 1; }
	echo "$sum"
}

# blk_bad_ctl: malformed commands (and one longer than the 512 bytes ctl
# takes) are refused with an error, logged, and change nothing (status and the
# RDMA resources as before).
blk_bad_ctl() {
	local c before res bad=0
	before=$(cat $BLK/status)
	rdma_resources > /tmp/blk-res
	for c in "bogus" "export" "export name=v size=1m addr=10.77.0.1" \
		"export name=v size=1m addr=10.77.0.1 port=0" "export name=v size=1m addr=10.77.0.1 port=99999" \
		"export name=v size=1000 addr=10.77.0.1 port=7401" "export name=v size=0 addr=10.77.0.1 port=7401" \
		"export name=v size=2g addr=10.77.0.1 port=7401" "export name=v size=1m addr=10.77.0.999 port=7401" \
		"export name=v size=1m addr=10.99.0.1 port=7401" "export name=a/b size=1m addr=10.77.0.1 port=7401" \
		"export name=0123456789abcdef0123456789abcdefX size=1m addr=10.77.0.1 port=7401" \
		"export name=v name=w size=1m addr=10.77.0.1 port=7401" "export name=v size=1m addr=10.77.0.1 port=7401 frob=1" \
		"export name= size=1m addr=10.77.0.1 port=7401" "unexport name=nosuch" "unexport" \
		"fail" "fail name=nosuch" "fail name=vol0 name=vol0" \
		"connect addr=10.77.0.1 port=7409 name=nosuch" "connect addr=10.77.0.1 port=7400" \
		"connect addr=10.77.0.1 port=7400 name=vol0 queues=0" "connect addr=10.77.0.1 port=7400 name=vol0 queues=17" \
		"connect addr=10.77.0.1 port=7400 name=vol0 depth=0" "connect addr=10.77.0.1 port=7400 name=vol0 depth=129" \
		"connect addr=10.77.0.1 port=7400 name=vol0 zerocopy=2" "connect addr=10.77.0.1 port=7400 name=vol0 zerocopy=" \
		"connect addr=10.77.0.1 port=7400 name=vol0 poll=direct" "connect addr=10.77.0.1 port=7400 name=vol0 poll=unbound" \
		"connect addr=10.77.0.1 port=7400 name=vol0 poll=Softirq" \
		"disconnect dev=rrbd9" "disconnect dev=sda" "disconnect" "export name=v size=1m addr=10.77.0.1 port=7401
export name=w size=1m addr=10.77.0.1 port=7402" "export name=v size=1m addr=10.77.0.1 port=7401 $(printf '%600s' '')"; do
		mark
		if printf '%s' "$c" > $BLK/ctl 2> /dev/null; then
			echo "accepted: '$c'"; bad=1
		elif ! since_mark | grep -q 'rdma_rust_blk: '; then
			echo "refused without a message: '$c'"; bad=1
		fi
	done
	[ "$(cat $BLK/status)" = "$before" ] || { echo "status changed:"; cat $BLK/status; bad=1; }
	resources_same_as /tmp/blk-res || { echo "RDMA resources changed"; rdma_resources; bad=1; }
	[ $bad = 0 ]
}

# blk_pattern [MB]: a pattern written over the whole disk (or its first MB MiB)
# with direct I/O reads back with the same checksum.
blk_pattern() {
	local want got mb=${1:-$VOL_MB}
	dd if=/dev/urandom of=/tmp/pattern bs=1M count="$mb" 2> /dev/null || return 1
	want=$(md5sum < /tmp/pattern)
	dd if=/tmp/pattern of=/dev/rrbd0 bs=128k oflag=direct 2> /tmp/dd.err || { cat /tmp/dd.err; return 1; }
	got=$(dd_md5 if=/dev/rrbd0 bs=64k count=$((mb * 16)) iflag=direct) || { echo "$got"; return 1; }
	rm -f /tmp/pattern
	[ "$got" = "$want" ] || { echo "read back $got, wrote $want"; return 1; }
}

# blk_random JOBS BLOCKS: JOBS writers at once, each writing BLOCKS random 4 KiB
# blocks to distinct random places of its own part of the disk (direct I/O,
# one request each), then every block is read back and compared with what was
# written. One process per block and direction: under TCG the processes, not
# the disk, are what takes the time.
blk_random() {
	local jobs=$1 n=$2 j per bad=0 pids= pid i b read_ok
	per=$((VOL_MB * 256 / jobs))
	[ "$n" -le "$per" ] || { echo "$n distinct blocks do not fit in $per"; return 1; }
	for j in $(seq 1 "$jobs"); do
		(
			dd if=/dev/urandom of=/tmp/rdata-$j bs=4k count="$n" 2> /dev/null || exit 1
			od -An -v -tu4 -w4 -N$((4 * n)) /dev/urandom | awk -v per=$per -v base=$(((j - 1) * per)) '
				{ b = $1 % per; while (b in used) b = (b + 1) % per; used[b] = 1; print base + b }' > /tmp/rblocks-$j
			i=0
			while read -r b; do
				dd if=/tmp/rdata-$j of=/dev/rrbd0 bs=4k skip=$i seek="$b" count=1 oflag=direct conv=notrunc 2> /dev/null || break
				i=$((i + 1))
			done < /tmp/rblocks-$j
			echo $i > /tmp/rdone-$j
			[ $i = "$n" ]
		) &
		pids="$pids $!"
	done
	# Every writer must have written all its blocks.
	j=0
	for pid in $pids; do
		j=$((j + 1))
		wait "$pid" || { echo "writer $j failed after $(cat /tmp/rdone-$j 2> /dev/null || echo 0) blocks"; bad=1; }
	done
	for j in $(seq 1 "$jobs"); do
		i=0 read_ok=1
		: > /tmp/rback-$j
		while read -r b; do
			dd if=/dev/rrbd0 of=/tmp/rback-$j bs=4k skip="$b" seek=$i count=1 iflag=direct conv=notrunc 2> /dev/null ||
				{ echo "writer $j: reading block $b back failed"; read_ok=0; bad=1; break; }
			i=$((i + 1))
		done < /tmp/rblocks-$j
		# (A short read-back was reported above: comparing it would only say so again.)
		[ $read_ok = 0 ] || cmp /tmp/rdata-$j /tmp/rback-$j > /tmp/rcmp 2>&1 ||
			{ echo "writer $j: blocks $(tr '\n' ' ' < /tmp/rblocks-$j) read back differ: $(cat /tmp/rcmp)"; bad=1; }
	done
	rm -f /tmp/rdata-* /tmp/rblocks-* /tmp/rback-* /tmp/rdone-* /tmp/rcmp
	[ $bad = 0 ]
}

# blk_counted_io BS COUNT AT GROWTH FIELD OTHER: COUNT writes then COUNT reads
# of BS from block AT on (direct I/O, one block request each) read back what
# was written, and the disk's count FIELD grows by GROWTH while OTHER does not
# move.
blk_counted_io() {
	local bs=$1 count=$2 at=$3 growth=$4 field=$5 other=$6 a0 b0 a1 b1 want got
	a0=$(blk_disk_field $field)
	b0=$(blk_disk_field $other)
	dd if=/dev/urandom of=/tmp/counted bs=$bs count=$count 2> /dev/null || return 1
	want=$(md5sum < /tmp/counted)
	dd if=/tmp/counted of=/dev/rrbd0 bs=$bs count=$count seek=$at oflag=direct 2> /tmp/dd.err ||
		{ cat /tmp/dd.err; return 1; }
	got=$(dd_md5 if=/dev/rrbd0 bs=$bs count=$count skip=$at iflag=direct) ||
		{ echo "$got"; return 1; }
	a1=$(blk_disk_field $field)
	b1=$(blk_disk_field $other)
	rm -f /tmp/counted
	[ "$got" = "$want" ] || { echo "read back $got, wrote $want"; return 1; }
	[ -n "$a0" ] && [ -n "$a1" ] && [ -n "$b0" ] && [ -n "$b1" ] &&
		[ $((a1 - a0)) -eq "$growth" ] && [ "$b1" = "$b0" ] ||
		{ echo "$field $a0 -> $a1, $other $b0 -> $b1"; return 1; }
}

# blk_inline_writes FIELD OTHER: 32 writes and reads of 4 KiB, of which the 32
# writes count in FIELD: inline_writes_lent (the SEND gathers the block
# request's pages, the default) or inline_writes_copied (copied behind the
# command, `zerocopy=0`).
blk_inline_writes() { blk_counted_io 4k 32 77 32 "$@"; }

# blk_block_writes LARGE: 32 writes of one 4 KiB block all go as block writes
# (the data alone, the command in the SEND's immediate data) and move no
# buffer; 8 writes of 8 KiB (two blocks) do not, and count in LARGE:
# registered_io (the default) or bounced_io (`zerocopy=0`).
blk_block_writes() {
	blk_counted_io 4k 32 101 32 block_writes "$1" &&
		blk_counted_io 8k 8 70 16 "$1" block_writes
}

# blk_large_io FIELD OTHER: 8 writes and reads of 128 KiB, all 16 counted in
# FIELD: registered_io (the block requests' own pages registered for the
# target, the default) or bounced_io (copied through the bounce buffers,
# `zerocopy=0`).
blk_large_io() { blk_counted_io 128k 8 3 16 "$@"; }

# blk_probe EXPECT KEY=VALUE...: one raw command from the initiator's `probe`
# (a connection of its own to vol0); what the target did, in the log, must be
# EXPECT ("answered STATUS" or "the target ended the connection").
blk_probe() {
	local expect=$1
	shift
	mark
	blk_ctl probe addr=$BLK_ADDR port=7400 name=vol0 "$@" ||
		{ echo "probe $* failed"; since_mark | tail -n 5; return 1; }
	since_mark | grep -q "rdma_rust_blk: probe .*: $expect\$" ||
		{ echo "probe $*: expected '$expect'"; since_mark | tail -n 5; return 1; }
}

# blk_target_ended WHY: the target logged, since the mark, that it ended a
# connection of vol0 for the reason WHY (its protocol_error line): a probe's
# "the target ended the connection" alone could be a connection that broke for
# another reason, or the target failing.
blk_target_ended() {
	since_mark | grep -qF "rdma_rust_blk: export vol0: $1: connection ended" ||
		{ echo "the target did not log 'export vol0: $1: connection ended'"; since_mark | tail -n 5; return 1; }
}

# blk_hostile: a hostile initiator. Commands out of the volume (past its end,
# straddling it, a sector whose byte offset overflows), misaligned, of a bad
# length (a discard over 8 MiB too), or of a kind that takes no length, are
# answered -EINVAL (-22), and
# the connection stays, as is a block write (data in a SEND with immediate)
# past the volume's end; a message that is not a command (an unknown opcode, an
# inline write whose data is shorter than its length, data after a command that
# has none, a tag over the depth, a block write that is not one block or names
# a tag over the depth) ends the connection at once. The volume is
# untouched (its checksum is the same after), the disk still works, and the
# target is back to the disk's two connections.
blk_hostile() {
	local before after bad=0 last=$((VOL_MB * 2048)) args expect why
	before=$(dd_md5 if=/dev/rrbd0 bs=1M iflag=direct) || { echo "cannot read the disk: $before"; return 1; }
	# ARGS|WHAT THE PROBE SAW[|WHY THE TARGET ENDED THE CONNECTION]: every
	# row whose connection ends names the reason the target must log.
	while IFS='|' read -r args expect why; do
		[ -n "$args" ] || continue
		blk_probe "$expect" $args || bad=1
		if [ "$expect" = "the target ended the connection" ]; then
			[ -n "$why" ] || { echo "probe $args: the row names no reason for the end"; bad=1; continue; }
			blk_target_ended "$why" || { echo "probe $args: wrong or no reason"; bad=1; }
		elif [ -n "$why" ]; then
			echo "probe $args: a reason, but the row expects no end"; bad=1
		fi
	done <<-EOF
	op=1 sector=0 len=4096|answered 0
	op=5 sector=8 len=4096|answered 0
	op=1 sector=$last len=4096|answered -22
	op=2 sector=$((last - 8)) len=8192|answered -22
	op=2 sector=36028797018963968 len=4096|answered -22
	op=1 sector=1 len=4096|answered -22
	op=1 sector=0 len=1000|answered -22
	op=1 sector=0 len=0|answered -22
	op=2 sector=0 len=262144|answered -22
	op=5 sector=0 len=8192|answered -22
	op=6 sector=$last len=4096 inline=4096|answered -22
	op=3 sector=0 len=4096|answered -22
	op=4 sector=$last len=4096|answered -22
	op=4 sector=0 len=$((VOL_MB << 20))|answered -22
	op=9 sector=0 len=4096|the target ended the connection|a message of 32 bytes that is not a command
	op=6 sector=0 len=4096 inline=100|the target ended the connection|a message of 132 bytes that is not a command
	op=5 sector=0 len=4096 inline=4|the target ended the connection|a message of 36 bytes that is not a command
	op=1 sector=0 len=4096 tag=1|the target ended the connection|command with tag 1, over the queue depth 1
	op=6 sector=0 len=4096 inline=4096 tag=1|the target ended the connection|command with tag 1, over the queue depth 1
	op=0 sector=0 len=0 inline=4096 imm=$((last / 8))|answered -22
	op=0 sector=0 len=0 inline=4096 imm=16777215|answered -22
	op=0 sector=0 len=0 inline=100 imm=0|the target ended the connection|a block write of 100 bytes, not one block
	op=0 sector=0 len=0 inline=4096 imm=$((1 << 24))|the target ended the connection|command with tag 1, over the queue depth 1
	EOF
	after=$(dd_md5 if=/dev/rrbd0 bs=1M iflag=direct) || { echo "the disk no longer reads: $after"; return 1; }
	[ "$after" = "$before" ] || { echo "the volume changed: $before, then $after"; bad=1; }
	wait_for 30 blk_target_connections 2 || { echo "the probes' connections did not end"; cat $BLK/status; bad=1; }
	blk_disk_has state=live || { echo "the disk is not live"; cat $BLK/status; bad=1; }
	[ $bad = 0 ]
}

# blk_bad_commands: a peer that keeps sending commands the target cannot
# honour (a misaligned inline read, 20 times on one connection) does not flood
# the log: the target logs the first, answers -EINVAL up to the 7th, and ends
# the connection at the 8th, saying why.
blk_bad_commands() {
	local n
	blk_probe "the target ended the connection" op=5 sector=1 len=4096 count=20 || return 1
	blk_target_ended "8 commands it cannot honour" || return 1
	n=$(since_mark | grep -c "outside the volume or misaligned")
	[ "$n" -le 1 ] || { echo "the target logged $n bad commands of one connection"; return 1; }
	wait_for 30 blk_target_connections 2 ||
		{ echo "the probe's connection did not end"; cat $BLK/status; return 1; }
}

# blk_no_reads: a connect that offers no responder resources (the target could
# never RDMA READ a write's data: the write would stall) is refused, and the
# target's log says why.
blk_no_reads() {
	blk_probe "the target refused the connection" op=2 sector=0 len=8192 reads=0 || return 1
	since_mark | grep -q "export vol0: .* refused: it offers no responder resources" ||
		{ echo "the target did not say why it refused"; since_mark | tail -n 5; return 1; }
}

# blk_aborted_connects: two connects of depth 128 that the initiator gives up
# after the target's accept (it rejects the accept) end their sessions on the
# target, which gives back their staging memory (32 MiB each: together the
# export's whole budget); a normal connect works after them. Run with nothing
# connected.
blk_aborted_connects() {
	local bad=0
	blk_probe "aborted after the target's accept" abort=1 depth=128 || bad=1
	blk_probe "aborted after the target's accept" abort=1 depth=128 || bad=1
	wait_for 10 blk_target_connections 0 ||
		{ echo "the aborted connects' sessions stayed"; cat $BLK/status; bad=1; }
	if blk_connect depth=8; then
		blk_disconnect || bad=1
	else
		echo "a connect after the aborted ones failed"; since_mark | tail -n 5; bad=1
	fi
	if [ $bad = 1 ]; then
		# What the next checks need: vol0 exported afresh, nothing connected.
		blk_ctl unexport name=vol0
		blk_export
	fi
	[ $bad = 0 ]
}

# blk_discard: the disk takes discards (up to 8 MiB each); 1 MiB discarded in
# the middle of 3 MiB just written reads back as zeros, its neighbours as
# written.
blk_discard() {
	local want got max
	max=$(cat /sys/block/rrbd0/queue/discard_max_bytes)
	[ "$max" = $((8 << 20)) ] || { echo "discard_max_bytes is $max"; return 1; }
	dd if=/dev/urandom of=/tmp/d3 bs=1M count=3 2> /dev/null
	dd if=/tmp/d3 of=/dev/rrbd0 bs=1M seek=4 oflag=direct 2> /dev/null || return 1
	blkdiscard -o $((5 << 20)) -l $((1 << 20)) /dev/rrbd0 || return 1
	{ dd if=/tmp/d3 bs=1M count=1; dd if=/dev/zero bs=1M count=1; dd if=/tmp/d3 bs=1M skip=2 count=1; } 2> /dev/null > /tmp/d3e
	want=$(md5sum < /tmp/d3e)
	got=$(dd_md5 if=/dev/rrbd0 bs=1M skip=4 count=3 iflag=direct) || { echo "$got"; return 1; }
	rm -f /tmp/d3 /tmp/d3e
	[ "$got" = "$want" ] || { echo "read back $got, expected $want"; return 1; }
}

# blk_fs: mke2fs, mount, copy files in, umount, e2fsck clean, mount again,
# checksums match. The files fill about half the volume whatever the modules
# weigh: the samples' modules (not the KUnit one, the largest, which grows with
# every case) and random data for a quarter of it.
blk_fs() {
	mke2fs -q -F -b 4096 /dev/rrbd0 > /tmp/mkfs 2>&1 || { cat /tmp/mkfs; return 1; }
	mkdir -p /mnt/rrbd
	mount -t ext2 /dev/rrbd0 /mnt/rrbd || return 1
	cp /lib/modules/extra/rdma_rust_*.ko /mnt/rrbd/ || { umount /mnt/rrbd; return 1; }
	dd if=/dev/urandom of=/mnt/rrbd/random bs=1M count=$((VOL_MB / 4)) 2> /tmp/dd.err &&
		(cd /mnt/rrbd && md5sum ./*.ko ./random) > /tmp/sums || { cat /tmp/dd.err; umount /mnt/rrbd; return 1; }
	umount /mnt/rrbd || return 1
	e2fsck -f -n /dev/rrbd0 > /tmp/fsck 2>&1 || { cat /tmp/fsck; return 1; }
	kmsg "rdmatest: rrbd0 e2fsck: $(tail -n 1 /tmp/fsck)"
	mount -t ext2 /dev/rrbd0 /mnt/rrbd || return 1
	(cd /mnt/rrbd && md5sum -c /tmp/sums > /tmp/sums.out 2>&1) || { cat /tmp/sums.out; umount /mnt/rrbd; return 1; }
	umount /mnt/rrbd
}

# blk_queue_counts: the two queues' completed requests, as "Q0 Q1".
blk_queue_counts() { sed -n 's/^ *per_queue_completed=\([0-9]*\),\([0-9]*\)$/\1 \2/p' $BLK/status; }
# blk_queues: writers on both CPUs at once reach both hardware queues: each
# queue completes at least the 64 requests of the writer on its CPU.
blk_queues() {
	local c pids= pid bad=0 q0 q1 n0 n1
	[ "$(ls /sys/block/rrbd0/mq | wc -l)" = 2 ] || { ls /sys/block/rrbd0/mq; return 1; }
	set -- $(blk_queue_counts)
	q0=$1 q1=$2
	[ -n "$q1" ] || { echo "no per_queue_completed for two queues"; cat $BLK/status; return 1; }
	for c in 0 1; do
		taskset -c $c dd if=/dev/zero of=/dev/rrbd0 bs=64k count=64 seek=$((c * 64)) oflag=direct 2> /dev/null &
		pids="$pids $!"
	done
	for pid in $pids; do
		wait "$pid" || { echo "a writer failed"; bad=1; }
	done
	set -- $(blk_queue_counts)
	n0=$1 n1=$2
	echo "per queue: $q0 -> $n0, $q1 -> $n1"
	[ $bad = 0 ] && [ $((n0 - q0)) -ge 64 ] && [ $((n1 - q1)) -ge 64 ]
}

# blk_io_start PREFIX READ_BS: a reader (READ_BS reads: the target RDMA
# WRITEs them, into the block requests' pages above 4 KiB) and a writer (4 KiB
# writes, sent from the block requests' pages, then 128 KiB ones, whose pages
# the target RDMA READs) loop on rrbd0 in the background until their I/O fails;
# each then writes the time (uptime_ms) to PREFIX-reader or PREFIX-writer. Their
# PIDs: $blk_io_pids.
blk_io_start() {
	rm -f "$1-reader" "$1-writer"
	(while dd if=/dev/rrbd0 of=/dev/null bs="$2" iflag=direct 2> /dev/null; do :; done
		uptime_ms > "$1-reader") &
	blk_io_pids=$!
	# The writer stops when the disk is gone, too: a dd started between two of
	# its I/Os after the disk went would create /dev/rrbd0 as a file and write
	# to it for ever (seen once rmmod took a second: the debug kernel with
	# inline KASAN checks). Such a file is removed.
	(while [ -b /dev/rrbd0 ] && dd if=/dev/zero of=/dev/rrbd0 bs=4k count=64 oflag=direct 2> /dev/null &&
		dd if=/dev/zero of=/dev/rrbd0 bs=128k count=8 seek=2 oflag=direct 2> /dev/null; do :; done
		[ -b /dev/rrbd0 ] || rm -f /dev/rrbd0
		uptime_ms > "$1-writer") &
	blk_io_pids="$blk_io_pids $!"
}
# blk_completed_above N: rrbd0 has completed more than N requests.
blk_completed_above() { [ "$(blk_disk_field completed)" -gt "$1" ] 2> /dev/null; }
# blk_io_ended PREFIX: both loops of blk_io_start PREFIX have ended.
blk_io_ended() { [ -e "$1-reader" ] && [ -e "$1-writer" ]; }

# blk_io_fails FAULT: a reader of 128 KiB and a writer of 4 and 128 KiB blocks
# (blk_io_start) run on rrbd0 (its block requests' pages registered) while FAULT (a
# command) takes the target away or the initiator down; both were making
# progress before (inline writes lent and I/Os registered among them), both end with an I/O error within 30 s, and the
# disk, if it is still there, answers errors within 5 s from then on.
blk_io_fails() {
	local t0 c0 l0 r0 c1 l1 r1
	c0=$(blk_disk_field completed) l0=$(blk_disk_field inline_writes_lent)
	r0=$(blk_disk_field registered_io)
	blk_io_start /tmp/io 128k
	sleep 2
	c1=$(blk_disk_field completed) l1=$(blk_disk_field inline_writes_lent)
	r1=$(blk_disk_field registered_io)
	if [ -e /tmp/io-reader ] || [ -e /tmp/io-writer ] || [ -z "$c1" ] || [ $((c1 - c0)) -le 0 ] ||
		[ -z "$l1" ] || [ $((l1 - l0)) -le 0 ] || [ -z "$r1" ] || [ $((r1 - r0)) -le 0 ]; then
		kill $blk_io_pids
		echo "no I/O before the fault: completed $c0 -> $c1, lent writes $l0 -> $l1, registered $r0 -> $r1"
		return 1
	fi
	t0=$(uptime_ms)
	"$@" || { kill $blk_io_pids; echo "'$*' failed"; return 1; }
	wait_for 30 blk_io_ended /tmp/io ||
		{ kill $blk_io_pids; echo "I/O did not fail within 30 s (reader: $(cat /tmp/io-reader 2> /dev/null), writer: $(cat /tmp/io-writer 2> /dev/null))"; return 1; }
	echo "the reader and the writer failed within $(( $(uptime_ms) - t0 )) ms of '$*'"
	kmsg "rdmatest: rrbd0 I/O failed $(( $(uptime_ms) - t0 )) ms after '$*'"
	[ ! -e /dev/rrbd0 ] || fails_by_itself 5 dd if=/dev/rrbd0 of=/dev/null bs=4k count=1 iflag=direct 2> /dev/null
}
# blk_target_qp_fails: vol0 exported again and an idle rrbd0 connected to it;
# `fail name=vol0` forces the target's QPs into the error state with no
# completion in error of their own. The target ends both connections itself
# (its log says why), the idle disk is failed by the disconnect within 10 s
# (nothing of its own is in flight to find out) and answers errors; the
# initiator answers the DREQs at once, so the target has no connection left
# while the failed disk is still there; then the disk is disconnected and vol0
# unexported again.
blk_target_qp_fails() {
	blk_export && blk_connect queues=2 depth=4 || return 1
	blk_clean || return 1
	mark
	blk_ctl fail name=vol0 || { echo "fail name=vol0 refused"; return 1; }
	since_mark | grep -q "export vol0: 2 connections' QPs forced into the error state" ||
		{ echo "fail did not reach both connections"; since_mark | tail -n 5; return 1; }
	wait_for 10 blk_disk_has state=failed ||
		{ echo "the idle disk was not failed"; cat $BLK/status; since_mark | tail -n 5; return 1; }
	[ "$(since_mark | grep -c "export vol0: a command's receive was flushed: the QP failed without an error of its own: connection ended")" = 2 ] ||
		{ echo "the target did not end both connections, saying why"; since_mark | tail -n 8; return 1; }
	fails_by_itself 5 dd if=/dev/rrbd0 of=/dev/null bs=4k count=1 iflag=direct 2> /dev/null ||
		{ echo "the failed disk answered a read, or did not answer within 5 s"; return 1; }
	# The target's sessions end with the initiator's answer to their DREQs,
	# given when they arrive, while the failed disk stays until disconnect.
	wait_for 10 blk_target_connections 0 ||
		{ echo "the target kept connections: its DREQs unanswered"; cat $BLK/status; return 1; }
	[ -b /dev/rrbd0 ] && blk_disk_has state=failed || { echo "the failed disk went"; return 1; }
	blk_disconnect || return 1
	blk_ctl unexport name=vol0
}
# blk_works_again: export and connect again (after the device came back,
# for the rmmod case that follows); 1 MiB written reads back.
blk_works_again() {
	local want got
	blk_export && blk_connect || return 1
	dd if=/dev/urandom of=/tmp/r1m bs=64k count=16 2> /dev/null &&
		dd if=/tmp/r1m of=/dev/rrbd0 bs=64k oflag=direct 2> /tmp/dd.err || { cat /tmp/dd.err; return 1; }
	want=$(md5sum < /tmp/r1m)
	got=$(dd_md5 if=/dev/rrbd0 bs=64k count=16 iflag=direct) || { echo "$got"; return 1; }
	rm -f /tmp/r1m
	[ "$got" = "$want" ] || { echo "read back $got, wrote $want"; return 1; }
}
# blk_hold_open SECONDS: a process holds rrbd0 open for SECONDS in the
# background, so that its last close comes after the rmmod that follows: the
# block layer then puts the disk's last reference with the module gone.
blk_hold_open() {
	[ -b /dev/rrbd0 ] || return 1
	sleep "$1" < /dev/rrbd0 > /dev/null 2>&1 &
	echo $! > /tmp/holder
}
# blk_holder_closed: the holder has exited (and closed the device).
blk_holder_closed() { wait "$(cat /tmp/holder)"; }
# blk_hold_files SECONDS: a process holds status (for reading) and ctl (for
# writing) open in the background until the module's directory is gone (at
# most SECONDS), then reads status: across the rmmod that follows, so that
# the read finds the file removed and the last close comes with the module
# gone.
blk_hold_files() {
	(
		i=0
		while [ -d $BLK ] && [ $i -lt "$1" ]; do sleep 1; i=$((i + 1)); done
		cat > /dev/null 2>&1
		echo $? > /tmp/files-holder.rc
	) < $BLK/status 3> $BLK/ctl &
	echo $! > /tmp/files-holder
}
# blk_files_closed: the files' holder has exited; its read after the rmmod
# failed (debugfs refuses calls into a removed file).
blk_files_closed() {
	wait "$(cat /tmp/files-holder)"
	[ "$(cat /tmp/files-holder.rc)" != 0 ] || { echo "a read of a removed status file succeeded"; return 1; }
}
# blk_gone: the disk and the module's files are gone (after rmmod).
blk_gone() { [ ! -e /dev/rrbd0 ] && [ ! -d $BLK ]; }

blk_suite() {
	suite_begin rdma_blk
	rdma_resources > /tmp/blk-base
	check blk_insmod insmod $BLK_KO
	check blk_bad_control_input blk_bad_ctl
	check blk_export blk_export
	check blk_connect_two_queues blk_connect queues=2 depth=16
	check blk_capacity_and_block_size blk_capacity_ok
	check blk_pattern_whole_disk blk_pattern
	check blk_random_4k_qd1 blk_random 1 64
	check blk_random_4k_qd8 blk_random 8 24
	check blk_4k_writes_lent blk_inline_writes inline_writes_lent inline_writes_copied
	check blk_4k_block_writes blk_block_writes registered_io
	check blk_128k_io_registered blk_large_io registered_io bounced_io
	check blk_two_hw_queues blk_queues
	check blk_hostile_initiator blk_hostile
	check blk_hostile_bad_command_stream blk_bad_commands
	check blk_hostile_no_responder_resources blk_no_reads
	check blk_discard blk_discard
	check blk_mkfs_mount_fsck blk_fs
	check blk_status_clean blk_clean
	check blk_disconnect blk_disconnect
	check blk_hostile_aborted_connects blk_aborted_connects
	# With zerocopy=0: the same data through the bounce buffers; and the
	# completions in softirq (nvme-rdma's context) rather than the workqueue.
	check blk_connect_bounce blk_connect zerocopy=0 poll=softirq
	check blk_softirq_shown blk_disk_has poll=softirq
	check blk_4k_writes_copied blk_inline_writes inline_writes_copied inline_writes_lent
	check blk_4k_block_writes_copied blk_block_writes bounced_io
	check blk_128k_io_bounced blk_large_io bounced_io registered_io
	# (Its first 4 MiB: the whole disk took 70 s more of the debug kernel's
	# copies, and proved no more of the bounce path.)
	check blk_pattern_bounced blk_pattern 4
	check blk_bounce_disconnect blk_disconnect
	# The target goes away under I/O: unexport; the disk fails, then goes.
	check blk_unexport_under_io blk_connect depth=8
	check blk_unexport_fails_io blk_io_fails blk_ctl unexport name=vol0
	check blk_failed_disk_disconnects blk_disconnect
	# The target's QPs fail with nothing but flushes: it ends the connections,
	# and an idle disk learns it from the disconnect.
	check blk_target_qp_failed blk_target_qp_fails
	# rdma link delete of the device both ends use, under I/O; then a new
	# connect works on the device added again.
	check blk_export_again blk_export
	check blk_connect_again blk_connect depth=8
	check blk_link_delete_under_io blk_io_fails timeout 60 rdma link delete rxe0
	check blk_link_delete_removed_disk sh -c "[ ! -e /dev/rrbd0 ] && [ -e $BLK/status ] && ! grep -q vol0 $BLK/status"
	check blk_rxe0_back add_rxe rxe0 veth0
	check blk_connect_after_link_delete blk_works_again
	# rmmod under I/O removes the disk and the export.
	check blk_held_open_across_rmmod blk_hold_open 10
	check blk_files_held_across_rmmod blk_hold_files 90
	check blk_rmmod_under_io blk_io_fails timeout 60 rmmod rdma_rust_blk
	check blk_rmmod_removed_disk blk_gone
	check blk_last_close_after_rmmod blk_holder_closed
	check blk_files_closed_after_rmmod blk_files_closed
	check blk_resources_back back_to_resources /tmp/blk-base
	suite_end
}

# back_to_resources FILE: `rdma resource show` as in FILE within 10 s.
back_to_resources() {
	wait_for 10 resources_same_as "$1" && return 0
	rdma_resources | diff "$1" -
	return 1
}

# --- Two guests: peer-b (10.88.0.2) is the target, peer-a the initiator. The
# steps meet over TCP (guest-peers.sh's nc_send/nc_recv, ports 5040-5049): b
# exports and says so; a checks the disk, then takes b's side away under I/O
# (rmmod, rdma link delete: a asks, b does it and exports again); last, a's own
# rmmod under I/O, which b sees as its connections ending.
BLK_PEER_A=10.88.0.1 BLK_PEER_B=10.88.0.2

# blk_peer_says PORT WORD [SECS]: the other guest said WORD on PORT (within
# SECS, 180 by default).
blk_peer_says() {
	local w
	w=$(nc_recv "$1" "${3:-180}")
	[ "$w" = "$2" ] || { echo "expected '$2' from the peer on port $1, got '$w'"; return 1; }
}
# peer-b: a unloaded its module under I/O; its connections end here within 30 s.
blk_target_sees_rmmod() {
	blk_peer_says 5046 rmmod || return 1
	wait_for 30 blk_target_connections 0 || { cat $BLK/status; return 1; }
}
# rdma_peer_b's last case deletes rxe0: the target needs it back.
blk_have_rxe0() { [ -e /sys/class/infiniband/rxe0 ] || add_rxe rxe0 eth0; }

# peer-b: export vol0, tell a on PORT, wait for a's next word on PORT + 1.
blk_target_serve() {
	blk_export || return 1
	nc_send $BLK_PEER_A "$1" exported || { echo "a did not take the word"; return 1; }
}
# peer-b: on a's word, take the target away with FAULT... (a runs I/O), then
# bring it back and export again: the next step's word goes to PORT + 1.
blk_target_fault() {
	local port=$1
	shift
	blk_peer_says "$port" fault || return 1
	"$@" || { echo "'$*' failed"; return 1; }
	echo "'$*' done"
	[ -e /sys/class/infiniband/rxe0 ] || add_rxe rxe0 eth0 || return 1
	[ -d $BLK ] || insmod $BLK_KO || return 1
	blk_target_serve $((port + 1))
}

mode_blk_peer_b() {
	VOL_MB=8 BLK_ADDR=$BLK_PEER_B
	suite_begin rdma_blk_peer_b
	echo clear > /sys/kernel/debug/kmemleak 2> /dev/null
	blk_have_rxe0
	rdma_resources > /tmp/blk-base
	check blk_rxe0_on_eth0 blk_have_rxe0
	check blk_insmod insmod $BLK_KO
	check blk_export_for_peer blk_target_serve 5040
	# All of a's checks on the disk come first: 140-190 s on the debug kernel
	# (a run over 180 s once timed the wait out, and every later step with it).
	check blk_peer_checks_done blk_peer_says 5041 done 600
	check blk_rmmod_under_peer_io blk_target_fault 5042 timeout 60 rmmod rdma_rust_blk
	check blk_link_delete_under_peer_io blk_target_fault 5044 timeout 60 rdma link delete rxe0
	# a's rmmod under I/O: its connections end here too.
	check blk_peer_rmmod_seen blk_target_sees_rmmod
	check blk_unexport blk_ctl unexport name=vol0
	check blk_rmmod timeout 60 rmmod rdma_rust_blk
	check blk_resources_back back_to_resources /tmp/blk-base
	check kmemleak_clean kmemleak_clean
	suite_end
}

mode_blk_peer_a() {
	VOL_MB=8 BLK_ADDR=$BLK_PEER_B
	suite_begin rdma_blk_peer_a
	echo clear > /sys/kernel/debug/kmemleak 2> /dev/null
	rdma_resources > /tmp/blk-base
	check blk_insmod insmod $BLK_KO
	check blk_peer_exported blk_peer_says 5040 exported
	check blk_connect_two_queues blk_connect queues=2 depth=16
	check blk_capacity_and_block_size blk_capacity_ok
	check blk_pattern_whole_disk blk_pattern
	check blk_random_4k_qd4 blk_random 4 16
	check blk_4k_writes_lent blk_inline_writes inline_writes_lent inline_writes_copied
	check blk_4k_block_writes blk_block_writes registered_io
	check blk_128k_io_registered blk_large_io registered_io bounced_io
	# (No hardware-queue case: these guests have one CPU, which blk-mq maps to
	# queue 0. The one-guest suite has it.)
	check blk_mkfs_mount_fsck blk_fs
	check blk_status_clean blk_clean
	check blk_disconnect blk_disconnect
	nc_send $BLK_PEER_B 5041 done
	# The target's module unloaded under I/O: the disk fails, then goes.
	check blk_connect_again blk_connect depth=8
	check blk_peer_rmmod_fails_io blk_io_fails nc_send $BLK_PEER_B 5042 fault
	check blk_failed_disk_disconnects blk_disconnect
	# The target's device deleted under I/O.
	check blk_peer_exported_again blk_peer_says 5043 exported
	check blk_connect_after_peer_rmmod blk_connect depth=8
	check blk_peer_link_delete_fails_io blk_io_fails nc_send $BLK_PEER_B 5044 fault
	check blk_failed_disk_disconnects_again blk_disconnect
	# This side's module unloaded under I/O: the disk is removed.
	check blk_peer_exported_third blk_peer_says 5045 exported
	check blk_connect_after_peer_link_delete blk_connect queues=2 depth=8
	check blk_held_open_across_rmmod blk_hold_open 10
	check blk_files_held_across_rmmod blk_hold_files 90
	check blk_rmmod_under_io blk_io_fails timeout 60 rmmod rdma_rust_blk
	check blk_rmmod_removed_disk blk_gone
	check blk_last_close_after_rmmod blk_holder_closed
	check blk_files_closed_after_rmmod blk_files_closed
	nc_send $BLK_PEER_B 5046 rmmod
	check blk_resources_back back_to_resources /tmp/blk-base
	check kmemleak_clean kmemleak_clean
	suite_end
}
