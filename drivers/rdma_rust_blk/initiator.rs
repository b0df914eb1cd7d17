// SPDX-License-Identifier: GPL-2.0

//! The initiator: a disk, `/dev/rrbdN`, served by the connections to a target's volume.
//!
//! Each hardware queue of the disk is one RC connection ([`IoQueue`], in [`queue`]); this
//! file connects them and serves the disk's blk-mq operations with them.

use crate::proto::{
    Hello, Name, Refusal, Welcome, INLINE_MAX, MAX_DEPTH, MAX_DISCARD, MAX_IO, SECTOR,
};
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::block::mq::{
    self, gen_disk::GenDisk, Operations, Request, TagSet, TimedOut, TimeoutAction,
};
use kernel::new_mutex;
use kernel::prelude::*;
use kernel::rdma::{
    cm::{CmId, ConnParam, Event, Handler, Id, PortSpace, SockAddr},
    cq::{Cq, PollContext},
    device::Device,
    dma::MAX_SGE,
    pd::Pd,
    qp::QpCaps,
    sync::Completion as Signal,
};
use kernel::sync::{Arc, ArcBorrow, Mutex};
use kernel::types::ARef;

mod queue;

pub(crate) use queue::{IoQueue, QueueStats};
use queue::{IO_TIMEOUT_MS, KEEPALIVE_MS};

/// How long address and route resolution may take.
const RESOLVE_MS: u32 = 2000;
/// How long a connection may take to be established (or refused).
const CONNECT_MS: u32 = 10_000;
/// Hardware queues of a disk at most.
pub(crate) const MAX_QUEUES: u16 = 16;

/// What a `connect` asks for.
pub(crate) struct ConnectSpec {
    pub(crate) addr: SockAddr,
    pub(crate) name: Name,
    pub(crate) queues: u16,
    pub(crate) depth: u16,
    /// The device reads and writes the block requests' own pages (the default): an inline
    /// write's SEND gathers them, an I/O above the inline size names them. With
    /// `zerocopy=0` the data is copied: into the command's buffer or through the bounce
    /// buffer.
    pub(crate) zerocopy: bool,
    /// Where the queues' completions run: the high-priority completion workqueue (the
    /// default) or, with `poll=softirq`, softirq as nvme-rdma's; see [`connect_queue`].
    pub(crate) poll: PollContext,
    /// What a hostile initiator (`probe`) does otherwise in the handshake; a disk's is the
    /// default.
    pub(crate) handshake: Handshake,
}

/// How a hostile initiator (`probe`, for testing targets) departs from the handshake.
#[derive(Clone, Copy, Default)]
pub(crate) struct Handshake {
    /// The responder resources the connect offers (the RDMA READs the target may have
    /// outstanding against it), instead of what the device allows.
    pub(crate) reads: Option<u8>,
    /// Connect with no QP and refuse the target's accept (a reject after its reply), as an
    /// initiator that gives up half way does ([`abort_connect`]; [`connect_queue`] refuses
    /// it).
    pub(crate) abort: bool,
}

/// `RDMA_CM_EVENT_CONNECT_RESPONSE` (`include/rdma/rdma_cm.h`): the reply to the connect of
/// an id with no QP, which the caller answers (accepts or rejects).
const CM_EVENT_CONNECT_RESPONSE: u32 = 5;

/// The blk-mq operations of every rrbd disk.
pub(crate) struct Blk;

/// A disk's connections: the queue data of its request queue.
pub(crate) struct Conn {
    pub(crate) queues: KVec<Arc<IoQueue>>,
    pub(crate) welcome: Welcome,
    pub(crate) addr: SockAddr,
    pub(crate) name: Name,
    pub(crate) dev_name: KVec<u8>,
    pub(crate) timeouts: AtomicU64,
    /// Block requests that could not be ended outside a queue (see [`IoQueue::end`]).
    pub(crate) unended: AtomicU64,
    pub(crate) poll: PollContext,
}

impl Conn {
    /// Hardware queues whose connection failed.
    pub(crate) fn dead_queues(&self) -> usize {
        self.queues.iter().filter(|q| q.is_dead()).count()
    }

    /// Block requests in flight.
    pub(crate) fn in_flight(&self) -> usize {
        self.queues.iter().map(|q| q.in_flight()).sum()
    }

    /// Fails every queue: requests in flight end with `EIO`, and so will new ones. Process
    /// context.
    pub(crate) fn fail(&self, why: core::fmt::Arguments<'_>) {
        for q in self.queues.iter() {
            q.fail(why, true);
        }
    }
}

impl Drop for Conn {
    /// Ends the connections and frees them, whatever path drops them (a disconnect, a connect
    /// that failed half way). The last reference goes after the disk (whose queue data holds
    /// one), so no request can be queued any more. Process context.
    fn drop(&mut self) {
        for q in self.queues.iter() {
            q.close();
        }
    }
}

#[vtable]
impl Operations for Blk {
    type QueueData = Arc<Conn>;

    fn queue_rq(conn: ArcBorrow<'_, Conn>, rq: ARef<Request<Self>>, _is_last: bool) -> Result {
        match conn.queues.get(rq.hw_queue() as usize) {
            Some(q) => q.submit(rq),
            None => {
                if Request::end(rq, Err(EIO)).is_err() {
                    // Nothing else holds a request no queue took.
                    conn.unended.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            }
        }
    }

    fn commit_rqs(_conn: ArcBorrow<'_, Conn>) {}

    fn timeout(conn: ArcBorrow<'_, Conn>, rq: TimedOut) -> TimeoutAction {
        let Some(q) = conn.queues.get(rq.hw_queue() as usize) else {
            return TimeoutAction::ResetTimer;
        };
        let tag = rq.tag() as usize;
        if !q.is_dead() {
            // A keep-alive asks the target whether it lives: if not, it fails the queue (and
            // this request) within the QP's retries, or `tick` does once it stays unanswered.
            if !q.tick(tag) {
                conn.timeouts.fetch_add(1, Ordering::Relaxed);
                pr_err!(
                    "queue {}: a request of {} bytes at sector {} timed out after {} ms\n",
                    q.index(),
                    rq.bytes(),
                    rq.sector(),
                    IO_TIMEOUT_MS
                );
            } else if !q.is_dead() {
                return TimeoutAction::ResetTimer;
            }
        }
        // The target does not answer, or the queue failed before: failing it (again) ends this
        // request if it is still ours (an answer may have ended it meanwhile) and every other
        // one, once nothing reaches their pages (a registered request's MR goes first, see
        // `IoQueue::end_failed`); the timer comes back for those that wait.
        q.fail(format_args!("a request timed out"), true);
        if q.ending(tag) {
            TimeoutAction::ResetTimer
        } else {
            TimeoutAction::Done
        }
    }
}

/// How far a queue's connection has come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Idle,
    AddrResolved,
    RouteResolved,
    Established(Welcome),
    /// A hostile connect refused the target's accept ([`Handshake::abort`]).
    Aborted,
    Failed(Error),
}

/// What a queue's id handler shares with the thread that connects it.
#[pin_data]
struct Waiter {
    #[pin]
    step: Mutex<Step>,
    #[pin]
    signal: Signal,
    /// The queue, once connected: failed when the connection ends.
    #[pin]
    queue: Mutex<Option<Arc<IoQueue>>>,
}

impl Waiter {
    fn set(&self, s: Step) {
        *self.step.lock() = s;
        self.signal.complete();
    }

    /// Waits up to `ms` for a step that `want` accepts.
    fn wait(&self, want: &dyn Fn(&Step) -> bool, ms: u32) -> Result<Step> {
        let deadline_ok = self.signal.wait_timeout(ms).is_ok();
        let now = *self.step.lock();
        match now {
            Step::Failed(e) => Err(e),
            s if want(&s) => Ok(s),
            _ if !deadline_ok => Err(ETIMEDOUT),
            _ => Err(EPROTO),
        }
    }
}

/// The event handler of a queue's id.
pub(crate) struct IniEv {
    waiter: Arc<Waiter>,
    /// Refuse the target's accept ([`Handshake::abort`]).
    abort: bool,
}

impl Handler for IniEv {
    fn event(&self, id: &Id, event: Event<'_, Self>) {
        let w = &self.waiter;
        match event {
            Event::AddrResolved => w.set(Step::AddrResolved),
            Event::RouteResolved => w.set(Step::RouteResolved),
            Event::AddrError(e) | Event::RouteError(e) => w.set(Step::Failed(e)),
            Event::Established { private_data, .. } => match Welcome::decode(private_data) {
                Ok(welcome) => w.set(Step::Established(welcome)),
                Err(e) => {
                    pr_err!("connect: the target's accept is not a welcome of this protocol\n");
                    w.set(Step::Failed(e));
                }
            },
            Event::Rejected { private_data, .. } => {
                match Refusal::decode(private_data) {
                    Some(why) => pr_err!("connect: the target refused: {why:?}\n"),
                    None => pr_err!("connect: the connection was refused (nothing listens?)\n"),
                }
                w.set(Step::Failed(ECONNREFUSED));
            }
            Event::Unreachable(e) | Event::ConnectError(e) => w.set(Step::Failed(e)),
            Event::Other(CM_EVENT_CONNECT_RESPONSE, _) if self.abort => {
                // The target accepted (its session is set up): refused now, after the fact.
                match id.reject(&[]) {
                    Ok(()) => w.set(Step::Aborted),
                    Err(e) => w.set(Step::Failed(e)),
                }
            }
            Event::Disconnected | Event::DeviceRemoval => {
                w.set(Step::Failed(ECONNRESET));
                let q = w.queue.lock().clone();
                if let Some(q) = q {
                    q.fail(format_args!("the target disconnected"), true);
                }
                // The target's DREQ is answered now, not at `disconnect`: its session ends
                // with the DREP (else only when its DREQ times out). The failed disk stays.
                if matches!(event, Event::Disconnected) {
                    let _ = id.disconnect();
                }
            }
            _ => {}
        }
    }
}

/// A new id for `spec`, its address and route resolved (process context).
fn resolve(spec: &ConnectSpec) -> Result<(CmId<IniEv>, Arc<Waiter>)> {
    let waiter = Arc::pin_init(
        pin_init!(Waiter {
            step <- new_mutex!(Step::Idle, "rdma_rust_blk_step"),
            signal <- Signal::new(),
            queue <- new_mutex!(None, "rdma_rust_blk_waiter_queue"),
        }),
        GFP_KERNEL,
    )?;
    let id = CmId::new(
        PortSpace::Tcp,
        IniEv {
            waiter: waiter.clone(),
            abort: spec.handshake.abort,
        },
    )?;
    let step = |want: &dyn Fn(&Step) -> bool, ms: u32, what: &str| {
        waiter.wait(want, ms + 1000).inspect_err(|e| {
            pr_err!("connect {}: {what}: {e:?}\n", spec.addr);
        })
    };
    id.resolve_addr(None, spec.addr, RESOLVE_MS)?;
    step(
        &|s| *s == Step::AddrResolved,
        RESOLVE_MS,
        "cannot resolve the address",
    )?;
    waiter.signal.reinit();
    id.resolve_route(RESOLVE_MS)?;
    step(&|s| *s == Step::RouteResolved, RESOLVE_MS, "no route")?;
    waiter.signal.reinit();
    Ok((id, waiter))
}

/// Connects one queue (process context).
pub(crate) fn connect_queue(spec: &ConnectSpec, index: u16) -> Result<(Arc<IoQueue>, Welcome)> {
    if spec.handshake.abort {
        return Err(EINVAL);
    }
    let (id, waiter) = resolve(spec)?;
    let step = |want: &dyn Fn(&Step) -> bool, ms: u32, what: &str| {
        waiter.wait(want, ms + 1000).inspect_err(|e| {
            pr_err!("connect {}: {what}: {e:?}\n", spec.addr);
        })
    };
    let dev = id.device().ok_or(ENODEV)?;
    let depth = u32::from(spec.depth);
    let pd = Pd::new(&dev)?;
    // By default completions run in the core's high-priority completion workqueue, not in
    // softirq as nvme-rdma's do: a CQ event raised from soft-RoCE's kworkers (not an
    // interrupt) waits for ksoftirqd, which queues behind those kworkers, while a
    // high-priority kworker runs first. Depth-1 4 KiB writes went from 0.91x nvme-rdma to
    // 1.09x (pooled boots, see the documentation). `poll=softirq` keeps softirq, so that one
    // boot can compare the two. Nothing here sleeps: the handlers are the same in either.
    let cq = Cq::new(
        &dev,
        3 * depth + 8,
        u32::from(index) % dev.num_comp_vectors().max(1),
        spec.poll,
    )?;
    // An inline write's SEND gathers the command and the request's pages (a device that
    // gathers one entry only gets copies).
    let send_sge = dev.attrs().max_send_sge().clamp(1, MAX_SGE as u32);
    let caps = QpCaps {
        // A REG_MR and a SEND per request.
        send_depth: 2 * depth + 2,
        recv_depth: depth + 1,
        send_sge,
        ..QpCaps::default()
    };
    let qp = id.create_qp(&pd, &cq, &cq, &caps)?;
    let hello = Hello {
        queue: index,
        depth: spec.depth,
        name: spec.name,
    }
    .encode();
    // The target RDMA READs a write's data from us: as many READs may be outstanding against
    // this QP as it has requests, if the device allows.
    let reads = u32::from(spec.depth)
        .min(dev.attrs().max_qp_rd_atom())
        .min(255);
    id.connect(&ConnParam {
        private_data: &hello,
        responder_resources: spec.handshake.reads.unwrap_or(reads as u8),
        initiator_depth: 0,
        ..ConnParam::default()
    })?;
    let established = |s: &Step| matches!(s, Step::Established(_));
    let Step::Established(welcome) = step(&established, CONNECT_MS, "cannot connect")? else {
        return Err(EPROTO);
    };
    let qp = Arc::new(qp.established()?, GFP_KERNEL)?;
    let q = Arc::pin_init(
        IoQueue::new(
            index,
            qp,
            spec.depth,
            welcome.inline_max.min(INLINE_MAX),
            welcome.block_size,
            // The SEND's other entries, for an inline write's pages (none: copied).
            if spec.zerocopy {
                send_sge as usize - 1
            } else {
                0
            },
        ),
        GFP_KERNEL,
    )?;
    // From here `close` frees what the queue holds, on every path.
    if let Err(e) = q.fill(id, &pd, spec.zerocopy) {
        q.close();
        return Err(e);
    }
    *waiter.queue.lock() = Some(q.clone());
    Ok((q, welcome))
}

/// A hostile connect ([`Handshake::abort`]) of queue 0: connects with no QP (the CM then
/// hands the target's accept to the handler, which refuses it) and waits for that. `Ok` once
/// the accept was refused; `ECONNREFUSED` if the target refused first. Process context.
pub(crate) fn abort_connect(spec: &ConnectSpec) -> Result {
    if !spec.handshake.abort {
        return Err(EINVAL);
    }
    let (id, waiter) = resolve(spec)?;
    let hello = Hello {
        queue: 0,
        depth: spec.depth,
        name: spec.name,
    }
    .encode();
    id.connect(&ConnParam {
        private_data: &hello,
        responder_resources: spec.handshake.reads.unwrap_or(1),
        initiator_depth: 0,
        // No QP on the id: the number the target connects its QP to, never used.
        qp_num: 0x00ab_cdef,
        ..ConnParam::default()
    })?;
    waiter
        .wait(&|s| *s == Step::Aborted, CONNECT_MS + 1000)
        .map(|_| ())
        .inspect_err(|e| pr_err!("connect {}: cannot connect: {e:?}\n", spec.addr))
}

/// A connected disk.
pub(crate) struct Disk {
    pub(crate) index: u32,
    pub(crate) conn: Arc<Conn>,
    disk: Option<GenDisk<Blk>>,
}

impl Disk {
    /// Connects `spec.queues` queues to the target and adds the disk `rrbd<index>`. Process
    /// context; nothing is left behind on failure.
    pub(crate) fn connect(spec: &ConnectSpec, index: u32) -> Result<Self> {
        if spec.queues == 0 || spec.queues > MAX_QUEUES || spec.depth == 0 || spec.depth > MAX_DEPTH
        {
            return Err(EINVAL);
        }
        let mut queues = KVec::with_capacity(spec.queues as usize, GFP_KERNEL)?;
        let mut welcome = None;
        let mut dev_name = KVec::new();
        let mut failed = None;
        for i in 0..spec.queues {
            match connect_queue(spec, i) {
                Ok((q, w)) => {
                    if welcome.is_none() {
                        welcome = Some(w);
                        let _ = dev_name.extend_from_slice(q.device_name().as_bytes(), GFP_KERNEL);
                    }
                    // Every queue must see the same volume.
                    let same = welcome.is_some_and(|v: Welcome| {
                        v.capacity == w.capacity && v.block_size == w.block_size
                    });
                    let pushed = queues.push(q.clone(), GFP_KERNEL);
                    if !same || pushed.is_err() {
                        q.close();
                        failed = Some(if same { ENOMEM } else { EPROTO });
                        break;
                    }
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        let close_all = |queues: &KVec<Arc<IoQueue>>| {
            for q in queues.iter() {
                q.close();
            }
        };
        let welcome = match (failed, welcome) {
            (None, Some(w)) => w,
            (f, _) => {
                close_all(&queues);
                return Err(f.unwrap_or(EINVAL));
            }
        };
        let conn: Arc<Conn> = Arc::new(
            Conn {
                queues,
                welcome,
                addr: spec.addr,
                name: spec.name,
                dev_name,
                timeouts: AtomicU64::new(0),
                unended: AtomicU64::new(0),
                poll: spec.poll,
            },
            GFP_KERNEL,
        )?;
        let built = Arc::pin_init(
            TagSet::new(u32::from(spec.queues), u32::from(spec.depth), 1),
            GFP_KERNEL,
        )
        .and_then(|tagset| {
            mq::gen_disk::GenDiskBuilder::new()
                .capacity_sectors(welcome.capacity / SECTOR)
                .logical_block_size(welcome.block_size)?
                .physical_block_size(welcome.block_size)?
                .max_hw_sectors(welcome.max_io.min(MAX_IO) / SECTOR as u32)?
                .max_discard_sectors(MAX_DISCARD / SECTOR as u32)
                .timeout_ms(KEEPALIVE_MS)
                .build(format_args!("rrbd{index}"), tagset, conn.clone())
        });
        match built {
            Ok(disk) => Ok(Self {
                index,
                conn,
                disk: Some(disk),
            }),
            // `conn` goes here, which ends its connections.
            Err(e) => Err(e),
        }
    }

    /// Removes the disk, then ends its connections (as dropping it does). Process context.
    pub(crate) fn disconnect(self) {
        drop(self);
    }

    /// Whether the disk's connections are on `dev`.
    pub(crate) fn is_on(&self, dev: &Device) -> bool {
        self.conn.dev_name.as_slice() == dev.name().as_bytes()
    }
}

impl Drop for Disk {
    /// Removes the disk; its connections end when `conn`, the last reference to them, goes
    /// right after. A dead target's requests are failed first, so that removing the disk
    /// never waits for them. Process context.
    fn drop(&mut self) {
        if self.conn.dead_queues() > 0 {
            self.conn.fail(format_args!("disconnecting"));
        }
        drop(self.disk.take());
    }
}
