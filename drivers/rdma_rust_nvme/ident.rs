// SPDX-License-Identifier: GPL-2.0

//! A namespace's identity, in the files nvme gives its disks (`/sys/block/<disk>/wwid`,
//! `nsid`, `uuid`, `nguid`, `eui`), so that a udev rule written for those names ours too,
//! and its controller's (`serial`, `model`, `firmware_rev`, `subsysnqn`, which nvme shows on
//! the controller's device: these disks have none, so they are on the disk).
//!
//! The identifiers come from the Namespace Identification Descriptor list (Identify CNS 3),
//! then from Identify Namespace where the list had none (NGUID, EUI64), as nvme takes them;
//! `wwid` is the first the namespace has of its UUID, NGUID and EUI64, or else one made of
//! the controller's vendor, serial and model and the namespace's number, in nvme's formats.

use crate::proto::{IdCtrl, IdNs, IDENTIFY_LEN};
use core::fmt::Write;
use kernel::block::mq::gen_disk::AttrPage;
use kernel::c_str;
use kernel::prelude::*;
use kernel::str::CStr;

/// The files, in the order of [`NsIdent::show`]'s indexes.
pub(crate) const NAMES: [&CStr; 9] = [
    c_str!("wwid"),
    c_str!("nsid"),
    c_str!("uuid"),
    c_str!("nguid"),
    c_str!("eui"),
    c_str!("serial"),
    c_str!("model"),
    c_str!("firmware_rev"),
    c_str!("subsysnqn"),
];
const WWID: usize = 0;
const NSID: usize = 1;
const UUID: usize = 2;
const NGUID: usize = 3;
const EUI: usize = 4;
const SERIAL: usize = 5;
const MODEL: usize = 6;
const FIRMWARE: usize = 7;
const SUBSYSNQN: usize = 8;

/// Namespace Identifier Types of the descriptor list, with their lengths.
const NIDT_EUI64: u8 = 1;
const NIDT_NGUID: u8 = 2;
const NIDT_UUID: u8 = 3;
const NIDT_CSI: u8 = 4;

/// One namespace's identity and its controller's.
pub(crate) struct NsIdent {
    nsid: u32,
    uuid: [u8; 16],
    nguid: [u8; 16],
    eui64: [u8; 8],
    vid: u16,
    serial: [u8; 20],
    model: [u8; 40],
    firmware: [u8; 8],
    subnqn: [u8; 256],
}

impl NsIdent {
    /// The identity of namespace `nsid` of the controller `ctrl` (connected to `subnqn`),
    /// from its Identify Namespace data `ns` and its descriptor list `descs` (`None` if the
    /// target has none to give). A malformed list is used up to its fault, which is
    /// logged, as nvme does.
    pub(crate) fn new(
        nsid: u32,
        ctrl: &IdCtrl,
        ns: &IdNs,
        descs: Option<&[u8]>,
        subnqn: &[u8],
    ) -> Self {
        let mut id = Self {
            nsid,
            uuid: [0; 16],
            nguid: [0; 16],
            eui64: [0; 8],
            vid: ctrl.vid,
            serial: ctrl.serial,
            model: ctrl.model,
            firmware: ctrl.firmware,
            subnqn: ctrl.subnqn,
        };
        if let Some(why) = descs.and_then(|b| id.take_descriptors(b)) {
            pr_warn!("namespace {nsid}: {why}: the rest of the list is not used\n");
        }
        if is_zero(&id.nguid) {
            id.nguid = ns.nguid;
        }
        if is_zero(&id.eui64) {
            id.eui64 = ns.eui64;
        }
        // A target that names no subsystem in Identify: the one the host connected to.
        if id.subnqn[0] == 0 {
            let n = subnqn.len().min(id.subnqn.len() - 1);
            id.subnqn[..n].copy_from_slice(&subnqn[..n]);
        }
        id
    }

    /// Takes the identifiers of a descriptor list: each a type, a length, two reserved bytes
    /// and the identifier; the list ends at a length of 0 or at the end of the data, and at
    /// an identifier of a known type and the wrong length (which is returned); unknown types
    /// are passed.
    fn take_descriptors(&mut self, b: &[u8]) -> Option<&'static str> {
        let b = b.get(..IDENTIFY_LEN)?;
        let mut at = 0;
        while at + 4 <= b.len() {
            let (nidt, nidl) = (b[at], usize::from(b[at + 1]));
            if nidl == 0 {
                break;
            }
            let Some(v) = b.get(at + 4..at + 4 + nidl) else {
                break;
            };
            let want = match nidt {
                NIDT_EUI64 => 8,
                NIDT_NGUID | NIDT_UUID => 16,
                NIDT_CSI => 1,
                _ => nidl,
            };
            if nidl != want {
                return Some("a namespace identifier of the wrong length in the descriptor list");
            }
            match nidt {
                NIDT_EUI64 => self.eui64.copy_from_slice(v),
                NIDT_NGUID => self.nguid.copy_from_slice(v),
                NIDT_UUID => self.uuid.copy_from_slice(v),
                _ => {}
            }
            at += 4 + nidl;
        }
        None
    }

    /// Whether file `index` of [`NAMES`] exists for this namespace: an identifier's when the
    /// namespace has it (`uuid` also for an NGUID, which it then shows, as nvme's).
    pub(crate) fn visible(&self, index: usize) -> bool {
        match index {
            UUID => !is_zero(&self.uuid) || !is_zero(&self.nguid),
            NGUID => !is_zero(&self.nguid),
            EUI => !is_zero(&self.eui64),
            _ => index < NAMES.len(),
        }
    }

    /// Writes file `index` of [`NAMES`], with its newline.
    pub(crate) fn show(&self, index: usize, page: &mut AttrPage<'_>) -> Result {
        match index {
            WWID => self.wwid(page),
            NSID => {
                let _ = writeln!(page, "{}", self.nsid);
            }
            UUID if is_zero(&self.uuid) => uuid(page, &self.nguid),
            UUID => uuid(page, &self.uuid),
            NGUID => uuid(page, &self.nguid),
            EUI => {
                for (i, v) in self.eui64.iter().enumerate() {
                    let sep = if i == 0 { "" } else { " " };
                    let _ = write!(page, "{sep}{v:02x}");
                }
                page.write_bytes(b"\n");
            }
            // The raw fields up to a NUL, padding and all, as nvme shows them.
            SERIAL => field(page, &self.serial),
            MODEL => field(page, &self.model),
            FIRMWARE => field(page, &self.firmware),
            SUBSYSNQN => field(page, &self.subnqn),
            _ => return Err(EINVAL),
        }
        Ok(())
    }

    fn wwid(&self, page: &mut AttrPage<'_>) {
        if !is_zero(&self.uuid) {
            page.write_bytes(b"uuid.");
            uuid(page, &self.uuid);
        } else if !is_zero(&self.nguid) {
            page.write_bytes(b"eui.");
            hex(page, &self.nguid);
            page.write_bytes(b"\n");
        } else if !is_zero(&self.eui64) {
            page.write_bytes(b"eui.");
            hex(page, &self.eui64);
            page.write_bytes(b"\n");
        } else {
            let _ = write!(page, "nvme.{:04x}-", self.vid);
            hex(page, trim(&self.serial));
            page.write_bytes(b"-");
            hex(page, trim(&self.model));
            let _ = writeln!(page, "-{:08x}", self.nsid);
        }
    }
}

fn is_zero(b: &[u8]) -> bool {
    b.iter().all(|&v| v == 0)
}

/// A space- or NUL-padded field without its padding.
pub(crate) fn trim(b: &[u8]) -> &[u8] {
    let n = b
        .iter()
        .rposition(|&c| c != b' ' && c != 0)
        .map_or(0, |i| i + 1);
    &b[..n]
}

/// `b` in lowercase hex digits, two a byte.
fn hex(page: &mut AttrPage<'_>, b: &[u8]) {
    for v in b {
        let _ = write!(page, "{v:02x}");
    }
}

/// 16 bytes as a UUID (`%pU`: 8-4-4-4-12 hex digits), and a newline.
fn uuid(page: &mut AttrPage<'_>, b: &[u8; 16]) {
    for (i, v) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            page.write_bytes(b"-");
        }
        let _ = write!(page, "{v:02x}");
    }
    page.write_bytes(b"\n");
}

/// A field up to its first NUL, and a newline.
fn field(page: &mut AttrPage<'_>, b: &[u8]) {
    let n = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    page.write_bytes(&b[..n]);
    page.write_bytes(b"\n");
}
