# SPDX-License-Identifier: GPL-2.0
#
# Two roles in one file:
#  - inside a kernel tree (as drivers/rdma_rust/) it is the Kbuild makefile;
#  - at the top of the clone it drives the build and the QEMU test VM.

ifneq ($(KERNELRELEASE),)

obj-$(CONFIG_RDMA_RUST_ULP) += drivers/rdma_rust_ulp/
obj-$(CONFIG_RDMA_RUST_NVMET) += drivers/rdma_rust_nvmet/
obj-$(CONFIG_RDMA_RUST_NVME) += drivers/rdma_rust_nvme/
obj-$(CONFIG_SAMPLES_RDMA_RUST) += samples/rdma_rust/

else

KUNIT := tools/testing/kunit

.PHONY: all setup build check docs test run bench stress clean help

all: build

help:
	@echo "make run    boot the VM, create rxe devices, load the ULP and show it working"
	@echo "make test   build what changed and run every test under QEMU"
	@echo "make setup  install packages and unpack the kernel (done on demand by the others)"
	@echo "make build  build the kernel and the modules only"
	@echo "make check  rustfmt, clippy, compile-fail cases, docs, and no bindings:: outside rust/rdma"
	@echo "make docs   the kernel crate's rustdoc (kernel::rdma) and Documentation/ (Sphinx); prints where"
	@echo "make bench  the ULP against perftest and rping on the release kernel (BENCH_QUICK=1: one short round)"
	@echo "make stress the fault suite on the debug kernel, then on the release kernel (STRESS_CYCLES=N: cycles of each fault)"

setup:
	$(KUNIT)/setup.sh

build:
	$(KUNIT)/build.sh

check:
	$(KUNIT)/check.sh

docs:
	$(KUNIT)/docs.sh

test:
	$(KUNIT)/run.sh test

run:
	$(KUNIT)/run.sh run

bench:
	FLAVOR=release $(KUNIT)/run.sh bench

# Both kernels, whatever the first one found; fails if either did.
stress:
	rc=0; FLAVOR=debug $(KUNIT)/run.sh stress || rc=1; \
	FLAVOR=release $(KUNIT)/run.sh stress || rc=1; exit $$rc

clean:
	@echo "build outputs live in $${RDMA_RUST_CACHE:-$$HOME/.cache/rdma-rust}; remove it to start cold"

endif
