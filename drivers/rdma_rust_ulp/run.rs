// SPDX-License-Identifier: GPL-2.0

//! One run: a QP pair on one device, traffic kept in flight by completion handlers.
//!
//! The data path never allocates, sleeps or takes a sleeping lock: every buffer is allocated,
//! mapped (and, for RDMA, registered) when the run is built, each work request ([`Tx`],
//! [`Rx`]) owns its buffer for the life of the run, and the completion handler of a request
//! posts it again. Handlers run in the CQ's poll context (softirq by default).
//!
//! With `validate=1` every message carries its sequence number and run id in an 8-byte header,
//! followed by a pattern derived from the sequence number; the receiver checks both, and counts
//! lost (a gap), duplicated or reordered (a step back) and corrupt messages. RDMA WRITEs are
//! checked in the target buffer when they complete, RDMA READs in the local buffer.
//!
//! A run ends when `count` operations have completed, or when it is stopped; its resources are
//! freed in process context by [`Run::finish`] (`wait`, `stop`, the next `start`, device
//! removal, module unload), which drains both QPs first so that every request comes back.

use crate::ctl::{Op, Role, Spec};
use crate::stats::Stats;
use core::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use kernel::prelude::*;
use kernel::rdma::{
    ah::Ah,
    cq::{Cq, PollContext, Wc, WcStatus},
    device::{Device, PortAttr},
    dma::{DmaBuf, DmaSg, MAX_BUF, MAX_SG_PAGES},
    mr::Mr,
    pd::Pd,
    qp::{Access, Endpoint, Init, Qp, QpCaps, QpType, RcParams, Rts},
    sync::{Completion as Signal, SpinLockBh},
    wr::{Completion, Remote, Wr, GRH_LEN},
};
use kernel::sync::{Arc, Mutex};
use kernel::time::Ktime;
use kernel::{new_mutex, new_spinlock_bh};

/// Bytes of the sequence header of a validated message.
pub(crate) const HEADER: usize = 8;
/// The Q_Key of the UD QPs of a run.
const QKEY: u32 = 0x1111_0001;
/// The RDMA port runs use.
const PORT: u32 = 1;
const PAGE: usize = 4096;

fn now_ns() -> i64 {
    Ktime::ktime_get().to_ns()
}

/// Byte `i` of message `seq`.
fn pattern(seq: u64, i: usize) -> u8 {
    (seq as usize).wrapping_mul(31).wrapping_add(i) as u8 ^ 0xa5
}

/// Writes message `seq` of run `id` into `buf`: the pattern, under a header when `header`
/// (messages to a receiver; RDMA WRITEs are checked in place by position, without one).
fn fill(buf: &mut [u8], id: u32, seq: u64, header: bool) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = pattern(seq, i);
    }
    if header && buf.len() >= HEADER {
        buf[..4].copy_from_slice(&(seq as u32).to_le_bytes());
        buf[4..8].copy_from_slice(&id.to_le_bytes());
    }
}

/// The sequence number of a validated message of run `id` (of any run if `None`: the sender
/// is on another host), if it is intact.
fn check(buf: &[u8], id: Option<u32>) -> Option<u32> {
    let seq = u32::from_le_bytes(buf.get(..4)?.try_into().ok()?);
    let run = u32::from_le_bytes(buf.get(4..8)?.try_into().ok()?);
    let ok = id.map_or(true, |id| run == id)
        && buf
            .iter()
            .enumerate()
            .skip(HEADER)
            .all(|(i, &b)| b == pattern(u64::from(seq), i));
    ok.then_some(seq)
}

/// Whether bytes `off .. off + len` of `mr` hold message `seq` (with no header: RDMA target).
fn check_mr(mr: &Mr, off: usize, len: usize, seq: u64) -> bool {
    let mut chunk = [0u8; 128];
    let mut done = 0;
    while done < len {
        let n = (len - done).min(chunk.len());
        if mr.read(off + done, &mut chunk[..n]).is_err() {
            return false;
        }
        if !chunk[..n]
            .iter()
            .enumerate()
            .all(|(i, &b)| b == pattern(seq, done + i))
        {
            return false;
        }
        done += n;
    }
    true
}

/// What a run holds on the device; dropped in process context once its QPs are drained.
pub(crate) struct Res {
    /// The sending QP (loopback and client runs).
    pub(crate) tx_qp: Option<Arc<Qp<Rts>>>,
    /// The receiving QP (loopback and server runs; an RC server's once it is connected).
    pub(crate) rx_qp: Option<Arc<Qp<Rts>>>,
    /// An RC server's QP until `connect`.
    pub(crate) unconnected: Option<Qp<Init>>,
    /// A client's sends, held until `go`.
    pub(crate) held: KVec<Wr<Tx>>,
    pub(crate) target: Option<Arc<Mr>>,
    pub(crate) ah: Option<Arc<Ah>>,
    /// A CM UD client's peer: its QP number and Q_Key.
    pub(crate) ud_peer: Option<(u32, u32)>,
    /// A CM run's ids and connections (freed after the QPs above).
    pub(crate) link: Option<crate::cm::Link>,
    pub(crate) cq: Arc<Cq>,
    pub(crate) _pd: Arc<Pd>,
}

impl Res {
    /// A run's resources with only its PD and CQ.
    pub(crate) fn new(pd: Arc<Pd>, cq: Arc<Cq>) -> Self {
        Res {
            tx_qp: None,
            rx_qp: None,
            unconnected: None,
            held: KVec::new(),
            target: None,
            ah: None,
            ud_peer: None,
            link: None,
            cq,
            _pd: pd,
        }
    }
}

/// A run and its statistics.
#[pin_data]
pub(crate) struct Run {
    pub(crate) id: u32,
    pub(crate) spec: Spec,
    pub(crate) stats: Stats,
    stopping: AtomicBool,
    /// Send-side requests owned by the device or a handler (not yet retired).
    inflight: AtomicU32,
    /// Sequence numbers handed out to sends.
    next_seq: AtomicU64,
    /// The sequence number the receiver expects next.
    rx_expected: AtomicU64,
    pub(crate) start_ns: AtomicI64,
    pub(crate) end_ns: AtomicI64,
    /// This host's QP of a server or client run, for the peer.
    pub(crate) endpoint: Option<Endpoint>,
    /// Serialises "take a sequence number, post": the post order is the sequence order.
    #[pin]
    post_lock: SpinLockBh<()>,
    /// Signalled when the last send-side request retires.
    #[pin]
    ended: Signal,
    #[pin]
    res: Mutex<Option<Res>>,
}

/// A send-side request: its buffer, and what it needs to post itself again.
pub(crate) struct Tx {
    buf: DmaBuf,
    run: Arc<Run>,
    qp: Arc<Qp<Rts>>,
    ah: Option<Arc<Ah>>,
    target: Option<Arc<Mr>>,
    remote: Remote,
    peer_qpn: u32,
    qkey: u32,
    slot: usize,
    seq: u64,
    posted_ns: i64,
}

/// A receive request.
struct Rx {
    buf: DmaBuf,
    run: Arc<Run>,
    qp: Arc<Qp<Rts>>,
}

/// A REG_MR request: hands the MR back to the thread that waits for it.
#[pin_data]
struct RegBack {
    #[pin]
    slot: SpinLockBh<Option<(Wr<Reg>, WcStatus)>>,
    #[pin]
    done: Signal,
}

struct Reg {
    mr: Mr,
    back: Arc<RegBack>,
}

impl Completion for Reg {
    fn done(wr: Wr<Self>, wc: &Wc) {
        let back = wr.data().back.clone();
        *back.slot.lock() = Some((wr, wc.status()));
        back.done.complete();
    }
}

/// `EINVAL`, with a message, when a UD message of `spec.size` bytes does not fit the path MTU
/// of `port` (rxe drops such datagrams yet completes their sends successfully).
pub(crate) fn check_ud_size(spec: &Spec, port: &PortAttr) -> Result {
    let mtu = port.active_mtu().map_or(0, |m| m.bytes()) as usize;
    if spec.size > mtu {
        return Err(bad(format_args!(
            "size={} over the UD path MTU {}",
            spec.size, mtu
        )));
    }
    Ok(())
}

fn bad(what: core::fmt::Arguments<'_>) -> Error {
    pr_err!("start: {}\n", what);
    EINVAL
}

impl Run {
    /// Builds a run on `dev` (process context): checks `spec` against the device, allocates,
    /// maps and registers everything. Nothing is posted yet ([`Run::go`]).
    pub(crate) fn build(dev: &Device, spec: &Spec, id: u32) -> Result<Arc<Run>> {
        let attrs = dev.attrs();
        let port = dev.query_port(PORT)?;
        let depth = spec.depth;
        let rx_depth = if spec.op.uses_recv() { 2 * depth } else { 1 };
        if rx_depth >= attrs.max_qp_wr() || depth >= attrs.max_qp_wr() {
            return Err(bad(format_args!(
                "depth={} over the device's max_qp_wr {}",
                depth,
                attrs.max_qp_wr()
            )));
        }
        let max = (port.max_msg_sz() as usize).min(MAX_BUF);
        if spec.size > max {
            return Err(bad(format_args!(
                "size={} over the limit {}",
                spec.size, max
            )));
        }
        if spec.mode == QpType::Ud {
            check_ud_size(spec, &port)?;
        }
        let rdma = matches!(spec.op, Op::Write | Op::Read);
        let target_pages = (depth as usize * spec.size).div_ceil(PAGE);
        if rdma
            && (target_pages > MAX_SG_PAGES
                || target_pages > attrs.max_fast_reg_page_list_len() as usize)
        {
            return Err(bad(format_args!(
                "depth x size = {} bytes of RDMA target over the limit {}",
                depth as usize * spec.size,
                MAX_SG_PAGES * PAGE
            )));
        }
        let pd = Pd::new(dev)?;
        let cq = Cq::new(dev, depth + rx_depth + 8, 0, spec.poll)?;
        let tx_caps = QpCaps {
            send_depth: depth,
            recv_depth: 1,
            ..QpCaps::default()
        };
        let rx_caps = QpCaps {
            send_depth: 1,
            recv_depth: rx_depth,
            ..QpCaps::default()
        };
        let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
        let p = RcParams::default();
        let rc = |caps: &QpCaps| -> Result<Qp<Init>> {
            Qp::new(&pd, QpType::Rc, &cq, &cq, caps)?.to_init(PORT, access)
        };
        let ud = |caps: &QpCaps| -> Result<Qp<Rts>> {
            Qp::new(&pd, QpType::Ud, &cq, &cq, caps)?
                .to_init_ud(PORT, QKEY)?
                .ready_ud()
        };
        let arc = |q: Qp<Rts>| Arc::new(q, GFP_KERNEL);
        let (mut tx_qp, mut rx_qp, mut unconnected, mut ah, mut endpoint) =
            (None, None, None, None, None);
        match (spec.mode, spec.role, spec.peer) {
            (QpType::Rc, Role::Loopback, _) => {
                let (a, b) = (rc(&tx_caps)?, rc(&rx_caps)?);
                let (ea, eb) = (a.endpoint()?, b.endpoint()?);
                tx_qp = Some(arc(a.connect(&eb, &p)?)?);
                rx_qp = Some(arc(b.connect(&ea, &p)?)?);
            }
            (QpType::Ud, Role::Loopback, _) => {
                let (a, b) = (ud(&tx_caps)?, ud(&rx_caps)?);
                ah = Some(Ah::new(&pd, PORT, &b.endpoint()?.gid)?);
                tx_qp = Some(arc(a)?);
                rx_qp = Some(arc(b)?);
            }
            (QpType::Rc, Role::Server, _) => {
                let b = rc(&rx_caps)?;
                endpoint = Some(b.endpoint()?);
                unconnected = Some(b);
            }
            (QpType::Ud, Role::Server, _) => {
                let b = ud(&rx_caps)?;
                endpoint = Some(b.endpoint()?);
                rx_qp = Some(arc(b)?);
            }
            (QpType::Rc, Role::Client, Some(peer)) => {
                let a = rc(&tx_caps)?;
                endpoint = Some(a.endpoint()?);
                tx_qp = Some(arc(a.connect(&peer, &p)?)?);
            }
            (QpType::Ud, Role::Client, Some(peer)) => {
                let a = ud(&tx_caps)?;
                endpoint = Some(a.endpoint()?);
                ah = Some(Ah::new(&pd, PORT, &peer.gid)?);
                tx_qp = Some(arc(a)?);
            }
            (_, Role::Client, None) => return Err(EINVAL),
        }
        let target = if rdma {
            let mut sg = DmaSg::new(&pd, target_pages)?;
            if spec.op == Op::Read {
                // Slot k holds message k: what every READ of slot k must return.
                let mut chunk = KVec::from_elem(0u8, spec.size, GFP_KERNEL)?;
                for k in 0..depth as usize {
                    for (i, b) in chunk.iter_mut().enumerate() {
                        *b = pattern(k as u64, i);
                    }
                    sg.write(k * spec.size, &chunk)?;
                }
            }
            let mut mr = Mr::new(&pd, target_pages as u32)?;
            mr.map_sg(sg).map_err(|(e, _)| e)?;
            let qp = rx_qp.as_ref().ok_or(EINVAL)?;
            Some(Arc::new(register(qp, &cq, mr)?, GFP_KERNEL)?)
        } else {
            None
        };
        let res = Res {
            tx_qp,
            rx_qp,
            unconnected,
            target,
            ah,
            ..Res::new(pd, cq)
        };
        Self::new(spec, id, endpoint, res)
    }

    /// A run holding `res`, not started.
    pub(crate) fn new(
        spec: &Spec,
        id: u32,
        endpoint: Option<Endpoint>,
        res: Res,
    ) -> Result<Arc<Run>> {
        Arc::pin_init(
            pin_init!(Run {
                id,
                spec: *spec,
                stats: Stats::new(),
                stopping: AtomicBool::new(false),
                inflight: AtomicU32::new(0),
                next_seq: AtomicU64::new(0),
                rx_expected: AtomicU64::new(0),
                start_ns: AtomicI64::new(0),
                end_ns: AtomicI64::new(0),
                endpoint,
                post_lock <- new_spinlock_bh!((), "rdma_rust_ulp_post"),
                ended <- Signal::new(),
                res <- new_mutex!(Some(res), "rdma_rust_ulp_res"),
            }),
            GFP_KERNEL,
        )
    }

    /// Posts the receives and the first `depth` sends (a held client's are kept for
    /// [`Run::release`]; an RC server posts its receives at [`Run::connect`]). Process context.
    pub(crate) fn go(self: &Arc<Self>) -> Result {
        let mut guard = self.res.lock();
        let res = guard.as_mut().ok_or(ESHUTDOWN)?;
        let spec = &self.spec;
        if let Some(rx_qp) = &res.rx_qp {
            self.post_receives(rx_qp)?;
        }
        self.start_ns.store(now_ns(), Ordering::Relaxed);
        if spec.role == Role::Server {
            // The "send side" of a server is its count of receives: it ends with the last.
            self.inflight.store(1, Ordering::Release);
            return Ok(());
        }
        let Some(tx_qp) = &res.tx_qp else {
            return Err(EINVAL);
        };
        let (peer_qpn, qkey) = match (&res.rx_qp, spec.peer, res.ud_peer) {
            (_, _, Some(p)) => p,
            (Some(q), _, _) => (q.qpn(), QKEY),
            (None, Some(p), _) => (p.qpn, QKEY),
            (None, None, _) => (0, QKEY),
        };
        let remote = res
            .target
            .as_ref()
            .map_or(Remote { addr: 0, rkey: 0 }, |m| m.remote());
        let n = u64::from(spec.depth).min(spec.count) as usize;
        let mut txs = KVec::with_capacity(n, GFP_KERNEL)?;
        for slot in 0..n {
            let tx = Tx {
                buf: DmaBuf::new(tx_qp.pd(), spec.size, GFP_KERNEL)?,
                run: self.clone(),
                qp: tx_qp.clone(),
                ah: res.ah.clone(),
                target: res.target.clone(),
                remote,
                peer_qpn,
                qkey,
                slot,
                seq: 0,
                posted_ns: 0,
            };
            txs.push(Wr::new(tx, GFP_KERNEL)?, GFP_KERNEL)?;
        }
        self.inflight.store(n as u32, Ordering::Release);
        if spec.hold {
            res.held = txs;
            return Ok(());
        }
        drop(guard);
        for wr in txs {
            post_next(wr);
        }
        Ok(())
    }

    pub(crate) fn post_receives(self: &Arc<Self>, rx_qp: &Arc<Qp<Rts>>) -> Result {
        let spec = &self.spec;
        if !spec.op.uses_recv() {
            return Ok(());
        }
        let extra = if spec.mode == QpType::Ud { GRH_LEN } else { 0 };
        for _ in 0..2 * spec.depth {
            let rx = Rx {
                buf: DmaBuf::new(rx_qp.pd(), spec.size + extra, GFP_KERNEL)?,
                run: self.clone(),
                qp: rx_qp.clone(),
            };
            rx_qp.post_recv(Wr::new(rx, GFP_KERNEL)?, |r, ops| {
                ops.buf(&r.buf, 0..r.buf.len())?;
                Ok(())
            })?;
        }
        Ok(())
    }

    /// Connects an RC server's QP to the client's `peer` and posts its receives.
    pub(crate) fn connect(self: &Arc<Self>, peer: &Endpoint) -> Result {
        let mut guard = self.res.lock();
        let res = guard.as_mut().ok_or(ESHUTDOWN)?;
        let Some(qp) = res.unconnected.take() else {
            pr_err!("connect: run {} is not an unconnected RC server\n", self.id);
            return Err(EINVAL);
        };
        let qp = Arc::new(qp.connect(peer, &RcParams::default())?, GFP_KERNEL)?;
        res.rx_qp = Some(qp.clone());
        self.post_receives(&qp)
    }

    /// Lets a client started with `hold=1` send.
    pub(crate) fn release(&self) -> Result {
        let held = match self.res.lock().as_mut() {
            Some(res) => core::mem::take(&mut res.held),
            None => return Err(ESHUTDOWN),
        };
        if held.is_empty() {
            pr_err!("go: run {} holds no sends\n", self.id);
            return Err(EINVAL);
        }
        self.start_ns.store(now_ns(), Ordering::Relaxed);
        for wr in held {
            post_next(wr);
        }
        Ok(())
    }

    /// Whether the send side has retired every request.
    pub(crate) fn sender_done(&self) -> bool {
        self.inflight.load(Ordering::Acquire) == 0
    }

    /// Whether the run still holds resources.
    pub(crate) fn active(&self) -> bool {
        self.res.lock().is_some()
    }

    /// Waits up to `ms` for the send side to finish; a `direct` run is polled meanwhile.
    /// Process context.
    pub(crate) fn wait_ended(&self, ms: u32) -> Result {
        let mut waited = 0;
        while !self.sender_done() {
            if waited >= ms {
                return Err(ETIMEDOUT);
            }
            if self.spec.poll == PollContext::Direct {
                let polled = match self.res.lock().as_ref() {
                    Some(res) => res.cq.poll_direct(64).unwrap_or(0),
                    None => 0,
                };
                if polled == 0 {
                    let _ = self.ended.wait_timeout(1);
                    waited += 1;
                }
            } else {
                let _ = self.ended.wait_timeout(100);
                waited += 100;
            }
        }
        Ok(())
    }

    /// Ends the run and frees what it holds (process context): stops posting, waits briefly
    /// for receives still on their way, drains both QPs (every request comes back) and drops
    /// the resources. Idempotent.
    pub(crate) fn finish(&self) {
        let Some(res) = self.res.lock().take() else {
            return;
        };
        let stopped = !self.sender_done();
        // Receives can complete a little after their sends; give them time when the run ended
        // by itself (RC delivers everything; UD may lose).
        if !stopped && self.spec.op.uses_recv() && self.spec.role == Role::Loopback {
            let limit = if self.spec.mode == QpType::Rc {
                2000
            } else {
                200
            };
            let mut waited = 0;
            while Stats::get(&self.stats.received) < Stats::get(&self.stats.messages)
                && waited < limit
            {
                if self.spec.poll == PollContext::Direct {
                    let _ = res.cq.poll_direct(64);
                }
                let _ = self.ended.wait_timeout(1);
                waited += 1;
            }
        }
        self.stopping.store(true, Ordering::SeqCst);
        for qp in [&res.tx_qp, &res.rx_qp].into_iter().flatten() {
            qp.drain();
        }
        // Held sends were never posted: they go with the run.
        drop(res.held);
        if self.end_ns.load(Ordering::Relaxed) == 0 {
            self.end_ns.store(now_ns(), Ordering::Relaxed);
        }
        if self.spec.op.uses_recv() && !stopped && self.spec.role == Role::Loopback {
            let sent = Stats::get(&self.stats.messages);
            let got = self.rx_expected.load(Ordering::Relaxed);
            Stats::add(&self.stats.lost, sent.saturating_sub(got));
        }
        drop((res.tx_qp, res.rx_qp, res.unconnected, res.target, res.ah));
        // CM connections: drained and freed here too, then the ids.
        drop(res.link);
        drop(res.cq);
    }

    /// Runs `f` on the run's CM state, if the run still holds its resources.
    pub(crate) fn with_link<R>(&self, f: impl FnOnce(&mut crate::cm::Link) -> R) -> Option<R> {
        self.res.lock().as_mut()?.link.as_mut().map(f)
    }

    /// Gives a CM run its ids and connection (a client's, built before it was connected).
    /// Dropped at once if the run has already been finished.
    pub(crate) fn set_link(&self, link: crate::cm::Link) {
        let mut g = self.res.lock();
        match g.as_mut() {
            Some(res) => res.link = Some(link),
            None => {
                drop(g);
                drop(link);
            }
        }
    }

    /// Starts a run whose requests are its own (a CM ping client): it ends with
    /// [`Run::retire`].
    pub(crate) fn begin(&self) {
        self.start_ns.store(now_ns(), Ordering::Relaxed);
        self.inflight.store(1, Ordering::Release);
    }

    /// Whether the run is being stopped.
    pub(crate) fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Makes the run stop: requests are no longer posted again. Any context.
    pub(crate) fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    /// Retires one send-side request.
    pub(crate) fn retire(&self) {
        if self.inflight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.end_ns.store(now_ns(), Ordering::Relaxed);
            self.ended.complete_all();
        }
    }

    pub(crate) fn error(&self, what: core::fmt::Arguments<'_>) {
        // The first errors of a run are worth a line each; the counters have the rest.
        if Stats::get(&self.stats.errors) < 4 {
            pr_err!("run {}: {}\n", self.id, what);
        }
        Stats::add(&self.stats.errors, 1);
    }
}

/// Registers `mr` for remote read and write through `qp`, waiting for the REG_MR completion
/// (polling `cq` if it is a direct one).
pub(crate) fn register(qp: &Qp<Rts>, cq: &Cq, mr: Mr) -> Result<Mr> {
    let back = Arc::pin_init(
        pin_init!(RegBack {
            slot <- new_spinlock_bh!(None, "rdma_rust_ulp_reg"),
            done <- Signal::new(),
        }),
        GFP_KERNEL,
    )?;
    let reg = Reg {
        mr,
        back: back.clone(),
    };
    qp.post_send(Wr::new(reg, GFP_KERNEL)?, |r, ops| {
        ops.reg_mr(&r.mr, Access::REMOTE_READ | Access::REMOTE_WRITE)?;
        Ok(())
    })?;
    // The QP is connected and the request local: it completes (or flushes) promptly.
    let mut waited = 0;
    while back.done.wait_timeout(1).is_err() {
        if cq.poll_context() == PollContext::Direct {
            let _ = cq.poll_direct(16);
        }
        waited += 1;
        if waited == 10_000 {
            pr_err!("REG_MR did not complete in 10 s\n");
            // The request holds `back`, and `back` would hold the request: drain the QP so
            // that it comes back now, then drop it.
            qp.drain();
            drop(back.slot.lock().take());
            return Err(ETIMEDOUT);
        }
    }
    let (wr, status) = back.slot.lock().take().ok_or(EIO)?;
    let mr = wr.into_inner().mr;
    if status != WcStatus::Success {
        pr_err!("REG_MR completed with {:?}\n", status);
        return Err(EIO);
    }
    Ok(mr)
}

/// Posts `wr` with the next sequence number, or retires it when the run is over. Any context.
fn post_next(mut wr: Wr<Tx>) {
    let run = wr.data().run.clone();
    let qp = wr.data().qp.clone();
    let spec = &run.spec;
    let _order = run.post_lock.lock();
    let seq = run.next_seq.load(Ordering::Relaxed);
    if run.stopping.load(Ordering::Acquire) || seq >= spec.count {
        drop(wr);
        run.retire();
        return;
    }
    run.next_seq.store(seq + 1, Ordering::Relaxed);
    {
        let t = wr.data_mut();
        t.seq = seq;
        if spec.validate && spec.op != Op::Read {
            fill(t.buf.as_mut_slice(), run.id, seq, spec.op.uses_recv());
        }
        t.posted_ns = now_ns();
    }
    let size = spec.size;
    let (op, mode) = (spec.op, spec.mode);
    let posted = qp.post_send(wr, |t, ops| {
        let at = t.remote.offset((t.slot * size) as u64);
        match (mode, op) {
            (QpType::Ud, Op::SendImm) => {
                let ah = t.ah.as_deref().ok_or(EINVAL)?;
                ops.send_ud_imm(&t.buf, 0..size, ah, t.peer_qpn, t.qkey, t.seq as u32)?;
            }
            (QpType::Ud, _) => {
                let ah = t.ah.as_deref().ok_or(EINVAL)?;
                ops.send_ud(&t.buf, 0..size, ah, t.peer_qpn, t.qkey)?;
            }
            (_, Op::Send) => {
                ops.send(&t.buf, 0..size)?;
            }
            (_, Op::SendImm) => {
                ops.send_imm(&t.buf, 0..size, t.seq as u32)?;
            }
            (_, Op::Write) => {
                ops.write(&t.buf, 0..size, at)?;
            }
            (_, Op::Read) => {
                ops.read(&t.buf, 0..size, at)?;
            }
            // CM ping runs have their own requests (`cm.rs`).
            (_, Op::Ping) => return Err(EINVAL),
        }
        Ok(())
    });
    if let Err(e) = posted {
        if e.err != ESHUTDOWN {
            run.error(format_args!("post_send: {:?}", e.err));
        }
        drop(e.wr);
        run.retire();
    }
}

impl Completion for Tx {
    fn done(wr: Wr<Self>, wc: &Wc) {
        let t = wr.data();
        let run = t.run.clone();
        if run.stats.completion(wc.status()) {
            run.error(format_args!(
                "{} {} completed with {:?}",
                crate::ctl::mode_name(run.spec.mode),
                run.spec.op.name(),
                wc.status()
            ));
            // An error moves an RC QP to the error state: the run cannot go on.
            run.stop();
        }
        if !wc.is_ok() {
            drop(wr);
            run.retire();
            return;
        }
        let lat = now_ns().saturating_sub(t.posted_ns);
        run.stats.latency(lat.max(0) as u64);
        Stats::add(&run.stats.messages, 1);
        Stats::add(&run.stats.bytes, run.spec.size as u64);
        if run.spec.validate {
            let size = run.spec.size;
            let ok = match run.spec.op {
                Op::Write => t
                    .target
                    .as_ref()
                    .is_some_and(|m| check_mr(m, t.slot * size, size, t.seq)),
                Op::Read => t
                    .buf
                    .as_slice()
                    .iter()
                    .enumerate()
                    .all(|(i, &b)| b == pattern(t.slot as u64, i)),
                _ => true,
            };
            if !ok {
                Stats::add(&run.stats.corrupt, 1);
                run.error(format_args!(
                    "{} of message {} does not match",
                    run.spec.op.name(),
                    t.seq
                ));
            }
        }
        post_next(wr);
    }
}

impl Completion for Rx {
    fn done(wr: Wr<Self>, wc: &Wc) {
        let r = wr.data();
        let run = r.run.clone();
        if run.stats.completion(wc.status()) {
            run.error(format_args!("receive completed with {:?}", wc.status()));
            run.stop();
        }
        if !wc.is_ok() {
            return;
        }
        let received = run.stats.received.fetch_add(1, Ordering::Relaxed) + 1;
        let spec = &run.spec;
        if spec.role == Role::Server && received == spec.count {
            run.retire();
        }
        if spec.validate {
            let skip = if spec.mode == QpType::Ud { GRH_LEN } else { 0 };
            let len = (wc.byte_len() as usize).saturating_sub(skip);
            let data = r.buf.as_slice().get(skip..skip + len).unwrap_or(&[]);
            let sender = (spec.role == Role::Loopback).then_some(run.id);
            match check(data, sender).filter(|_| len == spec.size) {
                None => {
                    Stats::add(&run.stats.corrupt, 1);
                    run.error(format_args!("received a corrupt message ({len} bytes)"));
                }
                Some(seq) => {
                    let seq = u64::from(seq);
                    if spec.op == Op::SendImm && wc.imm_data() != Some(seq as u32) {
                        Stats::add(&run.stats.corrupt, 1);
                        run.error(format_args!("message {seq}: immediate {:?}", wc.imm_data()));
                    }
                    let want = run.rx_expected.load(Ordering::Relaxed);
                    if seq >= want {
                        Stats::add(&run.stats.lost, seq - want);
                        run.rx_expected.store(seq + 1, Ordering::Relaxed);
                    } else {
                        Stats::add(&run.stats.dup, 1);
                    }
                }
            }
        } else {
            run.rx_expected.fetch_add(1, Ordering::Relaxed);
        }
        if run.stopping.load(Ordering::Acquire) {
            return;
        }
        let qp = r.qp.clone();
        if let Err(e) = qp.post_recv(wr, |r, ops| {
            ops.buf(&r.buf, 0..r.buf.len())?;
            Ok(())
        }) {
            if e.err != ESHUTDOWN {
                run.error(format_args!("post_recv: {:?}", e.err));
            }
        }
    }
}
