#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The documentation (`make docs`; `make check` runs it too):
#  - the kernel crate's rustdoc (kernel::rdma and the rest of the crate), built
#    by the kernel's own `make rustdoc` in the debug tree: any rustdoc warning
#    (a broken intra-doc link, a link to a private item, a missing doc) fails;
#  - Documentation/*.rst with Sphinx, warnings as errors.
# Prints where each HTML tree is.
. "$(dirname "$0")/lib.sh"

lock_tree
# The tree must hold the current sources (check.sh has just built them).
[ "${DOCS_TREE_BUILT:-0}" = 1 ] || "$KUNIT_DIR/build.sh"
fail=0
log "rustdoc: the kernel crate"
if ! "${KMAKE[@]}" rustdoc > "$LOGS/rustdoc.log" 2>&1; then
	tail -30 "$LOGS/rustdoc.log" >&2
	echo "docs: make rustdoc failed (full log: $LOGS/rustdoc.log)" >&2
	fail=1
elif grep -q '^warning' "$LOGS/rustdoc.log"; then
	grep -A6 '^warning' "$LOGS/rustdoc.log" >&2
	echo "docs: rustdoc warnings (above)" >&2
	fail=1
fi

log "sphinx: Documentation/"
out=$RDMA_RUST_CACHE/docs/html
rm -rf "$out"
if ! sphinx-build -W --keep-going -q -b html "$PROJECT_DIR/Documentation" "$out" > "$LOGS/sphinx.log" 2>&1; then
	cat "$LOGS/sphinx.log" >&2
	echo "docs: Sphinx warnings or errors (above)" >&2
	fail=1
fi
[ $fail = 0 ] || die "documentation build failed"
echo "docs: rustdoc: $KSRC/Documentation/output/rust/rustdoc/kernel/rdma/index.html"
echo "docs: guide:   $out/rdma-rust-guide.html (index: $out/index.html)"
