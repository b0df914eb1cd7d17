// SPDX-License-Identifier: GPL-2.0

//! Controllers: what a host's Connect creates, and the admin commands they carry out.
//!
//! A host's admin queue Connect makes a [`Ctrl`] (dynamic controller model: a new controller
//! ID for each); its I/O queues' Connects name that ID. The controller holds the registers a
//! host reads and writes with Property Get and Set (CAP, VS, CC, CSTS), the features it set
//! (number of queues, keep-alive timeout, asynchronous event configuration), its held
//! Asynchronous Event Requests and their notices (`events`), and the keep-alive deadline: a
//! host that sends no Keep Alive within its KATO has its controller ended
//! ([`Target::tick`]), queues and all.
//!
//! The transport is not known here: a controller ends its queues, and answers the requests
//! it held, through [`QueueLink`].

mod connect;
mod events;

use crate::config::{PortConf, Subsys};
use crate::ident::{self, CtrlIdent, IDENTIFY_LEN, VERSION};
use crate::misbehave;
use crate::proto::{
    admin, le16, le32, reg, Sqe, Status, Text, AEN_NS_ATTR, DISCOVERY_NQN, FCTYPE_CONNECT,
    FCTYPE_PROP_GET, FCTYPE_PROP_SET, MAX_IO_DEPTH, MAX_IO_QUEUES,
};
use core::sync::atomic::{AtomicBool, AtomicI64, AtomicU16, AtomicU32, Ordering};
use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::{Arc, Mutex, SpinLock};
use kernel::time::Ktime;

/// The smallest keep-alive timeout a host may set, in ms (below it a loaded target would end
/// healthy controllers).
const MIN_KATO_MS: u32 = 1000;
/// Controllers the target serves at once.
const MAX_CTRLS: usize = 256;

/// Milliseconds since boot.
pub(crate) fn now_ms() -> i64 {
    Ktime::ktime_get().to_ms()
}

/// How a command's data moves, decided before it is carried out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Data {
    /// No data.
    None,
    /// `n` bytes come from the host first.
    FromHost(usize),
    /// `n` bytes go to the host with the completion.
    ToHost(usize),
}

/// A command's outcome.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reply {
    pub(crate) status: Status,
    pub(crate) result: u64,
}

impl From<Status> for Reply {
    fn from(status: Status) -> Self {
        Self { status, result: 0 }
    }
}

impl Reply {
    pub(crate) const OK: Self = Self {
        status: Status::SUCCESS,
        result: 0,
    };
}

/// A queue of a controller, as the controller sees it: it can be ended, and it answers the
/// commands the controller held.
pub(crate) trait QueueLink: Send + Sync {
    /// Ends the queue's connection (`why` is logged). Process context.
    fn end(&self, why: &str);

    /// Sends the completion of the held command `sqe` (an Asynchronous Event Request) with
    /// `reply`. `false` when the queue has no idle answer for it now (the caller tries
    /// again); a queue whose connection is ending drops it and says `true`.
    fn answer_held(&self, sqe: Sqe, reply: Reply) -> bool;
}

/// The registers a host sets and reads.
#[derive(Default)]
struct Regs {
    cc: u32,
    csts: u32,
}

const CC_EN: u32 = 1;
const CSTS_RDY: u32 = 1;
const CSTS_CFS: u32 = 1 << 1;
const CSTS_SHST_CMPLT: u32 = 2 << 2;

/// CAP: MQES (0-based), CQR, TO 7.5 s, CSS NVM; MPSMIN 4 KiB.
const CAP: u64 = (MAX_IO_DEPTH as u64 - 1) | (1 << 16) | (15 << 24) | (1 << 37);

/// A controller: one host's association with a subsystem (or the discovery service) through
/// a port.
#[pin_data]
pub(crate) struct Ctrl {
    pub(crate) cntlid: u16,
    /// `None` for a discovery controller.
    pub(crate) subsys: Option<Arc<Subsys>>,
    pub(crate) port: Arc<PortConf>,
    hostnqn: KVec<u8>,
    hostid: [u8; 16],
    kato_ms: AtomicU32,
    /// When the last Keep Alive came (ms since boot).
    last_ka: AtomicI64,
    #[pin]
    regs: SpinLock<Regs>,
    /// I/O queues granted by Set Features (0: not set yet).
    granted: AtomicU16,
    async_cfg: AtomicU32,
    /// The held Asynchronous Event Requests and the notices for them.
    #[pin]
    events: SpinLock<events::Events>,
    /// Its queues, by queue ID.
    #[pin]
    queues: Mutex<KVec<(u16, Arc<dyn QueueLink>)>>,
    dead: AtomicBool,
}

impl Ctrl {
    /// Whether this is a discovery controller.
    pub(crate) fn is_discovery(&self) -> bool {
        self.subsys.is_none()
    }

    fn enabled(&self) -> bool {
        let r = self.regs.lock();
        r.cc & CC_EN != 0 && r.csts & CSTS_RDY != 0
    }

    /// Whether the controller has ended ([`Ctrl::end`]): its queues are being disconnected.
    pub(crate) fn ended(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// Whether the controller's queues may carry I/O and admin commands other than Fabrics
    /// ones (CC.EN set and CSTS.RDY).
    pub(crate) fn ready(&self) -> bool {
        !self.ended() && self.enabled()
    }

    /// Ends the controller: its queues are disconnected and it leaves `target`. `why` is
    /// logged once. Process context.
    pub(crate) fn end(&self, target: &Target, why: &str) {
        if self.dead.swap(true, Ordering::AcqRel) {
            return;
        }
        pr_info!(
            "controller {} of {} on {}: {why}: ended\n",
            self.cntlid,
            Text(&self.hostnqn),
            Text(self.subsys.as_ref().map_or(DISCOVERY_NQN, |s| s.nqn()))
        );
        self.regs.lock().csts |= CSTS_CFS;
        target.forget(self);
        let queues = core::mem::take(&mut *self.queues.lock());
        for (_, q) in queues {
            q.end(why);
        }
    }

    /// Adds queue `qid` (its Connect succeeded). `CMD_SEQ_ERROR` when it exists.
    fn attach(&self, qid: u16, q: Arc<dyn QueueLink>) -> Result<(), Status> {
        let mut queues = self.queues.lock();
        if self.dead.load(Ordering::Acquire) || queues.iter().any(|(id, _)| *id == qid) {
            return Err(Status::CMD_SEQ_ERROR);
        }
        queues
            .push((qid, q), GFP_KERNEL)
            .map_err(|_| Status::INTERNAL)?;
        Ok(())
    }

    /// Queue `qid` is gone. A controller without its admin queue ends (with its I/O queues);
    /// an I/O queue may go alone, as the host tears its controller down queue by queue (and a
    /// host that lost one resets the whole association itself), as nvmet lets it.
    pub(crate) fn detach(&self, target: &Target, qid: u16) {
        let known = {
            let mut queues = self.queues.lock();
            let before = queues.len();
            queues.retain(|(id, _)| *id != qid);
            queues.len() != before
        };
        if known && qid == 0 {
            self.end(target, "its admin queue disconnected");
        }
    }

    /// Whether the host has let its keep-alive timeout pass.
    fn expired(&self, now: i64) -> bool {
        let kato = self.kato_ms.load(Ordering::Relaxed);
        kato != 0 && now - self.last_ka.load(Ordering::Relaxed) > i64::from(kato)
    }

    fn property_get(&self, sqe: &Sqe) -> Reply {
        let wide = sqe.raw[40] & 1 != 0;
        let r = self.regs.lock();
        let value = match (wide, le32(&sqe.raw, 44)) {
            (true, reg::CAP) => CAP,
            (false, reg::VS) => u64::from(VERSION),
            (false, reg::CC) => u64::from(r.cc),
            (false, reg::CSTS) => u64::from(r.csts),
            _ => return Status::INVALID_FIELD.into(),
        };
        Reply {
            status: Status::SUCCESS,
            result: value,
        }
    }

    /// Property Set: only CC, 4 bytes. Enabling checks the queue entry sizes, the page size
    /// and the command set (a bad one sets CSTS.CFS, as nvmet does); a shutdown completes at
    /// once (nothing is cached).
    fn property_set(&self, sqe: &Sqe) -> Reply {
        if sqe.raw[40] & 1 != 0 || le32(&sqe.raw, 44) != reg::CC {
            return Status::INVALID_FIELD.into();
        }
        let new = le32(&sqe.raw, 48);
        let mut r = self.regs.lock();
        let old = r.cc;
        r.cc = new;
        let shn = |cc: u32| (cc >> 14) & 3 != 0;
        if new & CC_EN != 0 && old & CC_EN == 0 {
            // IOSQES 6 (64 bytes), IOCQES 4 (16 bytes), MPS 0 (4 KiB), AMS 0, CSS 0 (NVM).
            let valid = (new >> 16) & 0xf == 6
                && (new >> 20) & 0xf == 4
                && (new >> 7) & 0xf == 0
                && (new >> 11) & 0x7 == 0
                && (new >> 4) & 0x7 == 0;
            r.csts = if valid { CSTS_RDY } else { CSTS_CFS };
        }
        if new & CC_EN == 0 && old & CC_EN != 0 {
            r.csts = 0;
        }
        if shn(new) && !shn(old) {
            r.csts = (r.csts & !CSTS_RDY) | CSTS_SHST_CMPLT;
        }
        if !shn(new) && shn(old) {
            r.csts &= !CSTS_SHST_CMPLT;
        }
        Reply::OK
    }

    /// How an admin command's data moves (and whether the controller takes it at all).
    pub(crate) fn admin_data(&self, sqe: &Sqe) -> Result<Data, Status> {
        if !self.ready() {
            return Err(Status::CMD_SEQ_ERROR);
        }
        let disc = self.is_discovery();
        match sqe.opcode {
            admin::IDENTIFY => Ok(Data::ToHost(IDENTIFY_LEN)),
            admin::GET_LOG_PAGE => {
                let dwords =
                    (u64::from(sqe.cdw(10) >> 16) | (u64::from(sqe.cdw(11) & 0xffff) << 16)) + 1;
                let len = dwords * 4;
                if len > crate::proto::MAX_TRANSFER as u64 {
                    return Err(Status::INVALID_FIELD);
                }
                Ok(Data::ToHost(len as usize))
            }
            admin::SET_FEATURES | admin::GET_FEATURES | admin::KEEP_ALIVE | admin::ASYNC_EVENT => {
                Ok(Data::None)
            }
            _ if disc => Err(Status::INVALID_OPCODE),
            _ => Err(Status::INVALID_OPCODE),
        }
    }

    /// Carries out an admin command whose data ([`Ctrl::admin_data`]) is `out` (zeroed, for
    /// the host). `Ok(None)`: the command is held (an Asynchronous Event Request) and has no
    /// completion now.
    pub(crate) fn admin(&self, sqe: &Sqe, out: &mut [u8]) -> Option<Reply> {
        let reply = match sqe.opcode {
            admin::IDENTIFY => self.identify(sqe, out),
            admin::GET_LOG_PAGE => self.get_log_page(sqe, out),
            admin::SET_FEATURES => self.set_features(sqe),
            admin::GET_FEATURES => self.get_features(sqe),
            admin::KEEP_ALIVE => {
                self.last_ka.store(now_ms(), Ordering::Relaxed);
                Reply::OK
            }
            admin::ASYNC_EVENT => return self.hold_aer(sqe),
            _ => Status::INVALID_OPCODE.into(),
        };
        Some(reply)
    }

    fn identify(&self, sqe: &Sqe, out: &mut [u8]) -> Reply {
        let cns = sqe.cdw(10) & 0xff;
        let nsid = sqe.nsid;
        let subsys = self.subsys.as_deref();
        let status = match (cns, subsys) {
            (1, _) => {
                let id = CtrlIdent {
                    cntlid: self.cntlid,
                    subsys,
                };
                match ident::controller(out, &id) {
                    Ok(()) => Status::SUCCESS,
                    Err(_) => Status::INTERNAL,
                }
            }
            (0, Some(s)) => match nsid {
                0 | u32::MAX => Status::INVALID_NS,
                // An inactive NSID gets zeroes.
                _ => {
                    if let (Some(v), Some(uuid)) = (s.volume(nsid), s.ns_uuid(nsid)) {
                        ident::namespace(out, &v, &uuid);
                    }
                    Status::SUCCESS
                }
            },
            (2, Some(s)) => match nsid {
                0xffff_fffe | u32::MAX => Status::INVALID_NS,
                _ => match ident::active_list(out, s, nsid) {
                    Ok(()) => Status::SUCCESS,
                    Err(_) => Status::INTERNAL,
                },
            },
            (3, Some(s)) => match s.ns_uuid(nsid) {
                Some(uuid) => {
                    ident::descriptors(out, &uuid);
                    Status::SUCCESS
                }
                None => Status::INVALID_NS,
            },
            // The NVM command set's controller data (CSI 0 in CDW11 bits 24-31): no limits.
            (6, Some(_)) if sqe.cdw(11) >> 24 == 0 => Status::SUCCESS,
            _ => Status::INVALID_FIELD,
        };
        if status == Status::SUCCESS {
            misbehave::identify(cns, out);
        }
        status.into()
    }

    fn get_log_page(&self, sqe: &Sqe, out: &mut [u8]) -> Reply {
        let lid = (sqe.cdw(10) & 0xff) as u8;
        let offset = u64::from(sqe.cdw(12)) | (u64::from(sqe.cdw(13)) << 32);
        // The offset is in bytes and dword-aligned.
        if offset % 4 != 0 {
            return Status::INVALID_FIELD.into();
        }
        let page = match (lid, self.is_discovery()) {
            (ident::lid::CHANGED_NS, false) => {
                let Ok(mut page) = KVec::from_elem(0u8, events::CHANGED_NS_LOG_LEN, GFP_KERNEL)
                else {
                    return Status::INTERNAL.into();
                };
                // RAE (CDW10 bit 15): the host reads it again later; the list stays.
                self.changed_ns_log(&mut page, sqe.cdw(10) & (1 << 15) != 0);
                page
            }
            _ => match ident::log_page(lid, self.subsys.as_deref(), &self.port, &self.hostnqn) {
                Ok(p) => p,
                Err(s) => return s.into(),
            },
        };
        let Some(from) = usize::try_from(offset).ok().filter(|&o| o <= page.len()) else {
            return Status::INVALID_FIELD.into();
        };
        // Past the page's end the host reads zeroes.
        crate::proto::put(out, 0, &page[from..]);
        Reply::OK
    }

    fn set_features(&self, sqe: &Sqe) -> Reply {
        let cdw10 = sqe.cdw(10);
        if cdw10 >> 31 != 0 {
            return Status::FEATURE_NOT_SAVEABLE.into();
        }
        let value = sqe.cdw(11);
        match (cdw10 & 0xff, self.is_discovery()) {
            // Number of queues (0-based submission and completion counts): granted once.
            (0x07, false) => {
                let (nsq, ncq) = (value & 0xffff, value >> 16);
                if nsq == 0xffff || ncq == 0xffff {
                    return Status::INVALID_FIELD.into();
                }
                let want = (nsq.min(ncq) + 1).min(u32::from(MAX_IO_QUEUES)) as u16;
                let granted = match self.granted.compare_exchange(
                    0,
                    want,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => want,
                    Err(g) if g == want => g,
                    Err(_) => return Status::FEATURE_NOT_CHANGEABLE.into(),
                };
                let n = u64::from(granted - 1);
                Reply {
                    status: Status::SUCCESS,
                    result: n | (n << 16),
                }
            }
            // Keep-alive timer, in ms.
            (0x0f, _) => {
                if value != 0 && value < MIN_KATO_MS {
                    return Status::KA_TIMEOUT_INVALID.into();
                }
                self.kato_ms.store(value, Ordering::Relaxed);
                self.last_ka.store(now_ms(), Ordering::Relaxed);
                Reply::OK
            }
            // Asynchronous event configuration: namespace notices on an I/O controller, the
            // only events it sends (a bit for any other is refused, as nvmet refuses it).
            (0x0b, disc) => {
                let supported = if disc { 0 } else { AEN_NS_ATTR };
                if value & !supported != 0 {
                    return Status::INVALID_FIELD.into();
                }
                self.async_cfg.store(value, Ordering::Relaxed);
                Reply::OK
            }
            _ => Status::INVALID_FIELD.into(),
        }
    }

    fn get_features(&self, sqe: &Sqe) -> Reply {
        let cdw10 = sqe.cdw(10);
        // SEL: only the current value.
        if (cdw10 >> 8) & 7 != 0 {
            return Status::INVALID_FIELD.into();
        }
        let result = match (cdw10 & 0xff, self.is_discovery()) {
            (0x07, false) => {
                let g = self.granted.load(Ordering::Acquire);
                let n = u64::from(if g == 0 { MAX_IO_QUEUES } else { g } - 1);
                n | (n << 16)
            }
            (0x0f, _) => u64::from(self.kato_ms.load(Ordering::Relaxed)),
            (0x0b, _) => u64::from(self.async_cfg.load(Ordering::Relaxed)),
            _ => return Status::INVALID_FIELD.into(),
        };
        Reply {
            status: Status::SUCCESS,
            result,
        }
    }
}

/// The target's controllers.
#[pin_data]
pub(crate) struct Target {
    #[pin]
    ctrls: Mutex<KVec<Arc<Ctrl>>>,
    next_cntlid: AtomicU16,
}

impl Target {
    pub(crate) fn new() -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Target {
                ctrls <- new_mutex!(KVec::new(), "rdma_rust_nvmet_ctrls"),
                next_cntlid: AtomicU16::new(1),
            }),
            GFP_KERNEL,
        )
    }

    fn forget(&self, ctrl: &Ctrl) {
        self.ctrls.lock().retain(|c| !core::ptr::eq(&**c, ctrl));
    }

    /// Ends every controller whose host let its keep-alive timeout pass, and sends the
    /// notices that found no idle answer on their admin queue. Process context.
    pub(crate) fn tick(&self) {
        let now = now_ms();
        for c in self.pick(|c| c.expired(now)) {
            c.end(self, "no keep-alive within its timeout");
        }
        for c in self.pick(Ctrl::notice_waits) {
            c.deliver_events();
        }
    }

    /// Ends every controller (the module goes). Process context.
    pub(crate) fn end_all(&self) {
        let ctrls = core::mem::take(&mut *self.ctrls.lock());
        for c in ctrls {
            c.end(self, "the target is going away");
        }
    }

    /// Ends the controllers `which` picks (`why` is logged). Process context.
    pub(crate) fn end_where(&self, why: &str, which: impl Fn(&Ctrl) -> bool) {
        for c in self.pick(which) {
            c.end(self, why);
        }
    }

    /// Controllers now.
    pub(crate) fn count(&self) -> usize {
        self.ctrls.lock().len()
    }

    /// A free controller ID (1 to 0xffef).
    fn cntlid(&self, ctrls: &[Arc<Ctrl>]) -> Option<u16> {
        for _ in 0..0xffef {
            let id = self.next_cntlid.fetch_add(1, Ordering::Relaxed) % 0xffef + 1;
            if !ctrls.iter().any(|c| c.cntlid == id) {
                return Some(id);
            }
        }
        None
    }

    /// Carries out a Fabrics command that is not a Connect on a queue of `ctrl`: Property Get
    /// and Set (admin queue only).
    pub(crate) fn fabrics(&self, ctrl: &Ctrl, qid: u16, sqe: &Sqe) -> Reply {
        match (sqe.fctype(), qid) {
            (FCTYPE_PROP_GET, 0) => ctrl.property_get(sqe),
            (FCTYPE_PROP_SET, 0) => ctrl.property_set(sqe),
            (FCTYPE_CONNECT, _) => Status::CMD_SEQ_ERROR.into(),
            _ => Status::INVALID_OPCODE.into(),
        }
    }
}

/// Reads the 16-bit command ID of a capsule that may be too short for [`Sqe::decode`].
pub(crate) fn raw_cid(b: &[u8]) -> u16 {
    le16(b, 2)
}
