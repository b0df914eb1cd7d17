// SPDX-License-Identifier: GPL-2.0

//! The data of Identify and Get Log Page: the bytes a controller shows the host.
//!
//! Offsets are those of `struct nvme_id_ctrl`, `struct nvme_id_ns`, the namespace
//! identification descriptors and the log pages in include/linux/nvme.h. Fields the target
//! leaves at 0 say "not supported" (no power states, no ANA, no reservations); of the
//! asynchronous events, only namespace notices.

use crate::config::{PortConf, Subsys, Volume, MAX_NAMESPACES};
use crate::proto::{
    put, put16, put32, put64, put_padded, Status, AEN_NS_ATTR, DISCOVERY_NQN, INLINE_DATA,
    LBA_SHIFT, MAX_IO_DEPTH, MDTS, SQE_LEN,
};
use kernel::prelude::*;

/// Bytes of an Identify data structure.
pub(crate) const IDENTIFY_LEN: usize = 4096;
/// The NVMe version the controllers report: 1.3 (namespace descriptors, no I/O command sets).
pub(crate) const VERSION: u32 = 0x0001_0300;
/// Keep-alive granularity (KAS), in units of 100 ms.
const KAS: u16 = 10;
/// Firmware revision shown in Identify.
const FIRMWARE: &[u8] = b"6.12rr";
/// Asynchronous Event Requests a controller holds at once (AERL is this less one).
pub(crate) const AER_MAX: usize = 4;

/// Which controller is identified.
pub(crate) struct CtrlIdent<'a> {
    pub(crate) cntlid: u16,
    /// `None` for a discovery controller.
    pub(crate) subsys: Option<&'a Subsys>,
}

/// Identify Controller (CNS 1) into `b` (4 KiB, zeroed).
pub(crate) fn controller(b: &mut [u8], c: &CtrlIdent<'_>) -> Result {
    match c.subsys {
        Some(s) => {
            put_padded(b, 4, 20, &s.serial()?);
            put_padded(b, 24, 40, &s.model()?);
        }
        None => {
            put_padded(b, 4, 20, b"discovery");
            put_padded(b, 24, 40, b"rdma_rust_nvmet discovery");
        }
    }
    put_padded(b, 64, 8, FIRMWARE);
    // RAB: recommended arbitration burst.
    b[72] = 6;
    put16(b, 78, c.cntlid);
    put32(b, 80, VERSION);
    // LPA: extended data for Get Log Page (offsets, 32-bit lengths).
    b[261] = 1 << 2;
    // MAXCMD, SGLS: SGLs, keyed data blocks.
    put16(b, 514, MAX_IO_DEPTH);
    let mut sgls: u32 = (1 << 0) | (1 << 2);
    match c.subsys {
        Some(s) => {
            // CMIC: more than one port and controller may reach the subsystem (multipath).
            b[76] = 0b11;
            b[77] = MDTS;
            // CNTRLTYPE: I/O controller.
            b[111] = 1;
            // OAES: Namespace Attribute Notices (see `ctrl::events`).
            put32(b, 92, AEN_NS_ATTR);
            // ACL, AERL (0-based), FRMW (slot 1 read-only, one slot), ELPE 0.
            b[258] = 3;
            b[259] = (AER_MAX - 1) as u8;
            b[260] = (1 << 0) | (1 << 1);
            put16(b, 320, KAS);
            // SQES and CQES: 64 and 16 bytes, both required and largest.
            b[512] = 0x66;
            b[513] = 0x44;
            put32(b, 516, MAX_NAMESPACES);
            // ONCS: Dataset Management and Write Zeroes.
            put16(b, 520, (1 << 2) | (1 << 3));
            // VWC: a volatile write cache (Flush is honoured).
            b[525] = 1;
            // In-capsule data at offset 0.
            sgls |= 1 << 20;
            put32(b, 540, MAX_NAMESPACES);
            put(b, 768, s.nqn());
            // IOCCSZ and IORCSZ (16-byte units): a command with its in-capsule data, and a
            // completion. ICDOFF 0. MSDBD: one descriptor.
            put32(b, 1792, ((SQE_LEN + INLINE_DATA) / 16) as u32);
            put32(b, 1796, 1);
            b[1803] = 1;
        }
        None => {
            // CNTRLTYPE: discovery controller.
            b[111] = 2;
            b[259] = (AER_MAX - 1) as u8;
            put16(b, 320, KAS);
            put(b, 768, DISCOVERY_NQN);
        }
    }
    put32(b, 536, sgls);
    Ok(())
}

/// Identify Namespace (CNS 0) of `volume` (4 KiB, zeroed) with `uuid`.
pub(crate) fn namespace(b: &mut [u8], volume: &Volume, uuid: &[u8; 16]) {
    let blocks = volume.blocks();
    // NSZE, NCAP, NUSE.
    put64(b, 0, blocks);
    put64(b, 8, blocks);
    put64(b, 16, blocks);
    // NMIC: may be attached to more than one controller (multipath). DLFEAT: a deallocated
    // block reads as zeroes.
    b[30] = 1;
    b[33] = 1;
    // NVMCAP (128 bits).
    put64(b, 48, volume.size);
    // NGUID: the UUID's bytes.
    put(b, 104, uuid);
    // LBAF 0: no metadata, 2^LBA_SHIFT-byte blocks.
    b[130] = LBA_SHIFT as u8;
}

/// The active namespace list (CNS 2): NSIDs above `after`, as 32-bit entries.
pub(crate) fn active_list(b: &mut [u8], subsys: &Subsys, after: u32) -> Result {
    for (i, nsid) in subsys
        .active_nsids(after, b.len() / 4)?
        .into_iter()
        .enumerate()
    {
        put32(b, 4 * i, nsid);
    }
    Ok(())
}

/// The namespace identification descriptors (CNS 3): NGUID, UUID and command set (NVM).
pub(crate) fn descriptors(b: &mut [u8], uuid: &[u8; 16]) {
    // NIDT, NIDL, 2 reserved, NID.
    let mut at = 0;
    for (nidt, nid) in [(2u8, &uuid[..]), (3, &uuid[..]), (4, &[0u8][..])] {
        b[at] = nidt;
        b[at + 1] = nid.len() as u8;
        put(b, at + 4, nid);
        at += 4 + nid.len();
    }
}

/// Log page identifiers the target has.
pub(crate) mod lid {
    pub(crate) const ERROR: u8 = 0x01;
    pub(crate) const SMART: u8 = 0x02;
    pub(crate) const FW_SLOT: u8 = 0x03;
    pub(crate) const CHANGED_NS: u8 = 0x04;
    pub(crate) const CMD_EFFECTS: u8 = 0x05;
    pub(crate) const DISCOVERY: u8 = 0x70;
}

/// A log page, whole: `Err` with the status for a page the controller does not have.
pub(crate) fn log_page(
    id: u8,
    subsys: Option<&Subsys>,
    port: &PortConf,
    hostnqn: &[u8],
) -> Result<KVec<u8>, Status> {
    let zeroed = |n: usize| KVec::from_elem(0u8, n, GFP_KERNEL).map_err(|_| Status::INTERNAL);
    match (id, subsys) {
        // One error entry (ELPE 0), none logged.
        (lid::ERROR, _) => zeroed(64),
        // SMART / health: nothing to warn of, no temperature sensor.
        (lid::SMART, Some(_)) => zeroed(512),
        (lid::FW_SLOT, Some(_)) => {
            let mut b = zeroed(512)?;
            // AFI: slot 1 is active; FRS1: its revision.
            b[0] = 1;
            put_padded(&mut b, 8, 8, FIRMWARE);
            Ok(b)
        }
        // The Changed Namespace List is the controller's (`ctrl::events`).
        (lid::CMD_EFFECTS, Some(_)) => {
            let mut b = zeroed(4096)?;
            // CSUPP for each admin (ACS, 0..1024) and I/O (IOCS, 1024..2048) command; LBCC
            // (bit 1) for the ones that change the namespace's content.
            for op in [0x02u8, 0x06, 0x09, 0x0a, 0x0c, 0x18] {
                put32(&mut b, 4 * op as usize, 1);
            }
            for (op, lbcc) in [
                (0x00u8, false),
                (0x01, true),
                (0x02, false),
                (0x08, true),
                (0x09, true),
            ] {
                put32(&mut b, 1024 + 4 * op as usize, 1 | (u32::from(lbcc) << 1));
            }
            Ok(b)
        }
        (lid::DISCOVERY, None) => discovery_log(port, hostnqn),
        _ => Err(Status::INVALID_LOG_PAGE),
    }
}

/// The discovery log of `port`: a 1 KiB header and one 1 KiB entry per subsystem on the port
/// that allows `hostnqn` (as nvmet lists them).
fn discovery_log(port: &PortConf, hostnqn: &[u8]) -> Result<KVec<u8>, Status> {
    let subsystems = port.subsystems().map_err(|_| Status::INTERNAL)?;
    let addr = port.addr_text().map_err(|_| Status::INTERNAL)?;
    let listed: KVec<_> = {
        let mut v = KVec::new();
        for s in subsystems.iter().filter(|s| s.allows(hostnqn)) {
            v.push(s.clone(), GFP_KERNEL)
                .map_err(|_| Status::INTERNAL)?;
        }
        v
    };
    let mut b = KVec::from_elem(0u8, 1024 * (1 + listed.len()), GFP_KERNEL)
        .map_err(|_| Status::INTERNAL)?;
    // GENCTR, NUMREC, RECFMT 0.
    put64(&mut b, 0, port.generation());
    put64(&mut b, 8, listed.len() as u64);
    for (i, s) in listed.iter().enumerate() {
        let e = &mut b[1024 * (i + 1)..1024 * (i + 2)];
        // TRTYPE RDMA, ADRFAM, SUBTYPE NVM subsystem, TREQ not specified.
        e[0] = 1;
        e[1] = addr.adrfam;
        e[2] = 2;
        put16(e, 4, port.id);
        // CNTLID: dynamic controllers. ASQSZ: the admin queue's size.
        put16(e, 6, 0xffff);
        put16(e, 8, crate::proto::ADMIN_DEPTH);
        put(e, 32, &addr.trsvcid);
        put(e, 256, s.nqn());
        put(e, 512, &addr.traddr);
        // TRSVCID and TRADDR are NUL-padded text, as nvmet sends them.
        // TSAS for RDMA: reliable connected QP, no provider type, rdma_cm.
        e[768] = 1;
        e[769] = 1;
        e[770] = 1;
    }
    Ok(b)
}
