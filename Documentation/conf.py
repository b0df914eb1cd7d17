# SPDX-License-Identifier: GPL-2.0
#
# Sphinx configuration of the project's documentation. `make docs` builds it
# (with the kernel crate's rustdoc); `make check` fails on any Sphinx warning.

project = "rdma-rust"
copyright = "rdma-rust developers"
master_doc = "index"
exclude_patterns = ["output"]
highlight_language = "none"
html_theme = "alabaster"
html_show_sourcelink = False
