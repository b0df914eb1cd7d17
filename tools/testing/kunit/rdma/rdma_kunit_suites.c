// SPDX-License-Identifier: GPL-2.0
/*
 * KUnit suites of kernel::rdma. The 6.12 kernel crate cannot declare a KUnit
 * suite from Rust, so the suites are declared here and each case calls a Rust
 * test function (rdma_kunit_tests.rs) that returns:
 *   0        pass
 *   -ENODEV  no RDMA device to test against: the case is SKIPPED, visibly
 *   other    failure; the Rust side has logged what it expected and got
 */

#include <kunit/test.h>
#include <linux/debug_locks.h>
#include <linux/hardirq.h>
#include <linux/sched.h>
#include <linux/umh.h>
#include <rdma/ib_verbs.h>
#include <rdma/restrack.h>

/* Runs @cmd with /bin/sh in process context and returns its exit status. */
int rdma_kunit_run(const char *cmd);

int rdma_kunit_run(const char *cmd)
{
	char *argv[] = { "/bin/sh", "-c", (char *)cmd, NULL };
	static char *envp[] = { "HOME=/", "PATH=/sbin:/bin:/usr/sbin:/usr/bin", NULL };
	int ret;

	ret = call_usermodehelper(argv[0], argv, envp, UMH_WAIT_PROC);
	if (ret > 0)	/* a wait status: exit code in bits 8..15 */
		ret = (ret >> 8) & 0xff;
	return ret;
}

int rdma_kunit_fail_nth(unsigned int n);
unsigned int rdma_kunit_fail_left(void);
int rdma_kunit_res_count(const char *name);

/*
 * Makes the @n-th fault-injection point this task passes fail (fail_nth, as
 * /proc/self/task/<tid>/fail-nth does; 0 disarms). -EOPNOTSUPP without
 * CONFIG_FAULT_INJECTION.
 */
int rdma_kunit_fail_nth(unsigned int n)
{
#ifdef CONFIG_FAULT_INJECTION
	WRITE_ONCE(current->fail_nth, n);
	return 0;
#else
	return -EOPNOTSUPP;
#endif
}

/* Injection points still to pass before the armed failure (0: it happened or none armed). */
unsigned int rdma_kunit_fail_left(void)
{
#ifdef CONFIG_FAULT_INJECTION
	return READ_ONCE(current->fail_nth);
#else
	return 0;
#endif
}

/* PDs, CQs, QPs, MRs and SRQs that the RDMA core tracks on device @name; -ENODEV without it. */
int rdma_kunit_res_count(const char *name)
{
	static const enum rdma_restrack_type types[] = {
		RDMA_RESTRACK_PD, RDMA_RESTRACK_CQ, RDMA_RESTRACK_QP,
		RDMA_RESTRACK_MR, RDMA_RESTRACK_SRQ,
	};
	struct ib_device *dev = ib_device_get_by_name(name, RDMA_DRIVER_UNKNOWN);
	int i, n = 0;

	if (!dev)
		return -ENODEV;
	for (i = 0; i < ARRAY_SIZE(types); i++)
		n += rdma_restrack_count(dev, types[i], true);
	ib_device_put(dev);
	return n;
}

int rdma_kunit_pool_cqs(const char *name, u64 *ids, u32 *buckets, u32 *used, int max);

/*
 * The CQs of device @name's pool of IB_POLL_WORKQUEUE CQs, up to @max: each one's address
 * (as an id), the bucket kernel::rdma's former table of 64 pool poller slots put it in
 * (its address divided by the size of a CQ, modulo 64), and its entries in use. Returns how
 * many, or -ENODEV without the device.
 */
int rdma_kunit_pool_cqs(const char *name, u64 *ids, u32 *buckets, u32 *used, int max)
{
	struct ib_device *dev = ib_device_get_by_name(name, RDMA_DRIVER_UNKNOWN);
	struct ib_cq *cq;
	int n = 0;

	if (!dev)
		return -ENODEV;
	spin_lock_irq(&dev->cq_pools_lock);
	list_for_each_entry(cq, &dev->cq_pools[IB_POLL_WORKQUEUE], pool_entry) {
		if (n == max)
			break;
		ids[n] = (unsigned long)cq;
		buckets[n] = ((unsigned long)cq / sizeof(struct ib_cq)) % 64;
		used[n] = cq->cqe_used;
		n++;
	}
	spin_unlock_irq(&dev->cq_pools_lock);
	ib_device_put(dev);
	return n;
}

bool rdma_kunit_lockdep_on(void);

/* Whether lockdep is still on: it turns itself off at its first report. */
bool rdma_kunit_lockdep_on(void)
{
	return debug_locks;
}

bool rdma_kunit_bh_disabled(void);

/* Whether bottom halves are disabled here (as in the handlers of a softirq CQ). */
bool rdma_kunit_bh_disabled(void)
{
	return in_softirq();
}

/* A case; its -ENODEV (no device it needs) is a skip that says how to make one. */
#define RDMA_KUNIT_CASE_NEEDS(fn, needs)				\
	int fn(void);							\
	static void fn##_case(struct kunit *test)			\
	{								\
		int ret = fn();						\
		if (ret == -ENODEV)					\
			kunit_skip(test, needs);			\
		KUNIT_EXPECT_EQ_MSG(test, ret, 0,			\
				    "%s failed; see the lines above", #fn); \
	}
#define RDMA_KUNIT_CASE(fn)						\
	RDMA_KUNIT_CASE_NEEDS(fn, "no rxe device: create one with "	\
			      "'rdma link add rxe0 type rxe netdev eth0'")

RDMA_KUNIT_CASE(rdma_kunit_client_add_each_device)
RDMA_KUNIT_CASE(rdma_kunit_client_unregister_removes_all)
RDMA_KUNIT_CASE(rdma_kunit_client_busy)
RDMA_KUNIT_CASE(rdma_kunit_client_link_delete_and_add)
RDMA_KUNIT_CASE(rdma_kunit_device_port_active)
RDMA_KUNIT_CASE(rdma_kunit_device_bad_port)
RDMA_KUNIT_CASE(rdma_kunit_device_lookup)
RDMA_KUNIT_CASE(rdma_kunit_verbs_pd_cq)
RDMA_KUNIT_CASE(rdma_kunit_verbs_copy_alignment)
RDMA_KUNIT_CASE(rdma_kunit_verbs_rc_send_recv)
RDMA_KUNIT_CASE(rdma_kunit_verbs_rc_write_read)
RDMA_KUNIT_CASE(rdma_kunit_verbs_rc_atomics)
RDMA_KUNIT_CASE(rdma_kunit_verbs_ud_send_recv)
RDMA_KUNIT_CASE(rdma_kunit_verbs_inline)
RDMA_KUNIT_CASE(rdma_kunit_verbs_post_list)
RDMA_KUNIT_CASE(rdma_kunit_verbs_depth_and_flush)
RDMA_KUNIT_CASE(rdma_kunit_verbs_bad_rkey)
RDMA_KUNIT_CASE(rdma_kunit_verbs_rnr)
RDMA_KUNIT_CASE(rdma_kunit_verbs_drop_drains)
RDMA_KUNIT_CASE(rdma_kunit_verbs_cq_overrun)
RDMA_KUNIT_CASE(rdma_kunit_verbs_waited)
RDMA_KUNIT_CASE(rdma_kunit_verbs_poll_contexts)
RDMA_KUNIT_CASE(rdma_kunit_verbs_local_inv)
RDMA_KUNIT_CASE(rdma_kunit_verbs_port_events)
RDMA_KUNIT_CASE(rdma_kunit_verbs_srq)
RDMA_KUNIT_CASE(rdma_kunit_verbs_drain_queues)
RDMA_KUNIT_CASE(rdma_kunit_verbs_mr_sg)
RDMA_KUNIT_CASE(rdma_kunit_verbs_ctor_failures)
RDMA_KUNIT_CASE(rdma_kunit_verbs_gather_scatter)
RDMA_KUNIT_CASE(rdma_kunit_verbs_query)
RDMA_KUNIT_CASE(rdma_kunit_verbs_ud_reply)
RDMA_KUNIT_CASE(rdma_kunit_verbs_cm_options)
RDMA_KUNIT_CASE(rdma_kunit_verbs_multicast)
RDMA_KUNIT_CASE(rdma_kunit_verbs_cm_handler_no_drain)
RDMA_KUNIT_CASE(rdma_kunit_verbs_cq_pool)
RDMA_KUNIT_CASE(rdma_kunit_verbs_cq_pool_one_slot)
RDMA_KUNIT_CASE(rdma_kunit_sound_last_refs_in_handler)
RDMA_KUNIT_CASE(rdma_kunit_sound_foreign_objects)
RDMA_KUNIT_CASE(rdma_kunit_sound_cm_one_qp)
RDMA_KUNIT_CASE(rdma_kunit_sound_srq_vs_poller)
RDMA_KUNIT_CASE(rdma_kunit_sound_late_completion)
RDMA_KUNIT_CASE(rdma_kunit_sound_srq_flush_context)
RDMA_KUNIT_CASE(rdma_kunit_sound_drain_in_build)
RDMA_KUNIT_CASE(rdma_kunit_sound_concurrent_drain)
RDMA_KUNIT_CASE(rdma_kunit_sound_partial_post_owns_qp)
RDMA_KUNIT_CASE(rdma_kunit_sound_event_drops_other)
RDMA_KUNIT_CASE(rdma_kunit_rw_read_write)
RDMA_KUNIT_CASE(rdma_kunit_rw_sge)
RDMA_KUNIT_CASE(rdma_kunit_rw_chained_response)
RDMA_KUNIT_CASE(rdma_kunit_rw_refusals)
RDMA_KUNIT_CASE(rdma_kunit_rw_remote_invalidate)
RDMA_KUNIT_CASE(rdma_kunit_rw_lent_mr)
RDMA_KUNIT_CASE(rdma_kunit_mr_inv_flushed)
RDMA_KUNIT_CASE(rdma_kunit_mr_inv_stale_wc)
RDMA_KUNIT_CASE(rdma_kunit_rw_posted_twice)
RDMA_KUNIT_CASE(rdma_kunit_rw_flags_after_chain)
RDMA_KUNIT_CASE(rdma_kunit_async_srq_limit)
RDMA_KUNIT_CASE(rdma_kunit_async_cq_resize)

static struct kunit_case rdma_client_cases[] = {
	KUNIT_CASE(rdma_kunit_client_add_each_device_case),
	KUNIT_CASE(rdma_kunit_client_unregister_removes_all_case),
	KUNIT_CASE(rdma_kunit_client_busy_case),
	KUNIT_CASE(rdma_kunit_client_link_delete_and_add_case),
	{}
};

static struct kunit_suite rdma_client_suite = {
	.name = "rdma_client",
	.test_cases = rdma_client_cases,
};

static struct kunit_case rdma_device_cases[] = {
	KUNIT_CASE(rdma_kunit_device_port_active_case),
	KUNIT_CASE(rdma_kunit_device_bad_port_case),
	KUNIT_CASE(rdma_kunit_device_lookup_case),
	{}
};

static struct kunit_suite rdma_device_suite = {
	.name = "rdma_device",
	.test_cases = rdma_device_cases,
};

static struct kunit_case rdma_verbs_cases[] = {
	KUNIT_CASE(rdma_kunit_verbs_pd_cq_case),
	KUNIT_CASE(rdma_kunit_verbs_copy_alignment_case),
	KUNIT_CASE(rdma_kunit_verbs_rc_send_recv_case),
	KUNIT_CASE(rdma_kunit_verbs_rc_write_read_case),
	KUNIT_CASE(rdma_kunit_verbs_rc_atomics_case),
	KUNIT_CASE(rdma_kunit_verbs_ud_send_recv_case),
	KUNIT_CASE(rdma_kunit_verbs_inline_case),
	KUNIT_CASE(rdma_kunit_verbs_post_list_case),
	KUNIT_CASE(rdma_kunit_verbs_depth_and_flush_case),
	KUNIT_CASE(rdma_kunit_verbs_bad_rkey_case),
	KUNIT_CASE(rdma_kunit_verbs_rnr_case),
	KUNIT_CASE(rdma_kunit_verbs_drop_drains_case),
	KUNIT_CASE(rdma_kunit_verbs_cq_overrun_case),
	KUNIT_CASE(rdma_kunit_verbs_waited_case),
	KUNIT_CASE(rdma_kunit_verbs_poll_contexts_case),
	KUNIT_CASE(rdma_kunit_verbs_local_inv_case),
	KUNIT_CASE(rdma_kunit_verbs_port_events_case),
	KUNIT_CASE(rdma_kunit_verbs_srq_case),
	KUNIT_CASE(rdma_kunit_verbs_drain_queues_case),
	KUNIT_CASE(rdma_kunit_verbs_mr_sg_case),
	KUNIT_CASE(rdma_kunit_verbs_gather_scatter_case),
	KUNIT_CASE(rdma_kunit_verbs_query_case),
	KUNIT_CASE(rdma_kunit_verbs_ud_reply_case),
	KUNIT_CASE(rdma_kunit_verbs_cm_options_case),
	KUNIT_CASE(rdma_kunit_verbs_multicast_case),
	KUNIT_CASE(rdma_kunit_verbs_cm_handler_no_drain_case),
	KUNIT_CASE(rdma_kunit_verbs_cq_pool_case),
	KUNIT_CASE_SLOW(rdma_kunit_verbs_cq_pool_one_slot_case),
	KUNIT_CASE_SLOW(rdma_kunit_verbs_ctor_failures_case),
	{}
};

static struct kunit_suite rdma_verbs_suite = {
	.name = "rdma_verbs",
	.test_cases = rdma_verbs_cases,
};

/*
 * The rules kernel::rdma keeps for its users (verbs/soundness.rs): each case
 * fails, or splats, when the rule it checks is broken.
 */
static struct kunit_case rdma_soundness_cases[] = {
	KUNIT_CASE_SLOW(rdma_kunit_sound_last_refs_in_handler_case),
	KUNIT_CASE(rdma_kunit_sound_foreign_objects_case),
	KUNIT_CASE(rdma_kunit_sound_cm_one_qp_case),
	KUNIT_CASE(rdma_kunit_sound_srq_vs_poller_case),
	KUNIT_CASE_SLOW(rdma_kunit_sound_late_completion_case),
	KUNIT_CASE(rdma_kunit_sound_srq_flush_context_case),
	KUNIT_CASE(rdma_kunit_sound_drain_in_build_case),
	KUNIT_CASE(rdma_kunit_sound_concurrent_drain_case),
	KUNIT_CASE(rdma_kunit_sound_partial_post_owns_qp_case),
	KUNIT_CASE(rdma_kunit_sound_event_drops_other_case),
	{}
};

static struct kunit_suite rdma_soundness_suite = {
	.name = "rdma_soundness",
	.test_cases = rdma_soundness_cases,
};

/*
 * What storage ULPs need (verbs/storage.rs): the core's R/W API, remote
 * invalidation and MRs over pages another object owns. The first peer guest
 * runs this suite again with ib_core.force_mr=1, for the MR path of the R/W
 * API.
 */
static struct kunit_case rdma_storage_cases[] = {
	KUNIT_CASE_SLOW(rdma_kunit_rw_read_write_case),
	KUNIT_CASE(rdma_kunit_rw_sge_case),
	KUNIT_CASE(rdma_kunit_rw_chained_response_case),
	KUNIT_CASE(rdma_kunit_rw_refusals_case),
	KUNIT_CASE(rdma_kunit_rw_remote_invalidate_case),
	KUNIT_CASE(rdma_kunit_rw_lent_mr_case),
	KUNIT_CASE(rdma_kunit_mr_inv_flushed_case),
	KUNIT_CASE(rdma_kunit_mr_inv_stale_wc_case),
	KUNIT_CASE(rdma_kunit_rw_posted_twice_case),
	KUNIT_CASE(rdma_kunit_rw_flags_after_chain_case),
	{}
};

static struct kunit_suite rdma_storage_suite = {
	.name = "rdma_storage",
	.test_cases = rdma_storage_cases,
};

/* Asynchronous events of QPs, SRQs and CQs; SRQ limit, CQ resize (verbs/asyncev.rs). */
static struct kunit_case rdma_async_cases[] = {
	KUNIT_CASE(rdma_kunit_async_srq_limit_case),
	KUNIT_CASE(rdma_kunit_async_cq_resize_case),
	{}
};

static struct kunit_suite rdma_async_suite = {
	.name = "rdma_async",
	.test_cases = rdma_async_cases,
};

/*
 * iWARP (verbs/iwarp.rs): what kernel::rdma refuses on soft-iWARP's siw0, which
 * the harness adds beside rxe0, and what works on a pair rdma_cm connects there.
 */
#define RDMA_KUNIT_SIW_CASE(fn)						\
	RDMA_KUNIT_CASE_NEEDS(fn, "no siw0 (or rxe0): create it with "	\
			      "'rdma link add siw0 type siw netdev veth2'")

RDMA_KUNIT_SIW_CASE(rdma_kunit_iwarp_transport)
RDMA_KUNIT_SIW_CASE(rdma_kunit_iwarp_refusals)
RDMA_KUNIT_SIW_CASE(rdma_kunit_iwarp_cm_pair)
RDMA_KUNIT_SIW_CASE(rdma_kunit_iwarp_cm_srq_rw)
RDMA_KUNIT_SIW_CASE(rdma_kunit_iwarp_cm_managed)
RDMA_KUNIT_SIW_CASE(rdma_kunit_iwarp_chain_buffers_reusable)
RDMA_KUNIT_SIW_CASE(rdma_kunit_iwarp_read_error_flushes_the_rest)

static struct kunit_case rdma_iwarp_cases[] = {
	KUNIT_CASE(rdma_kunit_iwarp_transport_case),
	KUNIT_CASE(rdma_kunit_iwarp_refusals_case),
	KUNIT_CASE(rdma_kunit_iwarp_cm_pair_case),
	KUNIT_CASE(rdma_kunit_iwarp_cm_srq_rw_case),
	KUNIT_CASE(rdma_kunit_iwarp_cm_managed_case),
	KUNIT_CASE(rdma_kunit_iwarp_chain_buffers_reusable_case),
	KUNIT_CASE(rdma_kunit_iwarp_read_error_flushes_the_rest_case),
	{}
};

static struct kunit_suite rdma_iwarp_suite = {
	.name = "rdma_iwarp",
	.test_cases = rdma_iwarp_cases,
};

kunit_test_suites(&rdma_device_suite, &rdma_verbs_suite, &rdma_soundness_suite,
		  &rdma_storage_suite, &rdma_async_suite, &rdma_client_suite,
		  &rdma_iwarp_suite);
