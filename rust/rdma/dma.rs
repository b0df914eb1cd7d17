// SPDX-License-Identifier: GPL-2.0

//! DMA mappings of buffers for work requests (`ib_dma_map_*`).
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! A work request names memory by DMA address and lkey. [`DmaBuf`] is a kernel buffer that is
//! mapped for a device for as long as it lives: it is allocated from the linear map (`kmalloc`;
//! never vmalloc or the stack, which software devices such as `rdma_rxe` cannot reach), mapped
//! with `ib_dma_map_single` when created and unmapped when dropped. [`DmaPage`] does the same for
//! a whole page with `ib_dma_map_page`, and [`DmaSg`] for a scatterlist of pages with
//! `ib_dma_map_sg`.
//!
//! The CPU may look at a buffer only while no posted work request refers to it; the work request
//! types of this crate enforce that by owning the buffers they use until their completion.
//! Access through [`DmaBuf::as_slice`] and [`DmaBuf::as_mut_slice`] syncs the buffer for the CPU;
//! posting syncs it for the device.

use super::{device::Device, pd::Pd};
use crate::{
    alloc::{flags::*, Flags, KBox, KVec},
    bindings,
    error::{code::*, Error, Result},
    page::{Page, PAGE_SIZE},
    sync::Arc,
    types::Opaque,
};
use core::ops::Range;

/// `DMA_BIDIRECTIONAL`: the device both reads and writes the buffers of this module.
const DIR: bindings::dma_data_direction = bindings::dma_data_direction_DMA_BIDIRECTIONAL;

/// Largest [`DmaBuf`]: what `kmalloc` hands out as one physically contiguous piece.
pub const MAX_BUF: usize = 4 << 20;

/// A zero-filled kernel buffer, DMA-mapped for the device of a [`Pd`] while it lives.
///
/// # Invariants
///
/// `buf` has length `len` and is mapped at `dma` for `pd.device()` in direction `DIR` until
/// `DmaBuf` is dropped; its heap storage never moves (the vector is never grown).
///
/// # Examples
///
/// ```
/// use kernel::rdma::{dma::DmaBuf, pd::Pd};
///
/// fn fill(pd: &kernel::sync::Arc<Pd>) -> Result<DmaBuf> {
///     let mut buf = DmaBuf::new(pd, 4096, GFP_KERNEL)?;
///     buf.as_mut_slice()[..5].copy_from_slice(b"hello");
///     Ok(buf)
/// }
/// ```
pub struct DmaBuf {
    buf: KVec<u8>,
    dma: u64,
    pd: Arc<Pd>,
}

impl DmaBuf {
    /// Allocates `len` zeroed bytes and maps them for the PD's device.
    ///
    /// `EINVAL` for an empty buffer or one larger than [`MAX_BUF`]; `ENOMEM` when the
    /// allocation or the mapping fails. `flags` are the allocation flags (`GFP_ATOMIC` in a
    /// completion handler).
    pub fn new(pd: &Arc<Pd>, len: usize, flags: Flags) -> Result<Self> {
        if len == 0 || len > MAX_BUF {
            return Err(EINVAL);
        }
        let mut buf = KVec::from_elem(0u8, len, flags)?;
        let dev = pd.device().as_raw();
        // SAFETY: `buf` is `len` bytes of kmalloc memory (linear map), which stays allocated and
        // in place until it is unmapped in `drop`.
        let dma = unsafe { bindings::ib_dma_map_single(dev, buf.as_mut_ptr().cast(), len, DIR) };
        check_mapping(pd.device(), dma)?;
        // INVARIANT: `buf` is mapped at `dma` and is never resized after this point.
        Ok(Self {
            buf,
            dma,
            pd: pd.clone(),
        })
    }

    /// Length of the buffer in bytes.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Always false: a `DmaBuf` has at least one byte.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The PD whose device the buffer is mapped for.
    pub fn pd(&self) -> &Arc<Pd> {
        &self.pd
    }

    /// The DMA address of the first byte.
    pub fn dma_addr(&self) -> u64 {
        self.dma
    }

    /// The CPU address of the first byte.
    pub(crate) fn cpu_addr(&self) -> *mut crate::ffi::c_void {
        self.buf.as_ptr().cast_mut().cast()
    }

    /// Returns the contents, after syncing the buffer for the CPU.
    pub fn as_slice(&self) -> &[u8] {
        self.sync_for_cpu(0..self.len());
        &self.buf
    }

    /// Returns the contents for writing, after syncing the buffer for the CPU.
    ///
    /// Write before posting: posting syncs the buffer for the device again.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.sync_for_cpu(0..self.len());
        &mut self.buf
    }

    fn sync_for_cpu(&self, r: Range<usize>) {
        // SAFETY: `dma + r.start .. dma + r.end` lies inside the mapping (callers pass ranges
        // within `len`), which is live (invariant).
        unsafe {
            bindings::ib_dma_sync_single_for_cpu(
                self.pd.device().as_raw(),
                self.dma + r.start as u64,
                r.end - r.start,
                DIR,
            )
        }
    }

    /// Copies `dst.len()` bytes at `offset` out of the buffer, after syncing them for the CPU,
    /// without lending a reference to memory a peer may be writing (the buffer of a
    /// registered [`Mr`](super::mr::Mr)). `EINVAL` if the range is not inside.
    pub(crate) fn copy_out(&self, offset: usize, dst: &mut [u8]) -> Result {
        let end = offset.checked_add(dst.len()).ok_or(EINVAL)?;
        if end > self.len() {
            return Err(EINVAL);
        }
        self.sync_for_cpu(offset..end);
        // SAFETY: `offset..end` lies inside the allocation; the copy makes no reference to it.
        unsafe {
            core::ptr::copy_nonoverlapping(
                self.buf.as_ptr().add(offset),
                dst.as_mut_ptr(),
                dst.len(),
            )
        };
        Ok(())
    }

    /// Copies `src` into the buffer at `offset`, then syncs it for the device (see
    /// [`DmaBuf::copy_out`]). `EINVAL` if the range is not inside.
    pub(crate) fn copy_in(&mut self, offset: usize, src: &[u8]) -> Result {
        let end = offset.checked_add(src.len()).ok_or(EINVAL)?;
        if end > self.len() {
            return Err(EINVAL);
        }
        self.sync_for_cpu(offset..end);
        // SAFETY: `offset..end` lies inside the allocation; the copy makes no reference to it.
        unsafe {
            core::ptr::copy_nonoverlapping(
                src.as_ptr(),
                self.buf.as_mut_ptr().add(offset),
                src.len(),
            )
        };
        if !src.is_empty() {
            // SAFETY: The range was checked to lie inside the live mapping.
            unsafe {
                bindings::ib_dma_sync_single_for_device(
                    self.pd.device().as_raw(),
                    self.dma + offset as u64,
                    src.len(),
                    DIR,
                )
            };
        }
        Ok(())
    }

    /// Returns the length of `range`; `EINVAL` if it is empty or not inside the buffer.
    fn check_range(&self, range: &Range<usize>) -> Result<u32> {
        if range.start >= range.end || range.end > self.len() {
            return Err(EINVAL);
        }
        u32::try_from(range.end - range.start).map_err(|_| EINVAL)
    }

    /// Hands `range` of the buffer to the device and returns the SGE that describes it.
    ///
    /// `EINVAL` if `range` is empty or does not lie inside the buffer.
    pub(crate) fn sge(&self, range: Range<usize>) -> Result<bindings::ib_sge> {
        let length = self.check_range(&range)?;
        // SAFETY: The range was checked to lie inside the live mapping.
        unsafe {
            bindings::ib_dma_sync_single_for_device(
                self.pd.device().as_raw(),
                self.dma + range.start as u64,
                range.end - range.start,
                DIR,
            )
        };
        Ok(bindings::ib_sge {
            addr: self.dma + range.start as u64,
            length,
            lkey: self.pd.local_dma_lkey(),
        })
    }

    /// The CPU address of `range`, for inline sends (the driver copies it at post time).
    pub(crate) fn inline_sge(&self, range: Range<usize>) -> Result<bindings::ib_sge> {
        let length = self.check_range(&range)?;
        Ok(bindings::ib_sge {
            addr: self.buf.as_ptr() as u64 + range.start as u64,
            length,
            lkey: self.pd.local_dma_lkey(),
        })
    }
}

impl Drop for DmaBuf {
    fn drop(&mut self) {
        // SAFETY: The buffer is mapped at `dma` (invariant) and no work request uses it: those
        // own the `DmaBuf` until their completion.
        unsafe {
            bindings::ib_dma_unmap_single(self.pd.device().as_raw(), self.dma, self.len(), DIR)
        };
    }
}

/// Turns a failed mapping of `dev` into `ENOMEM`; `dma` comes from a mapping call on `dev`.
fn check_mapping(dev: &Device, dma: u64) -> Result {
    // SAFETY: `dev` is a valid device; the call only inspects the address.
    if unsafe { bindings::ib_dma_mapping_error(dev.as_raw(), dma) } != 0 {
        return Err(ENOMEM);
    }
    Ok(())
}

/// A page of memory DMA-mapped for the device of a [`Pd`] while it lives (`ib_dma_map_page`).
///
/// # Examples
///
/// ```
/// use kernel::rdma::{dma::DmaPage, pd::Pd};
///
/// fn page_with(pd: &kernel::sync::Arc<Pd>, header: &[u8]) -> Result<DmaPage> {
///     let page = DmaPage::new(pd)?;
///     // SAFETY: `header` is valid for reads of its length; nothing else uses the page yet.
///     unsafe { page.page().write_raw(header.as_ptr(), 0, header.len())? };
///     Ok(page)
/// }
/// ```
///
/// # Invariants
///
/// `page` is mapped at `dma` for `pd.device()` in direction `DIR` until `DmaPage` is dropped.
pub struct DmaPage {
    page: Page,
    dma: u64,
    pd: Arc<Pd>,
}

impl DmaPage {
    /// Allocates a page and maps it; `ENOMEM` if either fails.
    pub fn new(pd: &Arc<Pd>) -> Result<Self> {
        let page = Page::alloc_page(GFP_KERNEL | __GFP_ZERO)?;
        let dev = pd.device().as_raw();
        // SAFETY: `page` is an allocated page that outlives the mapping (unmapped in `drop`).
        let dma = unsafe { bindings::ib_dma_map_page(dev, page.as_ptr(), 0, PAGE_SIZE, DIR) };
        check_mapping(pd.device(), dma)?;
        // INVARIANT: The page is mapped at `dma`.
        Ok(Self {
            page,
            dma,
            pd: pd.clone(),
        })
    }

    /// The DMA address of the page.
    pub fn dma_addr(&self) -> u64 {
        self.dma
    }

    /// The page itself (e.g. to read or write it with [`Page::read_raw`]).
    pub fn page(&self) -> &Page {
        &self.page
    }
}

impl Drop for DmaPage {
    fn drop(&mut self) {
        // SAFETY: The page is mapped at `dma` (invariant).
        unsafe { bindings::ib_dma_unmap_page(self.pd.device().as_raw(), self.dma, PAGE_SIZE, DIR) };
    }
}

/// Most pages of one [`DmaSg`].
pub const MAX_SG_PAGES: usize = 256;

/// Pages gathered in a scatterlist (`struct sg_table`), DMA-mapped for the device of a [`Pd`]
/// while it lives (`ib_dma_map_sg`).
///
/// It is the memory of a multi-page [`Mr`](super::mr::Mr) ([`Mr::map_sg`]): the pages need not
/// be contiguous. The CPU reads and writes it through [`DmaSg::read`] and [`DmaSg::write`],
/// which sync the pages; like a [`DmaBuf`], it is only reachable while no posted request owns
/// it.
///
/// [`Mr::map_sg`]: super::mr::Mr::map_sg
///
/// # Invariants
///
/// `table` is an initialised `sg_table` of `pages.len()` entries, entry `i` holding all of
/// `pages[i]`, mapped for `pd.device()` in direction `DIR` into `nents` DMA entries, until
/// `DmaSg` is dropped.
///
/// # Examples
///
/// ```
/// use kernel::rdma::{dma::DmaSg, pd::Pd};
///
/// fn three_pages(pd: &kernel::sync::Arc<Pd>) -> Result<DmaSg> {
///     let mut sg = DmaSg::new(pd, 3)?;
///     sg.write(4090, b"spans two pages")?;
///     let mut back = [0u8; 15];
///     sg.read(4090, &mut back)?;
///     assert_eq!(&back, b"spans two pages");
///     Ok(sg)
/// }
/// ```
pub struct DmaSg {
    pages: KVec<Page>,
    table: KBox<Opaque<bindings::sg_table>>,
    nents: u32,
    pd: Arc<Pd>,
}

// SAFETY: The pages and table are owned; the mapping may be used and torn down on any thread.
unsafe impl Send for DmaSg {}
// SAFETY: `&DmaSg` allows reads only.
unsafe impl Sync for DmaSg {}

impl DmaSg {
    /// Allocates `pages` zeroed pages, gathers them in a scatterlist and maps it.
    ///
    /// `EINVAL` for zero pages or more than [`MAX_SG_PAGES`]; `ENOMEM` when an allocation or
    /// the mapping fails. May sleep.
    pub fn new(pd: &Arc<Pd>, pages: usize) -> Result<Self> {
        if pages == 0 || pages > MAX_SG_PAGES {
            return Err(EINVAL);
        }
        let mut v = KVec::with_capacity(pages, GFP_KERNEL)?;
        for _ in 0..pages {
            v.push(Page::alloc_page(GFP_KERNEL | __GFP_ZERO)?, GFP_KERNEL)?;
        }
        let table = KBox::new(Opaque::<bindings::sg_table>::uninit(), GFP_KERNEL)?;
        // SAFETY: `table` is writable; `pages` is at most `MAX_SG_PAGES`.
        let ret =
            unsafe { bindings::sg_alloc_table(table.get(), pages as u32, GFP_KERNEL.as_raw()) };
        if ret != 0 {
            return Err(Error::from_errno(ret));
        }
        // SAFETY: `sg_alloc_table` succeeded: `sgl` is the first of `pages` entries.
        let mut sg = unsafe { (*table.get()).sgl };
        for page in v.iter() {
            // SAFETY: `sg` is one of the table's entries (there are as many as pages) and the
            // page outlives the table (both are dropped together, the table first).
            sg = unsafe { bindings::rdma_sg_set_page(sg, page.as_ptr()) };
        }
        let dev = pd.device().as_raw();
        // SAFETY: The table is initialised and describes pages that live as long as it.
        let n = unsafe { bindings::ib_dma_map_sg(dev, (*table.get()).sgl, pages as i32, DIR) };
        if n <= 0 {
            // SAFETY: Allocated above and not mapped.
            unsafe { bindings::sg_free_table(table.get()) };
            return Err(ENOMEM);
        }
        // INVARIANT: Filled and mapped above.
        Ok(Self {
            pages: v,
            table,
            nents: n as u32,
            pd: pd.clone(),
        })
    }

    /// The size in bytes (a whole number of pages).
    pub fn len(&self) -> usize {
        self.pages.len() * PAGE_SIZE
    }

    /// Always false: a `DmaSg` has at least one page.
    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }

    /// The number of pages.
    pub fn pages(&self) -> usize {
        self.pages.len()
    }

    /// The PD whose device the pages are mapped for.
    pub fn pd(&self) -> &Arc<Pd> {
        &self.pd
    }

    /// The first entry of the mapped scatterlist and the number of DMA entries.
    pub(crate) fn mapped(&self) -> (*mut bindings::scatterlist, u32) {
        // SAFETY: The table is initialised (invariant).
        (unsafe { (*self.table.get()).sgl }, self.nents)
    }

    fn sync(&self, for_device: bool) {
        // SAFETY: The table is mapped with `pages.len()` entries (invariant).
        unsafe {
            bindings::rdma_dma_sync_sg(
                self.pd.device().as_raw(),
                (*self.table.get()).sgl,
                self.pages.len() as i32,
                DIR,
                for_device,
            )
        }
    }

    /// Calls `f(page, offset in page, range of the caller's buffer)` for each piece of
    /// `offset .. offset + len`; `EINVAL` if it does not lie inside.
    fn pieces(
        &self,
        offset: usize,
        len: usize,
        mut f: impl FnMut(&Page, usize, Range<usize>) -> Result,
    ) -> Result {
        let end = offset.checked_add(len).ok_or(EINVAL)?;
        if end > self.len() {
            return Err(EINVAL);
        }
        let mut pos = offset;
        while pos < end {
            let in_page = pos % PAGE_SIZE;
            let n = (PAGE_SIZE - in_page).min(end - pos);
            let page = self.pages.get(pos / PAGE_SIZE).ok_or(EINVAL)?;
            f(page, in_page, pos - offset..pos - offset + n)?;
            pos += n;
        }
        Ok(())
    }

    /// Copies `dst.len()` bytes from `offset` into `dst`, after syncing for the CPU. `EINVAL`
    /// if the range is not inside.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result {
        self.sync(false);
        self.pieces(offset, dst.len(), |page, at, r| {
            let out = dst.get_mut(r).ok_or(EINVAL)?;
            // SAFETY: `out` is valid for writes of its length; no posted request owns the
            // pages (the caller has `&self`, and posted requests own what they use).
            unsafe { page.read_raw(out.as_mut_ptr(), at, out.len()) }
        })
    }

    /// Copies `src` to `offset`, then syncs for the device. `EINVAL` if the range is not
    /// inside.
    pub fn write(&mut self, offset: usize, src: &[u8]) -> Result {
        self.sync(false);
        self.pieces(offset, src.len(), |page, at, r| {
            let from = src.get(r).ok_or(EINVAL)?;
            // SAFETY: `from` is valid for reads of its length; we have the pages exclusively.
            unsafe { page.write_raw(from.as_ptr(), at, from.len()) }
        })?;
        self.sync(true);
        Ok(())
    }
}

impl Drop for DmaSg {
    fn drop(&mut self) {
        // SAFETY: Mapped with `pages.len()` entries (invariant); unmapped with the count
        // passed to the mapping, as the DMA API requires; no request uses it any more.
        unsafe {
            bindings::ib_dma_unmap_sg(
                self.pd.device().as_raw(),
                (*self.table.get()).sgl,
                self.pages.len() as i32,
                DIR,
            );
            bindings::sg_free_table(self.table.get());
        }
    }
}
