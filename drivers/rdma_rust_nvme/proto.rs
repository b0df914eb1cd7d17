// SPDX-License-Identifier: GPL-2.0

//! NVMe over Fabrics on RDMA from the host's side: the capsules it sends and what it takes
//! back.
//!
//! The encodings and checks the target makes are in `rdma_rust_nvmet`'s `proto.rs`, which
//! this module shares (as `wire`): field helpers, statuses, opcodes. Here is what only a host
//! does: build commands ([`Command`]), read completions ([`Cqe`]) and the target's Identify
//! data ([`IdCtrl`], [`IdNs`]), every field from the wire checked before it is used.

pub(crate) use crate::wire::{
    admin, io, le16, le32, le64, put, put16, put32, put64, reg, Text, CONNECT_DATA_LEN, CQE_LEN,
    FABRICS, FCTYPE_CONNECT, FCTYPE_PROP_GET, FCTYPE_PROP_SET, NQN_MAX, SQE_LEN,
};

/// Entries of the admin queue, as nvme-rdma asks.
pub(crate) const ADMIN_DEPTH: u16 = 32;
/// Bits of a command id that name the tag; the rest count the tag's uses (nvme's
/// `nvme_cid`), so that a late or repeated completion never ends the tag's next command.
pub(crate) const TAG_BITS: u32 = 12;
/// Bytes of Identify data.
pub(crate) const IDENTIFY_LEN: usize = 4096;
/// Identify's CNS values the host asks.
pub(crate) const CNS_NS: u32 = 0;
pub(crate) const CNS_CTRL: u32 = 1;
pub(crate) const CNS_ACTIVE_NS: u32 = 2;
pub(crate) const CNS_NS_DESCS: u32 = 3;
/// Set Features' feature: Number of Queues.
pub(crate) const FID_NUM_QUEUES: u32 = 0x07;
/// Set Features' feature: Asynchronous Event Configuration.
pub(crate) const FID_ASYNC_EVENT: u32 = 0x0b;
/// Namespace Attribute Notices: bit 8 of OAES (Identify) and of the configuration.
pub(crate) const AEN_NS_ATTR: u32 = 1 << 8;
/// The Changed Namespace List log page, and its size.
pub(crate) const LOG_CHANGED_NS: u8 = 0x04;
pub(crate) const LOG_CHANGED_NS_LEN: usize = 4096;

/// The command id of `tag`'s use number `gen`.
pub(crate) fn cid(tag: u16, gen: u16) -> u16 {
    ((gen & 0xf) << TAG_BITS) | (tag & ((1 << TAG_BITS) - 1))
}

/// The tag a command id names.
pub(crate) fn cid_tag(cid: u16) -> u16 {
    cid & ((1 << TAG_BITS) - 1)
}

/// How a command names its data (its DPTR, an SGL descriptor).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dptr {
    /// No data: a keyed data block of length 0, as nvme-rdma sends.
    None,
    /// `len` bytes at `addr` under `key`, which the target invalidates with its completion.
    Keyed { addr: u64, len: u32, key: u32 },
    /// `len` bytes in the capsule, right after the command.
    InCapsule { len: u32 },
}

/// A command capsule's 64 bytes.
#[derive(Clone, Copy)]
pub(crate) struct Command(pub(crate) [u8; SQE_LEN]);

impl Command {
    /// A command with `opcode` on namespace `nsid`; data by SGL (PSDT 01b), as every fabrics
    /// command's.
    pub(crate) fn new(opcode: u8, nsid: u32) -> Self {
        let mut b = [0u8; SQE_LEN];
        b[0] = opcode;
        b[1] = 0x40;
        put32(&mut b, 4, nsid);
        Self(b)
    }

    /// A Fabrics command of type `fctype`.
    pub(crate) fn fabrics(fctype: u8) -> Self {
        let mut c = Self::new(FABRICS, 0);
        c.0[4] = fctype;
        c
    }

    pub(crate) fn opcode(&self) -> u8 {
        self.0[0]
    }

    pub(crate) fn set_cid(&mut self, cid: u16) {
        put16(&mut self.0, 2, cid);
    }

    /// Sets command dword `n` (10 to 15).
    pub(crate) fn cdw(mut self, n: usize, v: u32) -> Self {
        put32(&mut self.0, 4 * n, v);
        self
    }

    pub(crate) fn set_dptr(&mut self, d: Dptr) {
        let b = &mut self.0;
        b[24..40].fill(0);
        match d {
            // Keyed data block (type 4), subtype "invalidate key" (0xf).
            Dptr::None => b[39] = 0x40,
            Dptr::Keyed { addr, len, key } => {
                put64(b, 24, addr);
                // 24-bit length, then the 32-bit key.
                put(b, 32, &len.to_le_bytes()[..3]);
                put32(b, 35, key);
                b[39] = 0x4f;
            }
            // Data block (type 0), subtype offset (0x1): in the capsule, at offset 0.
            Dptr::InCapsule { len } => {
                put32(b, 32, len);
                b[39] = 0x01;
            }
        }
    }

    /// Fabrics Connect of queue `qid` with `sqsize` (0-based) entries and, on the admin
    /// queue, a keep-alive timeout of `kato` ms; its data is [`connect_data`].
    pub(crate) fn connect(qid: u16, sqsize: u16, kato: u32) -> Self {
        let mut c = Self::fabrics(FCTYPE_CONNECT);
        put16(&mut c.0, 42, qid);
        put16(&mut c.0, 44, sqsize);
        put32(&mut c.0, 48, kato);
        c
    }

    /// Property Get of the 4-byte or 8-byte (`wide`) register at `offset`.
    pub(crate) fn prop_get(offset: u32, wide: bool) -> Self {
        let mut c = Self::fabrics(FCTYPE_PROP_GET);
        c.0[40] = u8::from(wide);
        put32(&mut c.0, 44, offset);
        c
    }

    /// Property Set of the 4-byte register at `offset` to `value`.
    pub(crate) fn prop_set(offset: u32, value: u32) -> Self {
        let mut c = Self::fabrics(FCTYPE_PROP_SET);
        put32(&mut c.0, 44, offset);
        put32(&mut c.0, 48, value);
        c
    }

    /// Identify `cns` of namespace `nsid`.
    pub(crate) fn identify(cns: u32, nsid: u32) -> Self {
        Self::new(admin::IDENTIFY, nsid).cdw(10, cns)
    }

    /// Set Features Number of Queues: `n` submission and completion queues.
    pub(crate) fn set_queues(n: u16) -> Self {
        let v = u32::from(n.max(1) - 1);
        Self::new(admin::SET_FEATURES, 0)
            .cdw(10, FID_NUM_QUEUES)
            .cdw(11, v | (v << 16))
    }

    /// Set Features Asynchronous Event Configuration: the notices of `aen` (OAES bits).
    pub(crate) fn set_async_events(aen: u32) -> Self {
        Self::new(admin::SET_FEATURES, 0)
            .cdw(10, FID_ASYNC_EVENT)
            .cdw(11, aen)
    }

    /// Get Log Page `lid`, `len` bytes (a multiple of 4) from its start, for every
    /// namespace; reading it clears the event that named it.
    pub(crate) fn get_log_page(lid: u8, len: usize) -> Self {
        let numd = (len / 4).saturating_sub(1) as u32;
        Self::new(admin::GET_LOG_PAGE, u32::MAX)
            .cdw(10, u32::from(lid) | ((numd & 0xffff) << 16))
            .cdw(11, numd >> 16)
    }

    /// A read or write of `blocks` logical blocks from `lba` on `nsid`; with `fua` (Force
    /// Unit Access) the data is durable when the command ends.
    pub(crate) fn rw(opcode: u8, nsid: u32, lba: u64, blocks: u32, fua: bool) -> Self {
        let fua = if fua { 1 << 30 } else { 0 };
        Self::new(opcode, nsid)
            .cdw(10, lba as u32)
            .cdw(11, (lba >> 32) as u32)
            .cdw(12, (blocks.saturating_sub(1) & 0xffff) | fua)
    }
}

/// A Fabrics Connect's data: the host's identifier, the controller (0xffff on the admin
/// queue: any), and the NQNs.
pub(crate) fn connect_data(
    hostid: &[u8; 16],
    cntlid: u16,
    subnqn: &[u8],
    hostnqn: &[u8],
) -> [u8; CONNECT_DATA_LEN] {
    let mut b = [0u8; CONNECT_DATA_LEN];
    put(&mut b, 0, hostid);
    put16(&mut b, 16, cntlid);
    put(&mut b[256..256 + NQN_MAX], 0, subnqn);
    put(&mut b[512..512 + NQN_MAX], 0, hostnqn);
    b
}

/// A completion from the target.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cqe {
    pub(crate) result: u64,
    pub(crate) cid: u16,
    /// Status code type and code, without the phase bit (0: success).
    pub(crate) status: u16,
}

impl Cqe {
    /// Decodes a completion: exactly [`CQE_LEN`] bytes, or `None`.
    pub(crate) fn decode(b: &[u8]) -> Option<Self> {
        if b.len() != CQE_LEN {
            return None;
        }
        Some(Self {
            result: le64(b, 0),
            cid: le16(b, 12),
            status: le16(b, 14) >> 1,
        })
    }

    pub(crate) fn is_ok(&self) -> bool {
        self.status & 0x7ff == 0
    }

    /// The status code type, if it is one no controller may send (4 to 6 are reserved).
    pub(crate) fn reserved_type(&self) -> Option<u16> {
        let sct = (self.status >> 8) & 0x7;
        (4..=6).contains(&sct).then_some(sct)
    }
}

/// The connection request's private data (nvme_rdma_cm_req): queue `qid`, whose host keeps
/// `hrqsize` receives and sends at most `hsqsize + 1` commands.
pub(crate) fn cm_request(qid: u16, hrqsize: u16, hsqsize: u16) -> [u8; 32] {
    let mut b = [0u8; 32];
    put16(&mut b, 2, qid);
    put16(&mut b, 4, hrqsize);
    put16(&mut b, 6, hsqsize);
    b
}

/// An Asynchronous Event Request's completion (its dword 0): the event's type, its
/// information and the log page that says more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AsyncEvent {
    pub(crate) kind: u8,
    pub(crate) info: u8,
    pub(crate) log_page: u8,
}

impl AsyncEvent {
    /// Type Notice (2), information Namespace Attribute Changed (0).
    pub(crate) const NS_CHANGED: (u8, u8) = (2, 0);

    pub(crate) fn decode(result: u32) -> Self {
        Self {
            kind: (result & 0x7) as u8,
            info: (result >> 8) as u8,
            log_page: (result >> 16) as u8,
        }
    }
}

/// The status in a target's reject (nvme_rdma_cm_rej), if it has one.
pub(crate) fn cm_reject_status(b: &[u8]) -> Option<u16> {
    (b.len() >= 4 && le16(b, 0) == 0).then(|| le16(b, 2))
}

/// What the host takes from Identify Controller, checked.
#[derive(Clone, Copy)]
pub(crate) struct IdCtrl {
    /// PCI vendor ID (VID; 0 for a fabrics target).
    pub(crate) vid: u16,
    pub(crate) serial: [u8; 20],
    pub(crate) model: [u8; 40],
    /// Firmware revision (FR), space-padded.
    pub(crate) firmware: [u8; 8],
    /// The subsystem's NQN (SUBNQN), NUL-padded.
    pub(crate) subnqn: [u8; 256],
    /// Largest transfer in bytes (0: no limit).
    pub(crate) max_transfer: u64,
    pub(crate) cntlid: u16,
    pub(crate) kas: u16,
    pub(crate) maxcmd: u16,
    pub(crate) nn: u32,
    /// In-capsule data an I/O command may carry, in bytes.
    pub(crate) in_capsule: u32,
    /// Optional Asynchronous Events Supported (OAES).
    pub(crate) oaes: u32,
    /// A volatile write cache (VWC bit 0): writes need Flush or FUA to be durable.
    pub(crate) write_cache: bool,
}

impl IdCtrl {
    /// Decodes Identify Controller data; `Err` with the reason when it is not what a fabrics
    /// host can use (nvme-rdma's checks: keep-alive support, capsule sizes, keyed SGLs).
    pub(crate) fn decode(b: &[u8]) -> Result<Self, &'static str> {
        if b.len() < IDENTIFY_LEN {
            return Err("short Identify data");
        }
        let mut serial = [0u8; 20];
        serial.copy_from_slice(&b[4..24]);
        let mut model = [0u8; 40];
        model.copy_from_slice(&b[24..64]);
        let mut firmware = [0u8; 8];
        firmware.copy_from_slice(&b[64..72]);
        let mut subnqn = [0u8; 256];
        subnqn.copy_from_slice(&b[768..1024]);
        let mdts = b[77];
        let ioccsz = le32(b, 1792);
        let sgls = le32(b, 536);
        let id = Self {
            vid: le16(b, 0),
            serial,
            model,
            firmware,
            subnqn,
            // In units of the minimum page (CAP.MPSMIN, 4 KiB for every fabrics target).
            max_transfer: if mdts == 0 || mdts > 20 {
                0
            } else {
                4096u64 << mdts
            },
            cntlid: le16(b, 78),
            write_cache: b[525] & 1 != 0,
            kas: le16(b, 320),
            maxcmd: le16(b, 514),
            nn: le32(b, 516),
            oaes: le32(b, 92),
            in_capsule: if sgls & (1 << 20) != 0 && ioccsz >= 4 {
                (ioccsz.min(1 << 16) * 16).saturating_sub(SQE_LEN as u32)
            } else {
                0
            },
        };
        if id.kas == 0 {
            return Err("no keep-alive support (KAS 0): mandatory on fabrics");
        }
        if ioccsz < 4 || le32(b, 1796) < 1 {
            return Err("capsule sizes below the minimum (IOCCSZ < 4 or IORCSZ < 1)");
        }
        if le16(b, 1800) != 0 {
            return Err("in-capsule data at an offset (ICDOFF != 0)");
        }
        if sgls & (1 << 2) == 0 {
            return Err("no keyed SGL data blocks (SGLS bit 2)");
        }
        if id.maxcmd == 0 {
            return Err("MAXCMD 0");
        }
        Ok(id)
    }
}

/// What the host takes from Identify Namespace, checked.
#[derive(Clone, Copy)]
pub(crate) struct IdNs {
    /// Blocks of the namespace.
    pub(crate) blocks: u64,
    /// log2 of the block size (9 to 12).
    pub(crate) lba_shift: u32,
    /// The namespace's globally unique identifier (NGUID; zeroes if it has none).
    pub(crate) nguid: [u8; 16],
    /// Its IEEE extended unique identifier (EUI64; zeroes if it has none).
    pub(crate) eui64: [u8; 8],
}

impl IdNs {
    /// Decodes Identify Namespace data; `Ok(None)` for an inactive namespace (all zeroes),
    /// `Err` when its format is not one this host serves.
    pub(crate) fn decode(b: &[u8]) -> Result<Option<Self>, &'static str> {
        if b.len() < IDENTIFY_LEN {
            return Err("short Identify data");
        }
        let blocks = le64(b, 0);
        if blocks == 0 {
            return Ok(None);
        }
        let flbas = usize::from(b[26] & 0xf);
        if flbas > usize::from(b[25]) {
            return Err("the format in use (FLBAS) is past the formats listed (NLBAF)");
        }
        let lbaf = 128 + 4 * flbas;
        if le16(b, lbaf) != 0 {
            return Err("metadata in the LBA format");
        }
        let lba_shift = u32::from(b[lbaf + 2]);
        if !(9..=12).contains(&lba_shift) {
            return Err("a block size other than 512 to 4096 bytes");
        }
        if blocks.checked_shl(lba_shift).is_none() || blocks >> (63 - lba_shift) != 0 {
            return Err("a capacity that does not fit in 64 bits");
        }
        let mut nguid = [0u8; 16];
        nguid.copy_from_slice(&b[104..120]);
        let mut eui64 = [0u8; 8];
        eui64.copy_from_slice(&b[120..128]);
        Ok(Some(Self {
            blocks,
            lba_shift,
            nguid,
            eui64,
        }))
    }
}
