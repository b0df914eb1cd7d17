// SPDX-License-Identifier: GPL-2.0
/*
 * Out-of-line copies of the static inline functions that kernel::rdma calls.
 * One function each; bindgen exposes rust_helper_foo() as bindings::foo().
 * At the end, the client that keeps the device CQ pools alive for kernel::rdma's users,
 * and the poller slots of pool CQs.
 */

#include <linux/bottom_half.h>
#include <linux/cpumask.h>
#include <linux/completion.h>
#include <linux/device.h>
#include <linux/fault-inject.h>
#include <linux/hardirq.h>
#include <linux/hashtable.h>
#include <linux/inetdevice.h>
#include <linux/init.h>
#include <linux/kernel.h>
#include <linux/module.h>
#include <linux/netdevice.h>
#include <linux/preempt.h>
#include <linux/rcupdate.h>
#include <linux/scatterlist.h>
#include <linux/sched.h>
#include <linux/slab.h>
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

int rust_helper_ib_post_srq_recv(struct ib_srq *srq,
				 const struct ib_recv_wr *wr,
				 const struct ib_recv_wr **bad_wr)
{
	return ib_post_srq_recv(srq, wr, bad_wr);
}

/*
 * Processes the completions in @cq, up to as many as it can hold: those that
 * were in it when this was called come first, and a busy CQ cannot keep the
 * caller (with bottom halves disabled, for a softirq CQ) here for ever.
 */
static void rdma_cq_process_all(struct ib_cq *cq)
{
	struct ib_wc wcs[8];
	int budget = cq->cqe;
	int i, n;

	while (budget > 0 &&
	       (n = ib_poll_cq(cq, min_t(int, budget, ARRAY_SIZE(wcs)), wcs)) > 0) {
		budget -= n;
		for (i = 0; i < n; i++)
			if (wcs[i].wr_cqe)
				wcs[i].wr_cqe->done(cq, &wcs[i]);
	}
}

/*
 * Processes, in the caller's (process) context, every completion that is in @cq
 * when it is called, with the CQ's own softirq poller or work item disabled
 * meanwhile (an interrupt cannot schedule them again), then re-arms the CQ as
 * its poller would. After it returns, no completion that was in the CQ before
 * the call is still to be dispatched, and no handler of the CQ's poller is
 * running. Handlers run with bottom halves disabled for a softirq CQ, as they
 * do from irq_poll. The caller keeps direct pollers out.
 */
void rust_helper_rdma_cq_quiesce(struct ib_cq *cq)
{
	might_sleep();
	switch (cq->poll_ctx) {
	case IB_POLL_SOFTIRQ:
		irq_poll_disable(&cq->iop);
		local_bh_disable();
		rdma_cq_process_all(cq);
		local_bh_enable();
		irq_poll_enable(&cq->iop);
		if (ib_req_notify_cq(cq, IB_CQ_NEXT_COMP |
					     IB_CQ_REPORT_MISSED_EVENTS) > 0)
			irq_poll_sched(&cq->iop);
		break;
	case IB_POLL_WORKQUEUE:
	case IB_POLL_UNBOUND_WORKQUEUE:
		disable_work_sync(&cq->work);
		rdma_cq_process_all(cq);
		enable_work(&cq->work);
		if (ib_req_notify_cq(cq, IB_CQ_NEXT_COMP |
					     IB_CQ_REPORT_MISSED_EVENTS) > 0)
			queue_work(cq->comp_wq, &cq->work);
		break;
	default:
		rdma_cq_process_all(cq);
		break;
	}
}

/*
 * Gives the work item of a CQ that kernel::rdma allocated a lockdep class of
 * its own. Every CQ's work item shares the class of ib_alloc_cq's INIT_WORK,
 * so lockdep joins what kernel::rdma's handlers and teardowns do with what any
 * other ULP's CQ handlers do: nvmet's take nvmet_config_sem, which nvmet holds
 * around rdma_destroy_id, and a drain or free of one of our CQs under an
 * rdma_cm handler's lock then reads as a cycle through two unrelated CQs.
 * Dependencies among kernel::rdma's own CQs are still all tracked, in this
 * class. Called right after the CQ is allocated: no QP uses it, so its work
 * item has never been queued.
 */
void rust_helper_rdma_cq_own_class(struct ib_cq *cq)
{
#ifdef CONFIG_LOCKDEP
	static struct lock_class_key key;

	if (cq->poll_ctx == IB_POLL_WORKQUEUE ||
	    cq->poll_ctx == IB_POLL_UNBOUND_WORKQUEUE)
		lockdep_init_map(&cq->work.lockdep_map,
				 "(work_completion)(kernel::rdma cq)", &key, 0);
#endif
}

int rust_helper_ib_dma_map_sg(struct ib_device *dev, struct scatterlist *sg,
			      int nents, enum dma_data_direction dir)
{
	return ib_dma_map_sg(dev, sg, nents, dir);
}

void rust_helper_ib_dma_unmap_sg(struct ib_device *dev, struct scatterlist *sg,
				 int nents, enum dma_data_direction dir)
{
	ib_dma_unmap_sg(dev, sg, nents, dir);
}

/* Puts @len bytes at @offset of @page in entry @sg and returns the next entry (NULL after the last). */
struct scatterlist *rust_helper_rdma_sg_set_page(struct scatterlist *sg,
						 struct page *page,
						 unsigned int len,
						 unsigned int offset)
{
	sg_set_page(sg, page, len, offset);
	return sg_next(sg);
}

/* Syncs a mapped scatterlist for the CPU or the device (nothing to do for virt DMA). */
void rust_helper_rdma_dma_sync_sg(struct ib_device *dev, struct scatterlist *sg,
				  int nents, enum dma_data_direction dir,
				  bool for_device)
{
	if (ib_uses_virt_dma(dev))
		return;
	if (for_device)
		dma_sync_sg_for_device(dev->dma_device, sg, nents, dir);
	else
		dma_sync_sg_for_cpu(dev->dma_device, sg, nents, dir);
}

/*
 * Whether the caller may not sleep (the test of might_sleep()): a count of
 * preemption, softirq or hardirq, interrupts off, or inside a preemptible RCU
 * read-side section (which counts apart). Spinlocks, preempt_disable() and
 * non-preemptible RCU raise the preemption count only with
 * CONFIG_PREEMPT_COUNT, which kernel::rdma requires.
 */
bool rust_helper_rdma_in_atomic(void)
{
	return in_atomic() || irqs_disabled() || rcu_preempt_depth();
}

unsigned int rust_helper_num_online_cpus(void)
{
	return num_online_cpus();
}

#ifdef CONFIG_FAULT_INJECTION
static DECLARE_FAULT_ATTR(rdma_partial_post_attr);

/*
 * The fault-injection point of a chained post: true when the driver is to take
 * the chain but its last work request, as a driver failure would. Its
 * probability is 0, so it fires only for a task that armed fail_nth
 * (/proc/self/task/<tid>/fail-nth): the KUnit cases of the partial post.
 */
bool rust_helper_rdma_fail_partial_post(void)
{
	return should_fail_ex(&rdma_partial_post_attr, 1, FAULT_NOWARN);
}
#endif

/* Whether the running task is a workqueue worker. */
bool rust_helper_rdma_in_worker(void)
{
	return current->flags & PF_WQ_WORKER;
}

int rust_helper_rdma_cond_resched(void)
{
	return cond_resched();
}

static DEFINE_SPINLOCK(rdma_owner_lock);

/*
 * Serialises kernel::rdma's claims of module entries (owner.rs): any context,
 * so IRQ-safe. Returns the flags to give to rdma_owner_unlock().
 */
unsigned long rust_helper_rdma_owner_lock(void)
{
	unsigned long flags;

	spin_lock_irqsave(&rdma_owner_lock, flags);
	return flags;
}

void rust_helper_rdma_owner_unlock(unsigned long flags)
{
	spin_unlock_irqrestore(&rdma_owner_lock, flags);
}

/* The module whose text holds @addr; NULL for built-in code. */
struct module *rust_helper_rdma_module_of(unsigned long addr)
{
	struct module *mod;

	preempt_disable();
	mod = __module_text_address(addr);
	preempt_enable();
	return mod;
}

/* Sleeps @ms without counting as a hung (or loading) task: waits that report themselves. */
void rust_helper_rdma_sleep_idle_ms(unsigned int ms)
{
	schedule_timeout_idle(msecs_to_jiffies(ms));
}

void rust_helper_local_bh_disable(void)
{
	local_bh_disable();
}

void rust_helper_local_bh_enable(void)
{
	local_bh_enable();
}

/* The DMA address and length of mapped entry @sg; returns the next entry. */
struct scatterlist *rust_helper_rdma_sg_dma(struct scatterlist *sg, u64 *addr,
					    u32 *len)
{
	*addr = sg_dma_address(sg);
	*len = sg_dma_len(sg);
	return sg_next(sg);
}

bool rust_helper_rdma_protocol_iwarp(const struct ib_device *device, u32 port_num)
{
	return rdma_protocol_iwarp(device, port_num);
}

/*
 * The first primary IPv4 address of the netdev bound to a port (network order); 0 if
 * none. Not inet_select_addr(), which falls back to another netdev's address.
 */
__be32 rust_helper_rdma_port_ipv4(struct ib_device *device, u32 port_num)
{
	struct net_device *ndev = ib_device_get_netdev(device, port_num);
	const struct in_ifaddr *ifa;
	struct in_device *in_dev;
	__be32 addr = 0;

	if (!ndev)
		return 0;
	rcu_read_lock();
	in_dev = __in_dev_get_rcu(ndev);
	if (in_dev) {
		in_dev_for_each_ifa_rcu(ifa, in_dev) {
			if (!(ifa->ifa_flags & IFA_F_SECONDARY)) {
				addr = ifa->ifa_local;
				break;
			}
		}
	}
	rcu_read_unlock();
	dev_put(ndev);
	return addr;
}

/*
 * kernel::rdma's share of the device CQ pools (ib_cq_pool_get/put).
 *
 * The core frees a device's pool CQs (ib_cq_pool_cleanup) as soon as every client's
 * remove() has returned, without waiting for the device's references.  A Rust object that
 * holds a pool CQ may outlive its client's remove(): a QP whose last reference dropped in a
 * completion handler is destroyed by a work item.  So kernel::rdma counts its pool CQ users
 * per device, and the remove() of a client of its own waits for the count to reach zero.
 * The client registers at fs_initcall, after ib_core's own clients and before rdma_cm and
 * every ULP, so its remove() runs after theirs (clients are removed in reverse order).
 */
struct rdma_cq_pool_users {
	unsigned long count;
	bool dying;
};

static DEFINE_SPINLOCK(rdma_cq_pool_lock);
static struct ib_client rdma_cq_pool_client;

static int rdma_cq_pool_add(struct ib_device *dev)
{
	struct rdma_cq_pool_users *u = kzalloc(sizeof(*u), GFP_KERNEL);

	/* Without it, kernel::rdma answers -ENOMEM for pool CQs on this device. */
	if (u)
		ib_set_client_data(dev, &rdma_cq_pool_client, u);
	return 0;
}

static void rdma_cq_pool_remove(struct ib_device *dev, void *data)
{
	struct rdma_cq_pool_users *u = data;
	unsigned int waited = 0;

	if (!u)
		return;
	spin_lock(&rdma_cq_pool_lock);
	u->dying = true;
	spin_unlock(&rdma_cq_pool_lock);
	while (READ_ONCE(u->count)) {
		if (waited && !(waited % 10000))
			pr_warn("kernel::rdma: %s: waiting for %lu CQ pool users\n",
				dev_name(&dev->dev), READ_ONCE(u->count));
		schedule_timeout_idle(msecs_to_jiffies(10));
		waited += 10;
	}
	ib_set_client_data(dev, &rdma_cq_pool_client, NULL);
	/* Users that loaded @u before it was cleared have left the lock. */
	spin_lock(&rdma_cq_pool_lock);
	spin_unlock(&rdma_cq_pool_lock);
	kfree(u);
}

static struct ib_client rdma_cq_pool_client = {
	.name = "kernel_rdma_cq_pool",
	.add = rdma_cq_pool_add,
	.remove = rdma_cq_pool_remove,
};

static int __init rdma_cq_pool_init(void)
{
	return ib_register_client(&rdma_cq_pool_client);
}
fs_initcall(rdma_cq_pool_init);

/*
 * Counts a user of @dev's CQ pool; returns what rust_helper_rdma_cq_pool_user_put() takes,
 * or NULL (-ENODEV) when the device is being removed or was never added.
 */
void *rust_helper_rdma_cq_pool_user_get(struct ib_device *dev)
{
	struct rdma_cq_pool_users *u;

	spin_lock(&rdma_cq_pool_lock);
	u = ib_get_client_data(dev, &rdma_cq_pool_client);
	if (u && !u->dying)
		WRITE_ONCE(u->count, u->count + 1);
	else
		u = NULL;
	spin_unlock(&rdma_cq_pool_lock);
	return u;
}

void rust_helper_rdma_cq_pool_user_put(void *users)
{
	struct rdma_cq_pool_users *u = users;

	spin_lock(&rdma_cq_pool_lock);
	WRITE_ONCE(u->count, u->count - 1);
	spin_unlock(&rdma_cq_pool_lock);
}

/*
 * The poller slots of pool CQs (kernel::rdma's Cq::exclusive).  A pool CQ's cq_context is
 * not kernel::rdma's to use, so its slot is kept here: one per pool CQ that kernel::rdma
 * holds shares of, found by the CQ's address and counted by the shares.  One slot per CQ,
 * never one for several: the task that holds a CQ's slot (draining a QP) waits for that
 * CQ's handlers, and a handler may tear down a QP of another pool CQ, which takes that
 * other CQ's slot.  Were it the same slot, each would wait for the other for ever.
 */
struct rdma_pool_slot {
	/* The task that holds the slot; Rust reads and writes it as an AtomicPtr only. */
	struct task_struct *poller;
	struct hlist_node node;
	struct ib_cq *cq;
	unsigned int shares;
};

static DEFINE_HASHTABLE(rdma_pool_slots, 6);
static DEFINE_SPINLOCK(rdma_pool_slots_lock);

/*
 * Counts a share of the pool CQ @cq; returns its slot's holder field, which lives until
 * rust_helper_rdma_pool_slot_put() is called as many times, or NULL (-ENOMEM).  Sleeps.
 */
struct task_struct **rust_helper_rdma_pool_slot_get(struct ib_cq *cq)
{
	struct rdma_pool_slot *s, *new = kzalloc(sizeof(*new), GFP_KERNEL);

	spin_lock(&rdma_pool_slots_lock);
	hash_for_each_possible(rdma_pool_slots, s, node, (unsigned long)cq)
		if (s->cq == cq)
			goto found;
	s = new;
	new = NULL;
	if (!s) {
		spin_unlock(&rdma_pool_slots_lock);
		return NULL;
	}
	s->cq = cq;
	hash_add(rdma_pool_slots, &s->node, (unsigned long)cq);
found:
	s->shares++;
	spin_unlock(&rdma_pool_slots_lock);
	kfree(new);
	return &s->poller;
}

/* Gives back a share counted by rust_helper_rdma_pool_slot_get(); its slot is not held. */
void rust_helper_rdma_pool_slot_put(struct task_struct **poller)
{
	struct rdma_pool_slot *s = container_of(poller, struct rdma_pool_slot, poller);
	bool last;

	spin_lock(&rdma_pool_slots_lock);
	last = !--s->shares;
	if (last)
		hash_del(&s->node);
	spin_unlock(&rdma_pool_slots_lock);
	if (last)
		kfree(s);
}
