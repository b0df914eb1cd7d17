// SPDX-License-Identifier: GPL-2.0
/*
 * Out-of-line copies of the static inline functions that kernel::rdma calls.
 * One function each; bindgen exposes rust_helper_foo() as bindings::foo().
 */

#include <linux/completion.h>
#include <linux/device.h>
#include <linux/kernel.h>
#include <linux/netdevice.h>
#include <linux/scatterlist.h>
#include <linux/spinlock.h>
#include <rdma/ib_addr.h>
#include <rdma/ib_verbs.h>

const char *rust_helper_dev_name(const struct device *dev)
{
	return dev_name(dev);
}

void rust_helper_dev_put(struct net_device *dev)
{
	dev_put(dev);
}

u32 rust_helper_rdma_start_port(const struct ib_device *device)
{
	return rdma_start_port(device);
}

u32 rust_helper_rdma_end_port(const struct ib_device *device)
{
	return rdma_end_port(device);
}

void rust_helper_spin_lock_bh(spinlock_t *lock)
{
	spin_lock_bh(lock);
}

void rust_helper_spin_unlock_bh(spinlock_t *lock)
{
	spin_unlock_bh(lock);
}

void rust_helper_init_completion(struct completion *x)
{
	init_completion(x);
}

void rust_helper_reinit_completion(struct completion *x)
{
	reinit_completion(x);
}

void rust_helper_rdma_might_sleep(void)
{
	might_sleep();
}

int rust_helper_ib_post_send(struct ib_qp *qp, const struct ib_send_wr *wr,
			     const struct ib_send_wr **bad_wr)
{
	return ib_post_send(qp, wr, bad_wr);
}

int rust_helper_ib_post_recv(struct ib_qp *qp, const struct ib_recv_wr *wr,
			     const struct ib_recv_wr **bad_wr)
{
	return ib_post_recv(qp, wr, bad_wr);
}

u64 rust_helper_ib_dma_map_single(struct ib_device *dev, void *cpu_addr,
				  size_t size, enum dma_data_direction dir)
{
	return ib_dma_map_single(dev, cpu_addr, size, dir);
}

void rust_helper_ib_dma_unmap_single(struct ib_device *dev, u64 addr,
				     size_t size, enum dma_data_direction dir)
{
	ib_dma_unmap_single(dev, addr, size, dir);
}

u64 rust_helper_ib_dma_map_page(struct ib_device *dev, struct page *page,
				unsigned long offset, size_t size,
				enum dma_data_direction dir)
{
	return ib_dma_map_page(dev, page, offset, size, dir);
}

void rust_helper_ib_dma_unmap_page(struct ib_device *dev, u64 addr,
				   size_t size, enum dma_data_direction dir)
{
	ib_dma_unmap_page(dev, addr, size, dir);
}

int rust_helper_ib_dma_mapping_error(struct ib_device *dev, u64 dma_addr)
{
	return ib_dma_mapping_error(dev, dma_addr);
}

void rust_helper_ib_dma_sync_single_for_cpu(struct ib_device *dev, u64 addr,
					    size_t size,
					    enum dma_data_direction dir)
{
	ib_dma_sync_single_for_cpu(dev, addr, size, dir);
}

void rust_helper_ib_dma_sync_single_for_device(struct ib_device *dev, u64 addr,
					       size_t size,
					       enum dma_data_direction dir)
{
	ib_dma_sync_single_for_device(dev, addr, size, dir);
}

/* A one-entry scatterlist for a buffer already DMA-mapped at @dma. */
void rust_helper_rdma_sg_set_mapped(struct scatterlist *sg, void *buf,
				    unsigned int len, u64 dma)
{
	sg_init_one(sg, buf, len);
	sg_dma_address(sg) = dma;
	sg_dma_len(sg) = len;
}

void rust_helper_rdma_gid2ip(struct sockaddr *out, const union ib_gid *gid)
{
	rdma_gid2ip(out, gid);
}
