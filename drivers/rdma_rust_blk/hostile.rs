// SPDX-License-Identifier: GPL-2.0

//! A hostile initiator, for testing targets (the control command `probe`): one raw command sent
//! to a target, as a hostile or broken initiator would send it, and what the target did with
//! it. The commands a disk sends are always well formed.
//!
//! The probe connects one queue of depth 1 to the volume (a real handshake), sends the command
//! (opcode, tag, sector, length as given, and `inline` bytes of zeros after it; opcodes 1 and 2
//! name the queue's registered buffer) or, with `imm`, a block write (the `inline` bytes of
//! zeros alone, in a SEND with that immediate data), waits up to [`PROBE_MS`] for the answer
//! or for the target to end the connection, and disconnects. The outcome goes to the kernel
//! log: `answered STATUS` or `the target ended the connection`.

use crate::initiator::{connect_queue, ConnectSpec};
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
}

impl core::fmt::Display for ProbeSpec {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let (op, tag, sector, len, inline) =
            (self.op, self.tag, self.sector, self.len, self.inline);
        write!(
            f,
            "op={op} tag={tag} sector={sector} len={len} inline={inline}"
        )?;
        match self.imm {
            Some(imm) => write!(f, " imm={imm}"),
            None => Ok(()),
        }
    }
}

/// Sends the probe and logs the outcome; `Err` if it could not be sent or nothing came back.
/// Process context; the connection is gone when it returns.
pub(crate) fn probe(spec: &ProbeSpec) -> Result {
    let (q, _) = connect_queue(&spec.conn, 0)?;
    let outcome = q
        .probe(
            spec.op,
            spec.tag,
            spec.sector,
            spec.len,
            spec.inline,
            spec.imm,
        )
        .and_then(|()| q.probe_wait(PROBE_MS));
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
