// SPDX-License-Identifier: GPL-2.0
/*
 * rdma_rust_ulp: the module parameters. Linux 6.12's Rust module! macro takes
 * no parameters (its keys are type, name, author, description, license, alias
 * and firmware), so this file declares them and hands their values to the Rust
 * side (ulp_main.rs), which owns all state and all checks.
 */

#include <linux/module.h>

static unsigned int default_depth = 16;
module_param(default_depth, uint, 0444);
MODULE_PARM_DESC(default_depth,
		 "Work requests a run keeps in flight when its control string has no depth= (1-1024, default 16)");

static char *default_poll = "softirq";
module_param(default_poll, charp, 0444);
MODULE_PARM_DESC(default_poll,
		 "CQ poll context of a run whose control string has no poll=: softirq, workqueue or direct (default softirq)");

static unsigned int max_runs = 16;
module_param(max_runs, uint, 0444);
MODULE_PARM_DESC(max_runs, "Runs in flight at once, over all devices (1-64, default 16)");

/* Called from Rust. */
unsigned int rdma_rust_ulp_param_default_depth(void);
const char *rdma_rust_ulp_param_default_poll(void);
unsigned int rdma_rust_ulp_param_max_runs(void);

unsigned int rdma_rust_ulp_param_default_depth(void)
{
	return default_depth;
}

const char *rdma_rust_ulp_param_default_poll(void)
{
	return default_poll ? default_poll : "";
}

unsigned int rdma_rust_ulp_param_max_runs(void)
{
	return max_runs;
}
