// SPDX-License-Identifier: GPL-2.0

//! Pages that another object owns, DMA-mapped for the device to read while it is lent
//! (`ib_dma_map_page`): a block request's segments sent without a copy.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! [`DmaBuf`](super::DmaBuf), [`DmaPage`](super::DmaPage) and [`DmaSg`](super::DmaSg) own the
//! memory they map. A ULP that moves someone else's pages (a block request's, a socket
//! buffer's) would have to copy them into one of those first. [`DmaLent`] maps them in place
//! instead, and proves that they outlive every access of the device the way the others do: it
//! holds the object that owns them (a [`PageOwner`]) until it is unmapped, and a work request
//! that names it owns it until its completion. The device only reads lent pages
//! ([`Gather`](super::Gather)): whoever owns them may still read them meanwhile, and nothing
//! here hands out a way to write them.

use super::{check_mapping, private, Direction, Mapped, ToDevice};
use crate::{
    bindings,
    error::{
        code::{EBUSY, EINVAL},
        Error, Result,
    },
    page::{Page, PAGE_SIZE},
    rdma::pd::Pd,
    sync::Arc,
};

/// The most segments a [`DmaLent`] maps (as many as a send request gathers).
pub const MAX_LENT: usize = super::MAX_SGE;

/// A piece of a page that a [`PageOwner`] owns: `len` bytes at `offset` (a `struct
/// bio_vec`, so that the block layer can fill an array of them in place).
///
/// # Invariants
///
/// `bv_page` is a valid page (or null, with `bv_len` 0), and `bv_offset + bv_len <=
/// PAGE_SIZE`.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct Segment(bindings::bio_vec);

impl Segment {
    /// No memory: what a [`PageOwner`] overwrites.
    pub const EMPTY: Self = Self(bindings::bio_vec {
        bv_page: core::ptr::null_mut(),
        bv_len: 0,
        bv_offset: 0,
    });

    /// `len` bytes at `offset` of `page`, for a [`PageOwner`] that owns the page.
    ///
    /// # Errors
    ///
    /// `EINVAL` if the bytes are not inside the page or `len` is 0.
    pub fn from_page(page: &Page, offset: usize, len: usize) -> Result<Self> {
        let end = offset.checked_add(len).ok_or(EINVAL)?;
        if len == 0 || end > PAGE_SIZE {
            return Err(EINVAL);
        }
        // INVARIANT: `page` is a valid page (a reference to it); the range is inside it.
        Ok(Self(bindings::bio_vec {
            bv_page: page.as_ptr(),
            bv_len: len as u32,
            bv_offset: offset as u32,
        }))
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.0.bv_len as usize
    }

    /// Whether the segment is empty.
    pub fn is_empty(&self) -> bool {
        self.0.bv_len == 0
    }

    pub(crate) fn page(&self) -> *mut bindings::page {
        self.0.bv_page
    }

    pub(crate) fn offset(&self) -> u32 {
        self.0.bv_offset
    }

    /// The entries of `segs` as the `struct bio_vec`s they are, for a C function to fill;
    /// [`Segment::check_filled`] restores the invariants after.
    #[cfg(CONFIG_BLOCK)]
    fn as_bio_vecs(segs: &mut [Segment]) -> &mut [bindings::bio_vec] {
        // SAFETY: `Segment` is a transparent `bio_vec`; the slice is borrowed for as long.
        unsafe { core::slice::from_raw_parts_mut(segs.as_mut_ptr().cast(), segs.len()) }
    }

    /// Checks that the first `n` entries of `segs`, filled through [`Segment::as_bio_vecs`]
    /// by a C function that reports valid pages (`filled`: `n`, or its error), are non-empty
    /// pieces of a page; if not, empties all entries and returns the error (`EINVAL` for a
    /// bad entry).
    #[cfg(CONFIG_BLOCK)]
    fn check_filled(segs: &mut [Segment], filled: Result<usize>) -> Result<usize> {
        let n = match filled {
            Ok(n) => n,
            Err(e) => {
                segs.fill(Segment::EMPTY);
                return Err(e);
            }
        };
        let ok = segs.get(..n).is_some_and(|f| {
            f.iter().all(|s| {
                !s.0.bv_page.is_null()
                    && s.0.bv_len > 0
                    && s.0.bv_offset as usize + s.0.bv_len as usize <= PAGE_SIZE
            })
        });
        if ok {
            return Ok(n);
        }
        segs.fill(Segment::EMPTY);
        Err(EINVAL)
    }
}

/// An object that owns pages and keeps them while it lives: the segments it reports stay
/// allocated until it is dropped or given up, wherever it moves.
///
/// Implemented for a block request ([`ARef<Request>`](crate::block::mq::Request)), whose pages
/// stay allocated until the request is ended, which the block layer does not allow while
/// another reference is held.
///
/// # Safety
///
/// Every segment [`PageOwner::segments`] reports must stay allocated (not freed, not reused for
/// another object) as long as `self` lives. If [`PageOwner::device_may_write`] returns true,
/// while `self` is lent to a [`LentMr`](crate::rdma::mr::LentMr) (which holds it and gives no
/// access to it), nothing else writes the pages, and no Rust reference to their bytes exists
/// (a copy out of them, in C, only sees bytes the device may be changing).
pub unsafe trait PageOwner: Send + 'static {
    /// Stores the object's segments, in order, in `out`; returns how many. `E2BIG` if `out` is
    /// too short for them.
    fn segments(&self, out: &mut [Segment]) -> Result<usize>;

    /// Whether the owner lets a device write its pages while it is lent to a
    /// [`LentMr`](crate::rdma::mr::LentMr) (a peer's RDMA WRITE into them): the object is
    /// then out of its owner's reach until given back, and what it holds is meant to be
    /// overwritten (a block read's pages). By default not.
    fn device_may_write(&self) -> bool {
        false
    }
}

/// The pages of an `O`, DMA-mapped for the device of a [`Pd`] to read, in place, while `O` is
/// lent here.
///
/// Made once, with its PD, and lent one owner at a time ([`DmaLent::lend`],
/// [`DmaLent::take_back`]), like a [`LentMr`](crate::rdma::mr::LentMr): a request that lends
/// a block request's pages per I/O keeps one beside its command buffer, and lending takes no
/// reference to the PD. A work request that names it ([`SendOps::send`],
/// [`SendOps::gather`]) must own it, as any mapped memory: so the owner, and its pages, are
/// there until the device has read them, and [`DmaLent::take_back`], which unmaps them, can
/// only be called once the request is back. Dropping it unmaps the pages and drops the owner.
///
/// [`SendOps::send`]: crate::rdma::wr::SendOps::send
/// [`SendOps::gather`]: crate::rdma::wr::SendOps::gather
///
/// # Examples
///
/// ```
/// use kernel::rdma::{dma::{DmaBuf, DmaLent, PageOwner, ToDevice, MAX_LENT}, pd::Pd, qp::{Qp, Rts},
///     wr::{Completion, Wr}, cq::Wc};
///
/// // A command and the pages of whatever `O` is (a block request), sent as one message.
/// struct Out<O: PageOwner> {
///     cmd: DmaBuf<ToDevice>,
///     data: DmaLent<O>,
/// }
///
/// impl<O: PageOwner> Completion for Out<O> {
///     fn done(mut wr: Wr<Self>, _wc: &Wc) {
///         // The device has read the pages: unmapped, the owner is free to go, and the
///         // request may lend the next one.
///         let _owner = wr.data_mut().data.take_back();
///     }
/// }
///
/// fn send<O: PageOwner>(qp: &Qp<Rts>, mut wr: Wr<Out<O>>, owner: O) -> Result {
///     wr.data_mut().data.lend(owner, MAX_LENT).map_err(|(e, _owner)| e)?;
///     qp.post_send(wr, |o, ops| {
///         ops.send(&o.cmd, 0..64)?;
///         ops.gather(&o.data, 0..o.data.len())?;
///         Ok(())
///     })
///     .map_err(|e| e.err)?;
///     Ok(())
/// }
///
/// fn new_request<O: PageOwner>(pd: &kernel::sync::Arc<Pd>) -> Result<Wr<Out<O>>> {
///     let out = Out { cmd: DmaBuf::alloc(pd, 64, GFP_KERNEL)?, data: DmaLent::new(pd) };
///     Wr::new(out, GFP_KERNEL)
/// }
/// ```
///
/// # Invariants
///
/// While `owner` holds an owner, `pieces[..n]` are its segments, in order, each mapped for
/// `pd.device()` toward the device at the address it holds; otherwise `n` and `len` are 0.
/// `len` is the sum of the lengths of `pieces[..n]`.
pub struct DmaLent<O: PageOwner> {
    pd: Arc<Pd>,
    owner: Option<O>,
    pieces: [(u64, u32); MAX_LENT],
    n: usize,
    len: usize,
}

impl<O: PageOwner> DmaLent<O> {
    /// Pages of no owner yet, to be mapped for the device of `pd`.
    pub fn new(pd: &Arc<Pd>) -> Self {
        // INVARIANT: No owner, nothing mapped.
        Self {
            pd: pd.clone(),
            owner: None,
            pieces: [(0, 0); MAX_LENT],
            n: 0,
            len: 0,
        }
    }

    /// Maps the pages of `owner` for the device to read, if it has at most `max` segments
    /// (and [`MAX_LENT`]): a caller that gathers them into one work request passes what its
    /// QP's SGEs allow.
    ///
    /// # Errors
    ///
    /// The owner comes back with the error, nothing mapped:
    ///
    /// - `EBUSY` while another owner is lent.
    /// - What [`PageOwner::segments`] returns: `E2BIG` if the owner has more segments.
    /// - `EINVAL` if it has none or reports an empty one.
    /// - `ENOMEM` if a mapping fails.
    pub fn lend(&mut self, owner: O, max: usize) -> Result<(), (Error, O)> {
        if self.owner.is_some() {
            return Err((EBUSY, owner));
        }
        let mut segs = [Segment::EMPTY; MAX_LENT];
        let n = match owner.segments(&mut segs[..max.min(MAX_LENT)]) {
            Ok(n) if n > 0 && n <= MAX_LENT => n,
            Ok(_) => return Err((EINVAL, owner)),
            Err(e) => return Err((e, owner)),
        };
        // Only `Segment::EMPTY` has no page, and it has no bytes either.
        if segs[..n].iter().any(Segment::is_empty) {
            return Err((EINVAL, owner));
        }
        let dev = self.pd.device();
        for s in &segs[..n] {
            // SAFETY: `s` is not empty (checked above), so (invariant) its page is valid and
            // the range lies inside it; `owner` keeps the page allocated: it is stored below,
            // where it stays until the mapping is undone (`take_back`, drop), or, if a mapping
            // fails, given back only after the ones made are undone.
            let dma = unsafe {
                bindings::ib_dma_map_page(
                    dev.as_raw(),
                    s.page(),
                    s.offset() as usize,
                    s.len(),
                    ToDevice::RAW,
                )
            };
            if let Err(e) = check_mapping(dev, dma) {
                self.unmap();
                return Err((e, owner));
            }
            self.pieces[self.n] = (dma, s.0.bv_len);
            self.n += 1;
            self.len += s.len();
        }
        // INVARIANT: The owner's segments are mapped, in order.
        self.owner = Some(owner);
        Ok(())
    }

    /// Unmaps the pages and gives their owner back (`None` if none is lent).
    pub fn take_back(&mut self) -> Option<O> {
        self.unmap();
        self.owner.take()
    }

    /// Whether an owner is lent, its pages mapped.
    pub fn is_lent(&self) -> bool {
        self.owner.is_some()
    }

    /// The owner of the pages, if lent; it may read them while the device does.
    pub fn owner(&self) -> Option<&O> {
        self.owner.as_ref()
    }

    /// The bytes mapped, all segments end to end (0 when no owner is lent).
    pub fn len(&self) -> usize {
        self.len
    }

    /// The segments mapped: the scatter/gather entries naming all of them takes.
    pub fn segments(&self) -> usize {
        self.n
    }

    /// Whether nothing is mapped (no owner is lent).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Undoes the mappings made (not the owner: the caller takes or drops it).
    fn unmap(&mut self) {
        let dev = self.pd.device().as_raw();
        for &(dma, len) in &self.pieces[..self.n] {
            // SAFETY: Mapped at `dma` with `len` bytes toward the device (invariant), and no
            // request uses it: one that named it owned `self`.
            unsafe { bindings::ib_dma_unmap_page(dev, dma, len as usize, ToDevice::RAW) };
        }
        self.n = 0;
        self.len = 0;
    }
}

impl<O: PageOwner> private::Sealed for DmaLent<O> {}

impl<O: PageOwner> Mapped for DmaLent<O> {
    fn pd(&self) -> &Arc<Pd> {
        &self.pd
    }

    fn size(&self) -> usize {
        self.len
    }

    fn piece_for_device(&self, offset: usize, end: usize) -> (u64, u32) {
        let mut start = 0;
        for &(dma, len) in &self.pieces[..self.n] {
            let seg_end = start + len as usize;
            if offset < seg_end {
                let at = offset - start;
                let n = (seg_end.min(end) - offset) as u32;
                // No sync: nothing here writes the pages, and mapping them synced them for the
                // device.
                return (dma + at as u64, n);
            }
            start = seg_end;
        }
        // Outside the mapping: callers check the range, and an empty piece is refused.
        (0, 0)
    }
}

impl<O: PageOwner> super::Gather for DmaLent<O> {}

impl<O: PageOwner> Drop for DmaLent<O> {
    fn drop(&mut self) {
        // The pages are unmapped before the owner (a field) goes.
        self.unmap();
    }
}

#[cfg(CONFIG_BLOCK)]
mod block {
    use super::{PageOwner, Segment};
    use crate::{
        block::mq::{Op, Operations, Request},
        error::Result,
        types::ARef,
    };

    // SAFETY: A request's segments are pages of its bios, which stay allocated until the
    // request is ended; ending it (`Request::end`, `end_ok`) needs the only `ARef` to it, so
    // not while this one lives, and blk-mq ends (or requeues) a request whose `queue_rq`
    // failed only if the driver kept no `ARef` to it (`queue_rq_callback`). A read's pages
    // are not written by the block layer or the submitter until the request ends, a driver
    // writes them only through the only `ARef` (`Request::copy_from_slice`), which it does
    // not have while one is lent, and reads them only by copying (`copy_to_slice`).
    unsafe impl<T: Operations + 'static> PageOwner for ARef<Request<T>> {
        fn segments(&self, out: &mut [Segment]) -> Result<usize> {
            let rq: &Request<T> = self;
            // The request reports valid pages (its bios'), each piece inside its page.
            let filled = rq.segments(Segment::as_bio_vecs(out));
            Segment::check_filled(out, filled)
        }

        /// A read's pages are there to be overwritten with what it reads.
        fn device_may_write(&self) -> bool {
            self.op() == Op::Read
        }
    }
}
