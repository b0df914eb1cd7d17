// SPDX-License-Identifier: GPL-2.0

//! KUnit cases of the `kernel::rdma` verbs: real data between two QPs of one rxe device.
//!
//! Every case builds its PD, CQs and QPs on `rxe0` (the harness creates it; without it the
//! case returns `ENODEV`, a visible skip), moves data, checks it, and drops everything. Each
//! request carries a guard counted in `LIVE_WRS`: a request that never came back to its owner
//! shows up there, and kmemleak sees what else leaked.

use core::sync::atomic::{AtomicUsize, Ordering};
use kernel::{
    c_str,
    ffi::c_int,
    new_spinlock_bh,
    page::{Page, PAGE_SIZE},
    prelude::*,
    rdma::{
        ah::Ah,
        cq::{Cq, PollContext, Wc, WcOpcode, WcStatus},
        device::Device,
        dma::{DmaBuf, DmaPage, DmaSg, FromDevice, PageOwner, Segment, ToDevice, MAX_SG_PAGES},
        event::{AsyncEvent, AsyncHandler, Event, EventHandler, EventRegistration},
        mr::{Access, Mr, Region, Remote},
        pd::Pd,
        qp::{CanRecv, CanSend, Cm, Init, Qp, QpCaps, QpState, QpType, RcParams, Rts, State},
        srq::Srq,
        sync::{msleep, Completion as Signal, SpinLockBh},
        wr::{Completion, SendOps, Wr, GRH_LEN},
    },
    sync::Arc,
    types::ARef,
};

use crate::ret;

mod asyncev;
mod cm;
mod ctor;
mod data;
mod faults;
mod invalidate;
mod iwarp;
mod lifetimes;
mod pool;
mod query;
mod soundness;
mod srq;
mod storage;
mod ud;
mod wait;

extern "C" {
    fn rdma_kunit_res_count(name: *const kernel::ffi::c_char) -> c_int;
}

/// RDMA objects (PDs, CQs, QPs, MRs, SRQs) the core tracks on device `name`.
fn res_count_on(name: &CStr) -> Result<i32> {
    // SAFETY: `name` is a NUL-terminated string that outlives the call.
    let n = unsafe { rdma_kunit_res_count(name.as_char_ptr()) };
    if n < 0 {
        return Err(Error::from_errno(n));
    }
    Ok(n)
}

/// RDMA objects the core tracks on rxe0.
fn res_count() -> Result<i32> {
    res_count_on(c_str!("rxe0"))
}

/// Waits up to `ms` for the RDMA objects on `name` to number `want` (teardowns handed to
/// process context finish a little later); says what it found if they do not.
fn settle(name: &CStr, want: i32, ms: u32) -> Result {
    let mut n = res_count_on(name)?;
    let mut waited = 0;
    while n != want && waited < ms {
        msleep(10);
        waited += 10;
        n = res_count_on(name)?;
    }
    check!(
        n == want,
        "{name}: {n} RDMA objects after {ms} ms, expected {want}"
    );
    Ok(())
}

/// How long a case waits for one completion.
const WAIT_MS: u32 = 10_000;

/// What a completion reported, with the payload its request owned.
struct Done<P> {
    status: WcStatus,
    opcode: Option<WcOpcode>,
    byte_len: u32,
    imm: Option<u32>,
    src_qp: Option<u32>,
    qp_num: u32,
    wc: Wc,
    payload: P,
}

impl<P> Done<P> {
    fn of(wc: &Wc, payload: P) -> Self {
        Done {
            status: wc.status(),
            opcode: wc.opcode(),
            byte_len: wc.byte_len(),
            imm: wc.imm_data(),
            src_qp: wc.src_qp(),
            qp_num: wc.qp_num(),
            wc: *wc,
            payload,
        }
    }
}

/// Collects completions (in softirq context) for the test thread.
#[pin_data]
struct Sink<P> {
    #[pin]
    list: SpinLockBh<KVec<Done<P>>>,
    #[pin]
    sig: Signal,
}

fn sink<P>() -> Result<Arc<Sink<P>>> {
    Arc::pin_init(
        pin_init!(Sink {
            list <- new_spinlock_bh!(KVec::new(), "rdma_kunit_sink"),
            sig <- Signal::new(),
        }),
        GFP_KERNEL,
    )
}

impl<P> Sink<P> {
    /// Waits for `n` completions and returns everything collected so far.
    fn wait(&self, n: usize) -> Result<KVec<Done<P>>> {
        for i in 0..n {
            if self.sig.wait_timeout(WAIT_MS).is_err() {
                pr_err!("timed out waiting for completion {} of {}\n", i + 1, n);
                return Err(ETIMEDOUT);
            }
        }
        let mut list = self.list.lock();
        Ok(core::mem::take(&mut *list))
    }
}

/// Requests alive: created and not yet given back and dropped.
static LIVE_WRS: AtomicUsize = AtomicUsize::new(0);

struct Live;

impl Drop for Live {
    fn drop(&mut self) {
        LIVE_WRS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A test request: its payload (buffers, MR, AH) and where to report.
struct TWr<P: Send + 'static> {
    payload: P,
    sink: Arc<Sink<P>>,
    _live: Live,
}

fn twr<P: Send + 'static>(payload: P, sink: &Arc<Sink<P>>) -> Result<Wr<TWr<P>>> {
    LIVE_WRS.fetch_add(1, Ordering::Relaxed);
    Wr::new(
        TWr {
            payload,
            sink: sink.clone(),
            _live: Live,
        },
        GFP_KERNEL,
    )
}

impl<P: Send + 'static> Completion for TWr<P> {
    fn done(wr: Wr<Self>, wc: &Wc) {
        let TWr {
            payload,
            sink,
            _live,
        } = wr.into_inner();
        let d = Done::of(wc, payload);
        // A failed push loses a result, which the case reports as a missing completion.
        let _ = sink.list.lock().push(d, GFP_ATOMIC);
        sink.sig.complete();
    }
}

/// An rdma_cm id handler that expects no event.
struct Quiet;

impl kernel::rdma::cm::Handler for Quiet {
    fn event(&self, _id: &kernel::rdma::cm::Id, _event: kernel::rdma::cm::Event<'_, Self>) {}
}

fn rxe0() -> Result<ARef<Device>> {
    Device::get_by_name(c_str!("rxe0")).ok_or(ENODEV)
}

/// A connected loopback pair of RC QPs on one device.
struct RcPair {
    a: Qp<Rts>,
    b: Qp<Rts>,
    cq: Arc<Cq>,
    pd: Arc<Pd>,
}

fn rc_pair_with(dev: &Device, caps: &QpCaps, poll: PollContext, p: &RcParams) -> Result<RcPair> {
    rc_pair_on(&Pd::new(dev)?, &Cq::new(dev, 256, 0, poll)?, caps, p)
}

/// A connected loopback pair of RC QPs of `pd`, both reporting to `cq`.
fn rc_pair_on(pd: &Arc<Pd>, cq: &Arc<Cq>, caps: &QpCaps, p: &RcParams) -> Result<RcPair> {
    let access =
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    let a = Qp::new(pd, QpType::Rc, cq, cq, caps)?.to_init(1, access)?;
    let b = Qp::new(pd, QpType::Rc, cq, cq, caps)?.to_init(1, access)?;
    let (ea, eb) = (a.endpoint()?, b.endpoint()?);
    let a = a.connect(&eb, p)?;
    let b = b.connect(&ea, p)?;
    Ok(RcPair {
        a,
        b,
        cq: cq.clone(),
        pd: pd.clone(),
    })
}

/// A UD QP of `pd` on port 1 with Q_Key `qkey`, reporting to `cq`, ready to send.
fn ud_qp(pd: &Arc<Pd>, cq: &Arc<Cq>, qkey: u32) -> Result<Qp<Rts>> {
    Qp::new(pd, QpType::Ud, cq, cq, &QpCaps::default())?
        .to_init_ud(1, qkey)?
        .ready_ud()
}

/// Logs the state of a QP whose request did not complete, with the device's counters.
fn diag_qp<S: State>(qp: &Qp<S>) {
    pr_err!(
        "QP {} {:?} ({}/{} out)\n",
        qp.qpn(),
        qp.query_state(),
        qp.send_outstanding(),
        qp.recv_outstanding()
    );
    device_diag();
}

/// Logs the state of a pair whose traffic did not complete, with what the device says.
fn diag(p: &RcPair) {
    pr_err!(
        "QP {} {:?} ({}/{} out), QP {} {:?} ({}/{} out), endpoints {:?} {:?}\n",
        p.a.qpn(),
        p.a.query_state(),
        p.a.send_outstanding(),
        p.a.recv_outstanding(),
        p.b.qpn(),
        p.b.query_state(),
        p.b.send_outstanding(),
        p.b.recv_outstanding(),
        p.a.endpoint(),
        p.b.endpoint(),
    );
    device_diag();
}

/// Logs the QPs the core knows and the protocol counters of rxe0 and rxe1.
fn device_diag() {
    let _ = crate::run(kernel::fmt!(
        "(rdma -d res show qp; for d in rxe0 rxe1; do cd /sys/class/infiniband/$d/ports/1/hw_counters && grep . * | sed \"s/^/$d: /\"; done) 2>&1 | while read -r l; do echo \"rdma_kunit: diag: $l\" > /dev/kmsg; done"
    ));
}

fn rc_pair(dev: &Device) -> Result<RcPair> {
    rc_pair_with(
        dev,
        &QpCaps::default(),
        PollContext::Softirq,
        &RcParams::default(),
    )
}

/// A pattern that names its message: byte `i` of message `seq`.
fn pattern(seq: u32, i: usize) -> u8 {
    (seq as usize).wrapping_mul(31).wrapping_add(i) as u8 ^ 0x5a
}

fn filled(pd: &Arc<Pd>, len: usize, seq: u32) -> Result<DmaBuf> {
    let mut b = DmaBuf::new(pd, len, GFP_KERNEL)?;
    for (i, x) in b.as_mut_slice().iter_mut().enumerate() {
        *x = pattern(seq, i);
    }
    Ok(b)
}

fn matches(buf: &[u8], seq: u32) -> bool {
    buf.iter().enumerate().all(|(i, &x)| x == pattern(seq, i))
}

fn post_recv<S: CanRecv>(qp: &Qp<S>, s: &Arc<Sink<DmaBuf>>, len: usize) -> Result {
    let buf = DmaBuf::new(qp.pd(), len, GFP_KERNEL)?;
    qp.post_recv(twr(buf, s)?, |t, ops| {
        let n = t.payload.len();
        ops.buf(&mut t.payload, 0..n)?;
        Ok(())
    })?;
    Ok(())
}

/// Makes an MR over `len` bytes (filled with `seq`'s pattern) and registers it for `access`
/// through `qp`; returns it with its `Remote`.
fn registered_mr(qp: &Qp<Rts>, len: usize, seq: u32, access: Access) -> Result<Mr> {
    let pd = qp.pd();
    let mut mr = Mr::new(pd, 16)?;
    mr.map(filled(pd, len, seq)?).map_err(|(e, _)| e)?;
    register(qp, mr, access)
}

/// Registers the mapped `mr` (an [`Mr`] or a `LentMr`) for `access` through `qp` (a REG_MR
/// request) and returns it.
fn register<R: Region + Send + 'static>(qp: &Qp<Rts>, mr: R, access: Access) -> Result<R> {
    let d = post_one(qp, mr, WcStatus::Success, WcOpcode::RegMr, |mr, ops| {
        ops.reg_mr(mr, access)?;
        Ok(())
    })?;
    Ok(d.payload)
}

/// `n` zeroed pages, owned by the caller.
fn zero_pages(n: usize) -> Result<KVec<Page>> {
    let mut v = KVec::with_capacity(n, GFP_KERNEL)?;
    for _ in 0..n {
        v.push(Page::alloc_page(GFP_KERNEL | __GFP_ZERO)?, GFP_KERNEL)?;
    }
    Ok(v)
}

/// Pages the test owns, lent to a [`LentMr`]; `writable`: whether a peer may write them.
///
/// [`LentMr`]: kernel::rdma::mr::LentMr
struct Owned {
    pages: KVec<Page>,
    writable: bool,
}

// SAFETY: The segments are the owned pages, which live as long as `self`.
unsafe impl PageOwner for Owned {
    fn segments(&self, out: &mut [Segment]) -> Result<usize> {
        if out.len() < self.pages.len() {
            return Err(E2BIG);
        }
        for (o, p) in out.iter_mut().zip(self.pages.iter()) {
            *o = Segment::from_page(p, 0, PAGE_SIZE)?;
        }
        Ok(self.pages.len())
    }

    fn device_may_write(&self) -> bool {
        self.writable
    }
}

/// `n` zeroed pages of the test's, to lend; `writable`: whether a peer may write them.
fn owned(n: usize, writable: bool) -> Result<Owned> {
    Ok(Owned {
        pages: zero_pages(n)?,
        writable,
    })
}

/// The target's half of the storage pattern: `p.a` RDMA WRITEs `write` bytes of `seq`'s
/// pattern to `remote` (nothing for 0), then SENDs 64 bytes with invalidate of `remote.rkey`
/// into a receive posted on `p.b`; returns that receive's completion.
fn write_then_invalidate(p: &RcPair, remote: Remote, write: usize, seq: u32) -> Result<Wc> {
    let rs = sink::<DmaBuf>()?;
    post_recv(&p.b, &rs, 64)?;
    post_one(
        &p.a,
        filled(&p.pd, write.max(64), seq)?,
        WcStatus::Success,
        WcOpcode::Send,
        |buf, ops| {
            if write > 0 {
                ops.write(buf, 0..write, remote)?;
            }
            ops.send_inv(buf, 0..64, remote.rkey)?;
            Ok(())
        },
    )?;
    Ok(rs.wait(1)?.into_iter().next().ok_or(EINVAL)?.wc)
}

/// The memory of `mr`, copied out.
fn mr_bytes(mr: &Mr) -> Result<KVec<u8>> {
    let mut v = KVec::from_elem(0u8, mr.len(), GFP_KERNEL)?;
    mr.read(0, &mut v)?;
    Ok(v)
}

/// The 64-bit word at `off` of `mr`'s memory.
fn mr_word(mr: &Mr, off: usize) -> Result<u64> {
    let mut w = [0u8; 8];
    mr.read(off, &mut w)?;
    Ok(u64::from_ne_bytes(w))
}

fn leak_check() -> Result {
    check!(
        LIVE_WRS.load(Ordering::Relaxed) == 0,
        "{} requests never came back",
        LIVE_WRS.load(Ordering::Relaxed)
    );
    Ok(())
}

/// Posts one send request owning `payload`, built by `build`, waits for its completion and
/// checks that it ended with `status` (and, on success, `opcode`); returns what it reported.
fn post_one<P: Send + 'static, S: CanSend>(
    qp: &Qp<S>,
    payload: P,
    status: WcStatus,
    opcode: WcOpcode,
    build: impl for<'a> FnOnce(&'a mut P, &mut SendOps<'a>) -> Result,
) -> Result<Done<P>> {
    let s = sink::<P>()?;
    qp.post_send(twr(payload, &s)?, |t, ops| build(&mut t.payload, ops))?;
    let d = s
        .wait(1)
        .inspect_err(|_| diag_qp(qp))?
        .into_iter()
        .next()
        .ok_or(EINVAL)?;
    check!(
        d.status == status,
        "{:?}: completed with {:?}, expected {:?}",
        opcode,
        d.status,
        status
    );
    if status == WcStatus::Success {
        check!(
            d.opcode == Some(opcode),
            "opcode {:?}, expected {:?}",
            d.opcode,
            opcode
        );
    }
    Ok(d)
}

/// Records the events (of a device, or of a QP, SRQ or CQ) for the test thread.
#[pin_data]
struct Events<Ev> {
    #[pin]
    list: SpinLockBh<KVec<Ev>>,
    #[pin]
    sig: Signal,
}

struct Watch(Arc<Events<Event>>);

impl EventHandler for Watch {
    fn event(&self, _dev: &Device, ev: Event) {
        self.0.record(ev);
    }
}

impl AsyncHandler for Events<AsyncEvent> {
    fn event(&self, ev: AsyncEvent) {
        self.record(ev);
    }
}

impl<Ev: Copy + PartialEq + core::fmt::Debug> Events<Ev> {
    fn new() -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Events {
                list <- new_spinlock_bh!(KVec::new(), "rdma_kunit_events"),
                sig <- Signal::new(),
            }),
            GFP_KERNEL,
        )
    }

    fn record(&self, ev: Ev) {
        // A failed push loses the event, which the case then reports as missing.
        let _ = self.list.lock().push(ev, GFP_ATOMIC);
        self.sig.complete();
    }

    /// The events seen so far.
    fn events(&self) -> Result<KVec<Ev>> {
        let l = self.list.lock();
        let mut v = KVec::with_capacity(l.len(), GFP_ATOMIC)?;
        for e in l.iter() {
            v.push(*e, GFP_ATOMIC)?;
        }
        Ok(v)
    }

    /// Waits up to `ms` until `want` has been seen.
    fn wait_for(&self, want: Ev, ms: u32) -> Result {
        let mut waited = 0;
        while !self.list.lock().contains(&want) {
            if waited >= ms {
                pr_err!("no {:?} event; saw {:?}\n", want, &self.list.lock()[..]);
                return Err(ETIMEDOUT);
            }
            let _ = self.sig.wait_timeout(100);
            waited += 100;
        }
        Ok(())
    }
}
