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
#  - compile_fail/: code the types of kernel::rdma (or kernel::block::mq) must refuse, refused
#    for the reason it claims: the build fails with an error that has the code of the case's
#    `//! expect: E....` line and, in that same error, each fragment of its `//! message:`
#    lines; and its twin compiles, without a warning. The twin is the case without its
#    violation: each `// twin: <line>` comment is dropped and the line after it replaced by
#    <line> (removed if <line> is empty). A case whose twin does not compile fails for some
#    other reason (a typo, a missing import), which would prove nothing;
#  - the documentation (docs.sh): rustdoc of the kernel crate and Sphinx, no warning.
# The modules are linted object by object: linking them against a clippy-driver
# build of the kernel crate trips modpost on 6.12 with this rustc (upstream
# symbols such as Kmalloc::aligned_layout go missing), which says nothing about
# the code. The tree is rebuilt normally afterwards.
. "$(dirname "$0")/lib.sh"

fail=0
cd "$PROJECT_DIR"

log "import cycles and module order"
for crate in "drivers/rdma_rust_ulp ulp_main crate" \
	"drivers/rdma_rust_nvmet nvmet_main crate" "drivers/rdma_rust_nvme nvme_main crate" \
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
# kernel::rdma, kernel::block::mq, which the overlay extends, and kernel::debugfs,
# kernel::configfs and kernel::miscdevice, which it adds.
w=$(clippy_warnings "$LOGS/clippy-kernel.log" 'rust/kernel/((rdma|block)/|(debugfs|configfs|miscdevice)\.rs)')
[ -z "$w" ] || { echo "$w" >&2; echo "check: clippy warnings in kernel::rdma, kernel::block, kernel::debugfs, kernel::configfs or kernel::miscdevice" >&2; fail=1; }

samples=()
for s in "$PROJECT_DIR"/samples/rdma_rust/*.rs; do
	n=$(basename "$s" .rs)
	samples+=("rdma_rust_samples:CONFIG_SAMPLE_${n^^}:$n.o")
done
for spec in rdma_rust_ulp:CONFIG_RDMA_RUST_ULP:ulp_main.o \
	rdma_rust_nvmet:CONFIG_RDMA_RUST_NVMET:nvmet_main.o rdma_rust_nvme:CONFIG_RDMA_RUST_NVME:nvme_main.o \
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

# The twin of compile-fail case $1, on stdout: the file with each `// twin: <line>` comment
# dropped and the line after it replaced by <line>. Fails when the case has no such comment,
# or one that is not followed by the line it replaces.
twin_of() {
	awk '
	/^[ \t]*\/\/ twin:/ {
		if (pending) exit
		repl = $0
		sub(/\/\/ twin: ?/, "", repl)
		pending = 1
		n++
		next
	}
	pending { print repl; pending = 0; next }
	{ print }
	END { exit pending || n == 0 }' "$1"
}

# Whether build log $1 holds an error with code $2 (E0599) whose text (its header and its
# notes, up to the next diagnostic) contains every line of $3, the case's message fragments:
# all in that one error.
has_error() {
	FRAGS=$3 awk -v head="error[$2]" '
	function judge(i) {
		if (!mine)
			return
		for (i = 1; i <= n; i++)
			if (!index(text, frag[i]))
				return
		found = 1
	}
	BEGIN { n = split(ENVIRON["FRAGS"], frag, "\n") }
	/^(error|warning)/ { judge(); mine = index($0, head) == 1; text = "" }
	{ text = text $0 "\n" }
	END { judge(); exit !found }' "$1"
}

# Print the diagnostics (errors and warnings) of build log $1.
diagnostics() {
	sed -n '/^\(error\|warning\)/,/^$/p' "$1" >&2
}

# Build compile_fail/$1.rs as module object $1.o in $MODBUILD/compile_fail/$2, from the file
# on stdin, into log $3; fails if it does not compile.
build_case() {
	local dir=$MODBUILD/compile_fail/$2 tmp
	mkdir -p "$dir"
	tmp=$(mktemp)
	cat > "$tmp"
	sync_file "$tmp" "$dir/$1.rs"
	rm -f "$tmp" "$dir/$1.o"
	echo "obj-m += $1.o" > "$dir/Makefile"
	"${KMAKE[@]}" M="$dir" "$1.o" > "$3" 2>&1
}

# Code that must not compile (compile_fail/*.rs): each must fail with the error its
# `//! expect:` and `//! message:` lines name, and its twin (the case without its violation)
# must compile cleanly.
for src in "$KUNIT_DIR"/compile_fail/*.rs; do
	name=$(basename "$src" .rs)
	want=$(sed -n 's|^//! expect: \(E[0-9]*\).*|\1|p' "$src")
	msgs=$(sed -n 's|^//! message: ||p' "$src")
	log "compile-fail: $name (expects $want)"
	if [ -z "$want" ] || [ -z "$msgs" ]; then
		echo "check: compile_fail/$name.rs names no error code (//! expect: E....) or no message fragment (//! message: ...)" >&2
		fail=1
		continue
	fi
	logf=$LOGS/compile-fail-$name.log
	if build_case "$name" "$name" "$logf" < "$src"; then
		echo "check: compile_fail/$name.rs compiles: the abstraction (kernel::rdma, kernel::block::mq) no longer refuses it" >&2
		fail=1
	elif ! has_error "$logf" "$want" "$msgs"; then
		diagnostics "$logf"
		echo "check: compile_fail/$name.rs fails, but no error $want above ($logf) says all of:" >&2
		sed 's/^/    /' <<< "$msgs" >&2
		fail=1
	fi
	twin_log=$LOGS/compile-fail-$name-twin.log
	if ! twin=$(twin_of "$src"); then
		echo "check: compile_fail/$name.rs has no twin: it needs a \`// twin: <line>\` comment above each line of its violation, followed by that line" >&2
		fail=1
	elif ! printf '%s\n' "$twin" | build_case "$name" "$name.twin" "$twin_log"; then
		diagnostics "$twin_log"
		echo "check: compile_fail/$name.rs: its twin (the case with its \`// twin:\` lines applied, $twin_log) does not compile: the case may fail for a reason other than its violation" >&2
		fail=1
	elif grep -q '^warning' "$twin_log"; then
		diagnostics "$twin_log"
		echo "check: compile_fail/$name.rs: its twin compiles with the warnings above ($twin_log): it must be the case without its violation, and nothing left over" >&2
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
