# SPDX-License-Identifier: GPL-2.0
# Shared settings of the rdma-rust build and test scripts. Sourced, not run.
#
# Everything that is built or downloaded lives in $RDMA_RUST_CACHE (outside the
# clone) and is reused by later runs, from this clone or any other.

set -euo pipefail

PROJECT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
KUNIT_DIR=$PROJECT_DIR/tools/testing/kunit
RDMA_RUST_CACHE=${RDMA_RUST_CACHE:-${HOME:-/root}/.cache/rdma-rust}
# Two kernels, each with its own tree, modules and images, so that switching
# never rebuilds the other: FLAVOR=debug, the test kernel (rdma.config: KASAN,
# lockdep, kmemleak, DEBUG_OBJECTS, fault injection), and FLAVOR=release, the
# same without the debug options (release.config), the only one timed.
FLAVOR=${FLAVOR:-debug}
case $FLAVOR in
debug) flavor_suffix= ;;
release) flavor_suffix=-release ;;
*) printf 'error: FLAVOR=%s: debug or release\n' "$FLAVOR" >&2; exit 1 ;;
esac
KSRC=$RDMA_RUST_CACHE/linux$flavor_suffix	# unpacked linux-source-6.12 + overlay, built in place
TOOLS=$RDMA_RUST_CACHE/tools		# bindgen-cli
MODBUILD=$RDMA_RUST_CACHE/modules$flavor_suffix	# out-of-tree module build dirs (M=)
IMAGES=$RDMA_RUST_CACHE/images$flavor_suffix	# initramfs images
LOGS=${RDMA_RUST_LOGS:-$RDMA_RUST_CACHE/logs}
KERNEL_TARBALL=/usr/src/linux-source-6.12.tar.xz
BINDGEN_VERSION=0.73.2

# Debian's rustc-web (1.96, with rust-src) must win over a rustup toolchain in
# ~/.cargo/bin, which has no rust-src and cannot build the `core` crate.
export PATH=/usr/bin:/usr/sbin:/bin:/sbin:$TOOLS/bin:$PATH

JOBS=${JOBS:-$(( $(nproc) + 1 ))}
KMAKE=(make -C "$KSRC" LLVM=1 RUSTC=/usr/bin/rustc HOSTRUSTC=/usr/bin/rustc
	RUSTDOC=/usr/bin/rustdoc CLIPPY_DRIVER=/usr/bin/clippy-driver
	BINDGEN="$TOOLS/bin/bindgen" -j"$JOBS")

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# One user of a kernel tree at a time: two clones (or worktrees) that share the
# cache would otherwise sync their sources into the same tree at once, and one
# would build or boot the other's code. build.sh, check.sh and docs.sh hold the
# lock to their end; run.sh until the kernel and initramfs it boots are copied
# into its run directory. Re-entrant through RDMA_RUST_LOCKED (the scripts call
# each other).
lock_tree() {
	[ "${RDMA_RUST_LOCKED:-}" != "$FLAVOR" ] || return 0
	mkdir -p "$RDMA_RUST_CACHE"
	exec 9> "$RDMA_RUST_CACHE/.lock$flavor_suffix"
	if ! flock -n 9; then
		log "waiting for another build or check of $KSRC to finish"
		flock 9
	fi
	export RDMA_RUST_LOCKED=$FLAVOR
}
unlock_tree() {
	[ "${RDMA_RUST_LOCKED:-}" = "$FLAVOR" ] || return 0
	flock -u 9
	exec 9>&-
	unset RDMA_RUST_LOCKED
}

# Copy $1 to $2 only when the content differs, so that make's timestamps see
# only real edits (a fresh clone must not rebuild the kernel).
sync_file() {
	if ! cmp -s "$1" "$2"; then
		mkdir -p "$(dirname "$2")"
		cp "$1" "$2"
	fi
}

# Mirror directory $1 into $2 (content-based), removing files gone from $1
# except build products.
sync_dir() {
	local src=$1 dst=$2 f
	mkdir -p "$dst"
	while IFS= read -r -d '' f; do
		sync_file "$src/$f" "$dst/$f"
	done < <(cd "$src" && find . -type f ! -name '*.o' ! -name '*.ko' ! -name '.*' -print0)
	while IFS= read -r -d '' f; do
		[ -e "$src/$f" ] || rm -f "$dst/$f"
	done < <(cd "$dst" && find . -type f \( -name '*.rs' -o -name '*.c' -o -name '*.h' \
		-o -name 'Makefile' -o -name 'Kbuild' -o -name 'Kconfig' \) -print0)
}
