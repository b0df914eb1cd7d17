#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Install what the build and the test VM need, on a fresh Debian 12 machine.
# Idempotent: each step is skipped when its result is already there.
. "$(dirname "$0")/lib.sh"

PACKAGES=(
	# kernel source and toolchain (see ../shared/rdma-facts.md)
	linux-source-6.12 rustc-web rust-web-src rust-web-clippy rustfmt-web
	clang lld llvm libclang-dev flex bison bc libelf-dev libssl-dev
	make xz-utils cpio kmod python3
	# the VM and its userspace
	qemu-system-x86 busybox-static iproute2
	# the file system checks (mke2fs, e2fsck), the kernel's NVMe-oF host's
	# tool (nvme-cli), and the I/O tool (fio)
	e2fsprogs nvme-cli fio
	rdmacm-utils perftest ibverbs-utils ibverbs-providers
	# `make check`: the Documentation/ build
	python3-sphinx
	# `make bench`: its chart; perf for a profile in the bench guest
	# (RDMATEST_BINS=/usr/bin/perf, script-blk-profile.sh, script-blk-trace.sh)
	gnuplot-nox linux-perf
)

missing=()
for p in "${PACKAGES[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	log "installing Debian packages: ${missing[*]}"
	SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
	$SUDO apt-get update -q
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# bindgen-cli: Debian's bindgen (0.60) is older than the kernel's minimum (0.65.1).
if ! "$TOOLS/bin/bindgen" --version 2>/dev/null | grep -q "$BINDGEN_VERSION"; then
	log "building bindgen-cli $BINDGEN_VERSION from crates.io (a few minutes, once)"
	if ! command -v cargo >/dev/null; then
		SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
		DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends cargo-web
	fi
	cargo=$(command -v cargo)
	"$cargo" install --locked --root "$TOOLS" bindgen-cli --version "$BINDGEN_VERSION"
fi

if [ ! -e "$KSRC/.unpacked" ]; then
	log "unpacking $KERNEL_TARBALL into $KSRC"
	rm -rf "$KSRC" "$KSRC.tmp"
	mkdir -p "$KSRC.tmp"
	tar -xf "$KERNEL_TARBALL" -C "$KSRC.tmp" --strip-components=1
	mv "$KSRC.tmp" "$KSRC"
	touch "$KSRC/.unpacked"
fi
