// SPDX-License-Identifier: GPL-2.0

//! The disks: one per active namespace, `/dev/rnvme<controller>n<nsid>`, all served by the
//! controller's I/O queues (one hardware queue each, one tag set for every namespace, as
//! nvme's).

use crate::ident::{self, NsIdent};
use crate::queue::{Blk, Counts, Health, Queue, State};
use core::pin::Pin;
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::block::mq::gen_disk::{AttrPage, DiskAttributes};
use kernel::block::mq::{Operations, Request, TimedOut, TimeoutAction};
use kernel::prelude::*;
use kernel::rdma::sync::SpinLockBh;
use kernel::str::CStr;
use kernel::sync::{Arc, ArcBorrow, Mutex};
use kernel::types::ARef;
use kernel::{new_mutex, new_spinlock_bh};

/// How long a command may wait for its completion before its queue fails (nvme's default
/// I/O timeout); the block layer's `queue/io_timeout` in sysfs changes it per disk.
pub(crate) const IO_TIMEOUT_MS: u32 = 30_000;

/// A controller's I/O queues, one per hardware queue of its disks: each replaced by a new
/// connection when the controller reconnects. Closed when the last disk and the controller
/// let them go.
#[pin_data(PinnedDrop)]
pub(crate) struct IoQueues {
    queues: KVec<Pin<KBox<SpinLockBh<Arc<Queue>>>>>,
    pub(crate) health: Arc<Health>,
    /// Held by a timeout handler while it gives its request back, and by the recovery while
    /// it closes the queues: a request is given back by one of them, never dropped between
    /// the two.
    #[pin]
    pub(crate) recovery: Mutex<()>,
    pub(crate) timeouts: AtomicU64,
    /// Block requests no queue took that could not be ended.
    pub(crate) unended: AtomicU64,
}

impl IoQueues {
    /// The controller's I/O queues; on failure they are closed.
    pub(crate) fn new(queues: KVec<Arc<Queue>>, health: Arc<Health>) -> Result<Arc<Self>> {
        let made = (|| -> Result<Arc<Self>> {
            let mut slots = KVec::with_capacity(queues.len(), GFP_KERNEL)?;
            for q in queues.iter() {
                slots.push(
                    KBox::pin_init(
                        new_spinlock_bh!(q.clone(), "rdma_rust_nvme_hwq"),
                        GFP_KERNEL,
                    )?,
                    GFP_KERNEL,
                )?;
            }
            Arc::pin_init(
                pin_init!(IoQueues {
                    queues: slots,
                    health,
                    recovery <- new_mutex!((), "rdma_rust_nvme_recovery"),
                    timeouts: AtomicU64::new(0),
                    unended: AtomicU64::new(0),
                }),
                GFP_KERNEL,
            )
        })();
        if made.is_err() {
            for q in queues.iter() {
                q.close();
            }
        }
        made
    }

    /// Hardware queues.
    pub(crate) fn len(&self) -> usize {
        self.queues.len()
    }

    /// The queue of hardware queue `i`.
    pub(crate) fn get(&self, i: usize) -> Option<Arc<Queue>> {
        self.queues.get(i).map(|q| q.lock().clone())
    }

    /// Every queue, in order.
    pub(crate) fn all(&self) -> impl Iterator<Item = Arc<Queue>> + '_ {
        self.queues.iter().map(|q| q.lock().clone())
    }

    /// Puts `queues`, new connections, in place of the old ones (closed already).
    pub(crate) fn replace(&self, queues: KVec<Arc<Queue>>) {
        for (slot, q) in self.queues.iter().zip(queues) {
            *slot.lock() = q;
        }
    }

    /// What the queues counted.
    pub(crate) fn counts(&self) -> Counts {
        let mut sum = Counts::default();
        for q in self.all() {
            sum.add(&q.counts());
        }
        sum
    }

    /// Fails every queue (process context).
    pub(crate) fn fail(&self, why: core::fmt::Arguments<'_>) {
        for q in self.all() {
            q.fail(why, true);
        }
    }

    /// Closes every queue (process context).
    pub(crate) fn close(&self) {
        for q in self.all() {
            q.close();
        }
    }
}

#[pinned_drop]
impl PinnedDrop for IoQueues {
    fn drop(self: Pin<&mut Self>) {
        self.close();
    }
}

/// A namespace: the queue data of its disk.
pub(crate) struct Ns {
    pub(crate) io: Arc<IoQueues>,
    pub(crate) nsid: u32,
    pub(crate) lba_shift: u32,
    /// What its disk's sysfs files show.
    pub(crate) ident: NsIdent,
}

/// The disk's identity in sysfs, as nvme's disks have it (`wwid`, ...: `ident.rs`).
impl DiskAttributes for Blk {
    const NAMES: &'static [&'static CStr] = &ident::NAMES;

    fn show(ns: ArcBorrow<'_, Ns>, index: usize, page: &mut AttrPage<'_>) -> Result {
        ns.ident.show(index, page)
    }

    fn visible(ns: ArcBorrow<'_, Ns>, index: usize) -> bool {
        ns.ident.visible(index)
    }
}

#[vtable]
impl Operations for Blk {
    type QueueData = Arc<Ns>;

    fn queue_rq(ns: ArcBorrow<'_, Ns>, rq: ARef<Request<Self>>, _is_last: bool) -> Result {
        match ns.io.health.state() {
            State::Live => {}
            // Reconnecting: blk-mq sends the request again a little later.
            State::Recovering => return Err(ENOMEM),
            State::Dead | State::Deleting => {
                if Request::end(rq, Err(EIO)).is_err() {
                    ns.io.unended.fetch_add(1, Ordering::Relaxed);
                }
                return Ok(());
            }
        }
        match ns.io.get(rq.hw_queue() as usize) {
            Some(q) => q.submit(rq, ns.nsid, ns.lba_shift),
            None => {
                if Request::end(rq, Err(EIO)).is_err() {
                    ns.io.unended.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            }
        }
    }

    fn commit_rqs(_ns: ArcBorrow<'_, Ns>) {}

    fn timeout(ns: ArcBorrow<'_, Ns>, rq: TimedOut) -> TimeoutAction {
        let _recovery = ns.io.recovery.lock();
        let Some(q) = ns.io.get(rq.hw_queue() as usize) else {
            return TimeoutAction::ResetTimer;
        };
        let tag = rq.tag() as usize;
        if !q.is_dead() {
            ns.io.timeouts.fetch_add(1, Ordering::Relaxed);
            pr_err!(
                "queue {}: a command of {} bytes at sector {} timed out\n",
                q.qid(),
                rq.bytes(),
                rq.sector()
            );
        }
        // The target does not answer: the queue fails, which starts the controller's
        // recovery and gives this request back (if it is still ours) and every other one once
        // nothing reaches their pages; the timer comes back for those that wait.
        q.fail(format_args!("a command timed out"), true);
        if q.ending(tag) {
            TimeoutAction::ResetTimer
        } else {
            TimeoutAction::Done
        }
    }
}
