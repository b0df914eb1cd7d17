// SPDX-License-Identifier: GPL-2.0

//! Pages gathered in a scatterlist, DMA-mapped for a device (`ib_dma_map_sg`).
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use super::{
    page::{page_copy, pieces, Way},
    private, Bidirectional, Direction, Mapped,
};
use crate::{
    alloc::{flags::*, KBox, KVec},
    bindings,
    error::{code::*, Error, Result},
    page::{Page, PAGE_SIZE},
    rdma::{pd::Pd, sync::sleepable},
    sync::Arc,
    types::Opaque,
};
use core::{marker::PhantomData, mem::ManuallyDrop};

/// Most pages of one [`DmaSg`].
pub const MAX_SG_PAGES: usize = 256;

/// Pages gathered in a scatterlist (`struct sg_table`), DMA-mapped in direction `D` for the
/// device of a [`Pd`] while it lives (`ib_dma_map_sg`).
///
/// It is the memory of a multi-page [`Mr`](crate::rdma::mr::Mr) ([`Mr::map_sg`]), or a page vector
/// that one work request sends or receives: the pages need not be contiguous. The CPU reads and
/// writes it through [`DmaSg::read`] and [`DmaSg::write`], which sync the pages; like a
/// [`DmaBuf`], it is only reachable while no posted request owns it.
///
/// [`Mr::map_sg`]: crate::rdma::mr::Mr::map_sg
/// [`DmaBuf`]: super::DmaBuf
///
/// # Invariants
///
/// `table` is an initialised `sg_table` of `pages.len()` entries, entry `i` holding all of
/// `pages[i]`, mapped for `pd.device()` in direction `D` into `nents` DMA entries, until
/// `DmaSg` is dropped or unmapped by `into_pages`.
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
pub struct DmaSg<D: Direction = Bidirectional> {
    pages: ManuallyDrop<KVec<Page>>,
    table: KBox<Opaque<bindings::sg_table>>,
    nents: u32,
    pd: Arc<Pd>,
    _d: PhantomData<D>,
}

// SAFETY: The pages and table are owned; the mapping may be used and torn down on any thread.
unsafe impl<D: Direction> Send for DmaSg<D> {}
// SAFETY: `&DmaSg` allows reads only.
unsafe impl<D: Direction> Sync for DmaSg<D> {}

impl DmaSg<Bidirectional> {
    /// Allocates `pages` zeroed pages, gathers them in a scatterlist and maps it both ways.
    /// May sleep.
    ///
    /// # Errors
    ///
    /// - `EINVAL` for zero pages or more than [`MAX_SG_PAGES`].
    /// - `ENOMEM` when an allocation or the mapping fails.
    /// - `EAGAIN` in atomic context.
    pub fn new(pd: &Arc<Pd>, pages: usize) -> Result<Self> {
        sleepable()?;
        if pages == 0 || pages > MAX_SG_PAGES {
            return Err(EINVAL);
        }
        let mut v = KVec::with_capacity(pages, GFP_KERNEL)?;
        for _ in 0..pages {
            v.push(Page::alloc_page(GFP_KERNEL | __GFP_ZERO)?, GFP_KERNEL)?;
        }
        Self::from_pages(pd, v).map_err(|(e, _)| e)
    }
}

/// A scatterlist (`sg_alloc_table`, not mapped) over the first `len` bytes of `pages`: whole
/// pages, the last one cut to what is left. The caller keeps the pages alive as long as the
/// table and frees the table with `sg_free_table`. `len` must be non-zero and need at most
/// `pages.len()` and [`MAX_SG_PAGES`] pages (checked by the callers).
pub(crate) fn page_table(pages: &[Page], len: usize) -> Result<KBox<Opaque<bindings::sg_table>>> {
    let entries = len.div_ceil(PAGE_SIZE);
    let table = KBox::new(Opaque::<bindings::sg_table>::uninit(), GFP_KERNEL)?;
    // SAFETY: `table` is writable; `entries` is at most `MAX_SG_PAGES` (caller).
    let ret = unsafe { bindings::sg_alloc_table(table.get(), entries as u32, GFP_KERNEL.as_raw()) };
    if ret != 0 {
        return Err(Error::from_errno(ret));
    }
    // SAFETY: `sg_alloc_table` succeeded: `sgl` is the first of `entries` entries.
    let mut sg = unsafe { (*table.get()).sgl };
    for (i, page) in pages.iter().take(entries).enumerate() {
        let n = (len - i * PAGE_SIZE).min(PAGE_SIZE) as u32;
        // SAFETY: `sg` is one of the table's `entries` entries (there are at least as many
        // pages, caller), and the caller keeps the page alive as long as the table.
        sg = unsafe { bindings::rdma_sg_set_page(sg, page.as_ptr(), n, 0) };
    }
    Ok(table)
}

impl<D: Direction> DmaSg<D> {
    /// Gathers the caller's `pages` in a scatterlist and maps it in direction `D`, without
    /// copying. May sleep.
    ///
    /// # Errors
    ///
    /// The pages come back with the error:
    ///
    /// - `EINVAL` for no pages or more than [`MAX_SG_PAGES`].
    /// - `ENOMEM` when the table or the mapping cannot be made.
    /// - `EAGAIN` in atomic context.
    pub fn from_pages(pd: &Arc<Pd>, pages: KVec<Page>) -> Result<Self, (Error, KVec<Page>)> {
        let n = pages.len();
        if let Err(e) = sleepable() {
            return Err((e, pages));
        }
        if n == 0 || n > MAX_SG_PAGES {
            return Err((EINVAL, pages));
        }
        let table = match page_table(&pages, n * PAGE_SIZE) {
            Ok(t) => t,
            Err(e) => return Err((e, pages)),
        };
        let dev = pd.device().as_raw();
        // SAFETY: The table is initialised and describes pages that live as long as it.
        let nents = unsafe { bindings::ib_dma_map_sg(dev, (*table.get()).sgl, n as i32, D::RAW) };
        if nents <= 0 {
            // SAFETY: Allocated above and not mapped.
            unsafe { bindings::sg_free_table(table.get()) };
            return Err((ENOMEM, pages));
        }
        // INVARIANT: Filled and mapped above.
        Ok(Self {
            pages: ManuallyDrop::new(pages),
            table,
            nents: nents as u32,
            pd: pd.clone(),
            _d: PhantomData,
        })
    }

    /// Unmaps the scatterlist and gives the pages back.
    pub fn into_pages(self) -> KVec<Page> {
        let mut me = ManuallyDrop::new(self);
        me.unmap();
        // SAFETY: `me` is never used or dropped again; each field is moved out or dropped once.
        unsafe {
            core::ptr::drop_in_place(&raw mut me.pd);
            core::ptr::drop_in_place(&raw mut me.table);
            ManuallyDrop::take(&mut me.pages)
        }
    }

    fn unmap(&mut self) {
        // SAFETY: Mapped with `pages.len()` entries (invariant); unmapped with the count passed
        // to the mapping, as the DMA API requires; no request uses it any more.
        unsafe {
            bindings::ib_dma_unmap_sg(
                self.pd.device().as_raw(),
                (*self.table.get()).sgl,
                self.pages.len() as i32,
                D::RAW,
            );
            bindings::sg_free_table(self.table.get());
        }
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
                D::RAW,
                for_device,
            )
        }
    }

    /// Copies `dst.len()` bytes from `offset` into `dst`, after syncing for the CPU, with
    /// volatile reads (the pages may belong to a registered memory region).
    ///
    /// # Errors
    ///
    /// `EINVAL` if the range is empty or not inside the pages.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result {
        self.sync(false);
        let out = dst.as_mut_ptr();
        pieces(&self.pages, self.len(), offset, dst.len(), |page, at, r| {
            // SAFETY: `r` is inside `dst` and `at + r.len()` inside the page (`pieces`).
            unsafe { page_copy(page, at, out.add(r.start), r.end - r.start, Way::FromShared) }
        })
    }

    /// Copies `src` to `offset` with volatile writes, then syncs for the device.
    ///
    /// # Errors
    ///
    /// `EINVAL` if the range is empty or not inside the pages.
    pub fn write(&mut self, offset: usize, src: &[u8]) -> Result {
        self.sync(false);
        let from = src.as_ptr().cast_mut();
        pieces(&self.pages, self.len(), offset, src.len(), |page, at, r| {
            // SAFETY: `r` is inside `src` and `at + r.len()` inside the page (`pieces`).
            unsafe { page_copy(page, at, from.add(r.start), r.end - r.start, Way::ToShared) }
        })?;
        self.sync(true);
        Ok(())
    }
}

impl<D: Direction> private::Sealed for DmaSg<D> {}

impl<D: Direction> Mapped for DmaSg<D> {
    fn pd(&self) -> &Arc<Pd> {
        &self.pd
    }

    fn size(&self) -> usize {
        self.len()
    }

    fn piece_for_device(&self, offset: usize, end: usize) -> (u64, u32) {
        self.sync(true);
        let (mut sg, nents) = self.mapped();
        let mut start = 0usize;
        for _ in 0..nents {
            let (mut addr, mut len) = (0u64, 0u32);
            // SAFETY: `sg` is one of the `nents` mapped entries of the table (invariant).
            let next = unsafe { bindings::rdma_sg_dma(sg, &mut addr, &mut len) };
            let stop = start + len as usize;
            if offset < stop {
                let n = (stop.min(end) - offset) as u32;
                return (addr + (offset - start) as u64, n);
            }
            start = stop;
            sg = next;
        }
        // Unreachable for a checked range: the DMA entries cover the pages.
        (0, 0)
    }
}

impl<D: Direction> Drop for DmaSg<D> {
    fn drop(&mut self) {
        self.unmap();
        // SAFETY: Dropped once, here, after the table that described them.
        unsafe { ManuallyDrop::drop(&mut self.pages) };
    }
}
