// SPDX-License-Identifier: GPL-2.0

//! Asynchronous events: the Asynchronous Event Requests a controller holds, and the
//! Namespace Attribute Changed notices they carry.
//!
//! A namespace enabled, disabled or removed in configfs ([`Target::ns_changed`]) goes into
//! the Changed Namespace List of every controller of its subsystem (at most
//! [`MAX_CHANGED`] NSIDs, past that the list says "more than that"). A controller whose host
//! asked for namespace notices (Set Features Asynchronous Event Configuration) then gets one
//! notice: a held request completes with it, or the next request to come does. Further
//! notices are masked until the host reads the list (Get Log Page 4 without Retain
//! Asynchronous Event), which empties it, as the specification has it and nvmet does.
//!
//! A held request is answered on the admin queue's connection ([`QueueLink::answer_held`]);
//! when that queue has no idle answer at the moment, the notice waits for the next
//! [`Target::tick`].

use super::{Ctrl, Reply, Target};
use crate::config::Subsys;
use crate::ident::AER_MAX;
use crate::proto::{put32, Sqe, Status, AEN_NS_ATTR};
use kernel::prelude::*;
use kernel::sync::Arc;

/// NSIDs a Changed Namespace List holds; past that it holds 0xffffffff alone.
const MAX_CHANGED: usize = 1024;
/// A Namespace Attribute Changed notice, as an AER's completion: event type Notice (2),
/// information 0, log page 4 (Changed Namespace List).
const NS_CHANGED_NOTICE: Reply = Reply {
    status: Status::SUCCESS,
    result: 2 | (0x04 << 16),
};
/// Bytes of the Changed Namespace List log page.
pub(crate) const CHANGED_NS_LOG_LEN: usize = 4 * MAX_CHANGED;

/// A controller's event state.
#[derive(Default)]
pub(super) struct Events {
    /// The held Asynchronous Event Requests, oldest first.
    aers: KVec<Sqe>,
    /// NSIDs changed since the host last read the list, in increasing order.
    changed: KVec<u32>,
    /// More than [`MAX_CHANGED`] changed.
    overflow: bool,
    /// A notice waits for a request to carry it.
    pending: bool,
    /// A notice went (or waits): no other until the host reads the list.
    masked: bool,
}

impl Ctrl {
    /// An Asynchronous Event Request: held (`None`), or completed at once with the notice
    /// that waits for one, or refused past the limit Identify gave (AERL).
    pub(super) fn hold_aer(&self, sqe: &Sqe) -> Option<Reply> {
        let mut ev = self.events.lock();
        if ev.pending {
            ev.pending = false;
            return Some(NS_CHANGED_NOTICE);
        }
        if ev.aers.len() >= AER_MAX {
            return Some(Status::ASYNC_LIMIT.into());
        }
        match ev.aers.push(*sqe, GFP_ATOMIC) {
            Ok(()) => None,
            Err(_) => Some(Status::INTERNAL.into()),
        }
    }

    /// Namespace `nsid` of the controller's subsystem changed: it joins the Changed
    /// Namespace List, and a notice goes if the host asked for them and none is unread.
    fn ns_changed(&self, nsid: u32) {
        let wanted = self.async_cfg.load(core::sync::atomic::Ordering::Relaxed) & AEN_NS_ATTR != 0;
        {
            let mut ev = self.events.lock();
            if !ev.overflow {
                if let Err(at) = ev.changed.binary_search(&nsid) {
                    if ev.changed.len() >= MAX_CHANGED || ev.changed.push(nsid, GFP_ATOMIC).is_err()
                    {
                        // The host is told to rescan them all.
                        ev.overflow = true;
                        ev.changed.truncate(0);
                    } else {
                        ev.changed[at..].rotate_right(1);
                    }
                }
            }
            if !wanted || ev.masked {
                return;
            }
            ev.masked = true;
            ev.pending = true;
        }
        self.deliver_events();
    }

    /// Whether a notice and a held request wait for each other (no idle answer was there).
    pub(super) fn notice_waits(&self) -> bool {
        let ev = self.events.lock();
        ev.pending && !ev.aers.is_empty()
    }

    /// Sends the notice that waits, if a request is held to carry it. Process context.
    pub(super) fn deliver_events(&self) {
        let sqe = {
            let mut ev = self.events.lock();
            if !ev.pending || ev.aers.is_empty() {
                return;
            }
            let Some(sqe) = ev.aers.remove(0) else {
                return;
            };
            ev.pending = false;
            sqe
        };
        let admin = self
            .queues
            .lock()
            .iter()
            .find(|(qid, _)| *qid == 0)
            .map(|(_, q)| q.clone());
        // No admin queue: the controller is ending, and its requests with it.
        let Some(admin) = admin else {
            return;
        };
        if !admin.answer_held(sqe, NS_CHANGED_NOTICE) {
            // No idle answer now: the request and its notice wait for the next tick.
            // Its slot is still there: the push does not allocate.
            let mut ev = self.events.lock();
            ev.pending = true;
            if ev.aers.push(sqe, GFP_ATOMIC).is_ok() {
                ev.aers.rotate_right(1);
            }
        }
    }

    /// The Changed Namespace List log page into `page` ([`CHANGED_NS_LOG_LEN`] bytes,
    /// zeroed). Reading it without `retain` empties it and unmasks the notices.
    pub(super) fn changed_ns_log(&self, page: &mut [u8], retain: bool) {
        let mut ev = self.events.lock();
        if ev.overflow {
            put32(page, 0, u32::MAX);
        } else {
            for (i, &nsid) in ev.changed.iter().enumerate() {
                put32(page, 4 * i, nsid);
            }
        }
        if !retain {
            ev.changed.truncate(0);
            ev.overflow = false;
            ev.masked = false;
        }
    }
}

impl Target {
    /// Namespace `nsid` of the subsystems `which` picks was enabled, disabled or removed: its
    /// controllers hear of it. Process context.
    pub(crate) fn ns_changed(&self, nsid: u32, which: impl Fn(&Subsys) -> bool) {
        for c in self.pick(|c| c.subsys.as_deref().is_some_and(&which)) {
            c.ns_changed(nsid);
        }
    }

    /// Controllers `which` picks, held.
    pub(super) fn pick(&self, which: impl Fn(&Ctrl) -> bool) -> KVec<Arc<Ctrl>> {
        let ctrls = self.ctrls.lock();
        let mut v = KVec::new();
        for c in ctrls.iter().filter(|c| which(c)) {
            if v.push(c.clone(), GFP_KERNEL).is_err() {
                break;
            }
        }
        v
    }
}
