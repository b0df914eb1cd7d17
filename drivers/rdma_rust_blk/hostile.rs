// SPDX-License-Identifier: GPL-2.0

//! A hostile initiator, for testing targets (the control command `probe`): one raw command sent
//! to a target, as a hostile or broken initiator would send it, and what the target did with
//! it. The commands a disk sends are always well formed.
//!
//! The probe connects one queue (of depth 1 unless asked) to the volume (a real handshake),
//! sends the command (opcode, tag, sector, length as given, and `inline` bytes of zeros after
//! it; opcodes 1 and 2 name the queue's registered buffer) or, with `imm`, a block write (the
//! `inline` bytes of zeros alone, in a SEND with that immediate data), waits up to
//! [`PROBE_MS`] for the answer or for the target to end the connection, `count` times in a
//! row, and disconnects. The outcome goes to the kernel log: `answered STATUS` (the last
//! answer), `the target ended the connection` or `the target refused the connection`.
//!
//! Its handshake may differ from a disk's ([`Handshake`](crate::initiator::Handshake)): other
//! responder resources offered, or (`abort`) a connect that refuses the target's accept,
//! logged as `aborted after the target's accept`.

use crate::initiator::{abort_connect, connect_queue, ConnectSpec};
use kernel::prelude::*;

/// How long a probe waits for its answer.
const PROBE_MS: u32 = 5000;

/// What to send.
pub(crate) struct ProbeSpec {
    /// The target and volume (one queue of depth 1).
    pub(crate) conn: ConnectSpec,
    pub(crate) op: u8,
    pub(crate) tag: u16,
    pub(crate) sector: u64,
    pub(crate) len: u32,
    pub(crate) inline: usize,
    /// Send a block write with this immediate data instead of the command.
    pub(crate) imm: Option<u32>,
    /// Times the command is sent, each after the last one's answer.
    pub(crate) count: u32,
}

impl core::fmt::Display for ProbeSpec {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let (op, tag, sector, len, inline) =
            (self.op, self.tag, self.sector, self.len, self.inline);
        let hs = self.conn.handshake;
        if hs.abort {
            write!(f, "abort=1")?;
        } else {
            write!(
                f,
                "op={op} tag={tag} sector={sector} len={len} inline={inline}"
            )?;
        }
        if let Some(imm) = self.imm {
            write!(f, " imm={imm}")?;
        }
        if self.count > 1 {
            write!(f, " count={}", self.count)?;
        }
        if self.conn.depth > 1 {
            write!(f, " depth={}", self.conn.depth)?;
        }
        if let Some(reads) = hs.reads {
            write!(f, " reads={reads}")?;
        }
        Ok(())
    }
}

/// Sends the probe and logs the outcome; `Err` if it could not be sent or nothing came back.
/// Process context; the connection is gone when it returns.
pub(crate) fn probe(spec: &ProbeSpec) -> Result {
    if spec.conn.handshake.abort {
        return match abort_connect(&spec.conn) {
            Ok(()) => {
                pr_info!("probe {spec}: aborted after the target's accept\n");
                Ok(())
            }
            Err(e) if e == ECONNREFUSED => {
                pr_info!("probe {spec}: the target refused the connection\n");
                Ok(())
            }
            Err(e) => Err(e),
        };
    }
    let q = match connect_queue(&spec.conn, 0) {
        Ok((q, _)) => q,
        Err(e) if e == ECONNREFUSED => {
            pr_info!("probe {spec}: the target refused the connection\n");
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let mut outcome = Err(EINVAL);
    for _ in 0..spec.count {
        outcome = q
            .probe(
                spec.op,
                spec.tag,
                spec.sector,
                spec.len,
                spec.inline,
                spec.imm,
            )
            .and_then(|()| q.probe_wait(PROBE_MS));
        if outcome.is_err() {
            break;
        }
    }
    q.close();
    match outcome {
        Ok(status) => {
            pr_info!("probe {spec}: answered {status}\n");
            Ok(())
        }
        Err(e) if e == ECONNRESET => {
            pr_info!("probe {spec}: the target ended the connection\n");
            Ok(())
        }
        Err(e) => {
            pr_err!("probe {spec}: {e:?}\n");
            Err(e)
        }
    }
}
