#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Static checks of the project's Rust code (`make check`):
#  - imports.py: no import cycle in the ULP, the block ULP, kernel::rdma and the KUnit
#    tests (every import points down; a child may use its parent), and each crate root
#    declares its modules bottom up; it needs no build, so it runs first;
#  - rustfmt, with the kernel tree's .rustfmt.toml (what `make rustfmtcheck` uses);
#  - `bindings::` only inside rust/rdma;
#  - clippy (the kernel's CLIPPY=1) on kernel::rdma, the modules and the sample: no warning
#    in this project's files;
#  - compile_fail/: code the types of kernel::rdma must refuse, refused with the error
#    expected;
#  - the documentation (docs.sh): rustdoc of the kernel crate and Sphinx, no warning.
# The modules are linted object by object: linking them against a clippy-driver
# build of the kernel crate trips modpost on 6.12 with this rustc (upstream
# symbols such as Kmalloc::aligned_layout go missing), which says nothing about
# the code. The tree is rebuilt normally afterwards.
. "$(dirname "$0")/lib.sh"

fail=0
cd "$PROJECT_DIR"

log "import cycles and module order"
for crate in "drivers/rdma_rust_ulp ulp_main crate" "drivers/rdma_rust_blk blk_main crate" \
	"rust/rdma rdma crate::rdma" "tools/testing/kunit/rdma rdma_kunit_tests crate"; do
	read -r dir root prefix <<< "$crate"
	if ! out=$(python3 "$KUNIT_DIR/imports.py" "$dir" "$root" "$prefix" --order); then
		echo "$out" >&2
		echo "check: $dir: imports must point down, and the root declare its modules bottom up (see $KUNIT_DIR/imports.py)" >&2
		fail=1
	fi
done

lock_tree
"$KUNIT_DIR/build.sh"
mapfile -t rs < <(git ls-files '*.rs' 2>/dev/null || find rust drivers samples tools -name '*.rs')

log "rustfmt --check"
if ! rustfmt --edition 2021 --check --config-path "$KSRC/.rustfmt.toml" "${rs[@]}" > "$LOGS/rustfmt.log" 2>&1; then
	cat "$LOGS/rustfmt.log" >&2
	echo "check: rustfmt: files above are not formatted" >&2
	fail=1
fi

log "bindings:: outside rust/rdma"
if grep -n 'bindings::' "${rs[@]}" | grep -v '^rust/rdma/'; then
	echo "check: the lines above use bindings:: outside rust/rdma" >&2
	fail=1
fi

log "clippy: kernel::rdma"
"${KMAKE[@]}" CLIPPY=1 rust/ > "$LOGS/clippy-kernel.log" 2>&1 || { cat "$LOGS/clippy-kernel.log" >&2; fail=1; }
clippy_warnings() {
	grep -E '^(warning|error)' -A3 "$1" | grep -B3 -E -- "--> .*$2" | grep -E '^(warning|error)|-->' || true
}
# kernel::rdma, kernel::block::mq, which the overlay extends, and kernel::debugfs, which it adds.
w=$(clippy_warnings "$LOGS/clippy-kernel.log" 'rust/kernel/((rdma|block)/|debugfs\.rs)')
[ -z "$w" ] || { echo "$w" >&2; echo "check: clippy warnings in kernel::rdma, kernel::block or kernel::debugfs" >&2; fail=1; }

samples=()
for s in "$PROJECT_DIR"/samples/rdma_rust/*.rs; do
	n=$(basename "$s" .rs)
	samples+=("rdma_rust_samples:CONFIG_SAMPLE_${n^^}:$n.o")
done
for spec in rdma_rust_ulp:CONFIG_RDMA_RUST_ULP:ulp_main.o rdma_rust_blk:CONFIG_RDMA_RUST_BLK:blk_main.o \
	rdma_kunit:CONFIG_RDMA_RUST_KUNIT:rdma_kunit_tests.o \
	"${samples[@]}"; do
	IFS=: read -r name opt obj <<< "$spec"
	log "clippy: $name ($obj)"
	touch "$MODBUILD/$name"/*.rs
	"${KMAKE[@]}" CLIPPY=1 M="$MODBUILD/$name" "$opt=m" CONFIG_SAMPLES_RDMA_RUST=y "$obj" > "$LOGS/clippy-$name.log" 2>&1 ||
		{ cat "$LOGS/clippy-$name.log" >&2; fail=1; }
	w=$(clippy_warnings "$LOGS/clippy-$name.log" "modules/$name/")
	[ -z "$w" ] || { echo "$w" >&2; echo "check: clippy warnings in $name" >&2; fail=1; }
done

# Code that must not compile (compile_fail/*.rs): each is built as a module and
# must fail with the error code on its `//! expect:` line.
for src in "$KUNIT_DIR"/compile_fail/*.rs; do
	name=$(basename "$src" .rs)
	want=$(sed -n 's|^//! expect: \(E[0-9]*\).*|\1|p' "$src")
	log "compile-fail: $name (expects $want)"
	dir=$MODBUILD/compile_fail/$name
	mkdir -p "$dir"
	sync_file "$src" "$dir/$name.rs"
	echo "obj-m += $name.o" > "$dir/Makefile"
	if "${KMAKE[@]}" M="$dir" "$name.o" > "$LOGS/compile-fail-$name.log" 2>&1; then
		echo "check: compile_fail/$name.rs compiles: the abstraction (kernel::rdma, kernel::block::mq) no longer refuses it" >&2
		fail=1
	elif ! grep -q "^error\[$want\]" "$LOGS/compile-fail-$name.log"; then
		grep '^error' "$LOGS/compile-fail-$name.log" >&2
		echo "check: compile_fail/$name.rs fails, but not with $want" >&2
		fail=1
	fi
done

log "rebuilding without clippy"
"$KUNIT_DIR/build.sh"
DOCS_TREE_BUILT=1 "$KUNIT_DIR/docs.sh" || fail=1
if [ $fail = 0 ]; then
	echo "check: imports, rustfmt, bindings, clippy, compile-fail cases, rustdoc and Sphinx clean"
else
	die "static checks failed"
fi
