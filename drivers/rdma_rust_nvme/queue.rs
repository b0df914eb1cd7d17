// SPDX-License-Identifier: GPL-2.0

//! One queue of a controller: an RC connection to the target, its tags and the commands on
//! them.
//!
//! Each tag has a request of its own ([`Io`]), posted again for every command it carries: the
//! capsule's buffer (the command, then in-capsule data), an MR for a block request's own
//! pages ([`LentMr`]) and an MR over a page of the queue's own (the bounce page), which the
//! admin commands' data uses (Connect's, Identify's).
//!
//! A command that names data (a keyed SGL) registers it in the same post as its SEND (REG_MR,
//! then SEND): the target RDMA READs a write's data and RDMA WRITEs a read's, then answers
//! with a completion that invalidates the rkey (SEND with invalidate). The rkey must be the
//! one the command named; a target that invalidates another is a protocol error, which fails
//! the queue. A completion that invalidates nothing leaves the region registered: the host
//! invalidates it itself (LOCAL_INV, posted with the tag's request once it is back) before the
//! command ends. Either way the block request's pages are the block layer's again only once
//! no rkey reaches them.
//!
//! A write that fits the target's in-capsule size goes in the capsule, after the command:
//! the block request's pages lent to the SEND ([`DmaLent`]), or copied behind the command.
//!
//! A tag's command ends when both its completion has arrived and its request has come back
//! (the SEND's completion, and a local invalidation's if one was needed): whichever comes
//! last ends it ([`Slot::settle`]). Command ids carry a use counter beside the tag
//! ([`proto::cid`]): a completion whose id is not the tag's command in flight fails the queue
//! and ends nothing.
//!
//! This file has the queue, its tags and what submits block requests; `own.rs` the host's
//! own commands (one synchronous command at a time, the Asynchronous Event Request),
//! `complete.rs` the completion handlers, `fail.rs` failing and closing the queue.
//!
//! [`proto::cid`]: crate::proto::cid

use crate::proto::{self, io, Command, Cqe, Dptr, CQE_LEN, SQE_LEN};
use core::pin::Pin;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use kernel::block::mq::{Op, Request};
use kernel::new_mutex;
use kernel::new_spinlock_bh;
use kernel::page::PAGE_SIZE;
use kernel::prelude::*;
use kernel::rdma::{
    cm::CmId,
    cq::Invalidation,
    device::{Name, NAME_MAX},
    dma::{DmaBuf, DmaLent, FromDevice, ToDevice},
    mr::{Access, LentMr, Mr, Region},
    pd::Pd,
    qp::{Qp, Rts},
    sync::{Completion as Signal, SpinLockBh},
    wr::Wr,
};
use kernel::sync::{Arc, Mutex};
use kernel::types::ARef;

mod cm;
mod complete;
mod fail;
mod own;

pub(crate) use fail::{Health, State};

pub(crate) use cm::{Ev, Step, Waiter};

/// The blk-mq operations of every rnvme disk (`disk.rs` implements them).
pub(crate) struct Blk;

/// Largest transfer of one command: the block layer splits larger I/O.
pub(crate) const MAX_IO: u32 = 128 * 1024;
/// Most in-capsule data a write carries, whatever the target offers.
pub(crate) const IN_CAPSULE_MAX: u32 = 4096;
/// Bytes of a tag's bounce page: the admin commands' data.
pub(crate) const BOUNCE: usize = 4096;
/// The admin queue's tag for the Asynchronous Event Request ([`Queue::command`] uses 0).
const EVENT_TAG: usize = 1;

/// One queue: an RC connection to the target.
#[pin_data]
pub(crate) struct Queue {
    qid: u16,
    qp: Arc<Qp<Rts>>,
    /// The tags' states, each under its own lock.
    slots: KVec<Pin<KBox<SpinLockBh<Slot>>>>,
    /// Set once the connection failed: every command fails from then on.
    dead: AtomicBool,
    /// Set by the first `close`.
    closed: AtomicBool,
    /// The controller's state: a failure starts its recovery, and says whether block
    /// requests in flight are sent again (requeued) or fail.
    health: Arc<Health>,
    /// Largest write sent in the capsule (0: none).
    in_capsule: u32,
    /// Most segments of a write's pages that its SEND gathers after the command (a write
    /// with more is copied behind the command).
    lend_max: usize,
    #[pin]
    id: Mutex<Option<CmId<Ev>>>,
    /// Commands failed before they reached a tag, or on a failed queue.
    errors: AtomicU64,
    /// Block requests that could not be ended (see [`Queue::end`]).
    unended: AtomicU64,
    /// One admin command at a time ([`Queue::command`]), on tag 0.
    #[pin]
    sync: Mutex<()>,
    #[pin]
    sync_done: Signal,
}

/// What a queue counts, for the status file.
#[derive(Default, Clone, Copy)]
pub(crate) struct Counts {
    pub(crate) completed: u64,
    pub(crate) errors: u64,
    /// Writes sent in the capsule.
    pub(crate) in_capsule: u64,
    /// Commands whose data the target moved by RDMA (keyed SGL).
    pub(crate) keyed: u64,
    /// Of those, the completions that did not invalidate the rkey (invalidated locally).
    pub(crate) local_inv: u64,
    /// Flush commands sent.
    pub(crate) flushes: u64,
    /// Writes sent with Force Unit Access.
    pub(crate) fua: u64,
}

impl Counts {
    pub(crate) fn add(&mut self, o: &Self) {
        self.completed += o.completed;
        self.errors += o.errors;
        self.in_capsule += o.in_capsule;
        self.keyed += o.keyed;
        self.local_inv += o.local_inv;
        self.flushes += o.flushes;
        self.fua += o.fua;
    }
}

/// Who waits for a tag's command.
enum User {
    /// A block request, ended with the command.
    Block(ARef<Request<Blk>>),
    /// [`Queue::command`]'s caller.
    Sync,
    /// An Asynchronous Event Request ([`Queue::post_event`]): its completion goes to the
    /// controller's supervisor ([`Health::event`]).
    Event,
}

/// A tag's state.
#[derive(Default)]
struct Slot {
    /// The tag's request, when it is not posted.
    io: Option<Wr<Io>>,
    /// Who the command in flight is for.
    user: Option<User>,
    /// The block request in `user` has not been ended yet.
    owed: bool,
    /// The command id in flight, and the tag's use count.
    cid: u16,
    gen: u16,
    /// The completion, once it arrived, with the invalidation it reported.
    answer: Option<(Cqe, Option<Invalidation>)>,
    /// A synchronous command's result, for its caller.
    sync_result: Option<Result<Cqe>>,
    /// `close` freed the tag's request.
    closed: bool,
    counts: Counts,
}

/// What is left to do, outside a tag's lock, after [`Slot::settle`].
enum Settled {
    Waiting,
    /// The block request ends with this result.
    End(ARef<Request<Blk>>, Result),
    /// The synchronous command's caller may go on.
    SyncDone,
    /// An Asynchronous Event Request completed with this status and result.
    Event(u16, u32),
    /// The completion did not invalidate the region: invalidate it locally with this request.
    Invalidate(Wr<Io>),
    /// The completion invalidated another rkey than the command's: the queue fails.
    Bogus,
}

impl Slot {
    /// Puts the tag's request back; on a slot that `close` freed, hands it back to be dropped
    /// once the lock is.
    #[must_use]
    fn put_back(&mut self, wr: Wr<Io>) -> Option<Wr<Io>> {
        if self.closed {
            return Some(wr);
        }
        self.io = Some(wr);
        None
    }

    /// Ends the tag's command if both its request and its completion are back and nothing
    /// reaches its data any more. Under the tag's lock, in a CQ handler.
    fn settle(&mut self) -> Settled {
        if self.io.is_none() || self.user.is_none() || self.answer.is_none() {
            return Settled::Waiting;
        }
        // Nothing may reach the command's data any more: the target invalidated the rkey it
        // was given, or the host does now.
        let named = |s: &Self| {
            s.io.as_ref()
                .and_then(|w| w.data().named().map(|r| r.is_registered()))
        };
        if named(self) == Some(true) {
            match self.answer.as_mut().and_then(|a| a.1.take()) {
                Some(inv) => {
                    let revoked = self
                        .io
                        .as_ref()
                        .and_then(|w| w.data().named())
                        .is_some_and(|r| r.apply_invalidation(inv));
                    if !revoked {
                        return Settled::Bogus;
                    }
                }
                None => {
                    self.counts.local_inv += 1;
                    return match self.io.take() {
                        Some(wr) => Settled::Invalidate(wr),
                        None => Settled::Waiting,
                    };
                }
            }
        }
        let Some(wr) = self.io.as_mut() else {
            return Settled::Waiting;
        };
        let io = wr.data_mut();
        let Some((cqe, _)) = self.answer.take() else {
            return Settled::Waiting;
        };
        let mut result = if cqe.is_ok() { Ok(()) } else { Err(EIO) };
        if io.direct {
            io.unlend();
        } else if result.is_ok() && io.read_len > 0 {
            if let Some(User::Block(rq)) = self.user.as_mut() {
                let len = io.read_len;
                result = match io.bounce.with_buf(|b| match b.get(..len) {
                    Some(b) => Request::copy_from_slice(rq, b),
                    None => Err(EINVAL),
                }) {
                    Ok(r) => r,
                    Err(e) => Err(e),
                };
            }
        }
        self.counts.completed += 1;
        if result.is_err() {
            self.counts.errors += 1;
        }
        match self.user.take() {
            Some(User::Block(rq)) => {
                self.owed = false;
                Settled::End(rq, result)
            }
            Some(User::Sync) => {
                self.sync_result = Some(Ok(cqe));
                Settled::SyncDone
            }
            Some(User::Event) => Settled::Event(cqe.status, cqe.result as u32),
            None => Settled::Waiting,
        }
    }
}

/// A tag's request.
struct Io {
    q: Arc<Queue>,
    tag: u16,
    /// The command, then in-capsule data copied behind it.
    cmd: DmaBuf<ToDevice>,
    /// The MR for a block request's pages; `None` once a failed queue dropped it to end the
    /// block request it held.
    pages: Option<LentMr<ARef<Request<Blk>>>>,
    /// The MR over the tag's bounce page.
    bounce: Mr,
    /// A write's pages, lent to the device while its SEND is posted (in-capsule data).
    lent: DmaLent<ARef<Request<Blk>>>,
    /// The command in flight names data: the block request's pages (`direct`) or the bounce
    /// page.
    keyed: bool,
    direct: bool,
    /// Bytes of a read through the bounce page, copied out when it ends.
    read_len: usize,
}

impl Io {
    /// Gives back a block request's pages, lent to a command that was not posted or whose
    /// rkey is revoked.
    fn unlend(&mut self) {
        drop(self.lent.take_back());
        if let Some(p) = self.pages.as_mut() {
            drop(p.take_back());
        }
    }

    /// The region the command in flight names, if any.
    fn named(&self) -> Option<&dyn Region> {
        if !self.keyed {
            return None;
        }
        match &self.pages {
            Some(p) if self.direct => Some(p),
            _ if self.direct => None,
            _ => Some(&self.bounce),
        }
    }

    fn named_mut(&mut self) -> Option<&mut dyn Region> {
        if !self.keyed {
            return None;
        }
        match &mut self.pages {
            Some(p) if self.direct => Some(p),
            _ if self.direct => None,
            _ => Some(&mut self.bounce),
        }
    }
}

/// A posted receive for one completion.
struct Answer {
    q: Arc<Queue>,
    buf: DmaBuf<FromDevice>,
}

/// The data of a synchronous command.
pub(crate) enum Data<'a> {
    None,
    /// Bytes the target reads (at most [`BOUNCE`]).
    ToTarget(&'a [u8]),
    /// Bytes the target writes (at most [`BOUNCE`]).
    FromTarget(&'a mut [u8]),
}

impl Queue {
    /// A queue `qid` of `depth` tags on `qp`, an established connection; [`Queue::fill`]
    /// gives it its requests.
    pub(crate) fn new(
        qid: u16,
        qp: Arc<Qp<Rts>>,
        depth: u16,
        in_capsule: u32,
        lend_max: usize,
        health: Arc<Health>,
    ) -> impl PinInit<Self, Error> {
        try_pin_init!(Queue {
            qid,
            qp,
            slots: Self::new_slots(depth)?,
            dead: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            health,
            in_capsule: in_capsule.min(IN_CAPSULE_MAX),
            lend_max,
            id <- new_mutex!(None, "rdma_rust_nvme_queue_id"),
            errors: AtomicU64::new(0),
            unended: AtomicU64::new(0),
            sync <- new_mutex!((), "rdma_rust_nvme_sync"),
            sync_done <- Signal::new(),
        }? Error)
    }

    fn new_slots(depth: u16) -> Result<KVec<Pin<KBox<SpinLockBh<Slot>>>>> {
        let mut slots = KVec::with_capacity(depth as usize, GFP_KERNEL)?;
        for _ in 0..depth {
            let slot = new_spinlock_bh!(Slot::default(), "rdma_rust_nvme_slot");
            slots.push(KBox::pin_init(slot, GFP_KERNEL)?, GFP_KERNEL)?;
        }
        Ok(slots)
    }

    pub(crate) fn qid(&self) -> u16 {
        self.qid
    }

    /// The name of the RDMA device the queue is on.
    pub(crate) fn device_name(&self) -> Name<NAME_MAX> {
        self.qp.pd().device().name()
    }

    pub(crate) fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// What the queue counted.
    pub(crate) fn counts(&self) -> Counts {
        let mut sum = Counts {
            errors: self.errors.load(Ordering::Relaxed),
            ..Counts::default()
        };
        for s in self.slots.iter() {
            sum.add(&s.lock().counts);
        }
        sum
    }

    /// Block requests that could not be ended.
    pub(crate) fn unended(&self) -> u64 {
        self.unended.load(Ordering::Relaxed)
    }

    /// Ends `rq` with `result`; a request that cannot be ended (a reference to it is still
    /// held, which the tags' bookkeeping never allows) is counted and logged once.
    pub(crate) fn end(&self, rq: ARef<Request<Blk>>, result: Result) {
        if Request::end(rq, result).is_err() {
            self.note_unended();
        }
    }

    fn note_unended(&self) {
        if self.unended.fetch_add(1, Ordering::Relaxed) == 0 {
            pr_err!(
                "queue {}: a block request cannot be ended: a reference to it is still held (logged once)\n",
                self.qid
            );
        }
    }

    /// Takes the queue's id, then makes the tags' requests and posts a receive per tag. After
    /// a failure `close` frees what was made.
    pub(crate) fn fill(self: &Arc<Self>, id: CmId<Ev>, pd: &Arc<Pd>) -> Result {
        let q = self;
        *q.id.lock() = Some(id);
        let max_pages = (MAX_IO as usize / PAGE_SIZE + 1) as u32;
        let data = q.qid != 0;
        for (tag, slot) in (0u16..).zip(q.slots.iter()) {
            let mut bounce = Mr::new(pd, 1)?;
            bounce
                .map(DmaBuf::new(pd, BOUNCE, GFP_KERNEL)?)
                .map_err(|(e, _)| e)?;
            let io = Io {
                q: q.clone(),
                tag,
                cmd: DmaBuf::<ToDevice>::alloc(pd, SQE_LEN + q.in_capsule as usize, GFP_KERNEL)?,
                pages: if data {
                    Some(LentMr::new(pd, max_pages)?)
                } else {
                    None
                },
                bounce,
                lent: DmaLent::new(pd),
                keyed: false,
                direct: false,
                read_len: 0,
            };
            slot.lock().io = Some(Wr::new(io, GFP_KERNEL)?);
        }
        for _ in q.slots.iter() {
            let a = Answer {
                q: q.clone(),
                buf: DmaBuf::<FromDevice>::alloc(pd, CQE_LEN, GFP_KERNEL)?,
            };
            let wr = Wr::new(a, GFP_KERNEL)?;
            q.qp.post_recv(wr, |a, ops| {
                ops.buf(&mut a.buf, 0..CQE_LEN)?;
                Ok(())
            })?;
        }
        Ok(())
    }

    /// Takes `tag`'s request for a new command, with its next command id. `None` while it is
    /// out (a timed-out command's) or the queue is closing.
    fn take_io(&self, slot: &SpinLockBh<Slot>) -> Option<(Wr<Io>, u16)> {
        let mut s = slot.lock();
        let wr = s.io.take()?;
        s.gen = s.gen.wrapping_add(1);
        Some((wr, s.gen))
    }

    /// Sends block request `rq` of namespace `nsid` (blocks of `1 << lba_shift` bytes) on its
    /// tag. Any context (`queue_rq`).
    pub(crate) fn submit(&self, rq: ARef<Request<Blk>>, nsid: u32, lba_shift: u32) -> Result {
        let len = rq.bytes();
        let opcode = match rq.op() {
            Op::Read => io::READ,
            Op::Write => io::WRITE,
            Op::Flush => io::FLUSH,
            _ => {
                self.end(rq, Err(EOPNOTSUPP));
                return Ok(());
            }
        };
        let tag = rq.tag() as usize;
        let slot = match self.slots.get(tag) {
            Some(slot) if !self.is_dead() && len <= MAX_IO => slot,
            Some(_) if self.is_dead() => {
                self.give_back(rq);
                return Ok(());
            }
            _ => {
                self.errors.fetch_add(1, Ordering::Relaxed);
                self.end(rq, Err(EIO));
                return Ok(());
            }
        };
        let Some((mut wr, gen)) = self.take_io(slot) else {
            self.give_back(rq);
            return Ok(());
        };
        let cid = proto::cid(tag as u16, gen);
        let fua = opcode == io::WRITE && rq.is_fua();
        let mut cmd = if opcode == io::FLUSH {
            Command::new(opcode, nsid)
        } else {
            let blocks = len >> lba_shift;
            Command::rw(opcode, nsid, rq.sector() >> (lba_shift - 9), blocks, fua)
        };
        cmd.set_cid(cid);
        let io = wr.data_mut();
        io.read_len = 0;
        let in_capsule = opcode == io::WRITE && len <= self.in_capsule;
        io.keyed = len > 0 && !in_capsule;
        let access = if opcode == io::READ {
            Access::REMOTE_WRITE
        } else {
            Access::REMOTE_READ
        };
        let mut failed = None;
        // The block request's own pages (the disk's virtual boundary makes them one region);
        // the bounce page for one that does not map and fits.
        io.direct = io.keyed
            && match io.pages.as_mut().map(|p| p.lend(rq.clone(), access)) {
                Some(Ok(())) => true,
                Some(Err((_, owner))) => {
                    drop(owner);
                    false
                }
                None => false,
            };
        if io.keyed && !io.direct {
            if len as usize > BOUNCE {
                failed = Some(EIO);
            } else if opcode == io::WRITE {
                match io.bounce.with_buf(|b| match b.get_mut(..len as usize) {
                    Some(b) => rq.copy_to_slice(b),
                    None => Err(EINVAL),
                }) {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) | Err(e) => failed = Some(e),
                }
            } else {
                io.read_len = len as usize;
            }
        }
        // In-capsule data: the request's pages lent to the SEND, or copied behind the
        // command.
        let mut sent = SQE_LEN;
        if in_capsule && failed.is_none() {
            if self.lend_max > 0 {
                if let Err((_, owner)) = io.lent.lend(rq.clone(), self.lend_max) {
                    drop(owner);
                }
            }
            if !io.lent.is_lent() {
                match io
                    .cmd
                    .as_mut_slice()
                    .get_mut(SQE_LEN..SQE_LEN + len as usize)
                {
                    Some(b) => failed = rq.copy_to_slice(b).err(),
                    None => failed = Some(EINVAL),
                }
                sent += len as usize;
            }
            cmd.set_dptr(Dptr::InCapsule { len });
        } else {
            let dptr = match io.named_mut() {
                None => Ok(Dptr::None),
                Some(r) => r.bump_key().map(|()| Dptr::Keyed {
                    addr: r.iova(),
                    len,
                    key: r.rkey(),
                }),
            };
            match dptr {
                Ok(d) => cmd.set_dptr(d),
                Err(e) => failed = failed.or(Some(e)),
            }
        }
        if let Some(b) = io.cmd.as_mut_slice().get_mut(..SQE_LEN) {
            b.copy_from_slice(&cmd.0);
        }
        if let Some(e) = failed {
            io.unlend();
            drop(slot.lock().put_back(wr));
            self.end(rq, Err(e));
            return Ok(());
        }
        let keyed = io.keyed;
        {
            let mut guard = slot.lock();
            // Checked again under the lock: `fail` marks the queue dead before it sweeps the
            // slots, so a request stored here is either swept or sees the mark.
            if self.is_dead() {
                wr.data_mut().unlend();
                let late = guard.put_back(wr);
                drop(guard);
                drop(late);
                self.give_back(rq);
                return Ok(());
            }
            let s = &mut *guard;
            s.user = Some(User::Block(rq));
            s.owed = true;
            s.cid = cid;
            s.answer = None;
            if in_capsule {
                s.counts.in_capsule += 1;
            }
            if keyed {
                s.counts.keyed += 1;
            }
            s.counts.flushes += u64::from(opcode == io::FLUSH);
            s.counts.fua += u64::from(fua);
        }
        let posted = self.qp.post_send(wr, |io, ops| {
            if let Some(r) = io.named() {
                ops.reg_mr(r, access)?;
            }
            ops.send(&io.cmd, 0..sent)?;
            if io.lent.is_lent() {
                ops.gather(&io.lent, 0..io.lent.len())?;
            }
            Ok(())
        });
        if let Err(mut e) = posted {
            // Not posted: nothing registered, the pages come back.
            e.wr.data_mut().unlend();
            let (late, user) = {
                let mut s = slot.lock();
                s.owed = false;
                (s.put_back(e.wr), s.user.take())
            };
            drop(late);
            if let Some(User::Block(rq)) = user {
                self.give_back(rq);
            }
        }
        Ok(())
    }
}
