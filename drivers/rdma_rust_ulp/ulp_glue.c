// SPDX-License-Identifier: GPL-2.0
/*
 * rdma_rust_ulp: module parameters, and flushing a work item. Linux 6.12's
 * Rust API has neither; this file declares the parameters and hands them to
 * the Rust side (ulp_main.rs), which owns all state and all checks.
 */

#include <linux/module.h>
#include <linux/workqueue.h>

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
void rdma_rust_ulp_flush_work(struct work_struct *work);

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

/*
 * Waits until @work has finished running, its function returned: 6.12's Rust
 * workqueue API has no flush, and module code must not run after exit.
 */
void rdma_rust_ulp_flush_work(struct work_struct *work)
{
	flush_work(work);
}
