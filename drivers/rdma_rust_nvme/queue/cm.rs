// SPDX-License-Identifier: GPL-2.0

//! A queue's rdma_cm id: the events of its connection, which `connect.rs` waits for while it
//! connects, and which fail the queue once the connection ends.

use super::Queue;
use crate::proto::cm_reject_status;
use kernel::new_mutex;
use kernel::prelude::*;
use kernel::rdma::{
    cm::{Event, Handler, Id},
    sync::Completion as Signal,
};
use kernel::sync::{Arc, Mutex};

/// How far a queue's connection has come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    Idle,
    AddrResolved,
    RouteResolved,
    Established,
    Failed(Error),
}

/// What a queue's id handler shares with the thread that connects it.
#[pin_data]
pub(crate) struct Waiter {
    #[pin]
    step: Mutex<Step>,
    #[pin]
    signal: Signal,
    /// The queue, once connected: failed when the connection ends.
    #[pin]
    queue: Mutex<Option<Arc<Queue>>>,
}

impl Waiter {
    fn set(&self, s: Step) {
        *self.step.lock() = s;
        self.signal.complete();
    }

    /// Waits up to `ms` for step `want`.
    pub(crate) fn wait(&self, want: Step, ms: u32) -> Result {
        let in_time = self.signal.wait_timeout(ms).is_ok();
        let now = *self.step.lock();
        self.signal.reinit();
        match now {
            Step::Failed(e) => Err(e),
            s if s == want => Ok(()),
            _ if !in_time => Err(ETIMEDOUT),
            _ => Err(EPROTO),
        }
    }
}

/// The event handler of a queue's id.
pub(crate) struct Ev {
    waiter: Arc<Waiter>,
}

impl Waiter {
    /// A waiter at the start, and the handler of the id that reports to it.
    pub(crate) fn new() -> Result<(Arc<Self>, Ev)> {
        let waiter = Arc::pin_init(
            pin_init!(Waiter {
                step <- new_mutex!(Step::Idle, "rdma_rust_nvme_step"),
                signal <- Signal::new(),
                queue <- new_mutex!(None, "rdma_rust_nvme_waiter_queue"),
            }),
            GFP_KERNEL,
        )?;
        let ev = Ev {
            waiter: waiter.clone(),
        };
        Ok((waiter, ev))
    }

    /// The queue, once connected: the handler fails it when the connection ends.
    pub(crate) fn set_queue(&self, q: Arc<Queue>) {
        *self.queue.lock() = Some(q);
    }
}

impl Ev {
    /// Drops the handler's reference to its queue (`Queue::close`).
    pub(crate) fn forget_queue(&self) {
        drop(self.waiter.queue.lock().take());
    }
}

impl Handler for Ev {
    fn event(&self, id: &Id, event: Event<'_, Self>) {
        let w = &self.waiter;
        match event {
            Event::AddrResolved => w.set(Step::AddrResolved),
            Event::RouteResolved => w.set(Step::RouteResolved),
            Event::AddrError(e) | Event::RouteError(e) => w.set(Step::Failed(e)),
            Event::Established { .. } => w.set(Step::Established),
            Event::Rejected { private_data, .. } => {
                match cm_reject_status(private_data) {
                    Some(sts) => pr_err!("connect: the target refused the queue (status {sts})\n"),
                    None => pr_err!("connect: refused (nothing listens at that address?)\n"),
                }
                w.set(Step::Failed(ECONNREFUSED));
            }
            Event::Unreachable(e) | Event::ConnectError(e) => w.set(Step::Failed(e)),
            Event::Disconnected | Event::DeviceRemoval => {
                w.set(Step::Failed(ECONNRESET));
                let q = w.queue.lock().clone();
                if let Some(q) = q {
                    q.fail(format_args!("the target disconnected"), true);
                }
                if matches!(event, Event::Disconnected) {
                    let _ = id.disconnect();
                }
            }
            _ => {}
        }
    }
}
