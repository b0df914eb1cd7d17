// SPDX-License-Identifier: GPL-2.0

//! One NVMe queue: an RC connection, its command capsules and their completions.
//!
//! A queue's CQ is polled from a workqueue, where its commands are carried out (preparing an
//! [`RwCtx`] may sleep; a namespace's chunks are copied under their locks). The queue keeps a
//! pool of [`Answer`]s, two per entry: an answer is busy from its command until its
//! completion's SEND completes, and the host, which has the completion by then, may already
//! have sent the entry's next command. A capsule that finds no idle answer waits in its receive
//! buffer, which is posted again only once the capsule is taken: the host can have no more
//! commands out than the queue has entries, so the receives posted always cover them.
//!
//! A command: its capsule is copied into an answer (in-capsule data into the answer's pages);
//! then [`Queue::carry_out`] decides how its data moves ([`Data`]), checks the SGL descriptor
//! against that, reads the host's data with RDMA READ when it has any (the answer's
//! [`Stage::Fetching`]), carries it out, and answers: RDMA WRITE of the data for the host, if
//! any, chained in front of the completion's SEND (with invalidate of the host's rkey when the
//! descriptor asked for it).
//!
//! A capsule that is not one (shorter than a command) or a failed request ends the connection;
//! a command that is wrong gets the specification's status.

use crate::config::{PortConf, Volume};
use crate::ctrl::{raw_cid, Ctrl, Data, QueueLink, Reply, Target};
use crate::io;
use crate::proto::{
    Cqe, Sgl, Sqe, Status, CONNECT_DATA_LEN, CQE_LEN, FABRICS, FCTYPE_CONNECT, INLINE_DATA, SQE_LEN,
};
use core::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use kernel::page::{Page, PAGE_SIZE};
use kernel::prelude::*;
use kernel::rdma::{
    cq::{Cq, PollContext, Wc, WcOpcode, WcStatus},
    dma::{copy_from_pages, copy_to_pages, DmaBuf, FromDevice, ToDevice},
    mr::Remote,
    pd::Pd,
    qp::{Init, Qp, QpCaps, Rts},
    rw::RwCtx,
    wr::{Completion, Wr},
};
use kernel::sync::{Arc, Mutex, SpinLock};
use kernel::{new_mutex, new_spinlock};

/// Pages of the largest transfer.
const MAX_PAGES: usize = crate::proto::MAX_TRANSFER / PAGE_SIZE;
/// Pages an idle answer keeps (admin data, 4 KiB I/O); a larger transfer's come and go.
const KEEP_PAGES: usize = 1;

/// How a queue ends its connection: the listener that has it.
pub(crate) trait Hangup: Send + Sync {
    /// Ends the connection of `queue` (whose QP is in the error state already): a DREQ to
    /// the host, and the queue's teardown.
    fn hangup(&self, queue: &Queue);
}

/// An NVMe queue on one RC connection.
#[pin_data]
pub(crate) struct Queue {
    pub(crate) target: Arc<Target>,
    pub(crate) port: Arc<PortConf>,
    hangup: Arc<dyn Hangup>,
    pub(crate) qid: u16,
    /// Entries: commands the host may have out.
    pub(crate) depth: u16,
    pd: Arc<Pd>,
    #[pin]
    qp: Mutex<Option<Arc<Qp<Rts>>>>,
    /// The controller, once the queue's Connect succeeded.
    #[pin]
    ctrl: SpinLock<Option<Arc<Ctrl>>>,
    #[pin]
    pool: SpinLock<Pool>,
    /// The submission queue head the completions report.
    sqhd: AtomicU16,
    pub(crate) commands: AtomicU64,
    pub(crate) broken: AtomicBool,
    /// This side ends the connection: the flushes that follow are that, not news.
    ending: AtomicBool,
}

/// The idle answers, the capsules waiting for one, and the command IDs in flight.
#[derive(Default)]
struct Pool {
    /// A stack: the idle answers are the first `idle` entries.
    answers: KVec<Option<Wr<Answer>>>,
    idle: usize,
    /// Capsules in their receive buffers, oldest first (a ring).
    waiting: KVec<Option<Wr<CmdBuf>>>,
    head: usize,
    queued: usize,
    /// One bit per command ID: set from a command's arrival to its completion's.
    busy_cids: KVec<u64>,
}

impl Pool {
    fn take(&mut self) -> Option<Wr<Answer>> {
        let i = self.idle.checked_sub(1)?;
        let a = self.answers.get_mut(i).and_then(Option::take)?;
        self.idle = i;
        Some(a)
    }

    /// Queues a capsule; `Err` gives it back when the ring is full (more commands than the
    /// queue has entries).
    fn wait(&mut self, cb: Wr<CmdBuf>) -> Result<(), Wr<CmdBuf>> {
        let n = self.waiting.len();
        if self.queued == n {
            return Err(cb);
        }
        self.waiting[(self.head + self.queued) % n] = Some(cb);
        self.queued += 1;
        Ok(())
    }

    fn next_waiting(&mut self) -> Option<Wr<CmdBuf>> {
        if self.queued == 0 {
            return None;
        }
        let cb = self.waiting[self.head].take();
        self.head = (self.head + 1) % self.waiting.len();
        self.queued -= 1;
        cb
    }

    fn put(&mut self, wr: Wr<Answer>) {
        if let Some(slot) = self.answers.get_mut(self.idle) {
            *slot = Some(wr);
            self.idle += 1;
        }
    }

    /// Marks `cid` in flight; `false` when it is already.
    fn claim(&mut self, cid: u16) -> bool {
        let (w, bit) = (usize::from(cid / 64), 1u64 << (cid % 64));
        match self.busy_cids.get_mut(w) {
            Some(word) if *word & bit == 0 => {
                *word |= bit;
                true
            }
            _ => false,
        }
    }

    fn release(&mut self, cid: u16) {
        if let Some(word) = self.busy_cids.get_mut(usize::from(cid / 64)) {
            *word &= !(1u64 << (cid % 64));
        }
    }
}

/// Where an answer's command is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    Idle,
    /// The host's data is being read.
    Fetching,
    /// The completion (and data for the host) is on its way.
    Answering,
}

/// A command being carried out: its capsule, data pages, R/W context and completion buffer.
struct Answer {
    queue: Arc<Queue>,
    qp: Arc<Qp<Rts>>,
    stage: Stage,
    sqe: Option<Sqe>,
    /// The submission queue head when the command arrived.
    sq_head: u16,
    /// Bytes of in-capsule data the capsule carried (in `pages`, or in `capsule`).
    inline_len: usize,
    /// The receive buffer of an in-capsule Write, kept until the data is in the namespace
    /// (one copy, as nvmet-rdma makes from its inline pages): posted again right before the
    /// completion (or when the command ends without one).
    capsule: Option<Wr<CmdBuf>>,
    pages: Option<KVec<Page>>,
    to_host: Option<RwCtx<ToDevice>>,
    from_host: Option<RwCtx<FromDevice>>,
    /// The data's length and where it goes, once planned.
    data: Data,
    volume: Option<Arc<Volume>>,
    /// Whether the command ID is ours to release (it was not in flight already).
    claimed: bool,
    cqe: DmaBuf<ToDevice>,
}

/// A posted receive for one capsule.
struct CmdBuf {
    queue: Arc<Queue>,
    qp: Arc<Qp<Rts>>,
    buf: DmaBuf<FromDevice>,
    /// Bytes received.
    len: usize,
}

impl Queue {
    /// Capsule bytes a receive takes: a command, with in-capsule data on I/O queues.
    fn capsule_len(&self) -> usize {
        if self.qid == 0 {
            SQE_LEN
        } else {
            SQE_LEN + INLINE_DATA
        }
    }

    /// The resources of a new queue on the connection `id` (its CQ, and its QP in Init until
    /// the connection is accepted).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn open(
        id: &kernel::rdma::cm::CmId<impl kernel::rdma::cm::Handler>,
        target: &Arc<Target>,
        port: &Arc<PortConf>,
        hangup: Arc<dyn Hangup>,
        qid: u16,
        depth: u16,
    ) -> Result<(Arc<Self>, Qp<Init>)> {
        let dev = id.device().ok_or(ENODEV)?;
        let pd = Pd::new(&dev)?;
        let d = u32::from(depth);
        let answers = 2 * d;
        let attrs = dev.attrs();
        let rw_sge = (MAX_PAGES as u32).min(attrs.max_send_sge());
        let per_op = rw_sge.min(attrs.max_sge_rd()).max(1);
        let send_depth = answers * ((MAX_PAGES as u32).div_ceil(per_op) + 1) + 4;
        let cq = Cq::new(
            &dev,
            send_depth + 3 * answers + d + 4,
            0,
            PollContext::Workqueue,
        )?;
        let queue_pd = pd.clone();
        let queue = Arc::pin_init(
            pin_init!(Queue {
                target: target.clone(),
                port: port.clone(),
                hangup,
                qid,
                depth,
                pd: queue_pd,
                qp <- new_mutex!(None, "rdma_rust_nvmet_qp"),
                ctrl <- new_spinlock!(None, "rdma_rust_nvmet_queue_ctrl"),
                pool <- new_spinlock!(Pool::default(), "rdma_rust_nvmet_pool"),
                sqhd: AtomicU16::new(0),
                commands: AtomicU64::new(0),
                broken: AtomicBool::new(false),
                ending: AtomicBool::new(false),
            }),
            GFP_KERNEL,
        )?;
        let caps = QpCaps {
            send_depth,
            recv_depth: d,
            rdma_ctxs: answers,
            rw_sge,
            port: id.port(),
            ..QpCaps::default()
        };
        let qp = id.create_qp(&pd, &cq, &cq, &caps)?;
        Ok((queue, qp))
    }

    /// The connection is up: two answers per entry, a receive per entry.
    pub(crate) fn start(self: &Arc<Self>, qp: Qp<Rts>) -> Result {
        let qp = Arc::new(qp, GFP_KERNEL)?;
        *self.qp.lock() = Some(qp.clone());
        let n = 2 * usize::from(self.depth);
        let mut answers = KVec::with_capacity(n, GFP_KERNEL)?;
        for _ in 0..n {
            let mut pages = KVec::with_capacity(MAX_PAGES, GFP_KERNEL)?;
            for _ in 0..KEEP_PAGES {
                pages.push(Page::alloc_page(GFP_KERNEL)?, GFP_KERNEL)?;
            }
            let answer = Answer {
                queue: self.clone(),
                qp: qp.clone(),
                stage: Stage::Idle,
                sqe: None,
                sq_head: 0,
                inline_len: 0,
                capsule: None,
                pages: Some(pages),
                to_host: None,
                from_host: None,
                data: Data::None,
                volume: None,
                claimed: false,
                cqe: DmaBuf::<ToDevice>::alloc(&self.pd, CQE_LEN, GFP_KERNEL)?,
            };
            answers.push(Some(Wr::new(answer, GFP_KERNEL)?), GFP_KERNEL)?;
        }
        let mut waiting = KVec::with_capacity(usize::from(self.depth), GFP_KERNEL)?;
        for _ in 0..self.depth {
            waiting.push(None, GFP_KERNEL)?;
        }
        *self.pool.lock() = Pool {
            idle: answers.len(),
            answers,
            waiting,
            head: 0,
            queued: 0,
            busy_cids: KVec::from_elem(0u64, 1024, GFP_KERNEL)?,
        };
        for _ in 0..self.depth {
            let cb = CmdBuf {
                queue: self.clone(),
                qp: qp.clone(),
                buf: DmaBuf::<FromDevice>::alloc(&self.pd, self.capsule_len(), GFP_KERNEL)?,
                len: 0,
            };
            post_recv(Wr::new(cb, GFP_KERNEL)?)?;
        }
        Ok(())
    }

    /// Frees the queue: every request comes back (drain); the answers and capsules, which
    /// hold the queue, are dropped; the controller learns the queue is gone. Process context,
    /// not a handler of its CQ.
    pub(crate) fn teardown(&self) {
        self.ending.store(true, Ordering::Release);
        let qp = self.qp.lock().take();
        if let Some(qp) = &qp {
            let _ = qp.set_error();
            let _ = qp.drain();
        }
        let pool = core::mem::take(&mut *self.pool.lock());
        drop(pool);
        drop(qp);
        let ctrl = self.ctrl.lock().take();
        if let Some(ctrl) = ctrl {
            ctrl.detach(&self.target, self.qid);
        }
    }

    /// This side is about to end the connection: its requests come back flushed from now on.
    pub(crate) fn ending(&self) {
        self.ending.store(true, Ordering::Release);
    }

    /// Forces the QP into the error state (tests of how a host notices); whether it did.
    pub(crate) fn force_error(&self) -> bool {
        self.qp
            .lock()
            .as_ref()
            .is_some_and(|qp| qp.set_error().is_ok())
    }

    /// The controller the queue belongs to, once connected.
    pub(crate) fn ctrl(&self) -> Option<Arc<Ctrl>> {
        self.ctrl.lock().clone()
    }

    /// `what` came back with `wc`'s error: the connection ends (a flush of ours is no news).
    fn failed(&self, wc: &Wc, what: &str) {
        match wc.status() {
            WcStatus::WrFlushErr
                if self.ending.load(Ordering::Acquire) || self.broken.load(Ordering::Acquire) => {}
            WcStatus::WrFlushErr => self.protocol_error(format_args!(
                "{what} was flushed: the QP failed without an error of its own"
            )),
            status => self.protocol_error(format_args!("{what} failed: {status:?}")),
        }
    }

    /// Ends a connection whose host broke the protocol (or whose controller ended): the QP
    /// goes to the error state and a DREQ tells the host. Logged once. Process context.
    fn protocol_error(&self, what: core::fmt::Arguments<'_>) {
        if !self.broken.swap(true, Ordering::AcqRel) {
            pr_err!(
                "queue {} on port {}: {what}: connection ended\n",
                self.qid,
                self.port.id
            );
            self.hang_up();
        }
    }

    fn hang_up(&self) {
        if let Some(qp) = self.qp.lock().as_ref() {
            let _ = qp.set_error();
        }
        self.hangup.hangup(self);
    }

    /// A capsule arrived in `cb`: taken now by an idle answer, or when one is free.
    fn arrived(self: &Arc<Self>, cb: Wr<CmdBuf>) {
        self.commands.fetch_add(1, Ordering::Relaxed);
        let mut pool = self.pool.lock();
        if let Some(a) = pool.take() {
            drop(pool);
            if let Some(idle) = self.begin(a, cb) {
                self.put_back(idle);
            }
            return;
        }
        let full = pool.wait(cb).err();
        drop(pool);
        if full.is_some() {
            self.protocol_error(format_args!(
                "more commands than the queue's {} entries",
                self.depth
            ));
        }
    }

    /// Takes the capsule in `cb` into the answer `wr` (the command, and in-capsule data into
    /// its pages), posts the buffer again and carries the command out. `Some(wr)`, idle, when
    /// the command is over without a post (held, or the connection is ending).
    fn begin(self: &Arc<Self>, mut wr: Wr<Answer>, mut cb: Wr<CmdBuf>) -> Option<Wr<Answer>> {
        let n = cb.data().len;
        let head = self.next_head();
        let a = wr.data_mut();
        let capsule = cb.data_mut().buf.as_slice();
        a.sqe = capsule.get(..n).and_then(Sqe::decode);
        a.sq_head = head;
        a.inline_len = 0;
        if let Some(data) = capsule.get(SQE_LEN..n).filter(|d| !d.is_empty()) {
            a.inline_len = data.len();
            // A Write's data goes from the capsule into the namespace: the buffer waits.
            if self.qid != 0 && a.sqe.is_some_and(|q| q.opcode == crate::proto::io::WRITE) {
                a.capsule = Some(cb);
                return self.carry_out(wr);
            }
            let copied = a
                .pages
                .as_mut()
                .ok_or(EINVAL)
                .and_then(|p| copy_to_pages(p, 0, data));
            if copied.is_err() {
                a.inline_len = 0;
            }
        }
        // The buffer is free again: the next capsule can land in it.
        if post_recv(cb).is_err() {
            finish(&mut wr);
            return Some(wr);
        }
        self.carry_out(wr)
    }

    /// The submission queue head after one more command (reported in its completion).
    fn next_head(&self) -> u16 {
        let depth = self.depth;
        let prev = self
            .sqhd
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| {
                Some((h + 1) % depth)
            })
            .unwrap_or(0);
        (prev + 1) % depth
    }

    /// An answer is idle again: it takes the waiting capsules, oldest first, or goes back to
    /// the pool. A loop, not a recursion: on a connection that is ending every post fails.
    fn put_back(self: &Arc<Self>, mut wr: Wr<Answer>) {
        loop {
            let cb = {
                let mut pool = self.pool.lock();
                match pool.next_waiting() {
                    Some(cb) => cb,
                    None => {
                        pool.put(wr);
                        return;
                    }
                }
            };
            match self.begin(wr, cb) {
                Some(idle) => wr = idle,
                None => return,
            }
        }
    }

    /// How `sqe`'s data moves, and the volume an I/O command acts on; `Err` with the status
    /// the command gets instead.
    fn plan(&self, sqe: &Sqe) -> Result<(Data, Option<Arc<Volume>>), Status> {
        let ctrl = self.ctrl();
        match (&ctrl, sqe.opcode) {
            (None, FABRICS) if sqe.fctype() == FCTYPE_CONNECT => {
                Ok((Data::FromHost(CONNECT_DATA_LEN), None))
            }
            // Nothing but a Connect before the queue has a controller.
            (None, _) => Err(Status::CMD_SEQ_ERROR),
            // A second Connect is out of sequence, whatever data it names.
            (Some(_), FABRICS) if sqe.fctype() == FCTYPE_CONNECT => Err(Status::CMD_SEQ_ERROR),
            (Some(_), FABRICS) => Ok((Data::None, None)),
            (Some(c), _) if self.qid == 0 => c.admin_data(sqe).map(|d| (d, None)),
            (Some(c), _) => {
                if !c.ready() {
                    return Err(Status::CMD_SEQ_ERROR);
                }
                let subsys = c.subsys.as_ref().ok_or(Status::INVALID_OPCODE)?;
                io::plan(subsys, sqe).map(|p| (p.data, Some(p.volume)))
            }
        }
    }

    /// Carries out the command in `wr`: plans it, checks its SGL, fetches the host's data (the
    /// command goes on in [`Queue::execute`] when the READ completes) or executes it now.
    fn carry_out(self: &Arc<Self>, mut wr: Wr<Answer>) -> Option<Wr<Answer>> {
        let Some(sqe) = wr.data().sqe else {
            finish(&mut wr);
            return Some(wr);
        };
        // A command that reaches a controller which has ended (between its end and the QP's
        // error state) gets no answer: any status now would be a final one (CMD_SEQ_ERROR
        // carries DNR) for a command the host must retry on its next association. The
        // connection is going; nvmet-rdma drops such commands too.
        if self.ctrl().is_some_and(|c| c.ended()) {
            self.end("its controller ended");
            finish(&mut wr);
            return Some(wr);
        }
        let claimed = self.pool.lock().claim(sqe.cid);
        wr.data_mut().claimed = claimed;
        if !claimed {
            return self.reply(wr, Status::CMDID_CONFLICT.into());
        }
        let (data, volume) = match self.plan(&sqe) {
            Ok(p) => p,
            Err(s) => return self.reply(wr, s.into()),
        };
        let sgl = match sqe.sgl {
            Ok(s) => s,
            Err(s) => return self.reply(wr, s.into()),
        };
        let len = match data {
            Data::None => 0,
            Data::FromHost(n) | Data::ToHost(n) => n,
        };
        // The descriptor must name exactly the command's data; a Dataset Management's may
        // name more (Linux sends its whole range buffer, 4 KiB, whatever NR says): only the
        // ranges are read.
        let longer = self.qid != 0 && io::sgl_may_be_longer(&sqe);
        if sgl.len() != len && !(longer && sgl.len() > len) {
            return self.reply(wr, Status::SGL_INVALID_DATA.into());
        }
        let a = wr.data_mut();
        let keyed = match (data, sgl) {
            (_, Sgl::Keyed { addr, key, .. }) => Some(Remote { addr, rkey: key }),
            (Data::None, Sgl::Inline { .. }) => None,
            (Data::FromHost(_), Sgl::Inline { offset, .. }) => {
                if offset != 0 {
                    return self.reply(wr, Status::SGL_INVALID_OFFSET.into());
                }
                // In-capsule data only on I/O queues, and all of it in the capsule.
                if self.qid == 0 || a.inline_len != sgl.len() {
                    return self.reply(wr, Status::SGL_INVALID_DATA.into());
                }
                None
            }
            (Data::ToHost(_), Sgl::Inline { .. }) => {
                return self.reply(wr, Status::SGL_INVALID_TYPE.into());
            }
        };
        a.data = data;
        a.volume = volume;
        if let Err(e) = a.pages.as_mut().ok_or(EINVAL).and_then(|p| grow(p, len)) {
            let _ = e;
            return self.reply(wr, Status::INTERNAL.into());
        }
        match (data, keyed) {
            (Data::FromHost(n), Some(remote)) if n > 0 => self.fetch(wr, n, remote),
            _ => self.execute(wr),
        }
    }

    /// Reads the host's `len` bytes at `remote` into the answer's pages; the answer's
    /// completion goes on with [`Queue::execute`].
    fn fetch(
        self: &Arc<Self>,
        mut wr: Wr<Answer>,
        len: usize,
        remote: Remote,
    ) -> Option<Wr<Answer>> {
        let a = wr.data_mut();
        let Some(pages) = a.pages.take() else {
            return self.reply(wr, Status::INTERNAL.into());
        };
        match RwCtx::<FromDevice>::new(&a.qp, pages, len, remote) {
            Ok(rw) => {
                a.from_host = Some(rw);
                a.stage = Stage::Fetching;
                let qp = a.qp.clone();
                let posted = qp.post_send(wr, |a, ops| {
                    ops.rw(a.from_host.as_mut().ok_or(EINVAL)?)?;
                    Ok(())
                });
                match posted {
                    Ok(()) => None,
                    Err(e) => {
                        let mut wr = e.wr;
                        let a = wr.data_mut();
                        a.stage = Stage::Idle;
                        a.pages = a.from_host.take().map(RwCtx::into_pages);
                        self.reply(wr, Status::DATA_XFER_ERROR.into())
                    }
                }
            }
            Err((e, pages)) => {
                a.pages = Some(pages);
                pr_err!("queue {}: cannot read the host's data: {e:?}\n", self.qid);
                self.reply(wr, Status::DATA_XFER_ERROR.into())
            }
        }
    }

    /// Carries out a planned command whose host data, if any, is in the answer's pages.
    fn execute(self: &Arc<Self>, mut wr: Wr<Answer>) -> Option<Wr<Answer>> {
        let a = wr.data_mut();
        let Some(sqe) = a.sqe else {
            finish(&mut wr);
            return Some(wr);
        };
        let len = match a.data {
            Data::None => 0,
            Data::FromHost(n) | Data::ToHost(n) => n,
        };
        let Some(pages) = a.pages.as_mut() else {
            return self.reply(wr, Status::INTERNAL.into());
        };
        let reply = match self.ctrl() {
            None => self.connect(&sqe, pages),
            Some(c) if sqe.opcode == FABRICS => self.target.fabrics(&c, self.qid, &sqe),
            Some(c) if self.qid == 0 => {
                let Ok(mut out) = KVec::from_elem(0u8, len, GFP_KERNEL) else {
                    return self.reply(wr, Status::INTERNAL.into());
                };
                match c.admin(&sqe, &mut out) {
                    // Held (an Asynchronous Event Request): its command ID stays in flight.
                    None => {
                        a.claimed = false;
                        finish(&mut wr);
                        return Some(wr);
                    }
                    Some(r) if r.status.is_ok() && len > 0 => match copy_to_pages(pages, 0, &out) {
                        Ok(()) => r,
                        Err(_) => Status::INTERNAL.into(),
                    },
                    Some(r) => r,
                }
            }
            Some(_) => {
                // The capsule's data, if the SGL names it (not a keyed block fetched into
                // `pages`).
                let inline = match sqe.sgl {
                    Ok(Sgl::Inline { .. }) => a
                        .capsule
                        .as_mut()
                        .and_then(|cb| cb.data_mut().buf.as_slice().get(SQE_LEN..SQE_LEN + len)),
                    _ => None,
                };
                match a.volume.as_deref() {
                    Some(v) => io::execute(&sqe, v, pages, len, inline),
                    None => Status::INTERNAL.into(),
                }
            }
        };
        self.reply(wr, reply)
    }

    /// The queue's Connect: the controller it makes or joins becomes the queue's.
    fn connect(self: &Arc<Self>, sqe: &Sqe, pages: &[Page]) -> Reply {
        let Ok(mut data) = KVec::from_elem(0u8, CONNECT_DATA_LEN, GFP_KERNEL) else {
            return Status::INTERNAL.into();
        };
        if copy_from_pages(pages, 0, &mut data).is_err() {
            return Status::INTERNAL.into();
        }
        let link: Arc<dyn QueueLink> = self.clone();
        let (reply, ctrl) = self
            .target
            .connect(&self.port, self.qid, self.depth, sqe, &data, link);
        if let Some(c) = ctrl {
            *self.ctrl.lock() = Some(c);
        }
        reply
    }

    /// Sends the completion of the command in `wr` with `reply`; its data for the host, if it
    /// succeeded, goes first by RDMA WRITE. With invalidate of the host's rkey when the SGL
    /// asked for it. `Some(wr)`, idle, if it could not be posted (the connection is ending).
    fn reply(self: &Arc<Self>, mut wr: Wr<Answer>, mut reply: Reply) -> Option<Wr<Answer>> {
        let a = wr.data_mut();
        let Some(sqe) = a.sqe else {
            finish(&mut wr);
            return Some(wr);
        };
        let keyed = match sqe.sgl {
            Ok(Sgl::Keyed {
                addr,
                len,
                key,
                invalidate,
            }) if len > 0 => Some((Remote { addr, rkey: key }, invalidate)),
            _ => None,
        };
        if let (true, Data::ToHost(n), Some((remote, _))) = (reply.status.is_ok(), a.data, keyed) {
            match a.pages.take() {
                Some(pages) => match RwCtx::<ToDevice>::new(&a.qp, pages, n, remote) {
                    Ok(rw) => a.to_host = Some(rw),
                    Err((e, pages)) => {
                        a.pages = Some(pages);
                        pr_err!("queue {}: cannot write the host's data: {e:?}\n", self.qid);
                        reply = Status::DATA_XFER_ERROR.into();
                    }
                },
                // No data to send: the command cannot succeed.
                None => reply = Status::INTERNAL.into(),
            }
        }
        Cqe {
            result: reply.result,
            sq_head: a.sq_head,
            sq_id: self.qid,
            cid: sqe.cid,
            status: reply.status,
        }
        .encode(a.cqe.as_mut_slice());
        // The host may send its next command as soon as it has this completion: the buffer
        // kept for an in-capsule Write is posted first (it fails only on a connection that is
        // ending, where the completion would go nowhere either).
        if let Some(cb) = a.capsule.take() {
            if post_recv(cb).is_err() {
                finish(&mut wr);
                return Some(wr);
            }
        }
        // The host may reuse the command ID as soon as it has the completion, which can be
        // before the SEND's own completion comes back here: the ID is free from now on.
        if core::mem::take(&mut a.claimed) {
            self.pool.lock().release(sqe.cid);
        }
        a.stage = Stage::Answering;
        let qp = a.qp.clone();
        let invalidate = keyed.and_then(|(r, inv)| inv.then_some(r.rkey));
        let posted = qp.post_send(wr, |a, ops| {
            if let Some(rw) = a.to_host.as_mut() {
                ops.rw(rw)?;
            }
            match invalidate {
                Some(rkey) => ops.send_inv(&a.cqe, 0..CQE_LEN, rkey)?,
                None => ops.send(&a.cqe, 0..CQE_LEN)?,
            };
            Ok(())
        });
        match posted {
            Ok(()) => None,
            Err(e) => {
                let mut wr = e.wr;
                self.protocol_error(format_args!("cannot post a completion: {:?}", e.err));
                finish(&mut wr);
                Some(wr)
            }
        }
    }
}

/// Grows `pages` to hold `len` bytes.
fn grow(pages: &mut KVec<Page>, len: usize) -> Result {
    while pages.len() * PAGE_SIZE < len {
        pages.push(Page::alloc_page(GFP_KERNEL)?, GFP_KERNEL)?;
    }
    Ok(())
}

/// Gives an answer's pages back from its R/W contexts, lets its command ID go and makes it
/// idle.
fn finish(wr: &mut Wr<Answer>) {
    let a = wr.data_mut();
    // A kept capsule buffer goes back to the QP (dropped if the connection is ending).
    if let Some(cb) = a.capsule.take() {
        let _ = post_recv(cb);
    }
    if let Some(rw) = a.to_host.take() {
        a.pages = Some(rw.into_pages());
    }
    if let Some(rw) = a.from_host.take() {
        a.pages = Some(rw.into_pages());
    }
    if let Some(p) = a.pages.as_mut() {
        p.truncate(KEEP_PAGES);
    }
    if let (true, Some(sqe)) = (a.claimed, a.sqe) {
        a.queue.pool.lock().release(sqe.cid);
    }
    a.claimed = false;
    a.stage = Stage::Idle;
    a.sqe = None;
    a.volume = None;
    a.data = Data::None;
}

impl Completion for CmdBuf {
    fn done(mut wr: Wr<Self>, wc: &Wc) {
        let queue = wr.data().queue.clone();
        if !wc.is_ok() {
            queue.failed(wc, "a capsule's receive");
            return;
        }
        let n = wc.byte_len() as usize;
        if wc.opcode() != Some(WcOpcode::Recv) || wc.imm_data().is_some() {
            queue.protocol_error(format_args!("a message that is not a capsule"));
            return;
        }
        if n < SQE_LEN {
            queue.protocol_error(format_args!(
                "a capsule of {n} bytes (command id {:#x}), shorter than a command",
                raw_cid(wr.data_mut().buf.as_slice())
            ));
            return;
        }
        wr.data_mut().len = n;
        queue.arrived(wr);
    }
}

impl Completion for Answer {
    fn done(mut wr: Wr<Self>, wc: &Wc) {
        let queue = wr.data().queue.clone();
        if !wc.is_ok() {
            queue.failed(wc, "a completion or data transfer");
            finish(&mut wr);
            queue.put_back(wr);
            return;
        }
        if wr.data().stage == Stage::Fetching {
            // The host's data is here: carry the command out.
            let a = wr.data_mut();
            a.pages = a.from_host.take().map(RwCtx::into_pages);
            a.stage = Stage::Idle;
            if let Some(idle) = queue.execute(wr) {
                queue.put_back(idle);
            }
            return;
        }
        finish(&mut wr);
        queue.put_back(wr);
    }
}

impl QueueLink for Queue {
    fn end(&self, why: &str) {
        if !self.broken.swap(true, Ordering::AcqRel) {
            pr_info!(
                "queue {} on port {}: {why}: connection ended\n",
                self.qid,
                self.port.id
            );
            self.ending.store(true, Ordering::Release);
            self.hang_up();
        }
    }
}

/// Posts a capsule receive; on failure (the QP is being drained) it is dropped.
fn post_recv(wr: Wr<CmdBuf>) -> Result {
    let qp = wr.data().qp.clone();
    qp.post_recv(wr, |c, ops| {
        let n = c.buf.len();
        ops.buf(&mut c.buf, 0..n)?;
        Ok(())
    })?;
    Ok(())
}
