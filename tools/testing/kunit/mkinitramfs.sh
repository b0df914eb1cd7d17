#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Build the guest's initramfs: busybox, iproute2 (ip, rdma), rdma-core tools
# (rping, perftest, ibv_*) with their shared libraries and the rxe verbs
# provider, the kernel's modules, the project's modules, and /init.
# Also initramfs-bench.cpio.gz: the same with fio and nvme-cli, for the
# guests that need them (the bench's, and make test's loopback guest when it
# runs the nvmet or nvme suite): fio's shared libraries are 80 MB, 35 MB compressed,
# nvme-cli's 4 MB, and every other boot would pay for unpacking them.
. "$(dirname "$0")/lib.sh"

out=$IMAGES/initramfs.cpio.gz
root=$IMAGES/root
rm -rf "$root"
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,lib,lib64,etc,proc,sys,dev,tmp,run,mnt,root,lib/modules/extra}

cp /bin/busybox "$root/bin/busybox"
for app in $("$root/bin/busybox" --list); do
	[ -e "$root/bin/$app" ] || ln -s busybox "$root/bin/$app"
done

BINARIES=(/bin/ip /usr/bin/rdma /usr/bin/rping /usr/bin/udaddy /usr/bin/ucmatose
	/usr/bin/ib_send_bw /usr/bin/ib_send_lat /usr/bin/ib_write_bw /usr/bin/ib_read_bw
	/usr/bin/ib_write_lat
	/usr/bin/ibv_devinfo /usr/bin/ibv_devices /usr/bin/ibv_rc_pingpong /usr/bin/ibv_ud_pingpong
	/sbin/mke2fs /sbin/e2fsck)
PROVIDERS=(/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so /usr/lib/x86_64-linux-gnu/libibverbs/libsiw-rdmav34.so)
# Loaded with dlopen (not seen by ldd): the verbs provider, and libgcc_s for
# pthread_cancel at exit (rping aborts without it).
EXTRA_LIBS=(/lib/x86_64-linux-gnu/libgcc_s.so.1)

copy_with_parents() {
	local f
	for f; do
		mkdir -p "$root$(dirname "$f")"
		cp -L "$f" "$root$f"
	done
}
libs_of() {
	ldd "$@" 2>/dev/null | awk '/=> \//{print $3} /^[ \t]*\/lib/{print $1}' | sort -u
}
# Into /usr/bin: busybox's shell runs its own applets (its `ip` cannot make
# veth pairs) for bare command names, so the init script calls these by path.
for b in "${BINARIES[@]}"; do
	[ -x "$b" ] || die "missing $b (run tools/testing/kunit/setup.sh)"
	cp -L "$b" "$root/usr/bin/"
done
copy_with_parents "${PROVIDERS[@]}" "${EXTRA_LIBS[@]}" $(libs_of "${BINARIES[@]}" "${PROVIDERS[@]}")
copy_with_parents /etc/libibverbs.d/rxe.driver /etc/libibverbs.d/siw.driver
echo 'root:x:0:0:root:/root:/bin/sh' > "$root/etc/passwd"
echo 'root:x:0:' > "$root/etc/group"
printf '127.0.0.1 localhost\n' > "$root/etc/hosts"

# Kernel modules (rdma_rxe and its dependencies) with depmod's index.
cp -a "$IMAGES/modroot/lib/modules" "$root/lib/"
# The project's out-of-tree modules.
cp "$MODBUILD/rdma_rust_ulp/rdma_rust_ulp.ko" \
	"$MODBUILD/rdma_rust_nvmet/rdma_rust_nvmet.ko" "$MODBUILD/rdma_rust_nvme/rdma_rust_nvme.ko" \
	"$MODBUILD/rdma_kunit/rdma_kunit.ko" \
	"$MODBUILD/rdma_kunit/rdma_kunit_orphan.ko" \
	"$MODBUILD"/rdma_rust_samples/*.ko "$root/lib/modules/extra/"

cp "$KUNIT_DIR/guest-init.sh" "$root/init"
chmod +x "$root/init"
mkdir -p "$root/lib/rdmatest"
cp "$KUNIT_DIR/guest-nvmet-hostile.sh" "$root/lib/rdmatest/nvmet-hostile.sh"
cp "$KUNIT_DIR/guest-ulp.sh" "$root/lib/rdmatest/ulp.sh"
cp "$KUNIT_DIR/guest-peers.sh" "$root/lib/rdmatest/peers.sh"
cp "$KUNIT_DIR/guest-bench.sh" "$root/lib/rdmatest/bench.sh"
cp "$KUNIT_DIR/guest-bench-blk.sh" "$root/lib/rdmatest/bench-blk.sh"
cp "$KUNIT_DIR/guest-stress.sh" "$root/lib/rdmatest/stress.sh"
cp "$KUNIT_DIR/guest-nvmet.sh" "$root/lib/rdmatest/nvmet.sh"
cp "$KUNIT_DIR/guest-nvmet-paths.sh" "$root/lib/rdmatest/nvmet-paths.sh"
cp "$KUNIT_DIR/guest-nvmet-cfs.sh" "$root/lib/rdmatest/nvmet-cfs.sh"
cp "$KUNIT_DIR/guest-nvmet-peers.sh" "$root/lib/rdmatest/nvmet-peers.sh"
cp "$KUNIT_DIR/guest-nvme.sh" "$root/lib/rdmatest/nvme.sh"
cp "$KUNIT_DIR/guest-nvme-bad.sh" "$root/lib/rdmatest/nvme-bad.sh"
# The kernel messages that are splats (one list, ktap_collect.py reads it too).
cp "$KUNIT_DIR/splats" "$root/lib/rdmatest/splats"
# RDMATEST_SCRIPT=FILE: a script of one's own for the bench guest (BENCH_CASES=script).
[ -z "${RDMATEST_SCRIPT:-}" ] || cp "$RDMATEST_SCRIPT" "$root/lib/rdmatest/script.sh"

(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$out.tmp"
mv "$out.tmp" "$out"
log "initramfs: $out ($(du -h "$out" | cut -f1))"

# fio and nvme-cli: a second archive appended to the first (the kernel
# unpacks them in turn), built once and kept until they change; the image
# with them is a copy of 45 MB, made at every build (a fraction of a second).
fio_cpio=$IMAGES/fio.cpio.gz
for b in /usr/bin/fio /usr/sbin/nvme; do
	[ -x $b ] || die "missing $b (run tools/testing/kunit/setup.sh)"
done
if [ ! -s "$fio_cpio" ] || [ /usr/bin/fio -nt "$fio_cpio" ] || [ /usr/sbin/nvme -nt "$fio_cpio" ]; then
	froot=$IMAGES/fio-root
	rm -rf "$froot"
	mkdir -p "$froot/usr/bin"
	cp -L /usr/bin/fio /usr/sbin/nvme "$froot/usr/bin/"
	root=$froot copy_with_parents $(libs_of /usr/bin/fio /usr/sbin/nvme)
	(cd "$froot" && find . | cpio -o -H newc --quiet | gzip -1) > "$fio_cpio.tmp"
	mv "$fio_cpio.tmp" "$fio_cpio"
	rm -rf "$froot"
fi
extra_cpio=
# RDMATEST_BINS="/usr/bin/perf ...": more host programs (with their shared
# libraries) in the bench guest, for a RDMATEST_SCRIPT of one's own (e.g.
# script-blk-profile.sh); built at each run, never cached.
if [ -n "${RDMATEST_BINS:-}" ]; then
	xroot=$IMAGES/extra-root extra_cpio=$IMAGES/extra.cpio.gz
	rm -rf "$xroot"
	mkdir -p "$xroot/usr/bin"
	for b in $RDMATEST_BINS; do
		[ -x "$b" ] || die "RDMATEST_BINS: no program $b on this machine"
		cp -L "$b" "$xroot/usr/bin/"
	done
	# shellcheck disable=SC2086 # a list of programs
	root=$xroot copy_with_parents $(libs_of $RDMATEST_BINS)
	(cd "$xroot" && find . | cpio -o -H newc --quiet | gzip -1) > "$extra_cpio"
	rm -rf "$xroot"
fi
cat "$out" "$fio_cpio" $extra_cpio > "$IMAGES/initramfs-bench.cpio.gz"
log "initramfs with fio, nvme-cli: $IMAGES/initramfs-bench.cpio.gz ($(du -h "$IMAGES/initramfs-bench.cpio.gz" | cut -f1))"
