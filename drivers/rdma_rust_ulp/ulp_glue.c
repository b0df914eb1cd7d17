// SPDX-License-Identifier: GPL-2.0
/*
 * rdma_rust_ulp: module parameters and debugfs files. Linux 6.12 has no Rust
 * API for either; this file declares them and hands every request to the
 * Rust side (ulp_main.rs), which owns all state and all checks.
 */

#include <linux/debugfs.h>
#include <linux/err.h>
#include <linux/module.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/uaccess.h>
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

/* Implemented in Rust (ulp_main.rs). */
int rdma_rust_ulp_ctl(const char *buf, size_t len);
int rdma_rust_ulp_stats(struct seq_file *m);

/* Called from Rust. */
unsigned int rdma_rust_ulp_param_default_depth(void);
const char *rdma_rust_ulp_param_default_poll(void);
unsigned int rdma_rust_ulp_param_max_runs(void);
void rdma_rust_ulp_seq_write(struct seq_file *m, const char *s, size_t len);
void rdma_rust_ulp_flush_work(struct work_struct *work);
int rdma_rust_ulp_debugfs_init(void);
void rdma_rust_ulp_debugfs_exit(void);

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

void rdma_rust_ulp_seq_write(struct seq_file *m, const char *s, size_t len)
{
	seq_write(m, s, len);
}

/*
 * Waits until @work has finished running, its function returned: 6.12's Rust
 * workqueue API has no flush, and module code must not run after exit.
 */
void rdma_rust_ulp_flush_work(struct work_struct *work)
{
	flush_work(work);
}

#define CTL_MAX 1024

static ssize_t ctl_write(struct file *file, const char __user *ubuf,
			 size_t len, loff_t *ppos)
{
	char *buf;
	int ret;

	if (len == 0 || len > CTL_MAX) {
		pr_err("rdma_rust_ulp: control string of %zu bytes (1-%d)\n",
		       len, CTL_MAX);
		return -EINVAL;
	}
	buf = memdup_user_nul(ubuf, len);
	if (IS_ERR(buf))
		return PTR_ERR(buf);
	ret = rdma_rust_ulp_ctl(buf, len);
	kfree(buf);
	return ret < 0 ? ret : len;
}

static const struct file_operations ctl_fops = {
	.owner = THIS_MODULE,
	.open = simple_open,
	.write = ctl_write,
	.llseek = noop_llseek,
};

static int stats_show(struct seq_file *m, void *v)
{
	return rdma_rust_ulp_stats(m);
}
DEFINE_SHOW_ATTRIBUTE(stats);

static struct dentry *ulp_dir;

int rdma_rust_ulp_debugfs_init(void)
{
	ulp_dir = debugfs_create_dir("rdma_rust_ulp", NULL);
	if (IS_ERR(ulp_dir))
		return PTR_ERR(ulp_dir);
	debugfs_create_file("ctl", 0200, ulp_dir, NULL, &ctl_fops);
	debugfs_create_file("stats", 0444, ulp_dir, NULL, &stats_fops);
	return 0;
}

/* Returns once no ctl write or stats read is running any more. */
void rdma_rust_ulp_debugfs_exit(void)
{
	debugfs_remove_recursive(ulp_dir);
	ulp_dir = NULL;
}
