// SPDX-License-Identifier: GPL-2.0

//! iWARP (soft-iWARP, `siw0` on the harness's veth2): what the crate refuses on a device of that
//! transport, with `EOPNOTSUPP` and before the driver is called: a QP made by hand (only the
//! connection manager connects an iWARP QP), a UD QP, a multicast join. A case returns
//! `ENODEV` without `siw0`, a visible skip that `make test` counts as a failure.

use super::*;
use kernel::rdma::cm::{CmId, Event as CmEvent, Handler, Id, PortSpace, SockAddrV4};

fn siw0() -> Result<ARef<Device>> {
    Device::get_by_name(c_str!("siw0")).ok_or(ENODEV)
}

/// 10.77.2.1, the harness's address on siw0's netdev.
const SIW0_ADDR: SockAddrV4 = SockAddrV4 {
    ip: [10, 77, 2, 1],
    port: 0,
};

/// An id handler that expects no event.
struct Quiet;

impl Handler for Quiet {
    fn event(&self, _id: &Id, _event: CmEvent<'_, Self>) {}
}

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
