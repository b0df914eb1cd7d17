// SPDX-License-Identifier: GPL-2.0

//! The ULP's keep-alive: a work item on the system long workqueue that calls its tick function
//! every [`TICK_MS`] while the module is loaded. The module root has it tick every active run;
//! CM connections use the ticks to probe a peer that has gone quiet
//! ([`crate::run::Attached::tick`]).

use core::sync::atomic::{AtomicBool, Ordering};
use kernel::prelude::*;
use kernel::rdma::sync::{flush_work, msleep};
use kernel::sync::Arc;
use kernel::workqueue::{self, impl_has_work, new_work, Work, WorkItem};

/// How often the keep-alive ticks.
pub(crate) const TICK_MS: u32 = 500;

#[pin_data]
pub(crate) struct Keepalive {
    stop: AtomicBool,
    /// What each tick does (process context).
    tick: fn(),
    #[pin]
    work: Work<Keepalive>,
}

impl_has_work! {
    impl HasWork<Self> for Keepalive { self.work }
}

impl WorkItem for Keepalive {
    type Pointer = Arc<Keepalive>;

    fn run(this: Arc<Keepalive>) {
        while !this.stop.load(Ordering::Acquire) {
            (this.tick)();
            msleep(TICK_MS);
        }
    }
}

/// The running keep-alive; dropping it stops it and waits until it has.
pub(crate) struct KeepaliveGuard(Arc<Keepalive>);

impl Keepalive {
    /// Starts calling `tick` every [`TICK_MS`] (process context).
    pub(crate) fn start(tick: fn()) -> Result<KeepaliveGuard> {
        let k = Arc::pin_init(
            pin_init!(Keepalive {
                stop: AtomicBool::new(false),
                tick,
                work <- new_work!("rdma_rust_ulp_keepalive"),
            }),
            GFP_KERNEL,
        )?;
        workqueue::system_long()
            .enqueue(k.clone())
            .map_err(|_| EBUSY)?;
        Ok(KeepaliveGuard(k))
    }
}

impl Drop for KeepaliveGuard {
    fn drop(&mut self) {
        self.0.stop.store(true, Ordering::Release);
        // The loop ends within a tick. Waiting for the work function to have returned (not
        // just for a signal it sends) means no code of the module runs for it after this.
        flush_work(&self.0.work);
    }
}
