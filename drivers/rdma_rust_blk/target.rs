// SPDX-License-Identifier: GPL-2.0

//! The target: RAM volumes, each exported on an address and port over rdma_cm.
//!
//! An export listens, accepts and ends the connections of its initiators' queues; each is a
//! [`TgtConn`], in [`conn`], which carries out their commands.

use crate::proto::{put, Hello, Name, Refusal, Welcome, INLINE_MAX, MAX_IO};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use kernel::page::{Page, PAGE_SIZE};
use kernel::prelude::*;
use kernel::rdma::{
    cm::{CmId, ConnParam, Event, Handler, Id, PortSpace, Request, SockAddr},
    defer::DropOutside,
    device::Device,
    dma::{copy_from_pages, copy_to_pages},
};
use kernel::sync::{Arc, Mutex, SpinLock};
use kernel::types::ScopeGuard;
use kernel::{new_mutex, new_spinlock};

mod conn;

use conn::TgtConn;

/// A volume is kept in chunks of this size, each under its own lock.
const CHUNK: usize = 1 << 20;
/// The largest volume (the guests of the tests have 512 MiB).
pub(crate) const MAX_VOLUME: u64 = 1 << 30;
/// The block size volumes are exported with.
pub(crate) const BLOCK: u32 = 4096;
/// Pages of an I/O's staging buffer.
const IO_PAGES: usize = MAX_IO as usize / PAGE_SIZE;
/// Connections an export serves at once.
const MAX_CONNS: usize = 64;
/// Staging memory an export's connections may hold together (each takes two answers of
/// [`MAX_IO`] per tag when it is accepted): a peer cannot make the target allocate more.
const MAX_STAGING: u64 = 64 << 20;
/// Hardware queues an initiator may connect per disk (its queue index is below this).
const MAX_QUEUE_INDEX: u16 = 256;

/// A RAM volume.
pub(crate) struct Volume {
    pub(crate) name: Name,
    pub(crate) size: u64,
    chunks: KVec<Pin<KBox<SpinLock<KVVec<u8>>>>>,
}

impl Volume {
    /// Allocates a zeroed volume of `size` bytes (a multiple of [`BLOCK`], at most
    /// [`MAX_VOLUME`]).
    pub(crate) fn new(name: Name, size: u64) -> Result<Arc<Self>> {
        if size == 0 || size % u64::from(BLOCK) != 0 || size > MAX_VOLUME {
            return Err(EINVAL);
        }
        let n = (size as usize).div_ceil(CHUNK);
        let mut chunks = KVec::with_capacity(n, GFP_KERNEL)?;
        for i in 0..n {
            let len = CHUNK.min(size as usize - i * CHUNK);
            let bytes = KVVec::from_elem(0u8, len, GFP_KERNEL)?;
            chunks.push(
                KBox::pin_init(new_spinlock!(bytes, "rdma_rust_blk_chunk"), GFP_KERNEL)?,
                GFP_KERNEL,
            )?;
        }
        Ok(Arc::new(Self { name, size, chunks }, GFP_KERNEL)?)
    }

    /// Calls `f(chunk bytes, offset in the I/O)` for each chunk piece of `at .. at + len`, under
    /// the chunk's lock. The range was checked against the volume ([`Command::range`]).
    fn pieces(&self, at: u64, len: usize, mut f: impl FnMut(&mut [u8], usize) -> Result) -> Result {
        let mut done = 0;
        while done < len {
            let pos = at as usize + done;
            let (i, off) = (pos / CHUNK, pos % CHUNK);
            let chunk = self.chunks.get(i).ok_or(EINVAL)?;
            let mut bytes = chunk.lock();
            let n = (bytes.len() - off).min(len - done);
            f(&mut bytes[off..off + n], done)?;
            done += n;
        }
        Ok(())
    }

    fn read(&self, at: u64, pages: &mut [Page], len: usize) -> Result {
        self.pieces(at, len, |bytes, done| copy_to_pages(pages, done, bytes))
    }

    fn write(&self, at: u64, pages: &[Page], len: usize) -> Result {
        self.pieces(at, len, |bytes, done| copy_from_pages(pages, done, bytes))
    }

    /// Copies `at .. at + dst.len()` into `dst`.
    fn load(&self, at: u64, dst: &mut [u8]) -> Result {
        self.pieces(at, dst.len(), |bytes, done| {
            put(&mut dst[done..], 0, bytes);
            Ok(())
        })
    }

    /// Copies `src` into `at .. at + src.len()`.
    fn store(&self, at: u64, src: &[u8]) -> Result {
        self.pieces(at, src.len(), |bytes, done| {
            put(bytes, 0, &src[done..]);
            Ok(())
        })
    }

    fn zero(&self, at: u64, len: usize) -> Result {
        self.pieces(at, len, |bytes, _| {
            bytes.fill(0);
            Ok(())
        })
    }
}

/// An exported volume: its listener and the connections of its initiators.
#[pin_data]
pub(crate) struct Export {
    pub(crate) volume: Arc<Volume>,
    pub(crate) addr: SockAddr,
    #[pin]
    link: Mutex<Link>,
    closing: AtomicBool,
    pub(crate) commands: AtomicU64,
    pub(crate) errors: AtomicU64,
    /// Staging memory its connections hold.
    staging: AtomicU64,
}

/// What an export holds of rdma_cm: dropped in process context, outside the lock (destroying
/// an id waits for its handler, which may take it).
struct Link {
    listener: Option<CmId<TgtEv>>,
    sessions: KVec<Option<DropOutside<Session>>>,
}

/// A connection of the export, ended when dropped. Kept in a [`DropOutside`]: dropped in its
/// id's event handler (a disconnect), it ends from a work item, since draining its QP there
/// would wait for CQ work under rdma_cm's handler lock.
struct Session {
    id: CmId<TgtEv>,
    conn: Arc<TgtConn>,
}

impl Drop for Session {
    fn drop(&mut self) {
        // The disconnect moves the QP to the error state: its flushes are this.
        self.conn.ending();
        let _ = self.id.disconnect();
        self.conn.teardown();
    }
}

/// The event handler of an export's ids.
pub(crate) struct TgtEv {
    export: Arc<Export>,
}

impl Export {
    /// Exports `volume` on `addr` (the address of an RDMA device): binds and listens.
    pub(crate) fn new(volume: Arc<Volume>, addr: SockAddr) -> Result<Arc<Self>> {
        let export = Arc::pin_init(
            pin_init!(Export {
                volume,
                addr,
                link <- new_mutex!(Link { listener: None, sessions: KVec::new() }, "rdma_rust_blk_export"),
                closing: AtomicBool::new(false),
                commands: AtomicU64::new(0),
                errors: AtomicU64::new(0),
                staging: AtomicU64::new(0),
            }),
            GFP_KERNEL,
        )?;
        let id = CmId::new(
            PortSpace::Tcp,
            TgtEv {
                export: export.clone(),
            },
        )?;
        let listening = id.bind(addr).and_then(|()| id.listen(16));
        if let Err(e) = listening {
            pr_err!(
                "export {}: cannot listen on {addr}: {e:?}\n",
                export.volume.name
            );
            // The id holds the export: dropped here, it lets the export go too.
            drop(id);
            return Err(e);
        }
        if id.device().is_none() {
            pr_err!(
                "export {}: {addr} is not the address of an RDMA device\n",
                export.volume.name
            );
            drop(id);
            return Err(EINVAL);
        }
        export.link.lock().listener = Some(id);
        Ok(export)
    }

    /// The device the export listens on.
    pub(crate) fn device_name(&self) -> Option<kernel::str::CString> {
        let l = self.link.lock();
        let dev = l.listener.as_ref()?.device()?;
        kernel::str::CString::try_from_fmt(kernel::fmt!("{}", dev.name())).ok()
    }

    /// Whether the export listens on `dev`.
    pub(crate) fn is_on(&self, dev: &Device) -> bool {
        let l = self.link.lock();
        l.listener
            .as_ref()
            .and_then(|id| id.device())
            .is_some_and(|d| d.name().as_bytes() == dev.name().as_bytes())
    }

    /// Live connections.
    pub(crate) fn connections(&self) -> usize {
        self.link.lock().sessions.iter().flatten().count()
    }

    /// Stops listening and ends every connection. Process context; idempotent.
    pub(crate) fn close(&self) {
        self.closing.store(true, Ordering::Release);
        // The listener first: destroying it waits for a connection request being accepted,
        // whose session is then in the list taken next.
        let listener = self.link.lock().listener.take();
        drop(listener);
        let sessions = core::mem::take(&mut self.link.lock().sessions);
        drop(sessions);
    }
}

impl Handler for TgtEv {
    fn event(&self, id: &Id, event: Event<'_, Self>) {
        let export = &self.export;
        match event {
            Event::ConnectRequest(req) => {
                if let Err(why) = export.accept(req) {
                    export.errors.fetch_add(1, Ordering::Relaxed);
                    pr_err!(
                        "export {}: connection refused: {why:?}\n",
                        export.volume.name
                    );
                }
            }
            Event::Disconnected | Event::DeviceRemoval => {
                // One connection ended: it ends from a work item (see `Session`).
                if let Some(s) = export.take_session(id) {
                    pr_info!(
                        "export {}: {} disconnected after {} commands\n",
                        export.volume.name,
                        Peer(id.peer_addr()),
                        s.conn.commands.load(Ordering::Relaxed)
                    );
                    drop(s);
                }
            }
            // A connection accepted but never established: the initiator refused the accept
            // (a reject after the reply), never answered it (the reply timed out), or the CM
            // could not set it up. No disconnect follows: its session ends here, and gives
            // back its staging memory (else two such connects of depth 128 would hold the
            // export's whole budget, and every later connect would be refused).
            Event::Rejected { reason, .. } => export.end_unestablished(
                id,
                format_args!("rejected by the initiator (reason {reason})"),
            ),
            Event::Unreachable(e) => export
                .end_unestablished(id, format_args!("never answered by the initiator ({e:?})")),
            Event::ConnectError(e) => {
                export.end_unestablished(id, format_args!("not established ({e:?})"))
            }
            Event::Established { .. } => {
                // A connection the peer broke before ib_cm had the RTU could not send its DREQ
                // then (ib_cm sends none before the connection is established): it goes now.
                let l = export.link.lock();
                let session = l.sessions.iter().flatten().find(|s| {
                    core::ptr::eq(&*s.id as *const Id, id) && s.conn.broken.load(Ordering::Acquire)
                });
                if let Some(s) = session {
                    let _ = s.id.disconnect();
                }
            }
            _ => {}
        }
    }
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

impl Export {
    /// Takes the session of `id` out of the export, if it has one.
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

    /// Ends the session of `id`, accepted but never established (`why`). `id`'s handler: the
    /// session ends from a work item.
    fn end_unestablished(&self, id: &Id, why: core::fmt::Arguments<'_>) {
        if let Some(s) = self.take_session(id) {
            // Its QP is in the error state already (the CM moved it): the flushes are this.
            s.conn.ending();
            pr_err!(
                "export {}: the connection of {} was {why}: session ended\n",
                self.volume.name,
                Peer(id.peer_addr())
            );
            drop(s);
        }
    }

    /// Forces the QPs of the export's connections into the error state (`fail`), as a fatal
    /// device error would: each connection sees its requests flushed and ends itself. Returns
    /// how many were forced. Process context.
    pub(crate) fn fail(&self) -> usize {
        let l = self.link.lock();
        l.sessions
            .iter()
            .flatten()
            .filter(|s| s.conn.force_error())
            .count()
    }

    /// Sends a DREQ on `conn`'s connection, whose peer broke the protocol. Before ib_cm has
    /// the peer's RTU this sends nothing: the `Established` event disconnects then. Process
    /// context.
    fn disconnect(&self, conn: &TgtConn) {
        let l = self.link.lock();
        let session = l
            .sessions
            .iter()
            .flatten()
            .find(|s| core::ptr::eq(&*s.conn, conn));
        if let Some(s) = session {
            let _ = s.id.disconnect();
        }
    }

    /// A connection request: checked, then accepted with a connection of its own.
    fn accept(self: &Arc<Self>, req: Request<'_, TgtEv>) -> Result<(), Refusal> {
        let refuse = |req: Request<'_, TgtEv>, why: Refusal| {
            let _ = req.reject(&why.encode());
            Err(why)
        };
        if self.closing.load(Ordering::Acquire) {
            return refuse(req, Refusal::Busy);
        }
        let hello = match Hello::decode(req.private_data()) {
            Ok(h) => h,
            Err(why) => return refuse(req, why),
        };
        if hello.name != self.volume.name {
            return refuse(req, Refusal::NoVolume);
        }
        if hello.queue >= MAX_QUEUE_INDEX {
            return refuse(req, Refusal::BadQueue);
        }
        if self.connections() >= MAX_CONNS {
            return refuse(req, Refusal::Busy);
        }
        let peer = Peer(req.peer_addr());
        // As many RDMA READs outstanding as the peer accepts (and the device can issue). A
        // peer that accepts none could never have its writes' data read: they would stall.
        let reads = u32::from(hello.depth)
            .min(u32::from(req.initiator_depth()))
            .min(16);
        if reads == 0 {
            pr_err!(
                "export {}: {peer} refused: it offers no responder resources (its writes' data could not be read)\n",
                self.volume.name
            );
            return refuse(req, Refusal::NoReads);
        }
        let staging = 2 * u64::from(hello.depth) * u64::from(MAX_IO);
        let reserved = self
            .staging
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                (s + staging <= MAX_STAGING).then_some(s + staging)
            });
        if reserved.is_err() {
            pr_err!(
                "export {}: {peer} refused: its {staging} bytes of staging memory would exceed the export's {MAX_STAGING}\n",
                self.volume.name
            );
            return refuse(req, Refusal::Busy);
        }
        // Given back when the connection goes (or here, if it never comes).
        let unreserve = ScopeGuard::new(|| {
            self.staging.fetch_sub(staging, Ordering::AcqRel);
        });
        let id = req
            .take(TgtEv {
                export: self.clone(),
            })
            .map_err(|_| Refusal::Busy)?;
        // From here a failure drops `id`, which refuses the connection.
        let (conn, qp) = TgtConn::open(&id, self, hello.depth, staging).map_err(|e| {
            pr_err!(
                "export {}: no connection for {peer}: {e:?}\n",
                self.volume.name
            );
            Refusal::Busy
        })?;
        // The connection owns the reservation from here: its teardown gives it back.
        unreserve.dismiss();
        // From here the session owns the id and the connection: dropping it (a failure below,
        // in this handler) ends the connection from a work item. Made before anything is
        // outstanding on the QP but its receives, so that if there is no memory for it, the
        // teardown here needs no drain.
        let session = DropOutside::new(Session { id, conn }).map_err(|_| Refusal::Busy)?;
        let (id, conn) = (&session.id, &session.conn);
        let welcome = Welcome {
            block_size: BLOCK,
            max_io: MAX_IO,
            capacity: self.volume.size,
            inline_max: INLINE_MAX,
        }
        .encode();
        let reads = reads.min(id.device().map_or(0, |d| d.attrs().max_qp_init_rd_atom()));
        if reads == 0 {
            pr_err!(
                "export {}: {peer} refused: the device issues no RDMA READ\n",
                self.volume.name
            );
            let _ = id.reject(&Refusal::NoReads.encode());
            return Err(Refusal::NoReads);
        }
        let accepted = id.accept(&ConnParam {
            private_data: &welcome,
            responder_resources: 0,
            initiator_depth: reads as u8,
            ..ConnParam::default()
        });
        let started = accepted
            .and_then(|()| qp.established())
            .and_then(|qp| conn.start(qp));
        if let Err(e) = started {
            pr_err!(
                "export {}: accepting {peer} failed: {e:?}\n",
                self.volume.name
            );
            return Err(Refusal::Busy);
        }
        let mut l = self.link.lock();
        let free = l.sessions.iter().position(Option::is_none);
        if free.is_none() && l.sessions.reserve(1, GFP_KERNEL).is_err() {
            drop(l);
            return Err(Refusal::Busy);
        }
        let session = Some(session);
        match free {
            Some(i) => l.sessions[i] = session,
            // Reserved above: cannot fail.
            None => {
                let _ = l.sessions.push(session, GFP_KERNEL);
            }
        }
        drop(l);
        pr_info!(
            "export {}: queue {} of {peer} connected (depth {})\n",
            self.volume.name,
            hello.queue,
            hello.depth
        );
        Ok(())
    }
}
