// SPDX-License-Identifier: GPL-2.0

//! iWARP (soft-iWARP, `siw0` on the harness's veth2): what the crate refuses on a device of that
//! transport, with `EOPNOTSUPP` and before the driver is called (a QP made by hand, since only
//! the connection manager connects an iWARP QP; a UD QP; a multicast join; atomics; immediate
//! data), and what works there on a pair the connection manager connected: SEND, RDMA WRITE,
//! RDMA READ and READ with invalidate; a QP on an SRQ, SEND with invalidate and the core's R/W
//! API. A case returns `ENODEV` without `siw0`, a visible skip that `make test` counts as a
//! failure.

mod completion;

use super::*;
use kernel::{
    new_mutex,
    rdma::cm::{CmId, ConnParam, Event as CmEvent, Handler, Id, PortSpace, SockAddrV4},
    sync::Mutex,
};

fn siw0() -> Result<ARef<Device>> {
    Device::get_by_name(c_str!("siw0")).ok_or(ENODEV)
}

/// 10.77.2.1, the harness's address on siw0's netdev.
const SIW0_ADDR: SockAddrV4 = SockAddrV4 {
    ip: [10, 77, 2, 1],
    port: 0,
};

/// siw0 says it is an iWARP RNIC without atomics; rxe0 says neither.
#[no_mangle]
extern "C" fn rdma_kunit_iwarp_transport() -> c_int {
    ret((|| {
        let siw = siw0()?;
        check!(siw.is_rnic(), "siw0 is not an RNIC");
        check!(siw.is_iwarp(1), "siw0's port 1 is not iWARP");
        check!(!siw.attrs().has_atomics(), "siw0 has atomics");
        let rxe = rxe0()?;
        check!(!rxe.is_rnic() && !rxe.is_iwarp(1), "rxe0 says it is iWARP");
        Ok(())
    })())
}

/// On siw0: a QP made by hand (RC or UD), a UD id's QP and a multicast join are refused with
/// `EOPNOTSUPP`; the same RC QP by hand is made on rxe0.
#[no_mangle]
extern "C" fn rdma_kunit_iwarp_refusals() -> c_int {
    ret((|| {
        let dev = siw0()?;
        let pd = Pd::new(&dev)?;
        let cq = Cq::new(&dev, 64, 0, PollContext::Direct)?;
        let caps = QpCaps::default();
        let rc = Qp::new(&pd, QpType::Rc, &cq, &cq, &caps);
        check!(rc.err() == Some(EOPNOTSUPP), "an RC QP by hand on siw0");
        let ud = Qp::new(&pd, QpType::Ud, &cq, &cq, &caps);
        check!(ud.err() == Some(EOPNOTSUPP), "a UD QP by hand on siw0");
        let srq = Srq::new(&pd, &cq, 8, 1)?;
        let on_srq = Qp::new_with_srq(&pd, QpType::Rc, &cq, &srq, &caps);
        check!(
            on_srq.err() == Some(EOPNOTSUPP),
            "an RC QP on an SRQ by hand on siw0"
        );

        // The connection manager binds a UD id to siw0 (the address is IP), but it gets no
        // QP and joins no group.
        let id = CmId::new(PortSpace::Udp, Quiet)?;
        id.bind(SIW0_ADDR)?;
        check!(
            id.device().is_some_and(|d| d.is_rnic()),
            "the UD id is not on siw0"
        );
        let qp = id.create_qp(&pd, &cq, &cq, &caps);
        check!(qp.err() == Some(EOPNOTSUPP), "a UD id's QP on siw0");
        let group = SockAddrV4 {
            ip: [239, 77, 2, 1],
            port: 0,
        };
        check!(
            id.join_multicast(group) == Err(EOPNOTSUPP),
            "a multicast join on siw0"
        );

        // The refusal is the transport's: rxe0 makes the same QP.
        let rxe = rxe0()?;
        let rpd = Pd::new(&rxe)?;
        let rcq = Cq::new(&rxe, 64, 0, PollContext::Direct)?;
        Qp::new(&rpd, QpType::Rc, &rcq, &rcq, &caps)?;
        Ok(())
    })())
}

/// What the ids of [`CmPair`] saw, for the case's thread.
#[derive(Default)]
struct Seen {
    addr: bool,
    route: bool,
    established: u32,
    failed: Option<Error>,
    /// What the server side's QP is made of.
    res: Option<Res>,
    /// The id the listener took, with its QP, until the case takes them.
    child: Option<(CmId<Ev>, Qp<Init>)>,
    /// The same, when the server's QP was shared before the accept ([`Res::early`]).
    managed: Option<Managed>,
}

/// A server's id with its QP shared before the accept, and how the driver answered the send
/// tried then.
type Managed = (CmId<Ev>, Arc<Qp<Cm>>, Option<Error>);

/// The PD, CQ and capabilities of a [`CmPair`]'s QPs, and the SRQ its server side's QP takes
/// its receives from, if any.
#[derive(Clone)]
struct Res {
    pd: Arc<Pd>,
    cq: Arc<Cq>,
    caps: QpCaps,
    srq: Option<Arc<Srq>>,
    /// Where the receive the server posts on its QP before the accept reports: set, the
    /// server shares the QP ([`Qp::managed`]), posts the receive, tries a send and accepts.
    early: Option<Arc<Sink<DmaBuf>>>,
}

impl Res {
    fn qp(&self, id: &CmId<Ev>, srq: Option<&Arc<Srq>>) -> Result<Qp<Init>> {
        match srq {
            Some(srq) => id.create_qp_with_srq(&self.pd, &self.cq, srq, &self.caps),
            None => id.create_qp(&self.pd, &self.cq, &self.cq, &self.caps),
        }
    }
}

#[pin_data]
struct Shared {
    #[pin]
    seen: Mutex<Seen>,
}

/// The handler of every id of a [`CmPair`]: it records, and on a request takes the id, makes
/// its QP and accepts.
struct Ev(Arc<Shared>);

impl Ev {
    fn accept(&self, req: kernel::rdma::cm::Request<'_, Self>) -> Result {
        let res = self.0.seen.lock().res.clone().ok_or(EINVAL)?;
        let child = req.take(Ev(self.0.clone()))?;
        let qp = res.qp(&child, res.srq.as_ref())?;
        let Some(early) = &res.early else {
            child.accept(&pair_param())?;
            self.0.seen.lock().child = Some((child, qp));
            return Ok(());
        };
        let qp = Arc::new(qp.managed()?, GFP_KERNEL)?;
        post_recv(&*qp, early, 64)?;
        let sent = qp.post_send(twr(filled(&res.pd, 64, 0)?, early)?, |t, ops| {
            ops.send(&t.payload, 0..64)?;
            Ok(())
        });
        let refused = sent.err().map(|e| e.err);
        // On failure, the receive (which holds nothing of the QP) is flushed with the QP.
        child.accept(&pair_param())?;
        self.0.seen.lock().managed = Some((child, qp, refused));
        Ok(())
    }
}

impl Handler for Ev {
    fn event(&self, _id: &Id, event: CmEvent<'_, Self>) {
        let failed = match event {
            CmEvent::AddrResolved => {
                self.0.seen.lock().addr = true;
                None
            }
            CmEvent::RouteResolved => {
                self.0.seen.lock().route = true;
                None
            }
            CmEvent::ConnectRequest(req) => self.accept(req).err(),
            CmEvent::Established { .. } => {
                self.0.seen.lock().established += 1;
                None
            }
            CmEvent::AddrError(e)
            | CmEvent::RouteError(e)
            | CmEvent::ConnectError(e)
            | CmEvent::Unreachable(e) => Some(e),
            CmEvent::Rejected { .. } => Some(ECONNREFUSED),
            _ => None,
        };
        if let Some(e) = failed {
            pr_err!("iwarp pair: connection manager: {e:?}\n");
            self.0.seen.lock().failed.get_or_insert(e);
        }
    }
}

/// What both sides of a [`CmPair`] ask of the connection: four RDMA READs in flight.
fn pair_param() -> ConnParam<'static> {
    ConnParam {
        responder_resources: 4,
        initiator_depth: 4,
        ..ConnParam::default()
    }
}

/// Waits up to `ms` for `done` to hold of what the ids saw.
fn wait_seen(sh: &Shared, ms: u32, what: &str, done: impl Fn(&Seen) -> bool) -> Result {
    for _ in 0..ms / 10 {
        {
            let seen = sh.seen.lock();
            if let Some(e) = seen.failed {
                return Err(e);
            }
            if done(&seen) {
                return Ok(());
            }
        }
        msleep(10);
    }
    pr_err!("iwarp pair: no {what} within {ms} ms\n");
    Err(ETIMEDOUT)
}

/// An RC pair the connection manager connected on siw0 (client `a` to server `b`, both at
/// [`SIW0_ADDR`], iw_cm over TCP underneath). The QPs go first: each holds its id.
struct CmPair {
    a: Qp<Rts>,
    b: Qp<Rts>,
    _child: CmId<Ev>,
    _client: CmId<Ev>,
    pd: Arc<Pd>,
}

fn cm_pair(dev: &Device, port: u16) -> Result<CmPair> {
    cm_pair_of(
        Res {
            pd: Pd::new(dev)?,
            cq: Cq::new(dev, 128, 0, PollContext::Softirq)?,
            caps: QpCaps::default(),
            srq: None,
            early: None,
        },
        port,
    )
}

/// A connection the CM made on siw0 from `res`'s QPs: the client's side, ready to send, and
/// the server's id with its QP as the listener's handler made it.
struct Connected {
    a: Qp<Rts>,
    client: CmId<Ev>,
    child: Option<(CmId<Ev>, Qp<Init>)>,
    managed: Option<Managed>,
}

fn connect(res: Res, port: u16) -> Result<Connected> {
    let sh = Arc::pin_init(
        pin_init!(Shared {
            seen <- new_mutex!(Seen::default(), "rdma_kunit_iwarp_seen"),
        }),
        GFP_KERNEL,
    )?;
    sh.seen.lock().res = Some(res.clone());
    let at = SockAddrV4 {
        ip: SIW0_ADDR.ip,
        port,
    };
    let listener = CmId::new(PortSpace::Tcp, Ev(sh.clone()))?;
    listener.bind(at)?;
    listener.listen(4)?;
    let client = CmId::new(PortSpace::Tcp, Ev(sh.clone()))?;
    client.resolve_addr(None, at, 2000)?;
    wait_seen(&sh, 3000, "address", |s| s.addr)?;
    client.resolve_route(2000)?;
    wait_seen(&sh, 3000, "route", |s| s.route)?;
    check!(
        client.device().is_some_and(|d| d.is_rnic()),
        "the client's id is not on siw0"
    );
    let qp = res.qp(&client, None)?;
    client.connect(&pair_param())?;
    let up = wait_seen(&sh, 10_000, "connection", |s| s.established >= 2);
    // No request is taken after this: destroying the listener waits for its handler, which
    // may be storing the server's id. That id is then out of `sh` in any case (it holds `sh`
    // through its handler).
    drop(listener);
    let (child, managed) = {
        let mut seen = sh.seen.lock();
        seen.res = None;
        (seen.child.take(), seen.managed.take())
    };
    up?;
    Ok(Connected {
        a: qp.established()?,
        client,
        child,
        managed,
    })
}

/// A [`CmPair`] of `res`'s QPs (the server's on `res.srq`, if set).
fn cm_pair_of(res: Res, port: u16) -> Result<CmPair> {
    let pd = res.pd.clone();
    let c = connect(res, port)?;
    let (child, b) = c.child.ok_or(EINVAL)?;
    Ok(CmPair {
        a: c.a,
        b: b.established()?,
        _child: child,
        _client: c.client,
        pd,
    })
}

/// On a pair rdma_cm connected on siw0: SEND, RDMA WRITE, RDMA READ (into plain memory, which
/// siw allows, and with invalidate into a registered MR) move the data; an atomic and immediate
/// data are refused at post with `EOPNOTSUPP`, nothing posted.
#[no_mangle]
extern "C" fn rdma_kunit_iwarp_cm_pair() -> c_int {
    ret((|| {
        let dev = siw0()?;
        let p = cm_pair(&dev, 7231)?;
        let pd = &p.pd;

        let s = sink::<DmaBuf>()?;
        post_recv(&p.b, &s, 64)?;
        post_one(
            &p.a,
            filled(pd, 64, 1)?,
            WcStatus::Success,
            WcOpcode::Send,
            |b, ops| {
                ops.send(b, 0..64)?;
                Ok(())
            },
        )?;
        let mut got = s.wait(1)?;
        let d = got.first_mut().ok_or(EINVAL)?;
        check!(
            d.status == WcStatus::Success && d.byte_len == 64 && matches(d.payload.as_slice(), 1),
            "SEND over siw0: {:?}, {} bytes",
            d.status,
            d.byte_len
        );

        // The target of the WRITE and the source of the READs: an MR of b's, registered for
        // both.
        let mr = registered_mr(&p.b, 4096, 2, Access::REMOTE_WRITE | Access::REMOTE_READ)?;
        let remote = mr.remote()?;
        post_one(
            &p.a,
            filled(pd, 4096, 3)?,
            WcStatus::Success,
            WcOpcode::RdmaWrite,
            |b, ops| {
                ops.write(b, 0..4096, remote)?;
                Ok(())
            },
        )?;
        check!(
            matches(&mr_bytes(&mr)?, 3),
            "RDMA WRITE over siw0: data differs"
        );
        let mut d = post_one(
            &p.a,
            DmaBuf::new(pd, 4096, GFP_KERNEL)?,
            WcStatus::Success,
            WcOpcode::RdmaRead,
            |b, ops| {
                ops.read(b, 0..4096, remote)?;
                Ok(())
            },
        )?;
        check!(
            matches(d.payload.as_slice(), 3),
            "RDMA READ over siw0: data differs"
        );

        // READ with invalidate: the sink is a registered MR (remote write access, as iWARP
        // wants of a READ's sink), invalidated by the READ's completion.
        let sink_mr = registered_mr(&p.a, 4096, 0, Access::REMOTE_WRITE)?;
        let d = post_one(
            &p.a,
            sink_mr,
            WcStatus::Success,
            WcOpcode::RdmaRead,
            |m, ops| {
                ops.read_inv(m, remote)?;
                Ok(())
            },
        )?;
        check!(
            matches(&mr_bytes(&d.payload)?, 3),
            "READ with invalidate over siw0: data differs"
        );

        // No atomics, no immediate data: refused before the driver sees them.
        let a = &p.a;
        refused(a, DmaBuf::new(pd, 8, GFP_KERNEL)?, "fetch_add", |b, ops| {
            ops.fetch_add(b, 0, remote, 1)?;
            Ok(())
        })?;
        refused(
            a,
            DmaBuf::new(pd, 8, GFP_KERNEL)?,
            "compare_swap",
            |b, ops| {
                ops.compare_swap(b, 0, remote, 0, 1)?;
                Ok(())
            },
        )?;
        refused(
            a,
            filled(pd, 64, 5)?,
            "an RDMA WRITE with immediate data",
            |b, ops| {
                ops.write_imm(b, 0..64, remote, 7)?;
                Ok(())
            },
        )?;
        refused(
            a,
            filled(pd, 64, 4)?,
            "a SEND with immediate data",
            |b, ops| {
                ops.send_imm(b, 0..64, 7)?;
                Ok(())
            },
        )?;
        drop(mr);
        drop(p);
        leak_check()
    })())
}

/// Posts a send request owning `payload`, built by `build`: `what` must be refused with
/// `EOPNOTSUPP`, before the driver sees it (the request comes back, never completes).
fn refused<S: CanSend>(
    qp: &Qp<S>,
    payload: DmaBuf,
    what: &str,
    build: impl for<'a> FnOnce(&'a mut DmaBuf, &mut SendOps<'a>) -> Result,
) -> Result {
    let s = sink::<DmaBuf>()?;
    let r = qp.post_send(twr(payload, &s)?, |t, ops| build(&mut t.payload, ops));
    check!(
        r.as_ref().err().map(|e| e.err) == Some(EOPNOTSUPP),
        "{what} on siw0 was not refused"
    );
    Ok(())
}

/// What storage ULPs need, on a pair rdma_cm connected on siw0: the server's QP takes its
/// receives from an SRQ (through [`CmId::create_qp_with_srq`], the only way to an SRQ on
/// iWARP); a SEND with invalidate revokes the server's MR (the receive completion names the
/// rkey); and the core's R/W API moves 16 pages each way, its READ on the MR path (iWARP
/// wants a READ's sink registered for remote write) and its WRITE on the SGE path unless the
/// guest forces MRs.
#[no_mangle]
extern "C" fn rdma_kunit_iwarp_cm_srq_rw() -> c_int {
    ret((|| {
        let dev = siw0()?;
        let pd = Pd::new(&dev)?;
        let cq = Cq::new(&dev, 256, 0, PollContext::Softirq)?;
        let srq = Srq::new(&pd, &cq, 8, 1)?;
        let res = Res {
            pd: pd.clone(),
            cq,
            // siw takes fewer scatter entries per request than rxe.
            caps: QpCaps {
                send_sge: dev.attrs().max_send_sge().min(16),
                ..super::storage::rw_caps()
            },
            srq: Some(srq.clone()),
            early: None,
        };
        let p = cm_pair_of(res, 7232)?;
        check!(
            p.b.srq().is_some() && p.b.pd().device().is_rnic(),
            "the server's QP is not on siw0's SRQ"
        );

        // Two SENDs land in the SRQ's buffers.
        let rs = sink::<DmaBuf>()?;
        for _ in 0..3 {
            srq.post_recv(twr(DmaBuf::new(&pd, 256, GFP_KERNEL)?, &rs)?, |t, ops| {
                ops.buf(&mut t.payload, 0..256)?;
                Ok(())
            })?;
        }
        for seq in [11, 12] {
            post_one(
                &p.a,
                filled(&pd, 256, seq)?,
                WcStatus::Success,
                WcOpcode::Send,
                |b, ops| {
                    ops.send(b, 0..256)?;
                    Ok(())
                },
            )?;
        }
        for (d, seq) in rs.wait(2)?.iter_mut().zip([11, 12]) {
            check!(
                d.status == WcStatus::Success
                    && d.byte_len == 256
                    && d.qp_num == p.b.qpn()
                    && matches(d.payload.as_slice(), seq),
                "SEND {seq} into the SRQ over siw0: {:?}, {} bytes, QP {}",
                d.status,
                d.byte_len,
                d.qp_num
            );
        }

        // A SEND with invalidate: the third receive names the server MR's rkey, revoked.
        let mr = registered_mr(&p.b, 4096, 0, Access::REMOTE_WRITE)?;
        let remote = mr.remote()?;
        post_one(
            &p.a,
            filled(&pd, 64, 13)?,
            WcStatus::Success,
            WcOpcode::Send,
            |b, ops| {
                ops.send_inv(b, 0..64, remote.rkey)?;
                Ok(())
            },
        )?;
        let got = rs.wait(1)?;
        let d = got.first().ok_or(EINVAL)?;
        check!(
            d.status == WcStatus::Success && d.wc.invalidated_rkey() == Some(remote.rkey),
            "SEND with invalidate over siw0: {:?}, rkey {:?}, expected {:#x}",
            d.status,
            d.wc.invalidated_rkey(),
            remote.rkey
        );
        check!(
            mr.invalidated_by(&d.wc),
            "the SEND with invalidate did not revoke the MR"
        );
        drop(mr);

        // The core's R/W API: READ on the MR path, WRITE as the guest asks.
        let forced = super::storage::force_mr()?;
        let CmPair {
            a,
            b,
            _child,
            _client,
            pd,
        } = p;
        let a = Arc::new(a, GFP_KERNEL)?;
        super::storage::read_then_write(
            &a,
            &b,
            &pd,
            (16, 16 * PAGE_SIZE - 123),
            21,
            |op, wqes, mr| {
                let want = op == "READ" || forced;
                check!(
                    mr == want,
                    "{op} over siw0: the core took the {} path",
                    if mr { "MR" } else { "SGE" }
                );
                pr_info!("iwarp rdma_rw: {op} in {wqes} send queue entries\n");
                Ok(())
            },
        )?;
        drop((b, a, _child, _client));
        drop(srq);
        leak_check()
    })())
}

/// Posts 64 bytes of `b` as a SEND.
fn send64<'a>(b: &'a mut DmaBuf, ops: &mut SendOps<'a>) -> Result {
    ops.send(b, 0..64)?;
    Ok(())
}

/// A server's QP shared before the accept ([`Qp::managed`]) on siw0: the send it tries then is
/// refused by the driver (`ENOTCONN`: not connected yet); the receive it posted then takes the
/// client's SEND, sent as soon as the connection is up (iWARP has no receiver-not-ready
/// retry); after the accept the shared QP sends. A QP made by hand is not the CM's to manage
/// (`EINVAL`, on rxe0).
#[no_mangle]
extern "C" fn rdma_kunit_iwarp_cm_managed() -> c_int {
    ret((|| {
        let rxe = rxe0()?;
        let rpd = Pd::new(&rxe)?;
        let rcq = Cq::new(&rxe, 64, 0, PollContext::Direct)?;
        let hand = Qp::new(&rpd, QpType::Rc, &rcq, &rcq, &QpCaps::default())?
            .to_init(1, Access::REMOTE_WRITE)?;
        check!(
            hand.managed().err() == Some(EINVAL),
            "a QP made by hand was handed to the connection manager"
        );

        let dev = siw0()?;
        let pd = Pd::new(&dev)?;
        let early = sink::<DmaBuf>()?;
        let res = Res {
            pd: pd.clone(),
            cq: Cq::new(&dev, 128, 0, PollContext::Softirq)?,
            caps: QpCaps::default(),
            srq: None,
            early: Some(early.clone()),
        };
        let Connected {
            a,
            client,
            child: _,
            managed,
        } = connect(res, 7233)?;
        let (child, b, refused) = managed.ok_or(EINVAL)?;
        let not_connected = -(kernel::uapi::ENOTCONN as i32);
        check!(
            refused.map(|e| e.to_errno()) == Some(not_connected),
            "a send before the accept on siw0: {:?}, expected ENOTCONN",
            refused
        );
        post_one(
            &a,
            filled(&pd, 64, 31)?,
            WcStatus::Success,
            WcOpcode::Send,
            send64,
        )?;
        let mut got = early.wait(1)?;
        let d = got.first_mut().ok_or(EINVAL)?;
        check!(
            d.status == WcStatus::Success && d.byte_len == 64 && matches(d.payload.as_slice(), 31),
            "the receive posted before the accept: {:?}, {} bytes",
            d.status,
            d.byte_len
        );
        let answers = sink::<DmaBuf>()?;
        post_recv(&a, &answers, 64)?;
        post_one(
            &*b,
            filled(&pd, 64, 32)?,
            WcStatus::Success,
            WcOpcode::Send,
            send64,
        )?;
        let mut got = answers.wait(1)?;
        let d = got.first_mut().ok_or(EINVAL)?;
        check!(
            d.status == WcStatus::Success && matches(d.payload.as_slice(), 32),
            "the shared QP's answer: {:?}",
            d.status
        );
        // The QPs before their ids.
        drop((b, a, child, client));
        leak_check()
    })())
}
