// SPDX-License-Identifier: GPL-2.0

//! The target as a bad target, for the host's tests (the debugfs file `misbehave`): one I/O
//! completion, the next one it fits, breaks a rule of the protocol on purpose, and the host
//! must end the connection for it (and recover) without ending the wrong request.
//!
//! - `unknown_cid`: the completion names a command id whose tag the host never used (0xfff);
//! - `stale_cid`: it names the command's tag with another use counter (the id the tag had, or
//!   will have, for another command);
//! - `wrong_rkey`: a Read whose data went by RDMA WRITE is completed by SEND with invalidate of
//!   an rkey that is not the one the command named (its key byte changed).
//!
//! Armed by writing the name (`none` disarms), fired once; the status file says which is armed
//! and how many fired.

use core::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use kernel::prelude::*;

/// A rule broken on purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    UnknownCid = 1,
    StaleCid = 2,
    WrongRkey = 3,
}

const NAMES: [(&[u8], u8); 4] = [
    (b"none", 0),
    (b"unknown_cid", Fault::UnknownCid as u8),
    (b"stale_cid", Fault::StaleCid as u8),
    (b"wrong_rkey", Fault::WrongRkey as u8),
];

static ARMED: AtomicU8 = AtomicU8::new(0);
static FIRED: AtomicU64 = AtomicU64::new(0);

/// Arms the fault `name` (or disarms, `none`); `EINVAL` for another name.
pub(crate) fn arm(name: &[u8]) -> Result {
    let name = name.strip_suffix(b"\n").unwrap_or(name);
    match NAMES.iter().find(|(n, _)| *n == name) {
        Some(&(_, v)) => {
            ARMED.store(v, Ordering::Release);
            Ok(())
        }
        None => {
            pr_err!("misbehave: unknown fault (none, unknown_cid, stale_cid, wrong_rkey)\n");
            Err(EINVAL)
        }
    }
}

/// The armed fault's name and how many fired.
pub(crate) fn status() -> (&'static str, u64) {
    let armed = ARMED.load(Ordering::Acquire);
    let name = NAMES
        .iter()
        .find(|(_, v)| *v == armed)
        .and_then(|(n, _)| core::str::from_utf8(n).ok())
        .unwrap_or("none");
    (name, FIRED.load(Ordering::Relaxed))
}

/// The fault to apply to a completion on I/O queue `qid` (not the admin queue's, 0), if one
/// is armed and fits it (`wrong_rkey` needs a completion that invalidates); disarmed once
/// taken.
pub(crate) fn take(qid: u16, invalidates: bool) -> Option<Fault> {
    if qid == 0 {
        return None;
    }
    let fault = match ARMED.load(Ordering::Acquire) {
        1 => Fault::UnknownCid,
        2 => Fault::StaleCid,
        3 if invalidates => Fault::WrongRkey,
        _ => return None,
    };
    ARMED
        .compare_exchange(fault as u8, 0, Ordering::AcqRel, Ordering::Acquire)
        .ok()?;
    FIRED.fetch_add(1, Ordering::Relaxed);
    Some(fault)
}
