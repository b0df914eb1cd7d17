// SPDX-License-Identifier: GPL-2.0

//! Waiting for one request from process context: [`Waited`] and [`Pending`].

use super::*;
use kernel::rdma::wr::{Pending, Waited};

/// A receive buffer that says when it is dropped.
struct Tracked {
    buf: DmaBuf,
    dropped: Arc<AtomicUsize>,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
    }
}

fn tracked_recv(qp: &Qp<Rts>, dropped: &Arc<AtomicUsize>) -> Result<Pending<Tracked>> {
    let buf = DmaBuf::new(qp.pd(), 64, GFP_KERNEL)?;
    let t = Tracked {
        buf,
        dropped: dropped.clone(),
    };
    let (wr, pending) = Waited::new(t, GFP_KERNEL)?;
    qp.post_recv(wr, |w, ops| {
        ops.buf(&mut w.data.buf, 0..64)?;
        Ok(())
    })?;
    Ok(pending)
}

/// A waited-for SEND and receive come back to the thread with their buffers and completions;
/// a wait that times out leaves the request with the device, and its data is dropped when the
/// request is flushed, not before.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_waited() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let p = rc_pair(&dev)?;
        let dropped = Arc::new(AtomicUsize::new(0), GFP_KERNEL)?;
        let rx = tracked_recv(&p.b, &dropped)?;
        let (wr, sent) = Waited::new(filled(&p.pd, 64, 3)?, GFP_KERNEL)?;
        p.a.post_send(wr, |w, ops| {
            ops.send(&w.data, 0..64)?;
            Ok(())
        })?;
        let (_, wc) = sent.wait(WAIT_MS)?;
        check!(
            wc.opcode() == Some(WcOpcode::Send),
            "send: {:?}",
            wc.status()
        );
        let (mut got, wc) = rx.wait(WAIT_MS)?;
        check!(
            wc.is_ok() && wc.byte_len() == 64 && matches(got.buf.as_slice(), 3),
            "receive: {:?}, {} bytes",
            wc.status(),
            wc.byte_len()
        );
        drop(got);
        check!(
            dropped.load(Ordering::Relaxed) == 1,
            "the buffer came back and was not freed"
        );
        // Nothing is sent now: the wait times out and the receive stays posted.
        let idle = tracked_recv(&p.b, &dropped)?;
        check!(!idle.is_done(), "an idle receive is done");
        check!(
            idle.wait(100).err() == Some(ETIMEDOUT),
            "the wait did not time out"
        );
        check!(
            dropped.load(Ordering::Relaxed) == 1,
            "the data of a request the device still owns was dropped"
        );
        // Destroying the QPs flushes it: only then is its data dropped.
        drop(p);
        check!(
            dropped.load(Ordering::Relaxed) == 2,
            "the flushed receive's data was not dropped ({} drops)",
            dropped.load(Ordering::Relaxed)
        );
        leak_check()
    })())
}
