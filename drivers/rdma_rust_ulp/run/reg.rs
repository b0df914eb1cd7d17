// SPDX-License-Identifier: GPL-2.0

//! Registering an MR through a connected QP, waiting in process context for its REG_MR to
//! complete: a run's RDMA target, a ping connection's buffers.

use crate::wait::{wait_until, Pace};
use kernel::new_spinlock_bh;
use kernel::prelude::*;
use kernel::rdma::{
    cq::{Cq, Wc, WcStatus},
    mr::{Access, Mr},
    qp::{Qp, Rts},
    sync::{Completion as Signal, SpinLockBh},
    wr::{Completion, Wr},
};
use kernel::sync::Arc;

/// A REG_MR request: hands the MR back to the thread that waits for it.
#[pin_data]
struct RegBack {
    #[pin]
    slot: SpinLockBh<Option<(Wr<Reg>, WcStatus)>>,
    #[pin]
    done: Signal,
}

struct Reg {
    mr: Mr,
    back: Arc<RegBack>,
}

impl Completion for Reg {
    fn done(wr: Wr<Self>, wc: &Wc) {
        let back = wr.data().back.clone();
        *back.slot.lock() = Some((wr, wc.status()));
        back.done.complete();
    }
}

/// How long a REG_MR may take.
const REG_MS: u32 = 10_000;

/// Registers `mr` for remote read and write through `qp`, waiting for the REG_MR completion
/// (polling `cq` if it is a direct one).
pub(crate) fn register(qp: &Qp<Rts>, cq: &Cq, mr: Mr) -> Result<Mr> {
    let back = Arc::pin_init(
        pin_init!(RegBack {
            slot <- new_spinlock_bh!(None, "rdma_rust_ulp_reg"),
            done <- Signal::new(),
        }),
        GFP_KERNEL,
    )?;
    let reg = Reg {
        mr,
        back: back.clone(),
    };
    qp.post_send(Wr::new(reg, GFP_KERNEL)?, |r, ops| {
        ops.reg_mr(&r.mr, Access::REMOTE_READ | Access::REMOTE_WRITE)?;
        Ok(())
    })?;
    // The QP is connected and the request local: it completes (or flushes) promptly.
    let came_back = wait_until(Some(cq), Some(&back.done), REG_MS, Pace::Sleep, || {
        back.slot.lock().is_some()
    });
    if came_back.is_err() {
        pr_err!("REG_MR did not complete in {} s\n", REG_MS / 1000);
        // The request holds `back`, and `back` would hold the request: drain the QP so that
        // it comes back now, then drop it.
        let _ = qp.drain();
        drop(back.slot.lock().take());
        return Err(ETIMEDOUT);
    }
    let (wr, status) = back.slot.lock().take().ok_or(EIO)?;
    let mr = wr.into_inner().mr;
    if status != WcStatus::Success {
        pr_err!("REG_MR completed with {:?}\n", status);
        return Err(EIO);
    }
    Ok(mr)
}
