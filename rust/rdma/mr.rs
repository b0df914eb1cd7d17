// SPDX-License-Identifier: GPL-2.0

//! Memory regions for remote access, registered by fast registration (`IB_WR_REG_MR`).
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! A peer may RDMA READ, WRITE or perform atomics on local memory only through an rkey. An
//! [`Mr`] (`ib_alloc_mr` of type `IB_MR_TYPE_MEM_REG`) is given a [`DmaBuf`] with [`Mr::map`],
//! or the pages of a [`DmaSg`] with [`Mr::map_sg`] (both `ib_map_mr_sg`), then registered by
//! posting [`SendOps::reg_mr`]; from that completion on, [`Mr::remote`] is what the peer needs.
//! [`SendOps::local_inv`] revokes it once its request has completed successfully, and so does
//! a peer's SEND with invalidate of its rkey (the receive's [`Wc::invalidated_rkey`]), which
//! the owner records with [`Region::invalidated_by`]. An MR knows whether it is registered,
//! from the post of its registration until an invalidation of it has run (a flushed or failed
//! one has not): [`Mr::remote`] refuses to advertise one that is not, or is being invalidated,
//! and [`SendOps::reg_mr`] to register one that still is (the device refuses that too), or to
//! reuse the rkey of the registration before ([`Region::bump_key`] moves on). The MR owns the
//! memory, and dropping the MR deregisters it (`ib_dereg_mr`) before the memory is freed, so a
//! peer can never reach freed memory. A peer may write a registered MR's memory at any time, so
//! the CPU reaches it only by copying, with volatile accesses ([`Mr::read`], [`Mr::write`]),
//! never through a slice.
//!
//! A [`LentMr`] maps pages another object owns instead (a block request's, a [`PageOwner`]),
//! for one registration at a time: the owner is held until that registration is revoked, and
//! given back only then, so a storage initiator hands a request's own pages to the target and
//! ends the request after the target's SEND with invalidate.
//!
//! What the two have in common, their keys and their registration state, is the [`Region`]
//! trait's: [`Region::rkey`], [`Region::iova`], [`Region::bump_key`], and the remote
//! invalidations recorded with [`Region::invalidated_by`] or [`Region::apply_invalidation`].
//!
//! Deregistration sleeps; an MR dropped where sleeping is not allowed (in a completion handler)
//! is deregistered from process context, before its memory is freed ([`defer`](super::defer)).
//!
//! [`SendOps::reg_mr`]: super::wr::SendOps::reg_mr
//! [`SendOps::local_inv`]: super::wr::SendOps::local_inv
//! [`PageOwner`]: super::dma::PageOwner
//! [`Wc::invalidated_rkey`]: super::cq::Wc::invalidated_rkey

use super::{
    defer::{Deferred, Teardown},
    dma::{DmaBuf, DmaSg},
    pd::Pd,
};
use crate::{
    alloc::{flags::GFP_KERNEL, KBox},
    bindings,
    error::{code::*, Error, Result},
    page::PAGE_SIZE,
    sync::Arc,
    types::Opaque,
};

mod keys;
mod lent;
use keys::private;
pub(crate) use keys::{Before, State};
pub use keys::{Keys, Region};
pub use lent::LentMr;

/// Remote access rights of an RC QP or a memory region (`enum ib_access_flags`).
///
/// # Examples
///
/// ```
/// use kernel::rdma::mr::Access;
///
/// let rw = Access::REMOTE_READ | Access::REMOTE_WRITE;
/// assert_eq!(rw.bits() & Access::REMOTE_WRITE.bits(), Access::REMOTE_WRITE.bits());
/// assert_eq!(Access::NONE.bits(), 0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access(u32);

impl Access {
    /// No remote access.
    pub const NONE: Access = Access(0);
    /// The device may write the memory on behalf of local requests (RDMA READ results).
    pub const LOCAL_WRITE: Access = Access(bindings::ib_access_flags_IB_ACCESS_LOCAL_WRITE);
    /// Peers may RDMA WRITE.
    pub const REMOTE_WRITE: Access = Access(bindings::ib_access_flags_IB_ACCESS_REMOTE_WRITE);
    /// Peers may RDMA READ.
    pub const REMOTE_READ: Access = Access(bindings::ib_access_flags_IB_ACCESS_REMOTE_READ);
    /// Peers may perform atomics.
    pub const REMOTE_ATOMIC: Access = Access(bindings::ib_access_flags_IB_ACCESS_REMOTE_ATOMIC);

    /// The raw flag bits.
    pub fn bits(self) -> u32 {
        self.0
    }

    /// Whether every flag of `other` is set in `self`.
    pub fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }

    /// The remote flags of `self` (without [`Access::LOCAL_WRITE`]).
    pub fn remote(self) -> Access {
        Access(self.0 & !Self::LOCAL_WRITE.0)
    }

    /// The flags of `bits` that this type names; the others are dropped.
    pub(crate) fn from_bits(bits: u32) -> Self {
        let known = Self::LOCAL_WRITE.0 | Self::REMOTE_WRITE.0 | Self::REMOTE_READ.0;
        Access(bits & (known | Self::REMOTE_ATOMIC.0))
    }
}

impl core::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

/// A remote buffer: the address and rkey a peer granted (through a fast-registered [`Mr`]).
///
/// # Examples
///
/// ```
/// use kernel::rdma::mr::Remote;
///
/// let r = Remote { addr: 0x1000, rkey: 0x42 };
/// assert_eq!(r.offset(0x10), Remote { addr: 0x1010, rkey: 0x42 });
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Remote {
    /// The remote address (an I/O virtual address of the peer's memory region).
    pub addr: u64,
    /// The peer's rkey for it.
    pub rkey: u32,
}

impl Remote {
    /// The same region `offset` bytes further.
    pub fn offset(self, offset: u64) -> Self {
        Self {
            addr: self.addr.wrapping_add(offset),
            rkey: self.rkey,
        }
    }
}

/// The memory an [`Mr`] maps.
enum Mem {
    Buf(DmaBuf),
    Sg(DmaSg),
}

/// A fast-registration memory region and the memory it maps.
///
/// # Examples
///
/// Registering a buffer for the peer: the registration request owns the MR until it completes,
/// and its handler hands it back to the thread that waits for it.
///
/// ```
/// use kernel::rdma::{
///     cq::Wc, dma::DmaBuf, mr::{Access, Mr, Remote}, qp::{Qp, Rts},
///     sync::{Completion as Signal, SpinLockBh}, wr::{Completion, Wr},
/// };
/// use kernel::{new_spinlock_bh, sync::Arc};
///
/// #[pin_data]
/// struct Back {
///     #[pin]
///     slot: SpinLockBh<Option<(Wr<Reg>, bool)>>,
///     #[pin]
///     done: Signal,
/// }
///
/// struct Reg {
///     mr: Mr,
///     back: Arc<Back>,
/// }
///
/// impl Completion for Reg {
///     fn done(wr: Wr<Self>, wc: &Wc) {
///         let back = wr.data().back.clone();
///         *back.slot.lock() = Some((wr, wc.is_ok()));
///         back.done.complete();
///     }
/// }
///
/// fn expose(qp: &Qp<Rts>, len: usize) -> Result<(Mr, Remote)> {
///     let back = Arc::pin_init(
///         pin_init!(Back { slot <- new_spinlock_bh!(None), done <- Signal::new() }),
///         GFP_KERNEL,
///     )?;
///     let mut mr = Mr::new(qp.pd(), 16)?;
///     mr.map(DmaBuf::new(qp.pd(), len, GFP_KERNEL)?).map_err(|(e, _)| e)?;
///     qp.post_send(Wr::new(Reg { mr, back: back.clone() }, GFP_KERNEL)?, |r, ops| {
///         ops.reg_mr(&r.mr, Access::REMOTE_READ | Access::REMOTE_WRITE)?;
///         Ok(())
///     })?;
///     back.done.wait();
///     let (wr, ok) = back.slot.lock().take().ok_or(EINVAL)?;
///     let mr = wr.into_inner().mr;
///     if !ok {
///         return Err(EIO);
///     }
///     let remote = mr.remote()?;
///     Ok((mr, remote))
/// }
/// ```
pub struct Mr {
    raw: Deferred<RawMr>,
}

/// The C object of an [`Mr`] and the memory it maps; dropping it deregisters the MR, then
/// frees the memory.
///
/// # Invariants
///
/// When `mem` is a [`Mem::Buf`], the MR maps it through `sg` (the one-entry scatterlist
/// describing it), when it is a [`Mem::Sg`], through that scatterlist.
struct RawMr {
    keys: Keys,
    sg: KBox<Opaque<bindings::scatterlist>>,
    mem: Option<Mem>,
}

// SAFETY: `keys` is `Send`; the scatterlist entry and the memory are owned.
unsafe impl Send for RawMr {}
// SAFETY: `&RawMr` exposes only reads of fields fixed while it is shared, and copies of the
// memory made with volatile accesses.
unsafe impl Sync for RawMr {}

impl Teardown for RawMr {}

impl Drop for RawMr {
    fn drop(&mut self) {
        if self.keys.dereg().is_err() {
            // A peer may still reach the memory: it is never freed.
            if let Some(mem) = self.mem.take() {
                core::mem::forget(mem);
            }
        }
    }
}

impl Mr {
    /// Allocates an MR that can map up to `max_pages` pages (`ib_alloc_mr`). May sleep.
    ///
    /// # Errors
    ///
    /// - `EINVAL` for zero pages or more than the device's `max_fast_reg_page_list_len`.
    /// - `EAGAIN` in atomic context.
    /// - `ENOMEM` when an allocation fails.
    /// - `EOPNOTSUPP` when the device has no fast-registration MRs (no `alloc_mr`).
    /// - Otherwise what the driver's `alloc_mr` returns.
    pub fn new(pd: &Arc<Pd>, max_pages: u32) -> Result<Self> {
        let sg = KBox::new(Opaque::uninit(), GFP_KERNEL)?;
        // INVARIANT: Maps nothing yet.
        let raw = Deferred::new(RawMr {
            keys: Keys::alloc(pd, max_pages)?,
            sg,
            mem: None,
        })?;
        Ok(Self { raw })
    }

    /// Makes the MR describe `buf` (`ib_map_mr_sg`); it takes effect for the peer when a
    /// [`reg_mr`](super::wr::SendOps::reg_mr) operation completes.
    ///
    /// An MR maps one buffer for its whole life: a registration made for a buffer stays usable
    /// by the peer until it is invalidated, and the driver does not tell when that has
    /// happened, so the buffer is freed only with the MR.
    ///
    /// # Errors
    ///
    /// The buffer is given back with the error:
    ///
    /// - `EBUSY` for a second `map` (or a `map` after [`Mr::map_sg`]).
    /// - `EINVAL` when the buffer spans more pages than the MR can map, belongs to another
    ///   PD, or is not mapped whole by the driver.
    /// - `EOPNOTSUPP` when the device cannot map MRs (no `map_mr_sg`), or what its
    ///   `map_mr_sg` returns.
    pub fn map(&mut self, buf: DmaBuf) -> Result<(), (Error, DmaBuf)> {
        let raw = self.raw.get_mut();
        if raw.mem.is_some() {
            return Err((EBUSY, buf));
        }
        let first = buf.dma_addr() as usize % PAGE_SIZE;
        let pages = (first + buf.len()).div_ceil(PAGE_SIZE);
        if pages > raw.keys.max_pages() as usize || !Arc::ptr_eq(buf.pd(), raw.keys.pd()) {
            return Err((EINVAL, buf));
        }
        let len = match u32::try_from(buf.len()) {
            Ok(l) => l,
            Err(_) => return Err((EINVAL, buf)),
        };
        let sg = raw.sg.get();
        // SAFETY: `sg` is our scatterlist entry; the buffer's memory and mapping live as long as
        // `buf`, which the MR keeps.
        unsafe { bindings::rdma_sg_set_mapped(sg, buf.cpu_addr(), len, buf.dma_addr()) };
        let mut offset = 0u32;
        // SAFETY: `ptr` is a valid MR and `sg` a one-entry list describing a mapped buffer.
        let n = unsafe {
            bindings::ib_map_mr_sg(raw.keys.as_raw(), sg, 1, &mut offset, PAGE_SIZE as u32)
        };
        if n != 1 {
            return Err((if n < 0 { Error::from_errno(n) } else { EINVAL }, buf));
        }
        // INVARIANT: The MR now maps `buf` through `sg`.
        raw.mem = Some(Mem::Buf(buf));
        Ok(())
    }

    /// Makes the MR describe the pages of `sg` (`ib_map_mr_sg` of a DMA-mapped scatterlist),
    /// as [`Mr::map`] does for one buffer, with the same rules.
    ///
    /// # Errors
    ///
    /// The pages are given back with the error:
    ///
    /// - `EBUSY` for a second map.
    /// - `EINVAL` for more pages than the MR can map, another PD, or pages the driver does
    ///   not map whole.
    /// - `EOPNOTSUPP` when the device cannot map MRs, or what its `map_mr_sg` returns.
    pub fn map_sg(&mut self, sg: DmaSg) -> Result<(), (Error, DmaSg)> {
        let raw = self.raw.get_mut();
        if raw.mem.is_some() {
            return Err((EBUSY, sg));
        }
        if sg.pages() > raw.keys.max_pages() as usize || !Arc::ptr_eq(sg.pd(), raw.keys.pd()) {
            return Err((EINVAL, sg));
        }
        let (list, nents) = sg.mapped();
        // SAFETY: `ptr` is a valid MR; `list` is a mapped scatterlist of `nents` DMA entries,
        // which lives as long as `sg`, which the MR keeps.
        let n = unsafe {
            bindings::ib_map_mr_sg(
                raw.keys.as_raw(),
                list,
                nents as i32,
                core::ptr::null_mut(),
                PAGE_SIZE as u32,
            )
        };
        if n != nents as i32 {
            return Err((if n < 0 { Error::from_errno(n) } else { EINVAL }, sg));
        }
        // INVARIANT: The MR now maps the pages of `sg`.
        raw.mem = Some(Mem::Sg(sg));
        Ok(())
    }

    /// Whether the MR maps memory ([`Mr::map`] or [`Mr::map_sg`] succeeded).
    pub fn is_mapped(&self) -> bool {
        self.raw.mem.is_some()
    }

    /// Bytes of memory the MR maps (0 before [`Mr::map`] or [`Mr::map_sg`]).
    pub fn len(&self) -> usize {
        match &self.raw.mem {
            Some(Mem::Buf(b)) => b.len(),
            Some(Mem::Sg(s)) => s.len(),
            None => 0,
        }
    }

    /// Whether the MR maps no memory yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies `dst.len()` bytes at `offset` of the mapped memory into `dst`.
    ///
    /// Once registered, the memory may be written by the peer at any time, so it is never lent
    /// out as a slice: it is copied with volatile reads, after a sync for the CPU. What the copy
    /// sees is meaningful after an event that orders the peer's access before it (a completion,
    /// a message).
    ///
    /// # Errors
    ///
    /// `EINVAL` if the MR maps nothing or the range is empty or not inside.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result {
        match &self.raw.mem {
            Some(Mem::Buf(b)) => b.copy_out(offset, dst),
            Some(Mem::Sg(s)) => s.read(offset, dst),
            None => Err(EINVAL),
        }
    }

    /// Copies `src` into the mapped memory at `offset` with volatile writes, then syncs it for
    /// the device (see [`Mr::read`]).
    ///
    /// # Errors
    ///
    /// `EINVAL` if the MR maps nothing or the range is empty or not inside.
    pub fn write(&mut self, offset: usize, src: &[u8]) -> Result {
        match &mut self.raw.get_mut().mem {
            Some(Mem::Buf(b)) => b.copy_in(offset, src),
            Some(Mem::Sg(s)) => s.write(offset, src),
            None => Err(EINVAL),
        }
    }

    /// Lends the mapped buffer ([`Mr::map`]) to `f` as a slice, while no registration of it
    /// is live: never registered, or invalidated since (by the peer,
    /// [`Region::invalidated_by`], or by a LOCAL_INV whose request completed successfully: one
    /// that was flushed or failed did not run, and the MR stays registered). Only then can no
    /// peer reach the memory, so it may be read and written like any other: a storage
    /// initiator copies a write's data in before it registers the MR, and a read's data out
    /// after the target revoked the rkey. Synced for the CPU before `f` and for the device
    /// after.
    ///
    /// # Errors
    ///
    /// - `EBUSY` while registered.
    /// - `EINVAL` if the MR maps nothing or a scatterlist ([`Mr::map_sg`], whose pages are not
    ///   one slice).
    pub fn with_buf<R>(&mut self, f: impl FnOnce(&mut [u8]) -> R) -> Result<R> {
        if self.is_registered() {
            return Err(EBUSY);
        }
        match &mut self.raw.get_mut().mem {
            Some(Mem::Buf(b)) => {
                let r = f(b.as_mut_slice());
                b.sync_all(true);
                Ok(r)
            }
            _ => Err(EINVAL),
        }
    }

    /// The lkey local requests may use.
    pub fn lkey(&self) -> u32 {
        self.raw.keys.lkey()
    }

    /// What the peer needs: the region's I/O virtual address and rkey.
    ///
    /// # Errors
    ///
    /// `EINVAL` unless a registration was posted ([`SendOps::reg_mr`]) and no invalidation of
    /// it was posted since: an rkey that no longer grants access, or is being revoked, is never
    /// handed out.
    ///
    /// [`SendOps::reg_mr`]: super::wr::SendOps::reg_mr
    pub fn remote(&self) -> Result<Remote> {
        if self.raw.keys.state() != State::Registered {
            return Err(EINVAL);
        }
        Ok(Remote {
            addr: self.iova(),
            rkey: self.rkey(),
        })
    }
}

impl private::Sealed for Mr {
    fn keys_mut(&mut self, _: private::Token) -> &mut Keys {
        &mut self.raw.get_mut().keys
    }
}

impl Region for Mr {
    fn keys(&self) -> &Keys {
        &self.raw.keys
    }

    fn is_mapped(&self) -> bool {
        Mr::is_mapped(self)
    }

    /// Always: the MR owns its memory.
    fn allows(&self, _access: Access) -> bool {
        true
    }
}
