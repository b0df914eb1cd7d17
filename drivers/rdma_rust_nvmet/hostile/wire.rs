// SPDX-License-Identifier: GPL-2.0

//! What a hostile host sends: the limits and timeouts of a probe, and the connection
//! requests, Connects and raw capsules it is told to send, as parsed.

use crate::proto::{put16, put32, put64, MAX_TRANSFER, SQE_LEN};
use kernel::prelude::*;
use kernel::rdma::mr::Remote;

/// Bytes of private data a probe may send: what the CM carries after its own header.
pub(crate) const PD_MAX: usize = 56;
/// How long address and route resolution may take.
pub(super) const RESOLVE_MS: u32 = 2000;
/// How long a connection request may wait for its answer.
pub(super) const CONNECT_MS: u32 = 5000;
/// How long a SEND or a registration may take.
pub(super) const POST_MS: u32 = 3000;
/// The default wait for a completion.
pub(super) const WAIT_MS: u32 = 3000;
/// The fuzz stream's wait for a completion.
pub(super) const FUZZ_WAIT_MS: u32 = 300;
/// The probe's data buffer: the largest transfer the target takes.
pub(super) const DATA_LEN: usize = MAX_TRANSFER;
/// Receives posted for completions.
pub(super) const RECVS: u32 = 64;
/// Bytes of a receive: more than a completion, to see one that is longer.
pub(super) const RECV_LEN: usize = 64;
/// Completions kept until the probe looks at them.
pub(super) const SEEN_MAX: usize = 256;
/// Longest in-capsule data a probe sends (the target's I/O receives take 4 KiB).
pub(super) const DATA_MAX: usize = 8192;
/// Command IDs of the probe's own commands.
pub(super) const CID_CONNECT: u16 = 0xfff0;
pub(super) const CID_ENABLE: u16 = 0xfff1;
/// CC with EN, IOSQES 6, IOCQES 4: what hosts write.
pub(super) const CC_ENABLE: u32 = 0x0046_0001;
/// The host identifier of every probe.
pub(super) const HOSTID: [u8; 16] = *b"rust-nvmet-probe";

/// A connection request's private data (nvme_rdma_cm_req).
#[derive(Clone, Copy)]
pub(super) struct CmSpec {
    pub(super) recfmt: u16,
    pub(super) qid: u16,
    pub(super) hrqsize: u16,
    pub(super) hsqsize: u16,
    pub(super) len: usize,
    /// Responder resources offered (`None`: what the device allows, at most 16).
    pub(super) reads: Option<u8>,
}

impl CmSpec {
    pub(super) const ADMIN: Self = Self {
        recfmt: 0,
        qid: 0,
        hrqsize: 32,
        hsqsize: 31,
        len: 32,
        reads: None,
    };
    pub(super) const IO: Self = Self {
        recfmt: 0,
        qid: 1,
        hrqsize: 128,
        hsqsize: 127,
        len: 32,
        reads: None,
    };
}

/// A Connect's fields; `None` takes the value a correct host sends.
#[derive(Clone, Copy, Default)]
pub(super) struct ConnectSpec<'a> {
    pub(super) subnqn: Option<&'a [u8]>,
    pub(super) hostnqn: Option<&'a [u8]>,
    pub(super) qid: Option<u16>,
    pub(super) cntlid: Option<u16>,
    pub(super) sqsize: Option<u16>,
    pub(super) kato: u32,
    pub(super) inline: bool,
}

/// A raw capsule.
#[derive(Clone, Copy)]
pub(super) struct Cmd {
    pub(super) opc: u8,
    pub(super) flags: u8,
    pub(super) cid: u16,
    pub(super) nsid: u32,
    pub(super) cdw: [u32; 6],
    pub(super) sgl: u8,
    pub(super) len: u32,
    pub(super) key: Option<u32>,
    pub(super) addr: Option<u64>,
    pub(super) off: u64,
    pub(super) data: usize,
    pub(super) size: Option<usize>,
    pub(super) wait: u32,
}

impl Default for Cmd {
    fn default() -> Self {
        Self {
            opc: 0,
            flags: 0x40,
            cid: 1,
            nsid: 0,
            cdw: [0; 6],
            sgl: 0x40,
            len: 0,
            key: None,
            addr: None,
            off: 0,
            data: 0,
            size: None,
            wait: WAIT_MS,
        }
    }
}

impl Cmd {
    /// Whether its SGL is a keyed data block.
    pub(super) fn keyed(&self) -> bool {
        self.sgl >> 4 == 4
    }

    /// Whether it needs the probe's buffer registered (a keyed SGL with data and our key).
    pub(super) fn needs_mr(&self) -> bool {
        self.keyed() && self.len > 0 && self.key.is_none()
    }

    /// The capsule's bytes; `remote` is the probe's buffer.
    pub(super) fn encode(&self, remote: Remote) -> Result<KVec<u8>> {
        let mut b = KVec::from_elem(0u8, SQE_LEN + self.data, GFP_KERNEL)?;
        b[0] = self.opc;
        b[1] = self.flags;
        put16(&mut b, 2, self.cid);
        put32(&mut b, 4, self.nsid);
        if self.keyed() {
            let mine = self.len > 0;
            put64(
                &mut b,
                24,
                self.addr.unwrap_or(if mine { remote.addr } else { 0 }),
            );
            put32(&mut b, 32, self.len & 0x00ff_ffff);
            put32(
                &mut b,
                35,
                self.key.unwrap_or(if mine { remote.rkey } else { 0 }),
            );
        } else {
            put64(&mut b, 24, self.addr.unwrap_or(self.off));
            put32(&mut b, 32, self.len);
        }
        b[39] = self.sgl;
        for (i, d) in self.cdw.iter().enumerate() {
            put32(&mut b, 40 + 4 * i, *d);
        }
        for (i, x) in b.iter_mut().skip(SQE_LEN).enumerate() {
            *x = pattern(i);
        }
        if let Some(n) = self.size {
            b.truncate(n);
            while b.len() < n {
                b.push(0, GFP_KERNEL)?;
            }
        }
        Ok(b)
    }
}

/// The bytes of in-capsule data and of the buffer.
pub(super) fn pattern(i: usize) -> u8 {
    (i as u8) ^ 0xa5 ^ ((i >> 8) as u8)
}
