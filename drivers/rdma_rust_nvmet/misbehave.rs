// SPDX-License-Identifier: GPL-2.0

//! The target as a bad target, for the host's tests (the debugfs file `misbehave`): one I/O
//! completion, the next one it fits, breaks a rule of the protocol on purpose, and the host
//! must end the connection for it (and recover) without ending the wrong request.
//!
//! - `unknown_cid`: the completion names a command id whose tag the host never used (0xfff);
//! - `stale_cid`: it names the command's tag with another use counter (the id the tag had, or
//!   will have, for another command);
//! - `wrong_rkey`: a Read whose data went by RDMA WRITE is completed by SEND with invalidate of
//!   an rkey that is not the one the command named (its key byte changed);
//! - `reserved_status`: the completion's status has a reserved status code type (5), which no
//!   controller may send.
//!
//! One breaks no wire rule but the host's patience: `no_answer` never completes the command
//! (its data is not sent either); the host's timeout for it must fail the queue and recover,
//! and the command is carried out again on the new connection. `keep_alive_unanswered` does
//! the same to the next Keep Alive, on the admin queue: the host's keep-alive must notice it
//! (no answer within the keep-alive timeout) and recover.
//!
//! One bends no rule: `no_invalidate` answers a command that asked for remote invalidation
//! with a plain SEND. The invalidation is the host's request, not the target's duty: the host
//! must then invalidate its key itself (as nvme-rdma does with a LOCAL_INV), and the command
//! succeeds.
//!
//! Two more break the next Identify of their kind, on the admin queue, with absurd sizes:
//!
//! - `absurd_id_ctrl`: Identify Controller says an I/O command capsule is 16 bytes (IOCCSZ 1,
//!   where the command alone is 64);
//! - `absurd_id_ns`: Identify Namespace says the format in use has blocks of 2^40 bytes.
//!
//! Armed by writing the name (`none` disarms), fired once; the status file says which is armed
//! and how many fired.

use crate::ident::IDENTIFY_LEN;
use crate::proto::{admin, put32};
use core::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use kernel::prelude::*;

/// A rule broken on purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    UnknownCid = 1,
    StaleCid = 2,
    WrongRkey = 3,
    ReservedStatus = 4,
    AbsurdIdCtrl = 5,
    AbsurdIdNs = 6,
    NoInvalidate = 7,
    NoAnswer = 8,
    KeepAliveUnanswered = 9,
}

/// Each fault's name in the debugfs file, and its value in [`ARMED`] (0: none).
const NAMES: [(&str, u8); 10] = [
    ("none", 0),
    ("unknown_cid", Fault::UnknownCid as u8),
    ("stale_cid", Fault::StaleCid as u8),
    ("wrong_rkey", Fault::WrongRkey as u8),
    ("reserved_status", Fault::ReservedStatus as u8),
    ("absurd_id_ctrl", Fault::AbsurdIdCtrl as u8),
    ("absurd_id_ns", Fault::AbsurdIdNs as u8),
    ("no_invalidate", Fault::NoInvalidate as u8),
    ("no_answer", Fault::NoAnswer as u8),
    ("keep_alive_unanswered", Fault::KeepAliveUnanswered as u8),
];

static ARMED: AtomicU8 = AtomicU8::new(0);
static FIRED: AtomicU64 = AtomicU64::new(0);

/// Arms the fault `name` (or disarms, `none`); `EINVAL` for another name.
pub(crate) fn arm(name: &[u8]) -> Result {
    let name = name.strip_suffix(b"\n").unwrap_or(name);
    match NAMES.iter().find(|(n, _)| n.as_bytes() == name) {
        Some(&(_, v)) => {
            ARMED.store(v, Ordering::Release);
            Ok(())
        }
        None => {
            pr_err!("misbehave: unknown fault (one of: {Names})\n");
            Err(EINVAL)
        }
    }
}

/// Every fault's name, comma-separated, for the message that refuses another.
struct Names;

impl core::fmt::Display for Names {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for (i, (n, _)) in NAMES.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(n)?;
        }
        Ok(())
    }
}

/// The armed fault's name and how many fired.
pub(crate) fn status() -> (&'static str, u64) {
    let armed = ARMED.load(Ordering::Acquire);
    let name = NAMES
        .iter()
        .find(|(_, v)| *v == armed)
        .map_or("none", |(n, _)| *n);
    (name, FIRED.load(Ordering::Relaxed))
}

/// The fault to apply to the completion of a command `opcode` on queue `qid`, if one is armed
/// and fits it: on an I/O queue (`wrong_rkey` and `no_invalidate` need a completion that
/// invalidates), or a Keep Alive on the admin queue (0) for `keep_alive_unanswered`;
/// disarmed once taken.
pub(crate) fn take(qid: u16, opcode: u8, invalidates: bool) -> Option<Fault> {
    let armed = ARMED.load(Ordering::Acquire);
    if qid == 0 {
        return match armed {
            9 if opcode == admin::KEEP_ALIVE => fire(Fault::KeepAliveUnanswered),
            _ => None,
        };
    }
    let fault = match armed {
        1 => Fault::UnknownCid,
        2 => Fault::StaleCid,
        3 if invalidates => Fault::WrongRkey,
        4 => Fault::ReservedStatus,
        7 if invalidates => Fault::NoInvalidate,
        8 => Fault::NoAnswer,
        _ => return None,
    };
    fire(fault)
}

/// The fault to apply to the data of an Identify with CNS `cns`, if one is armed and fits it;
/// disarmed once taken.
fn take_identify(cns: u32) -> Option<Fault> {
    let fault = match (ARMED.load(Ordering::Acquire), cns) {
        (5, 1) => Fault::AbsurdIdCtrl,
        (6, 0) => Fault::AbsurdIdNs,
        _ => return None,
    };
    fire(fault)
}

/// Breaks the Identify data `b` (CNS `cns`, as the target made it) if a fault for it is armed.
pub(crate) fn identify(cns: u32, b: &mut [u8]) {
    if b.len() < IDENTIFY_LEN {
        return;
    }
    let Some(fault) = take_identify(cns) else {
        return;
    };
    match fault {
        // IOCCSZ, in 16-byte units.
        Fault::AbsurdIdCtrl => put32(b, 1792, 1),
        // LBADS of the format in use (FLBAS bits 0-3): the data size is 2^LBADS.
        Fault::AbsurdIdNs => {
            let lbaf = 128 + 4 * usize::from(b[26] & 0xf);
            b[lbaf + 2] = 40;
        }
        _ => return,
    }
    pr_info!("misbehaving on purpose ({fault:?}): Identify CNS {cns} with absurd sizes\n");
}

/// Takes the armed `fault`, unless another took it first.
fn fire(fault: Fault) -> Option<Fault> {
    ARMED
        .compare_exchange(fault as u8, 0, Ordering::AcqRel, Ordering::Acquire)
        .ok()?;
    FIRED.fetch_add(1, Ordering::Relaxed);
    Some(fault)
}
