// SPDX-License-Identifier: GPL-2.0

//! The rules that kernel::rdma keeps for its users, each with the case that catches their
//! breaking: the last reference to a QP, CQ and PD dropped in a completion handler, objects of
//! another PD or device posted on a QP, two QPs created on one CM id at once, SRQ teardown
//! racing a poller, a drain whose requests come back late, handlers run in the wrong context,
//! a drain from inside a post, and two drains at once.

use super::*;
use core::sync::atomic::AtomicBool;
use kernel::{
    new_mutex,
    rdma::cm::{CmId, PortSpace, SockAddrV4},
    sync::Mutex,
    time::Ktime,
    workqueue,
};

extern "C" {
    /// Whether bottom halves are disabled here (`in_softirq()`): how handlers of a softirq CQ
    /// run.
    fn rdma_kunit_bh_disabled() -> bool;
}

fn rxe1() -> Result<ARef<Device>> {
    Device::get_by_name(c_str!("rxe1")).ok_or(ENODEV)
}

fn now_ms() -> i64 {
    Ktime::ktime_get().to_ns() / 1_000_000
}

/// What a handler saw, for the test thread.
#[pin_data]
struct Seen {
    #[pin]
    sig: Signal,
    ok: AtomicBool,
    ran: AtomicBool,
}

fn seen() -> Result<Arc<Seen>> {
    Arc::pin_init(
        pin_init!(Seen {
            sig <- Signal::new(),
            ok: AtomicBool::new(false),
            ran: AtomicBool::new(false),
        }),
        GFP_KERNEL,
    )
}

/// A receive that holds the last references to its QP, CQ and PD, and lets them go in its
/// handler.
struct LastRefs {
    buf: DmaBuf,
    _qp: Arc<Qp<Rts>>,
    _cq: Option<Arc<Cq>>,
    _pd: Arc<Pd>,
    seen: Arc<Seen>,
}

impl Completion for LastRefs {
    fn done(wr: Wr<Self>, wc: &Wc) {
        let seen = wr.data().seen.clone();
        seen.ok.store(wc.is_ok(), Ordering::Release);
        // The QP, its CQ and its PD go here, in the CQ's context: softirq, a work item of the
        // CQ itself, or the thread polling it.
        drop(wr);
        seen.ran.store(true, Ordering::Release);
        seen.sig.complete();
    }
}

/// One message to a QP whose request holds the last references to it, its CQ (polled with
/// `poll`) and its PD: the handler drops them, they are torn down in process context, and
/// nothing is left once that is over.
fn last_refs_in_handler(dev: &Device, poll: PollContext) -> Result {
    let name = dev.name();
    let pd_a = Pd::new(dev)?;
    let cq_a = Cq::new(dev, 64, 0, PollContext::Softirq)?;
    let caps = QpCaps::default();
    let a = Qp::new(&pd_a, QpType::Rc, &cq_a, &cq_a, &caps)?.to_init(1, Access::NONE)?;
    let with_a = res_count_on(name.as_cstr())?;
    let pd_b = Pd::new(dev)?;
    let cq_b = Cq::new(dev, 64, 0, poll)?;
    let b = Qp::new(&pd_b, QpType::Rc, &cq_b, &cq_b, &caps)?.to_init(1, Access::NONE)?;
    let (ea, eb) = (a.endpoint()?, b.endpoint()?);
    let a = a.connect(&eb, &RcParams::default())?;
    let b = Arc::new(b.connect(&ea, &RcParams::default())?, GFP_KERNEL)?;
    let s = seen()?;
    // A direct CQ runs its handlers in whoever polls it: the test keeps it to poll.
    let poller = (poll == PollContext::Direct).then(|| cq_b.clone());
    let rx = LastRefs {
        buf: DmaBuf::new(&pd_b, 64, GFP_KERNEL)?,
        _qp: b.clone(),
        _cq: Some(cq_b),
        _pd: pd_b,
        seen: s.clone(),
    };
    b.post_recv(Wr::new(rx, GFP_KERNEL)?, |r, ops| {
        ops.buf(&mut r.buf, 0..64)?;
        Ok(())
    })?;
    drop(b);
    // Not waited for: rxe's responder completes the receive before it acknowledges the
    // SEND, so the receiver may be gone, torn down by the handler, before its ACK leaves.
    // The sender's request comes back when `a` is dropped (flushed), if not before.
    let sent = sink::<DmaBuf>()?;
    a.post_send(twr(filled(&pd_a, 64, 3)?, &sent)?, |t, ops| {
        ops.send(&t.payload, 0..64)?;
        Ok(())
    })?;
    let t0 = now_ms();
    while !s.ran.load(Ordering::Acquire) && now_ms() - t0 < i64::from(WAIT_MS) {
        match &poller {
            Some(cq) => {
                cq.poll_direct(16)?;
                let _ = s.sig.wait_timeout(1);
            }
            None => {
                let _ = s.sig.wait_timeout(100);
            }
        }
    }
    check!(
        s.ran.load(Ordering::Acquire),
        "{poll:?}: the receive did not complete"
    );
    check!(s.ok.load(Ordering::Acquire), "{poll:?}: the receive failed");
    drop(poller);
    // The receiver's QP, CQ and PD are torn down from process context, soon.
    settle(name.as_cstr(), with_a, 10_000)?;
    drop((a, cq_a, pd_a));
    let send = sent.wait(1)?.into_iter().next().ok_or(EINVAL)?;
    check!(
        matches!(
            send.status,
            WcStatus::Success | WcStatus::WrFlushErr | WcStatus::RetryExcErr
        ),
        "{poll:?}: the SEND completed with {:?}",
        send.status
    );
    Ok(())
}

/// The last references to a QP, its CQ and its PD dropped in a completion handler, in each
/// poll context: no sleep in atomic context, no teardown waiting for its own handler,
/// everything freed, and `rdma link delete` of the device returns promptly afterwards.
#[no_mangle]
extern "C" fn rdma_kunit_sound_last_refs_in_handler() -> c_int {
    ret((|| {
        let dev = rxe1()?;
        let name = dev.name();
        let ndev = dev.netdev_name(1)?;
        let base = res_count_on(name.as_cstr())?;
        for poll in [
            PollContext::Softirq,
            PollContext::Workqueue,
            PollContext::Direct,
        ] {
            last_refs_in_handler(&dev, poll)?;
        }
        settle(name.as_cstr(), base, 10_000)?;
        drop(dev);
        // A reference left behind would make the delete wait for ever: `timeout` ends it (the
        // delete itself takes 10-20 s on this debug kernel).
        let t0 = now_ms();
        let deleted = crate::run(kernel::fmt!("timeout 30 rdma link delete {name}"))?;
        let took = now_ms() - t0;
        pr_info!("rdma link delete {name} took {took} ms\n");
        let added = crate::run(kernel::fmt!("rdma link add {name} type rxe netdev {ndev}"))?;
        check!(
            deleted == 0,
            "rdma link delete {name}: {deleted} after {took} ms"
        );
        check!(added == 0, "rdma link add {name}: {added}");
        for _ in 0..100 {
            if let Some(dev) = Device::get_by_name(name.as_cstr()) {
                if dev.query_port(1)?.state() == kernel::rdma::device::PortState::Active {
                    return leak_check();
                }
            }
            msleep(200);
        }
        check!(false, "{name} did not come back");
        Ok(())
    })())
}

/// Memory, memory regions and address handles of another PD, or of another device, are
/// refused with `EINVAL` before the driver sees them, and the request comes back.
#[no_mangle]
extern "C" fn rdma_kunit_sound_foreign_objects() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let other_dev = rxe1()?;
        let p = rc_pair(&dev)?;
        let pd2 = Pd::new(&dev)?;
        let pd_other = Pd::new(&other_dev)?;
        let s = sink::<DmaBuf>()?;
        let refused = |r: Result<(), kernel::rdma::wr::PostError<TWr<DmaBuf>>>| matches!(r, Err(e) if e.err == EINVAL);
        for pd in [&pd2, &pd_other] {
            let e =
                p.a.post_send(twr(DmaBuf::new(pd, 64, GFP_KERNEL)?, &s)?, |t, ops| {
                    ops.send(&t.payload, 0..64)?;
                    Ok(())
                });
            check!(refused(e), "SEND of a buffer of another PD or device");
            let e =
                p.b.post_recv(twr(DmaBuf::new(pd, 64, GFP_KERNEL)?, &s)?, |t, ops| {
                    ops.buf(&mut t.payload, 0..64)?;
                    Ok(())
                });
            check!(refused(e), "receive into a buffer of another PD or device");
            let e =
                p.a.post_send(twr(DmaBuf::new(pd, 64, GFP_KERNEL)?, &s)?, |t, ops| {
                    ops.read(&mut t.payload, 0..64, Remote { addr: 0, rkey: 0 })?;
                    Ok(())
                });
            check!(
                refused(e),
                "RDMA READ into a buffer of another PD or device"
            );
        }
        // A gather list whose second piece is foreign is refused whole.
        struct Two(DmaBuf, DmaBuf);
        impl Completion for Two {
            fn done(_wr: Wr<Self>, _wc: &Wc) {}
        }
        let caps = QpCaps {
            send_sge: 2,
            ..QpCaps::default()
        };
        let q = rc_pair_with(&dev, &caps, PollContext::Softirq, &RcParams::default())?;
        let two = Two(
            DmaBuf::new(&q.pd, 64, GFP_KERNEL)?,
            DmaBuf::new(&pd2, 64, GFP_KERNEL)?,
        );
        let e = q.a.post_send(Wr::new(two, GFP_KERNEL)?, |t, ops| {
            ops.send(&t.0, 0..64)?.gather(&t.1, 0..64)?;
            Ok(())
        });
        check!(
            matches!(&e, Err(pe) if pe.err == EINVAL),
            "gather of a buffer of another PD"
        );
        drop((e, q));
        // A memory region of another PD.
        let mut mr = Mr::new(&pd2, 4)?;
        mr.map(DmaBuf::new(&pd2, 4096, GFP_KERNEL)?)
            .map_err(|(e, _)| e)?;
        let ms = sink::<Mr>()?;
        let e = p.a.post_send(twr(mr, &ms)?, |t, ops| {
            ops.reg_mr(&t.payload, Access::REMOTE_WRITE)?;
            Ok(())
        });
        check!(
            matches!(&e, Err(pe) if pe.err == EINVAL),
            "REG_MR of a memory region of another PD"
        );
        drop(e);
        // An address handle of another PD.
        let cq = Cq::new(&dev, 128, 0, PollContext::Softirq)?;
        let ud = Qp::new(&p.pd, QpType::Ud, &cq, &cq, &QpCaps::default())?
            .to_init_ud(1, 0x11)?
            .ready_ud()?;
        let ah = Ah::new(&pd2, 1, &ud.endpoint()?.gid)?;
        struct Dgram(DmaBuf, Arc<Ah>);
        impl Completion for Dgram {
            fn done(_wr: Wr<Self>, _wc: &Wc) {}
        }
        let d = Dgram(DmaBuf::new(&p.pd, 64, GFP_KERNEL)?, ah);
        let e = ud.post_send(Wr::new(d, GFP_KERNEL)?, |d, ops| {
            ops.send_ud(&d.0, 0..64, &d.1, 1, 0x11)?;
            Ok(())
        });
        check!(
            matches!(&e, Err(pe) if pe.err == EINVAL),
            "UD SEND through an address handle of another PD"
        );
        // An SRQ takes memory of its own PD only, and QPs of its own PD only.
        let srq = Srq::new(&p.pd, &cq, 4, 1)?;
        let e = srq.post_recv(twr(DmaBuf::new(&pd2, 64, GFP_KERNEL)?, &s)?, |t, ops| {
            ops.buf(&mut t.payload, 0..64)?;
            Ok(())
        });
        check!(refused(e), "SRQ receive into a buffer of another PD");
        check!(
            Qp::new_with_srq(&pd2, QpType::Rc, &cq, &srq, &QpCaps::default()).err() == Some(EINVAL),
            "QP of another PD on an SRQ"
        );
        drop((ud, srq, cq, p, pd2, pd_other));
        leak_check()
    })())
}

/// Results of two racing `create_qp` calls.
#[pin_data]
struct Race {
    #[pin]
    got: Mutex<KVec<Result<Qp<Init>>>>,
    #[pin]
    done: Signal,
}

/// One QP per CM id: a second `create_qp` gets `EBUSY`, also when two threads race for it,
/// and a new one may be created once the first is gone.
#[no_mangle]
extern "C" fn rdma_kunit_sound_cm_one_qp() -> c_int {
    ret((|| {
        let _dev = rxe0()?;
        let id = Arc::new(CmId::new(PortSpace::Tcp, Quiet)?, GFP_KERNEL)?;
        // 10.77.0.1 is rxe0's netdev (the harness's address): binding gives the id its device.
        id.bind(SockAddrV4 {
            ip: [10, 77, 0, 1],
            port: 0,
        })?;
        let dev = id.device().ok_or(ENODEV)?;
        let pd = Pd::new(&dev)?;
        let cq = Cq::new(&dev, 256, 0, PollContext::Softirq)?;
        let caps = QpCaps::default();
        let q1 = id.create_qp(&pd, &cq, &cq, &caps)?;
        check!(
            id.create_qp(&pd, &cq, &cq, &caps).err() == Some(EBUSY),
            "second QP on one id"
        );
        drop(q1);
        drop(id.create_qp(&pd, &cq, &cq, &caps)?);
        for round in 0..20 {
            let race = Arc::pin_init(
                pin_init!(Race {
                    got <- new_mutex!(KVec::new(), "rdma_kunit_race"),
                    done <- Signal::new(),
                }),
                GFP_KERNEL,
            )?;
            for _ in 0..2 {
                let (id, pd, cq, race) = (id.clone(), pd.clone(), cq.clone(), race.clone());
                workqueue::system_unbound().try_spawn(GFP_KERNEL, move || {
                    let r = id.create_qp(&pd, &cq, &cq, &QpCaps::default());
                    // A failed push shows up as a missing result below.
                    let _ = race.got.lock().push(r, GFP_KERNEL);
                    race.done.complete();
                })?;
            }
            for _ in 0..2 {
                race.done.wait_timeout(WAIT_MS)?;
            }
            let got = core::mem::take(&mut *race.got.lock());
            let ok = got.iter().filter(|r| r.is_ok()).count();
            let busy = got
                .iter()
                .filter(|r| matches!(r, Err(e) if *e == EBUSY))
                .count();
            check!(
                ok == 1 && busy == 1,
                "round {round}: {ok} QPs created and {busy} refused by two racing callers"
            );
        }
        Ok(())
    })())
}

/// Destroying an SRQ processes its CQ with every other poller kept out: a thread polling the
/// (direct) CQ at the same time never runs a handler against freed bookkeeping, and each
/// receive comes back once.
#[no_mangle]
extern "C" fn rdma_kunit_sound_srq_vs_poller() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let pd = Pd::new(&dev)?;
        let cq = Cq::new(&dev, 256, 0, PollContext::Direct)?;
        let cq_a = Cq::new(&dev, 64, 0, PollContext::Softirq)?;
        let srq = Srq::new(&pd, &cq, 32, 1)?;
        let caps = QpCaps::default();
        let a = Qp::new(&pd, QpType::Rc, &cq_a, &cq_a, &caps)?.to_init(1, Access::NONE)?;
        let b = Qp::new_with_srq(&pd, QpType::Rc, &cq, &srq, &caps)?.to_init(1, Access::NONE)?;
        let (a, b) = super::srq::connect(a, b)?;
        let rs = sink::<DmaBuf>()?;
        for _ in 0..16 {
            srq.post_recv(twr(DmaBuf::new(&pd, 64, GFP_KERNEL)?, &rs)?, |t, ops| {
                ops.buf(&mut t.payload, 0..64)?;
                Ok(())
            })?;
        }
        let ss = sink::<DmaBuf>()?;
        for i in 0..8 {
            a.post_send(twr(filled(&pd, 64, i)?, &ss)?, |t, ops| {
                ops.send(&t.payload, 0..64)?;
                Ok(())
            })?;
        }
        drop(ss.wait(8)?);
        // A poller runs while the SRQ goes.
        let stop = Arc::new(AtomicBool::new(false), GFP_KERNEL)?;
        let polled = Arc::pin_init(Signal::new(), GFP_KERNEL)?;
        {
            let (cq, stop, polled) = (cq.clone(), stop.clone(), polled.clone());
            workqueue::system_unbound().try_spawn(GFP_KERNEL, move || {
                while !stop.load(Ordering::Acquire) {
                    let _ = cq.poll_direct(1);
                }
                polled.complete();
            })?;
        }
        drop(b);
        drop(srq);
        stop.store(true, Ordering::Release);
        polled.wait_timeout(WAIT_MS)?;
        let got = rs.wait(16)?;
        let ok = got.iter().filter(|d| d.status == WcStatus::Success).count();
        let flushed = got
            .iter()
            .filter(|d| d.status == WcStatus::WrFlushErr)
            .count();
        check!(
            ok == 8 && flushed == 8,
            "{ok} receives completed and {flushed} flushed of 16 (8 and 8 expected)"
        );
        drop((got, a, cq, cq_a, pd));
        leak_check()
    })())
}

/// A receive whose handler sleeps (a workqueue CQ), holding back the completion behind it.
struct Slow {
    buf: DmaBuf,
    sleep_ms: u32,
    entered: Arc<Seen>,
    back: Arc<Sink<()>>,
}

impl Completion for Slow {
    fn done(wr: Wr<Self>, wc: &Wc) {
        let d = wr.data();
        if d.sleep_ms > 0 && wc.is_ok() {
            d.entered.ran.store(true, Ordering::Release);
            d.entered.sig.complete();
            msleep(d.sleep_ms);
        }
        let back = d.back.clone();
        let _ = back.list.lock().push(Done::of(wc, ()), GFP_ATOMIC);
        drop(wr);
        back.sig.complete();
    }
}

/// A UD QP dropped while one of its completions is held back (a handler sleeps past the drain's
/// 10 s): the QP is kept, loudly, until the completion comes back, and only then destroyed, so
/// the late completion finds it.
#[no_mangle]
extern "C" fn rdma_kunit_sound_late_completion() -> c_int {
    ret((|| {
        const QKEY: u32 = 0x5151;
        let dev = rxe0()?;
        let pd = Pd::new(&dev)?;
        let cq_a = Cq::new(&dev, 64, 0, PollContext::Softirq)?;
        let cq_b = Cq::new(&dev, 64, 0, PollContext::Workqueue)?;
        let caps = QpCaps::default();
        let ud = |cq: &Arc<Cq>| -> Result<Qp<Rts>> {
            Qp::new(&pd, QpType::Ud, cq, cq, &caps)?
                .to_init_ud(1, QKEY)?
                .ready_ud()
        };
        let (a, b) = (ud(&cq_a)?, ud(&cq_b)?);
        let eb = b.endpoint()?;
        let entered = seen()?;
        let back = sink::<()>()?;
        for sleep_ms in [12_000, 0] {
            let rx = Slow {
                buf: DmaBuf::new(&pd, 64 + GRH_LEN, GFP_KERNEL)?,
                sleep_ms,
                entered: entered.clone(),
                back: back.clone(),
            };
            b.post_recv(Wr::new(rx, GFP_KERNEL)?, |r, ops| {
                ops.buf(&mut r.buf, 0..64 + GRH_LEN)?;
                Ok(())
            })?;
        }
        let ah = Ah::new(&pd, 1, &eb.gid)?;
        struct Dgram(DmaBuf, Arc<Ah>);
        impl Completion for Dgram {
            fn done(_wr: Wr<Self>, _wc: &Wc) {}
        }
        for i in 0..2 {
            let d = Dgram(filled(&pd, 64, i)?, ah.clone());
            a.post_send(Wr::new(d, GFP_KERNEL)?, |d, ops| {
                ops.send_ud(&d.0, 0..64, &d.1, eb.qpn, QKEY)?;
                Ok(())
            })?;
        }
        entered.sig.wait_timeout(WAIT_MS)?;
        let t0 = now_ms();
        drop(b);
        let took = now_ms() - t0;
        let got = back.list.lock().len();
        check!(
            got == 2,
            "the QP was destroyed after {took} ms with {got} of 2 receives back"
        );
        check!(took >= 10_000, "the drop returned after {took} ms");
        drop((a, ah, cq_a, cq_b, pd));
        leak_check()
    })())
}

/// What a request's handler saw of its context.
struct Probe {
    buf: DmaBuf,
    bh_off: Arc<Sink<bool>>,
}

impl Completion for Probe {
    fn done(wr: Wr<Self>, wc: &Wc) {
        // SAFETY: The helper only reads the preemption count.
        let bh = unsafe { rdma_kunit_bh_disabled() };
        let s = wr.data().bh_off.clone();
        drop(wr);
        let _ = s.list.lock().push(
            Done {
                status: WcStatus::Success,
                ..Done::of(wc, bh)
            },
            GFP_ATOMIC,
        );
        s.sig.complete();
    }
}

/// Receives left on an SRQ come back, when it is destroyed, in the context of its CQ's
/// handlers: with bottom halves disabled for a softirq CQ.
#[no_mangle]
extern "C" fn rdma_kunit_sound_srq_flush_context() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let pd = Pd::new(&dev)?;
        let cq = Cq::new(&dev, 64, 0, PollContext::Softirq)?;
        let srq = Srq::new(&pd, &cq, 8, 1)?;
        let s = sink::<bool>()?;
        for _ in 0..4 {
            let p = Probe {
                buf: DmaBuf::new(&pd, 64, GFP_KERNEL)?,
                bh_off: s.clone(),
            };
            srq.post_recv(Wr::new(p, GFP_KERNEL)?, |p, ops| {
                ops.buf(&mut p.buf, 0..64)?;
                Ok(())
            })?;
        }
        drop(srq);
        let got = s.wait(4)?;
        check!(
            got.iter().all(|d| d.payload),
            "a flushed receive of a softirq CQ ran with bottom halves enabled"
        );
        Ok(())
    })())
}

/// A build closure that drains the QP it posts on returns `ESHUTDOWN` instead of waiting for
/// itself for ever.
#[no_mangle]
extern "C" fn rdma_kunit_sound_drain_in_build() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let p = rc_pair(&dev)?;
        let s = sink::<DmaBuf>()?;
        let e = p.a.post_send(twr(filled(&p.pd, 64, 1)?, &s)?, |t, ops| {
            p.a.drain()?;
            ops.send(&t.payload, 0..64)?;
            Ok(())
        });
        check!(
            matches!(&e, Err(pe) if pe.err == ESHUTDOWN),
            "post after a drain in its own build closure: {:?}",
            e.as_ref().err()
        );
        drop((e, p));
        leak_check()
    })())
}

/// Two drains at once: the second returns only once every request has come back, like the
/// first.
#[no_mangle]
extern "C" fn rdma_kunit_sound_concurrent_drain() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let pd = Pd::new(&dev)?;
        let cq_a = Cq::new(&dev, 64, 0, PollContext::Softirq)?;
        let cq_b = Cq::new(&dev, 64, 0, PollContext::Workqueue)?;
        let caps = QpCaps::default();
        let a = Qp::new(&pd, QpType::Rc, &cq_a, &cq_a, &caps)?.to_init(1, Access::NONE)?;
        let b = Qp::new(&pd, QpType::Rc, &cq_b, &cq_b, &caps)?.to_init(1, Access::NONE)?;
        let (ea, eb) = (a.endpoint()?, b.endpoint()?);
        let a = a.connect(&eb, &RcParams::default())?;
        let b = Arc::new(b.connect(&ea, &RcParams::default())?, GFP_KERNEL)?;
        let entered = seen()?;
        let back = sink::<()>()?;
        for sleep_ms in [3000, 0] {
            let rx = Slow {
                buf: DmaBuf::new(&pd, 64, GFP_KERNEL)?,
                sleep_ms,
                entered: entered.clone(),
                back: back.clone(),
            };
            b.post_recv(Wr::new(rx, GFP_KERNEL)?, |r, ops| {
                ops.buf(&mut r.buf, 0..64)?;
                Ok(())
            })?;
        }
        post_one(
            &a,
            filled(&pd, 64, 1)?,
            WcStatus::Success,
            WcOpcode::Send,
            |buf, ops| {
                ops.send(buf, 0..64)?;
                Ok(())
            },
        )?;
        entered.sig.wait_timeout(WAIT_MS)?;
        // The first drain waits for the sleeping handler; the second must wait for it too.
        let first_done = Arc::pin_init(Signal::new(), GFP_KERNEL)?;
        {
            let (b, first_done) = (b.clone(), first_done.clone());
            workqueue::system_unbound().try_spawn(GFP_KERNEL, move || {
                // A failed drain shows up below as requests still outstanding.
                let _ = b.drain();
                first_done.complete();
            })?;
        }
        msleep(200);
        b.drain()?;
        let out = b.recv_outstanding();
        let got = back.list.lock().len();
        check!(
            out == 0 && got == 2,
            "the second drain returned with {out} receives outstanding and {got} of 2 back"
        );
        first_done.wait_timeout(WAIT_MS)?;
        drop((a, b, cq_a, cq_b, pd));
        leak_check()
    })())
}
