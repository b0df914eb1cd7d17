// SPDX-License-Identifier: GPL-2.0

//! The target: RAM volumes, each exported on an address and port over rdma_cm.
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
//! before that buffer is posted again; an inline read's data follows the response in its
//! SEND. A command the target cannot honour (out of the volume, bad length) is answered with
//! an error; a message that is not a command ends the connection.

use crate::proto::{
    put, Command, Hello, Name, Opcode, Refusal, Response, Welcome, CMD_LEN, INLINE_MAX, MAX_IO,
    RESP_LEN,
};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use kernel::page::{Page, PAGE_SIZE};
use kernel::prelude::*;
use kernel::rdma::{
    cm::{CmId, ConnParam, Event, Handler, Id, PortSpace, Request, SockAddr},
    cq::{Cq, PollContext, Wc, WcStatus},
    device::Device,
    dma::{copy_from_pages, copy_to_pages, DmaBuf, FromDevice, ToDevice, MAX_SGE},
    mr::Remote,
    pd::Pd,
    qp::{Init, Qp, QpCaps, Rts},
    rw::RwCtx,
    wr::{Completion, Wr},
};
use kernel::sync::{Arc, Mutex, SpinLock};
use kernel::types::ScopeGuard;
use kernel::{new_mutex, new_spinlock};

/// A volume is kept in chunks of this size, each under its own lock.
const CHUNK: usize = 1 << 20;
/// The largest volume (the guests of the tests have 512 MiB).
pub(crate) const MAX_VOLUME: u64 = 1 << 30;
/// The block size volumes are exported with.
pub(crate) const BLOCK: u32 = 4096;
/// Pages of an I/O's staging buffer.
const IO_PAGES: usize = MAX_IO as usize / PAGE_SIZE;
/// Connections an export serves at once.
const MAX_CONNS: usize = 64;
/// Staging memory an export's connections may hold together (each takes two answers of
/// [`MAX_IO`] per tag when it is accepted): a peer cannot make the target allocate more.
const MAX_STAGING: u64 = 64 << 20;
/// Hardware queues an initiator may connect per disk (its queue index is below this).
const MAX_QUEUE_INDEX: u16 = 256;

/// A RAM volume.
pub(crate) struct Volume {
    pub(crate) name: Name,
    pub(crate) size: u64,
    chunks: KVec<Pin<KBox<SpinLock<KVVec<u8>>>>>,
}

impl Volume {
    /// Allocates a zeroed volume of `size` bytes (a multiple of [`BLOCK`], at most
    /// [`MAX_VOLUME`]).
    pub(crate) fn new(name: Name, size: u64) -> Result<Arc<Self>> {
        if size == 0 || size % u64::from(BLOCK) != 0 || size > MAX_VOLUME {
            return Err(EINVAL);
        }
        let n = (size as usize).div_ceil(CHUNK);
        let mut chunks = KVec::with_capacity(n, GFP_KERNEL)?;
        for i in 0..n {
            let len = CHUNK.min(size as usize - i * CHUNK);
            let bytes = KVVec::from_elem(0u8, len, GFP_KERNEL)?;
            chunks.push(
                KBox::pin_init(new_spinlock!(bytes, "rdma_rust_blk_chunk"), GFP_KERNEL)?,
                GFP_KERNEL,
            )?;
        }
        Ok(Arc::new(Self { name, size, chunks }, GFP_KERNEL)?)
    }

    /// Calls `f(chunk bytes, offset in the I/O)` for each chunk piece of `at .. at + len`, under
    /// the chunk's lock. The range was checked against the volume ([`Command::range`]).
    fn pieces(&self, at: u64, len: usize, mut f: impl FnMut(&mut [u8], usize) -> Result) -> Result {
        let mut done = 0;
        while done < len {
            let pos = at as usize + done;
            let (i, off) = (pos / CHUNK, pos % CHUNK);
            let chunk = self.chunks.get(i).ok_or(EINVAL)?;
            let mut bytes = chunk.lock();
            let n = (bytes.len() - off).min(len - done);
            f(&mut bytes[off..off + n], done)?;
            done += n;
        }
        Ok(())
    }

    fn read(&self, at: u64, pages: &mut [Page], len: usize) -> Result {
        self.pieces(at, len, |bytes, done| copy_to_pages(pages, done, bytes))
    }

    fn write(&self, at: u64, pages: &[Page], len: usize) -> Result {
        self.pieces(at, len, |bytes, done| copy_from_pages(pages, done, bytes))
    }

    /// Copies `at .. at + dst.len()` into `dst`.
    fn load(&self, at: u64, dst: &mut [u8]) -> Result {
        self.pieces(at, dst.len(), |bytes, done| {
            put(&mut dst[done..], 0, bytes);
            Ok(())
        })
    }

    /// Copies `src` into `at .. at + src.len()`.
    fn store(&self, at: u64, src: &[u8]) -> Result {
        self.pieces(at, src.len(), |bytes, done| {
            put(bytes, 0, &src[done..]);
            Ok(())
        })
    }

    fn zero(&self, at: u64, len: usize) -> Result {
        self.pieces(at, len, |bytes, _| {
            bytes.fill(0);
            Ok(())
        })
    }
}

/// An exported volume: its listener and the connections of its initiators.
#[pin_data]
pub(crate) struct Export {
    pub(crate) volume: Arc<Volume>,
    pub(crate) addr: SockAddr,
    #[pin]
    link: Mutex<Link>,
    closing: AtomicBool,
    pub(crate) commands: AtomicU64,
    pub(crate) errors: AtomicU64,
    /// Staging memory its connections hold.
    staging: AtomicU64,
}

/// What an export holds of rdma_cm: dropped in process context, outside the lock (destroying
/// an id waits for its handler, which may take it).
struct Link {
    listener: Option<CmId<TgtEv>>,
    sessions: KVec<Option<Session>>,
}

struct Session {
    id: CmId<TgtEv>,
    conn: Arc<TgtConn>,
}

impl Session {
    fn end(self) {
        let _ = self.id.disconnect();
        self.conn.teardown();
        drop(self.id);
    }
}

/// The event handler of an export's ids.
pub(crate) struct TgtEv {
    export: Arc<Export>,
}

impl Export {
    /// Exports `volume` on `addr` (the address of an RDMA device): binds and listens.
    pub(crate) fn new(volume: Arc<Volume>, addr: SockAddr) -> Result<Arc<Self>> {
        let export = Arc::pin_init(
            pin_init!(Export {
                volume,
                addr,
                link <- new_mutex!(Link { listener: None, sessions: KVec::new() }, "rdma_rust_blk_export"),
                closing: AtomicBool::new(false),
                commands: AtomicU64::new(0),
                errors: AtomicU64::new(0),
                staging: AtomicU64::new(0),
            }),
            GFP_KERNEL,
        )?;
        let id = CmId::new(
            PortSpace::Tcp,
            TgtEv {
                export: export.clone(),
            },
        )?;
        let listening = id.bind(addr).and_then(|()| id.listen(16));
        if let Err(e) = listening {
            pr_err!(
                "export {}: cannot listen on {addr}: {e:?}\n",
                export.volume.name
            );
            // The id holds the export: dropped here, it lets the export go too.
            drop(id);
            return Err(e);
        }
        if id.device().is_none() {
            pr_err!(
                "export {}: {addr} is not the address of an RDMA device\n",
                export.volume.name
            );
            drop(id);
            return Err(EINVAL);
        }
        export.link.lock().listener = Some(id);
        Ok(export)
    }

    /// The device the export listens on.
    pub(crate) fn device_name(&self) -> Option<kernel::str::CString> {
        let l = self.link.lock();
        let dev = l.listener.as_ref()?.device()?;
        kernel::str::CString::try_from_fmt(kernel::fmt!("{}", dev.name())).ok()
    }

    /// Whether the export listens on `dev`.
    pub(crate) fn is_on(&self, dev: &Device) -> bool {
        let l = self.link.lock();
        l.listener
            .as_ref()
            .and_then(|id| id.device())
            .is_some_and(|d| d.name().as_bytes() == dev.name().as_bytes())
    }

    /// Live connections.
    pub(crate) fn connections(&self) -> usize {
        self.link.lock().sessions.iter().flatten().count()
    }

    /// Stops listening and ends every connection. Process context; idempotent.
    pub(crate) fn close(&self) {
        self.closing.store(true, Ordering::Release);
        // The listener first: destroying it waits for a connection request being accepted,
        // whose session is then in the list taken next.
        let listener = self.link.lock().listener.take();
        drop(listener);
        let sessions = core::mem::take(&mut self.link.lock().sessions);
        for s in sessions.into_iter().flatten() {
            s.end();
        }
    }
}

impl Handler for TgtEv {
    fn event(&self, id: &Id, event: Event<'_, Self>) {
        let export = &self.export;
        match event {
            Event::ConnectRequest(req) => {
                if let Err(why) = export.accept(req) {
                    export.errors.fetch_add(1, Ordering::Relaxed);
                    pr_err!(
                        "export {}: connection refused: {why:?}\n",
                        export.volume.name
                    );
                }
            }
            Event::Disconnected | Event::DeviceRemoval => {
                // One connection ended (its handler runs here: dropping the id is allowed).
                let session = {
                    let mut l = export.link.lock();
                    l.sessions
                        .iter_mut()
                        .find(|s| {
                            s.as_ref()
                                .is_some_and(|s| core::ptr::eq(&*s.id as *const Id, id))
                        })
                        .and_then(Option::take)
                };
                if let Some(s) = session {
                    pr_info!(
                        "export {}: {} disconnected after {} commands\n",
                        export.volume.name,
                        Peer(id.peer_addr()),
                        s.conn.commands.load(Ordering::Relaxed)
                    );
                    s.end();
                }
            }
            Event::Established { .. } => {
                // A connection the peer broke before ib_cm had the RTU could not send its DREQ
                // then (ib_cm sends none before the connection is established): it goes now.
                let l = export.link.lock();
                let session = l.sessions.iter().flatten().find(|s| {
                    core::ptr::eq(&*s.id as *const Id, id) && s.conn.broken.load(Ordering::Acquire)
                });
                if let Some(s) = session {
                    let _ = s.id.disconnect();
                }
            }
            _ => {}
        }
    }
}

/// Shows an address in a message (`?` when the id has none).
struct Peer(Option<SockAddr>);

impl core::fmt::Display for Peer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            Some(a) => core::fmt::Display::fmt(&a, f),
            None => f.write_str("?"),
        }
    }
}

impl Export {
    /// A connection request: checked, then accepted with a connection of its own.
    fn accept(self: &Arc<Self>, req: Request<'_, TgtEv>) -> Result<(), Refusal> {
        let refuse = |req: Request<'_, TgtEv>, why: Refusal| {
            let _ = req.reject(&why.encode());
            Err(why)
        };
        if self.closing.load(Ordering::Acquire) {
            return refuse(req, Refusal::Busy);
        }
        let hello = match Hello::decode(req.private_data()) {
            Ok(h) => h,
            Err(why) => return refuse(req, why),
        };
        if hello.name != self.volume.name {
            return refuse(req, Refusal::NoVolume);
        }
        if hello.queue >= MAX_QUEUE_INDEX {
            return refuse(req, Refusal::BadQueue);
        }
        if self.connections() >= MAX_CONNS {
            return refuse(req, Refusal::Busy);
        }
        let peer = Peer(req.peer_addr());
        // As many RDMA READs outstanding as the peer accepts (and the device can issue).
        let reads = u32::from(hello.depth)
            .min(u32::from(req.initiator_depth()))
            .min(16);
        let staging = 2 * u64::from(hello.depth) * u64::from(MAX_IO);
        let reserved = self
            .staging
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                (s + staging <= MAX_STAGING).then_some(s + staging)
            });
        if reserved.is_err() {
            pr_err!(
                "export {}: {peer} refused: its {staging} bytes of staging memory would exceed the export's {MAX_STAGING}\n",
                self.volume.name
            );
            return refuse(req, Refusal::Busy);
        }
        // Given back when the connection goes (or here, if it never comes).
        let unreserve = ScopeGuard::new(|| {
            self.staging.fetch_sub(staging, Ordering::AcqRel);
        });
        let id = req
            .take(TgtEv {
                export: self.clone(),
            })
            .map_err(|_| Refusal::Busy)?;
        // From here a failure drops `id`, which refuses the connection.
        let (conn, qp) = TgtConn::open(&id, self, hello.depth, staging).map_err(|e| {
            pr_err!(
                "export {}: no connection for {peer}: {e:?}\n",
                self.volume.name
            );
            Refusal::Busy
        })?;
        let welcome = Welcome {
            block_size: BLOCK,
            max_io: MAX_IO,
            capacity: self.volume.size,
            inline_max: INLINE_MAX,
        }
        .encode();
        // The connection owns the reservation from here: its teardown gives it back.
        unreserve.dismiss();
        let reads = reads.min(id.device().map_or(0, |d| d.attrs().max_qp_init_rd_atom()));
        let accepted = id.accept(&ConnParam {
            private_data: &welcome,
            responder_resources: 0,
            initiator_depth: reads as u8,
            ..ConnParam::default()
        });
        let started = accepted
            .and_then(|()| qp.established())
            .and_then(|qp| conn.start(qp));
        if let Err(e) = started {
            pr_err!(
                "export {}: accepting {peer} failed: {e:?}\n",
                self.volume.name
            );
            conn.teardown();
            return Err(Refusal::Busy);
        }
        let mut l = self.link.lock();
        let free = l.sessions.iter().position(Option::is_none);
        if free.is_none() && l.sessions.reserve(1, GFP_KERNEL).is_err() {
            drop(l);
            conn.teardown();
            return Err(Refusal::Busy);
        }
        let session = Some(Session { id, conn });
        match free {
            Some(i) => l.sessions[i] = session,
            // Reserved above: cannot fail.
            None => {
                let _ = l.sessions.push(session, GFP_KERNEL);
            }
        }
        drop(l);
        pr_info!(
            "export {}: queue {} of {peer} connected (depth {})\n",
            self.volume.name,
            hello.queue,
            hello.depth
        );
        Ok(())
    }
}

/// One initiator queue's connection.
#[pin_data]
struct TgtConn {
    export: Arc<Export>,
    depth: u16,
    pd: Arc<Pd>,
    /// The QP once the connection is up, for its teardown.
    #[pin]
    qp: Mutex<Option<Arc<Qp<Rts>>>>,
    /// The idle answers, and the commands waiting for one.
    #[pin]
    pool: SpinLock<Pool>,
    commands: AtomicU64,
    broken: AtomicBool,
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
    fn open(
        id: &CmId<TgtEv>,
        export: &Arc<Export>,
        depth: u16,
        staging: u64,
    ) -> Result<(Arc<Self>, Qp<Init>)> {
        let dev = id.device().ok_or(ENODEV)?;
        let pd = Pd::new(&dev)?;
        let d = u32::from(depth);
        // Two answers per tag may be out at once (see `Pool`), each with its RDMA operations
        // (a scatter/gather entry per staging page, at most `MAX_SGE` per operation) and its
        // response; the core adds the registrations of the MR path for each R/W context.
        let answers = 2 * d;
        let sge = IO_PAGES.min(MAX_SGE);
        let send_depth = answers * (IO_PAGES.div_ceil(sge) as u32 + 1) + 4;
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
                broken: AtomicBool::new(false),
                staging: AtomicU64::new(staging),
            }),
            GFP_KERNEL,
        )?;
        let caps = QpCaps {
            send_depth,
            recv_depth: d,
            send_sge: sge as u32,
            rdma_ctxs: answers,
            port: id.port(),
            ..QpCaps::default()
        };
        let qp = id.create_qp(&pd, &cq, &cq, &caps)?;
        Ok((conn, qp))
    }

    /// The connection is up: two answers per tag, a receive per tag.
    fn start(self: &Arc<Self>, qp: Qp<Rts>) -> Result {
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
    fn teardown(&self) {
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
            let link = self.export.link.lock();
            let session = link
                .sessions
                .iter()
                .flatten()
                .find(|s| core::ptr::eq(&*s.conn, self));
            // Before ib_cm has the peer's RTU this sends nothing: the `Established` event
            // disconnects then.
            if let Some(s) = session {
                let _ = s.id.disconnect();
            }
        }
    }

    /// Puts an inline write's data into the volume, from the receive buffer it landed in: the
    /// command may wait for an answer, the buffer may not. A command out of the volume stores
    /// nothing (its answer is an error); `Err` only if the volume failed, which ends the
    /// connection.
    fn store_inline(&self, cmd: &Command, data: &[u8]) -> Result {
        let volume = &self.export.volume;
        match cmd.range(volume.size, BLOCK) {
            Ok(range) if cmd.op == Opcode::WriteInline => volume.store(range.start, data),
            _ => Ok(()),
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
                self.export.errors.fetch_add(1, Ordering::Relaxed);
                pr_err!(
                    "export {}: {:?} of {} bytes at sector {}: outside the volume or misaligned\n",
                    volume.name,
                    cmd.op,
                    cmd.len,
                    cmd.sector
                );
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
            if wc.status() != WcStatus::WrFlushErr {
                conn.protocol_error(format_args!("command receive failed: {:?}", wc.status()));
            }
            return;
        }
        let n = wc.byte_len() as usize;
        let cmd = match wr.data_mut().buf.as_slice().get(..n) {
            Some(b) => Command::decode(b).and_then(|(cmd, data)| {
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
            if wc.status() != WcStatus::WrFlushErr {
                conn.protocol_error(format_args!("an answer failed: {:?}", wc.status()));
            }
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
