// SPDX-License-Identifier: GPL-2.0

//! rping's protocol over one RC connection (rdma-core's `librdmacm/examples/rping.c`, also
//! krping's), either side, driven from completion handlers. See [`super`] for the round trip.

use crate::counters::Counters;
use crate::run::{now_ns, register, Run};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use kernel::new_spinlock_bh;
use kernel::prelude::*;
use kernel::rdma::{
    cq::{Cq, Wc, WcStatus},
    dma::DmaBuf,
    mr::{Mr, Remote},
    pd::Pd,
    qp::{Init, Qp, Rts},
    sync::SpinLockBh,
    wr::{Completion, Wr},
};
use kernel::sync::Arc;
use wire::{check_ping, fill_ping, same, Info, INFO_LEN, PAGE};

mod wire;

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
    /// ends once it has been delivered and the client has disconnected (or it has failed),
    /// not before: ending it tears the connection down, which would flush a go ahead still
    /// on its way.
    last_round: bool,
}

/// Keep-alive ticks without a round trip after which a connection probes its peer (or, a
/// server whose client has not disconnected after the last round trip, stops waiting).
const QUIET_TICKS: u32 = 2000 / crate::keepalive::TICK_MS;

// States of a server's `Conn::bye`. After the run's last round trip the client ends the
// connection, as it does with rping's own server, which waits for the client's disconnect:
// a server that tore down at once closed while the client closed too, and a stock rping
// client on soft-iWARP once saw neither its disconnect event nor its flushes then (it hung
// in `pthread_join` of its CQ thread).

/// Nothing owed yet.
const BYE_NONE: u8 = 0;
/// The last go ahead was delivered: the run ends when the client disconnects.
const BYE_WAITING: u8 = 1;
/// Nothing more to wait for: the client went first, or the run has ended.
const BYE_ENDED: u8 = 2;

/// One RC connection of a ping run.
#[pin_data]
pub(super) struct Conn {
    run: Arc<Run>,
    server: bool,
    size: usize,
    /// Set once the connection stops for good.
    ended: AtomicBool,
    #[pin]
    qp: SpinLockBh<Option<Arc<Qp<Rts>>>>,
    #[pin]
    st: SpinLockBh<Ping>,
    /// The keep-alive request, while it is not posted.
    #[pin]
    probe: SpinLockBh<Option<Wr<Probe>>>,
    /// Round trips at the last keep-alive tick, and ticks since one was made.
    seen: AtomicU64,
    quiet: AtomicU32,
    /// Server: whether the run's end waits for the client's disconnect (`BYE_*`).
    bye: AtomicU8,
}

/// A keep-alive of a quiet connection: a zero-length RDMA WRITE, which fails once the peer is
/// gone. RC has no keep-alive of its own: a side that waits for its peer, with nothing in
/// flight, would never learn that the peer died (its host killed, its cable pulled).
struct Probe {
    conn: Arc<Conn>,
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
    pub(super) fn new(run: &Arc<Run>, server: bool, size: usize) -> Result<Arc<Conn>> {
        Arc::pin_init(
            pin_init!(Conn {
                run: run.clone(),
                server,
                size,
                ended: AtomicBool::new(false),
                qp <- new_spinlock_bh!(None, "rdma_rust_ulp_cm_qp"),
                probe <- new_spinlock_bh!(None, "rdma_rust_ulp_cm_probe"),
                seen: AtomicU64::new(0),
                quiet: AtomicU32::new(0),
                bye: AtomicU8::new(BYE_NONE),
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
    pub(super) fn prepare(self: &Arc<Self>, qp: &Qp<Init>, pd: &Arc<Pd>) -> Result {
        let recv = Wr::new(
            Msg {
                conn: self.clone(),
                buf: DmaBuf::new(pd, INFO_LEN, GFP_KERNEL)?,
                slot: RECV,
            },
            GFP_KERNEL,
        )?;
        qp.post_recv(recv, |m, ops| {
            ops.buf(&mut m.buf, 0..INFO_LEN)?;
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
    pub(super) fn begin(self: &Arc<Self>, qp: Qp<Rts>, cq: &Cq) -> Result {
        let qp = Arc::new(qp, GFP_KERNEL)?;
        *self.qp.lock() = Some(qp.clone());
        *self.probe.lock() = Some(Wr::new(Probe { conn: self.clone() }, GFP_KERNEL)?);
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
            let r = mr.remote()?;
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
                ops.buf(&mut m.buf, 0..INFO_LEN)?;
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
                ops.read(&mut x.buf, 0..len, remote)?;
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

    /// A request of the connection came back flushed (any context). Once the connection has
    /// ended (or is closing) that is its drain; before, the QP failed without a completion
    /// error of its own: the peer's READ or WRITE broke a rule of this side's responder (an
    /// rkey it refuses), which moves the QP to the error state with nothing to report but
    /// the flushes. Nothing else would end the connection then: its receives are gone.
    /// Not so where rdma_cm reports the end after the flush (iWARP): the disconnect ends
    /// the connection there.
    fn flushed(&self, what: &str) {
        if self.ended.load(Ordering::Acquire) || self.run.stopping() || self.flush_is_no_news() {
            return;
        }
        self.fail(format_args!(
            "{what} was flushed: the QP failed without an error of its own"
        ));
    }

    /// Whether the connection's device may flush before rdma_cm reports the disconnect
    /// (any context).
    fn flush_is_no_news(&self) -> bool {
        self.qp
            .lock()
            .as_ref()
            .is_some_and(|qp| qp.pd().device().flush_may_precede_disconnect())
    }

    /// Marks the connection ended before its QP is moved to the error state (process
    /// context), so that the flushes that follow are not taken for a failure; a server run
    /// that waited for its client's disconnect ends ([`Conn::peer_gone`]).
    pub(super) fn closing(&self) {
        self.ended.store(true, Ordering::Release);
        self.peer_gone();
    }

    /// Server: the run's last go ahead completed (`ok`: it was delivered). A delivered one
    /// ends the run when the client disconnects, or after [`QUIET_TICKS`] ticks without; a
    /// failed one, or one the client's disconnect came before, ends it now (any context).
    /// Called once per connection.
    fn last_delivered(&self, ok: bool) {
        if ok
            && self
                .bye
                .compare_exchange(BYE_NONE, BYE_WAITING, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            return;
        }
        self.bye.store(BYE_ENDED, Ordering::Release);
        self.run.retire();
    }

    /// The connection is ending (the client disconnected, or it is being stopped or freed):
    /// a run that waited for that ends. Idempotent, as [`Conn::closing`] runs more than once
    /// (on the disconnect, and again on teardown, the only call on stop and device removal).
    fn peer_gone(&self) {
        if self.bye.swap(BYE_ENDED, Ordering::AcqRel) == BYE_WAITING {
            self.run.retire();
        }
    }

    /// Stops the connection; a client's run ends with it.
    pub(super) fn end(&self) {
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
        run.counters
            .latency(now_ns().saturating_sub(st.started_ns).max(0) as u64);
        Counters::add(&run.counters.messages, 1);
        Counters::add(&run.counters.bytes, 2 * size as u64);
        if !ok {
            Counters::add(&run.counters.corrupt, 1);
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
    fn xfer_done(&self, mut wr: Wr<Xfer>) {
        let run = &self.run;
        let mut st = self.st.lock();
        match st.phase {
            Phase::Reading => {
                Counters::add(&run.counters.received, 1);
                if run.spec.validate {
                    let data = wr
                        .data_mut()
                        .buf
                        .as_slice()
                        .get(..st.len as usize)
                        .unwrap_or(&[]);
                    match check_ping(data) {
                        None => {
                            Counters::add(&run.counters.corrupt, 1);
                            run.error(format_args!(
                                "ping {}: {} bytes read are not an rping message",
                                st.seq, st.len
                            ));
                        }
                        Some(n) if n > st.seq => {
                            Counters::add(&run.counters.lost, n - st.seq);
                            st.seq = n;
                        }
                        Some(n) if n < st.seq => {
                            Counters::add(&run.counters.dup, 1);
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
                run.counters
                    .latency(now_ns().saturating_sub(st.started_ns).max(0) as u64);
                Counters::add(&run.counters.bytes, 2 * u64::from(st.len));
                let done = run.counters.messages.fetch_add(1, Ordering::Relaxed) + 1;
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

    /// Round trips done: the server's count, the client's ping in flight.
    pub(super) fn round_trips(&self) -> u64 {
        self.st.lock().seq
    }

    /// A keep-alive tick (process context): after [`QUIET_TICKS`] ticks without a round trip the
    /// connection probes its peer; a dead peer fails the probe, and the connection ends with
    /// an error, after the QP's retries (3.8 s with the default ACK timeout and retry count).
    pub(super) fn tick(&self) {
        if self.ended.load(Ordering::Acquire) {
            return;
        }
        let seq = self.round_trips();
        if self.seen.swap(seq, Ordering::Relaxed) != seq {
            self.quiet.store(0, Ordering::Relaxed);
            return;
        }
        if self.quiet.fetch_add(1, Ordering::Relaxed) + 1 < QUIET_TICKS {
            return;
        }
        self.quiet.store(0, Ordering::Relaxed);
        if self
            .bye
            .compare_exchange(BYE_WAITING, BYE_ENDED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            pr_info!(
                "run {}: the client did not disconnect after the last round trip; ending\n",
                self.run.id
            );
            self.run.retire();
            return;
        }
        let qp = self.qp.lock().clone();
        // None: a probe is still out.
        let (Some(qp), Some(wr)) = (qp, self.probe.lock().take()) else {
            return;
        };
        if let Err(e) = qp.post_send(wr, |_, ops| {
            ops.keepalive()?;
            Ok(())
        }) {
            *self.probe.lock() = Some(e.wr);
        }
    }

    /// Frees the connection's QP and buffers (process context): the QP is drained first, so
    /// every request has come back.
    pub(super) fn teardown(&self) {
        self.closing();
        let qp = self.qp.lock().take();
        if let Some(qp) = &qp {
            // Process context; if the drain is refused, dropping the QP drains it.
            let _ = qp.drain();
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
        let probe = self.probe.lock().take();
        drop((sends, xfer, source, sink, probe, qp));
    }
}

impl Completion for Msg {
    fn done(mut wr: Wr<Self>, wc: &Wc) {
        let conn = wr.data().conn.clone();
        if conn.run.counters.completion(wc.status()) {
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
        if wc.status() == WcStatus::WrFlushErr {
            conn.flushed(if wr.data().slot == RECV {
                "a receive"
            } else {
                "a send"
            });
        }
        if wr.data().slot == RECV {
            if !wc.is_ok() {
                return;
            }
            let info = (wc.byte_len() as usize == INFO_LEN)
                .then(|| Info::decode(wr.data_mut().buf.as_slice()))
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
            conn.last_delivered(wc.is_ok());
        }
    }
}

impl Completion for Xfer {
    fn done(wr: Wr<Self>, wc: &Wc) {
        let conn = wr.data().conn.clone();
        if conn.run.counters.completion(wc.status()) {
            conn.fail(format_args!("RDMA completed with {:?}", wc.status()));
        } else if wc.status() == WcStatus::WrFlushErr {
            conn.flushed("an RDMA request");
        }
        if wc.is_ok() {
            conn.xfer_done(wr);
        }
    }
}

impl Completion for Probe {
    fn done(wr: Wr<Self>, wc: &Wc) {
        let conn = wr.data().conn.clone();
        // Not counted with the run's completions: a probe is not a message.
        match wc.status() {
            WcStatus::Success => {}
            WcStatus::WrFlushErr => conn.flushed("a keep-alive"),
            s => conn.fail(format_args!("keep-alive failed: {s:?}")),
        }
        if !conn.ended.load(Ordering::Acquire) {
            *conn.probe.lock() = Some(wr);
        }
    }
}
