// SPDX-License-Identifier: GPL-2.0

//! Cases where something goes wrong on purpose: full queues, flushes, bad keys, missing receives, drains, and the port going down.

use super::*;

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
                ops.buf(&mut t.payload, 0..64)?;
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
/// the error state; no crash, the request comes back. The same WRITE chained before a SEND
/// (unsignaled, so its error moves the QP to the error state and the SEND is flushed) gives its
/// status, the cause, to the request's completion, not the flush.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_bad_rkey() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        write_bad_rkey(&dev, false)?;
        write_bad_rkey(&dev, true)?;
        leak_check()
    })())
}

/// Posts an RDMA WRITE with a wrong rkey (`chained`: followed by a SEND in the same request)
/// on a new pair and checks its completion, the QP's state and the peer's MR.
fn write_bad_rkey(dev: &Device, chained: bool) -> Result {
    let p = rc_pair(dev)?;
    let mr = registered_mr(&p.b, 4096, 0, Access::REMOTE_WRITE)?;
    let bad = Remote {
        addr: mr.remote()?.addr,
        rkey: mr.rkey() ^ 0x5500,
    };
    let d = post_one(
        &p.a,
        filled(&p.pd, 64, 0)?,
        WcStatus::RemAccessErr,
        WcOpcode::RdmaWrite,
        |b, ops| {
            let b = &*b;
            ops.write(b, 0..64, bad)?;
            if chained {
                ops.send(b, 0..64)?;
            }
            Ok(())
        },
    )?;
    // rxe delivers the error completion, then moves the QP to the error state: the two are
    // not ordered for the reader, so give the transition up to a second.
    let mut state = p.a.query_state()?;
    for _ in 0..100 {
        if state == QpState::Err {
            break;
        }
        msleep(10);
        state = p.a.query_state()?;
    }
    check!(
        state == QpState::Err,
        "requester state {:?} (chained: {chained})",
        state
    );
    check!(
        matches(&mr_bytes(&mr)?, 0),
        "a write with a wrong rkey changed the MR (chained: {chained})"
    );
    drop((d, mr, p));
    Ok(())
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
        let d = post_one(
            &p.a,
            filled(&p.pd, 64, 0)?,
            WcStatus::RnrRetryExcErr,
            WcOpcode::Send,
            |b, ops| {
                ops.send(b, 0..64)?;
                Ok(())
            },
        )?;
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

/// LOCAL_INV revokes an rkey: a WRITE with it fails afterwards, and the memory is untouched.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_local_inv() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let p = rc_pair(&dev)?;
        let mr = registered_mr(&p.b, 4096, 0, Access::REMOTE_WRITE)?;
        let remote = mr.remote()?;
        // The MR keeps its buffer while a registration for it may live.
        let mut mr = mr;
        let e = mr.map(DmaBuf::new(&p.pd, 64, GFP_KERNEL)?);
        check!(
            matches!(&e, Err((err, _)) if *err == EBUSY),
            "second map of a registered MR"
        );
        drop(e);
        // The key works...
        post_one(
            &p.a,
            filled(&p.pd, 64, 8)?,
            WcStatus::Success,
            WcOpcode::RdmaWrite,
            |b, ops| {
                ops.write(b, 0..64, remote)?;
                Ok(())
            },
        )?;
        // ...until its owner invalidates it.
        let mr = post_one(
            &p.b,
            mr,
            WcStatus::Success,
            WcOpcode::LocalInv,
            |mr, ops| {
                ops.local_inv(mr)?;
                Ok(())
            },
        )?
        .payload;
        check!(
            !mr.is_registered() && mr.remote() == Err(EINVAL),
            "an invalidated MR still hands out its rkey"
        );
        post_one(
            &p.a,
            filled(&p.pd, 64, 9)?,
            WcStatus::RemAccessErr,
            WcOpcode::RdmaWrite,
            |b, ops| {
                ops.write(b, 0..64, remote)?;
                Ok(())
            },
        )?;
        check!(
            matches(&mr_bytes(&mr)?[..64], 8),
            "memory changed after invalidation"
        );
        drop((mr, p));
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
        p.a.drain_sq()?;
        check!(p.a.send_outstanding() == 0, "sends left after drain_sq");
        drop((flushed, p));
        leak_check()
    })())
}

/// Port events reach a registered handler: the netdev going down gives PORT_ERR, coming back
/// PORT_ACTIVE; nothing arrives after the registration is dropped.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_port_events() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let ndev = dev.netdev_name(1)?;
        let ev = Events::new()?;
        let reg = EventRegistration::new(&dev, Watch(ev.clone()))?;
        let down = crate::run(kernel::fmt!("/usr/bin/ip link set {ndev} down"))?;
        check!(down == 0, "ip link set {ndev} down: {down}");
        let saw_err = ev.wait_for(Event::PortErr(1), 20_000);
        let up = crate::run(kernel::fmt!("/usr/bin/ip link set {ndev} up"))?;
        check!(up == 0, "ip link set {ndev} up: {up}");
        saw_err?;
        ev.wait_for(Event::PortActive(1), 20_000)?;
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
