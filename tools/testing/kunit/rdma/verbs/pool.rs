// SPDX-License-Identifier: GPL-2.0

//! CQs shared through the device's pool.

use super::*;
use kernel::{ffi::c_char, rdma::qp::Reset, workqueue};

extern "C" {
    /// Lists rxe0's pool CQs of the workqueue context (`rdma_kunit_suites.c`).
    fn rdma_kunit_pool_cqs(
        name: *const c_char,
        ids: *mut u64,
        buckets: *mut u32,
        used: *mut u32,
        max: c_int,
    ) -> c_int;
}

/// Shares of the device's CQ pool: sizes, poll contexts and vectors it cannot serve are
/// refused; small shares on one vector come from one pool CQ, shares without a vector go round
/// the vectors; a share takes QPs whose queues fit in it, carries checked traffic in each pool
/// poll context (a QP whose send and receive CQs are two shares too), and cannot be resized,
/// moderated or given an event handler, since others use the same CQ.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_cq_pool() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let max = dev.attrs().max_cqe();
        let vectors = dev.num_comp_vectors();
        for (entries, vector, poll, what) in [
            (0, None, PollContext::Softirq, "0 entries"),
            (max + 1, None, PollContext::Softirq, "max_cqe + 1 entries"),
            (16, None, PollContext::Direct, "a direct pool CQ"),
            (
                16,
                Some(vectors),
                PollContext::Softirq,
                "a vector out of range",
            ),
        ] {
            check!(
                Cq::from_pool(&dev, entries, vector, poll).err() == Some(EINVAL),
                "{what}"
            );
        }
        let a = Cq::from_pool(&dev, 64, Some(0), PollContext::Softirq)?;
        let b = Cq::from_pool(&dev, 64, Some(0), PollContext::Softirq)?;
        check!(
            a.is_pooled() && a.entries() == 64 && a.free_entries() == 64,
            "share of {} entries, {} free",
            a.entries(),
            a.free_entries()
        );
        check!(
            a.comp_vector() == 0 && b.comp_vector() == 0,
            "vectors {} and {}, asked for 0",
            a.comp_vector(),
            b.comp_vector()
        );
        check!(a.resize(128).err() == Some(EOPNOTSUPP), "resizing a share");
        check!(
            a.moderate(16, 10).err() == Some(EOPNOTSUPP),
            "moderating a share"
        );
        check!(
            a.set_event_handler(Events::<AsyncEvent>::new()?).err() == Some(EOPNOTSUPP),
            "an event handler on a share"
        );
        drop((a, b));

        // Shares without a vector are spread: as many in a row as there are vectors see
        // more than one of them (the core uses at most one vector per online CPU).
        let mut seen = 0u64;
        let mut held = KVec::new();
        for _ in 0..vectors.min(8) {
            let c = Cq::from_pool(&dev, 16, None, PollContext::Softirq)?;
            seen |= 1 << c.comp_vector().min(63);
            held.push(c, GFP_KERNEL)?;
        }
        if vectors >= 2 {
            check!(
                seen.count_ones() >= 2,
                "{} shares without a vector all on vector mask {:#x}",
                held.len(),
                seen
            );
        } else {
            pr_info!("rxe0 has one completion vector: spreading not checked\n");
        }
        drop(held);

        for poll in [
            PollContext::Softirq,
            PollContext::Workqueue,
            PollContext::UnboundWorkqueue,
        ] {
            let pd = Pd::new(&dev)?;
            let sq = Cq::from_pool(&dev, 64, Some(0), poll)?;
            let rq = Cq::from_pool(&dev, 64, None, poll)?;
            let small = Cq::from_pool(&dev, 4, None, poll)?;
            let caps = QpCaps::default();
            check!(
                Qp::new(&pd, QpType::Rc, &small, &small, &caps).err() == Some(EINVAL),
                "{poll:?}: a QP deeper than its share"
            );
            check!(
                small.free_entries() == 4,
                "{poll:?}: refused QP kept entries"
            );
            let qa = Qp::new(&pd, QpType::Rc, &sq, &rq, &caps)?.to_init(1, Access::NONE)?;
            let qb = Qp::new(&pd, QpType::Rc, &rq, &sq, &caps)?.to_init(1, Access::NONE)?;
            check!(
                sq.free_entries() < 64 && rq.free_entries() < 64,
                "{poll:?}: QPs reserved nothing in their shares"
            );
            let (qa, qb) = srq::connect(qa, qb)?;
            const N: u32 = 8;
            let rs = sink::<DmaBuf>()?;
            let ss = sink::<DmaBuf>()?;
            for _ in 0..N {
                post_recv(&qb, &rs, 512)?;
            }
            for seq in 0..N {
                qa.post_send(twr(filled(&pd, 512, seq)?, &ss)?, |t, ops| {
                    ops.send_imm(&t.payload, 0..512, seq)?;
                    Ok(())
                })?;
            }
            ss.wait(N as usize)?;
            for r in rs.wait(N as usize)?.iter_mut() {
                let seq = r.imm.ok_or(EINVAL)?;
                check!(
                    r.status == WcStatus::Success && matches(&r.payload.as_slice()[..512], seq),
                    "{poll:?}: message {} {:?}",
                    seq,
                    r.status
                );
            }
            // Dropping the QPs drains them through the shares' poller slots.
            drop((qa, qb));
            check!(
                sq.free_entries() == 64 && rq.free_entries() == 64,
                "{poll:?}: destroyed QPs kept entries"
            );
        }
        leak_check()
    })())
}

/// A CQ of rxe0's pool of workqueue CQs.
#[derive(Clone, Copy)]
struct PoolCq {
    /// Its address.
    id: u64,
    /// Its bucket in kernel::rdma's former table of 64 pool poller slots.
    bucket: u32,
    /// Entries in use.
    used: u32,
}

/// More pool CQs than the cases make.
const MAX_POOL_CQS: usize = 256;

/// rxe0's pool CQs of the workqueue context.
fn pool_cqs() -> Result<KVec<PoolCq>> {
    let mut ids = KVec::from_elem(0u64, MAX_POOL_CQS, GFP_KERNEL)?;
    let mut buckets = KVec::from_elem(0u32, MAX_POOL_CQS, GFP_KERNEL)?;
    let mut used = KVec::from_elem(0u32, MAX_POOL_CQS, GFP_KERNEL)?;
    // SAFETY: The name is NUL-terminated; each array holds `MAX_POOL_CQS` elements.
    let n = unsafe {
        rdma_kunit_pool_cqs(
            c_str!("rxe0").as_char_ptr(),
            ids.as_mut_ptr(),
            buckets.as_mut_ptr(),
            used.as_mut_ptr(),
            MAX_POOL_CQS as c_int,
        )
    };
    let n = usize::try_from(n).map_err(|_| Error::from_errno(n))?;
    let mut v = KVec::with_capacity(n, GFP_KERNEL)?;
    for i in 0..n {
        v.push(
            PoolCq {
                id: ids[i],
                bucket: buckets[i],
                used: used[i],
            },
            GFP_KERNEL,
        )?;
    }
    Ok(v)
}

/// Entries of a share that leaves no room for another one in its pool CQ (rxe makes the
/// pool's CQs of 4096 entries 8191 deep).
const BIG_SHARE: u32 = 4096;

/// A share of `BIG_SHARE` entries of a workqueue pool CQ on `vector`, with the pool CQ it
/// came from.
fn big_share(dev: &Device, vector: u32) -> Result<(Arc<Cq>, PoolCq)> {
    let before = pool_cqs()?;
    let cq = Cq::from_pool(dev, BIG_SHARE, Some(vector), PollContext::Workqueue)?;
    let landed = pool_cqs()?.iter().copied().find(|a| {
        let was = before.iter().find(|b| b.id == a.id).map_or(0, |b| b.used);
        a.used >= was + BIG_SHARE
    });
    let landed = landed.ok_or_else(|| {
        pr_err!("a share of {BIG_SHARE} entries landed on no pool CQ\n");
        EINVAL
    })?;
    Ok((cq, landed))
}

/// A receive that owns the last reference to another QP, and drops it in its handler.
struct DropQp {
    buf: DmaBuf,
    qp: Option<Qp<Reset>>,
    dropped: Arc<Signal>,
}

impl Completion for DropQp {
    fn done(wr: Wr<Self>, _wc: &Wc) {
        let DropQp { buf, qp, dropped } = wr.into_inner();
        drop((qp, buf));
        dropped.complete();
    }
}

/// How long the case below waits for the drain and the teardown.
const ONE_SLOT_S: u32 = 20;

/// Two pool CQs X and Y that kernel::rdma's former table of poller slots put in one slot:
/// a task drains a QP on X (holding X's slot) while X's handler drops the last reference to a
/// QP on Y. The teardown of that QP must not wait for X's slot, which the drain holds until
/// that very handler has returned: both finish in time.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_cq_pool_one_slot() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let vectors = dev.num_comp_vectors().max(1);
        // Each big share lands on a pool CQ of its own; 65 of them fill the 64 buckets with
        // two in one at least.
        let mut held: KVec<(Arc<Cq>, PoolCq)> = KVec::new();
        let mut pair = None;
        for n in 0..65u32 {
            let (cq, at) = big_share(&dev, n % vectors)?;
            if let Some(i) = held
                .iter()
                .position(|(_, h)| h.bucket == at.bucket && h.id != at.id)
            {
                pair = Some((held[i].0.clone(), held[i].1, cq, at));
                break;
            }
            held.push((cq, at), GFP_KERNEL)?;
        }
        let (x, xat, y, yat) = pair.ok_or_else(|| {
            pr_err!("no two of {} pool CQs in one bucket\n", held.len());
            EINVAL
        })?;
        pr_info!(
            "pool CQs {:#x} and {:#x} in bucket {} (after {} shares)\n",
            xat.id,
            yat.id,
            yat.bucket,
            held.len() + 1
        );
        drop(held);

        let pd = Pd::new(&dev)?;
        let z = Cq::new(&dev, 64, 0, PollContext::Softirq)?;
        let caps = QpCaps::default();
        let a = Qp::new(&pd, QpType::Rc, &x, &x, &caps)?.to_init(1, Access::NONE)?;
        let b = Qp::new(&pd, QpType::Rc, &z, &z, &caps)?.to_init(1, Access::NONE)?;
        let (a, b) = srq::connect(a, b)?;
        let victim = Qp::new(&pd, QpType::Rc, &y, &y, &caps)?;
        let dropped = Arc::pin_init(Signal::new(), GFP_KERNEL)?;
        let rx = DropQp {
            buf: DmaBuf::new(&pd, 64, GFP_KERNEL)?,
            qp: Some(victim),
            dropped: dropped.clone(),
        };
        a.post_recv(Wr::new(rx, GFP_KERNEL)?, |r, ops| {
            ops.buf(&mut r.buf, 0..64)?;
            Ok(())
        })?;
        // The drain flushes the receive: X's handler drops the QP on Y.
        let a = Arc::new(a, GFP_KERNEL)?;
        let drained = Arc::pin_init(Signal::new(), GFP_KERNEL)?;
        {
            let (a, drained) = (a.clone(), drained.clone());
            workqueue::system_unbound().try_spawn(GFP_KERNEL, move || {
                // A failed drain shows up below as a receive still outstanding.
                let _ = a.drain();
                drained.complete();
            })?;
        }
        let done = dropped.wait_timeout(ONE_SLOT_S * 1000).is_ok()
            && drained.wait_timeout(ONE_SLOT_S * 1000).is_ok();
        check!(
            done,
            "teardown did not finish in {} s: QP {} drained on pool CQ {:#x}, a QP on pool CQ {:#x} dropped in its handler (bucket {})",
            ONE_SLOT_S,
            a.qpn(),
            xat.id,
            yat.id,
            yat.bucket
        );
        check!(
            a.recv_outstanding() == 0,
            "{} receives outstanding after the drain",
            a.recv_outstanding()
        );
        drop((a, b, x, y, z, pd));
        leak_check()
    })())
}
