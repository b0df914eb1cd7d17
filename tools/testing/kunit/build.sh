#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Build the test kernel and the project's modules:
#  1. apply the overlay (patches/ + this project's sources) to the cached tree,
#  2. configure it from tinyconfig + rdma.config when the fragment changed,
#  3. build bzImage and in-tree modules (incremental),
#  4. build drivers/rdma_rust_ulp and the KUnit module out of tree (M=).
. "$(dirname "$0")/lib.sh"

lock_tree
"$KUNIT_DIR/setup.sh"
mkdir -p "$LOGS"

# --- 1. overlay --------------------------------------------------------------
# The patches are applied once to the pristine tree; when they change, the
# previous set is reverted first so that the tree never carries stale hunks.
patches=$(cat "$KUNIT_DIR"/patches/*.patch)
applied=$KSRC/.rdma-rust-applied.patch
if [ ! -e "$applied" ] || [ "$patches" != "$(cat "$applied")" ]; then
	if [ -e "$applied" ]; then
		log "reverting the previous overlay patches"
		patch -d "$KSRC" -p1 -R -s < "$applied"
		rm -f "$applied"
	fi
	log "applying overlay patches"
	# Dry run first: a patch that does not apply must leave the tree untouched.
	printf '%s\n' "$patches" | patch -d "$KSRC" -p1 -s -N --dry-run > /dev/null ||
		die "the overlay patches do not apply to $KSRC (remove it to start from a fresh tree)"
	printf '%s\n' "$patches" | patch -d "$KSRC" -p1 -s -N
	printf '%s\n' "$patches" > "$applied"
fi
# kernel::rdma lives in rust/kernel/rdma/, its C helpers in rust/helpers/rdma.c,
# and the project itself is the in-tree directory drivers/rdma_rust/.
sync_dir "$PROJECT_DIR/rust/rdma" "$KSRC/rust/kernel/rdma"
rm -f "$KSRC/rust/kernel/rdma/helpers.c"
sync_file "$PROJECT_DIR/rust/rdma/helpers.c" "$KSRC/rust/helpers/rdma.c"
sync_file "$PROJECT_DIR/Kconfig" "$KSRC/drivers/rdma_rust/Kconfig"
sync_file "$PROJECT_DIR/Makefile" "$KSRC/drivers/rdma_rust/Makefile"
sync_dir "$PROJECT_DIR/drivers/rdma_rust_ulp" "$KSRC/drivers/rdma_rust/drivers/rdma_rust_ulp"
sync_dir "$PROJECT_DIR/drivers/rdma_rust_nvmet" "$KSRC/drivers/rdma_rust/drivers/rdma_rust_nvmet"
sync_dir "$PROJECT_DIR/drivers/rdma_rust_nvme" "$KSRC/drivers/rdma_rust/drivers/rdma_rust_nvme"
sync_dir "$PROJECT_DIR/samples/rdma_rust" "$KSRC/drivers/rdma_rust/samples/rdma_rust"

# --- 2. configuration --------------------------------------------------------
fragment=$KUNIT_DIR/rdma.config
if [ "$FLAVOR" = release ]; then
	# rdma.config with release.config's lines in place of its own.
	fragment=$KSRC/.rdma-rust.release-fragment
	awk -F= 'NR == FNR { if ($1 ~ /^CONFIG_/) drop[$1] = 1; next } !($1 in drop)' \
		"$KUNIT_DIR/release.config" "$KUNIT_DIR/rdma.config" > "$fragment.tmp"
	grep '^CONFIG_' "$KUNIT_DIR/release.config" >> "$fragment.tmp"
	mv "$fragment.tmp" "$fragment"
fi
if [ ! -e "$KSRC/.config" ] || ! cmp -s "$fragment" "$KSRC/.rdma-rust.config"; then
	log "configuring the $FLAVOR kernel: tinyconfig + $(basename "$fragment")"
	"${KMAKE[@]}" -s tinyconfig > "$LOGS/config.log" 2>&1
	(cd "$KSRC" && scripts/kconfig/merge_config.sh -m .config "$fragment") >> "$LOGS/config.log" 2>&1
	"${KMAKE[@]}" -s olddefconfig >> "$LOGS/config.log" 2>&1
	# merge_config only warns; an option that did not stick is a hard error.
	bad=0
	while IFS= read -r line; do
		case $line in CONFIG_*=*) ;; *) continue ;; esac
		opt=${line%%=*} val=${line#*=}
		if [ "$val" = n ]; then
			grep -q "^$opt=" "$KSRC/.config" && { echo "config: $opt is set, wanted n" >&2; bad=1; }
		else
			grep -qx "$line" "$KSRC/.config" || { echo "config: wanted $line, got: $(grep "^$opt=\|$opt is not set" "$KSRC/.config" || echo missing)" >&2; bad=1; }
		fi
	done < "$fragment"
	[ $bad = 0 ] || die "kernel configuration does not match $fragment (see $LOGS/config.log)"
	cp "$fragment" "$KSRC/.rdma-rust.config"
fi

# --- 3. kernel -----------------------------------------------------------------
log "building the $FLAVOR kernel in $KSRC (incremental; a cold build with the modules takes 8-20 min on 2 cores, by host)"
if ! "${KMAKE[@]}" bzImage modules > "$LOGS/kernel-build.log" 2>&1; then
	tail -40 "$LOGS/kernel-build.log" >&2
	die "kernel build failed (full log: $LOGS/kernel-build.log)"
fi
# Modules for the guest image, staged with depmod data.
rm -rf "$IMAGES/modroot"
mkdir -p "$IMAGES"
"${KMAKE[@]}" -s INSTALL_MOD_PATH="$IMAGES/modroot" INSTALL_MOD_STRIP=1 modules_install \
	> "$LOGS/modules-install.log" 2>&1 || die "modules_install failed (see $LOGS/modules-install.log)"

# --- 4. out-of-tree modules ------------------------------------------------------
# Kbuild writes objects next to the sources, so each module is built from a
# content-synced copy under the cache, never inside the clone.
build_ext() {
	local name=$1 src=$2 dst=$MODBUILD/$1
	sync_dir "$src" "$dst"
	log "building $name out of tree (M=$dst)"
	if ! "${KMAKE[@]}" M="$dst" "${@:3}" modules > "$LOGS/$name-build.log" 2>&1; then
		cat "$LOGS/$name-build.log" >&2
		die "$name build failed"
	fi
}
build_ext rdma_rust_ulp "$PROJECT_DIR/drivers/rdma_rust_ulp" CONFIG_RDMA_RUST_ULP=m
build_ext rdma_rust_nvmet "$PROJECT_DIR/drivers/rdma_rust_nvmet" CONFIG_RDMA_RUST_NVMET=m
build_ext rdma_rust_nvme "$PROJECT_DIR/drivers/rdma_rust_nvme" CONFIG_RDMA_RUST_NVME=m
build_ext rdma_kunit "$KUNIT_DIR/rdma" CONFIG_RDMA_RUST_KUNIT=m
# Every sample: its Kconfig's symbols, each =m.
mapfile -t samples < <(sed -n 's/^config \(SAMPLE_RDMA_RUST_.*\)/CONFIG_\1=m/p' "$PROJECT_DIR/samples/rdma_rust/Kconfig")
build_ext rdma_rust_samples "$PROJECT_DIR/samples/rdma_rust" CONFIG_SAMPLES_RDMA_RUST=y "${samples[@]}"
log "build done: $KSRC/arch/x86/boot/bzImage"
