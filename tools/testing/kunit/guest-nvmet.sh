#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# The NVMe over Fabrics target's checks, in one guest: the stock Linux host
# (nvme-rdma, nvme-cli) against a target on rxe0's address: discovery,
# connect, what Identify says, fio with verification, ext4, disconnect with
# everything given back, a host that is not allowed, keep-alive.
#
# The target is a parameter: its configfs root. The same rows run against
#   c:    the kernel's own nvmet-rdma (root /sys/kernel/config/nvmet, a brd RAM
#         disk behind the namespace), the suite rdma_nvmet_c: the reference,
#         which tells a failure of the target from one of the script;
#   rust: rdma_rust_nvmet (root /sys/kernel/config/rdma_rust_nvmet, the same
#         layout with a RAM namespace: `size` in bytes, then `enable`), the
#         suite rdma_nvmet_rust; its rows SKIP, with the reason, when the
#         module is not in the image.
# rdmatest.nvmet_target=c|rust|both picks them (run.sh's NVMET_TARGET).
# Sourced by guest-init.sh, whose helpers it uses (and guest-ulp.sh's
# rdma_resources and resources_same_as).

NVME=/usr/bin/nvme
FIO=/usr/bin/fio
CFS=/sys/kernel/config
NVMT_RUST_KO=/lib/modules/extra/rdma_rust_nvmet.ko
NVMT_ADDR=10.77.0.1
# soft-iWARP's: siw0 on veth2 (guest-init.sh's setup_siw).
NVMT_SIW_ADDR=10.77.2.1
# The namespace: 32 MiB of RAM (brd's, or the Rust target's own).
NVMT_SIZE=$((32 * 1024 * 1024))
NVMT_SERIAL=rdmatest0042
NVMT_MODEL=rdma-rust-test-target
NVMT_UUID=5e1f0000-0000-4000-8000-00000000ab01
# Another host, the only one allowed by the subsystem of the refusal rows.
NVMT_OTHER_ID=7e57ab1e-0000-4000-8000-000000000002
NVMT_OTHER=nqn.2014-08.org.nvmexpress:uuid:$NVMT_OTHER_ID

# --- the target: functions of its configfs root -------------------------------
# tgt_kind ROOT: c for nvmet's root, rust for rdma_rust_nvmet's.
tgt_kind() {
	case $1 in
	*/nvmet) echo c ;;
	*) echo rust ;;
	esac
}

# tgt_load ROOT SIZE [COUNT]: the target's module loaded (for nvmet, and brd
# with COUNT RAM disks of SIZE bytes, default one, for its namespaces), its
# configfs root there.
tgt_load() {
	grep -q " $CFS configfs " /proc/mounts || mount -t configfs none $CFS || return 1
	case $(tgt_kind "$1") in
	c) modprobe brd rd_nr="${3:-1}" rd_size=$(($2 / 1024)) max_part=0 && modprobe nvmet-rdma ;;
	rust) insmod $NVMT_RUST_KO ;;
	esac || return 1
	[ -d "$1" ] || { echo "no $1 after loading the target"; tgt_unload "$1"; return 1; }
}

# tgt_unload ROOT: the target's module (and brd) unloaded.
tgt_unload() {
	case $(tgt_kind "$1") in
	c) modprobe -r nvmet-rdma nvmet brd ;;
	rust) rmmod rdma_rust_nvmet ;;
	esac
}

# tgt_ns ROOT NQN NSID SIZE: namespace NSID of subsystem NQN, SIZE bytes (for
# nvmet, brd's RAM disk NSID - 1, which tgt_load made), enabled.
tgt_ns() {
	local n=$1/subsystems/$2/namespaces/$3
	mkdir "$n" || return 1
	case $(tgt_kind "$1") in
	c) printf '%s' "/dev/ram$(($3 - 1))" > "$n/device_path" ;;
	rust) echo "$4" > "$n/size" ;;
	esac || return 1
	# A fixed UUID, as a user keeps a namespace's identity across a target's
	# reload (nvmet makes a random one otherwise, and a host that reconnects
	# to it sees "identifiers changed" and fails the I/O): NVMT_UUID for
	# namespace 1, its last byte the NSID for the others.
	echo "${NVMT_UUID%??}$(printf %02x "$3")" > "$n/device_uuid" && echo 1 > "$n/enable"
}

# tgt_subsys ROOT NQN SIZE [COUNT]: a subsystem that allows any host, with the
# test's serial and model, and namespaces 1 to COUNT (default 1) of SIZE bytes
# each, enabled.
tgt_subsys() {
	local s=$1/subsystems/$2 i=1
	mkdir "$s" && echo $NVMT_SERIAL > "$s/attr_serial" && echo $NVMT_MODEL > "$s/attr_model" &&
		echo 1 > "$s/attr_allow_any_host" || return 1
	while [ $i -le "${4:-1}" ]; do
		tgt_ns "$1" "$2" $i "$3" || return 1
		i=$((i + 1))
	done
}

# tgt_port ROOT PORT_ID ADDR SVCID: an RDMA port on ADDR:SVCID (IPv4).
tgt_port() {
	local p=$1/ports/$2
	mkdir "$p" && echo rdma > "$p/addr_trtype" && echo ipv4 > "$p/addr_adrfam" &&
		echo "$3" > "$p/addr_traddr" && echo "$4" > "$p/addr_trsvcid"
}

# tgt_setup ROOT NQN PORT_ID ADDR SVCID SIZE [COUNT]: subsystem NQN (any host,
# COUNT namespaces of SIZE bytes, default one) served on a new port PORT_ID at
# ADDR:SVCID.
tgt_setup() {
	tgt_subsys "$1" "$2" "$6" "${7:-1}" && tgt_port "$1" "$3" "$4" "$5" &&
		ln -s "$1/subsystems/$2" "$1/ports/$3/subsystems/$2"
}

# tgt_siw_port ROOT NQN PORT_ID SVCID ON: subsystem NQN also served on port
# PORT_ID at siw0's address and SVCID (ON 1: iw_cm listens, TCP underneath),
# or that port gone again (ON 0).
tgt_siw_port() {
	if [ "$5" = 1 ]; then
		tgt_port "$1" "$3" $NVMT_SIW_ADDR "$4" && ln -s "$1/subsystems/$2" "$1/ports/$3/subsystems/$2"
	else
		rm "$1/ports/$3/subsystems/$2" && rmdir "$1/ports/$3"
	fi
}

# tgt_allow_only ROOT NQN HOSTNQN: subsystem NQN allows HOSTNQN and no other.
tgt_allow_only() {
	local s=$1/subsystems/$2
	echo 0 > "$s/attr_allow_any_host" && mkdir -p "$1/hosts/$3" &&
		ln -s "$1/hosts/$3" "$s/allowed_hosts/$3"
}

# tgt_teardown ROOT: everything under ROOT removed, in the order configfs
# wants (links, ports, namespaces, subsystems, hosts), whatever a failed row
# left; fails, naming it, if anything stays.
tgt_teardown() {
	local r=$1 p s n h left
	for p in "$r"/ports/*; do
		[ -d "$p" ] || continue
		rm -f "$p"/subsystems/* && rmdir "$p"
	done
	for s in "$r"/subsystems/*; do
		[ -d "$s" ] || continue
		rm -f "$s"/allowed_hosts/*
		for n in "$s"/namespaces/*; do
			[ -d "$n" ] || continue
			echo 0 > "$n/enable" && rmdir "$n"
		done
		rmdir "$s"
	done
	for h in "$r"/hosts/*; do
		[ -d "$h" ] && rmdir "$h"
	done
	left=$(ls "$r"/ports "$r"/subsystems "$r"/hosts 2>&1 | grep -v ':$' | grep .)
	[ -z "$left" ] || { echo "left in $r after teardown:"; echo "$left"; return 1; }
}

# --- the host -------------------------------------------------------------------
# nvmt_host_setup: nvme-rdma loaded and this guest's host NQN and ID, where
# nvme-cli reads them (it would make a host NQN from the machine's DMI UUID
# that does not match the host ID it makes).
nvmt_host_setup() {
	local id
	id=$(cat /proc/sys/kernel/random/uuid)
	HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:$id
	mkdir -p /etc/nvme
	echo "$HOSTNQN" > /etc/nvme/hostnqn
	echo "$id" > /etc/nvme/hostid
	modprobe nvme-rdma
}

# nvmt_ctrl NQN: the host's controller (nvmeN) of subsystem NQN; fails if none.
nvmt_ctrl() {
	local c
	for c in /sys/class/nvme/nvme*; do
		[ -e "$c/subsysnqn" ] && [ "$(cat "$c/subsysnqn")" = "$1" ] && { echo "${c##*/}"; return 0; }
	done
	return 1
}
# nvmt_ns NQN: the block device (nvmeSnM) of the namespaces of subsystem NQN,
# from its first controller: with native multipath the controller lists its
# path (nvmeScCnM) of the namespace's head, which is the disk.
nvmt_ns() {
	local c
	c=$(nvmt_ctrl "$1") || return 1
	ls /sys/class/nvme/"$c" |
		sed -n 's/^nvme\([0-9]*\)c[0-9]*n\([0-9]*\)$/nvme\1n\2/p; s/^\(nvme[0-9]*n[0-9]*\)$/\1/p' | sort -u | grep .
}
nvmt_no_ctrl() { ! nvmt_ctrl "$1" > /dev/null; }

# nvmt_discover NQN ADDR SVCID: `nvme discover` lists NQN at ADDR:SVCID over
# RDMA.
nvmt_discover() {
	$NVME discover -t rdma -a "$2" -s "$3" > /tmp/nvmt-disc 2>&1 ||
		{ cat /tmp/nvmt-disc; echo "nvme discover failed"; return 1; }
	awk -v nqn="$1" -v addr="$2" -v svc="$3" '
		function entry() { if (f["subnqn"] == nqn && f["trtype"] == "rdma" &&
			f["trsvcid"] == svc && f["traddr"] == addr) found = 1; delete f }
		/^=====Discovery Log Entry/ { entry() }
		/^[a-z_]+: / { k = $1; sub(":", "", k); v = $0; sub("^[a-z_]+: *", "", v); sub(" *$", "", v); f[k] = v }
		END { entry(); exit !found }' /tmp/nvmt-disc ||
		{ cat /tmp/nvmt-disc; echo "no discovery log entry with subnqn $1, trtype rdma, traddr $2, trsvcid $3"; return 1; }
}

# nvmt_connect NQN ADDR SVCID [ARGS...]: `nvme connect` (ARGS added) gives a
# controller of NQN with exactly one namespace, /dev/nvmeNnM.
nvmt_connect() {
	local nqn=$1 a=$2 s=$3 ns
	shift 3
	nvmt_no_ctrl "$nqn" || { echo "a controller of $nqn exists before the connect"; return 1; }
	$NVME connect -t rdma -n "$nqn" -a "$a" -s "$s" "$@" || { echo "nvme connect failed"; return 1; }
	wait_for 10 nvmt_ns "$nqn" || { ls /sys/class/nvme/*; echo "no namespace of $nqn within 10 s"; return 1; }
	ns=$(nvmt_ns "$nqn")
	[ "$(echo "$ns" | wc -l)" = 1 ] || { echo "expected one namespace, got: $ns"; return 1; }
	wait_for 5 test -b "/dev/$ns" || { echo "no block device /dev/$ns"; return 1; }
}

# nvmt_has_nsid NQN NSID: the host has a block device of namespace NSID of NQN.
nvmt_has_nsid() { nvmt_ns "$1" | grep -q "n$2\$"; }
nvmt_lacks_nsid() { ! nvmt_has_nsid "$@"; }

# nvmt_ns_notice ROOT NQN ON: namespace 2 of subsystem NQN added and enabled
# (ON 1) or disabled and removed (ON 0) in the target's configfs under the
# connected host: the target's Namespace Attribute Changed notice makes the
# host rescan (nvme core logs "rescanning namespaces" for that notice only),
# and within 10 s its block device is there (or gone).
nvmt_ns_notice() {
	local n=$1/subsystems/$2/namespaces/2
	nvmt_ctrl "$2" > /dev/null || { echo "no controller of $2"; return 1; }
	mark
	if [ "$3" = 1 ]; then
		tgt_ns "$1" "$2" 2 $NVMT_SIZE || { echo "adding namespace 2 failed"; return 1; }
		wait_for 10 nvmt_has_nsid "$2" 2 || { nvmt_ns "$2"; echo "the host has no namespace 2 within 10 s"; return 1; }
	else
		echo 0 > "$n/enable" && rmdir "$n" || { echo "removing namespace 2 failed"; return 1; }
		wait_for 10 nvmt_lacks_nsid "$2" 2 || { nvmt_ns "$2"; echo "the host still has namespace 2 after 10 s"; return 1; }
	fi
	since_mark | grep -q "nvme[0-9]*: rescanning namespaces" || { echo "the host had no namespace notice"; return 1; }
}

# nvmt_field FILE NAME: the value of `NAME : value` in nvme-cli's output FILE.
nvmt_field() { sed -n "s/^$2 *: *//p" "$1" | sed 's/ *$//'; }

# nvmt_id_ctrl NQN: `nvme id-ctrl` shows the configured serial, model and NQN.
nvmt_id_ctrl() {
	local c sn mn nqn
	c=$(nvmt_ctrl "$1") || { echo "no controller of $1"; return 1; }
	$NVME id-ctrl "/dev/$c" > /tmp/nvmt-idc 2>&1 || { cat /tmp/nvmt-idc; echo "nvme id-ctrl failed"; return 1; }
	sn=$(nvmt_field /tmp/nvmt-idc sn) mn=$(nvmt_field /tmp/nvmt-idc mn) nqn=$(nvmt_field /tmp/nvmt-idc subnqn)
	[ "$sn" = $NVMT_SERIAL ] && [ "$mn" = $NVMT_MODEL ] && [ "$nqn" = "$1" ] ||
		{ echo "id-ctrl: sn '$sn' mn '$mn' subnqn '$nqn', expected '$NVMT_SERIAL' '$NVMT_MODEL' '$1'"; return 1; }
}

# nvmt_id_ns NQN SIZE: `nvme id-ns` gives SIZE bytes: nsze blocks of the
# format in use.
nvmt_id_ns() {
	local ns nsze lbads
	ns=$(nvmt_ns "$1") || { echo "no namespace of $1"; return 1; }
	$NVME id-ns "/dev/$ns" > /tmp/nvmt-idn 2>&1 || { cat /tmp/nvmt-idn; echo "nvme id-ns failed"; return 1; }
	nsze=$(nvmt_field /tmp/nvmt-idn nsze)
	lbads=$(sed -n 's/^lbaf .*lbads:\([0-9]*\) .*(in use).*/\1/p' /tmp/nvmt-idn)
	[ -n "$nsze" ] && [ -n "$lbads" ] && [ $((nsze << lbads)) = "$2" ] ||
		{ cat /tmp/nvmt-idn; echo "nsze $nsze blocks of 2^$lbads bytes: expected $2 bytes"; return 1; }
}

# nvmt_list NQN: `nvme list` has the namespace's line, with the serial.
nvmt_list() {
	local ns
	ns=$(nvmt_ns "$1") || { echo "no namespace of $1"; return 1; }
	$NVME list > /tmp/nvmt-list 2>&1 || { cat /tmp/nvmt-list; echo "nvme list failed"; return 1; }
	grep -q "^/dev/$ns .* $NVMT_SERIAL " /tmp/nvmt-list ||
		{ cat /tmp/nvmt-list; echo "no line of /dev/$ns with serial $NVMT_SERIAL"; return 1; }
}

# nvmt_fio_dev DEV RW BS QD SIZE: fio writes SIZE of the block device DEV (RW,
# BS blocks, QD deep, direct I/O by libaio), reads every block back and checks
# its crc32c; fio must exit 0 and report no error. (DEV must be a block
# device: fio would make a regular file of a missing one, and pass.)
nvmt_fio_dev() {
	local rc=0
	[ -b "$1" ] || { echo "$1 is not a block device"; return 1; }
	$FIO --name=verify --filename="$1" --direct=1 --ioengine=libaio --rw="$2" --bs="$3" \
		--iodepth="$4" --size="$5" --verify=crc32c --do_verify=1 --verify_fatal=1 --thread \
		--output=/tmp/nvmt-fio > /dev/null 2>&1 || rc=$?
	grep -q 'err= 0' /tmp/nvmt-fio && [ $rc = 0 ] ||
		{ cat /tmp/nvmt-fio; echo "fio exited with $rc: expected 0, and err= 0 in its report"; return 1; }
	kmsg "rdmatest: fio ${1#/dev/} $2 $3 QD $4 $5: $(grep -o 'IOPS=[^,]*' /tmp/nvmt-fio | tr '\n' ' ')"
}
# nvmt_fio NQN RW BS QD SIZE: nvmt_fio_dev on the namespace of subsystem NQN.
nvmt_fio() {
	local ns
	ns=$(nvmt_ns "$1") || { echo "no namespace of $1"; return 1; }
	shift
	nvmt_fio_dev "/dev/$ns" "$@"
}

# nvmt_sums DIR: the checksums of the files under DIR.
nvmt_sums() { (cd "$1" && find . -type f | sort | xargs md5sum); }

# nvmt_ext4_dev DEV [FILES]: ext4 made on the block device DEV and mounted,
# FILES pairs of files (default 4: 5 MiB in all; 1: 512 KiB) written and
# their checksums taken, unmounted, `e2fsck -f -n` clean, mounted again: the
# same checksums.
nvmt_ext4_dev() {
	local dev=$1 files=${2:-4} m=/mnt/nvmt i
	[ -b "$dev" ] || { echo "$dev is not a block device"; return 1; }
	# (ext4 asks the crypto API for crc32c, which the kernel cannot load by
	# itself here: the image has no /sbin/modprobe.)
	modprobe -a crc32c_generic ext4 || return 1
	# e2fsprogs' mke2fs, not busybox's applet (ext2 only), which a bare name runs.
	/usr/bin/mke2fs -q -F -t ext4 "$dev" || { echo "mke2fs -t ext4 $dev failed"; return 1; }
	mkdir -p $m && mount -t ext4 "$dev" $m || { echo "mount -t ext4 $dev failed"; return 1; }
	mkdir -p $m/dir
	for i in $(seq 1 "$files"); do
		dd if=/dev/urandom of="$m/f$i" bs=64k count=$((i * 8)) 2> /dev/null &&
			dd if=/dev/urandom of="$m/dir/g$i" bs=1k count="$i" 2> /dev/null || { umount $m; echo "writing f$i failed"; return 1; }
	done
	nvmt_sums $m > /tmp/nvmt-sums1
	umount $m || { echo "umount failed"; return 1; }
	/usr/bin/e2fsck -f -n "$dev" > /tmp/nvmt-fsck 2>&1 || { cat /tmp/nvmt-fsck; echo "e2fsck -f -n $dev: not clean"; return 1; }
	mount -t ext4 "$dev" $m || { echo "mount -t ext4 $dev (again) failed"; return 1; }
	nvmt_sums $m > /tmp/nvmt-sums2
	umount $m || { echo "umount (again) failed"; return 1; }
	cmp -s /tmp/nvmt-sums1 /tmp/nvmt-sums2 ||
		{ diff /tmp/nvmt-sums1 /tmp/nvmt-sums2; echo "checksums differ after the remount"; return 1; }
	[ "$(wc -l < /tmp/nvmt-sums1)" = $((files * 2)) ] || { cat /tmp/nvmt-sums1; echo "expected $((files * 2)) files"; return 1; }
}
# nvmt_ext4 NQN: nvmt_ext4_dev on the namespace of subsystem NQN.
nvmt_ext4() {
	local ns
	ns=$(nvmt_ns "$1") || { echo "no namespace of $1"; return 1; }
	nvmt_ext4_dev "/dev/$ns"
}

# nvmt_disconnect NQN: `nvme disconnect` ends the controller: it and its
# block device are gone.
nvmt_disconnect() {
	local ns
	ns=$(nvmt_ns "$1")
	$NVME disconnect -n "$1" > /tmp/nvmt-disc-out 2>&1 || { cat /tmp/nvmt-disc-out; echo "nvme disconnect failed"; return 1; }
	grep -q "disconnected 1 controller" /tmp/nvmt-disc-out || { cat /tmp/nvmt-disc-out; echo "expected 1 controller disconnected"; return 1; }
	wait_for 10 nvmt_no_ctrl "$1" || { echo "the controller of $1 is still there after 10 s"; return 1; }
	[ -z "$ns" ] || wait_for 5 sh -c "! test -e /dev/$ns" || { echo "/dev/$ns is still there"; return 1; }
}

# nvmt_host_quiet: since the suite's mark, the host logged no I/O error and
# no error recovery, reconnect, timeout or failure of a controller: a command
# the target failed that its user did not report (mke2fs goes on when its
# discard fails) still fails the suite.
#
# One line is the 6.12 host's own and is let through, only while that
# controller is being removed: nvme_do_delete_ctrl no longer stops the
# keep-alive work before nvme_rdma_shutdown_ctrl quiesces and stops the admin
# queue (nvme_stop_keep_alive runs later, in nvme_remove_admin_tag_set), so a
# keep-alive queued in that window is failed by the host itself, before it
# is sent (nvme_fail_nonready_command: BLK_STS_TRANSPORT, 4), whatever the
# target does.  Any other keep-alive failure, or this one on a live
# controller, still counts.
nvmt_host_quiet() {
	since_mark | awk '
		{ c = ""; if (match($0, /nvme nvme[0-9]+: /)) c = substr($0, RSTART + 5, RLENGTH - 7) }
		/: Removing ctrl: / { removing[c] = 1 }
		/: new ctrl: / { removing[c] = 0 }
		/failed nvme_keep_alive_end_io error=4$/ && removing[c] { next }
		{ print }' |
		grep 'nvme' | grep -i 'error\|reconnect\|timeout\|failed' > /tmp/nvmt-host-errs
	[ ! -s /tmp/nvmt-host-errs ] || { cat /tmp/nvmt-host-errs; echo "the host logged the errors above"; return 1; }
}

# nvmt_refused NQN ADDR SVCID: a connect as this host, which the subsystem
# does not allow, fails, no controller stays, and the host logs why (the
# target's Connect status: invalid host).
nvmt_refused() {
	mark
	if $NVME connect -t rdma -n "$1" -a "$2" -s "$3" > /tmp/nvmt-conn 2>&1; then
		$NVME disconnect -n "$1" > /dev/null 2>&1
		echo "connect as $HOSTNQN succeeded: expected a refusal"; return 1
	fi
	nvmt_no_ctrl "$1" || { echo "a controller of $1 stayed after the refused connect"; return 1; }
	wait_for 5 since_mark_has "Connect for subsystem $1 is not allowed, hostnqn: $HOSTNQN" ||
		{ cat /tmp/nvmt-conn; since_mark; echo "the host did not log: Connect for subsystem $1 is not allowed, hostnqn: $HOSTNQN"; return 1; }
}

# nvmt_kato NQN KATO: the controller's keep-alive timeout is KATO s on the
# host, and the target reports KATO * 1000 ms (Get Features, Keep Alive Timer).
nvmt_kato() {
	local c v
	c=$(nvmt_ctrl "$1") || { echo "no controller of $1"; return 1; }
	[ "$(cat /sys/class/nvme/"$c"/kato)" = "$2" ] || { echo "host kato $(cat /sys/class/nvme/"$c"/kato), expected $2"; return 1; }
	$NVME get-feature "/dev/$c" -f 0x0f > /tmp/nvmt-feat 2>&1 || { cat /tmp/nvmt-feat; echo "get-feature 0x0f failed"; return 1; }
	v=$(sed -n 's/.*value: *\(0x[0-9a-fA-F]*\).*/\1/p' /tmp/nvmt-feat)
	[ -n "$v" ] && [ $((v)) = $(($2 * 1000)) ] || { cat /tmp/nvmt-feat; echo "target's keep alive timer '$v', expected $(($2 * 1000)) ms"; return 1; }
}

# nvmt_alive NQN SECONDS: after SECONDS of an idle host (keep-alives only),
# the controller is still live, and neither side logged a keep-alive failure.
nvmt_alive() {
	local c
	c=$(nvmt_ctrl "$1") || { echo "no controller of $1"; return 1; }
	mark
	sleep "$2"
	[ "$(cat /sys/class/nvme/"$c"/state)" = live ] || { since_mark; echo "controller $c is $(cat /sys/class/nvme/"$c"/state) after $2 s, expected live"; return 1; }
	! since_mark | grep -i 'keep.alive\|kato' || { echo "a keep-alive failure was logged"; return 1; }
}

# nvmt_leak_mark: kmemleak's suspects so far, by address: the suite's leak
# row reports only the new ones (what an earlier suite or target left is its
# own row's).
nvmt_leak_mark() {
	local f=/sys/kernel/debug/kmemleak
	: > /tmp/nvmt-leaks-before
	[ -e $f ] && echo scan > $f 2>/dev/null &&
		grep -o '^unreferenced object 0x[0-9a-f]*' $f > /tmp/nvmt-leaks-before
	true
}
# nvmt_kmemleak_clean: kmemleak finds nothing new since nvmt_leak_mark (as
# kmemleak_clean, which it follows: objects age 5 s before they are reported).
nvmt_kmemleak_clean() {
	local f=/sys/kernel/debug/kmemleak
	[ -e $f ] || { echo "no $f (CONFIG_DEBUG_KMEMLEAK off?)"; return 1; }
	sleep 6
	echo scan > $f || { echo "kmemleak refused to scan:"; dmesg | grep -i kmemleak | tail -n 5; return 1; }
	sleep 1
	echo scan > $f || { echo "kmemleak refused to scan"; return 1; }
	awk 'FILENAME == ARGV[1] { old[$3] = 1; next }
		/^unreferenced object/ { show = !($3 in old) } show' /tmp/nvmt-leaks-before $f > /tmp/nvmt-leaks
	[ ! -s /tmp/nvmt-leaks ] || { cat /tmp/nvmt-leaks; return 1; }
}

# nvmt_setup_other_host ROOT NQN SVCID: the test's subsystem on port 1 at
# SVCID, allowing only the other host.
nvmt_setup_other_host() {
	tgt_setup "$1" "$2" 1 $NVMT_ADDR "$3" $NVMT_SIZE && tgt_allow_only "$1" "$2" $NVMT_OTHER
}

# nvmt_resources: guest-ulp.sh's rdma_resources (each device's counts of
# RDMA objects), less the idle CQs of the core's CQ pool: nvmet-rdma and
# nvme-rdma take their CQs from it (ib_cq_pool_get), and ib_core keeps them,
# idle, until the device goes. They are the device's, not a leak.
nvmt_resources() {
	rdma resource show cq | awk '/ users 0 .*comm \[ib_core\]/ { n[$2 ":"]++ }
		END { for (d in n) print d, n[d] }' > /tmp/nvmt-pool
	rdma_resources | awk 'FILENAME != "-" { pool[$1] = $2; next }
		{ for (i = 2; i < NF; i++) if ($i == "cq") $(i + 1) -= pool[$1]; print }' /tmp/nvmt-pool -
}
nvmt_resources_same() { nvmt_resources | cmp -s - /tmp/nvmt-res; }
# nvmt_resources_back: the RDMA resources are back to what they were before
# the target loaded (the host's and the target's queues are freed by work
# items: allow 10 s).
nvmt_resources_back() {
	wait_for 10 nvmt_resources_same && return 0
	nvmt_resources > /tmp/nvmt-res-after
	diff /tmp/nvmt-res /tmp/nvmt-res-after
	rdma resource show qp; rdma resource show cq; rdma resource show cm_id; rdma resource show pd
	echo "RDMA resources not back to what they were before the target"
	return 1
}

# --- the suite --------------------------------------------------------------------
# nvmt_check NAME COMMAND...: check NAME, unless the target is absent
# (nvmt_skip: SKIP with the reason) or what the row needs failed before
# (nvmt_gate: it fails, naming that); false if the row did not pass.
nvmt_check() {
	local before=$nfail
	if [ -n "$nvmt_skip" ]; then
		case_skip "$1" "$nvmt_skip"
		return 1
	fi
	if [ -n "$nvmt_gate" ]; then
		case_fail "$1" "not run: $nvmt_gate"
		return 1
	fi
	check "$@"
	[ "$nfail" = "$before" ]
}

# nvmt_target_suite SUITE ROOT SVCID: every row against the target of ROOT,
# its port on rxe0's address at SVCID.
nvmt_target_suite() {
	local root=$2 svc=$3 nqn tgt_gate= ctrl_gate=
	nqn=nqn.2026-11.org.rdma-rust:$1
	suite_begin "$1"
	nvmt_skip= nvmt_gate=
	if [ "$(tgt_kind "$root")" = rust ] && [ ! -e $NVMT_RUST_KO ]; then
		nvmt_skip="rdma_rust_nvmet.ko is not in the image (no drivers/rdma_rust_nvmet in this tree)"
		kmsg "rdmatest: nvmet: $1: every row skipped: $nvmt_skip"
	fi
	kmsg "rdmatest: nvmet: $1: MemFree $(awk '/^MemFree:/ { print int($2 / 1024) }' /proc/meminfo) MiB before the target"
	nvmt_resources > /tmp/nvmt-res
	nvmt_leak_mark
	mark

	# Two RAM disks for nvmet: the second is namespace 2 of the notice rows.
	nvmt_check target_load tgt_load "$root" $NVMT_SIZE 2 || tgt_gate="the target did not load (row target_load)"
	nvmt_gate=$tgt_gate
	nvmt_check target_setup tgt_setup "$root" "$nqn" 1 $NVMT_ADDR "$svc" $NVMT_SIZE ||
		tgt_gate=${tgt_gate:-"the target was not set up (row target_setup)"}
	nvmt_gate=$tgt_gate
	nvmt_check discover_lists_subsystem nvmt_discover "$nqn" $NVMT_ADDR "$svc"
	nvmt_check connect_one_namespace nvmt_connect "$nqn" $NVMT_ADDR "$svc" ||
		ctrl_gate="no controller (row connect_one_namespace)"
	nvmt_gate=${tgt_gate:-$ctrl_gate}
	nvmt_check id_ctrl_serial_model_nqn nvmt_id_ctrl "$nqn"
	nvmt_check id_ns_size nvmt_id_ns "$nqn" $NVMT_SIZE
	nvmt_check list_shows_namespace nvmt_list "$nqn"
	# Small enough for the debug kernel under TCG: nvmet-rdma there does
	# ~200 IOPS at QD 1, ~450 at QD 32 and ~35 of 128 KiB on a quiet host,
	# a third of that on a busy one, so each of these takes 5-15 s.
	nvmt_check fio_randwrite_4k_qd1_verify nvmt_fio "$nqn" randwrite 4k 1 1m
	nvmt_check fio_randwrite_4k_qd32_verify nvmt_fio "$nqn" randwrite 4k 32 4m
	nvmt_check fio_write_128k_verify nvmt_fio "$nqn" write 128k 8 8m
	nvmt_check ext4_fsck_remount_checksums nvmt_ext4 "$nqn"
	kmsg "rdmatest: nvmet: $1: MemFree $(awk '/^MemFree:/ { print int($2 / 1024) }' /proc/meminfo) MiB with the namespace written"
	# Namespace notices (Asynchronous Events): the stock host follows a
	# namespace that comes and goes.
	nvmt_check namespace_added_host_sees_it nvmt_ns_notice "$root" "$nqn" 1
	nvmt_check namespace_removed_host_drops_it nvmt_ns_notice "$root" "$nqn" 0
	nvmt_check disconnect_device_gone nvmt_disconnect "$nqn"
	$NVME disconnect-all > /dev/null 2>&1
	# The stock host on the Rust target over soft-iWARP (rdma_nvme_host has
	# the Rust host on nvmet-rdma there): a second port on siw0's address;
	# data verified at depth 32 and in 128 KiB blocks (the target reads those
	# from the host: on iWARP through an MR, rdma_rw's way).
	if [ "$(tgt_kind "$root")" = rust ]; then
	nvmt_gate=$tgt_gate
	nvmt_check siw_port_added tgt_siw_port "$root" "$nqn" 2 "$svc" 1
	nvmt_check siw_connect nvmt_connect "$nqn" $NVMT_SIW_ADDR "$svc" ||
		nvmt_gate=${nvmt_gate:-"no controller over siw0 (row siw_connect)"}
	nvmt_check siw_fio_randwrite_4k_qd32_verify nvmt_fio "$nqn" randwrite 4k 32 1m
	nvmt_check siw_fio_write_128k_verify nvmt_fio "$nqn" write 128k 8 2m
	nvmt_check siw_disconnect_device_gone nvmt_disconnect "$nqn"
	$NVME disconnect-all > /dev/null 2>&1
	nvmt_gate=$tgt_gate
	nvmt_check siw_port_removed tgt_siw_port "$root" "$nqn" 2 "$svc" 0
	fi
	nvmt_check host_logged_no_errors nvmt_host_quiet
	nvmt_gate=$tgt_gate
	nvmt_check teardown_leaves_nothing tgt_teardown "$root"
	nvmt_check rdma_resources_back nvmt_resources_back
	nvmt_check kmemleak_clean nvmt_kmemleak_clean

	# A host that the subsystem does not allow is refused at Connect; the one
	# it allows connects (the refusal is the host NQN's, not the setup's).
	nvmt_check host_not_allowed_setup nvmt_setup_other_host "$root" "$nqn" "$svc" ||
		nvmt_gate=${nvmt_gate:-"no subsystem (row host_not_allowed_setup)"}
	nvmt_check host_not_allowed_refused nvmt_refused "$nqn" $NVMT_ADDR "$svc"
	nvmt_check allowed_host_connects nvmt_connect "$nqn" $NVMT_ADDR "$svc" \
		--hostnqn=$NVMT_OTHER --hostid=$NVMT_OTHER_ID
	$NVME disconnect-all > /dev/null 2>&1
	tgt_teardown "$root" > /dev/null 2>&1
	nvmt_gate=$tgt_gate

	# Keep-alive: a connect with a 5 s keep-alive timeout; the controller
	# lives on past two timeouts of an idle host.
	nvmt_check keep_alive_setup tgt_setup "$root" "$nqn" 1 $NVMT_ADDR "$svc" $NVMT_SIZE ||
		nvmt_gate=${nvmt_gate:-"no subsystem (row keep_alive_setup)"}
	nvmt_check keep_alive_connect nvmt_connect "$nqn" $NVMT_ADDR "$svc" -k 5 ||
		nvmt_gate=${nvmt_gate:-"no controller (row keep_alive_connect)"}
	nvmt_check keep_alive_kato_5s nvmt_kato "$nqn" 5
	nvmt_check keep_alive_live_after_12s nvmt_alive "$nqn" 12
	nvmt_gate=$tgt_gate
	nvmt_check keep_alive_disconnect nvmt_disconnect "$nqn"
	$NVME disconnect-all > /dev/null 2>&1
	nvmt_check keep_alive_teardown tgt_teardown "$root"

	# Paths and faults under I/O (guest-nvmet-paths.sh).
	nvmt_check paths_setup tgt_setup "$root" "$nqn" 1 $NVMT_ADDR "$svc" $NVMT_SIZE ||
		nvmt_gate=${nvmt_gate:-"no subsystem (row paths_setup)"}
	nvmt_paths_rows "$root" "$nqn" "$svc"
	nvmt_gate=$tgt_gate
	$NVME disconnect-all > /dev/null 2>&1
	nvmt_check paths_teardown tgt_teardown "$root"

	# The module unloads and everything is back as before the suite.
	nvmt_check target_unload tgt_unload "$root"
	nvmt_gate=
	nvmt_check rdma_resources_back_after_unload nvmt_resources_back
	suite_end
}

# nvmet_hostile_suite: the suite rdma_nvmet_hostile: the hostile host's rows
# against rdma_rust_nvmet on rxe0's address, then the module unloaded with
# nothing left.
nvmet_hostile_suite() {
	suite_begin rdma_nvmet_hostile
	if [ ! -e $NVMT_RUST_KO ]; then
		case_skip hostile_load "rdma_rust_nvmet.ko is not in the image"
		suite_end
		return
	fi
	nvmt_resources > /tmp/nvmt-res
	check hostile_load insmod $NVMT_RUST_KO
	nvmet_hostile_rows $NVMT_ADDR
	check hostile_unload nvh_unload
	check hostile_resources_back nvmt_resources_back
	suite_end
}

# nvmt_targets: the targets asked for (rdmatest.nvmet_target, run.sh's
# NVMET_TARGET: c, rust or both); without it, both when the image has
# rdma_rust_nvmet.ko, else c. (guest-nvme.sh's suite runs against the same.)
nvmt_targets() {
	local t
	t=$(arg rdmatest.nvmet_target)
	if [ -z "$t" ]; then
		if [ -e $NVMT_RUST_KO ]; then t=both; else t=c; fi
	fi
	echo "$t"
}

# nvmet_suite: the host set up, then the suite against each target asked for.
nvmet_suite() {
	local targets
	targets=$(nvmt_targets)
	nvmt_host_setup || say "rdmatest: nvmet: the host did not set up (modprobe nvme-rdma failed)"
	case $targets in
	c | both) nvmt_target_suite rdma_nvmet_c $CFS/nvmet 4420 ;;
	esac
	case $targets in
	rust | both)
		nvmt_target_suite rdma_nvmet_rust $CFS/rdma_rust_nvmet 4421
		# Its configfs tree: every directory, attribute, link and refusal
		# (guest-nvmet-cfs.sh).
		nvmet_cfs_suite
		# A hostile host's capsules and connection requests, each with the
		# status it must get (guest-nvmet-hostile.sh).
		nvmet_hostile_suite ;;
	esac
}
