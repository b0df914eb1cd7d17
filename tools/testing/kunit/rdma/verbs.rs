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
    prelude::*,
    rdma::{
        ah::Ah,
        cq::{Cq, PollContext, Wc, WcOpcode, WcStatus},
        device::Device,
        dma::{DmaBuf, DmaPage, DmaSg, MAX_SG_PAGES},
        event::{Event, EventHandler, EventRegistration},
        mr::Mr,
        pd::Pd,
        qp::{Access, Init, Qp, QpCaps, QpState, QpType, RcParams, Rts},
        srq::Srq,
        sync::{Completion as Signal, SpinLockBh},
        wr::{Completion, Remote, Wr, GRH_LEN},
    },
    sync::Arc,
    types::ARef,
};

use crate::ret;

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
    payload: P,
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
        let d = Done {
            status: wc.status(),
            opcode: wc.opcode(),
            byte_len: wc.byte_len(),
            imm: wc.imm_data(),
            src_qp: wc.src_qp(),
            qp_num: wc.qp_num(),
            payload,
        };
        // A failed push loses a result, which the case reports as a missing completion.
        let _ = sink.list.lock().push(d, GFP_ATOMIC);
        sink.sig.complete();
    }
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
    let pd = Pd::new(dev)?;
    let cq = Cq::new(dev, 256, 0, poll)?;
    let access =
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    let a = Qp::new(&pd, QpType::Rc, &cq, &cq, caps)?.to_init(1, access)?;
    let b = Qp::new(&pd, QpType::Rc, &cq, &cq, caps)?.to_init(1, access)?;
    let (ea, eb) = (a.endpoint()?, b.endpoint()?);
    let a = a.connect(&eb, p)?;
    let b = b.connect(&ea, p)?;
    Ok(RcPair { a, b, cq, pd })
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
    let _ = crate::run(kernel::fmt!(
        "(rdma -d res show qp; cd /sys/class/infiniband/rxe0/ports/1/hw_counters && grep . *) 2>&1 | while read -r l; do echo \"rdma_kunit: diag: $l\" > /dev/kmsg; done"
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

fn post_recv(qp: &Qp<Rts>, s: &Arc<Sink<DmaBuf>>, len: usize) -> Result {
    let buf = DmaBuf::new(qp.pd(), len, GFP_KERNEL)?;
    qp.post_recv(twr(buf, s)?, |t, ops| {
        ops.buf(&t.payload, 0..t.payload.len())?;
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

/// Registers the mapped `mr` for `access` through `qp` (a REG_MR request) and returns it.
fn register(qp: &Qp<Rts>, mr: Mr, access: Access) -> Result<Mr> {
    let s = sink::<Mr>()?;
    qp.post_send(twr(mr, &s)?, |t, ops| {
        ops.reg_mr(&t.payload, access)?;
        Ok(())
    })?;
    let d = s.wait(1)?.into_iter().next().ok_or(EINVAL)?;
    check!(
        d.status == WcStatus::Success,
        "REG_MR completed with {:?}",
        d.status
    );
    check!(
        d.opcode == Some(WcOpcode::RegMr),
        "REG_MR opcode {:?}",
        d.opcode
    );
    Ok(d.payload)
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

/// PD, CQ in every poll context; CQ size and vector limits.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_pd_cq() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let pd = Pd::new(&dev)?;
        let _ = pd.local_dma_lkey();
        for poll in [
            PollContext::Softirq,
            PollContext::Workqueue,
            PollContext::UnboundWorkqueue,
            PollContext::Direct,
        ] {
            let cq = Cq::new(&dev, 32, 0, poll)?;
            check!(
                cq.entries() >= 32,
                "{poll:?}: CQ of {} entries",
                cq.entries()
            );
            check!(
                cq.free_entries() == cq.entries(),
                "fresh CQ has reservations"
            );
        }
        let max = dev.attrs().max_cqe();
        check!(
            Cq::new(&dev, 0, 0, PollContext::Softirq).err() == Some(EINVAL),
            "0 entries"
        );
        check!(
            Cq::new(&dev, max + 1, 0, PollContext::Softirq).err() == Some(EINVAL),
            "max_cqe + 1"
        );
        let v = dev.num_comp_vectors();
        check!(
            Cq::new(&dev, 8, v, PollContext::Softirq).err() == Some(EINVAL),
            "bad vector"
        );
        check!(
            DmaBuf::new(&pd, 0, GFP_KERNEL).err() == Some(EINVAL),
            "empty DmaBuf"
        );
        check!(Mr::new(&pd, 0).err() == Some(EINVAL), "MR of 0 pages");
        Ok(())
    })())
}

/// RC SEND/RECV, 4 KiB, payload checked; SEND_WITH_IMM carries its immediate.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_rc_send_recv() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let p = rc_pair(&dev)?;
        let rs = sink::<DmaBuf>()?;
        let ss = sink::<DmaBuf>()?;
        post_recv(&p.b, &rs, 4096)?;
        post_recv(&p.b, &rs, 4096)?;
        p.a.post_send(twr(filled(&p.pd, 4096, 1)?, &ss)?, |t, ops| {
            ops.send(&t.payload, 0..4096)?;
            Ok(())
        })?;
        p.a.post_send(twr(filled(&p.pd, 100, 2)?, &ss)?, |t, ops| {
            ops.send_imm(&t.payload, 0..100, 0xdead_beef)?;
            Ok(())
        })?;
        let sent = ss.wait(2).inspect_err(|_| diag(&p))?;
        let got = rs.wait(2)?;
        for d in sent.iter() {
            check!(
                d.status == WcStatus::Success && d.opcode == Some(WcOpcode::Send),
                "send: {:?} {:?}",
                d.status,
                d.opcode
            );
        }
        check!(got.len() == 2, "{} receives", got.len());
        let (r1, r2) = (&got[0], &got[1]);
        check!(
            r1.status == WcStatus::Success && r1.opcode == Some(WcOpcode::Recv),
            "recv 1: {:?}",
            r1.status
        );
        check!(r1.byte_len == 4096, "recv 1: {} bytes", r1.byte_len);
        check!(r1.imm.is_none(), "recv 1 has immediate data");
        check!(matches(r1.payload.as_slice(), 1), "recv 1: payload differs");
        check!(
            r2.byte_len == 100 && r2.imm == Some(0xdead_beef),
            "recv 2: {} bytes imm {:?}",
            r2.byte_len,
            r2.imm
        );
        check!(
            matches(&r2.payload.as_slice()[..100], 2),
            "recv 2: payload differs"
        );
        check!(
            p.a.send_outstanding() == 0 && p.b.recv_outstanding() == 0,
            "slots not given back"
        );
        drop((sent, got, p));
        leak_check()
    })())
}

/// RDMA WRITE into a fast-registered MR of the peer, then RDMA READ it back.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_rc_write_read() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let p = rc_pair(&dev)?;
        let len = 3 * 4096 + 100;
        let mr = registered_mr(&p.b, len, 0, Access::REMOTE_WRITE | Access::REMOTE_READ)?;
        let remote = mr.remote();
        let s = sink::<DmaBuf>()?;
        p.a.post_send(twr(filled(&p.pd, len, 7)?, &s)?, |t, ops| {
            ops.write(&t.payload, 0..len, remote)?;
            Ok(())
        })?;
        let w = s.wait(1)?;
        check!(
            w[0].status == WcStatus::Success && w[0].opcode == Some(WcOpcode::RdmaWrite),
            "write: {:?}",
            w[0].status
        );
        check!(
            matches(&mr_bytes(&mr)?, 7),
            "the peer's MR does not hold what was written"
        );
        // READ the second page back into a fresh buffer.
        p.a.post_send(twr(DmaBuf::new(&p.pd, 4096, GFP_KERNEL)?, &s)?, |t, ops| {
            ops.read(&t.payload, 0..4096, remote.offset(4096))?;
            Ok(())
        })?;
        let r = s.wait(1)?;
        check!(
            r[0].status == WcStatus::Success && r[0].opcode == Some(WcOpcode::RdmaRead),
            "read: {:?}",
            r[0].status
        );
        let expect = mr_bytes(&mr)?;
        check!(
            r[0].payload.as_slice() == &expect[4096..8192],
            "read data differs from the MR"
        );
        // WRITE_WITH_IMM consumes a receive at the peer, which reports the immediate.
        let rs = sink::<DmaBuf>()?;
        post_recv(&p.b, &rs, 64)?;
        p.a.post_send(twr(filled(&p.pd, 64, 9)?, &s)?, |t, ops| {
            ops.write_imm(&t.payload, 0..64, remote, 42)?;
            Ok(())
        })?;
        let _ = s.wait(1)?;
        let got = rs.wait(1)?;
        check!(
            got[0].opcode == Some(WcOpcode::RecvRdmaWithImm) && got[0].imm == Some(42),
            "write_imm at the peer: {:?} {:?}",
            got[0].opcode,
            got[0].imm
        );
        check!(matches(&mr_bytes(&mr)?[..64], 9), "write_imm data");
        drop((w, r, got, mr, p));
        leak_check()
    })())
}

/// Atomic compare-and-swap and fetch-and-add on the peer's MR, results checked.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_rc_atomics() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        if !dev.attrs().has_atomics() {
            return Err(ENODEV);
        }
        let p = rc_pair(&dev)?;
        let mut mr = registered_mr(&p.b, 64, 0, Access::REMOTE_ATOMIC)?;
        mr.write(0, &5u64.to_ne_bytes())?;
        let remote = mr.remote();
        let s = sink::<DmaBuf>()?;
        let word = |b: &DmaBuf, off: usize| -> Result<u64> {
            let mut w = [0u8; 8];
            w.copy_from_slice(b.as_slice().get(off..off + 8).ok_or(EINVAL)?);
            Ok(u64::from_ne_bytes(w))
        };
        p.a.post_send(twr(DmaBuf::new(&p.pd, 16, GFP_KERNEL)?, &s)?, |t, ops| {
            ops.compare_swap(&t.payload, 0, remote, 5, 9)?;
            Ok(())
        })?;
        let d = s.wait(1)?;
        check!(
            d[0].status == WcStatus::Success && d[0].opcode == Some(WcOpcode::CompSwap),
            "cmp_swp: {:?}",
            d[0].status
        );
        check!(
            word(&d[0].payload, 0)? == 5,
            "cmp_swp returned {}",
            word(&d[0].payload, 0)?
        );
        check!(mr_word(&mr, 0)? == 9, "cmp_swp left {}", mr_word(&mr, 0)?);
        // A compare that does not match leaves memory alone.
        p.a.post_send(twr(DmaBuf::new(&p.pd, 16, GFP_KERNEL)?, &s)?, |t, ops| {
            ops.compare_swap(&t.payload, 8, remote, 5, 77)?;
            Ok(())
        })?;
        let d = s.wait(1)?;
        check!(
            word(&d[0].payload, 8)? == 9 && mr_word(&mr, 0)? == 9,
            "failed compare changed memory"
        );
        p.a.post_send(twr(DmaBuf::new(&p.pd, 8, GFP_KERNEL)?, &s)?, |t, ops| {
            ops.fetch_add(&t.payload, 0, remote, 3)?;
            Ok(())
        })?;
        let d = s.wait(1)?;
        check!(
            d[0].opcode == Some(WcOpcode::FetchAdd) && word(&d[0].payload, 0)? == 9,
            "fetch_add returned {}",
            word(&d[0].payload, 0)?
        );
        check!(
            mr_word(&mr, 0)? == 12,
            "fetch_add left {}",
            mr_word(&mr, 0)?
        );
        // Misaligned atomics are refused before the device sees them, and the request is back.
        let e =
            p.a.post_send(twr(DmaBuf::new(&p.pd, 16, GFP_KERNEL)?, &s)?, |t, ops| {
                ops.fetch_add(&t.payload, 0, remote.offset(4), 1)?;
                Ok(())
            });
        check!(
            matches!(&e, Err(pe) if pe.err == EINVAL),
            "misaligned atomic accepted"
        );
        drop((e, d, mr, p));
        leak_check()
    })())
}

/// UD SEND through an address handle; the receive buffer starts with the GRH.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_ud_send_recv() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let pd = Pd::new(&dev)?;
        let cq = Cq::new(&dev, 64, 0, PollContext::Softirq)?;
        let qkey = 0x1111_2222;
        let a = Qp::new(&pd, QpType::Ud, &cq, &cq, &QpCaps::default())?
            .to_init_ud(1, qkey)?
            .ready_ud()?;
        let b = Qp::new(&pd, QpType::Ud, &cq, &cq, &QpCaps::default())?.to_init_ud(1, qkey)?;
        let eb = b.endpoint()?;
        let b = b.ready_ud()?;
        let ah = Ah::new(&pd, 1, &eb.gid)?;
        let rs = sink::<DmaBuf>()?;
        post_recv(&b, &rs, GRH_LEN + 512)?;
        let ss = sink::<(DmaBuf, Arc<Ah>)>()?;
        a.post_send(twr((filled(&pd, 512, 3)?, ah.clone()), &ss)?, |t, ops| {
            ops.send_ud(&t.payload.0, 0..512, &t.payload.1, eb.qpn, qkey)?;
            Ok(())
        })?;
        let sent = ss.wait(1)?;
        check!(
            sent[0].status == WcStatus::Success,
            "UD send: {:?}",
            sent[0].status
        );
        let got = rs.wait(1)?;
        let r = &got[0];
        check!(r.status == WcStatus::Success, "UD recv: {:?}", r.status);
        check!(
            r.byte_len as usize == GRH_LEN + 512,
            "UD recv of {} bytes",
            r.byte_len
        );
        check!(
            r.src_qp == Some(a.qpn()),
            "UD src_qp {:?}, sender is {}",
            r.src_qp,
            a.qpn()
        );
        check!(
            matches(&r.payload.as_slice()[GRH_LEN..], 3),
            "UD payload differs"
        );
        // RDMA on a UD QP is refused and the request comes back.
        let e = a.post_send(twr((filled(&pd, 8, 0)?, ah.clone()), &ss)?, |t, ops| {
            ops.write(&t.payload.0, 0..8, Remote { addr: 0, rkey: 0 })?;
            Ok(())
        });
        check!(
            matches!(&e, Err(pe) if pe.err == EINVAL),
            "RDMA WRITE on UD accepted"
        );
        drop((e, sent, got, a, b, ah));
        leak_check()
    })())
}

/// Inline sends up to the QP's max_inline; longer ones are refused.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_inline() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let caps = QpCaps {
            max_inline: 128,
            ..QpCaps::default()
        };
        let p = rc_pair_with(&dev, &caps, PollContext::Softirq, &RcParams::default())?;
        let max = p.a.caps().max_inline as usize;
        check!(max >= 128, "max_inline {max}");
        let rs = sink::<DmaBuf>()?;
        let ss = sink::<DmaBuf>()?;
        post_recv(&p.b, &rs, 256)?;
        p.a.post_send(twr(filled(&p.pd, 128, 4)?, &ss)?, |t, ops| {
            ops.send_inline(&t.payload, 0..128)?;
            Ok(())
        })?;
        let _ = ss.wait(1)?;
        let got = rs.wait(1)?;
        check!(
            got[0].byte_len == 128 && matches(&got[0].payload.as_slice()[..128], 4),
            "inline payload"
        );
        let big = max + 1;
        let e = p.a.post_send(twr(filled(&p.pd, big, 4)?, &ss)?, |t, ops| {
            ops.send_inline(&t.payload, 0..big)?;
            Ok(())
        });
        check!(
            matches!(&e, Err(pe) if pe.err == EINVAL),
            "inline send over max_inline accepted"
        );
        drop((e, got, p));
        leak_check()
    })())
}

/// A chain of three sends posted at once, only the last signaled: three receives at the
/// peer, one completion at the sender, all slots back.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_post_list() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let p = rc_pair(&dev)?;
        let rs = sink::<DmaBuf>()?;
        for _ in 0..3 {
            post_recv(&p.b, &rs, 1024)?;
        }
        let ss = sink::<KVec<DmaBuf>>()?;
        let mut bufs = KVec::new();
        for seq in 10..13 {
            bufs.push(filled(&p.pd, 1024, seq)?, GFP_KERNEL)?;
        }
        p.a.post_send(twr(bufs, &ss)?, |t, ops| {
            for b in t.payload.iter() {
                ops.send(b, 0..1024)?.unsignaled();
            }
            Ok(())
        })?;
        let sent = ss.wait(1)?;
        check!(
            sent.len() == 1 && sent[0].status == WcStatus::Success,
            "one completion for the chain"
        );
        let got = rs.wait(3)?;
        for (i, d) in got.iter().enumerate() {
            check!(
                matches(d.payload.as_slice(), 10 + i as u32),
                "message {i} of the chain"
            );
        }
        check!(p.a.send_outstanding() == 0, "chain slots not given back");
        drop((sent, got, p));
        leak_check()
    })())
}

/// Posting beyond a queue's depth fails with ENOMEM and returns the request; forcing the QP
/// to error flushes every outstanding request back to its owner.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_depth_and_flush() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let caps = QpCaps {
            send_depth: 4,
            recv_depth: 4,
            ..QpCaps::default()
        };
        let p = rc_pair_with(&dev, &caps, PollContext::Softirq, &RcParams::default())?;
        let rs = sink::<DmaBuf>()?;
        for _ in 0..4 {
            post_recv(&p.b, &rs, 64)?;
        }
        let e =
            p.b.post_recv(twr(DmaBuf::new(&p.pd, 64, GFP_KERNEL)?, &rs)?, |t, ops| {
                ops.buf(&t.payload, 0..64)?;
                Ok(())
            });
        check!(
            matches!(&e, Err(pe) if pe.err == ENOMEM),
            "fifth receive on a depth-4 queue"
        );
        drop(e);
        // A chain longer than the send queue is refused as a whole.
        let ss = sink::<DmaBuf>()?;
        let e = p.a.post_send(twr(filled(&p.pd, 64, 0)?, &ss)?, |t, ops| {
            for _ in 0..5 {
                ops.send(&t.payload, 0..64)?;
            }
            Ok(())
        });
        check!(
            matches!(&e, Err(pe) if pe.err == ENOMEM),
            "five sends on a depth-4 queue"
        );
        drop(e);
        p.b.set_error()?;
        let got = rs.wait(4)?;
        check!(got.len() == 4, "{} of 4 receives flushed", got.len());
        for d in got.iter() {
            check!(
                d.status == WcStatus::WrFlushErr,
                "flushed receive: {:?}",
                d.status
            );
        }
        check!(
            p.b.query_state()? == QpState::Err,
            "QP state {:?}",
            p.b.query_state()?
        );
        check!(p.b.recv_outstanding() == 0, "receive slots not given back");
        drop((got, p));
        leak_check()
    })())
}

/// An RDMA WRITE with a wrong rkey completes with a remote access error and the QP goes to
/// the error state; no crash, the request comes back.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_bad_rkey() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let p = rc_pair(&dev)?;
        let mr = registered_mr(&p.b, 4096, 0, Access::REMOTE_WRITE)?;
        let bad = Remote {
            addr: mr.remote().addr,
            rkey: mr.rkey() ^ 0x5500,
        };
        let s = sink::<DmaBuf>()?;
        p.a.post_send(twr(filled(&p.pd, 64, 0)?, &s)?, |t, ops| {
            ops.write(&t.payload, 0..64, bad)?;
            Ok(())
        })?;
        let d = s.wait(1)?;
        check!(
            d[0].status == WcStatus::RemAccessErr,
            "write with a wrong rkey: {:?}",
            d[0].status
        );
        // rxe delivers the error completion, then moves the QP to the error state: the two
        // are not ordered for the reader, so give the transition up to a second.
        let mut state = p.a.query_state()?;
        for _ in 0..100 {
            if state == QpState::Err {
                break;
            }
            let _ = s.sig.wait_timeout(10);
            state = p.a.query_state()?;
        }
        check!(state == QpState::Err, "requester state {:?}", state);
        check!(
            matches(&mr_bytes(&mr)?, 0),
            "a write with a wrong rkey changed the MR"
        );
        drop((d, mr, p));
        leak_check()
    })())
}

/// A SEND to a QP with no receive posted and no RNR retries fails with RNR_RETRY_EXC.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_rnr() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let params = RcParams {
            rnr_retry: 0,
            ..RcParams::default()
        };
        let p = rc_pair_with(&dev, &QpCaps::default(), PollContext::Softirq, &params)?;
        let s = sink::<DmaBuf>()?;
        p.a.post_send(twr(filled(&p.pd, 64, 0)?, &s)?, |t, ops| {
            ops.send(&t.payload, 0..64)?;
            Ok(())
        })?;
        let d = s.wait(1)?;
        check!(
            d[0].status == WcStatus::RnrRetryExcErr,
            "send without receive: {:?}",
            d[0].status
        );
        drop((d, p));
        leak_check()
    })())
}

/// Dropping QPs with requests outstanding drains them: every request comes back flushed.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_drop_drains() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let p = rc_pair(&dev)?;
        let rs = sink::<DmaBuf>()?;
        for _ in 0..8 {
            post_recv(&p.b, &rs, 64)?;
        }
        check!(LIVE_WRS.load(Ordering::Relaxed) == 8, "8 requests posted");
        drop(p);
        let got = rs.wait(8)?;
        check!(
            got.iter().all(|d| d.status == WcStatus::WrFlushErr),
            "drain did not flush"
        );
        drop(got);
        leak_check()
    })())
}

/// A QP's queues must fit in its CQ; QPs sharing a CQ share its entries.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_cq_overrun() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let pd = Pd::new(&dev)?;
        let cq = Cq::new(&dev, 16, 0, PollContext::Softirq)?;
        let n = cq.entries();
        let fits = QpCaps {
            send_depth: n / 2 - 1,
            recv_depth: n - n / 2 - 1,
            ..QpCaps::default()
        };
        let qp = Qp::new(&pd, QpType::Rc, &cq, &cq, &fits)?;
        check!(cq.free_entries() == 0, "{} entries left", cq.free_entries());
        check!(
            Qp::new(
                &pd,
                QpType::Rc,
                &cq,
                &cq,
                &QpCaps {
                    send_depth: 1,
                    recv_depth: 1,
                    ..QpCaps::default()
                }
            )
            .err()
                == Some(EINVAL),
            "second QP overruns the CQ"
        );
        drop(qp);
        check!(cq.free_entries() == n, "entries not given back");
        check!(
            Qp::new(
                &pd,
                QpType::Rc,
                &cq,
                &cq,
                &QpCaps {
                    send_depth: 0,
                    ..QpCaps::default()
                }
            )
            .err()
                == Some(EINVAL),
            "depth 0"
        );
        let max = dev.attrs().max_qp_wr();
        let big = Cq::new(&dev, 4 * max, 0, PollContext::Softirq)
            .or_else(|_| Cq::new(&dev, dev.attrs().max_cqe(), 0, PollContext::Softirq))?;
        check!(
            Qp::new(
                &pd,
                QpType::Rc,
                &big,
                &big,
                &QpCaps {
                    send_depth: max,
                    ..QpCaps::default()
                }
            )
            .err()
                == Some(EINVAL),
            "depth max_qp_wr leaves no drain slot"
        );
        check!(
            Qp::new(
                &pd,
                QpType::Rc,
                &big,
                &big,
                &QpCaps {
                    recv_sge: 99,
                    ..QpCaps::default()
                }
            )
            .err()
                == Some(EINVAL),
            "99 receive SGEs"
        );
        Ok(())
    })())
}

/// The same traffic with each poll context; with DIRECT the test thread polls.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_poll_contexts() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        for poll in [
            PollContext::Workqueue,
            PollContext::UnboundWorkqueue,
            PollContext::Direct,
        ] {
            let p = rc_pair_with(&dev, &QpCaps::default(), poll, &RcParams::default())?;
            let s = sink::<DmaBuf>()?;
            post_recv(&p.b, &s, 256)?;
            p.a.post_send(twr(filled(&p.pd, 256, 5)?, &s)?, |t, ops| {
                ops.send(&t.payload, 0..256)?;
                Ok(())
            })?;
            if poll == PollContext::Direct {
                // Nothing runs the handlers but this thread.
                let mut n = 0;
                for _ in 0..500 {
                    n += p.cq.poll_direct(16)?;
                    if n >= 2 {
                        break;
                    }
                    // Sleeps 10 ms: nothing else can signal the sink.
                    let _ = s.sig.wait_timeout(10);
                }
                check!(n == 2, "poll_direct processed {n} of 2 completions");
            } else {
                check!(
                    p.cq.poll_direct(16).err() == Some(EINVAL),
                    "{poll:?}: poll_direct allowed"
                );
            }
            // With DIRECT the sleeps above may have consumed signals: take the list as it is.
            let got = if poll == PollContext::Direct {
                core::mem::take(&mut *s.list.lock())
            } else {
                s.wait(2)?
            };
            check!(got.len() == 2, "{poll:?}: {} completions", got.len());
            check!(
                got.iter()
                    .any(|d| d.opcode == Some(WcOpcode::Recv) && matches(d.payload.as_slice(), 5)),
                "{poll:?}: payload"
            );
            drop(got);
        }
        leak_check()
    })())
}

/// LOCAL_INV revokes an rkey: a WRITE with it fails afterwards, and the memory is untouched.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_local_inv() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let p = rc_pair(&dev)?;
        let mr = registered_mr(&p.b, 4096, 0, Access::REMOTE_WRITE)?;
        let remote = mr.remote();
        // The MR keeps its buffer while a registration for it may live.
        let mut mr = mr;
        let e = mr.map(DmaBuf::new(&p.pd, 64, GFP_KERNEL)?);
        check!(
            matches!(&e, Err((err, _)) if *err == EBUSY),
            "second map of a registered MR"
        );
        drop(e);
        let s = sink::<DmaBuf>()?;
        // The key works...
        p.a.post_send(twr(filled(&p.pd, 64, 8)?, &s)?, |t, ops| {
            ops.write(&t.payload, 0..64, remote)?;
            Ok(())
        })?;
        let d = s.wait(1)?;
        check!(
            d[0].status == WcStatus::Success,
            "write before invalidation: {:?}",
            d[0].status
        );
        // ...until its owner invalidates it.
        let inv = sink::<()>()?;
        let rkey = remote.rkey;
        p.b.post_send(twr((), &inv)?, |_, ops| {
            ops.local_inv(rkey)?;
            Ok(())
        })?;
        let d = inv.wait(1)?;
        check!(
            d[0].status == WcStatus::Success && d[0].opcode == Some(WcOpcode::LocalInv),
            "local_inv: {:?} {:?}",
            d[0].status,
            d[0].opcode
        );
        p.a.post_send(twr(filled(&p.pd, 64, 9)?, &s)?, |t, ops| {
            ops.write(&t.payload, 0..64, remote)?;
            Ok(())
        })?;
        let d = s.wait(1)?;
        check!(
            d[0].status == WcStatus::RemAccessErr,
            "write after invalidation: {:?}",
            d[0].status
        );
        check!(
            matches(&mr_bytes(&mr)?[..64], 8),
            "memory changed after invalidation"
        );
        drop((d, mr, p));
        leak_check()
    })())
}

/// Records the events of a device for the test thread.
#[pin_data]
struct Events {
    #[pin]
    list: SpinLockBh<KVec<Event>>,
    #[pin]
    sig: Signal,
}

struct Watch(Arc<Events>);

impl EventHandler for Watch {
    fn event(&self, _dev: &Device, ev: Event) {
        let _ = self.0.list.lock().push(ev, GFP_ATOMIC);
        self.0.sig.complete();
    }
}

impl Events {
    /// Waits until `want` has been seen.
    fn wait_for(&self, want: Event) -> Result {
        for _ in 0..20 {
            if self.list.lock().contains(&want) {
                return Ok(());
            }
            let _ = self.sig.wait_timeout(1000);
        }
        pr_err!("no {:?} event; saw {:?}\n", want, &self.list.lock()[..]);
        Err(ETIMEDOUT)
    }
}

/// Port events reach a registered handler: the netdev going down gives PORT_ERR, coming back
/// PORT_ACTIVE; nothing arrives after the registration is dropped.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_port_events() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let ndev = dev.netdev_name(1)?;
        let ev = Arc::pin_init(
            pin_init!(Events {
                list <- new_spinlock_bh!(KVec::new(), "rdma_kunit_events"),
                sig <- Signal::new(),
            }),
            GFP_KERNEL,
        )?;
        let reg = EventRegistration::new(&dev, Watch(ev.clone()))?;
        let down = crate::run(kernel::fmt!("/usr/bin/ip link set {ndev} down"))?;
        check!(down == 0, "ip link set {ndev} down: {down}");
        let saw_err = ev.wait_for(Event::PortErr(1));
        let up = crate::run(kernel::fmt!("/usr/bin/ip link set {ndev} up"))?;
        check!(up == 0, "ip link set {ndev} up: {up}");
        saw_err?;
        ev.wait_for(Event::PortActive(1))?;
        drop(reg);
        let n = ev.list.lock().len();
        let again = crate::run(kernel::fmt!(
            "/usr/bin/ip link set {ndev} down && /usr/bin/ip link set {ndev} up"
        ))?;
        check!(again == 0, "second down/up: {again}");
        let _ = ev.sig.wait_timeout(2000);
        check!(
            ev.list.lock().len() == n,
            "events arrived after the registration was dropped"
        );
        // The port is back for the cases that follow.
        for _ in 0..50 {
            if dev.query_port(1)?.state() == kernel::rdma::device::PortState::Active {
                return Ok(());
            }
            let _ = ev.sig.wait_timeout(200);
        }
        check!(false, "{ndev}: port did not come back");
        Ok(())
    })())
}

/// Connects `a` (its own receive queue) and `b` (receives from an SRQ) on one device.
fn connect(a: Qp<Init>, b: Qp<Init>) -> Result<(Qp<Rts>, Qp<Rts>)> {
    let (ea, eb) = (a.endpoint()?, b.endpoint()?);
    let p = RcParams::default();
    Ok((a.connect(&eb, &p)?, b.connect(&ea, &p)?))
}

/// SRQ: two RC QPs take their receives from one SRQ; each receive reports the QP that took
/// it; depth and argument limits; receives left on the SRQ come back flushed when it goes.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_srq() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let pd = Pd::new(&dev)?;
        let cq = Cq::new(&dev, 256, 0, PollContext::Softirq)?;
        let attrs = dev.attrs();
        check!(Srq::new(&pd, &cq, 0, 1).err() == Some(EINVAL), "depth 0");
        check!(
            Srq::new(&pd, &cq, attrs.max_srq_wr() + 1, 1).err() == Some(EINVAL),
            "depth over max_srq_wr"
        );
        check!(Srq::new(&pd, &cq, 8, 0).err() == Some(EINVAL), "0 SGEs");
        let small = Cq::new(&dev, 8, 0, PollContext::Softirq)?;
        check!(
            Srq::new(&pd, &small, small.entries() + 1, 1).err() == Some(EINVAL),
            "SRQ deeper than its CQ"
        );
        check!(
            small.free_entries() == small.entries(),
            "failed SRQ kept CQ entries"
        );
        const DEPTH: u32 = 16;
        let srq = Srq::new(&pd, &cq, DEPTH, 1)?;
        let caps = QpCaps::default();
        let new_a = || Qp::new(&pd, QpType::Rc, &cq, &cq, &caps)?.to_init(1, Access::NONE);
        let new_b =
            || Qp::new_with_srq(&pd, QpType::Rc, &cq, &srq, &caps)?.to_init(1, Access::NONE);
        let (a1, b1) = connect(new_a()?, new_b()?)?;
        let (a2, b2) = connect(new_a()?, new_b()?)?;
        let rs = sink::<DmaBuf>()?;
        for _ in 0..DEPTH {
            let buf = DmaBuf::new(&pd, 256, GFP_KERNEL)?;
            srq.post_recv(twr(buf, &rs)?, |t, ops| {
                ops.buf(&t.payload, 0..256)?;
                Ok(())
            })?;
        }
        let buf = DmaBuf::new(&pd, 256, GFP_KERNEL)?;
        let over = srq.post_recv(twr(buf, &rs)?, |t, ops| {
            ops.buf(&t.payload, 0..256)?;
            Ok(())
        });
        check!(
            over.as_ref().err().map(|e| e.err) == Some(ENOMEM),
            "post beyond the SRQ depth"
        );
        drop(over);
        let buf = DmaBuf::new(&pd, 256, GFP_KERNEL)?;
        let own = b1.post_recv(twr(buf, &rs)?, |t, ops| {
            ops.buf(&t.payload, 0..256)?;
            Ok(())
        });
        check!(
            own.as_ref().err().map(|e| e.err) == Some(EINVAL),
            "post_recv on a QP with an SRQ"
        );
        drop(own);
        check!(b1.drain_rq().err() == Some(EINVAL), "drain_rq of an SRQ QP");
        let ss = sink::<DmaBuf>()?;
        for seq in 0..6u32 {
            let qp = if seq % 2 == 0 { &a1 } else { &a2 };
            qp.post_send(twr(filled(&pd, 200, seq)?, &ss)?, |t, ops| {
                ops.send(&t.payload, 0..200)?;
                Ok(())
            })?;
        }
        let sent = ss.wait(6)?;
        check!(
            sent.iter().all(|d| d.status == WcStatus::Success),
            "sends failed"
        );
        let got = rs.wait(6)?;
        let mut seen = [false; 6];
        for d in got.iter() {
            check!(
                d.status == WcStatus::Success && d.byte_len == 200,
                "SRQ receive: {:?}, {} bytes",
                d.status,
                d.byte_len
            );
            let seq = (0..6u32).find(|&q| matches(&d.payload.as_slice()[..200], q));
            let Some(seq) = seq else {
                check!(false, "SRQ receive: payload of no message");
                continue;
            };
            let want = if seq % 2 == 0 { b1.qpn() } else { b2.qpn() };
            check!(
                d.qp_num == want,
                "message {} reported QP {}, sent to QP {}",
                seq,
                d.qp_num,
                want
            );
            seen[seq as usize] = true;
        }
        check!(seen.iter().all(|&x| x), "messages missing: {:?}", seen);
        check!(
            srq.outstanding() == DEPTH - 6,
            "{} SRQ receives outstanding",
            srq.outstanding()
        );
        // The QPs go first (they hold the SRQ); the receives left on the SRQ come back with
        // the SRQ, flushed.
        drop((a1, b1, a2, b2, sent, got));
        drop(srq);
        let left = rs.wait((DEPTH - 6) as usize)?;
        check!(
            left.len() == (DEPTH - 6) as usize
                && left.iter().all(|d| d.status == WcStatus::WrFlushErr),
            "{} receives back from the destroyed SRQ",
            left.len()
        );
        check!(
            cq.free_entries() == cq.entries(),
            "CQ entries not given back"
        );
        drop(left);
        leak_check()
    })())
}

/// drain_sq and drain_rq each give back their queue's requests, flushed, and stop posting.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_drain_queues() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let p = rc_pair(&dev)?;
        let rs = sink::<DmaBuf>()?;
        for _ in 0..4 {
            post_recv(&p.a, &rs, 64)?;
        }
        // One message goes through first, so both queues have been used.
        post_recv(&p.b, &rs, 64)?;
        let ss = sink::<DmaBuf>()?;
        p.a.post_send(twr(filled(&p.pd, 64, 3)?, &ss)?, |t, ops| {
            ops.send(&t.payload, 0..64)?;
            Ok(())
        })?;
        let _ = ss.wait(1)?;
        let _ = rs.wait(1)?;
        p.a.drain_rq()?;
        check!(p.a.recv_outstanding() == 0, "receives left after drain_rq");
        let flushed = rs.wait(4)?;
        check!(
            flushed.len() == 4 && flushed.iter().all(|d| d.status == WcStatus::WrFlushErr),
            "drain_rq gave back {} requests",
            flushed.len()
        );
        let late = p.a.post_send(twr(filled(&p.pd, 64, 4)?, &ss)?, |t, ops| {
            ops.send(&t.payload, 0..64)?;
            Ok(())
        });
        check!(
            late.as_ref().err().map(|e| e.err) == Some(ESHUTDOWN),
            "post after drain"
        );
        drop(late);
        p.a.drain_sq();
        check!(p.a.send_outstanding() == 0, "sends left after drain_sq");
        drop((flushed, p));
        leak_check()
    })())
}

/// A fast-registered MR over a scatterlist of pages (`ib_dma_map_sg`): RDMA WRITE across
/// page boundaries lands in the right pages, RDMA READ of the last page gives it back.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_mr_sg() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let p = rc_pair(&dev)?;
        check!(
            DmaSg::new(&p.pd, 0).err() == Some(EINVAL),
            "DmaSg of 0 pages"
        );
        check!(
            DmaSg::new(&p.pd, MAX_SG_PAGES + 1).err() == Some(EINVAL),
            "DmaSg over MAX_SG_PAGES"
        );
        const PAGES: usize = 4;
        let mut sg = DmaSg::new(&p.pd, PAGES)?;
        check!(sg.len() == PAGES * 4096, "DmaSg of {} bytes", sg.len());
        let mut pat = KVec::from_elem(0u8, sg.len(), GFP_KERNEL)?;
        for (i, x) in pat.iter_mut().enumerate() {
            *x = pattern(5, i);
        }
        sg.write(0, &pat)?;
        let mut probe = [0u8; 2];
        check!(
            sg.read(sg.len() - 1, &mut probe).err() == Some(EINVAL),
            "read past the end"
        );
        let mut small = Mr::new(&p.pd, PAGES as u32 - 1)?;
        let sg = match small.map_sg(sg) {
            Err((e, sg)) => {
                check!(e == EINVAL, "map_sg into a too small MR: {:?}", e);
                sg
            }
            Ok(()) => {
                check!(false, "map_sg into a too small MR succeeded");
                return Err(EINVAL);
            }
        };
        let mut mr = Mr::new(&p.pd, PAGES as u32)?;
        mr.map_sg(sg).map_err(|(e, _)| e)?;
        let again = DmaSg::new(&p.pd, 1)?;
        check!(
            mr.map_sg(again).err().map(|(e, _)| e) == Some(EBUSY),
            "second map_sg"
        );
        let mr = register(&p.b, mr, Access::REMOTE_WRITE | Access::REMOTE_READ)?;
        let remote = mr.remote();
        // 2 pages + 100 bytes, from the middle of page 0 into page 2.
        let (at, len) = (1000usize, 2 * 4096 + 100);
        let s = sink::<DmaBuf>()?;
        p.a.post_send(twr(filled(&p.pd, len, 8)?, &s)?, |t, ops| {
            ops.write(&t.payload, 0..len, remote.offset(at as u64))?;
            Ok(())
        })?;
        let w = s.wait(1)?;
        check!(w[0].status == WcStatus::Success, "write: {:?}", w[0].status);
        let got = mr_bytes(&mr)?;
        check!(got.len() == PAGES * 4096, "MR of {} bytes", got.len());
        check!(got[..at] == pat[..at], "bytes before the write changed");
        check!(matches(&got[at..at + len], 8), "written bytes differ");
        check!(
            got[at + len..] == pat[at + len..],
            "bytes after the write changed"
        );
        p.a.post_send(twr(DmaBuf::new(&p.pd, 4096, GFP_KERNEL)?, &s)?, |t, ops| {
            ops.read(&t.payload, 0..4096, remote.offset(3 * 4096))?;
            Ok(())
        })?;
        let r = s.wait(1)?;
        check!(r[0].status == WcStatus::Success, "read: {:?}", r[0].status);
        check!(
            r[0].payload.as_slice() == &got[3 * 4096..],
            "read of the last page differs"
        );
        drop((w, r, mr, small, p));
        leak_check()
    })())
}

extern "C" {
    fn rdma_kunit_fail_nth(n: u32) -> c_int;
    fn rdma_kunit_fail_left() -> u32;
    fn rdma_kunit_res_count(name: *const kernel::ffi::c_char) -> c_int;
}

/// RDMA objects the core tracks on rxe0.
fn res_count() -> Result<i32> {
    // SAFETY: The name is a NUL-terminated static string.
    let n = unsafe { rdma_kunit_res_count(c_str!("rxe0").as_char_ptr()) };
    if n < 0 {
        return Err(Error::from_errno(n));
    }
    Ok(n)
}

/// Marks, in the kernel log, where allocations fail on purpose: the harness accepts the
/// allocator's failure reports (a stack dump after "vmalloc error") only inside.
struct InjectionWindow;

impl InjectionWindow {
    fn open() -> Self {
        pr_info!("rdma_kunit: fault injection: on\n");
        InjectionWindow
    }
}

impl Drop for InjectionWindow {
    fn drop(&mut self) {
        // SAFETY: Disarms fault injection for this task.
        unsafe { rdma_kunit_fail_nth(0) };
        pr_info!("rdma_kunit: fault injection: off\n");
    }
}

/// Runs `build` with its 1st, 2nd, 3rd ... allocation (any fault-injection point of this task)
/// failing, until it passes all of them; after each failure, nothing it built may be left:
/// no RDMA object on the device, and `settled` (e.g. CQ reservations) must hold. Memory is
/// left to kmemleak, which the harness runs after the suites. Returns how many allocations
/// it made.
fn every_failure<T>(
    what: &str,
    mut build: impl FnMut() -> Result<T>,
    settled: impl Fn() -> bool,
) -> Result<u32> {
    let base = res_count()?;
    let _window = InjectionWindow::open();
    for n in 1..=400u32 {
        // SAFETY: Arms fault injection for this task only; disarmed below.
        if unsafe { rdma_kunit_fail_nth(n) } != 0 {
            return Err(ENODEV);
        }
        let built = build();
        // SAFETY: As above.
        let left = unsafe { rdma_kunit_fail_left() };
        // SAFETY: As above.
        unsafe { rdma_kunit_fail_nth(0) };
        let passed = built.is_ok() && left > 0;
        drop(built);
        let now = res_count()?;
        check!(
            now == base,
            "{what}: with allocation {n} failing, {} RDMA objects were left",
            now - base
        );
        check!(
            settled(),
            "{what}: with allocation {n} failing, state was not restored"
        );
        if passed {
            return Ok(n - 1);
        }
    }
    check!(false, "{what}: did not succeed within 400 allocations");
    Err(EINVAL)
}

/// Every constructor, with each of its allocations failing in turn (`fail_nth`), fails
/// cleanly and leaves nothing behind; with none failing it succeeds.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_ctor_failures() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        // SAFETY: Disarmed at once; this only probes for CONFIG_FAULT_INJECTION.
        if unsafe { rdma_kunit_fail_nth(0) } != 0 {
            pr_err!("CONFIG_FAULT_INJECTION is off: cannot inject failures\n");
            return Err(EINVAL);
        }
        let pd = Pd::new(&dev)?;
        let cq = Cq::new(&dev, 256, 0, PollContext::Softirq)?;
        let idle = || cq.free_entries() == cq.entries();
        let always = || true;
        let mut counts = KVec::new();
        let n = every_failure("Pd::new", || Pd::new(&dev), always)?;
        counts.push(n, GFP_KERNEL)?;
        for poll in [PollContext::Softirq, PollContext::Workqueue] {
            let n = every_failure("Cq::new", || Cq::new(&dev, 64, 0, poll), always)?;
            counts.push(n, GFP_KERNEL)?;
        }
        let caps = QpCaps::default();
        let n = every_failure(
            "RC Qp::new + to_init + connect",
            || {
                let a = Qp::new(&pd, QpType::Rc, &cq, &cq, &caps)?.to_init(1, Access::NONE)?;
                let e = a.endpoint()?;
                a.connect(&e, &RcParams::default())
            },
            idle,
        )?;
        counts.push(n, GFP_KERNEL)?;
        let n = every_failure(
            "UD Qp::new + ready_ud + Ah::new",
            || {
                let q = Qp::new(&pd, QpType::Ud, &cq, &cq, &caps)?
                    .to_init_ud(1, 0x1111)?
                    .ready_ud()?;
                let ah = Ah::new(&pd, 1, &q.endpoint()?.gid)?;
                Ok((q, ah))
            },
            idle,
        )?;
        counts.push(n, GFP_KERNEL)?;
        let n = every_failure(
            "Srq::new + Qp::new_with_srq",
            || {
                let srq = Srq::new(&pd, &cq, 32, 1)?;
                let q = Qp::new_with_srq(&pd, QpType::Rc, &cq, &srq, &caps)?;
                Ok((q, srq))
            },
            idle,
        )?;
        counts.push(n, GFP_KERNEL)?;
        let n = every_failure(
            "Mr::new + map",
            || {
                let mut mr = Mr::new(&pd, 4)?;
                mr.map(DmaBuf::new(&pd, 3 * 4096, GFP_KERNEL)?)
                    .map_err(|(e, _)| e)?;
                Ok(mr)
            },
            always,
        )?;
        counts.push(n, GFP_KERNEL)?;
        let n = every_failure(
            "Mr::new + map_sg",
            || {
                let mut mr = Mr::new(&pd, 4)?;
                mr.map_sg(DmaSg::new(&pd, 4)?).map_err(|(e, _)| e)?;
                Ok(mr)
            },
            always,
        )?;
        counts.push(n, GFP_KERNEL)?;
        let n = every_failure("DmaPage::new", || DmaPage::new(&pd), always)?;
        counts.push(n, GFP_KERNEL)?;
        let n = every_failure(
            "EventRegistration::new",
            || {
                let ev = Arc::pin_init(
                    pin_init!(Events {
                        list <- new_spinlock_bh!(KVec::new(), "rdma_kunit_events"),
                        sig <- Signal::new(),
                    }),
                    GFP_KERNEL,
                )?;
                EventRegistration::new(&dev, Watch(ev))
            },
            always,
        )?;
        counts.push(n, GFP_KERNEL)?;
        pr_info!(
            "rdma_kunit: allocations per constructor (each failed in turn): {:?}\n",
            &counts[..]
        );
        check!(
            counts.iter().all(|&c| c > 0),
            "a constructor made no allocation: the injection did not reach it"
        );
        Ok(())
    })())
}
