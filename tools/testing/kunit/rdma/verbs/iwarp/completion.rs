// SPDX-License-Identifier: GPL-2.0

//! What a completion promises on siw0, where soft-iWARP broke it: once a request is reported
//! complete, its memory is its owner's again (the pages of a WRITE before a signalled SEND
//! included), and a failed RDMA READ does not strand the READs behind it. Each case failed
//! before the overlay patch it names.

use super::*;
use kernel::rdma::rw::RwCtx;

/// Rounds of [`rdma_kunit_iwarp_chain_buffers_reusable`], and the answers of each round.
const REUSE_ROUNDS: u32 = 32;
const REUSE_ANSWERS: usize = 4;

/// What the server of that case writes to the client in each round, to keep its own socket
/// busy: four WRITEs of 64 KiB.
const BUSY_LEN: usize = 16 * PAGE_SIZE;

/// Whether every completion in `d` succeeded.
fn all_ok<P>(d: &[Done<P>]) -> bool {
    d.iter().all(|d| d.status == WcStatus::Success)
}

/// A read's answer as an NVMe-oF target sends it: a page by RDMA WRITE (unsignalled), then a
/// SEND. Its completion handler reuses the page at once (zeroes it), as a target may.
struct Answer {
    rw: RwCtx<ToDevice>,
    msg: DmaBuf,
    sink: Arc<Sink<KVec<Page>>>,
    _live: Live,
}

impl Completion for Answer {
    fn done(wr: Wr<Self>, wc: &Wc) {
        let Answer {
            rw,
            msg: _,
            sink,
            _live,
        } = wr.into_inner();
        let pages = rw.into_pages();
        for p in pages.iter() {
            // SAFETY: The page is the case's alone again: the chain that lent it to the
            // device has completed.
            let _ = unsafe { p.fill_zero_raw(0, PAGE_SIZE) };
        }
        let _ = sink.list.lock().push(Done::of(wc, pages), GFP_ATOMIC);
        sink.sig.complete();
    }
}

/// The promise every request makes its owner, on iWARP too: once a chain's completion is
/// reported, the memory of every request in it is the owner's again. siw reported a request
/// complete once TCP had its pages by reference (zero-copy), so the peer could read a page
/// after it was reused (overlay 0013). In each round `a` answers four reads as
/// [`Answer`] does, each page with its own pattern, to its own page of `b`'s MR; when the
/// SENDs have arrived, `b`'s MR must hold the patterns. `b` writes to `a` meanwhile, so that
/// its socket is often busy when `a`'s data arrives (TCP then leaves it on the backlog, read
/// later).
#[no_mangle]
extern "C" fn rdma_kunit_iwarp_chain_buffers_reusable() -> c_int {
    ret((|| {
        let dev = siw0()?;
        let res = Res {
            pd: Pd::new(&dev)?,
            cq: Cq::new(&dev, 256, 0, PollContext::Softirq)?,
            caps: QpCaps {
                send_sge: dev.attrs().max_send_sge().min(16),
                ..super::storage::rw_caps()
            },
            srq: None,
            early: None,
        };
        let CmPair {
            a,
            b,
            _child,
            _client,
            pd,
        } = cm_pair_of(res, 7234)?;
        let a = Arc::new(a, GFP_KERNEL)?;
        let target = registered_mr(&b, REUSE_ANSWERS * PAGE_SIZE, 0, Access::REMOTE_WRITE)?;
        let remote = target.remote()?;
        let busy_mr = registered_mr(&a, BUSY_LEN, 0, Access::REMOTE_WRITE)?;
        let busy_at = busy_mr.remote()?;
        let busy = sink::<DmaBuf>()?;
        let answered = sink::<KVec<Page>>()?;
        let mut late = 0;
        for round in 0..REUSE_ROUNDS {
            let seq = |k: usize| 100 + round * REUSE_ANSWERS as u32 + k as u32;
            let rs = sink::<DmaBuf>()?;
            for _ in 0..REUSE_ANSWERS {
                post_recv(&b, &rs, 64)?;
            }
            let load = DmaBuf::new(&pd, BUSY_LEN, GFP_KERNEL)?;
            b.post_send(twr(load, &busy)?, |t, ops| {
                let buf = &t.payload;
                for _ in 0..4 {
                    ops.write(buf, 0..BUSY_LEN, busy_at)?;
                }
                Ok(())
            })?;
            for k in 0..REUSE_ANSWERS {
                let page = super::storage::pattern_pages(&pd, 1, seq(k))?;
                let at = Remote {
                    addr: remote.addr + (k * PAGE_SIZE) as u64,
                    rkey: remote.rkey,
                };
                let rw = RwCtx::<ToDevice>::new(&a, page, PAGE_SIZE, at).map_err(|(e, _)| e)?;
                LIVE_WRS.fetch_add(1, Ordering::Relaxed);
                let answer = Answer {
                    rw,
                    msg: filled(&pd, 64, seq(k))?,
                    sink: answered.clone(),
                    _live: Live,
                };
                a.post_send(Wr::new(answer, GFP_KERNEL)?, |t, ops| {
                    ops.rw(&mut t.rw)?.send(&t.msg, 0..64)?;
                    Ok(())
                })?;
            }
            check!(
                all_ok(&answered.wait(REUSE_ANSWERS)?),
                "round {round}: an answer failed"
            );
            check!(
                all_ok(&rs.wait(REUSE_ANSWERS)?),
                "round {round}: a SEND did not arrive"
            );
            check!(
                all_ok(&busy.wait(1)?),
                "round {round}: the server's WRITEs failed"
            );
            let got = mr_bytes(&target)?;
            for k in 0..REUSE_ANSWERS {
                let page = got.get(k * PAGE_SIZE..(k + 1) * PAGE_SIZE).ok_or(EINVAL)?;
                if !matches(page, seq(k)) {
                    late += 1;
                }
            }
        }
        check!(
            late == 0,
            "{late} of {} pages reached the peer changed after their chain completed",
            REUSE_ROUNDS as usize * REUSE_ANSWERS
        );
        drop((target, busy_mr));
        drop((b, a, _child, _client));
        leak_check()
    })())
}

/// After a READ fails at its sink, the READs behind it come back flushed. The client's sink
/// MR is invalidated by the server's SEND with invalidate, which the client does not apply
/// ([`Region::invalidated_by`]), so it still posts a READ with invalidate into it and two
/// plain READs behind: the first READ's response finds the sink invalid (a local protection
/// error that ends the connection), and the other two, which wait in siw's outbound READ
/// queue, must be flushed. siw gave up its place in that queue without moving past it, so the
/// flush stopped there and those READs never came back (overlay 0014).
#[no_mangle]
extern "C" fn rdma_kunit_iwarp_read_error_flushes_the_rest() -> c_int {
    ret((|| {
        let dev = siw0()?;
        let p = cm_pair(&dev, 7235)?;
        let pd = &p.pd;
        let source = registered_mr(&p.b, PAGE_SIZE, 41, Access::REMOTE_READ)?;
        let from = source.remote()?;
        let target = registered_mr(&p.a, PAGE_SIZE, 0, Access::REMOTE_WRITE)?;
        let revoked = target.remote()?.rkey;
        let rs = sink::<DmaBuf>()?;
        post_recv(&p.a, &rs, 64)?;
        post_one(
            &p.b,
            filled(pd, 64, 42)?,
            WcStatus::Success,
            WcOpcode::Send,
            |b, ops| {
                ops.send_inv(b, 0..64, revoked)?;
                Ok(())
            },
        )?;
        let got = rs.wait(1)?;
        check!(
            got.first().and_then(|d| d.wc.invalidated_rkey()) == Some(revoked),
            "the SEND with invalidate did not name the sink's rkey"
        );
        let failed = sink::<Mr>()?;
        p.a.post_send(twr(target, &failed)?, |t, ops| {
            ops.read_inv(&mut t.payload, from)?;
            Ok(())
        })?;
        let behind = sink::<DmaBuf>()?;
        for _ in 0..2 {
            let buf = DmaBuf::new(pd, PAGE_SIZE, GFP_KERNEL)?;
            p.a.post_send(twr(buf, &behind)?, |t, ops| {
                ops.read(&mut t.payload, 0..PAGE_SIZE, from)?;
                Ok(())
            })?;
        }
        let first = failed.wait(1)?;
        let status = first.first().map(|d| d.status);
        check!(
            status.is_some_and(|s| s != WcStatus::Success),
            "the READ into an invalidated sink: {status:?}"
        );
        let rest = behind.wait(2)?;
        check!(
            rest.iter().all(|d| d.status == WcStatus::WrFlushErr),
            "the READs behind it: not flushed"
        );
        drop(source);
        drop(p);
        leak_check()
    })())
}
