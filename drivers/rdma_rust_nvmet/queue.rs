// SPDX-License-Identifier: GPL-2.0

//! One NVMe queue: an RC connection, its command capsules and their completions.
//!
//! A queue's CQ is polled from a workqueue, where its commands are carried out (preparing an
//! [`RwCtx`] may sleep; a namespace's chunks are copied under their locks). The queue keeps a
//! pool of [`Answer`]s, two per entry: an answer is busy from its command until its
//! completion's SEND completes, and the host, which has the completion by then, may already
//! have sent the entry's next command. A capsule that finds no idle answer waits in its receive
//! buffer, which is posted again only once the capsule is taken: the host can have no more
//! commands out than the queue has entries, so the receives posted always cover them. The
//! receives are posted before the connection is accepted (iWARP has no receiver-not-ready
//! retry); what arrives before the queue has started is carried out once it has
//! ([`Queue::take_early`]), from the connection request's handler.
//!
//! A command: its capsule is copied into an answer (in-capsule data into the answer's pages);
//! then [`Queue::carry_out`] decides how its data moves ([`Data`]), checks the SGL descriptor
//! against that, reads the host's data with RDMA READ when it has any (the answer's
//! [`Stage::Fetching`]), carries it out, and answers: RDMA WRITE of the data for the host, if
//! any, chained in front of the completion's SEND (with invalidate of the host's rkey when the
//! descriptor asked for it).
//!
//! A capsule that is not one (shorter than a command) or a failed request ends the connection;
//! a command that is wrong gets the specification's status. How a command is carried out is
//! in `command`.

mod command;

use crate::config::{PortConf, Volume};
use crate::ctrl::{raw_cid, Ctrl, Data, QueueLink, Reply, Target};
use crate::proto::{Sqe, CQE_LEN, INLINE_DATA, SQE_LEN};
use core::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use kernel::page::{Page, PAGE_SIZE};
use kernel::prelude::*;
use kernel::rdma::{
    cq::{Cq, PollContext, Wc, WcOpcode, WcStatus},
    dma::{copy_to_pages, DmaBuf, FromDevice, ToDevice},
    pd::Pd,
    qp::{CanRecv, Init, Qp, QpCaps, Rts},
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
    /// Capsules received, those with in-capsule data, and commands whose data was read from
    /// the host by RDMA READ (debugfs `status`).
    pub(crate) commands: AtomicU64,
    pub(crate) in_capsule: AtomicU64,
    pub(crate) fetched: AtomicU64,
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
    /// The controller the command was planned against, from [`Queue::carry_out`] to
    /// [`Queue::execute`].
    ctrl: Option<Arc<Ctrl>>,
    /// Whether the command ID is ours to release (it was not in flight already).
    claimed: bool,
    cqe: DmaBuf<ToDevice>,
}

/// A posted receive for one capsule.
struct CmdBuf {
    queue: Arc<Queue>,
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

    /// The resources of a new queue on the connection `id`: its CQ, and its QP in Init until
    /// the connection is accepted, with a receive posted for each entry. They are posted before
    /// the accept: an iWARP host's first capsule may follow the accept at once, and iWARP has
    /// no receiver-not-ready retry (a SEND without a receive ends the connection). A capsule
    /// that comes before [`Queue::start`] waits for it.
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
                in_capsule: AtomicU64::new(0),
                fetched: AtomicU64::new(0),
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
        let mut waiting = KVec::with_capacity(usize::from(depth), GFP_KERNEL)?;
        for _ in 0..depth {
            waiting.push(None, GFP_KERNEL)?;
        }
        *queue.pool.lock() = Pool {
            waiting,
            busy_cids: KVec::from_elem(0u64, 1024, GFP_KERNEL)?,
            ..Pool::default()
        };
        for _ in 0..depth {
            let cb = CmdBuf {
                queue: queue.clone(),
                buf: DmaBuf::<FromDevice>::alloc(&pd, queue.capsule_len(), GFP_KERNEL)?,
                len: 0,
            };
            post_recv(&qp, Wr::new(cb, GFP_KERNEL)?)?;
        }
        Ok((queue, qp))
    }

    /// The connection is up: two answers per entry (those that came first wait for
    /// [`Queue::take_early`]).
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
                ctrl: None,
                claimed: false,
                cqe: DmaBuf::<ToDevice>::alloc(&self.pd, CQE_LEN, GFP_KERNEL)?,
            };
            answers.push(Some(Wr::new(answer, GFP_KERNEL)?), GFP_KERNEL)?;
        }
        let mut pool = self.pool.lock();
        pool.idle = answers.len();
        pool.answers = answers;
        Ok(())
    }

    /// Carries out the capsules that came between the accept and [`Queue::start`], oldest
    /// first (a host sends its Connect once its side is up, which on iWARP may be before this
    /// side's accept has returned). Called by the port once the queue's session is listed, in
    /// the connection request's handler: nvmet-rdma, too, carries out such commands from its
    /// rdma_cm handler (on the connection's ESTABLISHED event).
    pub(crate) fn take_early(self: &Arc<Self>) {
        loop {
            let answer = {
                let mut pool = self.pool.lock();
                if pool.queued == 0 {
                    break;
                }
                pool.take()
            };
            match answer {
                Some(a) => self.put_back(a),
                None => break,
            }
        }
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

    /// The controller the queue belongs to, once connected.
    pub(crate) fn ctrl(&self) -> Option<Arc<Ctrl>> {
        self.ctrl.lock().clone()
    }

    /// `what` came back with `wc`'s error: the connection ends. A flush of ours is no news,
    /// nor one on a device that flushes before rdma_cm reports the host's close (iWARP): the
    /// disconnect ends the queue there; nor one before the queue started (the accept failed,
    /// which the port reports).
    fn failed(&self, wc: &Wc, what: &str) {
        match wc.status() {
            WcStatus::WrFlushErr
                if self.ending.load(Ordering::Acquire)
                    || self.broken.load(Ordering::Acquire)
                    || self.pd.device().flush_may_precede_disconnect()
                    || self.qp.lock().is_none() => {}
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
            self.in_capsule.fetch_add(1, Ordering::Relaxed);
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
        if post_recv(&wr.data().qp, cb).is_err() {
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
}

/// Gives an answer's pages back from its R/W contexts, lets its command ID go and makes it
/// idle.
fn finish(wr: &mut Wr<Answer>) {
    let a = wr.data_mut();
    // A kept capsule buffer goes back to the QP (dropped if the connection is ending).
    if let Some(cb) = a.capsule.take() {
        let _ = post_recv(&a.qp, cb);
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
    a.ctrl = None;
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
    fn answer_held(&self, sqe: Sqe, reply: Reply) -> bool {
        if self.broken.load(Ordering::Acquire) {
            return true;
        }
        let Some(mut wr) = self.pool.lock().take() else {
            return false;
        };
        let queue = wr.data().queue.clone();
        let a = wr.data_mut();
        a.sqe = Some(sqe);
        a.sq_head = self.sqhd.load(Ordering::Relaxed);
        a.data = Data::None;
        // The command ID, in flight since the request came, is free once this completes.
        a.claimed = true;
        if let Some(idle) = queue.reply(wr, reply) {
            queue.put_back(idle);
        }
        true
    }

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

/// Posts a capsule receive on `qp`; on failure (the QP is being drained) it is dropped.
fn post_recv(qp: &Qp<impl CanRecv>, wr: Wr<CmdBuf>) -> Result {
    qp.post_recv(wr, |c, ops| {
        let n = c.buf.len();
        ops.buf(&mut c.buf, 0..n)?;
        Ok(())
    })?;
    Ok(())
}
