// SPDX-License-Identifier: GPL-2.0

//! Connection manager ids: IPv6 addresses and the per-id options.

use super::*;
use kernel::{
    new_mutex,
    rdma::{
        cm::{CmId, Event as CmEvent, Handler, Id, PortSpace, SockAddr, SockAddrV4, SockAddrV6},
        device::Gid,
    },
    sync::Mutex,
};

/// `fd77::1`, the harness's IPv6 address on rxe0's netdev.
fn fd77_1() -> SockAddrV6 {
    let mut ip = [0u8; 16];
    ip[..2].copy_from_slice(&[0xfd, 0x77]);
    ip[15] = 1;
    SockAddrV6 {
        ip,
        port: 0,
        scope_id: 0,
    }
}

/// An id binds an IPv6 address of an RDMA device's netdev and finds the device; the options
/// of an RC id are taken, those that only RC has are refused on a UD id.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_cm_options() -> c_int {
    ret((|| {
        let _dev = rxe0()?;
        let id = CmId::new(PortSpace::Tcp, Quiet)?;
        id.set_reuseaddr(true)?;
        id.set_tos(0x20);
        id.bind(fd77_1())?;
        let local = id.local_addr();
        check!(
            matches!(local, Some(SockAddr::V6(a)) if a.ip == fd77_1().ip && a.port != 0),
            "bound to {:?}",
            local
        );
        let dev = id.device().ok_or(ENODEV)?;
        check!(
            dev.name().as_bytes() == b"rxe0",
            "the id found {}",
            dev.name()
        );
        id.set_ack_timeout(20)?;
        id.set_min_rnr_timer(12)?;
        check!(id.set_ack_timeout(32) == Err(EINVAL), "ack timeout 32");
        let ud = CmId::new(PortSpace::Udp, Quiet)?;
        check!(ud.set_ack_timeout(14) == Err(EINVAL), "ack timeout on UD");
        check!(ud.set_min_rnr_timer(12) == Err(EINVAL), "RNR timer on UD");
        drop((id, ud, dev));
        leak_check()
    })())
}

/// What a join reported: the group's GID, LID and Q_Key, and an AH to send to it.
type Group = (Gid, u16, u32, Arc<Ah>);

#[pin_data]
struct Joined {
    #[pin]
    got: Mutex<Option<Result<Group>>>,
    #[pin]
    sig: Signal,
}

/// The handler of a UD id that joins a group: makes the group's AH (process context).
struct Joiner {
    pd: Arc<Pd>,
    joined: Arc<Joined>,
}

impl Handler for Joiner {
    fn event(&self, _id: &Id, event: CmEvent<'_, Self>) {
        let r = match event {
            CmEvent::MulticastJoin(g) => g
                .create_ah(&self.pd)
                .map(|ah| (g.gid(), g.lid(), g.qkey(), ah)),
            CmEvent::MulticastError(e) => Err(e),
            _ => return,
        };
        *self.joined.got.lock() = Some(r);
        self.joined.sig.complete();
    }
}

/// One UD send to a group reaches the two QPs attached to it, and none once they have
/// detached; the group is joined through the CM (which joins the IP group on the netdev).
#[no_mangle]
extern "C" fn rdma_kunit_verbs_multicast() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let pd = Pd::new(&dev)?;
        let cq = Cq::new(&dev, 128, 0, PollContext::Softirq)?;
        let joined = Arc::pin_init(
            pin_init!(Joined {
                got <- new_mutex!(None),
                sig <- Signal::new(),
            }),
            GFP_KERNEL,
        )?;
        let id = CmId::new(
            PortSpace::Udp,
            Joiner {
                pd: pd.clone(),
                joined: joined.clone(),
            },
        )?;
        id.bind(SockAddrV4 {
            ip: [10, 77, 0, 1],
            port: 0,
        })?;
        let group = SockAddrV4 {
            ip: [239, 77, 0, 1],
            port: 0,
        };
        id.join_multicast(group)?;
        if joined.sig.wait_timeout(WAIT_MS).is_err() {
            pr_err!("no multicast join event\n");
            return Err(ETIMEDOUT);
        }
        let (mgid, mlid, qkey, ah) = joined.got.lock().take().ok_or(EINVAL)??;
        pr_info!(
            "joined {} as {:?} (LID {}, Q_Key {:#x})\n",
            group,
            mgid,
            mlid,
            qkey
        );
        check!(mgid.is_multicast(), "group GID {:?}", mgid);
        let r1 = ud_qp(&pd, &cq, qkey)?;
        let r2 = ud_qp(&pd, &cq, qkey)?;
        r1.attach_mcast(&mgid, mlid)?;
        r2.attach_mcast(&mgid, mlid)?;
        check!(
            r1.attach_mcast(&mgid, mlid) == Err(EBUSY),
            "a second attach to one group"
        );
        check!(
            r1.attach_mcast(&Gid([0; 16]), 0) == Err(EINVAL),
            "attach to a unicast GID"
        );
        let (s1, s2) = (sink::<DmaBuf>()?, sink::<DmaBuf>()?);
        post_recv(&r1, &s1, GRH_LEN + 256)?;
        post_recv(&r2, &s2, GRH_LEN + 256)?;
        let sender = ud_qp(&pd, &cq, qkey)?;
        let ss = sink::<(DmaBuf, Arc<Ah>)>()?;
        let send = |seq: u32| -> Result {
            sender.post_send(twr((filled(&pd, 256, seq)?, ah.clone()), &ss)?, |t, ops| {
                ops.send_ud(&t.payload.0, 0..256, &t.payload.1, 0xff_ffff, qkey)?;
                Ok(())
            })?;
            let d = ss.wait(1)?;
            check!(
                d[0].status == WcStatus::Success,
                "send to the group: {:?}",
                d[0].status
            );
            Ok(())
        };
        send(5)?;
        for (n, s) in [(1, &s1), (2, &s2)] {
            let mut got = s.wait(1)?;
            let r = &mut got[0];
            check!(
                r.status == WcStatus::Success
                    && r.src_qp == Some(sender.qpn())
                    && matches(&r.payload.as_slice()[GRH_LEN..GRH_LEN + 256], 5),
                "member {}: {:?} from {:?}",
                n,
                r.status,
                r.src_qp
            );
        }
        // Detached, they get nothing: their receives stay posted until the QPs go.
        r1.detach_mcast(&mgid, mlid)?;
        r2.detach_mcast(&mgid, mlid)?;
        check!(
            r1.detach_mcast(&mgid, mlid) == Err(EINVAL),
            "a second detach"
        );
        post_recv(&r1, &s1, GRH_LEN + 256)?;
        post_recv(&r2, &s2, GRH_LEN + 256)?;
        send(6)?;
        msleep(500);
        check!(
            s1.list.lock().is_empty() && s2.list.lock().is_empty(),
            "a detached QP got the group's datagram"
        );
        id.leave_multicast(group)?;
        // One QP left attached is detached when it goes.
        r1.attach_mcast(&mgid, mlid)?;
        drop((r1, r2, sender, ah, id));
        // The receives posted above come back flushed.
        s1.wait(1)?;
        s2.wait(1)?;
        leak_check()
    })())
}

/// What an rdma_cm handler found when it tried to drain a QP.
#[pin_data]
struct InHandler {
    #[pin]
    pair: Mutex<Option<RcPair>>,
    #[pin]
    drained: Mutex<Option<Result>>,
    #[pin]
    sig: Signal,
}

/// The handler of an id resolving an address: on `AddrResolved` it drains a QP, then drops
/// the pair (under the id's handler lock).
struct Drainer(Arc<InHandler>);

impl Handler for Drainer {
    fn event(&self, _id: &Id, event: CmEvent<'_, Self>) {
        if !matches!(event, CmEvent::AddrResolved) {
            return;
        }
        let pair = self.0.pair.lock().take();
        let r = pair.as_ref().map_or(Err(EINVAL), |p| p.a.drain());
        *self.0.drained.lock() = Some(r);
        // Torn down from a work item: its drain waits for the pool CQ's work.
        drop(pair);
        self.0.sig.complete();
    }
}

/// In an rdma_cm event handler (which runs under the id's handler lock), a QP on a shared pool
/// CQ is not drained (`EAGAIN`: the wait for the CQ's work would be ordered after every id's
/// handler lock); dropped there, it is torn down from a work item, and its receive still comes
/// back flushed.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_cm_handler_no_drain() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let cq = Cq::from_pool(&dev, 128, Some(0), PollContext::Workqueue)?;
        // The pool's CQs (one per vector, made by the first share) stay with the device.
        let base = res_count()?;
        let pair = rc_pair_on(
            &Pd::new(&dev)?,
            &cq,
            &QpCaps::default(),
            &RcParams::default(),
        )?;
        let s = sink::<DmaBuf>()?;
        post_recv(&pair.b, &s, 64)?;
        let state = Arc::pin_init(
            pin_init!(InHandler {
                pair <- new_mutex!(Some(pair)),
                drained <- new_mutex!(None),
                sig <- Signal::new(),
            }),
            GFP_KERNEL,
        )?;
        let id = CmId::new(PortSpace::Tcp, Drainer(state.clone()))?;
        id.resolve_addr(
            None,
            SockAddrV4 {
                ip: [10, 77, 0, 1],
                port: 0,
            },
            2000,
        )?;
        if state.sig.wait_timeout(WAIT_MS).is_err() {
            pr_err!("no address resolution event\n");
            return Err(ETIMEDOUT);
        }
        let drained = state.drained.lock().take();
        check!(
            drained == Some(Err(EAGAIN)),
            "a drain in an rdma_cm handler: {:?}",
            drained
        );
        let back = s.wait(1)?;
        check!(
            back[0].status == WcStatus::WrFlushErr,
            "the receive of the QP dropped in the handler: {:?}",
            back[0].status
        );
        drop((id, cq, back));
        settle(c_str!("rxe0"), base, 10_000)?;
        leak_check()
    })())
}
