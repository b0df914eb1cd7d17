// SPDX-License-Identifier: GPL-2.0

//! A controller's asynchronous events and the namespace scans they ask for.
//!
//! The supervisor keeps one Asynchronous Event Request in flight on the admin queue
//! ([`Core::start_events`], after each connect) and handles its completion
//! ([`Core::async_event`]): it logs the event, reads the Changed Namespace List for a
//! Namespace Attribute Changed notice (which clears it: the target sends no other of its kind
//! before), asks for a scan of the namespaces it names, and sends the next request. Every
//! other event is logged only. A reconnect asks for a scan of every namespace.
//!
//! The scans run in a work item of their own ([`WorkItem<1>`] of [`Core`]), never the
//! supervisor's: adding a disk reads its partition table and removing one waits for its
//! requests, and either may wait for the recovery that only the supervisor runs. A
//! namespace whose Identify says it is active gets a disk if it has none; one whose
//! Identify data is all zeroes (inactive) loses its disk; one whose Identify failed keeps
//! what it has.

use super::{identify_ns, must, Core};
use crate::proto::{
    AsyncEvent, Command, IdNs, AEN_NS_ATTR, CNS_NS, IDENTIFY_LEN, LOG_CHANGED_NS,
    LOG_CHANGED_NS_LEN,
};
use crate::queue::{Data, Queue};
use core::sync::atomic::Ordering;
use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::{Arc, Mutex};
use kernel::workqueue::{self, WorkItem};

/// A controller's scans: those asked for, and the lock of the one running.
#[pin_data]
pub(super) struct Scans {
    #[pin]
    wanted: Mutex<ScanWanted>,
    /// Held while disks are added or removed: by the first scan, and by the events' scans.
    #[pin]
    pub(super) running: Mutex<()>,
}

impl Scans {
    pub(super) fn new() -> impl PinInit<Self> {
        pin_init!(Scans {
            wanted <- new_mutex!(ScanWanted::new(), "rdma_rust_nvme_scan_wanted"),
            running <- new_mutex!((), "rdma_rust_nvme_scan_running"),
        })
    }
}

/// The scans asked for and not run yet.
struct ScanWanted {
    /// Every namespace (after a reconnect, or a list too long to hold them).
    all: bool,
    nsids: KVec<u32>,
    /// Asked for since the supervisor last queued the scan's work.
    due: bool,
}

impl ScanWanted {
    const fn new() -> Self {
        Self {
            all: false,
            nsids: KVec::new(),
            due: false,
        }
    }
}

/// What Identify Namespace said of a namespace.
enum Seen {
    /// Active, with its Identify Namespace data.
    Active(IdNs),
    Inactive,
    /// The command failed, or its data is unusable: the disk stays as it is.
    Unknown,
}

impl WorkItem<1> for Core {
    type Pointer = Arc<Core>;

    /// The scans asked for: a work item of the system long workqueue.
    fn run(this: Arc<Core>) {
        if this.health.stopping() {
            return;
        }
        let wanted = core::mem::replace(&mut *this.scans.wanted.lock(), ScanWanted::new());
        let _running = this.scans.running.lock();
        let admin = this.admin();
        let nsids = if wanted.all {
            match super::bring_up::scan(&admin, &this.id) {
                Ok(active) => {
                    this.remove_disks_but(&active);
                    active
                }
                Err(e) => {
                    pr_err!("rnvme{}: namespace scan failed: {e:?}\n", this.instance);
                    return;
                }
            }
        } else {
            wanted.nsids
        };
        let Ok(mut buf) = KVec::from_elem(0u8, IDENTIFY_LEN, GFP_KERNEL) else {
            return;
        };
        for &nsid in nsids.iter() {
            if this.health.stopping() {
                return;
            }
            let has = this.disks.lock().list.iter().any(|d| d.nsid == nsid);
            match (seen(&admin, nsid, &mut buf), has) {
                (Seen::Active(ns), false) => {
                    if let Err(e) = this.add_disk(&admin, nsid, &ns, &mut buf) {
                        pr_err!("rnvme{}: namespace {nsid}: no disk: {e:?}\n", this.instance);
                    }
                }
                (Seen::Inactive, true) => this.remove_disk(nsid),
                _ => {}
            }
        }
    }
}

impl Core {
    /// Asks the controller for the events the host handles (namespace attribute notices,
    /// where it has them) and sends an Asynchronous Event Request. The supervisor's, after
    /// each connect; a failure is logged, and the controller goes on without events.
    pub(super) fn start_events(&self) {
        let admin = self.admin();
        let aen = self.id.oaes & AEN_NS_ATTR;
        if aen != 0 {
            let set = Command::set_async_events(aen);
            let what = "Set Features Asynchronous Event Configuration";
            if must(&admin, set, Data::None, what).is_err() {
                return;
            }
        }
        self.post_event(&admin);
    }

    /// An Asynchronous Event Request completed with `status` and `result`: see the module's
    /// documentation. One that failed ended with its connection: the next connect sends
    /// another.
    pub(super) fn async_event(&self, status: u16, result: u32) {
        if status & 0x7ff != 0 {
            return;
        }
        self.counts.async_events.fetch_add(1, Ordering::Relaxed);
        let ev = AsyncEvent::decode(result);
        pr_info!(
            "rnvme{}: asynchronous event: type {} information {:#x} log page {:#x}\n",
            self.instance,
            ev.kind,
            ev.info,
            ev.log_page
        );
        let admin = self.admin();
        if (ev.kind, ev.info) == AsyncEvent::NS_CHANGED && ev.log_page == LOG_CHANGED_NS {
            match KVec::from_elem(0u8, LOG_CHANGED_NS_LEN, GFP_KERNEL) {
                Ok(mut log) => {
                    let read = must(
                        &admin,
                        Command::get_log_page(LOG_CHANGED_NS, LOG_CHANGED_NS_LEN),
                        Data::FromTarget(&mut log),
                        "Get Log Page (Changed Namespace List)",
                    );
                    if read.is_ok() {
                        self.want_scan(Some(&log));
                    }
                }
                // Not read, the notice is not cleared: scan everything instead.
                Err(_) => self.want_scan(None),
            }
        }
        self.post_event(&admin);
    }

    /// Sends the next Asynchronous Event Request on `admin`, unless it failed.
    fn post_event(&self, admin: &Queue) {
        if admin.is_dead() {
            return;
        }
        if let Err(e) = admin.post_event() {
            pr_err!(
                "rnvme{}: no Asynchronous Event Request: {e:?}\n",
                self.instance
            );
        }
    }

    /// Asks for a scan of the namespaces of a Changed Namespace List `log` (NSIDs, to the
    /// first 0; 0xffffffff first: more than it holds), or of every one (`None`); the
    /// supervisor queues the scan's work ([`Core::queue_scan`]).
    pub(super) fn want_scan(&self, log: Option<&[u8]>) {
        {
            let mut wanted = self.scans.wanted.lock();
            wanted.due = true;
            match log {
                Some(log) if log.get(..4) != Some(&[0xff; 4]) => {
                    let listed = log
                        .chunks_exact(4)
                        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        .take_while(|&n| n != 0);
                    for nsid in listed {
                        if !wanted.nsids.contains(&nsid)
                            && wanted.nsids.push(nsid, GFP_KERNEL).is_err()
                        {
                            wanted.all = true;
                            break;
                        }
                    }
                }
                _ => wanted.all = true,
            }
        }
    }

    /// Queues the scan's work if a scan was asked for since.
    pub(super) fn queue_scan(this: &Arc<Core>) {
        let due = core::mem::take(&mut this.scans.wanted.lock().due);
        if due {
            // Already queued: it takes what is wanted when it runs.
            let _ = workqueue::system_long().enqueue::<Arc<Core>, 1>(this.clone());
        }
    }

    /// Removes the disk of namespace `nsid`; outside the disks' lock, as its removal waits
    /// for its requests.
    fn remove_disk(&self, nsid: u32) {
        let gone = {
            let mut disks = self.disks.lock();
            let at = disks.list.iter().position(|d| d.nsid == nsid);
            at.and_then(|i| disks.list.remove(i))
        };
        if gone.is_some() {
            drop(gone);
            pr_info!(
                "rnvme{}: namespace {nsid} is gone: rnvme{}n{nsid} removed\n",
                self.instance,
                self.instance
            );
        }
    }

    /// Removes the disks of the namespaces not in `active`.
    fn remove_disks_but(&self, active: &[u32]) {
        let mut gone = KVec::new();
        for d in self.disks.lock().list.iter() {
            if !active.contains(&d.nsid) && gone.push(d.nsid, GFP_KERNEL).is_err() {
                break;
            }
        }
        for &nsid in gone.iter() {
            self.remove_disk(nsid);
        }
    }
}

/// What Identify Namespace says of `nsid` now.
fn seen(admin: &Queue, nsid: u32, buf: &mut [u8]) -> Seen {
    match identify_ns(admin, CNS_NS, nsid, buf, "Identify Namespace") {
        Ok(true) => match IdNs::decode(buf) {
            Ok(Some(ns)) => Seen::Active(ns),
            Ok(None) => Seen::Inactive,
            Err(_) => Seen::Unknown,
        },
        _ => Seen::Unknown,
    }
}
