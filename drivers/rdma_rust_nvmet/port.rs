// SPDX-License-Identifier: GPL-2.0

//! Ports: an rdma_cm listener on an address, and the queues of the hosts connected through it.
//!
//! A port listens while at least one subsystem is linked to it (as nvmet's do). Each
//! connection request is one queue: its private data ([`CmRequest`]) names the queue and its
//! sizes; a request the target cannot serve is rejected with the NVMe/RDMA status that says
//! why. An accepted connection is a [`Queue`]; its first command must be a Connect.

use crate::config::{PortConf, Subsys};
use crate::ctrl::Target;
use crate::proto::{cm_reject, cm_reply, CmRefusal, CmRequest};
use crate::queue::{Hangup, Queue};
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use kernel::new_mutex;
use kernel::prelude::*;
use kernel::rdma::cm::{CmId, ConnParam, Event, Handler, Id, PortSpace, Request, SockAddr};
use kernel::rdma::defer::DropOutside;
use kernel::rdma::sync::msleep;
use kernel::sync::{Arc, Mutex};

/// Connections a port serves at once (each queue is one; a host with two I/O queues per
/// controller and two controllers has six).
const MAX_CONNS: usize = 64;
/// RDMA READs a queue has outstanding at most (the host's responder resources permitting).
const MAX_READS: u8 = 16;

/// What a port holds of rdma_cm: dropped in process context, outside the lock (destroying an
/// id waits for its handler, which may take it).
struct Link {
    listener: Option<CmId<PortEv>>,
    sessions: KVec<Option<DropOutside<Session>>>,
}

/// A queue's connection, ended when dropped: the DREQ goes, the queue is freed without
/// waiting for the host's answer (as nvmet-rdma's queues are), and the controller learns the
/// queue is gone. Kept in a [`DropOutside`]: dropped in its id's event handler, it ends from a
/// work item, since the teardown drains the QP and frees its CQ, which waits for CQ work, and
/// that must not run under rdma_cm's handler lock (nvmet-rdma's `release_work` has the same
/// reason; lockdep reports the cycle through nvmet's own locks when both targets run in one
/// boot).
struct Session {
    port: Arc<Port>,
    id: CmId<PortEv>,
    queue: Arc<Queue>,
}

impl Session {
    /// The session of `queue` on `id`, counted as live until it has ended.
    fn new(port: &Arc<Port>, id: CmId<PortEv>, queue: Arc<Queue>) -> Result<DropOutside<Self>> {
        port.live.fetch_add(1, Ordering::AcqRel);
        DropOutside::new(Session {
            port: port.clone(),
            id,
            queue,
        })
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.queue.ending();
        let _ = self.id.disconnect();
        self.queue.teardown();
        self.port.live.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A port of the target.
#[pin_data]
pub(crate) struct Port {
    pub(crate) conf: Arc<PortConf>,
    target: Arc<Target>,
    #[pin]
    link: Mutex<Link>,
    closing: AtomicBool,
    /// Sessions not ended yet, in the list or ending from a work item ([`Session`]).
    live: AtomicUsize,
}

/// The event handler of a port's ids.
pub(crate) struct PortEv {
    port: Arc<Port>,
}

/// Shows an address in a message (`?` when the id has none).
struct Peer(Option<SockAddr>);

impl core::fmt::Display for Peer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            Some(a) => core::fmt::Display::fmt(&a, f),
            None => f.write_str("?"),
        }
    }
}

impl Port {
    /// Port `id` of `target`, not listening.
    pub(crate) fn new(target: &Arc<Target>, id: u16) -> Result<Arc<Self>> {
        let conf = PortConf::new(id)?;
        Arc::pin_init(
            pin_init!(Port {
                conf,
                target: target.clone(),
                link <- new_mutex!(Link { listener: None, sessions: KVec::new() }, "rdma_rust_nvmet_port_link"),
                closing: AtomicBool::new(false),
                live: AtomicUsize::new(0),
            }),
            GFP_KERNEL,
        )
    }

    /// Links `subsys` to the port: its hosts may connect through it. The first link makes the
    /// port listen, and fails (unlinked again) when it cannot.
    pub(crate) fn link(self: &Arc<Self>, subsys: &Arc<Subsys>) -> Result {
        if self.conf.link(subsys)? {
            if let Err(e) = self.listen() {
                self.conf.unlink(subsys);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Unlinks `subsys`: its controllers through this port end; the last unlink stops the
    /// port.
    pub(crate) fn unlink(&self, subsys: &Subsys) {
        let empty = self.conf.unlink(subsys);
        self.target
            .end_where("its subsystem was unlinked from the port", |c| {
                Arc::ptr_eq(&c.port, &self.conf)
                    && c.subsys
                        .as_deref()
                        .is_some_and(|s| core::ptr::eq(s, subsys))
            });
        if empty {
            self.close();
        }
    }

    /// Starts listening on the port's address.
    fn listen(self: &Arc<Self>) -> Result {
        self.closing.store(false, Ordering::Release);
        self.try_listen(true)
    }

    /// Binds a listener to the port's address; its errors are logged when `loud`.
    fn try_listen(self: &Arc<Self>, loud: bool) -> Result {
        let addr = self.conf.sockaddr()?;
        let id = CmId::new(PortSpace::Tcp, PortEv { port: self.clone() })?;
        let listening = id.bind(addr).and_then(|()| id.listen(128));
        if let Err(e) = listening {
            if loud {
                pr_err!("port {}: cannot listen on {addr}: {e:?}\n", self.conf.id);
            }
            return Err(e);
        }
        // An address of no RDMA device (a wildcard listens on every device, as nvmet's may).
        if id.device().is_none() && !is_any(&addr) {
            if loud {
                pr_err!(
                    "port {}: {addr} is not the address of an RDMA device\n",
                    self.conf.id
                );
            }
            return Err(EINVAL);
        }
        let mut l = self.link.lock();
        if self.closing.load(Ordering::Acquire) || l.listener.is_some() {
            // Closed (or listening again) meanwhile: this one goes, outside the lock.
            drop(l);
            drop(id);
            return Ok(());
        }
        l.listener = Some(id);
        drop(l);
        self.conf.set_enabled(true);
        pr_info!("port {}: listening on {addr}\n", self.conf.id);
        Ok(())
    }

    /// A port whose listener went with its device listens again once the address is back
    /// (`rdma link add`), as nvmet's repair work does; called every few seconds. Process
    /// context.
    pub(crate) fn repair(self: &Arc<Self>) {
        let lost = !self.closing.load(Ordering::Acquire)
            && self.link.lock().listener.is_none()
            && self.conf.has_subsystems();
        if lost {
            let _ = self.try_listen(false);
        }
    }

    /// Stops listening and ends every connection. Process context; idempotent.
    pub(crate) fn close(&self) {
        self.closing.store(true, Ordering::Release);
        // The listener first: destroying it waits for a request being accepted, whose
        // session is then in the list taken next.
        let listener = self.link.lock().listener.take();
        drop(listener);
        let sessions = core::mem::take(&mut self.link.lock().sessions);
        drop(sessions);
        // Sessions ending from work items hold ids (and the module): they finish first.
        while self.live.load(Ordering::Acquire) > 0 {
            msleep(10);
        }
        self.conf.set_enabled(false);
    }

    /// The listener's device is going away (`rdma link delete`): the listener goes, inside its
    /// own handler (rdma_cm waits for every id of the device before the device can go). The
    /// port stays configured but no longer listens; unlinking and linking its subsystems
    /// again starts it anew.
    fn lost_listener(&self, id: &Id) {
        let mut l = self.link.lock();
        let ours = l
            .listener
            .as_ref()
            .is_some_and(|x| core::ptr::eq(&**x as *const Id, id));
        if ours {
            let listener = l.listener.take();
            drop(l);
            pr_err!(
                "port {}: its RDMA device is going away: no longer listening\n",
                self.conf.id
            );
            drop(listener);
        }
    }

    /// Live connections.
    pub(crate) fn connections(&self) -> usize {
        self.link.lock().sessions.iter().flatten().count()
    }

    /// The counters of the live connections' queues, summed: capsules received, capsules with
    /// in-capsule data, commands whose data was read by RDMA READ.
    pub(crate) fn counters(&self) -> [u64; 3] {
        let mut n = [0u64; 3];
        for s in self.link.lock().sessions.iter().flatten() {
            let q = &s.queue;
            n[0] += q.commands.load(Ordering::Relaxed);
            n[1] += q.in_capsule.load(Ordering::Relaxed);
            n[2] += q.fetched.load(Ordering::Relaxed);
        }
        n
    }

    fn take_session(&self, id: &Id) -> Option<DropOutside<Session>> {
        let mut l = self.link.lock();
        l.sessions
            .iter_mut()
            .find(|s| {
                s.as_ref()
                    .is_some_and(|s| core::ptr::eq(&*s.id as *const Id, id))
            })
            .and_then(Option::take)
    }

    /// Ends the session of `id`, accepted but never established (`why`).
    fn end_unestablished(self: &Arc<Self>, id: &Id, why: core::fmt::Arguments<'_>) {
        if let Some(s) = self.take_session(id) {
            pr_err!(
                "port {}: the connection of {} was {why}: ended\n",
                self.conf.id,
                Peer(id.peer_addr())
            );
            drop(s);
        }
    }

    /// A connection request: checked, then accepted as a queue of its own.
    fn accept(self: &Arc<Self>, req: Request<'_, PortEv>) -> Result<(), CmRefusal> {
        let refuse = |req: Request<'_, PortEv>, why: CmRefusal| {
            let _ = req.reject(&cm_reject(why));
            Err(why)
        };
        let peer = Peer(req.peer_addr());
        if self.closing.load(Ordering::Acquire) {
            return refuse(req, CmRefusal::NoResources);
        }
        let creq = match CmRequest::decode(req.private_data()) {
            Ok(r) => r,
            Err(why) => {
                pr_err!(
                    "port {}: {peer} refused: {why:?} in its request ({} bytes of private data)\n",
                    self.conf.id,
                    req.private_data().len()
                );
                return refuse(req, why);
            }
        };
        if self.connections() >= MAX_CONNS {
            pr_err!(
                "port {}: {peer} refused: the port serves {MAX_CONNS} connections already\n",
                self.conf.id
            );
            return refuse(req, CmRefusal::NoResources);
        }
        // The host must accept RDMA READs from the target (its writes' data is read).
        let reads = req.initiator_depth().min(MAX_READS);
        if reads == 0 {
            pr_err!(
                "port {}: {peer} refused: it offers no responder resources (its data could not be read)\n",
                self.conf.id
            );
            return refuse(req, CmRefusal::InvalidIrd);
        }
        let hangup: Arc<dyn Hangup> = match Arc::new(PortHangup(self.clone()), GFP_KERNEL) {
            Ok(h) => h,
            Err(_) => return refuse(req, CmRefusal::NoResources),
        };
        let id = req
            .take(PortEv { port: self.clone() })
            .map_err(|_| CmRefusal::NoResources)?;
        let depth = creq.depth();
        let (queue, qp) = Queue::open(&id, &self.target, &self.conf, hangup, creq.qid, depth)
            .map_err(|e| {
                pr_err!("port {}: no queue for {peer}: {e:?}\n", self.conf.id);
                let _ = id.reject(&cm_reject(CmRefusal::NoResources));
                CmRefusal::NoResources
            })?;
        // From here a failure drops the session, which ends the queue from a work item. Made
        // before the queue has anything outstanding but its receives.
        let session = Session::new(self, id, queue).map_err(|_| CmRefusal::NoResources)?;
        let (id, queue) = (&session.id, &session.queue);
        let reply = cm_reply(depth);
        let accepted = id.accept(&ConnParam {
            private_data: &reply,
            responder_resources: 0,
            initiator_depth: reads,
            ..ConnParam::default()
        });
        let started = accepted
            .and_then(|()| qp.established())
            .and_then(|qp| queue.start(qp));
        if let Err(e) = started {
            pr_err!("port {}: accepting {peer} failed: {e:?}\n", self.conf.id);
            return Err(CmRefusal::NoResources);
        }
        let mut l = self.link.lock();
        let free = l.sessions.iter().position(Option::is_none);
        if free.is_none() && l.sessions.reserve(1, GFP_KERNEL).is_err() {
            drop(l);
            return Err(CmRefusal::NoResources);
        }
        let queue = session.queue.clone();
        let session = Some(session);
        match free {
            Some(i) => l.sessions[i] = session,
            // Reserved above: cannot fail.
            None => {
                let _ = l.sessions.push(session, GFP_KERNEL);
            }
        }
        drop(l);
        // Listed: a command that ends the queue finds its session.
        queue.take_early();
        Ok(())
    }
}

/// Whether `addr` is the wildcard address of its family.
fn is_any(addr: &SockAddr) -> bool {
    match addr {
        SockAddr::V4(a) => a.ip == [0; 4],
        SockAddr::V6(a) => a.ip == [0; 16],
    }
}

/// How a queue of a port ends its own connection ([`Hangup`]).
struct PortHangup(Arc<Port>);

impl Hangup for PortHangup {
    /// The session ends now, as nvmet-rdma's queues do: its teardown sends the DREQ and frees
    /// the queue without waiting for the host's answer. A host that died never answers, and
    /// rdma_cm reports the disconnection only when it gives up on it (78 s measured with a
    /// killed host guest, long after keep-alive had ended the controller).
    fn hangup(&self, queue: &Queue) {
        let port = &self.0;
        let session = {
            let mut l = port.link.lock();
            l.sessions
                .iter_mut()
                .find(|s| s.as_ref().is_some_and(|s| core::ptr::eq(&*s.queue, queue)))
                .and_then(Option::take)
        };
        // Dropped here, outside the lock; from a work item if this is a handler.
        drop(session);
    }
}

impl Handler for PortEv {
    fn event(&self, id: &Id, event: Event<'_, Self>) {
        let port = &self.port;
        match event {
            Event::ConnectRequest(req) => {
                let _ = port.accept(req);
            }
            // The sessions end from a work item (see `Session`).
            Event::Disconnected => drop(port.take_session(id)),
            Event::DeviceRemoval => match port.take_session(id) {
                Some(s) => drop(s),
                None => port.lost_listener(id),
            },
            Event::Rejected { reason, .. } => {
                port.end_unestablished(id, format_args!("rejected by the host (reason {reason})"))
            }
            Event::Unreachable(e) => {
                port.end_unestablished(id, format_args!("never answered by the host ({e:?})"))
            }
            Event::ConnectError(e) => {
                port.end_unestablished(id, format_args!("not established ({e:?})"))
            }
            Event::Established { .. } => {
                // A queue that broke before ib_cm had the RTU could send no DREQ then.
                let l = port.link.lock();
                let session = l.sessions.iter().flatten().find(|s| {
                    core::ptr::eq(&*s.id as *const Id, id) && s.queue.broken.load(Ordering::Acquire)
                });
                if let Some(s) = session {
                    let _ = s.id.disconnect();
                }
            }
            _ => {}
        }
    }
}
