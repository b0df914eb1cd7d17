// SPDX-License-Identifier: GPL-2.0
/*
 * rdma_rust_blk: its debugfs files. Linux 6.12 has no Rust API for debugfs;
 * this file declares them and hands every request to the Rust side
 * (blk_main.rs), which owns all state and all checks.
 */

#include <linux/debugfs.h>
#include <linux/err.h>
#include <linux/module.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/uaccess.h>

/* Implemented in Rust (blk_main.rs). */
int rdma_rust_blk_ctl(const char *buf, size_t len);
int rdma_rust_blk_status(struct seq_file *m);

/* Called from Rust. */
void rdma_rust_blk_seq_write(struct seq_file *m, const char *s, size_t len);
int rdma_rust_blk_debugfs_init(void);
void rdma_rust_blk_debugfs_exit(void);

void rdma_rust_blk_seq_write(struct seq_file *m, const char *s, size_t len)
{
	seq_write(m, s, len);
}

#define CTL_MAX 512

static ssize_t ctl_write(struct file *file, const char __user *ubuf,
			 size_t len, loff_t *ppos)
{
	char *buf;
	int ret;

	if (len == 0 || len > CTL_MAX) {
		pr_err("rdma_rust_blk: control string of %zu bytes (1-%d)\n",
		       len, CTL_MAX);
		return -EINVAL;
	}
	buf = memdup_user_nul(ubuf, len);
	if (IS_ERR(buf))
		return PTR_ERR(buf);
	ret = rdma_rust_blk_ctl(buf, len);
	kfree(buf);
	return ret < 0 ? ret : len;
}

static const struct file_operations ctl_fops = {
	.owner = THIS_MODULE,
	.open = simple_open,
	.write = ctl_write,
	.llseek = noop_llseek,
};

static int status_show(struct seq_file *m, void *v)
{
	return rdma_rust_blk_status(m);
}
DEFINE_SHOW_ATTRIBUTE(status);

static struct dentry *blk_dir;

int rdma_rust_blk_debugfs_init(void)
{
	blk_dir = debugfs_create_dir("rdma_rust_blk", NULL);
	if (IS_ERR(blk_dir))
		return PTR_ERR(blk_dir);
	debugfs_create_file("ctl", 0200, blk_dir, NULL, &ctl_fops);
	debugfs_create_file("status", 0444, blk_dir, NULL, &status_fops);
	return 0;
}

/* Returns once no ctl write or status read is running any more. */
void rdma_rust_blk_debugfs_exit(void)
{
	debugfs_remove_recursive(blk_dir);
	blk_dir = NULL;
}
