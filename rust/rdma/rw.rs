// SPDX-License-Identifier: GPL-2.0

//! RDMA READ and WRITE of local pages from or to a peer's buffer, through the core's R/W API
//! (`rdma_rw_ctx_init`, `rdma_rw_ctx_wrs`, `rdma_rw_ctx_destroy`).
//!
//! C header: [`include/rdma/rw.h`](srctree/include/rdma/rw.h)
//!
//! A storage target moves data with the initiator's buffer as `(addr, rkey)`: it RDMA READs a
//! write command's data into its pages, or RDMA WRITEs a read command's data from them, then
//! answers with a SEND. The core's R/W API turns such a transfer into the work requests the
//! device needs: one RDMA operation per run of scatter/gather entries the QP can carry, or, on
//! iWARP and when the `ib_core.force_mr=1` knob is set, a memory registration per run from a
//! pool of MRs the core keeps for the QP ([`QpCaps::rdma_ctxs`](super::qp::QpCaps)), with its
//! invalidation.
//!
//! An [`RwCtx`] owns the pages, their scatterlist and mapping, the context and a reference to
//! its QP. It is posted once, as one operation of a send request ([`SendOps::rw`]), optionally
//! followed by the operations of the answer, in one post; the request owns it until its
//! completion, so nothing can reach the pages or free them while the device uses them. The
//! pages come back with [`RwCtx::into_pages`], which unmaps them: the data of an RDMA READ is
//! the CPU's from then on. The next transfer over them is a new context, as a C ULP
//! initialises its `rdma_rw_ctx` again for each command.
//!
//! # Examples
//!
//! A target's answer to a read command: WRITE the data to the initiator, then SEND the
//! response, in one post; the completion of the SEND says both are done.
//!
//! ```
//! use kernel::page::Page;
//! use kernel::rdma::{
//!     cq::Wc, dma::{DmaBuf, ToDevice}, mr::Remote, qp::{Qp, Rts}, rw::RwCtx,
//!     wr::{Completion, Wr},
//! };
//! use kernel::sync::Arc;
//!
//! struct Answer {
//!     data: RwCtx<ToDevice>,
//!     response: DmaBuf,
//! }
//!
//! impl Completion for Answer {
//!     fn done(wr: Wr<Self>, wc: &Wc) {
//!         if !wc.is_ok() {
//!             pr_warn!("answer failed: {:?}\n", wc.status());
//!         }
//!         // Unmaps the pages and gives back the context's MRs; fine in a handler.
//!         drop(wr);
//!     }
//! }
//!
//! fn answer(qp: &Arc<Qp<Rts>>, pages: KVec<Page>, len: usize, to: Remote) -> Result {
//!     let data = RwCtx::<ToDevice>::new(qp, pages, len, to).map_err(|(e, _)| e)?;
//!     let response = DmaBuf::new(qp.pd(), 64, GFP_KERNEL)?;
//!     qp.post_send(Wr::new(Answer { data, response }, GFP_KERNEL)?, |a, ops| {
//!         ops.rw(&mut a.data)?;
//!         ops.send(&a.response, 0..64)?;
//!         Ok(())
//!     })?;
//!     Ok(())
//! }
//! ```
//!
//! [`SendOps::rw`]: super::wr::SendOps::rw

use super::{
    dma::{page_table, Direction, FromDevice, ToDevice, MAX_SG_PAGES},
    mr::Remote,
    qp::{Qp, QpType, Rts},
    sync::sleepable,
    wr::{Chain, SendOps},
};
use crate::{
    alloc::{flags::GFP_KERNEL, KBox, KVec},
    bindings,
    error::{code::*, Error, Result},
    page::{Page, PAGE_SIZE},
    sync::Arc,
    types::Opaque,
};
use core::{
    marker::PhantomData,
    mem::ManuallyDrop,
    sync::atomic::{AtomicBool, Ordering},
};

mod private {
    pub trait Sealed {}
}

/// The direction of an [`RwCtx`]: [`FromDevice`] for an RDMA READ (the peer's data lands in
/// the pages), [`ToDevice`] for an RDMA WRITE (the pages go to the peer).
pub trait RwDirection: Direction + private::Sealed {}

impl private::Sealed for FromDevice {}
impl private::Sealed for ToDevice {}
impl RwDirection for FromDevice {}
impl RwDirection for ToDevice {}

/// An RDMA READ ([`FromDevice`]) or WRITE ([`ToDevice`]) of local pages from or to a remote
/// buffer, prepared by the core for one QP (`struct rdma_rw_ctx`).
///
/// # Posted once
///
/// A context is posted once ([`SendOps::rw`] refuses it with `EBUSY` afterwards); the next
/// transfer, over the same pages or others, is a new context ([`RwCtx::into_pages`], then
/// [`RwCtx::new`]), as nvmet-rdma and isert initialise their `rdma_rw_ctx` again for each
/// command. The core links a context into a post (`rdma_rw_ctx_wrs`) by setting either the
/// `next` of its last work request or its completion entry and signaled flag, and clears
/// neither: posted again, at another place in a request, a context would carry the links of its
/// first post (a completion dispatched to the first request, long freed, or a `next` into a
/// list that is gone). On the MR path its MRs are also still registered after the first post,
/// and the core would register them again without invalidating them first.
///
/// A post refused before the driver sees the request ([`Qp::post_send`]'s own checks, a full
/// queue) leaves the context as it was, postable. One the driver refuses has linked it: it
/// counts as posted.
///
/// # Invariants
///
/// `table` holds `entries` scatterlist entries over the first `len` bytes of `pages`, mapped
/// (by `rdma_rw_ctx_init`) for the device of `qp` in direction `D`; `ctx` is initialised for
/// them, `qp` and its port, and takes `wqes` send queue entries. Both stay so until dropped
/// or [`RwCtx::into_pages`]. Unless `posted` is set, `ctx` was never linked into a post
/// (`rdma_rw_ctx_wrs`).
pub struct RwCtx<D: RwDirection> {
    ctx: KBox<Opaque<bindings::rdma_rw_ctx>>,
    table: KBox<Opaque<bindings::sg_table>>,
    entries: u32,
    pages: ManuallyDrop<KVec<Page>>,
    len: usize,
    wqes: u32,
    /// Set when the context is linked into a post (by `SendOps::link`).
    posted: AtomicBool,
    qp: Arc<Qp<Rts>>,
    _d: PhantomData<D>,
}

// SAFETY: The context, table and pages are owned; the core's R/W API may be called on any
// thread (the MR pool is locked).
unsafe impl<D: RwDirection> Send for RwCtx<D> {}
// SAFETY: `&RwCtx` reads only fields fixed at creation, and `posted`, an atomic.
unsafe impl<D: RwDirection> Sync for RwCtx<D> {}

impl<D: RwDirection> RwCtx<D> {
    /// Prepares the transfer of the first `len` bytes of `pages` from (READ) or to (WRITE)
    /// `remote` on `qp` (`rdma_rw_ctx_init`, which maps the pages). May sleep.
    ///
    /// # Errors
    ///
    /// The pages come back with the error:
    ///
    /// - `EINVAL` when `qp` is not an RC QP created with [`QpCaps::rdma_ctxs`], `len` is zero
    ///   or needs more than `pages` or [`MAX_SG_PAGES`] pages, or the transfer needs more send
    ///   queue entries than the QP has.
    /// - `EAGAIN` when the QP's MRs are all in use by other contexts (more in flight than
    ///   `rdma_ctxs`), or in atomic context.
    /// - `ENOMEM` when an allocation or the DMA mapping fails.
    /// - Otherwise what `rdma_rw_ctx_init` answers (from mapping the pages or registering
    ///   them).
    ///
    /// [`QpCaps::rdma_ctxs`]: super::qp::QpCaps::rdma_ctxs
    pub fn new(
        qp: &Arc<Qp<Rts>>,
        pages: KVec<Page>,
        len: usize,
        remote: Remote,
    ) -> Result<Self, (Error, KVec<Page>)> {
        if let Err(e) = sleepable() {
            return Err((e, pages));
        }
        let inner = &*qp.inner;
        let entries = len.div_ceil(PAGE_SIZE);
        if inner.qp_type != QpType::Rc
            || inner.caps.rdma_ctxs == 0
            || len == 0
            || entries > pages.len()
            || entries > MAX_SG_PAGES
        {
            return Err((EINVAL, pages));
        }
        let ctx = match KBox::new(Opaque::<bindings::rdma_rw_ctx>::uninit(), GFP_KERNEL) {
            Ok(c) => c,
            Err(e) => return Err((e.into(), pages)),
        };
        // The pages outlive the table: both are dropped together, the table first.
        let table = match page_table(&pages, len) {
            Ok(t) => t,
            Err(e) => return Err((e, pages)),
        };
        // SAFETY: `page_table` made an initialised table.
        let sgl = unsafe { (*table.get()).sgl };
        // SAFETY: `ctx` is writable memory for a context, which `rdma_rw_ctx_init` fills in; it
        // starts zeroed, as the core's own callers allocate it.
        unsafe { core::ptr::write_bytes(ctx.get(), 0, 1) };
        // SAFETY: `qp` is a valid RC QP in RTS on `port`, created with `max_rdma_ctxs`; the
        // scatterlist describes `len` bytes of pages that live as long as the context.
        let ret = unsafe {
            bindings::rdma_rw_ctx_init(
                ctx.get(),
                inner.ptr,
                inner.port,
                sgl,
                entries as u32,
                0,
                remote.addr,
                remote.rkey,
                D::RAW,
            )
        };
        if ret < 0 {
            // SAFETY: The core unmapped the list on failure; the table is ours.
            unsafe { bindings::sg_free_table(table.get()) };
            return Err((Error::from_errno(ret), pages));
        }
        // INVARIANT: Initialised above for `qp`, taking `ret` entries.
        let rw = Self {
            ctx,
            table,
            entries: entries as u32,
            pages: ManuallyDrop::new(pages),
            len,
            wqes: ret as u32,
            posted: AtomicBool::new(false),
            qp: qp.clone(),
            _d: PhantomData,
        };
        if rw.wqes > inner.sq_slots {
            return Err((EINVAL, rw.into_pages()));
        }
        Ok(rw)
    }

    /// The bytes moved.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a transfer moves at least one byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Send queue entries the transfer takes when posted (RDMA operations, and the
    /// registrations and invalidations of the MR path).
    pub fn wqes(&self) -> u32 {
        self.wqes
    }

    /// Whether the core registers the pages in MRs of the QP's pool for this transfer (iWARP,
    /// or `ib_core.force_mr=1`) rather than naming them in scatter/gather entries.
    pub fn uses_mr(&self) -> bool {
        // SAFETY: `ctx` is initialised (invariant); `nr_ops` counts the RDMA operations, which
        // are all the entries the context takes unless it registers memory for them.
        let ops = unsafe { (*self.ctx.get()).nr_ops };
        self.wqes > ops
    }

    /// The QP the transfer was prepared for.
    pub fn qp(&self) -> &Arc<Qp<Rts>> {
        &self.qp
    }

    /// Releases the context (its MRs go back to the QP's pool), unmaps the pages and gives
    /// them back: after an RDMA READ completed, they hold the peer's data.
    pub fn into_pages(self) -> KVec<Page> {
        let mut me = ManuallyDrop::new(self);
        me.destroy();
        // SAFETY: `me` is never used or dropped again; each field is moved out or dropped once.
        unsafe {
            core::ptr::drop_in_place(&raw mut me.ctx);
            core::ptr::drop_in_place(&raw mut me.table);
            core::ptr::drop_in_place(&raw mut me.qp);
            ManuallyDrop::take(&mut me.pages)
        }
    }

    fn destroy(&mut self) {
        let inner = &*self.qp.inner;
        // SAFETY: The context was initialised for this QP, port and list (invariant), and no
        // posted request uses it (a posted one is owned by its request until completion). This
        // neither sleeps nor needs process context.
        unsafe {
            bindings::rdma_rw_ctx_destroy(
                self.ctx.get(),
                inner.ptr,
                inner.port,
                (*self.table.get()).sgl,
                self.entries,
                D::RAW,
            );
            bindings::sg_free_table(self.table.get());
        }
    }
}

impl<D: RwDirection> Drop for RwCtx<D> {
    fn drop(&mut self) {
        self.destroy();
        // SAFETY: Dropped once, here, after the table that described them was freed.
        unsafe { ManuallyDrop::drop(&mut self.pages) };
    }
}

/// The number of MRs (or, without the MR path, of RDMA operations) the device needs to move
/// `max_pages` pages in one transfer (`rdma_rw_mr_factor`): what a ULP multiplies its queue
/// depth by to size [`QpCaps::rdma_ctxs`](super::qp::QpCaps::rdma_ctxs).
///
/// # Errors
///
/// `EINVAL` for a port outside the device.
pub fn mr_factor(dev: &super::device::Device, port: u32, max_pages: u32) -> Result<u32> {
    if !dev.ports().contains(&port) {
        return Err(EINVAL);
    }
    // SAFETY: `dev` is valid and `port` one of its ports.
    Ok(unsafe { bindings::rdma_rw_mr_factor(dev.as_raw(), port, max_pages) })
}

impl<'a> SendOps<'a> {
    /// Adds the RDMA READ or WRITE `rw` (with the registrations it needs) as the next
    /// operation: the operations after it in the request start once it is done (send queues
    /// execute in order; add [`SendOps::fence`] to a SEND that must wait for a READ's data).
    /// Send flags cannot be set on the transfer itself ([`SendOps::fence`] just after this is
    /// refused). `rw` is posted once: see [`RwCtx`].
    ///
    /// # Errors
    ///
    /// - `EBUSY` when `rw` was posted already (its post reached the driver, taken or not):
    ///   prepare a new context for the next transfer.
    /// - `EINVAL` when the request has [`MAX_OPS`](super::wr::MAX_OPS) operations already.
    ///   Posting on another QP than `rw`'s fails with `EINVAL`
    ///   ([`Qp::post_send`](super::qp::Qp::post_send)).
    pub fn rw<D: RwDirection>(&mut self, rw: &'a mut RwCtx<D>) -> Result<&mut Self> {
        let rw: &'a RwCtx<D> = rw;
        if rw.posted.load(Ordering::Acquire) {
            return Err(EBUSY);
        }
        let inner = &*rw.qp.inner;
        self.chain(Chain {
            ctx: rw.ctx.get(),
            posted: &rw.posted,
            qp: inner.ptr,
            port: inner.port,
            wqes: rw.wqes,
        })
    }
}
