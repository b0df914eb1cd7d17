// SPDX-License-Identifier: GPL-2.0

//! A queue's failure and its end: giving the block requests in flight back once nothing
//! reaches their pages any more (to be sent again on the controller's next connection, or
//! failed), and closing the connection; the controller's state that decides which
//! ([`Health`]).

use super::{Blk, Queue, User};
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use kernel::block::mq::Request;
use kernel::prelude::*;
use kernel::rdma::sync::Completion as Signal;
use kernel::types::ARef;

/// A controller's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum State {
    /// Connected: commands go to the queues.
    Live = 0,
    /// A queue failed: the controller reconnects; block requests wait (requeued).
    Recovering = 1,
    /// Not reconnected within `ctrl_loss_tmo`: every block request fails.
    Dead = 2,
    /// Being deleted: every block request fails.
    Deleting = 3,
}

/// A controller's state as its queues and disks see it, and the signal that wakes the work
/// that recovers it.
#[pin_data]
pub(crate) struct Health {
    state: AtomicU8,
    /// Set while the controller is being deleted: a queue that fails from then on fails its
    /// requests instead of starting a recovery.
    no_recovery: AtomicBool,
    /// An Asynchronous Event Request's completion for the supervisor: bit 63 set, its status
    /// in bits 32-47 and its result (dword 0) below.
    event: AtomicU64,
    #[pin]
    wake: Signal,
}

impl Health {
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Health {
            state: AtomicU8::new(State::Live as u8),
            no_recovery: AtomicBool::new(false),
            event: AtomicU64::new(0),
            wake <- Signal::new(),
        })
    }

    pub(crate) fn state(&self) -> State {
        match self.state.load(Ordering::Acquire) {
            0 => State::Live,
            1 => State::Recovering,
            2 => State::Dead,
            _ => State::Deleting,
        }
    }

    /// Moves from `from` to `to`; `false` if the state was another.
    pub(crate) fn change(&self, from: State, to: State) -> bool {
        self.state
            .compare_exchange(from as u8, to as u8, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// No recovery from here on (the controller is being deleted): a controller that is not
    /// live fails its requests at once, a live one once a queue fails. Wakes the recovery.
    ///
    /// Sequentially consistent with [`Health::queue_failed`]'s change and second look: either
    /// this sees the controller recovering, or that sees the flag; both end `Deleting`.
    pub(crate) fn stop_recovery(&self) {
        self.no_recovery.store(true, Ordering::SeqCst);
        if self.state.load(Ordering::SeqCst) != State::Live as u8 {
            self.state.store(State::Deleting as u8, Ordering::SeqCst);
        }
        self.wake.complete_all();
    }

    /// Whether [`Health::stop_recovery`] was called.
    pub(crate) fn stopping(&self) -> bool {
        self.no_recovery.load(Ordering::SeqCst)
    }

    /// A queue failed: a live controller starts recovering (or, being deleted, fails its
    /// requests). Any context but hard interrupts.
    pub(crate) fn queue_failed(&self) {
        if self.stopping() {
            self.state.store(State::Deleting as u8, Ordering::SeqCst);
        } else if self.change(State::Live, State::Recovering) {
            // A deletion that started between the first look and the change found the
            // controller live and left its state alone: no one would recover it.
            if self.stopping() {
                self.state.store(State::Deleting as u8, Ordering::SeqCst);
            }
            self.wake.complete();
        }
    }

    /// An Asynchronous Event Request completed with `status` and `result`: kept for the
    /// supervisor, which it wakes. A CQ handler.
    pub(crate) fn event(&self, status: u16, result: u32) {
        let v = (1u64 << 63) | (u64::from(status) << 32) | u64::from(result);
        self.event.store(v, Ordering::Release);
        self.wake.complete();
    }

    /// The last Asynchronous Event Request's completion, status and result, once.
    pub(crate) fn take_event(&self) -> Option<(u16, u32)> {
        let v = self.event.swap(0, Ordering::AcqRel);
        (v >> 63 != 0).then_some(((v >> 32) as u16, v as u32))
    }

    /// Whether block requests in flight go back to the block layer to be sent again.
    pub(crate) fn requeues(&self) -> bool {
        matches!(self.state(), State::Live | State::Recovering)
    }

    /// Waits up to `ms` for a queue's failure or the controller's deletion (process
    /// context); `true` if woken.
    pub(crate) fn wait(&self, ms: u32) -> bool {
        let woken = self.wake.wait_timeout(ms).is_ok();
        // Whatever woke it is in the state, which the caller reads next; a deletion keeps the
        // signal up for every later wait (`stop_recovery` sets its flag first).
        self.wake.reinit();
        if self.stopping() {
            self.wake.complete_all();
        }
        woken
    }
}

impl Queue {
    /// Marks the queue dead (once) and ends its commands with `EIO`; in process context
    /// (`may_sleep`) also moves its QP to the error state, so that what is posted comes back
    /// flushed. Any context but hard interrupts.
    pub(crate) fn fail(&self, why: core::fmt::Arguments<'_>, may_sleep: bool) {
        if !self.dead.swap(true, Ordering::AcqRel) {
            if self.health.state() == State::Live {
                pr_err!("queue {}: {why}: the controller reconnects\n", self.qid);
            }
            self.health.queue_failed();
        }
        if may_sleep {
            let _ = self.qp.set_error();
        }
        for tag in 0..self.slots.len() {
            self.end_failed(tag);
        }
        self.sync_done.complete();
    }

    /// Gives `rq` back to the block layer: requeued while the controller may come back (its
    /// next connection sends it), failed with `EIO` otherwise. `Err` while another reference
    /// to it is held.
    fn release(&self, rq: ARef<Request<Blk>>) -> Result<(), ARef<Request<Blk>>> {
        if self.health.requeues() {
            Request::requeue(rq)
        } else {
            self.errors.fetch_add(1, Ordering::Relaxed);
            Request::end(rq, Err(EIO))
        }
    }

    /// [`Queue::release`], for a request nothing else holds (counted if it cannot be).
    pub(crate) fn give_back(&self, rq: ARef<Request<Blk>>) {
        if self.release(rq).is_err() {
            self.note_unended();
        }
    }

    /// Gives the block request of `tag` back ([`Queue::release`]), unless its pages are
    /// still lent to the device. Any context but hard interrupts.
    ///
    /// Pages lent to a SEND (in-capsule data) come back with the SEND's completion (flushed,
    /// on a failed QP), which calls this again. Pages registered for the target stay
    /// reachable until their MR is deregistered, which sleeps: once the tag's request is
    /// back, its MR goes here (or from a work item, after a CQ handler); blk-mq's timer then
    /// ends the block request ([`Queue::ending`]).
    pub(crate) fn end_failed(&self, tag: usize) {
        let Some(slot) = self.slots.get(tag) else {
            return;
        };
        let taken = {
            let mut s = slot.lock();
            s.answer = None;
            match s.user.take() {
                Some(User::Sync) => {
                    s.sync_result = Some(Err(ECONNRESET));
                    None
                }
                // The next connection sends another.
                Some(User::Event) => None,
                other => other,
            }
        };
        let Some(User::Block(mut rq)) = taken else {
            return;
        };
        for _ in 0..2 {
            match self.release(rq) {
                Ok(()) => {
                    slot.lock().owed = false;
                    return;
                }
                Err(back) => rq = back,
            }
            let mut s = slot.lock();
            if s.closed {
                continue;
            }
            let Some(wr) = s.io.as_mut() else {
                s.user = Some(User::Block(rq));
                return;
            };
            let Some(mr) = wr.data_mut().pages.take() else {
                s.user = Some(User::Block(rq));
                return;
            };
            drop(s);
            drop(mr);
        }
        let mut s = slot.lock();
        if s.closed {
            drop(s);
            self.note_unended();
        } else {
            s.user = Some(User::Block(rq));
        }
    }

    /// Whether the block request of `tag` is still to be given back on a failed queue.
    pub(crate) fn ending(&self, tag: usize) -> bool {
        self.is_dead() && self.slots.get(tag).is_some_and(|s| s.lock().owed)
    }

    /// Disconnects, drains and frees the queue's requests; once. Process context.
    pub(crate) fn close(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        self.dead.store(true, Ordering::Release);
        if let Some(id) = self.id.lock().as_ref() {
            let _ = id.disconnect();
        }
        let _ = self.qp.set_error();
        let _ = self.qp.drain();
        for slot in self.slots.iter() {
            let (io, user) = {
                let mut s = slot.lock();
                s.closed = true;
                s.owed = false;
                s.answer = None;
                (s.io.take(), s.user.take())
            };
            drop(io);
            if let Some(User::Block(rq)) = user {
                self.give_back(rq);
            }
        }
        self.sync_done.complete();
        // The id's handler holds the queue (to fail it): that link goes first, then the id.
        let id = self.id.lock().take();
        if let Some(id) = &id {
            id.handler().forget_queue();
        }
        drop(id);
    }
}
