// SPDX-License-Identifier: GPL-2.0

//! What keeps a QP alive, and what its teardown waits for: a request that the driver took only
//! part of and that owns its own QP, and an event handler of one QP that drops the last
//! reference to another.

use super::*;

extern "C" {
    fn rdma_kunit_fail_nth(n: u32) -> c_int;
    fn rdma_kunit_fail_left() -> u32;
    /// Whether lockdep is still on (`debug_locks`): it turns itself off at its first report.
    fn rdma_kunit_lockdep_on() -> bool;
}

/// Where the test thread can take a QP back from whatever else holds it.
#[pin_data]
struct Keeper {
    #[pin]
    qp: SpinLockBh<Option<Arc<Qp<Rts>>>>,
}

fn keeper(qp: Arc<Qp<Rts>>) -> Result<Arc<Keeper>> {
    Arc::pin_init(
        pin_init!(Keeper {
            qp <- new_spinlock_bh!(Some(qp), "rdma_kunit_keeper"),
        }),
        GFP_KERNEL,
    )
}

impl Keeper {
    fn take(&self) -> Option<Arc<Qp<Rts>>> {
        self.qp.lock().take()
    }
}

/// Issue 42, item 5: a chained SEND that the driver takes only part of (the fault-injection
/// point of a partial post: soft-RoCE refuses nothing that the checks before the post let
/// through), whose request holds the only reference to its QP. The QP must stop (the error
/// state, `EIO` for later posts) and give the request back, flushed, by itself: kept until the
/// QP is destroyed, the request would keep the QP, its PD, CQ and module for ever.
#[no_mangle]
extern "C" fn rdma_kunit_sound_partial_post_owns_qp() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let base = res_count()?;
        let p = rc_pair(&dev)?;
        let rs = sink::<DmaBuf>()?;
        post_recv(&p.b, &rs, 64)?;
        post_recv(&p.b, &rs, 64)?;
        let a = Arc::new(p.a, GFP_KERNEL)?;
        let keep = keeper(a.clone())?;
        let ss = sink::<(DmaBuf, Arc<Keeper>)>()?;
        let wr = twr((filled(&p.pd, 64, 5)?, keep.clone()), &ss)?;
        // SAFETY: Arms fault injection for this task; disarmed right after the post.
        if unsafe { rdma_kunit_fail_nth(1) } != 0 {
            return Err(ENODEV);
        }
        let posted = a.post_send(wr, |t, ops| {
            ops.send(&t.payload.0, 0..32)?;
            ops.send(&t.payload.0, 32..64)?;
            Ok(())
        });
        // SAFETY: As above.
        let left = unsafe { rdma_kunit_fail_left() };
        // SAFETY: As above.
        unsafe { rdma_kunit_fail_nth(0) };
        check!(posted.is_ok(), "the partial post: {:?}", posted.err());
        check!(left == 0, "the partial post's injection point did not fire");
        // The QP is stopped for good: later posts fail with EIO.
        let e = a.post_send(twr(filled(&p.pd, 64, 6)?, &sink::<DmaBuf>()?)?, |t, ops| {
            ops.send(&t.payload, 0..64)?;
            Ok(())
        });
        check!(
            matches!(&e, Err(pe) if pe.err == EIO),
            "a post after the partial one: {:?}",
            e.as_ref().err()
        );
        drop(e);
        let qpn = a.qpn();
        // From here on the request holds the only reference to its QP.
        drop(a);
        let back = ss.wait(1);
        let qp = keep.take();
        let Ok(got) = back else {
            // Let the QP go, which gives the request back at last, and say what was seen.
            let kept = qp.is_some();
            drop(qp);
            let after = ss.wait(1).map(|g| g.len()).unwrap_or(0);
            pr_err!(
                "QP {qpn}: the partly posted request did not come back in {WAIT_MS} ms while it held its QP (QP still alive: {kept}); {after} came back once the QP was dropped\n"
            );
            return Err(EINVAL);
        };
        check!(
            got.len() == 1 && got[0].status == WcStatus::WrFlushErr,
            "the partly posted request came back with {:?}",
            got.first().map(|d| d.status)
        );
        let qp = qp.ok_or(EINVAL)?;
        check!(
            qp.query_state()? == QpState::Err,
            "QP {qpn} in {:?} after the partial post",
            qp.query_state()?
        );
        drop((got, qp, keep, p.b, p.cq, p.pd));
        // B's receives (one taken by the SEND the driver took, one flushed) hold the PD.
        drop(rs.wait(2)?);
        settle(c_str!("rxe0"), base, 10_000)?;
        leak_check()
    })())
}

/// An event handler that blocks a while: its delivery work runs meanwhile.
#[pin_data]
struct Slow {
    #[pin]
    started: Signal,
}

impl AsyncHandler for Slow {
    fn event(&self, _ev: AsyncEvent) {
        self.started.complete();
        msleep(1000);
    }
}

/// An event handler that drops the last reference to another QP.
#[pin_data]
struct DropOther {
    #[pin]
    victim: SpinLockBh<Option<Qp<Rts>>>,
    #[pin]
    done: Signal,
}

impl AsyncHandler for DropOther {
    fn event(&self, _ev: AsyncEvent) {
        let victim = self.victim.lock().take();
        drop(victim);
        self.done.complete();
    }
}

/// Issue 42, item 8b: the event handler of QP A drops the last reference to QP B while B's own
/// handler runs. B's teardown waits for B's event delivery; done in A's delivery work item, it
/// waits for a work item of the same class as the one it runs in: lockdep reports recursive
/// locking (and on one ordered workqueue it would deadlock). It must be deferred instead.
#[no_mangle]
extern "C" fn rdma_kunit_sound_event_drops_other() -> c_int {
    ret((|| {
        // SAFETY: Reads a global flag.
        let on = unsafe { rdma_kunit_lockdep_on() };
        check!(on, "lockdep was off before the case (an earlier report)");
        let dev = rxe0()?;
        let base = res_count()?;
        let pd = Pd::new(&dev)?;
        let cq = Cq::new(&dev, 64, 0, PollContext::Softirq)?;
        let srq = Srq::new(&pd, &cq, 16, 1)?;
        let caps = QpCaps::default();
        let qa = Qp::new_with_srq(&pd, QpType::Rc, &cq, &srq, &caps)?;
        let qb = Qp::new_with_srq(&pd, QpType::Rc, &cq, &srq, &caps)?;
        let slow = Arc::pin_init(
            pin_init!(Slow {
                started <- Signal::new(),
            }),
            GFP_KERNEL,
        )?;
        let dropper = Arc::pin_init(
            pin_init!(DropOther {
                victim <- new_spinlock_bh!(None, "rdma_kunit_victim"),
                done <- Signal::new(),
            }),
            GFP_KERNEL,
        )?;
        qa.set_event_handler(dropper.clone())?;
        qb.set_event_handler(slow.clone())?;
        let (qa, qb) = srq::connect(qa.to_init(1, Access::NONE)?, qb.to_init(1, Access::NONE)?)?;
        // B's handler runs (for a second) from B's delivery work...
        qb.set_error()?;
        slow.started.wait_timeout(5000)?;
        // ... while A's handler drops B.
        *dropper.victim.lock() = Some(qb);
        qa.set_error()?;
        dropper.done.wait_timeout(5000)?;
        drop((qa, srq, cq, pd));
        settle(c_str!("rxe0"), base, 10_000)?;
        // SAFETY: Reads a global flag.
        let on = unsafe { rdma_kunit_lockdep_on() };
        check!(
            on,
            "lockdep reported a problem while one QP's event handler dropped another QP"
        );
        Ok(())
    })())
}
