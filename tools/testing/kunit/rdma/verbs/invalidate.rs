// SPDX-License-Identifier: GPL-2.0

//! When a registration ends: an MR (or a [`LentMr`]) counts as free only once an invalidation
//! of it has run on the device, never on the strength of a post or of a completion seen
//! before the registration it would revoke.
//!
//! A QP pair on one device: `b` registers an MR, `a` is the peer that writes it and
//! invalidates it remotely.

use super::*;
use kernel::rdma::mr::LentMr;

/// Posts a LOCAL_INV of `mr` on `qp`, checks that it completed with `status`, and returns
/// the MR.
fn invalidate<R: Region + Send + 'static>(qp: &Qp<Rts>, mr: R, status: WcStatus) -> Result<R> {
    let d = post_one(qp, mr, status, WcOpcode::LocalInv, |mr, ops| {
        ops.local_inv(mr)?;
        Ok(())
    })?;
    Ok(d.payload)
}

/// A LOCAL_INV that never ran (flushed: its QP was in the error state) leaves the
/// registration live, and the MR says so: it stays registered, keeps its buffer from the CPU
/// and a [`LentMr`] keeps its owner, while the peer can still write through the old rkey.
#[no_mangle]
extern "C" fn rdma_kunit_mr_inv_flushed() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let p = rc_pair(&dev)?;
        // The MR and its peer's access go through `p`; the LOCAL_INV through `q`, a pair on
        // the same PD whose QP is stopped first, so that it is flushed.
        let q = rc_pair_on(&p.pd, &p.cq, &QpCaps::default(), &RcParams::default())?;
        let mr = registered_mr(&p.b, 4096, 0, Access::REMOTE_WRITE)?;
        let remote = mr.remote()?;
        q.b.set_error()?;
        let mut mr = invalidate(&q.b, mr, WcStatus::WrFlushErr)?;
        // The registration is live: the peer's WRITE through the old rkey lands.
        post_one(
            &p.a,
            filled(&p.pd, 64, 3)?,
            WcStatus::Success,
            WcOpcode::RdmaWrite,
            |buf, ops| {
                ops.write(buf, 0..64, remote)?;
                Ok(())
            },
        )?;
        check!(
            matches(&mr_bytes(&mr)?[..64], 3),
            "the peer's WRITE did not land"
        );
        check!(
            mr.is_registered(),
            "a flushed LOCAL_INV counts as an invalidation: the MR says it is free"
        );
        check!(
            mr.with_buf(|_| ()).err() == Some(EBUSY),
            "the buffer of a live registration is lent to the CPU"
        );
        check!(
            mr.bump_key() == Err(EBUSY),
            "the keys of a live registration moved on"
        );
        // Invalidated for real, it is free.
        let mut mr = invalidate(&p.b, mr, WcStatus::Success)?;
        check!(
            !mr.is_registered() && mr.with_buf(|_| ()).is_ok(),
            "a completed LOCAL_INV left the MR registered"
        );
        drop(mr);

        // The same with pages lent: the owner is not given back while the peer can write.
        let mut lent = LentMr::<Owned>::new(&p.pd, 1)?;
        lent.lend(owned(1, true)?, Access::REMOTE_WRITE)
            .map_err(|(e, _)| e)?;
        let lent = register(&p.b, lent, Access::REMOTE_WRITE)?;
        let mut lent = invalidate(&q.b, lent, WcStatus::WrFlushErr)?;
        let back = lent.take_back();
        check!(
            back.as_ref().err() == Some(&EBUSY),
            "the pages' owner came back while a registration of them is live"
        );
        drop((back, lent, q, p));
        leak_check()
    })())
}

/// A remote invalidation takes only the registration it was seen for: a receive completion
/// kept across later registrations (the storage initiator's way, [`Wc::invalidation`]) does
/// not revoke a later one, even once the 8-bit key has come round to the same rkey; and a
/// registration never reuses the rkey of the one before it. Both are checked, each failure
/// reported.
#[no_mangle]
extern "C" fn rdma_kunit_mr_inv_stale_wc() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let p = rc_pair(&dev)?;
        let mut failed = false;
        let mr = registered_mr(&p.b, 4096, 0, Access::REMOTE_WRITE)?;
        let first = mr.remote()?;
        // The peer revokes it with a SEND with invalidate; the completion is kept.
        let kept = write_then_invalidate(&p, first, 0, 1)?;
        check!(mr.invalidated_by(&kept), "the invalidation did not take");
        // Under the next key, then invalidated locally, then round the 8-bit key to the
        // first rkey again.
        let mut mr = mr;
        mr.bump_key()?;
        let mr = register(&p.b, mr, Access::REMOTE_WRITE)?;
        let mut mr = invalidate(&p.b, mr, WcStatus::Success)?;
        for _ in 0..255 {
            mr.bump_key()?;
        }
        check!(mr.rkey() == first.rkey, "the key did not come round");
        let mr = register(&p.b, mr, Access::REMOTE_WRITE)?;
        // The kept completion is older than this registration: it revokes nothing.
        if mr.invalidated_by(&kept) || !mr.is_registered() {
            pr_err!("check failed: a completion seen before the registration revoked it\n");
            failed = true;
        }
        // Invalidated, then registered again under the same rkey: refused.
        let mr = invalidate(&p.b, mr, WcStatus::Success)?;
        let s = sink::<Mr>()?;
        let e = p.b.post_send(twr(mr, &s)?, |m, ops| {
            ops.reg_mr(&m.payload, Access::REMOTE_WRITE)?;
            Ok(())
        });
        match e {
            Err(e) if e.err == EINVAL => drop(e),
            Err(e) => return Err(e.err),
            Ok(()) => {
                let d = s.wait(1)?.into_iter().next().ok_or(EINVAL)?;
                pr_err!(
                    "check failed: a registration reused the rkey {:#x} of the one before ({:?})\n",
                    first.rkey,
                    d.status
                );
                failed = true;
            }
        }
        drop(p);
        check!(!failed, "see above");
        leak_check()
    })())
}
