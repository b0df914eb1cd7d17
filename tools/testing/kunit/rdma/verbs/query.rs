// SPDX-License-Identifier: GPL-2.0

//! Queries: what the device reports of itself, its tables and a QP.

use super::*;
use kernel::rdma::device::{AtomicCap, GidType};

/// Device attributes a ULP sizes itself by, P_Key and GID lookups, and a QP's whole
/// attribute set against what it was connected with.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_query() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let a = dev.attrs();
        pr_info!("rxe0: {:?}\n", a);
        check!(
            a.max_qp() > 0 && a.max_cq() > 0 && a.max_pd() > 0 && a.max_ah() > 0,
            "object limits {:?}",
            a
        );
        check!(
            a.max_sge_rd() > 0 && a.max_srq() > 0,
            "READ SGEs or SRQs: {:?}",
            a
        );
        check!(
            a.page_size_cap() & 4096 != 0,
            "4 KiB pages not in {:#x}",
            a.page_size_cap()
        );
        check!(
            a.atomic_cap() != AtomicCap::None && a.has_atomics(),
            "soft-RoCE has atomics"
        );
        check!(a.max_pkeys() > 0, "P_Key table of {}", a.max_pkeys());
        // The default P_Key sits at index 0 of a RoCE port.
        check!(dev.find_pkey(1, 0xffff) == Ok(0), "default P_Key");
        check!(
            dev.find_pkey(1, 0x1234).is_err(),
            "a P_Key the table does not hold"
        );
        check!(dev.find_pkey(99, 0xffff) == Err(EINVAL), "port 99");
        // The GID the crate sources traffic from is found where it is.
        let g = dev.preferred_gid(1)?;
        let kind = if g.roce_v2 {
            GidType::RoceV2
        } else {
            GidType::Ib
        };
        let (port, e) = dev.find_gid(&g.gid, kind)?;
        check!(
            port == 1 && e.index == g.index && e.gid == g.gid,
            "found {:?} on port {}, expected {:?}",
            e,
            port,
            g
        );
        let mut other = g.gid;
        other.0[0] ^= 0x80;
        check!(dev.find_gid(&other, kind).is_err(), "a GID nobody has");
        // A connected QP reports what it was connected with.
        let p = rc_pair(&dev)?;
        let q = p.a.query()?;
        let rc = RcParams::default();
        check!(
            q.state == QpState::Rts && q.dest_qpn == p.b.qpn() && q.port == 1,
            "{:?}",
            q
        );
        check!(
            q.sq_psn == p.a.endpoint()?.psn && q.rq_psn == p.b.endpoint()?.psn,
            "PSNs of {:?}",
            q
        );
        check!(
            q.timeout == rc.timeout
                && q.retry_cnt == rc.retry_cnt
                && q.rnr_retry == rc.rnr_retry
                && q.min_rnr_timer == rc.min_rnr_timer,
            "timers of {:?}",
            q
        );
        check!(
            q.path_mtu.is_some() && q.access.bits() & Access::REMOTE_WRITE.bits() != 0,
            "MTU or access of {:?}",
            q
        );
        check!(
            q.max_send_wr > QpCaps::default().send_depth && q.max_send_sge >= 1,
            "caps of {:?}",
            q
        );
        drop(p);
        leak_check()
    })())
}
