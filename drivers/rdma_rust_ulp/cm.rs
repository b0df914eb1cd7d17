// SPDX-License-Identifier: GPL-2.0

//! Runs over the RDMA connection manager: a peer found by its IP address.
//!
//! RC runs speak rping's protocol (rdma-core's `librdmacm/examples/rping.c`, also krping's), so
//! that either side can be `rping`. Each round trip:
//!
//! 1. the client SENDs the address, rkey and length of its source buffer (16 bytes, big
//!    endian: `u64 addr, u32 rkey, u32 len`), which holds `rdma-ping-N: ` and a run of
//!    letters, NUL-terminated;
//! 2. the server RDMA READs that buffer, then SENDs a "go ahead" (16 bytes);
//! 3. the client SENDs the address, rkey and length of its sink buffer;
//! 4. the server RDMA WRITEs what it read into the sink, then SENDs a "go ahead";
//! 5. the client checks that the sink matches the source.
//!
//! Every step after the connection is made runs in completion handlers (softirq by default):
//! each request is owned by its buffer's holder and posted again, no allocation or sleep.
//! A server accepts any number of connections, each with its own QP and buffer, and counts
//! the round trips of all of them; its `count` ends the run.
//!
//! UD runs: the server creates one UD QP on its listener and answers every SIDR request with
//! it; the client's ESTABLISHED event gives it the server's QP number, Q_Key and an address
//! handle, and from there the run is an ordinary UD client run ([`crate::run`]).
//!
//! A client connects with 8 bytes of private data, `RRUL` and its buffer size (little
//! endian); a server that cannot take that size rejects the connection with `RRUL` and its
//! own limit, which the client reports. rping sends no private data.

use crate::ctl::{Role, Spec};
use crate::run::{check_ud_size, register, Res, Run};
use crate::stats::Stats;
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::prelude::*;
use kernel::rdma::{
    ah::Ah,
    cm::{CmId, ConnParam, Event, Handler, Id, PortSpace, Request, UDP_QKEY},
    cq::{Cq, Wc},
    device::Device,
    dma::DmaBuf,
    mr::Mr,
    pd::Pd,
    qp::{Init, Qp, QpCaps, QpType, Rts},
    sync::{Completion as Signal, SpinLockBh},
    wr::{Completion, Remote, Wr},
};
use kernel::sync::{Arc, Mutex};
use kernel::time::Ktime;
use kernel::{new_mutex, new_spinlock_bh};

/// Bytes of rping's buffer advertisement (`struct rping_rdma_info`).
const INFO_LEN: usize = 16;
/// How long address and route resolution may take.
const RESOLVE_MS: u32 = 2000;
/// How long a connection may take to be established (or refused).
const CONNECT_MS: u32 = 30_000;
/// Connections a server run serves at once.
const MAX_SESSIONS: usize = 8;
/// Private data magic of this ULP.
const MAGIC: &[u8; 4] = b"RRUL";
const PAGE: usize = 4096;

fn now_ns() -> i64 {
    Ktime::ktime_get().to_ns()
}

/// A buffer advertisement.
#[derive(Clone, Copy)]
struct Info {
    addr: u64,
    rkey: u32,
    len: u32,
}

impl Info {
    fn encode(self, b: &mut [u8]) {
        if b.len() >= INFO_LEN {
            b[..8].copy_from_slice(&self.addr.to_be_bytes());
            b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
            b[12..16].copy_from_slice(&self.len.to_be_bytes());
        }
    }

    fn decode(b: &[u8]) -> Option<Self> {
        Some(Info {
            addr: u64::from_be_bytes(b.get(..8)?.try_into().ok()?),
            rkey: u32::from_be_bytes(b.get(8..12)?.try_into().ok()?),
            len: u32::from_be_bytes(b.get(12..16)?.try_into().ok()?),
        })
    }
}

/// rping's message header for ping `n`: `rdma-ping-N: `.
struct Header {
    buf: [u8; 32],
    len: usize,
}

impl Header {
    fn new(n: u64) -> Self {
        let mut h = Header {
            buf: [0; 32],
            len: 0,
        };
        let _ = core::fmt::Write::write_fmt(&mut h, format_args!("rdma-ping-{n}: "));
        h
    }
}

impl core::fmt::Write for Header {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let end = self.len + s.len();
        self.buf
            .get_mut(self.len..end)
            .ok_or(core::fmt::Error)?
            .copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// Byte `i` of rping's `size`-byte message `n` with header `h`: the header, then letters
/// 'A'..='z' in turn from the n-th one, then a NUL.
fn ping_byte(h: &Header, n: u64, size: usize, i: usize) -> u8 {
    let hl = h.len;
    if i + 1 == size {
        0
    } else if i < hl {
        h.buf[i]
    } else {
        65 + ((n % 58) as usize + (i - hl)).rem_euclid(58) as u8
    }
}

/// The ping number of `data` if it is a well-formed rping message.
fn check_ping(data: &[u8]) -> Option<u64> {
    let rest = data.strip_prefix(b"rdma-ping-")?;
    let digits = rest.iter().take_while(|c| c.is_ascii_digit()).count();
    if digits == 0 || digits > 19 {
        return None;
    }
    let mut n: u64 = 0;
    for &d in &rest[..digits] {
        n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    let h = Header::new(n);
    let ok = data
        .iter()
        .enumerate()
        .all(|(i, &b)| b == ping_byte(&h, n, data.len(), i));
    ok.then_some(n)
}

/// Where a connection is in the round trip.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Not started, or stopped.
    Idle,
    /// Client: source advertised, waiting for the first go ahead.
    WaitGo1,
    /// Client: sink advertised, waiting for the second.
    WaitGo2,
    /// Server: waiting for the source advertisement.
    WaitSource,
    /// Server: reading the source.
    Reading,
    /// Server: waiting for the sink advertisement.
    WaitSink,
    /// Server: writing the sink.
    Writing,
}

/// The state of a connection, changed by its handlers under [`Conn::st`].
struct Ping {
    phase: Phase,
    /// The two SEND requests (client: source and sink advertisements; server: the two go
    /// aheads), parked here while not posted.
    sends: [Option<Wr<Msg>>; 2],
    /// A SEND wanted while its request was still out: posted when it comes back.
    pending: [bool; 2],
    /// Server: the READ/WRITE request.
    xfer: Option<Wr<Xfer>>,
    /// Client: the source and sink buffers, registered for remote read and write.
    source: Option<Mr>,
    sink: Option<Mr>,
    /// Client: the ping in flight; server: the ping expected next.
    seq: u64,
    /// Server: bytes read from the source.
    len: u32,
    started_ns: i64,
    /// Server: the go ahead in flight (SEND slot 1) ends the run's last round trip; the run
    /// ends when it has been delivered (or has failed), not before: ending it tears the
    /// connection down, which would flush a go ahead still on its way.
    last_round: bool,
}

/// One RC connection of a ping run.
#[pin_data]
pub(crate) struct Conn {
    run: Arc<Run>,
    server: bool,
    size: usize,
    /// Set once the connection stops for good.
    ended: AtomicBool,
    #[pin]
    qp: SpinLockBh<Option<Arc<Qp<Rts>>>>,
    #[pin]
    st: SpinLockBh<Ping>,
}

/// Slot numbers of [`Msg`]: the two sends and the receive.
const RECV: usize = 2;

/// A 16-byte SEND or receive.
struct Msg {
    conn: Arc<Conn>,
    buf: DmaBuf,
    slot: usize,
}

/// The server's RDMA READ/WRITE of the ping data.
struct Xfer {
    conn: Arc<Conn>,
    buf: DmaBuf,
}

impl Conn {
    fn new(run: &Arc<Run>, server: bool, size: usize) -> Result<Arc<Conn>> {
        Arc::pin_init(
            pin_init!(Conn {
                run: run.clone(),
                server,
                size,
                ended: AtomicBool::new(false),
                qp <- new_spinlock_bh!(None, "rdma_rust_ulp_cm_qp"),
                st <- new_spinlock_bh!(Ping {
                    phase: Phase::Idle,
                    sends: [None, None],
                    pending: [false, false],
                    xfer: None,
                    source: None,
                    sink: None,
                    seq: 0,
                    len: 0,
                    started_ns: 0,
                    last_round: false,
                }, "rdma_rust_ulp_cm_ping"),
            }),
            GFP_KERNEL,
        )
    }

    /// Allocates the requests and posts the receive on `qp` (before the connection is up).
    fn prepare(self: &Arc<Self>, qp: &Qp<Init>, pd: &Arc<Pd>) -> Result {
        let recv = Wr::new(
            Msg {
                conn: self.clone(),
                buf: DmaBuf::new(pd, INFO_LEN, GFP_KERNEL)?,
                slot: RECV,
            },
            GFP_KERNEL,
        )?;
        qp.post_recv(recv, |m, ops| {
            ops.buf(&m.buf, 0..INFO_LEN)?;
            Ok(())
        })?;
        let mut sends = [None, None];
        for (slot, s) in sends.iter_mut().enumerate() {
            *s = Some(Wr::new(
                Msg {
                    conn: self.clone(),
                    buf: DmaBuf::new(pd, INFO_LEN, GFP_KERNEL)?,
                    slot,
                },
                GFP_KERNEL,
            )?);
        }
        let xfer = if self.server {
            Some(Wr::new(
                Xfer {
                    conn: self.clone(),
                    buf: DmaBuf::new(pd, self.size, GFP_KERNEL)?,
                },
                GFP_KERNEL,
            )?)
        } else {
            None
        };
        let mut st = self.st.lock();
        st.sends = sends;
        st.xfer = xfer;
        Ok(())
    }

    /// The connection is up on `qp`: a server waits for the first advertisement; a client
    /// registers its buffers (process context) and sends the first one.
    fn begin(self: &Arc<Self>, qp: Qp<Rts>, cq: &Cq) -> Result {
        let qp = Arc::new(qp, GFP_KERNEL)?;
        *self.qp.lock() = Some(qp.clone());
        if self.server {
            self.st.lock().phase = Phase::WaitSource;
            return Ok(());
        }
        let pages = (self.size.div_ceil(PAGE) + 1) as u32;
        let mut mrs = [None, None];
        for m in mrs.iter_mut() {
            let mut mr = Mr::new(qp.pd(), pages)?;
            mr.map(DmaBuf::new(qp.pd(), self.size, GFP_KERNEL)?)
                .map_err(|(e, _)| e)?;
            *m = Some(register(&qp, cq, mr)?);
        }
        let [Some(mut source), Some(sink)] = mrs else {
            return Err(EINVAL);
        };
        fill_ping(&mut source, 0, self.size)?;
        let mut st = self.st.lock();
        for (slot, mr) in [&source, &sink].into_iter().enumerate() {
            let r = mr.remote();
            if let Some(wr) = st.sends[slot].as_mut() {
                Info {
                    addr: r.addr,
                    rkey: r.rkey,
                    len: self.size as u32,
                }
                .encode(wr.data_mut().buf.as_mut_slice());
            }
        }
        st.source = Some(source);
        st.sink = Some(sink);
        st.seq = 0;
        st.phase = Phase::WaitGo1;
        st.started_ns = now_ns();
        self.advertise(&mut st, 0);
        Ok(())
    }

    /// Posts SEND `slot`, or marks it wanted if it is still out.
    fn advertise(&self, st: &mut Ping, slot: usize) {
        match st.sends[slot].take() {
            Some(wr) => self.post_msg(wr),
            None => st.pending[slot] = true,
        }
    }

    fn post_msg(&self, wr: Wr<Msg>) {
        let q = self.qp.lock();
        let Some(qp) = q.as_ref() else {
            return;
        };
        let r = if wr.data().slot == RECV {
            qp.post_recv(wr, |m, ops| {
                ops.buf(&m.buf, 0..INFO_LEN)?;
                Ok(())
            })
        } else {
            qp.post_send(wr, |m, ops| {
                ops.send(&m.buf, 0..INFO_LEN)?;
                Ok(())
            })
        };
        if let Err(e) = r {
            if e.err != ESHUTDOWN {
                self.fail(format_args!("post: {:?}", e.err));
            }
        }
    }

    fn post_xfer(&self, wr: Wr<Xfer>, read: bool, len: usize, remote: Remote) {
        let q = self.qp.lock();
        let Some(qp) = q.as_ref() else {
            return;
        };
        let r = qp.post_send(wr, |x, ops| {
            if read {
                ops.read(&x.buf, 0..len, remote)?;
            } else {
                ops.write(&x.buf, 0..len, remote)?;
            }
            Ok(())
        });
        if let Err(e) = r {
            if e.err != ESHUTDOWN {
                self.fail(format_args!("post RDMA: {:?}", e.err));
            }
        }
    }

    /// Stops the connection after an error (any context).
    fn fail(&self, what: core::fmt::Arguments<'_>) {
        self.run.error(what);
        self.end();
    }

    /// Stops the connection; a client's run ends with it.
    fn end(&self) {
        if !self.ended.swap(true, Ordering::AcqRel) && !self.server {
            self.run.retire();
        }
    }

    /// A message arrived (`info`, if it was 16 bytes).
    fn on_message(&self, info: Option<Info>) {
        let Some(info) = info else {
            self.fail(format_args!("received a message that is not 16 bytes"));
            return;
        };
        if self.ended.load(Ordering::Acquire) {
            return;
        }
        let mut st = self.st.lock();
        match st.phase {
            Phase::WaitGo1 => {
                st.phase = Phase::WaitGo2;
                self.advertise(&mut st, 1);
            }
            Phase::WaitGo2 => self.client_round_done(&mut st),
            Phase::WaitSource => {
                if info.len == 0 || info.len as usize > self.size {
                    drop(st);
                    self.fail(format_args!(
                        "the client advertised {} bytes (this server takes 1..={})",
                        info.len, self.size
                    ));
                    return;
                }
                let Some(x) = st.xfer.take() else {
                    return;
                };
                st.len = info.len;
                st.phase = Phase::Reading;
                st.started_ns = now_ns();
                let remote = Remote {
                    addr: info.addr,
                    rkey: info.rkey,
                };
                self.post_xfer(x, true, info.len as usize, remote);
            }
            Phase::WaitSink => {
                let Some(x) = st.xfer.take() else {
                    return;
                };
                st.phase = Phase::Writing;
                let len = st.len.min(info.len) as usize;
                let remote = Remote {
                    addr: info.addr,
                    rkey: info.rkey,
                };
                self.post_xfer(x, false, len, remote);
            }
            p => {
                drop(st);
                self.fail(format_args!("unexpected message in phase {p:?}"));
            }
        }
    }

    /// Client: the sink holds the server's WRITE of ping `st.seq`.
    fn client_round_done(&self, st: &mut Ping) {
        let run = &self.run;
        let size = self.size;
        let ok = !run.spec.validate
            || match (&st.source, &st.sink) {
                (Some(a), Some(b)) => same(a, b, size),
                _ => false,
            };
        run.stats
            .latency(now_ns().saturating_sub(st.started_ns).max(0) as u64);
        Stats::add(&run.stats.messages, 1);
        Stats::add(&run.stats.bytes, 2 * size as u64);
        if !ok {
            Stats::add(&run.stats.corrupt, 1);
            run.error(format_args!("ping {}: the sink does not match", st.seq));
        }
        st.seq += 1;
        if st.seq >= run.spec.count || run.stopping() {
            st.phase = Phase::Idle;
            self.end();
            return;
        }
        let filled = match st.source.as_mut() {
            Some(src) => fill_ping(src, st.seq, size),
            None => Err(EINVAL),
        };
        if let Err(e) = filled {
            st.phase = Phase::Idle;
            self.fail(format_args!("cannot fill the source: {e:?}"));
            return;
        }
        st.phase = Phase::WaitGo1;
        st.started_ns = now_ns();
        self.advertise(st, 0);
    }

    /// Server: the READ or WRITE of the round trip completed.
    fn xfer_done(&self, wr: Wr<Xfer>) {
        let run = &self.run;
        let mut st = self.st.lock();
        match st.phase {
            Phase::Reading => {
                Stats::add(&run.stats.received, 1);
                if run.spec.validate {
                    let data = wr
                        .data()
                        .buf
                        .as_slice()
                        .get(..st.len as usize)
                        .unwrap_or(&[]);
                    match check_ping(data) {
                        None => {
                            Stats::add(&run.stats.corrupt, 1);
                            run.error(format_args!(
                                "ping {}: {} bytes read are not an rping message",
                                st.seq, st.len
                            ));
                        }
                        Some(n) if n > st.seq => {
                            Stats::add(&run.stats.lost, n - st.seq);
                            st.seq = n;
                        }
                        Some(n) if n < st.seq => {
                            Stats::add(&run.stats.dup, 1);
                            st.seq = n;
                        }
                        Some(_) => {}
                    }
                }
                st.xfer = Some(wr);
                st.phase = Phase::WaitSink;
                self.advertise(&mut st, 0);
            }
            Phase::Writing => {
                run.stats
                    .latency(now_ns().saturating_sub(st.started_ns).max(0) as u64);
                Stats::add(&run.stats.bytes, 2 * u64::from(st.len));
                let done = run.stats.messages.fetch_add(1, Ordering::Relaxed) + 1;
                st.seq += 1;
                st.xfer = Some(wr);
                st.phase = Phase::WaitSource;
                st.last_round = done == run.spec.count;
                self.advertise(&mut st, 1);
            }
            p => {
                drop(st);
                drop(wr);
                self.fail(format_args!("RDMA completion in phase {p:?}"));
            }
        }
    }

    /// Frees the connection's QP and buffers (process context): the QP is drained first, so
    /// every request has come back.
    fn teardown(&self) {
        self.ended.store(true, Ordering::Release);
        let qp = self.qp.lock().take();
        if let Some(qp) = &qp {
            qp.drain();
        }
        let (sends, xfer, source, sink) = {
            let mut st = self.st.lock();
            st.phase = Phase::Idle;
            (
                core::mem::take(&mut st.sends),
                st.xfer.take(),
                st.source.take(),
                st.sink.take(),
            )
        };
        drop((sends, xfer, source, sink, qp));
    }
}

/// Whether the first `size` bytes of `a` and `b` are the same.
fn same(a: &Mr, b: &Mr, size: usize) -> bool {
    let (mut x, mut y) = ([0u8; 128], [0u8; 128]);
    let mut off = 0;
    while off < size {
        let n = (size - off).min(128);
        if a.read(off, &mut x[..n]).is_err() || b.read(off, &mut y[..n]).is_err() {
            return false;
        }
        if x[..n] != y[..n] {
            return false;
        }
        off += n;
    }
    true
}

/// Writes rping's message `n` into the first `size` bytes of `mr`.
fn fill_ping(mr: &mut Mr, n: u64, size: usize) -> Result {
    let h = Header::new(n);
    let mut chunk = [0u8; 128];
    let mut off = 0;
    while off < size {
        let len = (size - off).min(128);
        for (i, b) in chunk[..len].iter_mut().enumerate() {
            *b = ping_byte(&h, n, size, off + i);
        }
        mr.write(off, &chunk[..len])?;
        off += len;
    }
    Ok(())
}

impl Completion for Msg {
    fn done(wr: Wr<Self>, wc: &Wc) {
        let conn = wr.data().conn.clone();
        if conn.run.stats.completion(wc.status()) {
            conn.fail(format_args!(
                "{} completed with {:?}",
                if wr.data().slot == RECV {
                    "receive"
                } else {
                    "send"
                },
                wc.status()
            ));
        }
        if wr.data().slot == RECV {
            if !wc.is_ok() {
                return;
            }
            let info = (wc.byte_len() as usize == INFO_LEN)
                .then(|| Info::decode(wr.data().buf.as_slice()))
                .flatten();
            conn.post_msg(wr);
            conn.on_message(info);
            return;
        }
        let slot = wr.data().slot;
        let mut st = conn.st.lock();
        if st.pending[slot] {
            // An earlier post of this SEND came back; the one wanted since goes now.
            st.pending[slot] = false;
            if wc.is_ok() {
                conn.post_msg(wr);
            }
            return;
        }
        // A server's last go ahead has been delivered (or failed): its run may end now.
        let last = slot == 1 && core::mem::take(&mut st.last_round);
        if wc.is_ok() {
            st.sends[slot] = Some(wr);
        }
        drop(st);
        if last {
            conn.run.retire();
        }
    }
}

impl Completion for Xfer {
    fn done(wr: Wr<Self>, wc: &Wc) {
        let conn = wr.data().conn.clone();
        if conn.run.stats.completion(wc.status()) {
            conn.fail(format_args!("RDMA completed with {:?}", wc.status()));
        }
        if wc.is_ok() {
            conn.xfer_done(wr);
        }
    }
}

/// How far the starting thread's connection has come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Idle,
    AddrResolved,
    RouteResolved,
    Established,
    Failed(Error),
}

/// What the handlers of a run's ids share with the thread that started it.
struct Shared {
    step: Step,
    run: Option<Arc<Run>>,
    pd: Option<Arc<Pd>>,
    cq: Option<Arc<Cq>>,
    /// A UD server's QP number (answered to every request).
    ud_qpn: u32,
    /// A UD client's peer, from the SIDR reply.
    ud: Option<(Arc<Ah>, u32, u32)>,
}

#[pin_data]
pub(crate) struct Waiter {
    #[pin]
    shared: Mutex<Shared>,
    #[pin]
    signal: Signal,
}

impl Waiter {
    fn new() -> Result<Arc<Waiter>> {
        Arc::pin_init(
            pin_init!(Waiter {
                shared <- new_mutex!(Shared {
                    step: Step::Idle,
                    run: None,
                    pd: None,
                    cq: None,
                    ud_qpn: 0,
                    ud: None,
                }, "rdma_rust_ulp_cm_waiter"),
                signal <- Signal::new(),
            }),
            GFP_KERNEL,
        )
    }

    fn set_step(&self, s: Step) {
        self.shared.lock().step = s;
        self.signal.complete();
    }

    /// Waits up to `ms` for step `want` (or a failure).
    fn wait(&self, want: Step, ms: u32) -> Result {
        let mut waited = 0;
        loop {
            match self.shared.lock().step {
                s if s == want => return Ok(()),
                Step::Failed(e) => return Err(e),
                _ => {}
            }
            if waited >= ms {
                return Err(ETIMEDOUT);
            }
            let _ = self.signal.wait_timeout(100);
            waited += 100;
        }
    }

    fn run(&self) -> Option<Arc<Run>> {
        self.shared.lock().run.clone()
    }
}

/// The event handler of a run's ids.
pub(crate) struct Ev {
    waiter: Arc<Waiter>,
    /// A server's connection.
    conn: Option<Arc<Conn>>,
}

/// A server's connection: its id and state.
struct Session {
    id: CmId<Ev>,
    conn: Arc<Conn>,
}

/// A CM run's ids: its listener or connecting id, and a server's connections. Dropped in
/// process context: the connections are drained and freed, then the ids destroyed.
pub(crate) struct Link {
    id: Option<CmId<Ev>>,
    /// A client's RC connection.
    conn: Option<Arc<Conn>>,
    sessions: KVec<Session>,
}

impl Drop for Link {
    fn drop(&mut self) {
        if let (Some(id), Some(c)) = (&self.id, &self.conn) {
            // The peer sees the connection end now rather than when the id goes.
            let _ = id.disconnect();
            c.teardown();
        }
        for s in core::mem::take(&mut self.sessions) {
            let _ = s.id.disconnect();
            s.conn.teardown();
            drop(s.id);
        }
        drop(self.id.take());
    }
}

impl Handler for Ev {
    fn event(&self, id: &Id, event: Event<'_, Self>) {
        match event {
            Event::AddrResolved => self.waiter.set_step(Step::AddrResolved),
            Event::RouteResolved => self.waiter.set_step(Step::RouteResolved),
            Event::AddrError(e) | Event::RouteError(e) => {
                pr_err!("cm: cannot reach {}: {e:?}\n", Show(id.peer_addr()));
                self.waiter.set_step(Step::Failed(e));
            }
            Event::ConnectRequest(req) => self.request(req),
            Event::Established { ud, .. } => {
                if let Some(ud) = ud {
                    let pd = self.waiter.shared.lock().pd.clone();
                    let ah = pd.ok_or(EINVAL).and_then(|pd| ud.create_ah(&pd));
                    match ah {
                        Ok(ah) => {
                            self.waiter.shared.lock().ud = Some((ah, ud.qpn(), ud.qkey()));
                        }
                        Err(e) => {
                            pr_err!("cm: no address handle for the UD peer: {e:?}\n");
                            self.waiter.set_step(Step::Failed(e));
                            return;
                        }
                    }
                }
                self.waiter.set_step(Step::Established);
            }
            Event::Rejected {
                reason,
                private_data,
            } => {
                if private_data.starts_with(MAGIC) && private_data.len() >= 8 {
                    let mut b = [0u8; 4];
                    b.copy_from_slice(&private_data[4..8]);
                    pr_err!(
                        "cm: {} rejected the connection: it takes buffers up to {} bytes\n",
                        Show(id.peer_addr()),
                        u32::from_le_bytes(b)
                    );
                } else {
                    pr_err!(
                        "cm: {} rejected the connection (reason {reason})\n",
                        Show(id.peer_addr())
                    );
                }
                self.waiter.set_step(Step::Failed(ECONNREFUSED));
            }
            Event::Unreachable(e) | Event::ConnectError(e) => {
                pr_err!("cm: {} unreachable: {e:?}\n", Show(id.peer_addr()));
                self.waiter.set_step(Step::Failed(ETIMEDOUT));
            }
            Event::Disconnected | Event::DeviceRemoval => {
                let removal = matches!(event, Event::DeviceRemoval);
                self.waiter.set_step(Step::Failed(ESHUTDOWN));
                self.closed(id, removal);
            }
            Event::TimewaitExit | Event::AddrChange | Event::Other(..) => {}
        }
    }
}

/// Shows an address in a message (`?` when the id has none).
struct Show(Option<kernel::rdma::cm::SockAddrV4>);

impl core::fmt::Display for Show {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            Some(a) => core::fmt::Display::fmt(&a, f),
            None => f.write_str("?"),
        }
    }
}

impl Ev {
    /// A connection ended (peer disconnected, or the device is going away).
    fn closed(&self, id: &Id, removal: bool) {
        let Some(run) = self.waiter.run() else {
            return;
        };
        let what = if removal {
            "device removal"
        } else {
            "disconnected"
        };
        match &self.conn {
            // A server connection: freed here (its id is destroyed when this returns).
            Some(conn) => {
                pr_info!(
                    "run {}: {} {what} after {} round trips\n",
                    run.id,
                    Show(id.peer_addr()),
                    conn.st.lock().seq
                );
                let session = run.with_link(|l| {
                    let i = l.sessions.iter().position(|s| Arc::ptr_eq(&s.conn, conn))?;
                    crate::remove_at(&mut l.sessions, i)
                });
                if let Some(Some(s)) = session {
                    s.conn.teardown();
                    drop(s.id);
                }
            }
            None => {
                if run.spec.role == Role::Client {
                    let done = Stats::get(&run.stats.messages);
                    if done < run.spec.count && !run.stopping() {
                        run.error(format_args!("{what} after {done} of {}", run.spec.count));
                    }
                    run.stop();
                    if let Some(Some(c)) = run.with_link(|l| l.conn.clone()) {
                        c.end();
                    }
                } else if removal {
                    run.stop();
                }
            }
        }
    }

    /// A connection request to a server run.
    fn request(&self, req: Request<'_, Ev>) {
        let (run, pd, cq, ud_qpn) = {
            let s = self.waiter.shared.lock();
            match (&s.run, &s.pd, &s.cq) {
                (Some(r), Some(p), Some(c)) => (r.clone(), p.clone(), c.clone(), s.ud_qpn),
                _ => return,
            }
        };
        let peer = Show(req.peer_addr());
        if run.stopping() {
            return;
        }
        let pdata = req.private_data();
        if pdata.starts_with(MAGIC) && pdata.len() >= 8 {
            let mut b = [0u8; 4];
            b.copy_from_slice(&pdata[4..8]);
            let size = u32::from_le_bytes(b) as usize;
            if run.spec.mode == QpType::Rc && size > run.spec.size {
                pr_err!(
                    "run {}: {peer} wants {size}-byte buffers, over this server's {}: rejected\n",
                    run.id,
                    run.spec.size
                );
                let mut reply = [0u8; 8];
                reply[..4].copy_from_slice(MAGIC);
                reply[4..].copy_from_slice(&(run.spec.size as u32).to_le_bytes());
                let _ = req.reject(&reply);
                return;
            }
        }
        if run.spec.mode == QpType::Ud {
            // Answer with the listener's QP; the new id is not needed after the reply.
            let Ok(child) = req.take(Ev {
                waiter: self.waiter.clone(),
                conn: None,
            }) else {
                return;
            };
            let p = ConnParam {
                qp_num: ud_qpn,
                qkey: UDP_QKEY,
                ..ConnParam::default()
            };
            match child.accept(&p) {
                Ok(()) => pr_info!("run {}: UD peer {peer} answered with QP {ud_qpn}\n", run.id),
                Err(e) => pr_err!("run {}: SIDR reply to {peer} failed: {e:?}\n", run.id),
            }
            return;
        }
        let open = run.with_link(|l| l.sessions.len()).unwrap_or(MAX_SESSIONS);
        if open >= MAX_SESSIONS {
            pr_err!("run {}: {peer} refused: {open} connections open\n", run.id);
            return;
        }
        if let Err(e) = self.accept(req, &run, &pd, &cq) {
            pr_err!("run {}: connection from {peer} failed: {e:?}\n", run.id);
        }
    }

    fn accept(&self, req: Request<'_, Ev>, run: &Arc<Run>, pd: &Arc<Pd>, cq: &Arc<Cq>) -> Result {
        let peer = Show(req.peer_addr());
        let depth = req.initiator_depth().clamp(1, 16);
        let conn = Conn::new(run, true, run.spec.size)?;
        let id = req.take(Ev {
            waiter: self.waiter.clone(),
            conn: Some(conn.clone()),
        })?;
        let qp = id.create_qp(pd, cq, cq, &ping_caps())?;
        conn.prepare(&qp, pd)?;
        id.accept(&ConnParam {
            responder_resources: depth,
            initiator_depth: 1,
            ..ConnParam::default()
        })?;
        conn.begin(qp.established()?, cq)?;
        let pushed = run.with_link(|l| {
            l.sessions.push(
                Session {
                    id,
                    conn: conn.clone(),
                },
                GFP_KERNEL,
            )
        });
        match pushed {
            Some(Ok(())) => {
                pr_info!("run {}: connection from {peer}\n", run.id);
                Ok(())
            }
            // The run ended meanwhile, or no memory: the session is dropped here, which ends
            // the connection.
            Some(Err(e)) => {
                conn.teardown();
                Err(e.into())
            }
            None => {
                conn.teardown();
                Err(ESHUTDOWN)
            }
        }
    }
}

/// The queues of a ping connection: two REG_MRs, two SENDs and a READ or WRITE at most in
/// flight; one receive.
fn ping_caps() -> QpCaps {
    QpCaps {
        send_depth: 6,
        recv_depth: 2,
        ..QpCaps::default()
    }
}

/// Starts a CM run: a server binds and listens, a client resolves, connects and starts.
/// `attach` registers the run with the device the address led to. Process context; a client
/// waits up to half a minute for the server.
pub(crate) fn start(
    spec: &Spec,
    run_id: u32,
    attach: &dyn Fn(&Device, &Arc<Run>) -> Result,
) -> Result<Arc<Run>> {
    let waiter = Waiter::new()?;
    let ps = match spec.mode {
        QpType::Rc => PortSpace::Tcp,
        QpType::Ud => PortSpace::Udp,
    };
    let id = CmId::new(
        ps,
        Ev {
            waiter: waiter.clone(),
            conn: None,
        },
    )?;
    match spec.role {
        Role::Server => server(spec, run_id, id, &waiter, attach),
        _ => client(spec, run_id, id, &waiter, attach),
    }
}

fn server(
    spec: &Spec,
    run_id: u32,
    id: CmId<Ev>,
    waiter: &Arc<Waiter>,
    attach: &dyn Fn(&Device, &Arc<Run>) -> Result,
) -> Result<Arc<Run>> {
    id.bind(spec.addr).inspect_err(|e| {
        pr_err!("start: cannot bind {}: {e:?}\n", spec.addr);
    })?;
    let Some(dev) = id.device() else {
        pr_err!(
            "start: {} is not the address of an RDMA device\n",
            spec.addr
        );
        return Err(EINVAL);
    };
    let pd = Pd::new(&dev)?;
    let cq_entries = match spec.mode {
        QpType::Rc => MAX_SESSIONS as u32 * 16,
        QpType::Ud => 2 * spec.depth + 8,
    };
    let cq = Cq::new(&dev, cq_entries, 0, spec.poll)?;
    let mut r = Res::new(pd.clone(), cq.clone());
    let mut ud_qpn = 0;
    if spec.mode == QpType::Ud {
        check_ud_size(spec, &dev.query_port(id.port())?)?;
        let caps = QpCaps {
            send_depth: 1,
            recv_depth: 2 * spec.depth,
            ..QpCaps::default()
        };
        let qp = id.create_qp(&pd, &cq, &cq, &caps)?.established()?;
        ud_qpn = qp.qpn();
        r.rx_qp = Some(Arc::new(qp, GFP_KERNEL)?);
    }
    r.link = Some(Link {
        id: Some(id),
        conn: None,
        sessions: KVec::new(),
    });
    let run = Run::new(spec, run_id, None, r)?;
    {
        let mut s = waiter.shared.lock();
        s.run = Some(run.clone());
        s.pd = Some(pd);
        s.cq = Some(cq);
        s.ud_qpn = ud_qpn;
    }
    let started = attach(&dev, &run).and_then(|()| run.go()).and_then(|()| {
        run.with_link(|l| l.id.as_ref().map_or(Err(EINVAL), |id| id.listen(16)))
            .unwrap_or(Err(ESHUTDOWN))
    });
    if let Err(e) = started {
        pr_err!(
            "start: server run {run_id} on {} failed: {e:?}\n",
            spec.addr
        );
        run.stop();
        run.finish();
        forget_run(waiter);
        return Err(e);
    }
    pr_info!(
        "run {run_id}: listening on {} ({})\n",
        spec.addr,
        dev.name()
    );
    Ok(run)
}

/// Breaks the waiter's reference to a run that is over.
fn forget_run(waiter: &Waiter) {
    let (run, pd, cq, ud) = {
        let mut s = waiter.shared.lock();
        (s.run.take(), s.pd.take(), s.cq.take(), s.ud.take())
    };
    drop((run, pd, cq, ud));
}

fn client(
    spec: &Spec,
    run_id: u32,
    id: CmId<Ev>,
    waiter: &Arc<Waiter>,
    attach: &dyn Fn(&Device, &Arc<Run>) -> Result,
) -> Result<Arc<Run>> {
    let r = client_connect(spec, run_id, id, waiter, attach);
    if r.is_err() {
        forget_run(waiter);
    }
    r
}

fn client_connect(
    spec: &Spec,
    run_id: u32,
    id: CmId<Ev>,
    waiter: &Arc<Waiter>,
    attach: &dyn Fn(&Device, &Arc<Run>) -> Result,
) -> Result<Arc<Run>> {
    let to = spec.addr;
    id.resolve_addr(None, to, RESOLVE_MS)?;
    waiter
        .wait(Step::AddrResolved, RESOLVE_MS + 1000)
        .inspect_err(|e| pr_err!("start: cannot resolve {to}: {e:?}\n"))?;
    id.resolve_route(RESOLVE_MS)?;
    waiter
        .wait(Step::RouteResolved, RESOLVE_MS + 1000)
        .inspect_err(|e| pr_err!("start: no route to {to}: {e:?}\n"))?;
    let dev = id.device().ok_or(ENODEV)?;
    let pd = Pd::new(&dev)?;
    let (caps, entries) = match spec.mode {
        QpType::Rc => (ping_caps(), 16),
        QpType::Ud => {
            check_ud_size(spec, &dev.query_port(id.port())?)?;
            (
                QpCaps {
                    send_depth: spec.depth,
                    recv_depth: 1,
                    ..QpCaps::default()
                },
                spec.depth + 8,
            )
        }
    };
    let cq = Cq::new(&dev, entries, 0, spec.poll)?;
    waiter.shared.lock().pd = Some(pd.clone());
    let qp = id.create_qp(&pd, &cq, &cq, &caps)?;
    // An RC run's connection: its receive is posted before the server can send.
    let run_conn = if spec.mode == QpType::Rc {
        let run = Run::new(spec, run_id, None, Res::new(pd.clone(), cq.clone()))?;
        let conn = Conn::new(&run, false, spec.size)?;
        conn.prepare(&qp, &pd)?;
        Some((run, conn))
    } else {
        None
    };
    let mut hello = [0u8; 8];
    hello[..4].copy_from_slice(MAGIC);
    hello[4..].copy_from_slice(&(spec.size as u32).to_le_bytes());
    id.connect(&ConnParam {
        private_data: &hello,
        ..ConnParam::default()
    })?;
    let connected = waiter.wait(Step::Established, CONNECT_MS);
    if let Err(e) = connected {
        pr_err!("start: cannot connect to {to}: {e:?}\n");
        if let Some((run, conn)) = run_conn {
            conn.teardown();
            drop(qp);
            run.finish();
        }
        return Err(e);
    }
    let qp = match qp.established() {
        Ok(qp) => qp,
        Err(e) => {
            if let Some((run, conn)) = run_conn {
                conn.teardown();
                run.finish();
            }
            return Err(e);
        }
    };
    let link = |conn| Link {
        id: Some(id),
        conn,
        sessions: KVec::new(),
    };
    let run = match run_conn {
        Some((run, conn)) => {
            // The run was built before the connection was up: its id goes in now.
            run.set_link(link(Some(conn.clone())));
            waiter.shared.lock().run = Some(run.clone());
            let started = attach(&dev, &run).and_then(|()| {
                run.begin();
                conn.begin(qp, &cq)
            });
            if let Err(e) = started {
                pr_err!("start: run {run_id}: cannot start the pings: {e:?}\n");
                run.stop();
                run.finish();
                return Err(e);
            }
            run
        }
        None => {
            let Some((ah, qpn, qkey)) = waiter.shared.lock().ud.take() else {
                return Err(EINVAL);
            };
            let res = Res {
                tx_qp: Some(Arc::new(qp, GFP_KERNEL)?),
                ah: Some(ah),
                ud_peer: Some((qpn, qkey)),
                link: Some(link(None)),
                ..Res::new(pd, cq.clone())
            };
            let run = Run::new(spec, run_id, None, res)?;
            waiter.shared.lock().run = Some(run.clone());
            if let Err(e) = attach(&dev, &run).and_then(|()| run.go()) {
                run.stop();
                run.finish();
                return Err(e);
            }
            pr_info!("run {run_id}: UD peer {to} is QP {qpn}\n");
            run
        }
    };
    pr_info!("run {run_id}: connected to {to} ({})\n", dev.name());
    Ok(run)
}
