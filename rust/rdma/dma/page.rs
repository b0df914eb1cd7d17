// SPDX-License-Identifier: GPL-2.0

//! A page DMA-mapped for a device (`ib_dma_map_page`).
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use super::{
    check_mapping, copy_volatile, private, span, sync_single, Bidirectional, Direction, Mapped,
};
use crate::{
    alloc::flags::*,
    bindings,
    error::{code::EINVAL, Error, Result},
    page::{Page, PAGE_SIZE},
    rdma::{pd::Pd, sync::sleepable},
    sync::Arc,
};
use core::{marker::PhantomData, mem::ManuallyDrop, ops::Range};

/// Which way [`page_copy`] copies, and how it touches the page.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Way {
    /// Into a page a device or a peer may reach: volatile writes (see [`copy_volatile`]).
    ToShared,
    /// Out of a page a device or a peer may reach: volatile reads.
    FromShared,
    /// Into a page nothing else reaches meanwhile: an ordinary copy.
    ToOwned,
    /// Out of a page nothing writes meanwhile: an ordinary copy.
    FromOwned,
}

/// Copies between a page and a buffer, through a temporary mapping of the page, the [`Way`]
/// `way` says.
///
/// # Safety
///
/// `at .. at + buf_len` must lie inside the page; `buf` must be valid for reads (into the page)
/// or writes (out of it) of `buf_len` bytes, and must not overlap the page. With
/// [`Way::ToOwned`] or [`Way::FromOwned`], neither a device nor another thread may write those
/// bytes of the page, or `buf`, meanwhile.
pub(super) unsafe fn page_copy(page: &Page, at: usize, buf: *mut u8, buf_len: usize, way: Way) {
    // SAFETY: The page is owned by the caller's object; the mapping is released below.
    let base = unsafe { bindings::kmap_local_page(page.as_ptr()) }.cast::<u8>();
    let (src, dst) = match way {
        Way::ToShared | Way::ToOwned => (buf.cast_const(), base.wrapping_add(at)),
        Way::FromShared | Way::FromOwned => (base.wrapping_add(at).cast_const(), buf),
    };
    // SAFETY: `at + buf_len` is inside the page (the caller's guarantee), which `base` maps;
    // `buf` is valid for `buf_len` bytes and does not overlap it; for an ordinary copy nothing
    // writes either side meanwhile (the caller's guarantee).
    unsafe {
        match way {
            Way::ToOwned | Way::FromOwned => core::ptr::copy_nonoverlapping(src, dst, buf_len),
            Way::ToShared | Way::FromShared => copy_volatile(src, dst, buf_len),
        }
        bindings::kunmap_local(base.cast());
    }
}

/// Calls `f(page, offset in page, range of the caller's buffer)` for each piece of
/// `offset .. offset + len` of `pages` (taken end to end); `EINVAL` if the range is empty or
/// does not lie inside their first `total` bytes.
pub(super) fn pieces(
    pages: &[Page],
    total: usize,
    offset: usize,
    len: usize,
    mut f: impl FnMut(&Page, usize, Range<usize>),
) -> Result {
    let r = span(offset, len, total.min(pages.len() * PAGE_SIZE))?;
    let mut pos = r.start;
    while pos < r.end {
        let in_page = pos % PAGE_SIZE;
        let n = (PAGE_SIZE - in_page).min(r.end - pos);
        let page = pages.get(pos / PAGE_SIZE).ok_or(EINVAL)?;
        f(page, in_page, pos - offset..pos - offset + n);
        pos += n;
    }
    Ok(())
}

/// Copies `src` into `pages` (taken end to end) at `offset`: how a storage target fills the
/// pages of an [`RwCtx`](crate::rdma::rw::RwCtx) it is about to WRITE to a peer. The pages
/// are the caller's alone (`&mut`): no device and no peer reaches them until they go to a
/// context or a mapping, which takes them, so the copy is an ordinary one.
///
/// # Errors
///
/// `EINVAL` if `src` is empty or does not fit in the pages from `offset` on.
pub fn copy_to_pages(pages: &mut [Page], offset: usize, src: &[u8]) -> Result {
    let from = src.as_ptr().cast_mut();
    pieces(pages, usize::MAX, offset, src.len(), |page, at, r| {
        // SAFETY: `r` is inside `src` and `at + r.len()` inside the page (`pieces`); `src` is
        // only read and cannot overlap pages borrowed mutably, which nothing else writes.
        unsafe { page_copy(page, at, from.add(r.start), r.end - r.start, Way::ToOwned) }
    })
}

/// Copies from `pages` (taken end to end) at `offset` into `dst`: the data an
/// [`RwCtx`](crate::rdma::rw::RwCtx) READ brought, once [`RwCtx::into_pages`] gave the pages
/// back (unmapped: the device is done with them), so the copy is an ordinary one.
///
/// # Errors
///
/// `EINVAL` if `dst` is empty or the range does not lie inside the pages.
///
/// [`RwCtx::into_pages`]: crate::rdma::rw::RwCtx::into_pages
pub fn copy_from_pages(pages: &[Page], offset: usize, dst: &mut [u8]) -> Result {
    let out = dst.as_mut_ptr();
    pieces(pages, usize::MAX, offset, dst.len(), |page, at, r| {
        // SAFETY: `r` is inside `dst` and `at + r.len()` inside the page (`pieces`); `dst` is
        // borrowed mutably, so it cannot overlap the pages, which are only read while shared.
        unsafe { page_copy(page, at, out.add(r.start), r.end - r.start, Way::FromOwned) }
    })
}

/// A page of memory DMA-mapped in direction `D` for the device of a [`Pd`] while it lives
/// (`ib_dma_map_page`).
///
/// # Examples
///
/// ```
/// use kernel::rdma::{dma::DmaPage, pd::Pd};
///
/// fn page_with(pd: &kernel::sync::Arc<Pd>, header: &[u8]) -> Result<DmaPage> {
///     let mut page = DmaPage::new(pd)?;
///     page.write(0, header)?;
///     let mut back = [0u8; 4];
///     page.read(0, &mut back[..header.len().min(4)])?;
///     Ok(page)
/// }
/// ```
///
/// # Invariants
///
/// `page` is mapped at `dma` for `pd.device()` in direction `D` until it is unmapped in `drop`
/// or `into_page`.
pub struct DmaPage<D: Direction = Bidirectional> {
    page: ManuallyDrop<Page>,
    dma: u64,
    pd: Arc<Pd>,
    _d: PhantomData<D>,
}

impl DmaPage<Bidirectional> {
    /// Allocates a zeroed page and maps it both ways. Sleeps (allocates with `GFP_KERNEL`).
    ///
    /// # Errors
    ///
    /// - `ENOMEM` if the allocation or the mapping fails.
    /// - `EAGAIN` in atomic context.
    pub fn new(pd: &Arc<Pd>) -> Result<Self> {
        sleepable()?;
        let page = Page::alloc_page(GFP_KERNEL | __GFP_ZERO)?;
        Self::from_page(pd, page).map_err(|(e, _)| e)
    }
}

impl<D: Direction> DmaPage<D> {
    /// Maps the caller's `page` in direction `D`.
    ///
    /// # Errors
    ///
    /// `ENOMEM` if the mapping fails; the page comes back with it.
    pub fn from_page(pd: &Arc<Pd>, page: Page) -> Result<Self, (Error, Page)> {
        let dev = pd.device().as_raw();
        // SAFETY: `page` is an allocated page that outlives the mapping (unmapped in `drop` or
        // `into_page`).
        let dma = unsafe { bindings::ib_dma_map_page(dev, page.as_ptr(), 0, PAGE_SIZE, D::RAW) };
        if let Err(e) = check_mapping(pd.device(), dma) {
            return Err((e, page));
        }
        // INVARIANT: The page is mapped at `dma`.
        Ok(Self {
            page: ManuallyDrop::new(page),
            dma,
            pd: pd.clone(),
            _d: PhantomData,
        })
    }

    /// Unmaps the page and gives it back.
    pub fn into_page(self) -> Page {
        let mut me = ManuallyDrop::new(self);
        me.unmap();
        // SAFETY: `me` is never used or dropped again; the page and the PD are moved out once.
        unsafe {
            core::ptr::drop_in_place(&raw mut me.pd);
            ManuallyDrop::take(&mut me.page)
        }
    }

    fn unmap(&mut self) {
        // SAFETY: The page is mapped at `dma` (invariant) and no request uses it.
        unsafe {
            bindings::ib_dma_unmap_page(self.pd.device().as_raw(), self.dma, PAGE_SIZE, D::RAW)
        };
    }

    fn sync(&self, for_device: bool) {
        // SAFETY: The page is mapped at `dma` (invariant); a page mapping may be synced as a
        // single one.
        unsafe { sync_single::<D>(self.pd.device(), self.dma, PAGE_SIZE, for_device) }
    }

    /// The DMA address of the page.
    pub fn dma_addr(&self) -> u64 {
        self.dma
    }

    /// Copies `dst.len()` bytes at `offset` out of the page, after syncing it for the CPU.
    ///
    /// # Errors
    ///
    /// `EINVAL` if the range is empty or not inside the page.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result {
        let r = span(offset, dst.len(), PAGE_SIZE)?;
        self.sync(false);
        // SAFETY: `r` is inside the page and `dst` valid for its length.
        unsafe {
            page_copy(
                &self.page,
                r.start,
                dst.as_mut_ptr(),
                dst.len(),
                Way::FromShared,
            )
        };
        Ok(())
    }

    /// Copies `src` into the page at `offset`, then syncs it for the device.
    ///
    /// # Errors
    ///
    /// `EINVAL` if the range is empty or not inside the page.
    pub fn write(&mut self, offset: usize, src: &[u8]) -> Result {
        let r = span(offset, src.len(), PAGE_SIZE)?;
        self.sync(false);
        // SAFETY: `r` is inside the page and `src` valid for its length.
        unsafe {
            page_copy(
                &self.page,
                r.start,
                src.as_ptr().cast_mut(),
                src.len(),
                Way::ToShared,
            )
        };
        self.sync(true);
        Ok(())
    }
}

impl<D: Direction> private::Sealed for DmaPage<D> {}

impl<D: Direction> Mapped for DmaPage<D> {
    fn pd(&self) -> &Arc<Pd> {
        &self.pd
    }

    fn size(&self) -> usize {
        PAGE_SIZE
    }

    fn piece_for_device(&self, offset: usize, end: usize) -> (u64, u32) {
        self.sync(true);
        (self.dma + offset as u64, (end - offset) as u32)
    }
}

impl<D: Direction> Drop for DmaPage<D> {
    fn drop(&mut self) {
        self.unmap();
        // SAFETY: Dropped once, here; the mapping is gone.
        unsafe { ManuallyDrop::drop(&mut self.page) };
    }
}
