// SPDX-License-Identifier: GPL-2.0

//! The one way the ULP waits for its handlers: polling a direct CQ, or sleeping on a signal
//! they complete.

use kernel::prelude::*;
use kernel::rdma::{
    cq::{Cq, PollContext},
    sync::{cond_resched, msleep, Completion as Signal},
};
use kernel::time::Ktime;

/// How [`wait_until`] waits between looks at what it waits for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pace {
    /// Sleeps a little (on the signal, if there is one) when nothing happened.
    Sleep,
    /// Busy-polls a direct CQ, giving the CPU away only to tasks that wait for it
    /// (`cond_resched`): the lowest latency, at the price of a CPU, as perftest's latency
    /// tools poll. A pending signal ends the wait with `EINTR`.
    Spin,
}

/// Waits up to `ms` milliseconds until `done()` holds: polling `cq` meanwhile when its
/// completions are processed only by whoever polls it ([`PollContext::Direct`]), else sleeping
/// on `signal`, which the handlers complete when something worth looking at happened (or, with
/// no signal, for a few milliseconds at a time). `pace` says whether to sleep or spin between
/// polls of a direct CQ. `ETIMEDOUT` when the time is up. Process context.
pub(crate) fn wait_until(
    cq: Option<&Cq>,
    signal: Option<&Signal>,
    ms: u32,
    pace: Pace,
    mut done: impl FnMut() -> bool,
) -> Result {
    let direct = cq.filter(|c| c.poll_context() == PollContext::Direct);
    let spin = direct.is_some() && pace == Pace::Spin;
    let deadline = Ktime::ktime_get().to_ns() + i64::from(ms) * 1_000_000;
    while !done() {
        if Ktime::ktime_get().to_ns() >= deadline {
            return Err(ETIMEDOUT);
        }
        if let Some(cq) = direct {
            if cq.poll_direct(64).unwrap_or(0) > 0 {
                continue;
            }
        }
        if spin {
            if kernel::current!().signal_pending() {
                return Err(EINTR);
            }
            cond_resched();
            continue;
        }
        let step = if direct.is_some() { 1 } else { 10 };
        match signal {
            Some(s) => {
                let _ = s.wait_timeout(step);
            }
            None => msleep(step),
        }
    }
    Ok(())
}
