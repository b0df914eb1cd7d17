// SPDX-License-Identifier: GPL-2.0

//! The NVM command set on RAM namespaces: Read, Write, Flush, Write Zeroes and Dataset
//! Management (deallocate).
//!
//! [`plan`] checks a command against its namespace before any data moves (the NSID, the LBA
//! range, the transfer size); [`execute`] carries it out once a write's data is in the pages.

use crate::config::{Subsys, Volume};
use crate::ctrl::{Data, Reply};
use crate::proto::{io, le32, le64, Sqe, Status, LBA_SHIFT, MAX_TRANSFER};
use kernel::page::Page;
use kernel::prelude::*;
use kernel::rdma::dma::copy_from_pages;
use kernel::sync::Arc;

/// Dataset Management ranges a command may carry (NR is 8 bits, 0-based).
const DSM_RANGES_MAX: usize = 256;
/// Bytes of a Dataset Management range.
const DSM_RANGE_LEN: usize = 16;

/// A command checked against its namespace: how its data moves and the volume it acts on.
pub(crate) struct Planned {
    pub(crate) data: Data,
    pub(crate) volume: Arc<Volume>,
}

/// The byte range of `slba`, `nlb` blocks, on `volume`; `LBA_RANGE` when it passes the end.
fn range(volume: &Volume, slba: u64, nlb: u64) -> Result<(u64, usize), Status> {
    match slba.checked_add(nlb) {
        Some(end) if end <= volume.blocks() => Ok((slba << LBA_SHIFT, (nlb << LBA_SHIFT) as usize)),
        _ => Err(Status::LBA_RANGE),
    }
}

/// The starting LBA and block count of a Read, Write or Write Zeroes.
fn lba(sqe: &Sqe) -> (u64, u64) {
    let slba = u64::from(sqe.cdw(10)) | (u64::from(sqe.cdw(11)) << 32);
    (slba, u64::from(sqe.cdw(12) & 0xffff) + 1)
}

/// Checks an I/O command of `subsys`: its namespace must be enabled, its range inside it.
pub(crate) fn plan(subsys: &Subsys, sqe: &Sqe) -> Result<Planned, Status> {
    let volume = subsys.volume(sqe.nsid).ok_or(Status::INVALID_NS)?;
    let data = match sqe.opcode {
        io::READ | io::WRITE => {
            // PRINFO (protection information): the namespaces have none.
            if (sqe.cdw(12) >> 26) & 0xf != 0 {
                return Err(Status::INVALID_FIELD);
            }
            let (slba, nlb) = lba(sqe);
            let (_, len) = range(&volume, slba, nlb)?;
            if len > MAX_TRANSFER {
                return Err(Status::INVALID_FIELD);
            }
            if sqe.opcode == io::READ {
                Data::ToHost(len)
            } else {
                Data::FromHost(len)
            }
        }
        io::FLUSH => Data::None,
        io::WRITE_ZEROES => {
            let (slba, nlb) = lba(sqe);
            range(&volume, slba, nlb)?;
            Data::None
        }
        io::DSM => Data::FromHost(((sqe.cdw(10) & 0xff) as usize + 1) * DSM_RANGE_LEN),
        _ => return Err(Status::INVALID_OPCODE),
    };
    Ok(Planned { data, volume })
}

/// Whether the command's SGL may name more data than the command moves (the host's whole
/// Dataset Management range buffer, as nvmet accepts it).
pub(crate) fn sgl_may_be_longer(sqe: &Sqe) -> bool {
    sqe.opcode == io::DSM
}

/// Carries out a planned I/O command; a write's (and a Dataset Management's) `len` bytes are
/// in `pages`, or in `inline` (an in-capsule Write's, still in its receive buffer); a read's
/// go to `pages`.
pub(crate) fn execute(
    sqe: &Sqe,
    volume: &Volume,
    pages: &mut [Page],
    len: usize,
    inline: Option<&[u8]>,
) -> Reply {
    let done = match sqe.opcode {
        io::READ | io::WRITE => {
            let (slba, _) = lba(sqe);
            let at = slba << LBA_SHIFT;
            let r = match (sqe.opcode, inline) {
                (io::READ, _) => volume.read(at, pages, len),
                (_, Some(bytes)) => volume.write_bytes(at, bytes),
                _ => volume.write(at, pages, len),
            };
            r.map_err(|_| Status::INTERNAL)
        }
        io::FLUSH => Ok(()),
        io::WRITE_ZEROES => {
            let (slba, nlb) = lba(sqe);
            range(volume, slba, nlb)
                .and_then(|(at, n)| volume.zero(at, n).map_err(|_| Status::INTERNAL))
        }
        io::DSM => deallocate(sqe, volume, pages, len),
        _ => Err(Status::INVALID_OPCODE),
    };
    match done {
        Ok(()) => Reply::OK,
        Err(s) => s.into(),
    }
}

/// Dataset Management: with the deallocate attribute (CDW11 bit 2) each range reads as zeroes
/// afterwards (DLFEAT says so); without it, nothing to do. Every range is checked before any
/// is zeroed.
fn deallocate(sqe: &Sqe, volume: &Volume, pages: &[Page], len: usize) -> Result<(), Status> {
    if sqe.cdw(11) & (1 << 2) == 0 {
        return Ok(());
    }
    let n = len / DSM_RANGE_LEN;
    if n == 0 || n > DSM_RANGES_MAX {
        return Err(Status::INVALID_FIELD);
    }
    let mut ranges = KVec::from_elem(0u8, len, GFP_KERNEL).map_err(|_| Status::INTERNAL)?;
    copy_from_pages(pages, 0, &mut ranges).map_err(|_| Status::INTERNAL)?;
    let parse = |i: usize| {
        let r = &ranges[i * DSM_RANGE_LEN..(i + 1) * DSM_RANGE_LEN];
        // Context attributes (4), length in blocks (4), starting LBA (8).
        range(volume, le64(r, 8), u64::from(le32(r, 4)))
    };
    for i in 0..n {
        parse(i)?;
    }
    for i in 0..n {
        let (at, bytes) = parse(i)?;
        volume.zero(at, bytes).map_err(|_| Status::INTERNAL)?;
    }
    Ok(())
}
