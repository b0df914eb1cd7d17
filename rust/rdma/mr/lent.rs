// SPDX-License-Identifier: GPL-2.0

//! A memory region over pages that another object owns, registered for one remote access at a
//! time: a block request's pages given to a storage target without a bounce buffer.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! An [`Mr`](super::Mr) owns its memory for its whole life: a peer may use a registration
//! until it is invalidated, so the memory goes only with the MR. A storage initiator wants
//! the opposite: to register a block request's own pages (`ib_map_mr_sg` of a scatterlist
//! built from them), let the target move the data, and end the request, whose pages the block
//! layer then frees or reuses. [`LentMr`] makes that safe: [`LentMr::lend`] takes the pages'
//! owner (a [`PageOwner`], the request's reference) and keeps it while the pages may be
//! registered, and [`LentMr::take_back`] gives it back only when no registration is live (the
//! target's SEND with invalidate recorded by [`Region::apply_invalidation`], or a completed
//! local invalidation). If that never comes (the connection failed), the owner goes only with
//! the MR, after `ib_dereg_mr`, which sleeps: from a completion handler that happens later, in
//! process context ([`defer`](crate::rdma::defer)), so a block request lent to a failed
//! connection ends only once its pages are out of the device's reach.

use super::{private, Access, Keys, Region};
use crate::{
    alloc::{flags::GFP_KERNEL, KBox, KVec},
    bindings,
    error::{code::*, Error, Result},
    page::PAGE_SIZE,
    rdma::{
        defer::{Deferred, Teardown},
        dma::{Bidirectional, Direction, FromDevice, PageOwner, Segment, ToDevice},
        pd::Pd,
    },
    sync::Arc,
    types::Opaque,
};

/// A fast-registration memory region that maps the pages of an `O` while `O` is lent to it.
///
/// # Examples
///
/// A read's pages registered for the target to write, and given back after its answer revoked
/// the rkey (a sketch: the command and the answer are the ULP's; `lend` refuses an owner that
/// does not let the device write its pages).
///
/// ```
/// use kernel::rdma::{cq::Wc, dma::PageOwner, mr::{Access, LentMr, Region}, qp::{Qp, Rts},
///     wr::{Completion, Wr}};
///
/// struct Read<O: PageOwner> {
///     mr: LentMr<O>,
/// }
///
/// impl<O: PageOwner> Completion for Read<O> {
///     fn done(_wr: Wr<Self>, _wc: &Wc) {
///         // Kept until the answer comes; see `answered`.
///     }
/// }
///
/// fn post<O: PageOwner>(qp: &Qp<Rts>, mut wr: Wr<Read<O>>, pages: O) -> Result {
///     let r = wr.data_mut();
///     r.mr.lend(pages, Access::REMOTE_WRITE).map_err(|(e, _pages)| e)?;
///     r.mr.bump_key()?;
///     // The command would carry `r.mr.iova()` and `r.mr.rkey()`.
///     qp.post_send(wr, |r, ops| {
///         ops.reg_mr(&r.mr, Access::REMOTE_WRITE)?;
///         Ok(())
///     })
///     .map_err(|e| e.err)?;
///     Ok(())
/// }
///
/// fn answered<O: PageOwner>(r: &mut Read<O>, answer: &Wc) -> Result<O> {
///     if !r.mr.invalidated_by(answer) {
///         // Still reachable by the peer: the pages stay lent.
///         return Err(EBUSY);
///     }
///     r.mr.take_back()
/// }
/// ```
pub struct LentMr<O: PageOwner> {
    raw: Deferred<RawLent<O>>,
}

/// The C object and the pages it maps: the MR is deregistered first, then `pages` go
/// (unmapped, and the owner dropped).
struct RawLent<O: PageOwner> {
    keys: Keys,
    pages: Pages<O>,
}

impl<O: PageOwner> Teardown for RawLent<O> {}

impl<O: PageOwner> Drop for RawLent<O> {
    fn drop(&mut self) {
        if self.keys.dereg().is_err() {
            // A peer may still reach the pages: they, and their owner, are never given back.
            if let Some(lent) = self.pages.lent.take() {
                core::mem::forget(lent);
            }
        }
    }
}

/// The scatterlist of a [`LentMr`] and what it maps.
///
/// # Invariants
///
/// `table` is an `sg_table` of `segs.len()` entries. While `lent` holds an owner, the first
/// `lent.nents` entries describe its segments and are mapped for `pd.device()` in direction
/// `lent.dir` (that many entries passed to `ib_dma_map_sg`).
struct Pages<O> {
    table: KBox<Opaque<bindings::sg_table>>,
    /// Room for the owner's segments, made once.
    segs: KVec<Segment>,
    pd: Arc<Pd>,
    lent: Option<Lent<O>>,
}

struct Lent<O> {
    owner: O,
    nents: i32,
    dir: bindings::dma_data_direction,
    len: usize,
    /// The remote access the owner agreed to.
    access: Access,
}

// SAFETY: The table and its entries are owned; mappings may be undone on any thread; `O` is
// `Send`.
unsafe impl<O: Send> Send for Pages<O> {}
// SAFETY: `&Pages` reads only fields fixed while it is shared.
unsafe impl<O: Sync> Sync for Pages<O> {}

impl<O> Pages<O> {
    fn sgl(&self) -> *mut bindings::scatterlist {
        // SAFETY: The table is initialised (invariant).
        unsafe { (*self.table.get()).sgl }
    }

    /// Unmaps what `lent` mapped; the caller has taken it out of `self`.
    fn unmap(&self, lent: &Lent<O>) {
        // SAFETY: Mapped with `lent.nents` entries in direction `lent.dir` (invariant), and no
        // registration reaches the pages (the callers' condition); unmapping syncs them for
        // the CPU.
        unsafe {
            bindings::ib_dma_unmap_sg(self.pd.device().as_raw(), self.sgl(), lent.nents, lent.dir)
        };
    }
}

impl<O> Drop for Pages<O> {
    fn drop(&mut self) {
        if let Some(lent) = self.lent.take() {
            // The MR was deregistered before (`RawLent`'s field order): nothing reaches them.
            self.unmap(&lent);
        }
        // SAFETY: Allocated by `sg_alloc_table` (invariant), unmapped.
        unsafe { bindings::sg_free_table(self.table.get()) };
    }
}

impl<O: PageOwner> LentMr<O> {
    /// Allocates an MR for up to `max_pages` pages (`ib_alloc_mr`), with a scatterlist of as
    /// many entries, lending nothing yet. May sleep.
    ///
    /// # Errors
    ///
    /// - `EINVAL` for zero pages or more than the device's `max_fast_reg_page_list_len`.
    /// - `EAGAIN` in atomic context.
    /// - `ENOMEM` when an allocation fails.
    /// - `EOPNOTSUPP` when the device has no fast-registration MRs (no `alloc_mr`).
    /// - Otherwise what the driver's `alloc_mr` returns.
    pub fn new(pd: &Arc<Pd>, max_pages: u32) -> Result<Self> {
        let keys = Keys::alloc(pd, max_pages)?;
        let mut segs = KVec::with_capacity(max_pages as usize, GFP_KERNEL)?;
        for _ in 0..max_pages {
            segs.push(Segment::EMPTY, GFP_KERNEL)?;
        }
        let table = KBox::new(Opaque::<bindings::sg_table>::uninit(), GFP_KERNEL)?;
        // SAFETY: `table` is writable; `max_pages` is non-zero (checked by `Keys::alloc`).
        let ret = unsafe { bindings::sg_alloc_table(table.get(), max_pages, GFP_KERNEL.as_raw()) };
        if ret != 0 {
            return Err(Error::from_errno(ret));
        }
        // INVARIANT: A table of `max_pages` entries, nothing lent.
        let pages = Pages {
            table,
            segs,
            pd: pd.clone(),
            lent: None,
        };
        Ok(Self {
            raw: Deferred::new(RawLent { keys, pages })?,
        })
    }

    /// Maps the pages of `owner` (`ib_dma_map_sg`, then `ib_map_mr_sg`) so that the next
    /// [`reg_mr`](crate::rdma::wr::SendOps::reg_mr) registers them for `access`, and keeps
    /// `owner` until [`LentMr::take_back`] or the MR's end.
    ///
    /// `access` says what the peer may do: reading only maps the pages toward the device;
    /// writing (or atomics) needs an owner that allows it ([`PageOwner::device_may_write`]),
    /// and `reg_mr` refuses anything more than `access`.
    ///
    /// # Errors
    ///
    /// The owner comes back with the error, nothing mapped:
    ///
    /// - `EBUSY` while pages are lent or a registration is live.
    /// - What [`PageOwner::segments`] returns: `E2BIG` for more segments than the MR's pages.
    /// - `EINVAL` for no segments, an empty one, writes the owner does not allow, or pages the
    ///   MR cannot map as one region (a segment that does not start or end on a page boundary
    ///   in the middle of the list).
    /// - `ENOMEM` if the DMA mapping fails.
    /// - `EOPNOTSUPP` when the device cannot map MRs, or what its `map_mr_sg` returns.
    pub fn lend(&mut self, owner: O, access: Access) -> Result<(), (Error, O)> {
        let raw = self.raw.get_mut();
        if raw.pages.lent.is_some() || raw.keys.is_registered() {
            return Err((EBUSY, owner));
        }
        let writes =
            access.contains(Access::REMOTE_WRITE) || access.contains(Access::REMOTE_ATOMIC);
        if writes && !owner.device_may_write() {
            return Err((EINVAL, owner));
        }
        // Atomics read the memory too (they return the old value).
        let reads = access.contains(Access::REMOTE_READ) || access.contains(Access::REMOTE_ATOMIC);
        let dir = match (writes, reads) {
            (true, true) => Bidirectional::RAW,
            (true, false) => FromDevice::RAW,
            (false, _) => ToDevice::RAW,
        };
        let p = &mut raw.pages;
        let n = match owner.segments(&mut p.segs) {
            Ok(n) if n > 0 => n,
            Ok(_) => return Err((EINVAL, owner)),
            Err(e) => return Err((e, owner)),
        };
        let Some(segs) = p.segs.get(..n) else {
            return Err((EINVAL, owner));
        };
        if segs.iter().any(Segment::is_empty) {
            return Err((EINVAL, owner));
        }
        let mut sg = p.sgl();
        let mut len = 0;
        for s in segs {
            // SAFETY: `sg` is one of the table's first `n` entries (`n <= segs.len()`, the
            // table's size); the segment is a piece of a valid page (not empty, so by its
            // invariant), which `owner`, kept below until the mapping is undone, keeps.
            sg = unsafe { bindings::rdma_sg_set_page(sg, s.page(), s.len() as u32, s.offset()) };
            len += s.len();
        }
        // The scatterlist describes them from here on: no segment outlives its owner's hold.
        p.segs[..n].fill(Segment::EMPTY);
        let dev = p.pd.device().as_raw();
        // SAFETY: The first `n` entries describe the owner's pages (above).
        let mapped = unsafe { bindings::ib_dma_map_sg(dev, p.sgl(), n as i32, dir) };
        if mapped <= 0 {
            return Err((ENOMEM, owner));
        }
        let lent = Lent {
            owner,
            nents: n as i32,
            dir,
            len,
            access,
        };
        // SAFETY: The MR is valid and not registered (checked above); the list holds `mapped`
        // DMA entries, which stay mapped while the owner is lent.
        let m = unsafe {
            bindings::ib_map_mr_sg(
                raw.keys.as_raw(),
                p.sgl(),
                mapped,
                core::ptr::null_mut(),
                PAGE_SIZE as u32,
            )
        };
        if m != mapped {
            // Gaps between the pages, or more pages than the MR maps.
            p.unmap(&lent);
            let e = if m < 0 { Error::from_errno(m) } else { EINVAL };
            return Err((e, lent.owner));
        }
        // INVARIANT: Mapped above with `n` entries in direction `dir`.
        p.lent = Some(lent);
        Ok(())
    }

    /// Unmaps the pages and gives their owner back, if no registration of them is live: never
    /// registered since [`LentMr::lend`], or invalidated since (by the peer, recorded with
    /// [`Region::apply_invalidation`], or by a LOCAL_INV).
    ///
    /// A LOCAL_INV counts from its post on: the request owns the MR until it completes, but a
    /// flushed one did not run, and the MR must then be dropped, not taken back from.
    ///
    /// # Errors
    ///
    /// - `EBUSY` while registered (the owner then goes only with the MR, after its
    ///   deregistration).
    /// - `EINVAL` if nothing is lent.
    pub fn take_back(&mut self) -> Result<O> {
        if self.is_registered() {
            return Err(EBUSY);
        }
        let p = &mut self.raw.get_mut().pages;
        let lent = p.lent.take().ok_or(EINVAL)?;
        p.unmap(&lent);
        Ok(lent.owner)
    }

    /// Whether pages are lent.
    pub fn is_lent(&self) -> bool {
        self.raw.pages.lent.is_some()
    }

    /// Bytes of the pages lent (0 when none are).
    pub fn len(&self) -> usize {
        self.raw.pages.lent.as_ref().map_or(0, |l| l.len)
    }

    /// Whether no pages are lent.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<O: PageOwner> private::Sealed for LentMr<O> {
    fn keys_mut(&mut self, _: private::Token) -> &mut Keys {
        &mut self.raw.get_mut().keys
    }
}

impl<O: PageOwner> Region for LentMr<O> {
    fn keys(&self) -> &Keys {
        &self.raw.keys
    }

    /// Whether pages are lent.
    fn is_mapped(&self) -> bool {
        self.is_lent()
    }

    /// Whether pages are lent, for `access` (or less).
    fn allows(&self, access: Access) -> bool {
        self.raw
            .pages
            .lent
            .as_ref()
            .is_some_and(|l| l.access.contains(access.remote()))
    }
}
