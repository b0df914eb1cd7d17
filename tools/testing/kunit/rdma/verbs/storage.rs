// SPDX-License-Identifier: GPL-2.0

//! What storage ULPs need: the core's R/W API ([`RwCtx`]), remote invalidation, and MRs over
//! pages another object owns ([`LentMr`]).
//!
//! A QP pair on one device plays target (`a`) and initiator (`b`): `b` exposes a
//! fast-registered MR over pages, `a` moves data from or to it with an [`RwCtx`] and checks it
//! byte for byte. The suite runs twice in `make test`: in the loopback guest, where the core
//! names the pages in scatter/gather entries, and in the first peer guest, booted with
//! `ib_core.force_mr=1`, where it registers them in MRs of the QP's pool; each case checks
//! that the path it expects was taken.

use super::*;
use kernel::{
    page::{Page, PAGE_SIZE},
    rdma::{dma::copy_from_pages, mr::LentMr, rw::RwCtx, wr::PostError},
};

/// The QP caps of the cases: room for `RW_CTXS` transfers of up to 256 pages.
const RW_CTXS: u32 = 4;

pub(super) fn rw_caps() -> QpCaps {
    QpCaps {
        send_depth: 32,
        send_sge: 16,
        rdma_ctxs: RW_CTXS,
        port: 1,
        ..QpCaps::default()
    }
}

/// A connected pair whose target `a` can carry [`RwCtx`] transfers (which need an `Arc`).
struct RwPair {
    a: Arc<Qp<Rts>>,
    b: Qp<Rts>,
    pd: Arc<Pd>,
    cq: Arc<Cq>,
}

fn rw_pair(dev: &Device) -> Result<RwPair> {
    let p = rc_pair_with(dev, &rw_caps(), PollContext::Softirq, &RcParams::default())?;
    Ok(RwPair {
        a: Arc::new(p.a, GFP_KERNEL)?,
        b: p.b,
        pd: p.pd,
        cq: p.cq,
    })
}

/// Whether this guest was booted with the core's `force_mr` knob.
pub(super) fn force_mr() -> Result<bool> {
    Ok(crate::run(kernel::fmt!("grep -qw ib_core.force_mr=1 /proc/cmdline"))? == 0)
}

/// `n` pages holding `seq`'s pattern, as one byte stream.
pub(super) fn pattern_pages(pd: &Arc<Pd>, n: usize, seq: u32) -> Result<KVec<Page>> {
    let mut sg = DmaSg::new(pd, n)?;
    let mut chunk = KVec::from_elem(0u8, PAGE_SIZE, GFP_KERNEL)?;
    for p in 0..n {
        for (i, x) in chunk.iter_mut().enumerate() {
            *x = pattern(seq, p * PAGE_SIZE + i);
        }
        sg.write(p * PAGE_SIZE, &chunk)?;
    }
    Ok(sg.into_pages())
}

/// Checks that the first `len` bytes of `mem` (read with `read`) hold `seq`'s pattern, and
/// that the rest up to `total` is zero.
fn check_pattern(
    mut read: impl FnMut(usize, &mut [u8]) -> Result,
    len: usize,
    total: usize,
    seq: u32,
) -> Result {
    let mut chunk = KVec::from_elem(0u8, PAGE_SIZE, GFP_KERNEL)?;
    let mut at = 0;
    while at < total {
        read(at, &mut chunk)?;
        for (i, &x) in chunk.iter().enumerate() {
            let want = if at + i < len {
                pattern(seq, at + i)
            } else {
                0
            };
            check!(
                x == want,
                "byte {} of {}: {:#x}, expected {:#x}",
                at + i,
                len,
                x,
                want
            );
        }
        at += PAGE_SIZE;
    }
    Ok(())
}

/// An MR of `b` over `n` pages (holding `seq`'s pattern, or zeroes), registered for READ and
/// WRITE.
fn target_mr(b: &Qp<Rts>, n: usize, seq: Option<u32>) -> Result<Mr> {
    let pd = b.pd();
    let pages = match seq {
        Some(s) => pattern_pages(pd, n, s)?,
        None => zero_pages(n)?,
    };
    let sg = DmaSg::from_pages(pd, pages).map_err(|(e, _)| e)?;
    let mut mr = Mr::new(pd, n as u32)?;
    mr.map_sg(sg).map_err(|(e, _)| e)?;
    register(b, mr, Access::REMOTE_READ | Access::REMOTE_WRITE)
}

/// Moves `len` bytes of `n` pages each way between `a` and `b` through the core's R/W API: a
/// READ of `b`'s pattern `seq` into zeroed pages, then a WRITE of pattern `seq + 1` into `b`'s
/// zeroed pages, the data checked both times. `seen(op, send queue entries, MR path)` sees
/// each transfer before it is posted.
pub(super) fn read_then_write(
    a: &Arc<Qp<Rts>>,
    b: &Qp<Rts>,
    pd: &Arc<Pd>,
    (n, len): (usize, usize),
    seq: u32,
    mut seen: impl FnMut(&str, u32, bool) -> Result,
) -> Result {
    let mr = target_mr(b, n, Some(seq))?;
    let rw = RwCtx::<FromDevice>::new(a, zero_pages(n)?, len, mr.remote()?).map_err(|(e, _)| e)?;
    seen("READ", rw.wqes(), rw.uses_mr())?;
    let d = post_one(a, rw, WcStatus::Success, WcOpcode::RdmaRead, |rw, ops| {
        ops.rw(rw)?;
        Ok(())
    })?;
    let back: DmaSg = DmaSg::from_pages(pd, d.payload.into_pages()).map_err(|(e, _)| e)?;
    check_pattern(|at, out| back.read(at, out), len, n * PAGE_SIZE, seq)?;
    let mr = target_mr(b, n, None)?;
    let rw = RwCtx::<ToDevice>::new(a, pattern_pages(pd, n, seq + 1)?, len, mr.remote()?)
        .map_err(|(e, _)| e)?;
    seen("WRITE", rw.wqes(), rw.uses_mr())?;
    post_one(a, rw, WcStatus::Success, WcOpcode::RdmaWrite, |rw, ops| {
        ops.rw(rw)?;
        Ok(())
    })?;
    check_pattern(|at, out| mr.read(at, out), len, n * PAGE_SIZE, seq + 1)
}

/// RDMA READ and WRITE of 1, 16 and 256 pages through the core's R/W API, each way, with the
/// data checked; the path (SGEs, or MRs under `force_mr`) is the one the guest asks for.
#[no_mangle]
extern "C" fn rdma_kunit_rw_read_write() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let forced = force_mr()?;
        pr_info!(
            "rdma_rw: expecting the {} path\n",
            if forced { "MR" } else { "SGE" }
        );
        for (n, len) in [
            (1usize, 1000usize),
            (16, 16 * PAGE_SIZE - 123),
            (256, 256 * PAGE_SIZE),
        ] {
            let RwPair { a, b, pd, cq: _cq } = rw_pair(&dev)?;
            read_then_write(&a, &b, &pd, (n, len), 7, |op, wqes, mr| {
                check!(
                    mr == forced,
                    "{} pages: the core took the {} path",
                    n,
                    if mr { "MR" } else { "SGE" }
                );
                pr_info!("rdma_rw: {op} of {len} bytes in {wqes} send queue entries\n");
                Ok(())
            })?;
            drop((b, a));
        }
        leak_check()
    })())
}

/// `rw_sge` sizes the core's RDMA operations: 32 pages move in one READ and one WRITE when the
/// QP allows 32 entries per operation, in two with the default (16, the QP's `send_sge`), the
/// data checked both ways; a QP that asks for `rw_sge` without `rdma_ctxs`, or above the
/// device's `max_send_sge`, is refused.
#[no_mangle]
extern "C" fn rdma_kunit_rw_sge() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let forced = force_mr()?;
        let max = dev.attrs().max_send_sge();
        let n = 32usize;
        let len = n * PAGE_SIZE;
        check!(max >= n as u32, "rxe0 allows {} send SGEs, not {}", max, n);
        for rw_sge in [0u32, n as u32] {
            let caps = QpCaps {
                rw_sge,
                ..rw_caps()
            };
            let p = rc_pair_with(&dev, &caps, PollContext::Softirq, &RcParams::default())?;
            let (a, b, pd) = (Arc::new(p.a, GFP_KERNEL)?, p.b, p.pd);
            let per_op = if rw_sge == 0 { caps.send_sge } else { rw_sge } as usize;
            read_then_write(&a, &b, &pd, (n, len), 5, |op, wqes, _| {
                // The MR path registers the pages in one MR of the pool whatever the entries.
                check!(
                    forced || wqes as usize == n.div_ceil(per_op),
                    "rw_sge {}: a {} of {} pages takes {} send queue entries",
                    rw_sge,
                    op,
                    n,
                    wqes
                );
                Ok(())
            })?;
            drop((b, a));
        }
        let pd = Pd::new(&dev)?;
        let cq = Cq::new(&dev, 64, 0, PollContext::Softirq)?;
        for (caps, what) in [
            (
                QpCaps {
                    rw_sge: 8,
                    ..QpCaps::default()
                },
                "rw_sge without rdma_ctxs",
            ),
            (
                QpCaps {
                    rw_sge: max + 1,
                    ..rw_caps()
                },
                "rw_sge above the device's max_send_sge",
            ),
        ] {
            let r = Qp::new(&pd, QpType::Rc, &cq, &cq, &caps);
            check!(
                matches!(&r, Err(e) if *e == EINVAL),
                "{}: not refused with EINVAL",
                what
            );
        }
        drop((cq, pd));
        leak_check()
    })())
}

/// A storage target's answer: RDMA WRITE of the data and the response SEND in one post; when
/// the initiator's receive completes, the data is in place.
#[no_mangle]
extern "C" fn rdma_kunit_rw_chained_response() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let RwPair { a, b, pd, cq: _cq } = rw_pair(&dev)?;
        let mr = target_mr(&b, 4, None)?;
        let rs = sink::<DmaBuf>()?;
        post_recv(&b, &rs, 64)?;
        let rw = RwCtx::<ToDevice>::new(&a, pattern_pages(&pd, 4, 3)?, 4 * PAGE_SIZE, mr.remote()?)
            .map_err(|(e, _)| e)?;
        let response = filled(&pd, 64, 4)?;
        post_one(
            &a,
            (rw, response),
            WcStatus::Success,
            WcOpcode::Send,
            |(rw, resp), ops| {
                ops.rw(rw)?;
                ops.send(resp, 0..64)?;
                Ok(())
            },
        )?;
        let mut r = rs.wait(1)?.into_iter().next().ok_or(EINVAL)?;
        check!(r.status == WcStatus::Success, "response: {:?}", r.status);
        check!(matches(&r.payload.as_slice()[..64], 4), "response corrupt");
        check_pattern(|at, out| mr.read(at, out), 4 * PAGE_SIZE, 4 * PAGE_SIZE, 3)?;
        drop((mr, b, a));
        leak_check()
    })())
}

/// What a post that must be refused with `EBUSY` came to: the request's payload when it was,
/// an error (after its completion, so that nothing is left in flight) when it was not.
fn refused_busy<P: Send + 'static>(
    r: core::result::Result<(), PostError<TWr<P>>>,
    s: &Arc<Sink<P>>,
    what: &str,
) -> Result<P> {
    match r {
        Err(e) if e.err == EBUSY => Ok(e.wr.into_inner().payload),
        Err(e) => {
            pr_err!(
                "check failed: {what}: refused with {:?}, expected EBUSY\n",
                e.err
            );
            Err(EINVAL)
        }
        Ok(()) => {
            let status = s.wait(1)?.into_iter().next().map(|d| d.status);
            pr_err!("check failed: {what}: accepted (completed with {status:?}), expected EBUSY\n");
            Err(EINVAL)
        }
    }
}

/// An [`RwCtx`] is posted once (issue 42, item 3). The core's `rdma_rw_ctx_wrs` links the
/// context's last work request in front of the next operation, or makes it the request's
/// signaled end, and clears neither: posted again, the context would carry the links of its
/// first post (the first request's completion entry on an operation in the middle, or a `next`
/// into a list that is gone), and on the MR path it registers MRs that are still registered.
/// A post refused before the driver sees it leaves the context as it was; once posted, it is
/// refused with `EBUSY` as the end of a request and in front of a SEND, and comes back with its
/// pages.
#[no_mangle]
extern "C" fn rdma_kunit_rw_posted_twice() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let RwPair { a, b, pd, cq: _cq } = rw_pair(&dev)?;
        let mr = target_mr(&b, 2, None)?;
        let rw = RwCtx::<ToDevice>::new(&a, pattern_pages(&pd, 2, 9)?, 2 * PAGE_SIZE, mr.remote()?)
            .map_err(|(e, _)| e)?;
        let s = sink::<(RwCtx<ToDevice>, DmaBuf)>()?;
        // A SEND past its buffer is refused before the driver sees anything: the transfer
        // stays postable.
        let e = a.post_send(twr((rw, filled(&pd, 64, 6)?), &s)?, |t, ops| {
            ops.rw(&mut t.payload.0)?;
            ops.send(&t.payload.1, 0..65)?;
            Ok(())
        });
        let payload = match e {
            Err(e) if e.err == EINVAL => e.wr.into_inner().payload,
            _ => {
                pr_err!("check failed: a SEND past its buffer not refused with EINVAL\n");
                return Err(EINVAL);
            }
        };
        // Its one post: the request's signaled end.
        let d = post_one(
            &a,
            payload,
            WcStatus::Success,
            WcOpcode::RdmaWrite,
            |(rw, _), ops| {
                ops.rw(rw)?;
                Ok(())
            },
        )?;
        check_pattern(|at, out| mr.read(at, out), 2 * PAGE_SIZE, 2 * PAGE_SIZE, 9)?;
        let e = a.post_send(twr(d.payload, &s)?, |t, ops| {
            ops.rw(&mut t.payload.0)?;
            Ok(())
        });
        let payload = refused_busy(e, &s, "an RwCtx posted again as the end of a request")?;
        let e = a.post_send(twr(payload, &s)?, |t, ops| {
            ops.rw(&mut t.payload.0)?;
            ops.send(&t.payload.1, 0..64)?;
            Ok(())
        });
        let (rw, _response) = refused_busy(e, &s, "an RwCtx posted again in front of a SEND")?;
        check!(rw.into_pages().len() == 2, "pages lost");
        check!(
            a.send_outstanding() == 0,
            "{} send slots held",
            a.send_outstanding()
        );
        drop((mr, b, a));
        leak_check()
    })())
}

/// Send flags apply to the operation added last, and a transfer's place in the list is no
/// work request of its own (issue 42, item 8a): `fence`, `solicited` and `unsignaled` just
/// after [`SendOps::rw`], or before any operation, are refused with `EINVAL` rather than
/// dropped; a fence on the SEND after a READ (the documented use) is taken, and the READ's data
/// and the SEND arrive.
#[no_mangle]
extern "C" fn rdma_kunit_rw_flags_after_chain() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let RwPair { a, b, pd, cq: _cq } = rw_pair(&dev)?;
        let mr = target_mr(&b, 1, Some(4))?;
        let rw = RwCtx::<FromDevice>::new(&a, zero_pages(1)?, PAGE_SIZE, mr.remote()?)
            .map_err(|(e, _)| e)?;
        let rs = sink::<DmaBuf>()?;
        post_recv(&b, &rs, 64)?;
        let mut seen: [Option<Error>; 5] = [None; 5];
        let d = post_one(
            &a,
            (rw, filled(&pd, 64, 8)?),
            WcStatus::Success,
            WcOpcode::Send,
            |(rw, resp), ops| {
                seen[0] = ops.fence().err();
                ops.rw(rw)?;
                seen[1] = ops.fence().err();
                seen[2] = ops.solicited().err();
                seen[3] = ops.unsignaled().err();
                seen[4] = ops.send(resp, 0..64)?.fence().err();
                Ok(())
            },
        )?;
        for (i, what) in [
            (1, "fence just after rw"),
            (2, "solicited just after rw"),
            (3, "unsignaled just after rw"),
            (0, "fence before any operation"),
        ] {
            check!(
                seen[i] == Some(EINVAL),
                "{}: {:?}, expected EINVAL (dropped in silence)",
                what,
                seen[i]
            );
        }
        check!(seen[4].is_none(), "fence on the SEND: {:?}", seen[4]);
        let mut r = rs.wait(1)?.into_iter().next().ok_or(EINVAL)?;
        check!(r.status == WcStatus::Success, "the SEND: {:?}", r.status);
        check!(matches(&r.payload.as_slice()[..64], 8), "the SEND corrupt");
        let back: DmaSg = DmaSg::from_pages(&pd, d.payload.0.into_pages()).map_err(|(e, _)| e)?;
        check_pattern(|at, out| back.read(at, out), PAGE_SIZE, PAGE_SIZE, 4)?;
        drop((mr, b, a));
        leak_check()
    })())
}

/// A transfer to a wrong rkey fails in its completion and the pages come back; transfers the
/// QP cannot carry are refused up front, with the pages given back; the QP's MR pool holds
/// `rdma_ctxs` transfers on the MR path.
#[no_mangle]
extern "C" fn rdma_kunit_rw_refusals() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let forced = force_mr()?;
        let RwPair { a, b, pd, cq } = rw_pair(&dev)?;
        let mr = target_mr(&b, 2, Some(1))?;
        let remote = mr.remote()?;
        // Refused before the device sees anything; the pages come back each time.
        let plain = Arc::new(rc_pair(&dev)?.a, GFP_KERNEL)?;
        let r = RwCtx::<FromDevice>::new(&plain, zero_pages(1)?, 100, remote);
        check!(
            matches!(&r, Err((e, p)) if *e == EINVAL && p.len() == 1),
            "a QP made without rdma_ctxs"
        );
        let r = RwCtx::<FromDevice>::new(&a, zero_pages(1)?, 0, remote);
        check!(matches!(&r, Err((e, _)) if *e == EINVAL), "zero bytes");
        let r = RwCtx::<FromDevice>::new(&a, zero_pages(1)?, PAGE_SIZE + 1, remote);
        check!(
            matches!(&r, Err((e, p)) if *e == EINVAL && p.len() == 1),
            "more bytes than pages"
        );
        drop(r);
        // A transfer made for `a` cannot be posted on `b`.
        let rw = RwCtx::<FromDevice>::new(&a, zero_pages(1)?, 100, remote).map_err(|(e, _)| e)?;
        let s = sink::<RwCtx<FromDevice>>()?;
        let e = b.post_send(twr(rw, &s)?, |t, ops| {
            ops.rw(&mut t.payload)?;
            Ok(())
        });
        check!(
            e.as_ref().err().map(|e| e.err) == Some(EINVAL),
            "a transfer posted on another QP"
        );
        drop(e);
        // The MR path takes one MR of the pool per transfer: `rdma_ctxs` of them at once.
        let mut held = KVec::new();
        for i in 0..=RW_CTXS {
            match RwCtx::<FromDevice>::new(&a, zero_pages(2)?, 2 * PAGE_SIZE, remote) {
                Ok(rw) => held.push(rw, GFP_KERNEL)?,
                Err((e, _)) => {
                    check!(
                        forced && i == RW_CTXS && e == EAGAIN,
                        "transfer {} refused with {:?}",
                        i,
                        e
                    );
                }
            }
        }
        check!(
            held.len() == if forced { RW_CTXS } else { RW_CTXS + 1 } as usize,
            "{} transfers prepared at once",
            held.len()
        );
        drop(held);
        // A wrong rkey: the READ fails at the target and its completion says so.
        let bad = Remote {
            addr: remote.addr,
            rkey: remote.rkey ^ 0x5a00,
        };
        let rw =
            RwCtx::<FromDevice>::new(&a, zero_pages(2)?, 2 * PAGE_SIZE, bad).map_err(|(e, _)| e)?;
        let d = post_one(
            &a,
            rw,
            WcStatus::RemAccessErr,
            WcOpcode::RdmaRead,
            |rw, ops| {
                ops.rw(rw)?;
                Ok(())
            },
        )?;
        check!(d.payload.into_pages().len() == 2, "pages lost");
        drop((mr, b, a, plain, pd, cq));
        leak_check()
    })())
}

/// The NVMe-oF pattern: the initiator registers an MR and advertises it, the target WRITEs
/// into it and answers with a SEND with invalidate of its rkey; the initiator sees the rkey
/// invalidated (kept as an `Invalidation` and applied), the MR knows it and lends its buffer
/// only from then on, and a later access with the old rkey fails; a zero-length WRITE (a
/// keep-alive) is acknowledged by a live peer. READ with
/// invalidate, which soft-RoCE takes but does not carry out, is refused on a port that is not
/// iWARP.
#[no_mangle]
extern "C" fn rdma_kunit_rw_remote_invalidate() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let p = rc_pair(&dev)?;
        let mr = registered_mr(&p.b, 4096, 0, Access::REMOTE_WRITE)?;
        let remote = mr.remote()?;
        // A registered MR cannot be registered again.
        let s = sink::<Mr>()?;
        let e = p.b.post_send(twr(mr, &s)?, |m, ops| {
            ops.reg_mr(&m.payload, Access::REMOTE_WRITE)?;
            Ok(())
        });
        let mr = match e {
            Err(e) if e.err == EBUSY => e.wr.into_inner().payload,
            _ => return Err(EINVAL),
        };
        let mut mr = mr;
        // While registered, the buffer is the peer's: not lent out.
        check!(
            mr.with_buf(|_| ()).err() == Some(EBUSY),
            "a registered MR lends its buffer"
        );
        // A zero-length WRITE names no memory: the peer acknowledges it.
        post_one(
            &p.a,
            filled(&p.pd, 64, 4)?,
            WcStatus::Success,
            WcOpcode::RdmaWrite,
            |_, ops| {
                ops.keepalive()?;
                Ok(())
            },
        )?;
        let wc = write_then_invalidate(&p, remote, 4096, 5)?;
        check!(
            wc.invalidated_rkey() == Some(remote.rkey),
            "receive reports {:?} invalidated, expected {:#x}",
            wc.invalidated_rkey(),
            remote.rkey
        );
        // Kept as a value, applied later (the storage initiator's way): it takes.
        let inv = wc.invalidation().ok_or(EINVAL)?;
        check!(
            inv.rkey() == remote.rkey,
            "the invalidation names another rkey"
        );
        check!(
            mr.apply_invalidation(inv),
            "the MR did not take the invalidation"
        );
        check!(
            !mr.is_registered() && mr.remote() == Err(EINVAL),
            "an invalidated MR still hands out its rkey"
        );
        check!(
            mr.with_buf(|b| matches(b, 5)) == Ok(true),
            "the WRITE before the SEND is not in place"
        );
        // Registered again under a new key, it works again...
        mr.bump_key()?;
        let mr = register(&p.b, mr, Access::REMOTE_WRITE)?;
        let fresh = mr.remote()?;
        check!(
            fresh.rkey != remote.rkey,
            "the new registration reuses the rkey"
        );
        post_one(
            &p.a,
            filled(&p.pd, 64, 6)?,
            WcStatus::Success,
            WcOpcode::RdmaWrite,
            |buf, ops| {
                ops.write(buf, 0..64, fresh)?;
                Ok(())
            },
        )?;
        // ...and the old rkey stays dead.
        post_one(
            &p.a,
            filled(&p.pd, 64, 7)?,
            WcStatus::RemAccessErr,
            WcOpcode::RdmaWrite,
            |buf, ops| {
                ops.write(buf, 0..64, remote)?;
                Ok(())
            },
        )?;
        check!(
            matches(&mr_bytes(&mr)?[..64], 6),
            "memory changed by the old rkey"
        );
        drop((mr, p));
        // READ with invalidate is iWARP's.
        let q = rc_pair(&dev)?;
        let target = registered_mr(&q.b, 4096, 1, Access::REMOTE_READ)?;
        let sinkmr = registered_mr(&q.a, 4096, 0, Access::NONE)?;
        let s = sink::<Mr>()?;
        let t = target.remote()?;
        let e = q.a.post_send(twr(sinkmr, &s)?, |m, ops| {
            ops.read_inv(&mut m.payload, t)?;
            Ok(())
        });
        check!(
            e.as_ref().err().map(|e| e.err) == Some(EOPNOTSUPP),
            "READ with invalidate on RoCE"
        );
        drop((e, target, q));
        leak_check()
    })())
}

/// A [`LentMr`] over pages another object owns (the storage initiator's MR for a block
/// request's pages): remote writes are refused for an owner that does not allow them, and by
/// `reg_mr` beyond what was lent; more pages than the MR maps are refused with the owner back;
/// lent for writing and registered, the pages take the peer's RDMA WRITE, are not given back
/// while the registration lives, and come back with the data once the peer's SEND with
/// invalidate revoked the rkey; an MR dropped while registered deregisters before its owner
/// goes.
#[no_mangle]
extern "C" fn rdma_kunit_rw_lent_mr() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let p = rc_pair(&dev)?;
        let pd = p.b.pd().clone();
        let mut mr = LentMr::<Owned>::new(&pd, 4)?;
        let r = mr.lend(owned(2, false)?, Access::REMOTE_WRITE);
        check!(
            matches!(&r, Err((e, o)) if *e == EINVAL && o.pages.len() == 2),
            "pages lent for remote writes against their owner's will"
        );
        let r = mr.lend(owned(5, true)?, Access::REMOTE_WRITE);
        check!(
            matches!(&r, Err((e, _)) if *e == E2BIG) && !mr.is_lent(),
            "more pages lent than the MR maps"
        );
        // Lent for reading: registering it for writing is refused, and never registered, the
        // owner comes back at once.
        mr.lend(owned(2, false)?, Access::REMOTE_READ)
            .map_err(|(e, _)| e)?;
        check!(mr.len() == 2 * PAGE_SIZE, "lent {} bytes", mr.len());
        let s = sink::<LentMr<Owned>>()?;
        let e = p.b.post_send(twr(mr, &s)?, |m, ops| {
            ops.reg_mr(&m.payload, Access::REMOTE_WRITE)?;
            Ok(())
        });
        let mut mr = match e {
            Err(e) if e.err == EINVAL => e.wr.into_inner().payload,
            _ => return Err(EINVAL),
        };
        check!(
            mr.take_back().is_ok_and(|o| !o.writable) && !mr.is_lent(),
            "an MR never registered keeps its owner"
        );
        // Lent for writing and registered: the peer writes the pages.
        mr.lend(owned(2, true)?, Access::REMOTE_WRITE)
            .map_err(|(e, _)| e)?;
        mr.bump_key()?;
        let mut mr = register(&p.b, mr, Access::REMOTE_WRITE)?;
        check!(
            mr.take_back().err() == Some(EBUSY),
            "a registered MR gives its owner back"
        );
        let remote = Remote {
            addr: mr.iova(),
            rkey: mr.rkey(),
        };
        let wc = write_then_invalidate(&p, remote, 2 * PAGE_SIZE, 9)?;
        check!(
            mr.invalidated_by(&wc),
            "the SEND with invalidate did not revoke the MR"
        );
        let back = mr.take_back()?;
        let mut got = KVec::from_elem(0u8, 2 * PAGE_SIZE, GFP_KERNEL)?;
        copy_from_pages(&back.pages, 0, &mut got)?;
        check!(matches(&got, 9), "the peer's WRITE is not in the pages");
        drop(back);
        // Dropped while registered: deregistered, then the owner goes (nothing leaks).
        mr.lend(owned(1, true)?, Access::REMOTE_WRITE | Access::REMOTE_READ)
            .map_err(|(e, _)| e)?;
        mr.bump_key()?;
        let mr = register(&p.b, mr, Access::REMOTE_READ)?;
        check!(mr.is_registered(), "not registered");
        drop((mr, p));
        leak_check()
    })())
}
