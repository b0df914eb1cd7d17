// SPDX-License-Identifier: GPL-2.0

//! One hardware queue of a disk: an RC connection to the target, its requests and their
//! completions.
//!
//! Each hardware queue of the disk is one RC connection ([`IoQueue`]). Each tag of a queue has
//! an [`Io`] request of its own, posted again for every block request it carries: a command
//! buffer, an MR for the block request's own pages ([`LentMr`]) and an MR that maps a bounce
//! buffer of [`MAX_IO`] bytes.
//!
//! The pages of a block request larger than the inline size are registered for the target
//! (REG_MR, chained with the command's SEND): for its RDMA WRITE of a read's data, or its RDMA
//! READ of a write's. The MR holds a reference to the block request from then on, and gives it
//! back only once the target's answer revoked the rkey (SEND with invalidate): the request
//! cannot end before (ending needs the only reference). If the answer never comes (the
//! connection failed), the request ends only after the MR is gone (`ib_dereg_mr`): see
//! [`IoQueue::end_failed`].
//!
//! Pages the MR cannot map as one region (gaps between them, or more pages than it maps) go
//! through the bounce buffer instead: a write's data is copied into it before the MR is
//! registered, and a read's data is copied out only after the target's answer revoked the
//! rkey; from then on no peer can reach the buffer, which [`Mr::with_buf`] checks.
//!
//! An I/O of at most the target's inline size names no buffer and registers nothing. A write's
//! data goes in the command's SEND without a copy: the block request's pages are lent to the
//! device ([`DmaLent`], which holds a reference to the request) and gathered after the
//! command, and the request cannot end before the SEND has come back and unmapped them (ending
//! needs the only reference). So a queue that fails ends such a request when its SEND comes
//! back flushed, not at once ([`IoQueue::end_failed`]). A write of one block leaves the command
//! out: its SEND carries the data alone, the tag and block index in its immediate data (a
//! block write, see `proto.rs`). A read's data comes after its answer
//! and is copied into the block request's pages when the answer lands, before its receive
//! buffer is posted again.
//!
//! A block request ends when both its answer has arrived and its command's SEND has come back
//! (with the MR): whichever completes second ends it, in the CQ's handler (a work item of the
//! core's high-priority completion workqueue; see `connect_queue` for why). The answer
//! can come first, so the invalidation it reports is kept ([`Invalidation`]) until the MR is
//! back.
//!
//! Each tag's state ([`Slot`]) has a lock of its own, in an allocation of its own: a tag's
//! submission and its two completions meet there, and nothing else does (blk-mq gives a tag to
//! one block request at a time). The CPU that submits and the one whose CQ handler completes touch
//! only the tags they work on, and each completion does its part of ending the request within
//! one critical section ([`Slot::settle`]). The counts of the status file are the slots' too,
//! summed when it is read ([`IoQueue::stats`]).
//!
//! This file has the queue, its tags and the submission; `complete.rs` the completion
//! handlers, `fail.rs` failing and closing the queue, `keepalive.rs` what asks the target
//! whether it lives (keep-alives, and the tests' probes).

use super::{Blk, IniEv};
use crate::proto::{Command, Opcode, CMD_LEN, INLINE_MAX, MAX_DISCARD, MAX_IO, RESP_LEN};
use core::pin::Pin;
use core::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use kernel::block::mq::{Op, Request};
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
use kernel::{new_mutex, new_spinlock_bh};

mod complete;
mod fail;
mod keepalive;

/// How long a block request may wait for its answer before it fails (and its queue with it).
pub(crate) const IO_TIMEOUT_MS: u32 = 15_000;
/// How long a block request waits before its queue asks the target whether it lives (a
/// keep-alive), and again at each multiple until [`IO_TIMEOUT_MS`]. RC has no keep-alive of its
/// own: once the target has acknowledged a command, a target that dies before it answers is
/// silent, and only a request of ours can find out (it fails after the QP's retries, 3.8 s).
pub(super) const KEEPALIVE_MS: u32 = 3_000;
/// How long a keep-alive may stay out before its queue fails (see [`IoQueue::tick`]).
const KEEPALIVE_UNANSWERED_MS: u32 = 2 * KEEPALIVE_MS;

/// One hardware queue: an RC connection to the target.
#[pin_data]
pub(crate) struct IoQueue {
    index: u16,
    qp: Arc<Qp<Rts>>,
    /// The tags' states, each under its own lock.
    slots: KVec<Pin<KBox<SpinLockBh<Slot>>>>,
    /// Set once the connection failed: every request fails from then on.
    dead: AtomicBool,
    /// Largest I/O sent with its data inline (the target's offer, within [`INLINE_MAX`]).
    inline_max: u32,
    /// The volume's block size: a write of one block goes as a block write.
    block: u32,
    /// Most segments of an inline write's pages that its SEND gathers after the command (a
    /// write with more is copied into the command's buffer).
    lend_max: usize,
    #[pin]
    id: Mutex<Option<CmId<IniEv>>>,
    /// Block requests failed before they reached a tag, or on a failed queue (the tags count
    /// those that ended on an answer).
    errors: AtomicU64,
    /// Block requests that could not be ended (see [`IoQueue::end`]).
    unended: AtomicU64,
    /// A probe's answer ([`PROBE_IDLE`], [`PROBE_WAITING`] or its status), and its signal,
    /// which a failure of the queue gives too (see `hostile.rs`).
    probe: AtomicI64,
    #[pin]
    probe_done: Signal,
    /// The keep-alive request, when it is not posted.
    #[pin]
    keepalive: SpinLockBh<Option<Wr<KeepAlive>>>,
    /// When the keep-alive out was posted (ms of `ktime_get`; 0: none is out).
    keepalive_sent: AtomicI64,
}

/// What a queue counts, for the status file: a tag's counts, or their sum.
#[derive(Default, Clone, Copy)]
pub(crate) struct QueueStats {
    /// Block requests ended (an answer came back).
    pub(crate) completed: u64,
    /// Block requests failed.
    pub(crate) errors: u64,
    /// Inline writes sent from the block request's pages, and copied (too many segments).
    pub(crate) writes_lent: u64,
    pub(crate) writes_copied: u64,
    /// Of those, writes sent as block writes (the data alone, the command in the immediate).
    pub(crate) block_writes: u64,
    /// I/Os above the inline size whose pages were registered for the target, and copied
    /// through the bounce buffer (pages the MR cannot map).
    pub(crate) registered: u64,
    pub(crate) bounced: u64,
    /// Block requests that could not be ended ([`IoQueue::end`]).
    pub(crate) unended: u64,
}

impl QueueStats {
    /// Adds `other`'s counts to these.
    pub(crate) fn add(&mut self, other: &Self) {
        self.completed += other.completed;
        self.errors += other.errors;
        self.writes_lent += other.writes_lent;
        self.writes_copied += other.writes_copied;
        self.block_writes += other.block_writes;
        self.registered += other.registered;
        self.bounced += other.bounced;
        self.unended += other.unended;
    }
}

/// No probe was sent on the queue.
const PROBE_IDLE: i64 = i64::MIN;
/// A probe was sent and has no answer yet.
const PROBE_WAITING: i64 = i64::MIN + 1;

/// A tag's state.
#[derive(Default)]
struct Slot {
    /// The tag's request, when it is not posted.
    io: Option<Wr<Io>>,
    /// The block request in flight on the tag.
    rq: Option<ARef<Request<Blk>>>,
    /// The block request stored in `rq` has not been ended yet (it may be out of the slot a
    /// moment, with whoever is trying to end it).
    owed: bool,
    /// The answer, once it arrived: its status, and the invalidation it reported.
    answer: Option<(i32, Option<Invalidation>)>,
    /// Bytes an inline read's answer brings (0: none).
    inline_read: usize,
    /// Times the block request's timer ran out (every [`KEEPALIVE_MS`]).
    ticks: u32,
    /// `close` has freed the tag's request: nothing of the tag is posted or lent any more.
    closed: bool,
    /// What the tag's submissions and answers counted.
    counts: QueueStats,
}

/// What is left to do, outside a tag's lock, after [`Slot::settle`].
enum Settled {
    /// The tag's request or its answer is still out.
    Waiting,
    /// The block request ends, with this result; the tag is free again.
    End(ARef<Request<Blk>>, Result),
    /// The answer did not revoke the rkey of the buffer the command named: the queue fails.
    Unrevoked,
}

impl Slot {
    /// Puts the tag's request back; on a slot that `close` freed, hands it back instead, to be
    /// dropped once the lock is (it holds the queue: kept here, it would keep the queue alive).
    #[must_use]
    fn put_back(&mut self, wr: Wr<Io>) -> Option<Wr<Io>> {
        if self.closed {
            return Some(wr);
        }
        self.io = Some(wr);
        None
    }

    /// Finishes the tag's I/O if both its request and its answer are back. Under the tag's
    /// lock, in a CQ handler.
    ///
    /// The target must have revoked the rkey of a command that named a buffer: without that
    /// the buffer (the block request's pages, or the bounce buffer) is still open to it, and
    /// the tag cannot be used again. The request and the block request then stay in the slot,
    /// and the queue fails ([`Settled::Unrevoked`]), which ends the block request once nothing
    /// reaches its pages.
    fn settle(&mut self) -> Settled {
        if self.io.is_none() || self.rq.is_none() || self.answer.is_none() {
            return Settled::Waiting;
        }
        let (Some(wr), Some(rq), Some((status, inv))) =
            (self.io.as_mut(), self.rq.as_mut(), self.answer.take())
        else {
            return Settled::Waiting;
        };
        let io = wr.data_mut();
        let revoked = !io.op.names_buffer()
            || inv.is_some_and(|i| io.named().is_some_and(|r| r.apply_invalidation(i)));
        if !revoked {
            return Settled::Unrevoked;
        }
        let mut result = if status == 0 {
            Ok(())
        } else {
            Err(Error::from_errno(status))
        };
        if io.direct {
            // Revoked: the pages are the block request's alone again (unmapping synced a
            // read's data for the CPU).
            io.unlend();
        } else if result.is_ok() && io.op == Opcode::Read {
            let len = io.len;
            result = match io.mr.with_buf(|b| match b.get(..len) {
                Some(b) => Request::copy_from_slice(rq, b),
                None => Err(EINVAL),
            }) {
                Ok(r) => r,
                Err(e) => Err(e),
            };
        }
        self.owed = false;
        self.counts.completed += 1;
        if result.is_err() {
            self.counts.errors += 1;
        }
        // The tag is free again once the lock is dropped, before its block request ends
        // (blk-mq may reuse the tag at once).
        match self.rq.take() {
            Some(rq) => Settled::End(rq, result),
            None => Settled::Waiting,
        }
    }
}

/// A tag's request: the command's buffer, the MR of the block request's pages and the MR of
/// the bounce buffer.
struct Io {
    q: Arc<IoQueue>,
    tag: u16,
    cmd: DmaBuf<ToDevice>,
    /// The MR for a block request's pages; `None` once a failed queue dropped it to end the
    /// block request it held.
    pages: Option<LentMr<ARef<Request<Blk>>>>,
    mr: Mr,
    /// An inline write's pages, lent to the device while its SEND is posted.
    lent: DmaLent<ARef<Request<Blk>>>,
    /// What the command in flight asked, for the answer.
    op: Opcode,
    len: usize,
    /// The command names the block request's pages (`pages`), not the bounce buffer.
    direct: bool,
}

impl Io {
    /// Gives back the block request's pages, lent to a command that was not posted (or whose
    /// answer revoked their rkey): dropping them drops the references to the request.
    fn unlend(&mut self) {
        drop(self.lent.take_back());
        if let Some(p) = self.pages.as_mut() {
            drop(p.take_back());
        }
    }

    /// The MR the command in flight names: the block request's pages or the bounce buffer
    /// (`direct` says which); `None` for a command that names no buffer, or if the pages'
    /// MR is gone (a failed queue dropped it).
    fn named(&self) -> Option<&dyn Region> {
        if !self.op.names_buffer() {
            return None;
        }
        match &self.pages {
            Some(p) if self.direct => Some(p),
            _ if self.direct => None,
            _ => Some(&self.mr),
        }
    }

    /// [`Io::named`], to register it anew.
    fn named_mut(&mut self) -> Option<&mut dyn Region> {
        if !self.op.names_buffer() {
            return None;
        }
        match &mut self.pages {
            Some(p) if self.direct => Some(p),
            _ if self.direct => None,
            _ => Some(&mut self.mr),
        }
    }
}

/// A zero-length RDMA WRITE to the target: it completes while the target lives.
struct KeepAlive {
    q: Arc<IoQueue>,
}

/// A posted receive for one answer.
struct Answer {
    q: Arc<IoQueue>,
    buf: DmaBuf<FromDevice>,
}

impl IoQueue {
    /// A queue of `depth` tags on `qp`, an established connection; [`IoQueue::fill`] gives it
    /// its requests.
    pub(super) fn new(
        index: u16,
        qp: Arc<Qp<Rts>>,
        depth: u16,
        inline_max: u32,
        block: u32,
        lend_max: usize,
    ) -> impl PinInit<Self, Error> {
        try_pin_init!(IoQueue {
            index,
            qp,
            slots: Self::new_slots(depth)?,
            dead: AtomicBool::new(false),
            inline_max,
            block,
            lend_max,
            id <- new_mutex!(None, "rdma_rust_blk_queue_id"),
            errors: AtomicU64::new(0),
            unended: AtomicU64::new(0),
            probe: AtomicI64::new(PROBE_IDLE),
            probe_done <- Signal::new(),
            keepalive <- new_spinlock_bh!(None, "rdma_rust_blk_keepalive"),
            keepalive_sent: AtomicI64::new(0),
        }? Error)
    }

    /// `depth` empty tags.
    fn new_slots(depth: u16) -> Result<KVec<Pin<KBox<SpinLockBh<Slot>>>>> {
        let mut slots = KVec::with_capacity(depth as usize, GFP_KERNEL)?;
        for _ in 0..depth {
            let slot = new_spinlock_bh!(Slot::default(), "rdma_rust_blk_slot");
            slots.push(KBox::pin_init(slot, GFP_KERNEL)?, GFP_KERNEL)?;
        }
        Ok(slots)
    }

    /// Whether the queue's connection failed.
    pub(super) fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// Block requests in flight.
    pub(super) fn in_flight(&self) -> usize {
        self.slots.iter().filter(|s| s.lock().rq.is_some()).count()
    }

    /// What the queue counted: its tags' counts and the failures outside them. Process
    /// context.
    pub(crate) fn stats(&self) -> QueueStats {
        let mut sum = QueueStats {
            errors: self.errors.load(Ordering::Relaxed),
            unended: self.unended.load(Ordering::Relaxed),
            ..QueueStats::default()
        };
        for s in self.slots.iter() {
            sum.add(&s.lock().counts);
        }
        sum
    }

    /// Ends `rq` with `result`. Ending fails only while another reference to the block request
    /// is held (its pages still lent to the device or registered), which the tags' bookkeeping
    /// never allows: such a request cannot be ended, stays in flight for blk-mq, and its
    /// reference is dropped here. Counted (`unended` in the status file) and logged once per
    /// queue. Any context but hard interrupts.
    pub(crate) fn end(&self, rq: ARef<Request<Blk>>, result: Result) {
        if Request::end(rq, result).is_err() {
            self.note_unended();
        }
    }

    /// Counts a block request that could not be ended, and says so the first time.
    pub(super) fn note_unended(&self) {
        if self.unended.fetch_add(1, Ordering::Relaxed) == 0 {
            pr_err!(
                "queue {}: a block request cannot be ended: a reference to it is still held (logged once; counted as unended)\n",
                self.index
            );
        }
    }

    /// The queue's index in its disk.
    pub(super) fn index(&self) -> u16 {
        self.index
    }

    /// The name of the RDMA device the queue is on.
    pub(super) fn device_name(&self) -> Name<NAME_MAX> {
        self.qp.pd().device().name()
    }

    /// Takes the queue's id, for `close`, then makes the queue's requests: one per tag, with
    /// its bounce buffer and (`direct`) an MR for block requests' pages; one answer receive
    /// per tag. After a failure `close` frees what was made.
    pub(super) fn fill(self: &Arc<Self>, id: CmId<IniEv>, pd: &Arc<Pd>, direct: bool) -> Result {
        let q = self;
        *q.id.lock() = Some(id);
        let max_pages = (MAX_IO as usize / PAGE_SIZE + 1) as u32;
        for (tag, slot) in (0u16..).zip(q.slots.iter()) {
            let mut mr = Mr::new(pd, max_pages)?;
            mr.map(DmaBuf::new(pd, MAX_IO as usize, GFP_KERNEL)?)
                .map_err(|(e, _)| e)?;
            let io = Io {
                q: q.clone(),
                tag,
                cmd: DmaBuf::<ToDevice>::alloc(pd, CMD_LEN + INLINE_MAX as usize, GFP_KERNEL)?,
                pages: if direct {
                    Some(LentMr::new(pd, max_pages)?)
                } else {
                    None
                },
                mr,
                lent: DmaLent::new(pd),
                op: Opcode::Flush,
                len: 0,
                direct: false,
            };
            slot.lock().io = Some(Wr::new(io, GFP_KERNEL)?);
        }
        *q.keepalive.lock() = Some(Wr::new(KeepAlive { q: q.clone() }, GFP_KERNEL)?);
        for _ in q.slots.iter() {
            let a = Answer {
                q: q.clone(),
                buf: DmaBuf::<FromDevice>::alloc(pd, RESP_LEN + INLINE_MAX as usize, GFP_KERNEL)?,
            };
            let wr = Wr::new(a, GFP_KERNEL)?;
            q.qp.post_recv(wr, |a, ops| {
                ops.buf(&mut a.buf, 0..RESP_LEN + INLINE_MAX as usize)?;
                Ok(())
            })?;
        }
        Ok(())
    }

    /// Sends `rq`'s command on its tag. Any context (`queue_rq`).
    pub(super) fn submit(&self, rq: ARef<Request<Blk>>) -> Result {
        let inline = rq.bytes() <= self.inline_max;
        let (op, len) = match rq.op() {
            Op::Read if inline => (Opcode::ReadInline, rq.bytes()),
            Op::Read => (Opcode::Read, rq.bytes()),
            Op::Write if inline => (Opcode::WriteInline, rq.bytes()),
            Op::Write => (Opcode::Write, rq.bytes()),
            Op::Flush => (Opcode::Flush, 0),
            Op::Discard => (Opcode::Discard, rq.bytes()),
            _ => {
                self.end(rq, Err(EOPNOTSUPP));
                return Ok(());
            }
        };
        let tag = rq.tag() as usize;
        let len_u = len as usize;
        let too_long = if op == Opcode::Discard {
            len > MAX_DISCARD
        } else {
            len > MAX_IO
        };
        let slot = match self.slots.get(tag) {
            Some(slot) if !self.is_dead() && !too_long => slot,
            _ => {
                self.errors.fetch_add(1, Ordering::Relaxed);
                self.end(rq, Err(EIO));
                return Ok(());
            }
        };
        let taken = slot.lock().io.take();
        let Some(mut wr) = taken else {
            // The tag's request is still out (a timed-out request's) or the queue is closing.
            self.errors.fetch_add(1, Ordering::Relaxed);
            self.end(rq, Err(EIO));
            return Ok(());
        };
        let io = wr.data_mut();
        io.op = op;
        io.len = len_u;
        let data = op.names_buffer();
        let access = if op == Opcode::Read {
            Access::REMOTE_WRITE
        } else {
            Access::REMOTE_READ
        };
        // The block request's own pages, if the MR can map them; the bounce buffer if not.
        io.direct = data
            && match io.pages.as_mut().map(|p| p.lend(rq.clone(), access)) {
                Some(Ok(())) => true,
                Some(Err((_, owner))) => {
                    drop(owner);
                    false
                }
                None => false,
            };
        let mut failed = None;
        if op == Opcode::Write && !io.direct {
            // The MR is not registered (its last rkey was revoked): the buffer is ours.
            match io.mr.with_buf(|b| match b.get_mut(..len_u) {
                Some(b) => rq.copy_to_slice(b),
                None => Err(EINVAL),
            }) {
                Ok(Ok(())) => {}
                Ok(Err(e)) | Err(e) => failed = Some(e),
            }
        }
        // An inline write's data follows its command: the request's pages, lent to the device,
        // or (more segments than the SEND gathers) a copy in the command's buffer.
        let sent = if op == Opcode::WriteInline && failed.is_none() {
            if self.lend_max > 0 {
                if let Err((_, owner)) = io.lent.lend(rq.clone(), self.lend_max) {
                    drop(owner);
                }
            }
            if io.lent.is_lent() {
                CMD_LEN
            } else {
                match io.cmd.as_mut_slice().get_mut(CMD_LEN..CMD_LEN + len_u) {
                    Some(b) => failed = rq.copy_to_slice(b).err(),
                    None => failed = Some(EINVAL),
                }
                CMD_LEN + len_u
            }
        } else {
            CMD_LEN
        };
        // The MR the command names goes to its next key before it is registered again (with
        // the command's SEND, below); its I/O virtual address is the mapping's, set by now.
        // Refused only while the MR is registered, which a settled tag's is not.
        let (addr, rkey) = match io
            .named_mut()
            .map(|r| r.bump_key().map(|()| (r.iova(), r.rkey())))
        {
            None => (0, 0),
            Some(Ok(k)) => k,
            Some(Err(e)) => {
                failed = failed.or(Some(e));
                (0, 0)
            }
        };
        Command {
            op,
            tag: tag as u16,
            len,
            sector: rq.sector(),
            addr,
            rkey,
        }
        .encode(io.cmd.as_mut_slice());
        let (direct, lent) = (io.direct, io.lent.is_lent());
        // A write of one block goes as a block write: its data alone, in fewer packets.
        let block_imm = if op == Opcode::WriteInline {
            Command::block_write_imm(tag as u16, rq.sector(), len, self.block)
        } else {
            None
        };
        if let Some(e) = failed {
            io.unlend();
            let late = slot.lock().put_back(wr);
            drop(late);
            self.end(rq, Err(e));
            return Ok(());
        }
        {
            let mut guard = slot.lock();
            // Checked again under the lock: `fail` marks the queue dead before it sweeps the
            // slots, so a request stored here is either swept or sees the mark.
            if self.is_dead() {
                // The pages' references go before the block request ends.
                wr.data_mut().unlend();
                let late = guard.put_back(wr);
                drop(guard);
                drop(late);
                self.errors.fetch_add(1, Ordering::Relaxed);
                self.end(rq, Err(EIO));
                return Ok(());
            }
            let s = &mut *guard;
            s.rq = Some(rq);
            s.owed = true;
            s.answer = None;
            s.inline_read = if op == Opcode::ReadInline { len_u } else { 0 };
            s.ticks = 0;
            let c = &mut s.counts;
            match op {
                Opcode::WriteInline if lent => c.writes_lent += 1,
                Opcode::WriteInline => c.writes_copied += 1,
                _ if data && direct => c.registered += 1,
                _ if data => c.bounced += 1,
                _ => {}
            }
            if block_imm.is_some() {
                c.block_writes += 1;
            }
        }
        let posted = self.qp.post_send(wr, |io, ops| {
            if let Some(r) = io.named() {
                ops.reg_mr(r, access)?;
            }
            match block_imm {
                Some(imm) if io.lent.is_lent() => {
                    ops.send_imm(&io.lent, 0..io.lent.len(), imm)?;
                }
                // Copied behind the command.
                Some(imm) => {
                    ops.send_imm(&io.cmd, CMD_LEN..sent, imm)?;
                }
                None => {
                    ops.send(&io.cmd, 0..sent)?;
                    if io.lent.is_lent() {
                        ops.gather(&io.lent, 0..io.lent.len())?;
                    }
                }
            }
            Ok(())
        });
        if let Err(mut e) = posted {
            // Not posted: nothing registered, the pages come back.
            e.wr.data_mut().unlend();
            let (late, rq) = {
                let mut s = slot.lock();
                s.owed = false;
                (s.put_back(e.wr), s.rq.take())
            };
            drop(late);
            self.errors.fetch_add(1, Ordering::Relaxed);
            if let Some(rq) = rq {
                self.end(rq, Err(EIO));
            }
        }
        Ok(())
    }
}
