// SPDX-License-Identifier: GPL-2.0

//! Shared receive queues.

use super::*;

/// Connects `a` (its own receive queue) and `b` (receives from an SRQ) on one device.
pub(super) fn connect(a: Qp<Init>, b: Qp<Init>) -> Result<(Qp<Rts>, Qp<Rts>)> {
    let (ea, eb) = (a.endpoint()?, b.endpoint()?);
    let p = RcParams::default();
    Ok((a.connect(&eb, &p)?, b.connect(&ea, &p)?))
}

/// SRQ: two RC QPs take their receives from one SRQ; each receive reports the QP that took
/// it; depth and argument limits; receives left on the SRQ come back flushed when it goes.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_srq() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let pd = Pd::new(&dev)?;
        let cq = Cq::new(&dev, 256, 0, PollContext::Softirq)?;
        let attrs = dev.attrs();
        check!(Srq::new(&pd, &cq, 0, 1).err() == Some(EINVAL), "depth 0");
        check!(
            Srq::new(&pd, &cq, attrs.max_srq_wr() + 1, 1).err() == Some(EINVAL),
            "depth over max_srq_wr"
        );
        check!(Srq::new(&pd, &cq, 8, 0).err() == Some(EINVAL), "0 SGEs");
        let small = Cq::new(&dev, 8, 0, PollContext::Softirq)?;
        check!(
            Srq::new(&pd, &small, small.entries() + 1, 1).err() == Some(EINVAL),
            "SRQ deeper than its CQ"
        );
        check!(
            small.free_entries() == small.entries(),
            "failed SRQ kept CQ entries"
        );
        const DEPTH: u32 = 16;
        let srq = Srq::new(&pd, &cq, DEPTH, 1)?;
        let caps = QpCaps::default();
        let new_a = || Qp::new(&pd, QpType::Rc, &cq, &cq, &caps)?.to_init(1, Access::NONE);
        let new_b =
            || Qp::new_with_srq(&pd, QpType::Rc, &cq, &srq, &caps)?.to_init(1, Access::NONE);
        let (a1, b1) = connect(new_a()?, new_b()?)?;
        let (a2, b2) = connect(new_a()?, new_b()?)?;
        let rs = sink::<DmaBuf>()?;
        for _ in 0..DEPTH {
            let buf = DmaBuf::new(&pd, 256, GFP_KERNEL)?;
            srq.post_recv(twr(buf, &rs)?, |t, ops| {
                ops.buf(&mut t.payload, 0..256)?;
                Ok(())
            })?;
        }
        let buf = DmaBuf::new(&pd, 256, GFP_KERNEL)?;
        let over = srq.post_recv(twr(buf, &rs)?, |t, ops| {
            ops.buf(&mut t.payload, 0..256)?;
            Ok(())
        });
        check!(
            over.as_ref().err().map(|e| e.err) == Some(ENOMEM),
            "post beyond the SRQ depth"
        );
        drop(over);
        let buf = DmaBuf::new(&pd, 256, GFP_KERNEL)?;
        let own = b1.post_recv(twr(buf, &rs)?, |t, ops| {
            ops.buf(&mut t.payload, 0..256)?;
            Ok(())
        });
        check!(
            own.as_ref().err().map(|e| e.err) == Some(EINVAL),
            "post_recv on a QP with an SRQ"
        );
        drop(own);
        check!(b1.drain_rq().err() == Some(EINVAL), "drain_rq of an SRQ QP");
        let ss = sink::<DmaBuf>()?;
        for seq in 0..6u32 {
            let qp = if seq % 2 == 0 { &a1 } else { &a2 };
            qp.post_send(twr(filled(&pd, 200, seq)?, &ss)?, |t, ops| {
                ops.send(&t.payload, 0..200)?;
                Ok(())
            })?;
        }
        let sent = ss.wait(6)?;
        check!(
            sent.iter().all(|d| d.status == WcStatus::Success),
            "sends failed"
        );
        let mut got = rs.wait(6)?;
        let mut seen = [false; 6];
        for d in got.iter_mut() {
            check!(
                d.status == WcStatus::Success && d.byte_len == 200,
                "SRQ receive: {:?}, {} bytes",
                d.status,
                d.byte_len
            );
            let seq = (0..6u32).find(|&q| matches(&d.payload.as_slice()[..200], q));
            let Some(seq) = seq else {
                check!(false, "SRQ receive: payload of no message");
                continue;
            };
            let want = if seq % 2 == 0 { b1.qpn() } else { b2.qpn() };
            check!(
                d.qp_num == want,
                "message {} reported QP {}, sent to QP {}",
                seq,
                d.qp_num,
                want
            );
            seen[seq as usize] = true;
        }
        check!(seen.iter().all(|&x| x), "messages missing: {:?}", seen);
        check!(
            srq.outstanding() == DEPTH - 6,
            "{} SRQ receives outstanding",
            srq.outstanding()
        );
        // The QPs go first (they hold the SRQ); the receives left on the SRQ come back with
        // the SRQ, flushed.
        drop((a1, b1, a2, b2, sent, got));
        drop(srq);
        let left = rs.wait((DEPTH - 6) as usize)?;
        check!(
            left.len() == (DEPTH - 6) as usize
                && left.iter().all(|d| d.status == WcStatus::WrFlushErr),
            "{} receives back from the destroyed SRQ",
            left.len()
        );
        check!(
            cq.free_entries() == cq.entries(),
            "CQ entries not given back"
        );
        drop(left);
        leak_check()
    })())
}
