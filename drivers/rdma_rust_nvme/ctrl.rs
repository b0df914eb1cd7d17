// SPDX-License-Identifier: GPL-2.0

//! A controller: its queues brought up (`bring_up.rs`), a disk per active namespace, and a
//! supervisor that sends the keep-alives and recovers the controller when a queue fails, as
//! nvme-rdma's error recovery does: every connection ends and its block requests go back to
//! the block layer (requeued), then a reconnect every `reconnect_delay` until one succeeds
//! (the requests go again on the new connections) or `ctrl_loss_tmo` has passed (they fail,
//! and so does all later I/O). Shut down (CC.SHN) and torn down when dropped.

use crate::disk::{IoQueues, Ns, IO_TIMEOUT_MS};
use crate::ident::{trim, NsIdent};
use crate::options::Options;
use crate::proto::{admin, reg, Command, IdCtrl, IdNs, Text, CNS_NS, CNS_NS_DESCS, IDENTIFY_LEN};
use crate::queue::{Blk, Counts, Data, Health, Queue, State, IN_CAPSULE_MAX, MAX_IO};
use core::sync::atomic::{AtomicI64, AtomicU16, AtomicU64, Ordering};
use kernel::block::mq::{gen_disk::GenDisk, gen_disk::GenDiskBuilder, TagSet};
use kernel::new_mutex;
use kernel::page::PAGE_SIZE;
use kernel::prelude::*;
use kernel::rdma::{
    device::Device,
    sync::{flush_work, msleep},
};
use kernel::sync::{Arc, Mutex};
use kernel::time::{ktime_ms_delta, Ktime};
use kernel::types::ScopeGuard;
use kernel::workqueue::{self, impl_has_work, new_work, Work, WorkItem};

mod bring_up;
mod events;

use bring_up::{get_reg, must, CC_EN, CC_QES, CC_SHN_NORMAL, CSTS_SHST_CMPLT, CSTS_SHST_MASK};

/// How often the supervisor looks at a controller without keep-alive.
const IDLE_MS: u32 = 1000;

/// One namespace's disk.
struct Disk {
    nsid: u32,
    disk: GenDisk<Blk>,
}

/// A controller's disks, and whether a recovery has their dispatch stopped.
struct Disks {
    list: KVec<Disk>,
    /// A disk added while this holds starts quiesced too, so that the recovery's end
    /// restarts every disk it stopped and no other.
    quiesced: bool,
}

/// What a controller counts, for the status file.
#[derive(Default)]
struct CtrlCounts {
    keep_alives: AtomicU64,
    async_events: AtomicU64,
    reconnects: AtomicU64,
}

/// A connected controller, owned by the module's list.
pub(crate) struct Ctrl {
    core: Arc<Core>,
}

/// What the controller's supervisor shares with its owner.
#[pin_data]
struct Core {
    instance: u32,
    opts: Options,
    /// The first connect's Identify Controller.
    id: IdCtrl,
    queue_size: u16,
    health: Arc<Health>,
    io: Arc<IoQueues>,
    /// The admin queue, replaced by each reconnect.
    #[pin]
    admin: Mutex<Arc<Queue>>,
    cntlid: AtomicU16,
    /// The RDMA device of the first connection.
    dev_name: KVec<u8>,
    /// The namespaces' disks; the supervisor quiesces them while it reconnects.
    #[pin]
    disks: Mutex<Disks>,
    /// The disks' one tag set (one hardware queue per I/O queue): a disk added later shares
    /// it, so that a queue's tags are never more than its entries.
    tagset: Arc<TagSet<Blk>>,
    /// When the last Keep Alive went (ms of `ktime_get`).
    keep_alive_ms: AtomicI64,
    counts: CtrlCounts,
    #[pin]
    work: Work<Core>,
    /// The namespace scans the events ask for (`events.rs`), in a work item of their own:
    /// adding and removing disks waits for I/O, which may wait for the supervisor's
    /// recovery.
    #[pin]
    scan: Work<Core, 1>,
    #[pin]
    scans: events::Scans,
}

impl_has_work! {
    impl HasWork<Self> for Core { self.work }
    impl HasWork<Self, 1> for Core { self.scan }
}

impl WorkItem for Core {
    type Pointer = Arc<Core>;

    /// The supervisor: a work item of the system long workqueue, until the controller is
    /// deleted.
    fn run(this: Arc<Core>) {
        let kato_ms = this.opts.kato * 1000;
        let period = if kato_ms > 0 { kato_ms / 2 } else { IDLE_MS };
        // Only the supervisor sends Asynchronous Event Requests: this one, then one after
        // each event and each reconnect.
        this.start_events();
        loop {
            // Keep-alives go by their own clock: an event's wake-up does not delay one.
            let left = (i64::from(period) - this.since_keep_alive()).clamp(0, i64::from(period));
            this.health.wait(left as u32);
            if this.health.stopping() {
                return;
            }
            if let Some((status, result)) = this.health.take_event() {
                this.async_event(status, result);
            }
            match this.health.state() {
                State::Recovering => this.recover(),
                State::Live if kato_ms > 0 && this.since_keep_alive() >= i64::from(period) => {
                    this.keep_alive(period)
                }
                _ => {}
            }
            Core::queue_scan(&this);
        }
    }
}

impl Core {
    fn admin(&self) -> Arc<Queue> {
        self.admin.lock().clone()
    }

    /// Milliseconds since the last Keep Alive was sent (or the controller was connected).
    fn since_keep_alive(&self) -> i64 {
        Ktime::ktime_get().to_ms() - self.keep_alive_ms.load(Ordering::Relaxed)
    }

    /// Sends a Keep Alive; one that fails or has no answer within `wait_ms` fails the admin
    /// queue, which starts the recovery.
    ///
    /// The supervisor waits for the answer no longer than the keep-alive period (half the
    /// keep-alive timeout), when the next Keep Alive is due: waiting the whole timeout would
    /// send none meanwhile, and the target, whose timer runs a whole timeout from the last
    /// Keep Alive it received, would end the connection at the same moment (a race the
    /// `keep_alive_unanswered` row once lost).
    fn keep_alive(&self, wait_ms: u32) {
        self.keep_alive_ms
            .store(Ktime::ktime_get().to_ms(), Ordering::Relaxed);
        let admin = self.admin();
        let sent = admin.command(Command::new(admin::KEEP_ALIVE, 0), Data::None, wait_ms);
        match sent {
            Ok(c) if c.is_ok() => {
                self.counts.keep_alives.fetch_add(1, Ordering::Relaxed);
            }
            Ok(c) => admin.fail(
                format_args!("a Keep Alive failed with status {:#x}", c.status),
                true,
            ),
            Err(e) => admin.fail(format_args!("a Keep Alive failed: {e:?}"), true),
        }
    }

    /// Stops the disks' dispatch and ends every connection (their block requests go back to
    /// the block layer, where they wait), then reconnects every `reconnect_delay` until a
    /// reconnect succeeds, `ctrl_loss_tmo` has passed or the controller is deleted; the
    /// disks dispatch again in each case (to the new connections, or to fail).
    fn recover(&self) {
        let o = &self.opts;
        pr_err!(
            "rnvme{}: connection to {} lost: reconnecting every {} s (ctrl_loss_tmo {} s)\n",
            self.instance,
            Text(&o.subnqn),
            o.reconnect_delay,
            o.ctrl_loss_tmo
        );
        // No `queue_rq` is halfway through posting to a queue that closes: what is submitted
        // from here waits in the block layer (a disk added meanwhile starts quiesced).
        self.quiesce(true);
        {
            // No timeout handler is giving a request back while the queues close.
            let _timeouts = self.io.recovery.lock();
            self.io.fail(format_args!("the controller reconnects"));
            self.io.close();
        }
        let admin = self.admin();
        admin.fail(format_args!("the controller reconnects"), true);
        admin.close();
        self.reconnect_until_lost();
        self.quiesce(false);
    }

    /// Stops (`true`) or restarts the dispatch of every disk.
    fn quiesce(&self, stop: bool) {
        let mut disks = self.disks.lock();
        disks.quiesced = stop;
        for d in disks.list.iter_mut() {
            if stop {
                d.disk.quiesce();
            } else {
                d.disk.unquiesce();
            }
        }
    }

    /// [`Core::recover`]'s reconnects.
    fn reconnect_until_lost(&self) {
        let o = &self.opts;
        let lost = Ktime::ktime_get();
        loop {
            self.health.wait(o.reconnect_delay * 1000);
            if self.health.stopping() {
                return;
            }
            match self.reconnect() {
                Ok(()) => {
                    self.counts.reconnects.fetch_add(1, Ordering::Relaxed);
                    if self.health.change(State::Recovering, State::Live) {
                        pr_info!("rnvme{}: reconnected\n", self.instance);
                    }
                    // An event of the old connection is stale; what changed meanwhile is
                    // found by a full scan, as nvme scans after each reconnect.
                    let _ = self.health.take_event();
                    self.start_events();
                    self.want_scan(None);
                    // A queue that failed while the others were connecting could not start a
                    // recovery (one was under way): it does now.
                    let dead = self.admin().is_dead() || self.io.all().any(|q| q.is_dead());
                    if dead {
                        self.health.queue_failed();
                    }
                    return;
                }
                Err(e) => pr_info!("rnvme{}: reconnect failed: {e:?}\n", self.instance),
            }
            let ms = ktime_ms_delta(Ktime::ktime_get(), lost);
            if o.ctrl_loss_tmo >= 0 && ms >= i64::from(o.ctrl_loss_tmo) * 1000 {
                if self.health.change(State::Recovering, State::Dead) {
                    pr_err!(
                        "rnvme{}: not reconnected within ctrl_loss_tmo ({} s): its I/O fails\n",
                        self.instance,
                        o.ctrl_loss_tmo
                    );
                }
                return;
            }
        }
    }

    /// Connects the controller again with as many I/O queues of as many entries as before,
    /// and puts the new queues in place of the old. Nothing is left behind on failure.
    fn reconnect(&self) -> Result {
        let n = self.io.len() as u16;
        let a = bring_up::admin(&self.opts, n, &self.health)?;
        let fits = a.granted >= n && a.id.maxcmd >= self.queue_size && a.mqes >= self.queue_size;
        if !fits {
            pr_err!(
                "rnvme{}: the target grants {} I/O queues of {} entries now, not {} of {}\n",
                self.instance,
                a.granted,
                a.id.maxcmd.min(a.mqes),
                n,
                self.queue_size
            );
            a.queue.close();
            return Err(EPROTO);
        }
        // The disks' limits and the queues' in-capsule size came from the first Identify.
        let (was, now) = (self.id.max_transfer, a.id.max_transfer);
        let smaller = now != 0 && (was == 0 || now < was);
        if smaller || a.id.in_capsule < self.id.in_capsule {
            pr_err!(
                "rnvme{}: the target's transfers are smaller now (MDTS {} bytes, in-capsule {} bytes; were {} and {})\n",
                self.instance,
                now,
                a.id.in_capsule,
                was,
                self.id.in_capsule
            );
            a.queue.close();
            return Err(EPROTO);
        }
        let queues = bring_up::io_queues(&self.opts, &a, n, self.queue_size, &self.health)
            .inspect_err(|_| a.queue.close())?;
        self.cntlid.store(a.cntlid, Ordering::Relaxed);
        *self.admin.lock() = a.queue;
        self.io.replace(queues);
        Ok(())
    }

    /// Identifies each namespace of `nsids` and adds a disk for the active ones; a namespace
    /// whose Identify fails is skipped, as nvme skips it.
    fn add_disks(&self, nsids: &[u32]) -> Result {
        let mut buf = KVec::from_elem(0u8, IDENTIFY_LEN, GFP_KERNEL)?;
        let admin = self.admin();
        for &nsid in nsids {
            // The target refused this one: the others may still be served.
            if !identify_ns(&admin, CNS_NS, nsid, &mut buf, "Identify Namespace")? {
                pr_err!("namespace {nsid}: Identify failed: not served\n");
                continue;
            }
            match IdNs::decode(&buf) {
                Ok(Some(ns)) => self.add_disk(&admin, nsid, &ns, &mut buf)?,
                Ok(None) => {}
                Err(why) => pr_err!("namespace {nsid}: {why}: not served\n"),
            }
        }
        Ok(())
    }

    /// Adds the disk of active namespace `nsid`, whose Identify Namespace data is `ns`;
    /// `buf` is room for an Identify.
    fn add_disk(&self, admin: &Queue, nsid: u32, ns: &IdNs, buf: &mut [u8]) -> Result {
        let max_io = match self.id.max_transfer {
            0 => MAX_IO,
            n => n.min(u64::from(MAX_IO)) as u32,
        };
        // Its identifiers: a target that has no descriptor list leaves those of
        // Identify Namespace.
        let what = "Identify Namespace Identification Descriptors";
        let descs = identify_ns(admin, CNS_NS_DESCS, nsid, buf, what)?.then_some(&*buf);
        let ident = NsIdent::new(nsid, &self.id, ns, descs, &self.opts.subnqn);
        let data = Arc::new(
            Ns {
                io: self.io.clone(),
                nsid,
                lba_shift: ns.lba_shift,
                ident,
            },
            GFP_KERNEL,
        )?;
        let block = 1u32 << ns.lba_shift;
        let disk = GenDiskBuilder::new()
            .capacity_sectors(ns.blocks << (ns.lba_shift - 9))
            .logical_block_size(block)?
            .physical_block_size(block)?
            .max_hw_sectors(max_io / 512)?
            .virt_boundary(PAGE_SIZE - 1)?
            .write_cache(self.id.write_cache)
            .timeout_ms(IO_TIMEOUT_MS)
            .build_with_attributes(
                format_args!("rnvme{}n{}", self.instance, nsid),
                self.tagset.clone(),
                data,
            )?;
        let mut disks = self.disks.lock();
        if let Err(e) = disks.list.reserve(1, GFP_KERNEL) {
            // The disk goes outside the lock: its removal waits for requests that a
            // recovery, which takes the lock, may be holding back.
            drop(disks);
            drop(disk);
            return Err(e.into());
        }
        let mut d = Disk { nsid, disk };
        if disks.quiesced {
            d.disk.quiesce();
        }
        disks.list.push(d, GFP_KERNEL)?;
        Ok(())
    }
}

/// Identify `cns` of namespace `nsid` into `buf`: `Ok(false)` if the target refused it and
/// the admin queue is still up, `Err` if the queue failed.
fn identify_ns(admin: &Queue, cns: u32, nsid: u32, buf: &mut [u8], what: &str) -> Result<bool> {
    buf.fill(0);
    match must(
        admin,
        Command::identify(cns, nsid),
        Data::FromTarget(buf),
        what,
    ) {
        Ok(_) => Ok(true),
        Err(_) if !admin.is_dead() => Ok(false),
        Err(e) => Err(e),
    }
}

impl Ctrl {
    /// Connects to the controller `opts` names and adds a disk per active namespace.
    /// Process context; nothing is left behind on failure.
    pub(crate) fn connect(opts: Options, instance: u32) -> Result<Self> {
        let health = Arc::pin_init(Health::new(), GFP_KERNEL)?;
        let a = bring_up::admin(&opts, opts.nr_io_queues, &health)?;
        // Until the supervisor owns them, a failure closes the queues made so far; the
        // I/O queues' guard, made last, closes them first, as the kernel's host does.
        let admin = ScopeGuard::new_with_data(a.queue.clone(), |q| q.close());
        let nr_io = opts.nr_io_queues.min(a.granted);
        let queue_size = opts.queue_size.min(a.id.maxcmd).min(a.mqes).max(2);
        let queues = bring_up::io_queues(&opts, &a, nr_io, queue_size, &health)?;
        let io = ScopeGuard::new_with_data(IoQueues::new(queues, health.clone())?, |io| io.close());
        let nsids = bring_up::scan(&a.queue, &a.id)?;
        // One command fewer than the queue's entries, as nvme's tag sets (`sqsize`): a full
        // submission queue holds one entry fewer than its size.
        let tagset = Arc::pin_init(
            TagSet::new(io.len() as u32, u32::from(queue_size) - 1, 1),
            GFP_KERNEL,
        )?;
        let mut dev_name = KVec::new();
        dev_name.extend_from_slice(a.queue.device_name().as_bytes(), GFP_KERNEL)?;
        let (io2, admin2) = ((*io).clone(), (*admin).clone());
        let core = Arc::pin_init(
            pin_init!(Core {
                instance,
                opts,
                id: a.id,
                queue_size,
                health,
                io: io2,
                admin <- new_mutex!(admin2, "rdma_rust_nvme_admin"),
                cntlid: AtomicU16::new(a.cntlid),
                dev_name,
                disks <- new_mutex!(
                    Disks {
                        list: KVec::new(),
                        quiesced: false,
                    },
                    "rdma_rust_nvme_disks"
                ),
                tagset,
                keep_alive_ms: AtomicI64::new(Ktime::ktime_get().to_ms()),
                counts: CtrlCounts::default(),
                work <- new_work!("rdma_rust_nvme_supervisor"),
                scan <- new_work!("rdma_rust_nvme_scan"),
                scans <- events::Scans::new(),
            }),
            GFP_KERNEL,
        )?;
        // The supervisor runs before the disks are added: a queue failing under the
        // partition scan's reads is recovered (or the controller given up) like any other.
        workqueue::system_long()
            .enqueue::<Arc<Core>, 0>(core.clone())
            .map_err(|_| EBUSY)?;
        io.dismiss();
        admin.dismiss();
        let ctrl = Self { core };
        // From here dropping `ctrl` undoes everything.
        {
            let _scanning = ctrl.core.scans.running.lock();
            ctrl.core.add_disks(&nsids)?;
        }
        Ok(ctrl)
    }

    pub(crate) fn instance(&self) -> u32 {
        self.core.instance
    }

    pub(crate) fn cntlid(&self) -> u16 {
        self.core.cntlid.load(Ordering::Relaxed)
    }

    pub(crate) fn opts(&self) -> &Options {
        &self.core.opts
    }

    /// Whether the controller's first connection was on `dev`.
    pub(crate) fn is_on(&self, dev: &Device) -> bool {
        self.core.dev_name.as_slice() == dev.name().as_bytes()
    }

    /// One line of the status file.
    pub(crate) fn status(&self, f: &mut impl core::fmt::Write) -> core::fmt::Result {
        let c = &self.core;
        let counts: Counts = c.io.counts();
        let state = match c.health.state() {
            State::Live => "live",
            State::Recovering => "connecting",
            State::Dead => "dead",
            State::Deleting => "deleting",
        };
        write!(
            f,
            "ctrl {} state {} traddr {} trsvcid {} subnqn {} cntlid {} serial {} model {} io_queues {} queue_size {} in_capsule_max {} disks ",
            c.instance,
            state,
            Text(&c.opts.traddr),
            c.opts.trsvcid,
            Text(&c.opts.subnqn),
            self.cntlid(),
            Text(trim(&c.id.serial)),
            Text(trim(&c.id.model)),
            c.io.len(),
            c.queue_size,
            c.id.in_capsule.min(IN_CAPSULE_MAX),
        )?;
        let disks = c.disks.lock();
        for (i, d) in disks.list.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            write!(f, "{sep}rnvme{}n{}", c.instance, d.nsid)?;
        }
        if disks.list.is_empty() {
            write!(f, "-")?;
        }
        drop(disks);
        let unended: u64 =
            c.io.all().map(|q| q.unended()).sum::<u64>() + c.io.unended.load(Ordering::Relaxed);
        writeln!(
            f,
            " completed {} errors {} in_capsule {} keyed {} local_inv {} flushes {} fua {} timeouts {} keep_alives {} async_events {} reconnects {} unended {}",
            counts.completed,
            counts.errors,
            counts.in_capsule,
            counts.keyed,
            counts.local_inv,
            counts.flushes,
            counts.fua,
            c.io.timeouts.load(Ordering::Relaxed),
            c.counts.keep_alives.load(Ordering::Relaxed),
            c.counts.async_events.load(Ordering::Relaxed),
            c.counts.reconnects.load(Ordering::Relaxed),
            unended
        )
    }
}

impl Drop for Ctrl {
    /// Stops the supervisor, removes the disks (a live controller's I/O goes on meanwhile, one
    /// that is not live fails it), shuts the controller down (CC.SHN) and ends the
    /// connections. Process context.
    fn drop(&mut self) {
        let c = &self.core;
        c.health.stop_recovery();
        // Returns once no reconnect or keep-alive is under way; the supervisor queues no
        // scan after it, and a scan under way ends (a deleting controller fails its I/O).
        flush_work(&c.work);
        flush_work(&c.scan);
        let admin = c.admin();
        if c.health.state() != State::Live {
            c.io.fail(format_args!("deleting"));
        }
        let disks = core::mem::take(&mut c.disks.lock().list);
        drop(disks);
        if c.health.state() == State::Live && !admin.is_dead() {
            // Shutdown keeps the controller enabled (CC.EN), as nvme's.
            let shut = Command::prop_set(reg::CC, CC_QES | CC_EN | CC_SHN_NORMAL);
            if must(&admin, shut, Data::None, "Property Set CC.SHN").is_ok() {
                for _ in 0..20 {
                    match get_reg(&admin, reg::CSTS, false, "Property Get CSTS") {
                        Ok(v) if v as u32 & CSTS_SHST_MASK == CSTS_SHST_CMPLT => break,
                        Ok(_) => msleep(100),
                        Err(_) => break,
                    }
                }
            }
        }
        // The I/O queues end before the admin queue, as the kernel's host ends them.
        c.io.close();
        admin.close();
    }
}
