// SPDX-License-Identifier: GPL-2.0

//! Pacing a validated UD loopback run: its sends wait for the receiver's receives
//! ([`Run::paced`] says why), parked in a list whose room is reserved when the run starts.

use super::traffic::{post_next, Tx};
use super::Run;
use crate::counters::Counters;
use crate::ctl::{Fault, Role};
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::new_spinlock_bh;
use kernel::prelude::*;
use kernel::rdma::{qp::QpType, sync::SpinLockBh, wr::Wr};

/// What orders a run's posts, and holds a paced run's ([`Run::paced`]) back.
#[pin_data]
pub(super) struct Posting {
    /// Serialises "take a sequence number, post": the post order is the sequence order.
    #[pin]
    pub(super) order: SpinLockBh<()>,
    /// `rx_expected` as it was when the receiver last gave a receive back.
    returned: AtomicU64,
    /// Send requests waiting for receives to be given back (room for all of them is
    /// reserved when the run starts: parking never allocates).
    #[pin]
    parked: SpinLockBh<KVec<Wr<Tx>>>,
}

impl Posting {
    pub(super) fn new() -> impl PinInit<Self> {
        pin_init!(Posting {
            order <- new_spinlock_bh!((), "rdma_rust_ulp_post"),
            returned: AtomicU64::new(0),
            parked <- new_spinlock_bh!(KVec::new(), "rdma_rust_ulp_parked"),
        })
    }
}

impl Run {
    /// Reserves room for a paced run's `n` send requests to park ([`Run::pace`] never
    /// allocates). Process context, before the first post.
    pub(super) fn reserve_parking(&self, n: usize) -> Result {
        if self.paced() {
            let room = KVec::with_capacity(n, GFP_KERNEL)?;
            *self.posting.parked.lock() = room;
        }
        Ok(())
    }

    /// The parked send requests, taken from the list (for [`Run::stop`]).
    pub(super) fn take_parked(&self) -> KVec<Wr<Tx>> {
        core::mem::take(&mut *self.posting.parked.lock())
    }

    /// Whether the run's sends wait for its receiver: a validated UD loopback run (not a
    /// ping-pong). rxe drops a datagram that finds no receive posted and completes its send
    /// all the same, so a sender driven by its send completions alone can outrun a receiver
    /// whose handler runs late: its responder holds datagrams back, then consumes receives
    /// faster than the handler gives them back (on a slow host, `poll=direct` lost 31 of 300
    /// with four times the depth posted). A paced run keeps the messages neither received nor
    /// known lost within the receives it keeps posted, so that every datagram finds one. Only
    /// a validated run's sequence numbers tell a loss from a message still on its way, and
    /// only a loopback run sees its receiver: the others are not paced (nor are perftest's UD
    /// tests), and rely on the depth of [`Spec::receives`]. Nor are fault runs, whose
    /// datagrams are all dropped: a paced run waits for a receive or a later datagram to
    /// account for each one in flight, so if every one of them vanished it would wait until
    /// stopped.
    fn paced(&self) -> bool {
        let s = &self.spec;
        s.mode == QpType::Ud
            && s.role == Role::Loopback
            && s.validate
            && !s.pingpong
            && s.fault == Fault::None
            && s.op.uses_recv()
    }

    /// Whether the receiver has a receive posted for each of the next batch's messages (or
    /// there is no next batch).
    fn receives_for_next(&self) -> bool {
        let count = self.spec.count;
        let next = self.next_seq.load(Ordering::Relaxed);
        if next >= count {
            return true;
        }
        let n = u64::from(self.spec.batch.max(1)).min(count - next);
        let returned = self.posting.returned.load(Ordering::Acquire);
        next + n <= returned + u64::from(self.spec.receives())
    }

    /// A paced run keeps `wr` (returns `None`) while its next messages would outrun the
    /// receives posted, until [`Run::receive_returned`] posts it; otherwise gives it back to
    /// be posted. Under `posting.order`, which orders it with the claim that follows.
    pub(super) fn pace(&self, wr: Wr<Tx>) -> Option<Wr<Tx>> {
        if !self.paced() {
            return Some(wr);
        }
        let mut parked = self.posting.parked.lock();
        if self.stopping() || self.receives_for_next() || parked.len() == parked.capacity() {
            return Some(wr);
        }
        // Within the capacity reserved at `go`: no allocation.
        match parked.push(wr, GFP_ATOMIC) {
            Ok(()) => {
                Counters::add(&self.counters.waits, 1);
                None
            }
            // Unreachable (the room is there); the request is gone, and with it its share of
            // the run's end.
            Err(_) => {
                self.retire();
                None
            }
        }
    }

    /// A paced run's receiver gave a receive back (posted it again): posts the parked
    /// requests it made room for. Any context.
    pub(super) fn receive_returned(&self) {
        if !self.paced() {
            return;
        }
        self.posting
            .returned
            .store(self.rx_expected.load(Ordering::Relaxed), Ordering::Release);
        loop {
            let wr = {
                let mut parked = self.posting.parked.lock();
                if !self.receives_for_next() {
                    return;
                }
                parked.pop()
            };
            match wr {
                // It parks again if another request took the room first.
                Some(wr) => post_next(wr),
                None => return,
            }
        }
    }
}
