#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# rdma_rust_nvmet's configfs tree (the suite rdma_nvmet_configfs), in one guest,
# without a host: every kind of directory made and removed, every attribute
# written and read back, links made and removed, each refusal with its errno
# and its message, rmmod refused while the tree holds directories, then clean,
# and nothing leaked. Sourced by guest-nvmet.sh (guest-init.sh's helpers:
# check, mark, since_mark).

CFS_ROOT=/sys/kernel/config/rdma_rust_nvmet
CFS_KO=/lib/modules/extra/rdma_rust_nvmet.ko
CFS_NQN=nqn.2026-11.org.rdma-rust:cfs
CFS_HOST=nqn.2026-11.org.rdma-rust:host-a

# cfs_write FILE VALUE: VALUE written to FILE by echo, whose error message names
# the errno (busybox's printf does not say why a write failed).
cfs_write() { echo "$2" > "$1"; }
# cfs_is FILE VALUE: FILE reads VALUE.
cfs_is() {
	local v
	v=$(cat "$1") || return 1
	[ "$v" = "$2" ] || { echo "$1 reads '$v', expected '$2'"; return 1; }
}
# cfs_set FILE VALUE: VALUE written to FILE, which then reads it back.
cfs_set() { cfs_write "$1" "$2" && cfs_is "$1" "$2"; }
# cfs_refused ERRNO_TEXT COMMAND...: COMMAND fails, and its message names the
# errno (its strerror text: "Invalid argument" for EINVAL).
cfs_refused() {
	local want=$1 out
	shift
	if out=$("$@" 2>&1); then
		echo "'$*' succeeded, expected it to fail with '$want'"
		return 1
	fi
	case $out in
	*"$want"*) ;;
	*) echo "'$*' failed with '$out', expected '$want'"; return 1 ;;
	esac
}
# cfs_refused_says ERRNO_TEXT MESSAGE COMMAND...: as cfs_refused, and the
# kernel logged MESSAGE (a fixed string) meanwhile.
cfs_refused_says() {
	local want=$1 msg=$2
	shift 2
	mark
	cfs_refused "$want" "$@" || return 1
	since_mark | grep -qF "$msg" || { echo "no kernel message '$msg' after '$*'"; return 1; }
}
# cfs_has DIR NAME...: DIR holds each NAME.
cfs_has() {
	local d=$1 f
	shift
	for f in "$@"; do
		[ -e "$d/$f" ] || { echo "no $d/$f; $d holds: $(ls "$d" | tr '\n' ' ')"; return 1; }
	done
}

# cfs_load: the module loads, configfs is mounted, the root holds nvmet's three
# groups and nothing else.
cfs_load() {
	grep -q ' /sys/kernel/config configfs ' /proc/mounts ||
		mount -t configfs none /sys/kernel/config || return 1
	insmod $CFS_KO || return 1
	[ "$(ls $CFS_ROOT | tr '\n' ' ')" = "hosts ports subsystems " ] ||
		{ echo "$CFS_ROOT holds: $(ls $CFS_ROOT | tr '\n' ' '), expected hosts ports subsystems"; return 1; }
}

# cfs_subsys: a subsystem with its attributes and default groups, each
# attribute written and read back.
cfs_subsys() {
	local s=$CFS_ROOT/subsystems/$CFS_NQN
	mkdir "$s" && cfs_has "$s" attr_allow_any_host attr_serial attr_model namespaces allowed_hosts &&
		cfs_is "$s/attr_allow_any_host" 0 && cfs_set "$s/attr_serial" cfs0042 &&
		cfs_set "$s/attr_model" rdma-rust-cfs && cfs_set "$s/attr_allow_any_host" 1 &&
		cfs_set "$s/attr_allow_any_host" 0
}

# cfs_ns: namespace 1 with its attributes: a size, a UUID, enabled and
# disabled again.
cfs_ns() {
	local n=$CFS_ROOT/subsystems/$CFS_NQN/namespaces/1
	mkdir "$n" && cfs_has "$n" size device_uuid enable && cfs_is "$n/enable" 0 &&
		cfs_write "$n/size" 1m && cfs_is "$n/size" 1048576 &&
		cfs_set "$n/device_uuid" 01234567-89ab-cdef-0123-456789abcdef &&
		cfs_set "$n/enable" 1 && cfs_set "$n/enable" 0
}

# cfs_ns_refusals: bad namespace names and values are refused, with EINVAL,
# or EBUSY for a change while the namespace is enabled.
cfs_ns_refusals() {
	local ns=$CFS_ROOT/subsystems/$CFS_NQN/namespaces n=$CFS_ROOT/subsystems/$CFS_NQN/namespaces/1
	cfs_refused "Invalid argument" mkdir "$ns/0" &&
		cfs_refused_says "Invalid argument" "namespace 'x1': not a number" mkdir "$ns/x1" &&
		cfs_refused "Invalid argument" mkdir "$ns/4294967296" &&
		cfs_refused "Invalid argument" cfs_write "$n/size" 1000 &&
		cfs_refused_says "Invalid argument" "size 'big': bytes" cfs_write "$n/size" big &&
		cfs_refused "Invalid argument" cfs_write "$n/device_uuid" 0123 &&
		cfs_refused "Invalid argument" cfs_write "$n/enable" 2 &&
		cfs_is "$n/size" 1048576 && cfs_write "$n/enable" 1 &&
		cfs_refused "Device or resource busy" cfs_write "$n/size" 2m &&
		cfs_write "$n/enable" 0 && [ ! -e "$ns/0" ] && [ ! -e "$ns/x1" ]
}

# cfs_port: port 1 with its address, and its subsystems/ group.
cfs_port() {
	local p=$CFS_ROOT/ports/1
	mkdir "$p" && cfs_has "$p" addr_traddr addr_trsvcid addr_adrfam addr_trtype subsystems &&
		cfs_set "$p/addr_trtype" rdma && cfs_set "$p/addr_adrfam" ipv4 &&
		cfs_set "$p/addr_traddr" 10.77.0.1 && cfs_set "$p/addr_trsvcid" 4430
}

# cfs_port_refusals: an unknown address family, a transport other than rdma, a
# port id that is not one, each refused with EINVAL and a message.
cfs_port_refusals() {
	local p=$CFS_ROOT/ports/1
	cfs_refused_says "Invalid argument" "addr_adrfam 'ipx'" cfs_write "$p/addr_adrfam" ipx &&
		cfs_refused_says "Invalid argument" "addr_trtype 'tcp'" cfs_write "$p/addr_trtype" tcp &&
		cfs_refused "Invalid argument" mkdir $CFS_ROOT/ports/65536 &&
		cfs_refused "Invalid argument" mkdir $CFS_ROOT/ports/p1 &&
		cfs_is "$p/addr_adrfam" ipv4 && cfs_is "$p/addr_trtype" rdma
}

# cfs_foreign_link_refused DIR: a link in DIR to a directory of another
# driver's tree (nvmet's subsystems/) is refused with EINVAL.
cfs_foreign_link_refused() {
	local rc=0
	modprobe nvmet || { echo "modprobe nvmet failed"; return 1; }
	cfs_refused "Invalid argument" ln -s /sys/kernel/config/nvmet/subsystems "$1/nvmet" || rc=1
	modprobe -r nvmet || { echo "modprobe -r nvmet failed"; rc=1; }
	return $rc
}

# cfs_links: a host, allowed on the subsystem by a link; the subsystem linked
# to the port; links to the wrong kind of directory refused with EINVAL and a
# message (and a host while the subsystem allows any); the port's address refused (EACCES) while it serves.
cfs_links() {
	local s=$CFS_ROOT/subsystems/$CFS_NQN p=$CFS_ROOT/ports/1
	mkdir "$CFS_ROOT/hosts/$CFS_HOST" && cfs_write "$s/attr_allow_any_host" 1 &&
		cfs_refused_says "Invalid argument" "allows any host" \
			ln -s "$CFS_ROOT/hosts/$CFS_HOST" "$s/allowed_hosts/$CFS_HOST" &&
		cfs_write "$s/attr_allow_any_host" 0 &&
		ln -s "$CFS_ROOT/hosts/$CFS_HOST" "$s/allowed_hosts/$CFS_HOST" &&
		ln -s "$s" "$p/subsystems/$CFS_NQN" &&
		cfs_refused_says "Invalid argument" "only links to a subsystem (subsystems/<nqn>) go here" \
			ln -s "$CFS_ROOT/hosts/$CFS_HOST" "$p/subsystems/host" &&
		cfs_refused_says "Invalid argument" "only links to a host (hosts/<nqn>) go here" \
			ln -s "$s" "$s/allowed_hosts/subsys" &&
		cfs_refused "Invalid argument" ln -s "$s/namespaces" "$p/subsystems/ns" &&
		cfs_refused "Invalid argument" ln -s "$s/namespaces/1" "$p/subsystems/ns1" &&
		cfs_foreign_link_refused "$p/subsystems" &&
		cfs_refused_says "Permission denied" "cannot change while subsystems are linked" \
			cfs_write "$p/addr_trsvcid" 4431 &&
		cfs_is "$p/addr_trsvcid" 4430 &&
		[ -L "$p/subsystems/$CFS_NQN" ] && [ ! -e "$p/subsystems/host" ] && [ ! -e "$s/allowed_hosts/subsys" ]
}

# cfs_busy: configfs keeps what is in use: a linked subsystem or host (EBUSY),
# a port holding a link (ENOTEMPTY), a default group (EPERM), and the module
# while any of the tree is there; the tree is intact after.
cfs_busy() {
	local s=$CFS_ROOT/subsystems/$CFS_NQN
	cfs_refused "Device or resource busy" rmdir "$s" &&
		cfs_refused "Device or resource busy" rmdir "$CFS_ROOT/hosts/$CFS_HOST" &&
		cfs_refused "Directory not empty" rmdir $CFS_ROOT/ports/1 &&
		cfs_refused "Operation not permitted" rmdir "$s/namespaces" &&
		! rmmod rdma_rust_nvmet 2> /tmp/cfs-rmmod &&
		grep -q '^rdma_rust_nvmet ' /proc/modules && cfs_is "$s/namespaces/1/size" 1048576 ||
		{ echo "rmmod: $(cat /tmp/cfs-rmmod)"; return 1; }
}

# cfs_unlink_remove: links removed (the port may change its address again),
# then every directory, leaves first.
cfs_unlink_remove() {
	local s=$CFS_ROOT/subsystems/$CFS_NQN p=$CFS_ROOT/ports/1
	rm "$p/subsystems/$CFS_NQN" && cfs_set "$p/addr_trsvcid" 4431 &&
		rm "$s/allowed_hosts/$CFS_HOST" && rmdir "$s/namespaces/1" && rmdir "$s" &&
		rmdir "$p" && rmdir "$CFS_ROOT/hosts/$CFS_HOST" &&
		[ -z "$(ls $CFS_ROOT/subsystems)$(ls $CFS_ROOT/ports)$(ls $CFS_ROOT/hosts)" ]
}

# cfs_unload: rmmod with the tree empty; the root goes with the module.
cfs_unload() {
	rmmod rdma_rust_nvmet && [ ! -e $CFS_ROOT ] && ! grep -q '^rdma_rust_nvmet ' /proc/modules
}

# cfs_refill_empty: the tree filled again (every kind of directory and both
# links) and emptied, as a user would before rmmod, then the module unloads:
# what rmdir releases is all freed.
cfs_refill_empty() {
	cfs_load && cfs_subsys && cfs_ns && cfs_port && cfs_links && cfs_unlink_remove && cfs_unload
}

# nvmet_cfs_suite: the suite rdma_nvmet_configfs (kmemleak judges what the
# suite left, against what it found).
nvmet_cfs_suite() {
	suite_begin rdma_nvmet_configfs
	if [ ! -e $CFS_KO ]; then
		case_skip load "rdma_rust_nvmet.ko is not in the image"
		suite_end
		return
	fi
	nvmt_leak_mark
	check load cfs_load
	check subsystem_attributes cfs_subsys
	check namespace_attributes cfs_ns
	check namespace_refusals cfs_ns_refusals
	check port_attributes cfs_port
	check port_refusals cfs_port_refusals
	check links_and_refusals cfs_links
	check busy_and_rmmod_refused cfs_busy
	check unlink_and_remove_all cfs_unlink_remove
	check rmmod cfs_unload
	check refill_empty_rmmod cfs_refill_empty
	check kmemleak_clean nvmt_kmemleak_clean
	suite_end
}
