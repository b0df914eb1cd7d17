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
//!
//! A ping-pong run (`pingpong=1`) sends one message at a time from the run's sending QP and
//! the receiving QP answers each as soon as it arrives; its latency figures are round trips.
//!
//! [`build`] sets a run up on a device, with its RDMA [`target`]; [`traffic`] is its data
//! path, [`pacing`] holds a validated UD loopback run's sends back for its receiver, and
//! [`payload`] is what a validated message holds.

use crate::counters::Counters;
use crate::ctl::{Fault, PeerTarget, Role, Spec};
use crate::wait::wait_until;
use core::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use kernel::prelude::*;
use kernel::rdma::{
    ah::Ah,
    cq::{Cq, WcStatus},
    device::PortAttr,
    dma::DmaBuf,
    pd::Pd,
    qp::{Endpoint, Init, Qp, QpType, RcParams, Rts},
    sync::{Completion as Signal, SpinLockBh},
    wr::{Wr, GRH_LEN},
};
use kernel::sync::{Arc, Mutex};
use kernel::time::Ktime;
use kernel::{new_mutex, new_spinlock_bh};

mod build;
mod cm_pair;
mod pacing;
mod payload;
mod reg;
mod target;
mod traffic;

pub(crate) use reg::register;

use pacing::Posting;
use target::Target;
use traffic::{post_next, pp_send, PpSlot, Rx, Side, Tx};

/// The Q_Key of the UD QPs of a run.
const QKEY: u32 = 0x1111_0001;

/// The monotonic clock, in ns: what a run's times are read from.
pub(crate) fn now_ns() -> i64 {
    Ktime::ktime_get().to_ns()
}

/// What a run holds besides its QPs (a CM run's ids and connections): released after the QPs
/// are drained.
pub(crate) trait Attached: Send + Sync {
    /// Drains and frees what it holds. Process context.
    fn release(&self);

    /// Called every [`crate::keepalive::TICK_MS`] while the run is active (process context):
    /// CM connections probe a peer that has gone quiet.
    fn tick(&self) {}
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
    pub(crate) target: Option<Arc<Target>>,
    pub(crate) ah: Option<Arc<Ah>>,
    /// A CM UD client's peer: its QP number and Q_Key.
    pub(crate) ud_peer: Option<(u32, u32)>,
    /// A CM run's ids and connections (released after the QPs above).
    pub(crate) attached: Option<Arc<dyn Attached>>,
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
            attached: None,
            cq,
            _pd: pd,
        }
    }
}

/// What a ping-pong run keeps besides its requests.
#[pin_data]
struct PingPong {
    /// When the ping in flight was posted.
    ping_ns: AtomicI64,
    /// The run has ended (its last round trip is back, it failed or it was stopped).
    over: AtomicBool,
    /// Each side's send requests that are back, and what it owes.
    #[pin]
    ping: SpinLockBh<PpSlot>,
    #[pin]
    pong: SpinLockBh<PpSlot>,
}

impl PingPong {
    fn new() -> impl PinInit<Self> {
        pin_init!(PingPong {
            ping_ns: AtomicI64::new(0),
            over: AtomicBool::new(false),
            ping <- new_spinlock_bh!(PpSlot::new(), "rdma_rust_ulp_ping"),
            pong <- new_spinlock_bh!(PpSlot::new(), "rdma_rust_ulp_pong"),
        })
    }
}

/// A run and its counters.
#[pin_data]
pub(crate) struct Run {
    pub(crate) id: u32,
    pub(crate) spec: Spec,
    pub(crate) counters: Counters,
    stopping: AtomicBool,
    /// A server's receives are over (its count arrived, or one failed): its "send side" has
    /// retired.
    rx_over: AtomicBool,
    /// Send-side requests owned by the device or a handler (not yet retired).
    inflight: AtomicU32,
    /// Sequence numbers handed out to sends.
    next_seq: AtomicU64,
    /// The sequence number the receiver expects next.
    rx_expected: AtomicU64,
    pub(crate) start_ns: AtomicI64,
    pub(crate) end_ns: AtomicI64,
    #[pin]
    pp: PingPong,
    /// This host's QP of a server or client run, for the peer.
    pub(crate) endpoint: Option<Endpoint>,
    /// The order of the posts, and a paced run's sends waiting for its receiver.
    #[pin]
    posting: Posting,
    /// Signalled when the last send-side request retires.
    #[pin]
    ended: Signal,
    #[pin]
    res: Mutex<Option<Res>>,
}

/// Receives each QP of a ping-pong run keeps posted (one message is in flight at a time).
const PP_RECEIVES: u32 = 4;

/// The RC parameters of a run's QPs: as many RDMA READs outstanding, as initiator and as
/// target, as the run keeps in flight (the device caps it), as perftest's `-o` gives.
pub(crate) fn rc_params(spec: &Spec) -> RcParams {
    RcParams {
        max_rd_atomic: spec.depth.min(255) as u8,
        ..RcParams::default()
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
    /// A run holding `res`, not started.
    pub(crate) fn new(
        spec: &Spec,
        id: u32,
        endpoint: Option<Endpoint>,
        res: Res,
    ) -> Result<Arc<Run>> {
        let counters = Counters::new()?;
        Arc::pin_init(
            pin_init!(Run {
                id,
                spec: *spec,
                counters,
                stopping: AtomicBool::new(false),
                rx_over: AtomicBool::new(false),
                inflight: AtomicU32::new(0),
                next_seq: AtomicU64::new(0),
                rx_expected: AtomicU64::new(0),
                start_ns: AtomicI64::new(0),
                end_ns: AtomicI64::new(0),
                pp <- PingPong::new(),
                endpoint,
                posting <- Posting::new(),
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
            self.post_receives(rx_qp, res.target.as_ref())?;
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
        // A QP number nobody has (rxe numbers its QPs upwards from 0x11), or a Q_Key the
        // receiver does not have (its high bit clear: a set one asks for the sender's own).
        let (peer_qpn, qkey) = match spec.fault {
            Fault::BadQpn => (0xff_fff0, qkey),
            Fault::BadQkey => (peer_qpn, qkey ^ 1),
            _ => (peer_qpn, qkey),
        };
        let batch = spec.batch as usize;
        let tx = |qp: &Arc<Qp<Rts>>, slot: usize, side: Option<Side>| -> Result<Wr<Tx>> {
            let mut bufs = KVec::with_capacity(batch, GFP_KERNEL)?;
            for _ in 0..batch {
                bufs.push(DmaBuf::new(qp.pd(), spec.size, GFP_KERNEL)?, GFP_KERNEL)?;
            }
            let t = Tx {
                bufs,
                run: self.clone(),
                qp: qp.clone(),
                ah: res.ah.clone(),
                target: res.target.clone(),
                peer_qpn,
                qkey,
                remote: None,
                slot,
                seq: 0,
                n: 0,
                posted_ns: 0,
                side,
            };
            Wr::new(t, GFP_KERNEL)
        };
        if spec.pingpong {
            let rx_qp = res.rx_qp.as_ref().ok_or(EINVAL)?;
            self.receives_on(tx_qp, PP_RECEIVES, Some(Side::Ping), res.target.as_ref())?;
            // Two send requests on each side: one may still be on its way back when the
            // next message is due.
            let first = tx(tx_qp, 0, Some(Side::Ping))?;
            let spare = tx(tx_qp, 0, Some(Side::Ping))?;
            let answers = [
                tx(rx_qp, 0, Some(Side::Pong))?,
                tx(rx_qp, 0, Some(Side::Pong))?,
            ];
            drop(self.pp.ping.lock().put(spare));
            {
                let mut pong = self.pp.pong.lock();
                for wr in answers {
                    drop(pong.put(wr));
                }
            }
            self.inflight.store(1, Ordering::Release);
            drop(guard);
            pp_send(first, self, 0);
            return Ok(());
        }
        // The parser keeps `batch` in 1..=depth, dividing `depth`.
        let batch_n = spec.batch.max(1);
        let posts = (spec.depth / batch_n) as usize;
        let n = posts.min(spec.count.div_ceil(u64::from(batch_n)) as usize);
        let mut txs = KVec::with_capacity(n, GFP_KERNEL)?;
        for slot in 0..n {
            txs.push(tx(tx_qp, slot, None)?, GFP_KERNEL)?;
        }
        self.reserve_parking(n)?;
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

    /// Posts the receives of the receiving QP `rx_qp`, if the run's messages need them (a
    /// ping-pong's WRITEs with immediate data land in `target`).
    fn post_receives(
        self: &Arc<Self>,
        rx_qp: &Arc<Qp<Rts>>,
        target: Option<&Arc<Target>>,
    ) -> Result {
        let spec = &self.spec;
        if spec.pingpong {
            return self.receives_on(rx_qp, PP_RECEIVES, Some(Side::Pong), target);
        }
        if !spec.op.uses_recv() {
            return Ok(());
        }
        self.receives_on(rx_qp, spec.receives(), None, None)
    }

    /// Posts `n` receives on `qp`.
    fn receives_on(
        self: &Arc<Self>,
        qp: &Arc<Qp<Rts>>,
        n: u32,
        side: Option<Side>,
        target: Option<&Arc<Target>>,
    ) -> Result {
        let spec = &self.spec;
        let extra = if spec.mode == QpType::Ud { GRH_LEN } else { 0 };
        for _ in 0..n {
            let rx = Rx {
                buf: DmaBuf::new(qp.pd(), spec.size + extra, GFP_KERNEL)?,
                run: self.clone(),
                qp: qp.clone(),
                side,
                target: target.cloned(),
            };
            qp.post_recv(Wr::new(rx, GFP_KERNEL)?, Rx::scatter)?;
        }
        Ok(())
    }

    /// Connects an RC server's QP to the client's `peer` and posts its receives; an RDMA
    /// server registers its target (the client's WRITEs land there, its READs come from there).
    pub(crate) fn connect(self: &Arc<Self>, peer: &Endpoint) -> Result {
        let mut guard = self.res.lock();
        let res = guard.as_mut().ok_or(ESHUTDOWN)?;
        let Some(qp) = res.unconnected.take() else {
            pr_err!("connect: run {} is not an unconnected RC server\n", self.id);
            return Err(EINVAL);
        };
        let qp = Arc::new(qp.connect(peer, &rc_params(&self.spec))?, GFP_KERNEL)?;
        res.rx_qp = Some(qp.clone());
        if self.spec.op.is_rdma() {
            // One MR (checked when the run was built): the peer gets one address and rkey.
            let t = Target::for_run(&self.spec, &qp, &res.cq, self.spec.depth as usize)?;
            res.target = Some(Arc::new(t, GFP_KERNEL)?);
        }
        self.post_receives(&qp, None)
    }

    /// An RDMA server's target, for the client: its first slot and its length.
    pub(crate) fn target_remote(&self) -> Option<PeerTarget> {
        let res = self.res.lock();
        let t = res.as_ref()?.target.as_ref()?;
        Some(PeerTarget {
            remote: t.remote(0).ok()?,
            len: t.single_len()? as u64,
        })
    }

    /// Lets a client started with `hold=1` send; an RDMA client gets the server's target,
    /// which must hold its `depth` slots.
    pub(crate) fn release(&self, target: Option<PeerTarget>) -> Result {
        let spec = &self.spec;
        if spec.op.is_rdma() != target.is_some() {
            pr_err!(
                "go: run {}: remote= is for RDMA clients, which need it\n",
                self.id
            );
            return Err(EINVAL);
        }
        let want = u64::from(spec.depth) * spec.size as u64;
        if let Some(t) = target.filter(|t| t.len < want) {
            pr_err!(
                "go: run {}: depth x size = {want} bytes over the server's target of {}\n",
                self.id,
                t.len
            );
            return Err(EINVAL);
        }
        let remote = target.map(|t| t.remote);
        let mut held = match self.res.lock().as_mut() {
            Some(res) => core::mem::take(&mut res.held),
            None => return Err(ESHUTDOWN),
        };
        if held.is_empty() {
            pr_err!("go: run {} holds no sends\n", self.id);
            return Err(EINVAL);
        }
        for wr in held.iter_mut() {
            wr.data_mut().remote = remote;
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

    /// Waits up to `ms` for the send side to finish, or for the run to be finished (a
    /// stopped server's count of receives never runs out); a `direct` run is polled
    /// meanwhile. Process context.
    pub(crate) fn wait_ended(&self, ms: u32) -> Result {
        let cq = self.res.lock().as_ref().map(|r| r.cq.clone());
        wait_until(
            cq.as_deref(),
            Some(&self.ended),
            ms,
            self.spec.pace(),
            || self.sender_done() || !self.active(),
        )
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
            let _ = wait_until(Some(&res.cq), None, limit, self.spec.pace(), || {
                Counters::get(&self.counters.received) >= Counters::get(&self.counters.messages)
            });
        }
        self.stop();
        for qp in [&res.tx_qp, &res.rx_qp].into_iter().flatten() {
            // Process context; a refused drain would leave it to the QP's drop.
            let _ = qp.drain();
        }
        // Held sends were never posted, and a ping-pong's spare requests are back: they go
        // with the run (the spares hold the run: a cycle, broken here).
        drop(res.held);
        let spares = (self.pp.ping.lock().clear(), self.pp.pong.lock().clear());
        drop(spares);
        if self.end_ns.load(Ordering::Relaxed) == 0 {
            self.end_ns.store(now_ns(), Ordering::Relaxed);
        }
        if self.spec.op.uses_recv() && !stopped && self.spec.role == Role::Loopback {
            let sent = Counters::get(&self.counters.messages);
            let got = self.rx_expected.load(Ordering::Relaxed);
            Counters::add(&self.counters.lost, sent.saturating_sub(got));
        }
        drop((res.tx_qp, res.rx_qp, res.unconnected, res.target, res.ah));
        // CM connections: drained and freed here too, then the ids.
        if let Some(a) = res.attached {
            a.release();
        }
        drop(res.cq);
        // Whoever waits for the run's end: it is over.
        self.ended.complete_all();
    }

    /// What the run holds besides its QPs, while it is active.
    pub(crate) fn attached(&self) -> Option<Arc<dyn Attached>> {
        self.res.lock().as_ref().and_then(|r| r.attached.clone())
    }

    /// Gives a run what it holds besides its QPs (a CM client's connection, made before it
    /// was connected); released at once if the run has already been finished.
    pub(crate) fn attach(&self, a: Arc<dyn Attached>) {
        let mut g = self.res.lock();
        match g.as_mut() {
            Some(res) => res.attached = Some(a),
            None => {
                drop(g);
                a.release();
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

    /// Makes the run stop: requests are no longer posted again, and parked ones retire. Any
    /// context.
    pub(crate) fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        // After the flag: [`Run::pace`] looks at it under the same lock, so nothing parks
        // once this has emptied the list.
        for wr in self.take_parked() {
            drop(wr);
            self.retire();
        }
    }

    /// Counts a completion of one of the run's requests (`what`) by its status; returns
    /// whether it succeeded. Any context.
    ///
    /// An error stops the run (it moved an RC QP to the error state: the run cannot go on).
    /// So does a flush while the run is not stopping, as an error: the QP failed without a
    /// completion error of its own (the peer broke a rule of this side's responder, or the
    /// QP was forced into the error state), and nothing else would end the run. Once the run
    /// is stopping, flushes are its drain.
    pub(super) fn completed(&self, status: WcStatus, what: &str) -> bool {
        if self.counters.completion(status) {
            self.error(format_args!(
                "{} {what} completed with {status:?}",
                crate::ctl::mode_name(self.spec.mode)
            ));
            self.stop();
        } else if status == WcStatus::WrFlushErr && !self.stopping.swap(true, Ordering::SeqCst) {
            self.error(format_args!(
                "{what} was flushed: the QP failed without an error of its own"
            ));
        }
        status == WcStatus::Success
    }

    /// A server's receives are over: the last one it counts arrived, or one failed (its QP
    /// failed: no more will arrive). Retires the server's "send side" the first time. Any
    /// context.
    pub(super) fn receives_over(&self) {
        if !self.rx_over.swap(true, Ordering::AcqRel) {
            self.retire();
        }
    }

    /// Claims up to `batch` sequence numbers for one post: the first, and how many; `None` once
    /// `count` have been handed out. Any context.
    fn claim(&self, batch: u32) -> Option<(u64, usize)> {
        let count = self.spec.count;
        let mut cur = self.next_seq.load(Ordering::Relaxed);
        loop {
            if cur >= count {
                return None;
            }
            let n = u64::from(batch).min(count - cur);
            match self.next_seq.compare_exchange_weak(
                cur,
                cur + n,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some((cur, n as usize)),
                Err(v) => cur = v,
            }
        }
    }

    /// The send requests and debts of a ping-pong side.
    fn pp(&self, side: Side) -> &SpinLockBh<PpSlot> {
        match side {
            Side::Ping => &self.pp.ping,
            Side::Pong => &self.pp.pong,
        }
    }

    /// Ends a ping-pong run (its last round trip is back, it failed or it was stopped); only
    /// the first call counts.
    fn pp_end(&self) {
        if !self.pp.over.swap(true, Ordering::AcqRel) {
            self.retire();
        }
    }

    /// Retires one send-side request.
    pub(crate) fn retire(&self) {
        if self.inflight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.end_ns.store(now_ns(), Ordering::Relaxed);
            self.ended.complete_all();
        }
    }

    /// Forces the run's QPs into the error state (`fail`): what they hold comes back
    /// flushed, and the run ends (a server's with its first flushed receive), with the error
    /// counted. Process context.
    pub(crate) fn fail(&self) -> Result {
        let qps = match self.res.lock().as_ref() {
            Some(res) => [res.tx_qp.clone(), res.rx_qp.clone()],
            None => [None, None],
        };
        if qps.iter().all(Option::is_none) {
            pr_err!(
                "fail: run {} has no QP of its own (it has ended, or is an rdma_cm run)\n",
                self.id
            );
            return Err(EINVAL);
        }
        self.error(format_args!("QPs forced into the error state"));
        // Stopping first: the flushes that follow are this failure's, not news.
        self.stop();
        for qp in qps.iter().flatten() {
            qp.set_error()?;
        }
        Ok(())
    }

    pub(crate) fn error(&self, what: core::fmt::Arguments<'_>) {
        // The first errors of a run are worth a line each; the counters have the rest.
        if Counters::get(&self.counters.errors) < 4 {
            pr_err!("run {}: {}\n", self.id, what);
        }
        Counters::add(&self.counters.errors, 1);
    }
}
