// SPDX-License-Identifier: GPL-2.0

//! Asynchronous events of QPs, SRQs and CQs, and what an SRQ and a CQ can change after
//! creation (the SRQ limit, the CQ size and moderation).

use super::*;

/// What a QP, SRQ or CQ reported.
type Seen = Events<AsyncEvent>;

/// An SRQ limit armed and reached fires its event once, and is disarmed; a QP that takes its
/// receives from the SRQ reports `QpLastWqeReached` when it goes to the error state; a second
/// handler is refused.
#[no_mangle]
extern "C" fn rdma_kunit_async_srq_limit() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let pd = Pd::new(&dev)?;
        let cq = Cq::new(&dev, 256, 0, PollContext::Softirq)?;
        const DEPTH: u32 = 16;
        let srq = Srq::new(&pd, &cq, DEPTH, 1)?;
        let seen = Seen::new()?;
        srq.set_event_handler(seen.clone())?;
        check!(
            srq.set_event_handler(Seen::new()?).err() == Some(EBUSY),
            "a second handler"
        );
        check!(srq.arm_limit(0).err() == Some(EINVAL), "limit 0");
        check!(
            srq.arm_limit(DEPTH).err() == Some(EINVAL),
            "limit of the depth"
        );
        let caps = QpCaps::default();
        let a = Qp::new(&pd, QpType::Rc, &cq, &cq, &caps)?.to_init(1, Access::NONE)?;
        let b = Qp::new_with_srq(&pd, QpType::Rc, &cq, &srq, &caps)?;
        let qseen = Seen::new()?;
        b.set_event_handler(qseen.clone())?;
        let b = b.to_init(1, Access::NONE)?;
        let (a, b) = srq::connect(a, b)?;
        let rs = sink::<DmaBuf>()?;
        for _ in 0..8 {
            let buf = DmaBuf::new(&pd, 256, GFP_KERNEL)?;
            srq.post_recv(twr(buf, &rs)?, |t, ops| {
                ops.buf(&mut t.payload, 0..256)?;
                Ok(())
            })?;
        }
        srq.arm_limit(4)?;
        let attr = srq.query()?;
        check!(
            attr.limit == 4 && attr.max_wr >= DEPTH,
            "query after arming: {:?}",
            attr
        );
        // Eight receives posted: the fifth one taken leaves three, below the limit of four.
        let ss = sink::<DmaBuf>()?;
        for seq in 0..7u32 {
            a.post_send(twr(filled(&pd, 100, seq)?, &ss)?, |t, ops| {
                ops.send(&t.payload, 0..100)?;
                Ok(())
            })?;
            ss.wait(1)?;
            let got = rs.wait(1)?;
            check!(
                got.len() == 1 && got[0].status == WcStatus::Success,
                "message {}",
                seq
            );
            // The driver raises the event before the completion; it is delivered from a work
            // item, which may run a little later.
            if seq == 4 {
                seen.wait_for(AsyncEvent::SrqLimitReached, 5000)?;
            }
            let events = seen.events()?;
            check!(
                events.len() == usize::from(seq >= 4),
                "after message {}: SRQ events {:?}",
                seq,
                &events[..]
            );
        }
        msleep(200);
        check!(
            seen.events()?[..] == [AsyncEvent::SrqLimitReached],
            "SRQ events {:?}",
            &seen.events()?[..]
        );
        check!(
            srq.query()?.limit == 0,
            "the limit is still armed after firing"
        );
        // The SRQ's QP in the error state takes no more receives from it.
        b.set_error()?;
        qseen.wait_for(AsyncEvent::QpLastWqeReached, 5000)?;
        drop((a, b, srq));
        leak_check()
    })())
}

/// A CQ grows and shrinks under the QPs reporting to it, never below what they were
/// promised, and still carries traffic; moderation is refused by soft-RoCE, which has none; a
/// CQ takes one event handler.
#[no_mangle]
extern "C" fn rdma_kunit_async_cq_resize() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let pd = Pd::new(&dev)?;
        let cq = Cq::new(&dev, 64, 0, PollContext::Softirq)?;
        cq.set_event_handler(Seen::new()?)?;
        check!(
            cq.set_event_handler(Seen::new()?).err() == Some(EBUSY),
            "a second CQ handler"
        );
        let caps = QpCaps::default();
        let access = Access::LOCAL_WRITE;
        let a = Qp::new(&pd, QpType::Rc, &cq, &cq, &caps)?.to_init(1, access)?;
        let b = Qp::new(&pd, QpType::Rc, &cq, &cq, &caps)?.to_init(1, access)?;
        let (ea, eb) = (a.endpoint()?, b.endpoint()?);
        let a = a.connect(&eb, &RcParams::default())?;
        let b = b.connect(&ea, &RcParams::default())?;
        let promised = cq.entries() - cq.free_entries();
        check!(cq.resize(0).err() == Some(EINVAL), "size 0");
        check!(
            cq.resize(promised - 1).err() == Some(EBUSY),
            "shrinking below the {} entries promised to the QPs",
            promised
        );
        cq.resize(512)?;
        check!(cq.entries() >= 512, "grown to {} entries", cq.entries());
        check!(
            cq.free_entries() == cq.entries() - promised,
            "the promises did not follow the resize"
        );
        cq.resize(promised)?;
        check!(
            cq.entries() >= promised && cq.entries() < 512,
            "shrunk to {} entries",
            cq.entries()
        );
        // Still a working CQ.
        let rs = sink::<DmaBuf>()?;
        post_recv(&b, &rs, 256)?;
        post_one(
            &a,
            filled(&pd, 200, 3)?,
            WcStatus::Success,
            WcOpcode::Send,
            |buf, ops| {
                ops.send(buf, 0..200)?;
                Ok(())
            },
        )?;
        let mut r = rs.wait(1)?.into_iter().next().ok_or(EINVAL)?;
        check!(
            r.status == WcStatus::Success && matches(&r.payload.as_slice()[..200], 3),
            "receive after resizing: {:?}",
            r.status
        );
        check!(
            cq.moderate(16, 10).err() == Some(EOPNOTSUPP),
            "moderation on soft-RoCE"
        );
        drop((a, b, cq));
        leak_check()
    })())
}
