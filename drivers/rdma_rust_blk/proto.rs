// SPDX-License-Identifier: GPL-2.0

//! The wire protocol of rdma_rust_blk (see Documentation/rdma_rust_blk.rst).
//!
//! Everything is little endian. A connection is one RC QP made with rdma_cm; its private data
//! carries the handshake:
//!
//! - connect (initiator to target), [`Hello`], 44 bytes: `RRBD`, version (u16), queue index
//!   (u16), queue depth (u16), reserved (u16), volume name (32 bytes, NUL padded);
//! - accept (target to initiator), [`Welcome`], 28 bytes: `RRBD`, version (u16), 0 (u16),
//!   block size (u32), largest I/O in bytes (u32), capacity in bytes (u64), largest inline
//!   I/O in bytes (u32);
//! - reject, 8 bytes: `RRBD`, version (u16), why ([`Refusal`], u16).
//!
//! Each I/O is a [`Command`] in a SEND (32 bytes: opcode (u8), reserved (u8), tag (u16),
//! length (u32), sector (u64), address (u64), rkey (u32), reserved (u32)); the target moves the
//! data with RDMA READ (a write) or RDMA WRITE (a read) of the initiator's buffer and answers
//! with a [`Response`] (16 bytes: tag (u16), reserved (u16), status (i32, 0 or a negative
//! errno), reserved (u64)), in a SEND with invalidate of the command's rkey when the command
//! named a buffer, a plain SEND otherwise. An I/O of at most the welcome's inline size may
//! carry its data in the messages instead, with no buffer named (address and rkey 0): a
//! write's after its command in the same SEND ([`Opcode::WriteInline`]), a read's after its
//! successful answer ([`Opcode::ReadInline`]). No memory registration, no RDMA READ or WRITE,
//! no invalidation: for a 4 KiB I/O that is most of its cost on soft-RoCE.
//!
//! A write of exactly one block, at a block index below 2^24 ([`BLOCK_WRITE_BLOCKS`]), may come
//! with no command at all: its data alone in a SEND with immediate data, the immediate (32
//! bits) holding the tag in its top 8 bits and the block index below them
//! ([`Command::block_write_imm`]; a number, which the verbs carry big endian). It stands for
//! the inline write of that block and is answered as one. Four KiB of data and a 32-byte
//! command are five packets at soft-RoCE's MTU of 1,024 bytes; the data alone is four.
//!
//! Every message from a peer is checked here before anything acts on it: a malformed one is an
//! `EPROTO` (the connection is ended) or, for a well-formed command the target cannot honour,
//! an error answer.

use kernel::prelude::*;

/// The protocol's magic, first in every private data.
pub(crate) const MAGIC: [u8; 4] = *b"RRBD";
/// The protocol version this module speaks.
pub(crate) const VERSION: u16 = 3;
/// Longest volume name, in bytes.
pub(crate) const NAME_MAX: usize = 32;
/// Bytes per sector, the unit of [`Command::sector`].
pub(crate) const SECTOR: u64 = 512;
/// Largest I/O a command moves.
pub(crate) const MAX_IO: u32 = 128 * 1024;
/// Largest discard a command asks: the target zeroes the range in its CQ's work item, so a
/// longer one would hold up the connection's other completions.
pub(crate) const MAX_DISCARD: u32 = 8 << 20;
/// Deepest queue a connection may ask for.
pub(crate) const MAX_DEPTH: u16 = 128;
/// Largest I/O that carries its data in its messages (and what a target offers).
pub(crate) const INLINE_MAX: u32 = 4096;
/// Size of a [`Command`].
pub(crate) const CMD_LEN: usize = 32;
/// Size of a [`Response`].
pub(crate) const RESP_LEN: usize = 16;
/// Block indexes a block write's immediate can name (24 bits; the tag has the other 8).
pub(crate) const BLOCK_WRITE_BLOCKS: u64 = 1 << 24;
const HELLO_LEN: usize = 44;
const WELCOME_LEN: usize = 28;

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from(u32_at(b, at)) | (u64::from(u32_at(b, at + 4)) << 32)
}

/// Copies what fits of `v` into `b` from `at` on. (A loop rather than `copy_from_slice`: 6.12's
/// objtool does not know that the length check of rustc 1.96's `copy_from_slice` never
/// returns.)
pub(crate) fn put(b: &mut [u8], at: usize, v: &[u8]) {
    for (d, s) in b[at..].iter_mut().zip(v) {
        *d = *s;
    }
}

/// A volume name: 1 to [`NAME_MAX`] bytes of letters, digits, `-`, `_` and `.`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Name {
    bytes: [u8; NAME_MAX],
    len: usize,
}

impl Name {
    /// `EINVAL` unless `s` is a valid name.
    pub(crate) fn new(s: &[u8]) -> Result<Self> {
        let ok = |c: &u8| c.is_ascii_alphanumeric() || b"-_.".contains(c);
        if s.is_empty() || s.len() > NAME_MAX || !s.iter().all(ok) {
            return Err(EINVAL);
        }
        let mut bytes = [0u8; NAME_MAX];
        put(&mut bytes, 0, s);
        Ok(Self {
            bytes,
            len: s.len(),
        })
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl core::fmt::Display for Name {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Only ASCII (checked by `new`).
        for &c in self.as_bytes() {
            core::fmt::Write::write_char(f, c as char)?;
        }
        Ok(())
    }
}

/// Why a target refused a connection (in its reject's private data).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The connect's private data is not a [`Hello`] of this version.
    BadHello = 1,
    /// No volume of that name is exported on this address.
    NoVolume = 2,
    /// The queue depth or index is out of range.
    BadQueue = 3,
    /// The target has no resources for another connection.
    Busy = 4,
    /// The connect offers no responder resources: the target could not RDMA READ a write's
    /// data.
    NoReads = 5,
}

impl Refusal {
    pub(crate) fn encode(self) -> [u8; 8] {
        let mut b = [0u8; 8];
        put(&mut b, 0, &MAGIC);
        put(&mut b, 4, &VERSION.to_le_bytes());
        put(&mut b, 6, &(self as u16).to_le_bytes());
        b
    }

    /// The refusal in a reject's private data, if it is one of ours.
    pub(crate) fn decode(b: &[u8]) -> Option<Self> {
        if b.len() < 8 || b[..4] != MAGIC {
            return None;
        }
        match u16_at(b, 6) {
            1 => Some(Self::BadHello),
            2 => Some(Self::NoVolume),
            3 => Some(Self::BadQueue),
            4 => Some(Self::Busy),
            5 => Some(Self::NoReads),
            _ => None,
        }
    }
}

/// The initiator's connect private data.
#[derive(Clone, Copy)]
pub(crate) struct Hello {
    pub(crate) queue: u16,
    pub(crate) depth: u16,
    pub(crate) name: Name,
}

impl Hello {
    pub(crate) fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        put(&mut b, 0, &MAGIC);
        put(&mut b, 4, &VERSION.to_le_bytes());
        put(&mut b, 6, &self.queue.to_le_bytes());
        put(&mut b, 8, &self.depth.to_le_bytes());
        put(&mut b, 12, self.name.as_bytes());
        b
    }

    /// A peer's hello: `BadHello` unless magic, version and name are right, `BadQueue` for a
    /// depth of 0 or over [`MAX_DEPTH`].
    pub(crate) fn decode(b: &[u8]) -> Result<Self, Refusal> {
        if b.len() < HELLO_LEN || b[..4] != MAGIC || u16_at(b, 4) != VERSION {
            return Err(Refusal::BadHello);
        }
        let raw = &b[12..12 + NAME_MAX];
        let len = raw.iter().position(|&c| c == 0).unwrap_or(NAME_MAX);
        // Padding after the name must be all zero: a name is never ambiguous.
        if raw[len..].iter().any(|&c| c != 0) {
            return Err(Refusal::BadHello);
        }
        let name = Name::new(&raw[..len]).map_err(|_| Refusal::BadHello)?;
        let depth = u16_at(b, 8);
        if depth == 0 || depth > MAX_DEPTH {
            return Err(Refusal::BadQueue);
        }
        Ok(Self {
            queue: u16_at(b, 6),
            depth,
            name,
        })
    }
}

/// The target's accept private data: what the volume is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Welcome {
    pub(crate) block_size: u32,
    pub(crate) max_io: u32,
    pub(crate) capacity: u64,
    /// Largest I/O the target takes with its data inline (0: none).
    pub(crate) inline_max: u32,
}

impl Welcome {
    pub(crate) fn encode(&self) -> [u8; WELCOME_LEN] {
        let mut b = [0u8; WELCOME_LEN];
        put(&mut b, 0, &MAGIC);
        put(&mut b, 4, &VERSION.to_le_bytes());
        put(&mut b, 8, &self.block_size.to_le_bytes());
        put(&mut b, 12, &self.max_io.to_le_bytes());
        put(&mut b, 16, &self.capacity.to_le_bytes());
        put(&mut b, 24, &self.inline_max.to_le_bytes());
        b
    }

    /// A target's welcome: `EPROTO` unless it is well formed, with a block size of 512 to 4096
    /// (a power of two), an I/O size of at least one page, a capacity of at least one block, a
    /// multiple of the block size, and an inline size within [`INLINE_MAX`] and the I/O size.
    pub(crate) fn decode(b: &[u8]) -> Result<Self> {
        if b.len() < WELCOME_LEN || b[..4] != MAGIC || u16_at(b, 4) != VERSION {
            return Err(EPROTO);
        }
        let w = Self {
            block_size: u32_at(b, 8),
            max_io: u32_at(b, 12),
            capacity: u64_at(b, 16),
            inline_max: u32_at(b, 24),
        };
        let bs = w.block_size;
        if !(512..=4096).contains(&bs)
            || !bs.is_power_of_two()
            || (w.max_io as usize) < kernel::page::PAGE_SIZE
            || w.capacity < u64::from(bs)
            || w.capacity % u64::from(bs) != 0
            || w.inline_max > INLINE_MAX.min(w.max_io)
        {
            return Err(EPROTO);
        }
        Ok(w)
    }
}

/// What a command asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Opcode {
    Read = 1,
    Write = 2,
    Flush = 3,
    Discard = 4,
    /// A read whose data comes back after its answer, in the same SEND.
    ReadInline = 5,
    /// A write whose data follows the command, in the same SEND.
    WriteInline = 6,
}

impl Opcode {
    /// Whether a command of this opcode names a buffer of the initiator, registered for the
    /// target's RDMA (its answer then revokes the buffer's rkey).
    pub(crate) fn names_buffer(self) -> bool {
        matches!(self, Opcode::Read | Opcode::Write)
    }
}

/// One I/O.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Command {
    pub(crate) op: Opcode,
    pub(crate) tag: u16,
    pub(crate) len: u32,
    pub(crate) sector: u64,
    pub(crate) addr: u64,
    pub(crate) rkey: u32,
}

impl Command {
    pub(crate) fn encode(&self, b: &mut [u8]) {
        b[..CMD_LEN].fill(0);
        b[0] = self.op as u8;
        put(b, 2, &self.tag.to_le_bytes());
        put(b, 4, &self.len.to_le_bytes());
        put(b, 8, &self.sector.to_le_bytes());
        put(b, 16, &self.addr.to_le_bytes());
        put(b, 24, &self.rkey.to_le_bytes());
    }

    /// A received message: the command and, for an inline write, its data. `EPROTO` for an
    /// unknown opcode, a message that is not exactly a command (an inline write: a command and
    /// its `len` bytes, at most [`INLINE_MAX`]), or an inline command that names a buffer.
    /// Whether its range and length make sense is the target's to check ([`Command::range`]).
    pub(crate) fn decode(b: &[u8]) -> Result<(Self, &[u8])> {
        let (Some(head), Some(data)) = (b.get(..CMD_LEN), b.get(CMD_LEN..)) else {
            return Err(EPROTO);
        };
        let op = match head[0] {
            1 => Opcode::Read,
            2 => Opcode::Write,
            3 => Opcode::Flush,
            4 => Opcode::Discard,
            5 => Opcode::ReadInline,
            6 => Opcode::WriteInline,
            _ => return Err(EPROTO),
        };
        let cmd = Self {
            op,
            tag: u16_at(head, 2),
            len: u32_at(head, 4),
            sector: u64_at(head, 8),
            addr: u64_at(head, 16),
            rkey: u32_at(head, 24),
        };
        let inline = matches!(op, Opcode::ReadInline | Opcode::WriteInline);
        let data_len = if op == Opcode::WriteInline {
            cmd.len as usize
        } else {
            0
        };
        if data.len() != data_len
            || data_len > INLINE_MAX as usize
            || (inline && (cmd.addr != 0 || cmd.rkey != 0))
        {
            return Err(EPROTO);
        }
        Ok((cmd, data))
    }

    /// The immediate data of a block write standing for an inline write of `len` bytes at
    /// `sector` on `tag`, to a volume of blocks of `block` bytes; `None` unless that is exactly
    /// one whole block whose index and tag fit (the write then goes with its command).
    pub(crate) fn block_write_imm(tag: u16, sector: u64, len: u32, block: u32) -> Option<u32> {
        let per_block = u64::from(block) / SECTOR;
        if len != block || per_block == 0 || sector % per_block != 0 || tag > 0xff {
            return None;
        }
        let index = sector / per_block;
        (index < BLOCK_WRITE_BLOCKS).then_some((u32::from(tag) << 24) | index as u32)
    }

    /// The inline write a block write stands for: its immediate data, and how many bytes it
    /// carried (`EPROTO` unless exactly one block of `block` bytes). Whether the block lies in
    /// the volume is the target's to check ([`Command::range`]).
    pub(crate) fn from_block_write(imm: u32, data_len: usize, block: u32) -> Result<Self> {
        if data_len != block as usize {
            return Err(EPROTO);
        }
        Ok(Self {
            op: Opcode::WriteInline,
            tag: (imm >> 24) as u16,
            len: block,
            sector: u64::from(imm & 0xff_ffff) * (u64::from(block) / SECTOR),
            addr: 0,
            rkey: 0,
        })
    }

    /// Whether the command names a buffer of the initiator (its answer then revokes `rkey`).
    pub(crate) fn has_data(&self) -> bool {
        self.op.names_buffer()
    }

    /// The byte range of a volume of `capacity` bytes the command addresses: `EINVAL` for a
    /// length of 0 (but for a flush, which has none), not a multiple of `block`, over
    /// [`MAX_IO`] for data ([`INLINE_MAX`] inline, [`MAX_DISCARD`] for a discard), or a range
    /// that does not lie inside the volume.
    pub(crate) fn range(&self, capacity: u64, block: u32) -> Result<core::ops::Range<u64>> {
        if self.op == Opcode::Flush {
            return if self.len == 0 { Ok(0..0) } else { Err(EINVAL) };
        }
        let max = match self.op {
            Opcode::ReadInline | Opcode::WriteInline => INLINE_MAX,
            Opcode::Read | Opcode::Write => MAX_IO,
            Opcode::Discard => MAX_DISCARD,
            Opcode::Flush => u32::MAX,
        };
        if self.len == 0 || self.len % block != 0 || self.len > max {
            return Err(EINVAL);
        }
        let start = self.sector.checked_mul(SECTOR).ok_or(EINVAL)?;
        let end = start.checked_add(u64::from(self.len)).ok_or(EINVAL)?;
        if start % u64::from(block) != 0 || end > capacity {
            return Err(EINVAL);
        }
        Ok(start..end)
    }
}

/// The answer to a command.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Response {
    pub(crate) tag: u16,
    /// 0, or a negative errno.
    pub(crate) status: i32,
}

impl Response {
    pub(crate) fn encode(&self, b: &mut [u8]) {
        b[..RESP_LEN].fill(0);
        put(b, 0, &self.tag.to_le_bytes());
        put(b, 4, &self.status.to_le_bytes());
    }

    /// A received message: the answer and, after a successful one, an inline read's data
    /// (whether that fits its command is the initiator's to check). `EPROTO` for a message
    /// shorter than an answer, data over [`INLINE_MAX`] or after an error, or a status that is
    /// not 0 or an errno.
    pub(crate) fn decode(b: &[u8]) -> Result<(Self, &[u8])> {
        let (Some(head), Some(data)) = (b.get(..RESP_LEN), b.get(RESP_LEN..)) else {
            return Err(EPROTO);
        };
        let status = u32_at(head, 4) as i32;
        if !(-4095..=0).contains(&status)
            || data.len() > INLINE_MAX as usize
            || (status != 0 && !data.is_empty())
        {
            return Err(EPROTO);
        }
        Ok((
            Self {
                tag: u16_at(head, 0),
                status,
            },
            data,
        ))
    }
}
