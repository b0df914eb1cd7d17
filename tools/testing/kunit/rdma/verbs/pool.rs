// SPDX-License-Identifier: GPL-2.0

//! CQs shared through the device's pool.

use super::*;

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
