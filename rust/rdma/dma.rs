// SPDX-License-Identifier: GPL-2.0

//! DMA mappings of memory for work requests (`ib_dma_map_*`).
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! A work request names memory by DMA address and lkey. [`DmaBuf`] is a kernel buffer that is
//! mapped for a device for as long as it lives: it is from the linear map (`kmalloc`; never
//! vmalloc or the stack, which software devices such as `rdma_rxe` cannot reach), mapped with
//! `ib_dma_map_single` when created and unmapped when dropped. [`DmaPage`] does the same for a
//! page with `ib_dma_map_page`, and [`DmaSg`] for a scatterlist of pages with `ib_dma_map_sg`.
//! Each can be allocated here or made from memory the caller already owns
//! ([`DmaBuf::from_vec`], [`DmaPage::from_page`], [`DmaSg::from_pages`]), which is mapped in
//! place, without a copy, and given back unmapped ([`DmaBuf::into_vec`], ...). [`DmaLent`]
//! maps pages that another object owns (a block request's segments) for the device to read,
//! holding that object until they are unmapped.
//!
//! The direction of a mapping is part of its type: [`ToDevice`] memory can only be read by the
//! device (SEND, RDMA WRITE and inline sources), [`FromDevice`] memory only written by it
//! (receive, RDMA READ and atomic targets), [`Bidirectional`] (the default) both. Naming memory
//! for the wrong direction does not compile.
//!
//! The CPU may look at memory only while no posted work request refers to it; the work request
//! types of this crate enforce that by owning the memory they use until their completion, and
//! memory the device writes must be lent to a request exclusively (`&mut`), so nothing else can
//! read it meanwhile. Access through [`DmaBuf::as_slice`], [`DmaBuf::as_mut_slice`] and the
//! `read`/`write` methods syncs the memory for the CPU; posting syncs it for the device.

use super::{device::Device, pd::Pd};
use crate::{
    alloc::{Flags, KVec},
    bindings,
    error::{code::*, Error, Result},
    sync::Arc,
};
use core::{marker::PhantomData, mem::ManuallyDrop, ops::Range};

mod lent;
mod page;
mod sg;

pub use lent::{DmaLent, PageOwner, Segment, MAX_LENT};
pub use page::{copy_from_pages, copy_to_pages, DmaPage};
pub(crate) use sg::page_table;
pub use sg::{DmaSg, MAX_SG_PAGES};

mod private {
    pub trait Sealed {}
}

/// The direction of a DMA mapping (`enum dma_data_direction`).
pub trait Direction: private::Sealed + Send + Sync + 'static {
    /// The C value.
    #[doc(hidden)]
    const RAW: bindings::dma_data_direction;
}

/// A direction in which the device reads the memory.
pub trait DeviceReads: Direction {}

/// A direction in which the device writes the memory.
pub trait DeviceWrites: Direction {}

/// Memory the device only reads (`DMA_TO_DEVICE`).
pub struct ToDevice;
/// Memory the device only writes (`DMA_FROM_DEVICE`).
pub struct FromDevice;
/// Memory the device reads and writes (`DMA_BIDIRECTIONAL`).
pub struct Bidirectional;

impl private::Sealed for ToDevice {}
impl private::Sealed for FromDevice {}
impl private::Sealed for Bidirectional {}
impl Direction for ToDevice {
    const RAW: bindings::dma_data_direction = bindings::dma_data_direction_DMA_TO_DEVICE;
}
impl Direction for FromDevice {
    const RAW: bindings::dma_data_direction = bindings::dma_data_direction_DMA_FROM_DEVICE;
}
impl Direction for Bidirectional {
    const RAW: bindings::dma_data_direction = bindings::dma_data_direction_DMA_BIDIRECTIONAL;
}
impl DeviceReads for ToDevice {}
impl DeviceReads for Bidirectional {}
impl DeviceWrites for FromDevice {}
impl DeviceWrites for Bidirectional {}

/// The most scatter/gather entries of one send request, over all its operations.
pub const MAX_SGE: usize = 16;

/// The most scatter entries of one receive request.
pub const MAX_RECV_SGE: usize = 16;

/// Largest [`DmaBuf`]: what `kmalloc` hands out as one physically contiguous piece.
pub const MAX_BUF: usize = 4 << 20;

/// `offset .. offset + len` if it is not empty and lies inside `total` bytes; `EINVAL` otherwise.
///
/// The one bounds check of every access to mapped memory.
#[inline]
pub(crate) fn span(offset: usize, len: usize, total: usize) -> Result<Range<usize>> {
    let end = offset.checked_add(len).ok_or(EINVAL)?;
    if len == 0 || end > total {
        return Err(EINVAL);
    }
    Ok(offset..end)
}

/// Copies `len` bytes with volatile accesses: the memory of a registered memory region may be
/// written by a peer at any time, so it is never read or written as ordinary Rust memory.
///
/// It moves eight bytes per access where `src` and `dst` share their alignment (page and
/// sector offsets do), bytes before and after those words and throughout otherwise (a copy
/// one byte at a time took about three times as long).
///
/// # Safety
///
/// `src` must be valid for reads and `dst` for writes of `len` bytes.
pub(crate) unsafe fn copy_volatile(src: *const u8, dst: *mut u8, len: usize) {
    const WORD: usize = core::mem::size_of::<u64>();
    let mut i = 0;
    let head = src.align_offset(WORD);
    if head < WORD && head == dst.align_offset(WORD) {
        while i < head.min(len) {
            // SAFETY: `i < len`, inside both ranges (the caller's guarantee).
            unsafe { dst.add(i).write_volatile(src.add(i).read_volatile()) };
            i += 1;
        }
        while len - i >= WORD {
            // SAFETY: `i + WORD <= len`, inside both ranges; `src + i` and `dst + i` are both
            // aligned for `u64` (they were `head` bytes short of it, and `i` moved on by `head`
            // then by whole words).
            unsafe {
                let word = src.add(i).cast::<u64>().read_volatile();
                dst.add(i).cast::<u64>().write_volatile(word);
            }
            i += WORD;
        }
    }
    while i < len {
        // SAFETY: `i < len`, inside both ranges (the caller's guarantee).
        unsafe { dst.add(i).write_volatile(src.add(i).read_volatile()) };
        i += 1;
    }
}

/// Memory that work requests can name, mapped for the device of a PD.
///
/// Implemented by [`DmaBuf`], [`DmaPage`], [`DmaSg`] and [`DmaLent`]; the device reads it when the mapping's
/// direction is [`DeviceReads`], and writes it when it is [`DeviceWrites`].
pub trait Mapped: private::Sealed {
    /// The PD whose device the memory is mapped for.
    fn pd(&self) -> &Arc<Pd>;

    /// The size of the memory in bytes.
    fn size(&self) -> usize;

    /// The DMA address and length of the longest DMA-contiguous piece that starts at byte
    /// `offset` and ends by byte `end`, after syncing it for the device. The caller has checked
    /// the range.
    #[doc(hidden)]
    fn piece_for_device(&self, offset: usize, end: usize) -> (u64, u32);
}

/// Memory the device may read: the source of a SEND or an RDMA WRITE. Mapped memory whose
/// direction is [`DeviceReads`].
pub trait Gather: Mapped {}

/// Memory the device may write: a receive buffer, the target of an RDMA READ or the result of
/// an atomic. Mapped memory whose direction is [`DeviceWrites`], lent to requests exclusively.
pub trait Scatter: Mapped {}

impl<D: DeviceReads> Gather for DmaBuf<D> {}
impl<D: DeviceReads> Gather for DmaPage<D> {}
impl<D: DeviceReads> Gather for DmaSg<D> {}
impl<D: DeviceWrites> Scatter for DmaBuf<D> {}
impl<D: DeviceWrites> Scatter for DmaPage<D> {}
impl<D: DeviceWrites> Scatter for DmaSg<D> {}

/// A zero-filled kernel buffer (or one the caller gave), DMA-mapped for the device of a [`Pd`]
/// in direction `D` while it lives.
///
/// # Invariants
///
/// `buf` has length at least 1 and at most [`MAX_BUF`], is `kmalloc` memory, and is mapped at
/// `dma` for `pd.device()` in direction `D` until it is unmapped in `drop` or `into_vec`; its
/// heap storage never moves (the vector is never grown).
///
/// # Examples
///
/// ```
/// use kernel::rdma::{dma::{DmaBuf, ToDevice}, pd::Pd};
///
/// fn fill(pd: &kernel::sync::Arc<Pd>) -> Result<DmaBuf> {
///     let mut buf = DmaBuf::new(pd, 4096, GFP_KERNEL)?;
///     buf.as_mut_slice()[..5].copy_from_slice(b"hello");
///     Ok(buf)
/// }
///
/// // A message the caller already has, mapped where it is for the device to read.
/// fn map_message(pd: &kernel::sync::Arc<Pd>, msg: KVec<u8>) -> Result<DmaBuf<ToDevice>> {
///     DmaBuf::from_vec(pd, msg).map_err(|(e, _msg)| e)
/// }
/// ```
pub struct DmaBuf<D: Direction = Bidirectional> {
    buf: ManuallyDrop<KVec<u8>>,
    dma: u64,
    pd: Arc<Pd>,
    _d: PhantomData<D>,
}

impl DmaBuf<Bidirectional> {
    /// Allocates `len` zeroed bytes and maps them both ways for the PD's device. `flags` are
    /// the allocation flags (`GFP_ATOMIC` in a completion handler).
    ///
    /// # Errors
    ///
    /// - `EINVAL` for an empty buffer or one larger than [`MAX_BUF`].
    /// - `ENOMEM` when the allocation or the mapping fails.
    pub fn new(pd: &Arc<Pd>, len: usize, flags: Flags) -> Result<Self> {
        Self::alloc(pd, len, flags)
    }
}

impl<D: Direction> DmaBuf<D> {
    /// Allocates `len` zeroed bytes and maps them in direction `D` (see [`DmaBuf::new`]).
    ///
    /// # Errors
    ///
    /// - `EINVAL` for an empty buffer or one larger than [`MAX_BUF`].
    /// - `ENOMEM` when the allocation or the mapping fails.
    pub fn alloc(pd: &Arc<Pd>, len: usize, flags: Flags) -> Result<Self> {
        if len == 0 || len > MAX_BUF {
            return Err(EINVAL);
        }
        let buf = KVec::from_elem(0u8, len, flags)?;
        Self::from_vec(pd, buf).map_err(|(e, _)| e)
    }

    /// Maps `buf` where it is, in direction `D`, for the PD's device.
    ///
    /// # Errors
    ///
    /// The vector comes back with the error:
    ///
    /// - `EINVAL` for an empty vector or one longer than [`MAX_BUF`].
    /// - `ENOMEM` when the mapping fails.
    pub fn from_vec(pd: &Arc<Pd>, mut buf: KVec<u8>) -> Result<Self, (Error, KVec<u8>)> {
        let len = buf.len();
        if len == 0 || len > MAX_BUF {
            return Err((EINVAL, buf));
        }
        let dev = pd.device().as_raw();
        // SAFETY: `buf` is `len` bytes of kmalloc memory (linear map), which stays allocated and
        // in place until it is unmapped in `drop` or `into_vec`.
        let dma = unsafe { bindings::ib_dma_map_single(dev, buf.as_mut_ptr().cast(), len, D::RAW) };
        if let Err(e) = check_mapping(pd.device(), dma) {
            return Err((e, buf));
        }
        // INVARIANT: `buf` is mapped at `dma` and is never resized after this point.
        Ok(Self {
            buf: ManuallyDrop::new(buf),
            dma,
            pd: pd.clone(),
            _d: PhantomData,
        })
    }

    /// Unmaps the buffer and gives its memory back.
    pub fn into_vec(self) -> KVec<u8> {
        let mut me = ManuallyDrop::new(self);
        me.unmap();
        // SAFETY: `me` is never used or dropped again; the vector and the PD are moved out once.
        unsafe {
            core::ptr::drop_in_place(&raw mut me.pd);
            ManuallyDrop::take(&mut me.buf)
        }
    }

    fn unmap(&mut self) {
        // SAFETY: The buffer is mapped at `dma` (invariant) and no work request uses it: those
        // own the `DmaBuf` until their completion.
        unsafe {
            bindings::ib_dma_unmap_single(self.pd.device().as_raw(), self.dma, self.len(), D::RAW)
        };
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
    ///
    /// Takes `&mut self`: syncing may write the buffer (from a bounce buffer), which must not
    /// happen under another live view of it.
    pub fn as_slice(&mut self) -> &[u8] {
        self.sync(0..self.len(), false);
        &self.buf
    }

    /// Returns the contents for writing, after syncing the buffer for the CPU.
    ///
    /// Write before posting: posting syncs the buffer for the device again.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.sync(0..self.len(), false);
        &mut self.buf
    }

    /// Syncs the whole buffer for the device (`for_device`) or the CPU.
    pub(crate) fn sync_all(&self, for_device: bool) {
        self.sync(0..self.len(), for_device);
    }

    fn sync(&self, r: Range<usize>, for_device: bool) {
        // SAFETY: `r` lies inside the mapping (callers pass checked ranges), which is live
        // (invariant).
        unsafe {
            sync_single::<D>(
                self.pd.device(),
                self.dma + r.start as u64,
                r.end - r.start,
                for_device,
            )
        }
    }

    /// Copies `dst.len()` bytes at `offset` out of the buffer, after syncing them for the CPU,
    /// with volatile reads: the buffer of a registered [`Mr`](super::mr::Mr), which a peer
    /// may write at any time, is never lent out as a slice. `EINVAL` if the range is not
    /// inside or is empty.
    pub(crate) fn copy_out(&self, offset: usize, dst: &mut [u8]) -> Result {
        let r = span(offset, dst.len(), self.len())?;
        self.sync(r.clone(), false);
        // SAFETY: `r` lies inside the allocation and `dst` is valid for its length.
        unsafe { copy_volatile(self.buf.as_ptr().add(r.start), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Copies `src` into the buffer at `offset` with volatile writes, then syncs it for the
    /// device (see [`DmaBuf::copy_out`]). `EINVAL` if the range is not inside or is empty.
    pub(crate) fn copy_in(&mut self, offset: usize, src: &[u8]) -> Result {
        let r = span(offset, src.len(), self.len())?;
        self.sync(r.clone(), false);
        // SAFETY: `r` lies inside the allocation and `src` is valid for its length.
        unsafe { copy_volatile(src.as_ptr(), self.buf.as_mut_ptr().add(r.start), src.len()) };
        self.sync(r, true);
        Ok(())
    }

    /// The CPU address and length of `range`, for inline sends (the driver copies the bytes at
    /// post time). `EINVAL` if the range is empty or not inside.
    pub(crate) fn inline_piece(&self, range: Range<usize>) -> Result<(u64, u32)> {
        let r = span(
            range.start,
            range.end.saturating_sub(range.start),
            self.len(),
        )?;
        let len = u32::try_from(r.end - r.start).map_err(|_| EINVAL)?;
        Ok((self.buf.as_ptr() as u64 + r.start as u64, len))
    }
}

impl<D: Direction> private::Sealed for DmaBuf<D> {}

impl<D: Direction> Mapped for DmaBuf<D> {
    fn pd(&self) -> &Arc<Pd> {
        &self.pd
    }

    fn size(&self) -> usize {
        self.len()
    }

    fn piece_for_device(&self, offset: usize, end: usize) -> (u64, u32) {
        self.sync(offset..end, true);
        (self.dma + offset as u64, (end - offset) as u32)
    }
}

impl<D: Direction> Drop for DmaBuf<D> {
    fn drop(&mut self) {
        self.unmap();
        // SAFETY: Dropped once, here; the mapping is gone.
        unsafe { ManuallyDrop::drop(&mut self.buf) };
    }
}

/// Turns a failed mapping of `dev` into `ENOMEM`; `dma` comes from a mapping call on `dev`.
#[inline]
pub(crate) fn check_mapping(dev: &Device, dma: u64) -> Result {
    // A CPU address is never a failed mapping (as `ib_dma_mapping_error` says, without the call).
    if dev.uses_virt_dma() {
        return Ok(());
    }
    // SAFETY: `dev` is a valid device; the call only inspects the address.
    if unsafe { bindings::ib_dma_mapping_error(dev.as_raw(), dma) } != 0 {
        return Err(ENOMEM);
    }
    Ok(())
}

/// Syncs `len` bytes mapped at `addr` for `dev` toward the device (`for_device`) or the CPU
/// (`ib_dma_sync_single_for_device`, `ib_dma_sync_single_for_cpu`). On a device whose
/// mappings are CPU addresses (`ib_uses_virt_dma`: the software providers) there is nothing to
/// sync, and no call is made: the C inline says so too, but a helper would cost a call on every
/// buffer access.
///
/// # Safety
///
/// `addr .. addr + len` must lie inside a live mapping for `dev` in direction `D`.
#[inline]
pub(crate) unsafe fn sync_single<D: Direction>(
    dev: &Device,
    addr: u64,
    len: usize,
    for_device: bool,
) {
    if dev.uses_virt_dma() {
        return;
    }
    let dev = dev.as_raw();
    // SAFETY: Per the safety requirements.
    unsafe {
        if for_device {
            bindings::ib_dma_sync_single_for_device(dev, addr, len, D::RAW)
        } else {
            bindings::ib_dma_sync_single_for_cpu(dev, addr, len, D::RAW)
        }
    }
}
