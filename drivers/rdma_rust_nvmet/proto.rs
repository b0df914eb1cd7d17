// SPDX-License-Identifier: GPL-2.0

//! NVMe over Fabrics on RDMA, on the wire: what the host sends and what the target answers.
//!
//! Everything is little endian (include/linux/nvme.h and include/linux/nvme-rdma.h have the C
//! layouts). A queue is one RC connection made with rdma_cm, whose private data carries the
//! queue's number and sizes ([`CmRequest`]; accept: [`cm_reply`], reject: [`cm_reject`]). On
//! it, each command is a 64-byte capsule ([`Sqe`]) in a SEND, followed in the same SEND by its
//! data when it carries it in the capsule; every other transfer is named by a keyed SGL
//! descriptor ([`Sgl::Keyed`]), an rkey of the host's that the target reads (a write's data)
//! or writes (a read's). Each command ends with a 16-byte completion ([`Cqe`]) in a SEND,
//! with invalidate of the descriptor's rkey when the host asked for it.
//!
//! Every field a host sends is checked here or by the code that acts on it: a malformed
//! capsule gets the specification's status ([`Status`]), never a panic.

use kernel::prelude::*;

/// Bytes of a command capsule's command.
pub(crate) const SQE_LEN: usize = 64;
/// Bytes of a completion.
pub(crate) const CQE_LEN: usize = 16;
/// Data an I/O queue's capsule may carry after its command (IOCCSZ says so).
pub(crate) const INLINE_DATA: usize = 4096;
/// Bytes per logical block of every namespace.
pub(crate) const LBA_SIZE: usize = 4096;
/// log2 of [`LBA_SIZE`].
pub(crate) const LBA_SHIFT: u32 = 12;
/// Largest data transfer of one command: 2^MDTS minimum pages (CAP.MPSMIN is 4 KiB).
pub(crate) const MDTS: u8 = 5;
/// [`MDTS`] in bytes.
pub(crate) const MAX_TRANSFER: usize = 4096 << MDTS;
/// Entries of the admin queue (the host asks 32 and refuses nothing less).
pub(crate) const ADMIN_DEPTH: u16 = 32;
/// Deepest I/O queue the target serves (nvme-rdma asks 128 by default, at most 256).
pub(crate) const MAX_IO_DEPTH: u16 = 256;
/// I/O queues a controller grants at most (and the highest queue ID a connection may name).
pub(crate) const MAX_IO_QUEUES: u16 = 16;
/// The asynchronous event configuration bit (and OAES bit) of Namespace Attribute Notices,
/// the only events this target sends (`ctrl::events`).
pub(crate) const AEN_NS_ATTR: u32 = 1 << 8;
/// Longest NQN, without its NUL.
pub(crate) const NQN_MAX: usize = 223;
/// The well-known NQN of discovery controllers.
pub(crate) const DISCOVERY_NQN: &[u8] = b"nqn.2014-08.org.nvmexpress.discovery";

/// Reads a little-endian `u16` at `at` (0 past the end: callers pass fixed-size capsules).
pub(crate) fn le16(b: &[u8], at: usize) -> u16 {
    b.get(at..at + 2)
        .map_or(0, |s| u16::from_le_bytes([s[0], s[1]]))
}

/// Reads a little-endian `u32` at `at` (0 past the end).
pub(crate) fn le32(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .map_or(0, |s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// Reads a little-endian `u64` at `at` (0 past the end).
pub(crate) fn le64(b: &[u8], at: usize) -> u64 {
    u64::from(le32(b, at)) | (u64::from(le32(b, at + 4)) << 32)
}

/// Copies `src` into `dst` at `at`, as far as `dst` goes.
pub(crate) fn put(dst: &mut [u8], at: usize, src: &[u8]) {
    if let Some(d) = dst.get_mut(at..) {
        let n = d.len().min(src.len());
        d[..n].copy_from_slice(&src[..n]);
    }
}

/// Writes `v` little endian at `at`.
pub(crate) fn put16(dst: &mut [u8], at: usize, v: u16) {
    put(dst, at, &v.to_le_bytes());
}

/// Writes `v` little endian at `at`.
pub(crate) fn put32(dst: &mut [u8], at: usize, v: u32) {
    put(dst, at, &v.to_le_bytes());
}

/// Writes `v` little endian at `at`.
pub(crate) fn put64(dst: &mut [u8], at: usize, v: u64) {
    put(dst, at, &v.to_le_bytes());
}

/// Writes `text` into the `len`-byte field at `at`, padded with spaces (Identify's strings).
pub(crate) fn put_padded(dst: &mut [u8], at: usize, len: usize, text: &[u8]) {
    if let Some(d) = dst.get_mut(at..at + len) {
        d.fill(b' ');
        let n = len.min(text.len());
        d[..n].copy_from_slice(&text[..n]);
    }
}

/// The NUL-terminated string in `field` (a fixed-size field of a capsule or its data), or
/// `None` when it has no NUL or is empty.
pub(crate) fn c_field(field: &[u8]) -> Option<&[u8]> {
    let n = field.iter().position(|&b| b == 0)?;
    (n > 0).then(|| &field[..n])
}

/// A completion's status: the status code type and code (15 bits, without the phase), with
/// the Do Not Retry bit where the host must not retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Status(pub(crate) u16);

impl Status {
    pub(crate) const SUCCESS: Self = Self(0);
    /// Do Not Retry: the same command would fail again.
    pub(crate) const DNR: u16 = 0x4000;
    pub(crate) const INVALID_OPCODE: Self = Self(0x01 | Self::DNR);
    pub(crate) const INVALID_FIELD: Self = Self(0x02 | Self::DNR);
    pub(crate) const CMDID_CONFLICT: Self = Self(0x03 | Self::DNR);
    pub(crate) const DATA_XFER_ERROR: Self = Self(0x04);
    pub(crate) const INTERNAL: Self = Self(0x06);
    pub(crate) const INVALID_NS: Self = Self(0x0b | Self::DNR);
    pub(crate) const CMD_SEQ_ERROR: Self = Self(0x0c | Self::DNR);
    pub(crate) const SGL_INVALID_DATA: Self = Self(0x0f | Self::DNR);
    pub(crate) const SGL_INVALID_TYPE: Self = Self(0x11 | Self::DNR);
    pub(crate) const SGL_INVALID_OFFSET: Self = Self(0x16 | Self::DNR);
    pub(crate) const KA_TIMEOUT_INVALID: Self = Self(0x1a | Self::DNR);
    pub(crate) const LBA_RANGE: Self = Self(0x80 | Self::DNR);
    pub(crate) const ASYNC_LIMIT: Self = Self(0x105 | Self::DNR);
    pub(crate) const INVALID_LOG_PAGE: Self = Self(0x109 | Self::DNR);
    pub(crate) const FEATURE_NOT_SAVEABLE: Self = Self(0x10d | Self::DNR);
    pub(crate) const FEATURE_NOT_CHANGEABLE: Self = Self(0x10e | Self::DNR);
    /// Fabrics: Connect's fields are not what the target takes.
    pub(crate) const CONNECT_INVALID_PARAM: Self = Self(0x182 | Self::DNR);
    /// Fabrics: the host is not allowed on the subsystem.
    pub(crate) const CONNECT_INVALID_HOST: Self = Self(0x184 | Self::DNR);
    /// Fabrics: the controller is busy (its queue is connected already).
    pub(crate) const CONNECT_CTRL_BUSY: Self = Self(0x181 | Self::DNR);
    /// Fabrics: Connect's record format.
    pub(crate) const CONNECT_FORMAT: Self = Self(0x180 | Self::DNR);

    pub(crate) fn is_ok(self) -> bool {
        self.0 == 0
    }
}

/// Admin command opcodes the target carries out.
pub(crate) mod admin {
    pub(crate) const GET_LOG_PAGE: u8 = 0x02;
    pub(crate) const IDENTIFY: u8 = 0x06;
    pub(crate) const SET_FEATURES: u8 = 0x09;
    pub(crate) const GET_FEATURES: u8 = 0x0a;
    pub(crate) const ASYNC_EVENT: u8 = 0x0c;
    pub(crate) const KEEP_ALIVE: u8 = 0x18;
}

/// I/O command opcodes the target carries out.
pub(crate) mod io {
    pub(crate) const FLUSH: u8 = 0x00;
    pub(crate) const WRITE: u8 = 0x01;
    pub(crate) const READ: u8 = 0x02;
    pub(crate) const WRITE_ZEROES: u8 = 0x08;
    pub(crate) const DSM: u8 = 0x09;
}

/// The Fabrics command opcode (on every queue), and its command types.
pub(crate) const FABRICS: u8 = 0x7f;
pub(crate) const FCTYPE_PROP_SET: u8 = 0x00;
pub(crate) const FCTYPE_CONNECT: u8 = 0x01;
pub(crate) const FCTYPE_PROP_GET: u8 = 0x04;

/// Controller registers a host reads and writes with Property Get and Set.
pub(crate) mod reg {
    pub(crate) const CAP: u32 = 0x00;
    pub(crate) const VS: u32 = 0x08;
    pub(crate) const CC: u32 = 0x14;
    pub(crate) const CSTS: u32 = 0x1c;
}

/// How a capsule names its data: the SGL descriptor of its DPTR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sgl {
    /// A keyed data block: `len` bytes at `addr` under `key`, to be invalidated with the
    /// completion (SEND_WITH_INV) when `invalidate`. A length of 0 means no data.
    Keyed {
        addr: u64,
        len: u32,
        key: u32,
        invalidate: bool,
    },
    /// Data in the capsule, `len` bytes at `offset` after the command.
    Inline { offset: u64, len: u32 },
}

impl Sgl {
    /// The descriptor at bytes 24..40 of `sqe`; `Err` with the status of a type the target
    /// does not offer (SGLS in Identify says which).
    fn decode(sqe: &[u8]) -> Result<Self, Status> {
        let ty = sqe.get(39).copied().unwrap_or(0);
        match (ty >> 4, ty & 0xf) {
            // Keyed data block, address (0x0) or with invalidate (0xf): 64-bit address, 24-bit
            // length, 32-bit key.
            (0x4, sub @ (0x0 | 0xf)) => Ok(Sgl::Keyed {
                addr: le64(sqe, 24),
                len: le32(sqe, 32) & 0x00ff_ffff,
                key: le32(sqe, 35),
                invalidate: sub == 0xf,
            }),
            // Data block, offset (0x1): in-capsule data.
            (0x0, 0x1) => Ok(Sgl::Inline {
                offset: le64(sqe, 24),
                len: le32(sqe, 32),
            }),
            _ => Err(Status::SGL_INVALID_TYPE),
        }
    }

    /// The bytes the descriptor names.
    pub(crate) fn len(&self) -> usize {
        match *self {
            Sgl::Keyed { len, .. } | Sgl::Inline { len, .. } => len as usize,
        }
    }
}

/// A command capsule's command, its fields decoded (the 64 bytes are kept for the rest).
#[derive(Clone, Copy)]
pub(crate) struct Sqe {
    pub(crate) raw: [u8; SQE_LEN],
    pub(crate) opcode: u8,
    pub(crate) cid: u16,
    pub(crate) nsid: u32,
    /// The data descriptor; `Err` for one the target does not take (answered with it).
    pub(crate) sgl: Result<Sgl, Status>,
}

impl Sqe {
    /// Decodes the command at the start of `b` (a capsule of `b.len()` bytes); `None` when
    /// `b` is shorter than a command: that is no capsule at all.
    pub(crate) fn decode(b: &[u8]) -> Option<Self> {
        let raw: [u8; SQE_LEN] = b.get(..SQE_LEN)?.try_into().ok()?;
        // Byte 1: fused operation (bits 0-1) must be 0, PSDT (bits 6-7) must say SGLs (01b),
        // as every fabrics command does.
        let flags = raw[1];
        let sgl = if flags & 0x3 != 0 || flags >> 6 != 1 {
            Err(Status::INVALID_FIELD)
        } else {
            Sgl::decode(&raw)
        };
        Some(Self {
            opcode: raw[0],
            cid: le16(&raw, 2),
            nsid: le32(&raw, 4),
            sgl,
            raw,
        })
    }

    /// Command dword `n` (10 to 15).
    pub(crate) fn cdw(&self, n: usize) -> u32 {
        le32(&self.raw, 4 * n)
    }

    /// The Fabrics command type (byte 4) of a Fabrics command.
    pub(crate) fn fctype(&self) -> u8 {
        self.raw[4]
    }
}

/// A completion: the command's result and status, echoing its command id.
pub(crate) struct Cqe {
    pub(crate) result: u64,
    pub(crate) sq_head: u16,
    pub(crate) sq_id: u16,
    pub(crate) cid: u16,
    pub(crate) status: Status,
}

impl Cqe {
    /// Writes the completion into `b` (16 bytes). The phase bit is 0: it has no meaning on a
    /// fabric.
    pub(crate) fn encode(&self, b: &mut [u8]) {
        put64(b, 0, self.result);
        put16(b, 8, self.sq_head);
        put16(b, 10, self.sq_id);
        put16(b, 12, self.cid);
        put16(b, 14, self.status.0 << 1);
    }
}

/// Why a connection request is refused (nvme_rdma_cm_status), sent in the reject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CmRefusal {
    InvalidLen = 1,
    InvalidRecfmt = 2,
    InvalidQid = 3,
    InvalidHsqsize = 4,
    InvalidHrqsize = 5,
    NoResources = 6,
    InvalidIrd = 7,
}

/// The reject's private data: record format 0 and why.
pub(crate) fn cm_reject(why: CmRefusal) -> [u8; 4] {
    let mut b = [0u8; 4];
    put16(&mut b, 2, why as u16);
    b
}

/// The accept's private data (32 bytes): record format 0 and the queue's size.
pub(crate) fn cm_reply(crqsize: u16) -> [u8; 32] {
    let mut b = [0u8; 32];
    put16(&mut b, 2, crqsize);
    b
}

/// A host's connection request (nvme_rdma_cm_req, 32 bytes).
#[derive(Clone, Copy, Debug)]
pub(crate) struct CmRequest {
    pub(crate) qid: u16,
    /// Receives the host keeps for completions: the target's send queue.
    pub(crate) hrqsize: u16,
    /// Commands the host may have out, less one: the target's receives are one more.
    pub(crate) hsqsize: u16,
}

impl CmRequest {
    /// Checks and decodes a request's private data.
    pub(crate) fn decode(b: &[u8]) -> Result<Self, CmRefusal> {
        if b.len() < 32 {
            return Err(CmRefusal::InvalidLen);
        }
        if le16(b, 0) != 0 {
            return Err(CmRefusal::InvalidRecfmt);
        }
        let req = Self {
            qid: le16(b, 2),
            hrqsize: le16(b, 4),
            hsqsize: le16(b, 6),
        };
        if req.qid > MAX_IO_QUEUES {
            return Err(CmRefusal::InvalidQid);
        }
        let max = if req.qid == 0 {
            ADMIN_DEPTH
        } else {
            MAX_IO_DEPTH
        };
        // hsqsize is 0-based: at least one command, at most the queue's limit.
        if u32::from(req.hsqsize) + 1 > u32::from(max) || req.hsqsize == 0 && req.qid != 0 {
            return Err(CmRefusal::InvalidHsqsize);
        }
        if req.hrqsize == 0 || req.hrqsize > max {
            return Err(CmRefusal::InvalidHrqsize);
        }
        Ok(req)
    }

    /// Entries of the queue: the commands the host may have out.
    pub(crate) fn depth(&self) -> u16 {
        self.hsqsize + 1
    }
}

/// Bytes of a Fabrics Connect's data (nvmf_connect_data).
pub(crate) const CONNECT_DATA_LEN: usize = 1024;

/// A Fabrics Connect: from its command and its 1,024 bytes of data.
pub(crate) struct Connect<'a> {
    pub(crate) qid: u16,
    /// 0-based queue size.
    pub(crate) sqsize: u16,
    /// Keep-alive timeout in milliseconds (admin queue; 0: none).
    pub(crate) kato: u32,
    pub(crate) hostid: [u8; 16],
    pub(crate) cntlid: u16,
    pub(crate) subnqn: &'a [u8],
    pub(crate) hostnqn: &'a [u8],
}

impl<'a> Connect<'a> {
    /// Decodes a Connect of `sqe` with its `data`; `Err` with the status for a record format
    /// other than 0 or NQNs that are not NUL-terminated strings within their fields.
    pub(crate) fn decode(sqe: &Sqe, data: &'a [u8]) -> Result<Self, Status> {
        if le16(&sqe.raw, 40) != 0 {
            return Err(Status::CONNECT_FORMAT);
        }
        if data.len() < CONNECT_DATA_LEN {
            return Err(Status::SGL_INVALID_DATA);
        }
        let nqn = |at: usize| {
            c_field(&data[at..at + 256])
                .filter(|s| s.len() <= NQN_MAX)
                .ok_or(Status::CONNECT_INVALID_PARAM)
        };
        let mut hostid = [0u8; 16];
        hostid.copy_from_slice(&data[..16]);
        Ok(Self {
            qid: le16(&sqe.raw, 42),
            sqsize: le16(&sqe.raw, 44),
            kato: le32(&sqe.raw, 48),
            hostid,
            cntlid: le16(data, 16),
            subnqn: nqn(256)?,
            hostnqn: nqn(512)?,
        })
    }
}

/// Shows bytes from the wire as text in a message (non-printable bytes as `?`).
pub(crate) struct Text<'a>(pub(crate) &'a [u8]);

impl core::fmt::Display for Text<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for &b in self.0 {
            let c = if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '?'
            };
            core::fmt::Write::write_char(f, c)?;
        }
        Ok(())
    }
}
