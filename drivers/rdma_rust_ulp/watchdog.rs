// SPDX-License-Identifier: GPL-2.0

//! The ULP's watchdog: a work item on the system long workqueue that ticks every active run
//! every [`TICK_MS`] while the module is loaded. CM connections use the ticks to probe a peer
//! that has gone quiet ([`crate::run::Attached::tick`]).

use crate::registry;
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::prelude::*;
use kernel::rdma::sync::{flush_work, msleep};
use kernel::sync::Arc;
use kernel::workqueue::{self, impl_has_work, new_work, Work, WorkItem};

/// How often the watchdog ticks.
pub(crate) const TICK_MS: u32 = 500;

#[pin_data]
pub(crate) struct Watchdog {
    stop: AtomicBool,
    #[pin]
    work: Work<Watchdog>,
}

impl_has_work! {
    impl HasWork<Self> for Watchdog { self.work }
}

impl WorkItem for Watchdog {
    type Pointer = Arc<Watchdog>;

    fn run(this: Arc<Watchdog>) {
        while !this.stop.load(Ordering::Acquire) {
            if let Ok(u) = registry::ulp() {
                u.tick();
            }
            msleep(TICK_MS);
        }
    }
}

/// The running watchdog; dropping it stops it and waits until it has.
pub(crate) struct WatchdogGuard(Arc<Watchdog>);

impl Watchdog {
    /// Starts the watchdog (process context).
    pub(crate) fn start() -> Result<WatchdogGuard> {
        let w = Arc::pin_init(
            pin_init!(Watchdog {
                stop: AtomicBool::new(false),
                work <- new_work!("rdma_rust_ulp_watchdog"),
            }),
            GFP_KERNEL,
        )?;
        workqueue::system_long()
            .enqueue(w.clone())
            .map_err(|_| EBUSY)?;
        Ok(WatchdogGuard(w))
    }
}

impl Drop for WatchdogGuard {
    fn drop(&mut self) {
        self.0.stop.store(true, Ordering::Release);
        // The loop ends within a tick. Waiting for the work function to have returned (not
        // just for a signal it sends) means no code of the module runs for it after this.
        flush_work(&self.0.work);
    }
}
