// SPDX-License-Identifier: GPL-2.0

//! One initiator queue's connection to an export: its requests and their completions.
//!
//! A connection serves one initiator queue. Its CQ is polled from a workqueue, where commands
//! are carried out: preparing an [`RwCtx`] (the core's R/W API) may sleep, and a volume's
//! chunks are copied under their locks. A connection keeps a pool of [`Answer`] requests, each
//! with its staging pages and response buffer, posted again for every command: nothing is
//! allocated per I/O but the R/W context the core builds. The pool has two answers per tag the
//! initiator may use: an answer is busy until its SEND completes, and the initiator, which has
//! the response by then, may already have sent the tag's next command.
//!
//! A write: RDMA READ of the initiator's buffer into the staging pages, then the pages go to
//! the volume and the response goes back in a SEND with invalidate of the initiator's rkey. A
//! read: the volume's bytes into the staging pages, then RDMA WRITE and the response in one
//! post. An inline write's data goes into the volume from the receive buffer it landed in,
//! before that buffer is posted again (a block write's too: the same write, its command in the
//! receive's immediate data); an inline read's data follows the response in its SEND. A
//! command the target cannot honour (out of the volume, bad length) is answered with an
//! error, up to [`BAD_COMMANDS_MAX`] of them; a message that is not a command ends the
//! connection.

use super::{Export, TgtEv, BLOCK, IO_PAGES};
use crate::proto::{Command, Opcode, Response, CMD_LEN, INLINE_MAX, RESP_LEN};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use kernel::page::Page;
use kernel::prelude::*;
use kernel::rdma::{
    cm::CmId,
    cq::{Cq, PollContext, Wc, WcOpcode, WcStatus},
    dma::{DmaBuf, FromDevice, ToDevice},
    mr::Remote,
    pd::Pd,
    qp::{Init, Qp, QpCaps, Rts},
    rw::RwCtx,
    wr::{Completion, Wr},
};
use kernel::sync::{Arc, Mutex, SpinLock};
use kernel::{new_mutex, new_spinlock};

/// Well-formed commands a connection may send that the target cannot honour (out of the
/// volume, misaligned, of a bad length) before the target ends it, at the last of them. A
/// disk never sends one (the block layer keeps its I/O within the disk and its block size);
/// a peer that does is broken or hostile, and each costs the target an answer. The first is
/// logged, the others only counted (the export's `errors`), so a stream of them does not
/// flood the log: two lines per connection at most, and a new connection costs the peer a
/// handshake.
const BAD_COMMANDS_MAX: u32 = 8;

/// One initiator queue's connection.
#[pin_data]
pub(super) struct TgtConn {
    export: Arc<Export>,
    depth: u16,
    pd: Arc<Pd>,
    /// The QP once the connection is up, for its teardown.
    #[pin]
    qp: Mutex<Option<Arc<Qp<Rts>>>>,
    /// The idle answers, and the commands waiting for one.
    #[pin]
    pool: SpinLock<Pool>,
    pub(super) commands: AtomicU64,
    /// Commands it could not honour (see [`BAD_COMMANDS_MAX`]).
    bad_commands: AtomicU32,
    pub(super) broken: AtomicBool,
    /// This side is ending the connection (a disconnect, a teardown): the flushes that follow
    /// are that, not news (see [`TgtConn::failed`]).
    ending: AtomicBool,
    /// The export's staging memory this connection holds, given back by its teardown.
    staging: AtomicU64,
}

/// A connection's idle answers and the commands that found none, in order.
#[derive(Default)]
struct Pool {
    /// A stack: the idle answers are the first `idle` entries, the rest are `None` (busy).
    /// Taking and giving back cost the same at any depth (a scan for a free entry took up to
    /// 2 x depth steps per command, under the lock).
    answers: KVec<Option<Wr<Answer>>>,
    idle: usize,
    waiting: KVec<Option<Command>>,
    /// The oldest waiting command, and how many wait (a ring over `waiting`).
    head: usize,
    queued: usize,
}

impl Pool {
    /// An idle answer, or `None` with `cmd` queued (there is room for every command the
    /// initiator may have out; `false` if there is none).
    fn take_or_queue(&mut self, cmd: Command) -> Result<Option<Wr<Answer>>, ()> {
        if let Some(i) = self.idle.checked_sub(1) {
            if let Some(a) = self.answers.get_mut(i).and_then(Option::take) {
                self.idle = i;
                return Ok(Some(a));
            }
        }
        let n = self.waiting.len();
        if self.queued == n {
            return Err(());
        }
        self.waiting[(self.head + self.queued) % n] = Some(cmd);
        self.queued += 1;
        Ok(None)
    }

    /// The oldest waiting command, if any.
    fn next_waiting(&mut self) -> Option<Command> {
        if self.queued == 0 {
            return None;
        }
        let cmd = self.waiting[self.head].take();
        self.head = (self.head + 1) % self.waiting.len();
        self.queued -= 1;
        cmd
    }

    /// Gives an answer back to the pool.
    fn put(&mut self, wr: Wr<Answer>) {
        if let Some(slot) = self.answers.get_mut(self.idle) {
            *slot = Some(wr);
            self.idle += 1;
        }
        // Otherwise the connection is being torn down: the answer goes with it.
    }
}

/// Where an answer's command is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    Idle,
    /// A write's data is being read from the initiator.
    Fetching,
    /// The answer (and a read's data) is on its way.
    Answering,
}

/// A command's request: staging pages, R/W context and response buffer.
struct Answer {
    conn: Arc<TgtConn>,
    qp: Arc<Qp<Rts>>,
    stage: Stage,
    pages: Option<KVec<Page>>,
    to_peer: Option<RwCtx<ToDevice>>,
    from_peer: Option<RwCtx<FromDevice>>,
    resp: DmaBuf<ToDevice>,
    cmd: Option<Command>,
}

/// A posted receive for one command.
struct CmdBuf {
    conn: Arc<TgtConn>,
    qp: Arc<Qp<Rts>>,
    buf: DmaBuf<FromDevice>,
}

impl TgtConn {
    /// The resources of a new connection on `id`: its CQ and QP (in Init until accepted).
    pub(super) fn open(
        id: &CmId<TgtEv>,
        export: &Arc<Export>,
        depth: u16,
        staging: u64,
    ) -> Result<(Arc<Self>, Qp<Init>)> {
        let dev = id.device().ok_or(ENODEV)?;
        let pd = Pd::new(&dev)?;
        let d = u32::from(depth);
        // Two answers per tag may be out at once (see `Pool`), each with its RDMA operations
        // and its response; the core adds the registrations of the MR path for each R/W
        // context. An operation names a scatter/gather entry per staging page: an I/O's pages
        // in one operation if the device takes that many (one message, one acknowledgement),
        // as many as it takes otherwise (READs also within `max_sge_rd`).
        let answers = 2 * d;
        let attrs = dev.attrs();
        let rw_sge = (IO_PAGES as u32).min(attrs.max_send_sge());
        let per_op = rw_sge.min(attrs.max_sge_rd()).max(1);
        let send_depth = answers * ((IO_PAGES as u32).div_ceil(per_op) + 1) + 4;
        // The CQ takes every send queue entry (with the core's: up to 3 per context) and every
        // receive.
        let cq = Cq::new(
            &dev,
            send_depth + 3 * answers + d + 4,
            0,
            PollContext::Workqueue,
        )?;
        // `pin_init!` moves what it names.
        let conn_pd = pd.clone();
        let conn = Arc::pin_init(
            pin_init!(TgtConn {
                export: export.clone(),
                depth,
                pd: conn_pd,
                qp <- new_mutex!(None, "rdma_rust_blk_tgt_qp"),
                pool <- new_spinlock!(Pool::default(), "rdma_rust_blk_tgt_pool"),
                commands: AtomicU64::new(0),
                bad_commands: AtomicU32::new(0),
                broken: AtomicBool::new(false),
                ending: AtomicBool::new(false),
                staging: AtomicU64::new(staging),
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
        Ok((conn, qp))
    }

    /// The connection is up: two answers per tag, a receive per tag.
    pub(super) fn start(self: &Arc<Self>, qp: Qp<Rts>) -> Result {
        let qp = Arc::new(qp, GFP_KERNEL)?;
        *self.qp.lock() = Some(qp.clone());
        let n = 2 * self.depth as usize;
        let mut answers = KVec::with_capacity(n, GFP_KERNEL)?;
        for _ in 0..n {
            let mut pages = KVec::with_capacity(IO_PAGES, GFP_KERNEL)?;
            for _ in 0..IO_PAGES {
                pages.push(Page::alloc_page(GFP_KERNEL)?, GFP_KERNEL)?;
            }
            let answer = Answer {
                conn: self.clone(),
                qp: qp.clone(),
                stage: Stage::Idle,
                pages: Some(pages),
                to_peer: None,
                from_peer: None,
                resp: DmaBuf::<ToDevice>::alloc(
                    &self.pd,
                    RESP_LEN + INLINE_MAX as usize,
                    GFP_KERNEL,
                )?,
                cmd: None,
            };
            answers.push(Some(Wr::new(answer, GFP_KERNEL)?), GFP_KERNEL)?;
        }
        let waiting = KVec::from_elem(None, n, GFP_KERNEL)?;
        *self.pool.lock() = Pool {
            idle: answers.len(),
            answers,
            waiting,
            head: 0,
            queued: 0,
        };
        for _ in 0..self.depth {
            let cb = CmdBuf {
                conn: self.clone(),
                qp: qp.clone(),
                buf: DmaBuf::<FromDevice>::alloc(
                    &self.pd,
                    CMD_LEN + INLINE_MAX as usize,
                    GFP_KERNEL,
                )?,
            };
            post_recv(Wr::new(cb, GFP_KERNEL)?)?;
        }
        Ok(())
    }

    /// Frees the connection: every request comes back (drain), and the answers, which hold
    /// the connection, are dropped. Process context, not a handler of its CQ.
    pub(super) fn teardown(&self) {
        self.ending();
        let qp = self.qp.lock().take();
        if let Some(qp) = &qp {
            let _ = qp.set_error();
            let _ = qp.drain();
        }
        let pool = core::mem::take(&mut *self.pool.lock());
        drop(pool);
        drop(qp);
        let staging = self.staging.swap(0, Ordering::AcqRel);
        self.export.staging.fetch_sub(staging, Ordering::AcqRel);
    }

    /// This side is about to end the connection (before a disconnect, which moves the QP to
    /// the error state): its requests come back flushed from now on, and that is no failure.
    pub(super) fn ending(&self) {
        self.ending.store(true, Ordering::Release);
    }

    /// Forces the connection's QP into the error state, as a device's fatal error would, with
    /// nothing to report but flushes (`fail`: for testing how a target notices); whether it
    /// did (a connection not started, or torn down, has no QP). Process context.
    pub(super) fn force_error(&self) -> bool {
        self.qp
            .lock()
            .as_ref()
            .is_some_and(|qp| qp.set_error().is_ok())
    }

    /// `what`, a request of the connection, came back with `wc`'s error. An error ends the
    /// connection. So does a flush that nothing of ours asked for: the QP failed without a
    /// completion in error of its own (the responder refused a request of the peer's, which
    /// moves the QP to the error state and reports nothing here, or the device failed it):
    /// the initiator learns it from the disconnect at once, instead of from its own requests'
    /// retries or keep-alives, and not at all if its disk is idle. Process context (the CQ's
    /// workqueue).
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

    /// Ends a connection whose peer broke the protocol: its QP goes to the error state, so
    /// nothing more of the peer's is carried out, and a DREQ tells the peer at once (otherwise
    /// it would learn only when a later request of its own timed out). The session itself ends
    /// with the disconnect's event. Process context (the CQ's workqueue), never under the
    /// export's lock.
    fn protocol_error(&self, what: core::fmt::Arguments<'_>) {
        self.export.errors.fetch_add(1, Ordering::Relaxed);
        if !self.broken.swap(true, Ordering::AcqRel) {
            pr_err!(
                "export {}: {what}: connection ended\n",
                self.export.volume.name
            );
            if let Some(qp) = self.qp.lock().as_ref() {
                let _ = qp.set_error();
            }
            self.export.disconnect(self);
        }
    }

    /// Puts an inline write's data into the volume, from the receive buffer it landed in: the
    /// command may wait for an answer, the buffer may not. A command out of the volume stores
    /// nothing (its answer is an error), nor does one whose tag is over the depth (which ends
    /// the connection, see [`TgtConn::execute`]); `Err` only if the volume failed, which ends
    /// the connection.
    fn store_inline(&self, cmd: &Command, data: &[u8]) -> Result {
        if cmd.op != Opcode::WriteInline || cmd.tag >= self.depth {
            return Ok(());
        }
        let volume = &self.export.volume;
        match cmd.range(volume.size, BLOCK) {
            Ok(range) => volume.store(range.start, data),
            Err(_) => Ok(()),
        }
    }

    /// Takes a new command (the CQ's workqueue): carried out now, or when an answer is free.
    fn execute(&self, cmd: Command) {
        self.commands.fetch_add(1, Ordering::Relaxed);
        self.export.commands.fetch_add(1, Ordering::Relaxed);
        if cmd.tag >= self.depth {
            self.protocol_error(format_args!(
                "command with tag {}, over the queue depth {}",
                cmd.tag, self.depth
            ));
            return;
        }
        let taken = self.pool.lock().take_or_queue(cmd);
        match taken {
            Ok(Some(wr)) => {
                if let Some(wr) = self.carry_out(wr, cmd) {
                    self.put_back(wr);
                }
            }
            Ok(None) => {}
            Err(()) => self.protocol_error(format_args!(
                "more commands than the queue depth {}",
                self.depth
            )),
        }
    }

    /// Carries out `cmd` with the answer `wr`.
    /// `Some(wr)` when it could not be posted (the connection is ending): the answer is idle.
    fn carry_out(&self, mut wr: Wr<Answer>, cmd: Command) -> Option<Wr<Answer>> {
        wr.data_mut().cmd = Some(cmd);
        let volume = &self.export.volume;
        let range = match cmd.range(volume.size, BLOCK) {
            Ok(r) => r,
            Err(e) => {
                let bad = self.bad_commands.fetch_add(1, Ordering::Relaxed) + 1;
                if bad >= BAD_COMMANDS_MAX {
                    self.protocol_error(format_args!(
                        "{BAD_COMMANDS_MAX} commands it cannot honour"
                    ));
                    finish(&mut wr);
                    return Some(wr);
                }
                self.export.errors.fetch_add(1, Ordering::Relaxed);
                if bad == 1 {
                    pr_err!(
                        "export {}: {:?} of {} bytes at sector {}: outside the volume or misaligned (answered with an error; the connection ends at the {BAD_COMMANDS_MAX}th such command)\n",
                        volume.name,
                        cmd.op,
                        cmd.len,
                        cmd.sector
                    );
                }
                return answer(wr, Err(e));
            }
        };
        let len = cmd.len as usize;
        let remote = Remote {
            addr: cmd.addr,
            rkey: cmd.rkey,
        };
        match cmd.op {
            Opcode::Read => {
                let a = wr.data_mut();
                let Some(mut pages) = a.pages.take() else {
                    return answer(wr, Err(EIO));
                };
                if let Err(e) = volume.read(range.start, &mut pages, len) {
                    a.pages = Some(pages);
                    return answer(wr, Err(e));
                }
                match RwCtx::<ToDevice>::new(&a.qp, pages, len, remote) {
                    Ok(rw) => {
                        a.to_peer = Some(rw);
                        answer(wr, Ok(()))
                    }
                    Err((e, pages)) => {
                        a.pages = Some(pages);
                        answer(wr, Err(e))
                    }
                }
            }
            Opcode::Write => {
                let a = wr.data_mut();
                let Some(pages) = a.pages.take() else {
                    return answer(wr, Err(EIO));
                };
                match RwCtx::<FromDevice>::new(&a.qp, pages, len, remote) {
                    Ok(rw) => {
                        a.from_peer = Some(rw);
                        a.stage = Stage::Fetching;
                        let qp = a.qp.clone();
                        let posted = qp.post_send(wr, |a, ops| {
                            ops.rw(a.from_peer.as_mut().ok_or(EINVAL)?)?;
                            Ok(())
                        });
                        match posted {
                            Ok(()) => None,
                            Err(e) => {
                                let mut wr = e.wr;
                                let a = wr.data_mut();
                                a.stage = Stage::Idle;
                                a.pages = a.from_peer.take().map(RwCtx::into_pages);
                                answer(wr, Err(e.err))
                            }
                        }
                    }
                    Err((e, pages)) => {
                        a.pages = Some(pages);
                        answer(wr, Err(e))
                    }
                }
            }
            Opcode::ReadInline => {
                let loaded = match wr
                    .data_mut()
                    .resp
                    .as_mut_slice()
                    .get_mut(RESP_LEN..RESP_LEN + len)
                {
                    Some(b) => volume.load(range.start, b),
                    None => Err(EINVAL),
                };
                answer(wr, loaded)
            }
            // Its data went into the volume when it landed (`CmdBuf::done`).
            Opcode::WriteInline => answer(wr, Ok(())),
            Opcode::Discard => answer(wr, volume.zero(range.start, len)),
            Opcode::Flush => answer(wr, Ok(())),
        }
    }

    /// An answer is idle again: it carries out the waiting commands, oldest first, or goes
    /// back to the pool. A loop, not a recursion: on a connection that is ending every post
    /// fails at once.
    fn put_back(&self, mut wr: Wr<Answer>) {
        loop {
            let cmd = {
                let mut pool = self.pool.lock();
                match pool.next_waiting() {
                    Some(cmd) => cmd,
                    None => {
                        pool.put(wr);
                        return;
                    }
                }
            };
            match self.carry_out(wr, cmd) {
                Some(idle) => wr = idle,
                None => return,
            }
        }
    }
}

/// Posts a command receive; on failure (the QP is being drained) it is dropped.
fn post_recv(wr: Wr<CmdBuf>) -> Result {
    let qp = wr.data().qp.clone();
    qp.post_recv(wr, |c, ops| {
        ops.buf(&mut c.buf, 0..CMD_LEN + INLINE_MAX as usize)?;
        Ok(())
    })?;
    Ok(())
}

/// Sends the answer of `wr`'s command, with `status`; a read's data goes first (its R/W
/// context is in `to_peer`), an inline read's after the response (loaded by `carry_out`). A
/// command that named a buffer is answered with a SEND with invalidate of its rkey, so the
/// initiator's buffer is its own again when the answer lands.
///
/// `Some(wr)`, idle again, if it could not be posted (the connection is ending, and is ended).
fn answer(mut wr: Wr<Answer>, status: Result) -> Option<Wr<Answer>> {
    let a = wr.data_mut();
    let Some(cmd) = a.cmd else {
        return Some(wr);
    };
    let status = match status {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    };
    if status != 0 {
        // No data goes with a failed command.
        if let Some(rw) = a.to_peer.take() {
            a.pages = Some(rw.into_pages());
        }
    }
    Response {
        tag: cmd.tag,
        status,
    }
    .encode(a.resp.as_mut_slice());
    let len = if status == 0 && cmd.op == Opcode::ReadInline {
        RESP_LEN + cmd.len as usize
    } else {
        RESP_LEN
    };
    a.stage = Stage::Answering;
    let qp = a.qp.clone();
    let posted = qp.post_send(wr, |a, ops| {
        if let Some(rw) = a.to_peer.as_mut() {
            ops.rw(rw)?;
        }
        if cmd.has_data() {
            ops.send_inv(&a.resp, 0..len, cmd.rkey)?;
        } else {
            ops.send(&a.resp, 0..len)?;
        }
        Ok(())
    });
    match posted {
        Ok(()) => None,
        Err(e) => {
            let mut wr = e.wr;
            let conn = wr.data().conn.clone();
            conn.protocol_error(format_args!("cannot post an answer: {:?}", e.err));
            finish(&mut wr);
            Some(wr)
        }
    }
}

/// Gives an answer's pages back from its R/W contexts and makes it idle.
fn finish(wr: &mut Wr<Answer>) {
    let a = wr.data_mut();
    if let Some(rw) = a.to_peer.take() {
        a.pages = Some(rw.into_pages());
    }
    if let Some(rw) = a.from_peer.take() {
        a.pages = Some(rw.into_pages());
    }
    a.stage = Stage::Idle;
    a.cmd = None;
}

impl Completion for CmdBuf {
    fn done(mut wr: Wr<Self>, wc: &Wc) {
        let conn = wr.data().conn.clone();
        if !wc.is_ok() {
            conn.failed(wc, "a command's receive");
            return;
        }
        let n = wc.byte_len() as usize;
        // A SEND with immediate data is a block write: the data alone, the command in the
        // immediate. (No RDMA WRITE with immediate is ours: the target grants no access to its
        // memory.)
        let imm = wc.imm_data();
        let cmd = match wr.data_mut().buf.as_slice().get(..n) {
            Some(b) => match (wc.opcode(), imm) {
                (Some(WcOpcode::Recv), Some(imm)) => {
                    Command::from_block_write(imm, n, BLOCK).map(|cmd| (cmd, b))
                }
                (Some(WcOpcode::Recv), None) => Command::decode(b),
                _ => Err(EPROTO),
            }
            .and_then(|(cmd, data)| {
                conn.store_inline(&cmd, data)?;
                Ok(cmd)
            }),
            None => Err(EPROTO),
        };
        // The buffer is free again: the next command can land in it.
        if post_recv(wr).is_err() {
            return;
        }
        match cmd {
            Ok(cmd) => conn.execute(cmd),
            Err(_) if imm.is_some() => {
                conn.protocol_error(format_args!("a block write of {n} bytes, not one block"))
            }
            Err(_) => {
                conn.protocol_error(format_args!("a message of {n} bytes that is not a command"))
            }
        }
    }
}

impl Completion for Answer {
    fn done(mut wr: Wr<Self>, wc: &Wc) {
        let conn = wr.data().conn.clone();
        if !wc.is_ok() {
            conn.failed(wc, "an answer");
            finish(&mut wr);
            conn.put_back(wr);
            return;
        }
        if wr.data().stage == Stage::Fetching {
            // A write's data is here: into the volume, then the answer.
            let a = wr.data_mut();
            let (Some(rw), Some(cmd)) = (a.from_peer.take(), a.cmd) else {
                finish(&mut wr);
                conn.put_back(wr);
                return;
            };
            let pages = rw.into_pages();
            let start = cmd.sector * crate::proto::SECTOR;
            let stored = conn.export.volume.write(start, &pages, cmd.len as usize);
            a.pages = Some(pages);
            if let Some(wr) = answer(wr, stored) {
                conn.put_back(wr);
            }
            return;
        }
        finish(&mut wr);
        conn.put_back(wr);
    }
}
