// SPDX-License-Identifier: GPL-2.0

//! Work requests (`struct ib_send_wr`, `struct ib_recv_wr`) and who owns their buffers.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! The rule C ULPs keep by convention: memory named by a posted work request belongs to the
//! adapter until the request's completion (successful or flushed) comes back. Here a posted
//! request is a [`Wr<T>`]: a heap block holding the `struct ib_cqe` of the request and the
//! owner's `T`, which owns the buffers ([`DmaBuf`]) the request uses. Posting
//! ([`Qp::post_send`](super::qp::Qp::post_send), [`Qp::post_recv`](super::qp::Qp::post_recv))
//! takes the `Wr` and hands it to the device; the only way back is
//! [`Completion::done`], called with the `Wr` and its [`Wc`] when the request completes. Safe code
//! therefore cannot touch, free or reuse a buffer the adapter may still use.
//!
//! The scatter/gather entries of a request are built by a closure that gets `&'a T` and a
//! [`SendOps<'a>`] or [`RecvOps<'a>`]: they accept only buffers borrowed for `'a`, that is,
//! buffers inside `T` (or `'static` ones), so a request cannot name memory it does not own.
//!
//! The `Wr` is reused: `done` may post it again without allocating, which is how a data path
//! avoids allocation per message.
//!
//! # Examples
//!
//! A receive buffer that counts messages and posts itself again from its completion handler
//! (softirq context: no sleeping; posting neither sleeps nor allocates):
//!
//! ```
//! use core::sync::atomic::{AtomicU64, Ordering};
//! use kernel::rdma::{cq::Wc, dma::DmaBuf, qp::{Qp, Rts}, wr::{Completion, Wr}};
//! use kernel::sync::Arc;
//!
//! struct Rx {
//!     buf: DmaBuf,
//!     qp: Arc<Qp<Rts>>,
//!     count: Arc<AtomicU64>,
//! }
//!
//! impl Completion for Rx {
//!     fn done(wr: Wr<Self>, wc: &Wc) {
//!         if !wc.is_ok() {
//!             // Flushed (the QP is draining) or failed: dropping `wr` frees the buffer.
//!             return;
//!         }
//!         wr.data().count.fetch_add(1, Ordering::Relaxed);
//!         // The owner of the connection keeps its own `Arc<Qp>` until after `Qp::drain`, so
//!         // this clone is never the last reference (the last one must go in process context).
//!         let qp = wr.data().qp.clone();
//!         if let Err(e) = qp.post_recv(wr, |rx, ops| {
//!             ops.buf(&rx.buf, 0..rx.buf.len())?;
//!             Ok(())
//!         }) {
//!             pr_warn!("receive not re-posted: {:?}\n", e.err);
//!         }
//!     }
//! }
//!
//! fn start(qp: &Arc<Qp<Rts>>, count: &Arc<AtomicU64>, n: usize) -> Result {
//!     for _ in 0..n {
//!         let buf = DmaBuf::new(qp.pd(), 4096, GFP_KERNEL)?;
//!         let rx = Rx { buf, qp: qp.clone(), count: count.clone() };
//!         qp.post_recv(Wr::new(rx, GFP_KERNEL)?, |rx, ops| {
//!             ops.buf(&rx.buf, 0..4096)?;
//!             Ok(())
//!         })?;
//!     }
//!     Ok(())
//! }
//! ```

use super::{ah::Ah, cq::Wc, dma::DmaBuf, mr::Mr, qp::Access};
use crate::{
    alloc::{Flags, KBox},
    bindings,
    error::{code::*, Error, Result},
};
use core::{marker::PhantomData, ops::Range};

/// The most operations one [`Wr`] may chain into one post (`ib_post_send` list).
pub const MAX_OPS: usize = 8;

/// The most scatter entries of one receive request.
pub const MAX_RECV_SGE: usize = 4;

/// Bytes at the start of every UD receive buffer that receive the Global Route Header.
pub const GRH_LEN: usize = 40;

/// The owner of a work request, told when it completes.
///
/// `done` runs in the context of the CQ's [`PollContext`](super::cq::PollContext): with
/// `Softirq` (the usual choice) it must not sleep, must allocate with `GFP_ATOMIC` and may only
/// share state with process context through BH-safe locks
/// ([`SpinLockBh`](super::sync::SpinLockBh)). It gets the request back, with every buffer it
/// owns, whatever the status: after a flush (`WrFlushErr`) or an error, as after success.
pub trait Completion: Send + Sized + 'static {
    /// Called once for each posted [`Wr`] when its completion is processed.
    fn done(wr: Wr<Self>, wc: &Wc);
}

/// Which queue a request was posted on: its completion gives the slots back there.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Queue {
    Send,
    Recv,
    /// A shared receive queue: completes through [`srq::complete`](super::srq::complete).
    Srq,
}

#[repr(C)]
pub(crate) struct Inner<T> {
    cqe: bindings::ib_cqe,
    /// Queue slots this request holds while posted.
    pub(crate) slots: u32,
    pub(crate) queue: Queue,
    /// For [`Queue::Srq`]: the SRQ's bookkeeping and this request's index in it.
    pub(crate) srq: *const super::srq::Shared,
    pub(crate) srq_index: u32,
    data: T,
}

/// A work request and the owner's data `T`, which owns the buffers it names.
///
/// Allocated once with [`Wr::new`]; posting moves it to the device and [`Completion::done`]
/// gives it back, ready to be posted again.
pub struct Wr<T: Completion>(KBox<Inner<T>>);

// SAFETY: `Inner` is `T` (which is `Send`) plus C callback data and the SRQ pointer, which only
// the completion path dereferences, on whichever CPU the completion is dispatched.
unsafe impl<T: Completion> Send for Wr<T> {}
// SAFETY: `&Wr` gives access to `&T` only.
unsafe impl<T: Completion + Sync> Sync for Wr<T> {}

impl<T: Completion> Wr<T> {
    /// Allocates a request owning `data`.
    pub fn new(data: T, flags: Flags) -> Result<Self> {
        Ok(Self(KBox::new(
            Inner {
                cqe: bindings::ib_cqe { done: None },
                slots: 0,
                queue: Queue::Send,
                srq: core::ptr::null(),
                srq_index: 0,
                data,
            },
            flags,
        )?))
    }

    /// The owner's data.
    pub fn data(&self) -> &T {
        &self.0.data
    }

    /// The owner's data, for updating between posts.
    pub fn data_mut(&mut self) -> &mut T {
        &mut self.0.data
    }

    /// Frees the request and returns the owner's data.
    pub fn into_inner(self) -> T {
        KBox::into_inner(self.0).data
    }

    /// Hands the request over for posting on `queue`: it leaves its box until the post
    /// either fails ([`Posting::cancel`]) or succeeds ([`Posting::posted`]).
    pub(crate) fn start(mut self, queue: Queue) -> Posting<T> {
        self.0.cqe.done = Some(done_callback::<T>);
        self.0.queue = queue;
        Posting {
            raw: KBox::into_raw(self.0),
        }
    }

    /// Takes back a request that C owned.
    ///
    /// # Safety
    ///
    /// `raw` must come from [`Wr::start`] and no posted work request may refer to it.
    unsafe fn from_raw(raw: *mut Inner<T>) -> Self {
        // SAFETY: The caller guarantees `raw` came from `KBox::into_raw` and is unused.
        Self(unsafe { KBox::from_raw(raw) })
    }
}

/// A request on its way to the device.
///
/// # Invariants
///
/// `raw` comes from `KBox::into_raw` in [`Wr::start`] and is not yet posted.
pub(crate) struct Posting<T: Completion> {
    raw: *mut Inner<T>,
}

impl<T: Completion> Posting<T> {
    /// The owner's data, for building the scatter/gather list.
    ///
    /// # Safety
    ///
    /// The reference must not be used after [`Posting::posted`] or [`Posting::cancel`]
    /// (only values computed from it, such as DMA addresses, may outlive it).
    pub(crate) unsafe fn data<'a>(&self) -> &'a T {
        // SAFETY: `raw` is valid (invariant) and only shared references are made to `data`
        // until the post; the caller bounds the use of the reference.
        unsafe { &(*self.raw).data }
    }

    /// The `ib_cqe` that the (last) work request must carry.
    pub(crate) fn cqe(&self) -> *mut bindings::ib_cqe {
        // SAFETY: `raw` is valid (invariant); this is a field projection.
        unsafe { &raw mut (*self.raw).cqe }
    }

    /// Records how many queue slots the request holds while posted.
    pub(crate) fn set_slots(&mut self, n: u32) {
        // SAFETY: `raw` is valid and not yet shared with the device (invariant).
        unsafe { (*self.raw).slots = n };
    }

    /// Records the SRQ bookkeeping entry of the request.
    pub(crate) fn set_srq(&mut self, srq: *const super::srq::Shared, index: u32) {
        // SAFETY: `raw` is valid and not yet shared with the device (invariant).
        unsafe {
            (*self.raw).srq = srq;
            (*self.raw).srq_index = index;
        }
    }

    /// The request, type-erased, with the function that gives it back to its owner as
    /// flushed: how an SRQ keeps track of what is posted on it.
    pub(crate) fn erased(&self) -> (*mut core::ffi::c_void, unsafe fn(*mut core::ffi::c_void)) {
        (self.raw.cast(), flush_erased::<T>)
    }

    /// The device did not take the request: gives it back.
    pub(crate) fn cancel(self) -> Wr<T> {
        // SAFETY: Not posted (invariant), so nothing else refers to it.
        unsafe { Wr::from_raw(self.raw) }
    }

    /// The device took the request; [`done_callback`] takes it back at completion.
    pub(crate) fn posted(self) {}
}

/// The `done` callback of every [`Wr`]'s `ib_cqe`.
///
/// # Safety
///
/// Called by the RDMA core's CQ processing with a valid `wc` whose `wr_cqe` is the `cqe` of an
/// `Inner<T>` posted by this crate.
unsafe extern "C" fn done_callback<T: Completion>(
    _cq: *mut bindings::ib_cq,
    wc: *mut bindings::ib_wc,
) {
    // SAFETY: The core calls us only for completions whose `wr_cqe` points at our `ib_cqe`.
    let cqe = unsafe { (*wc).__bindgen_anon_1.wr_cqe };
    // SAFETY: `cqe` is the `cqe` field of an `Inner<T>` (we installed this callback only there).
    let inner = unsafe { crate::container_of!(cqe, Inner<T>, cqe) }.cast_mut();
    // SAFETY: The completion ends the request: the device no longer uses it or its buffers, and
    // each request completes once, so we take back the unique ownership `into_raw` gave away.
    let wr = unsafe { Wr::from_raw(inner) };
    // SAFETY: `wc` is valid for the duration of the callback.
    let raw = unsafe { &*wc };
    let qp_num = match wr.0.queue {
        // SAFETY: The request was posted on the SRQ `srq` (set before posting), which is kept
        // alive until its CQ has no completion of it left (`Srq::drop` quiesces the CQ).
        Queue::Srq => unsafe { super::srq::complete(wr.0.srq, wr.0.srq_index, raw.qp) },
        queue => {
            // SAFETY: The request was posted on the QP `raw.qp`, which is not destroyed before
            // its own queues are drained, so it is valid during this callback.
            unsafe { super::qp::release_slots(raw.qp, queue, wr.0.slots) };
            // SAFETY: As above, the QP is valid.
            unsafe { (*raw.qp).qp_num }
        }
    };
    T::done(wr, &Wc::new(raw, qp_num));
}

/// Gives a request that was left on a destroyed SRQ back to its owner, as flushed.
///
/// # Safety
///
/// `raw` must come from [`Posting::erased`] of a `Posting<T>` that was posted on an SRQ that
/// is now destroyed, with no completion of it still to be dispatched.
unsafe fn flush_erased<T: Completion>(raw: *mut core::ffi::c_void) {
    // SAFETY: Per the safety requirements, nothing refers to the request any more.
    let wr = unsafe { Wr::<T>::from_raw(raw.cast()) };
    T::done(wr, &Wc::flushed_recv());
}

/// A remote buffer: the address and rkey a peer granted (through a fast-registered
/// [`Mr`](super::mr::Mr)).
///
/// # Examples
///
/// ```
/// use kernel::rdma::wr::Remote;
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

/// One send-queue operation as the C API lays it out: every variant starts with `ib_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) union RawSendWr {
    pub(crate) send: bindings::ib_send_wr,
    rdma: bindings::ib_rdma_wr,
    atomic: bindings::ib_atomic_wr,
    ud: bindings::ib_ud_wr,
    pub(crate) reg: bindings::ib_reg_wr,
}

/// The operations of one send [`Wr`], chained and posted with one `ib_post_send`.
///
/// Only the last operation is signaled and carries the request's completion; earlier ones may
/// be marked [`SendOps::unsignaled`] (the default for all but the last), since the completion of
/// the last one implies theirs (send queues complete in order). A failed unsignaled operation
/// moves a connected QP to the error state, and the last one then completes with a flush error.
///
/// # Examples
///
/// An RDMA WRITE of a buffer to the peer, then a SEND with immediate data that tells it the
/// data is there, in one post:
///
/// ```
/// use kernel::rdma::{cq::Wc, dma::DmaBuf, qp::{Qp, Rts}, wr::{Completion, Remote, Wr}};
///
/// struct Out {
///     buf: DmaBuf,
/// }
///
/// impl Completion for Out {
///     fn done(wr: Wr<Self>, wc: &Wc) {
///         if !wc.is_ok() {
///             pr_warn!("write+send failed: {:?}\n", wc.status());
///         }
///         drop(wr);
///     }
/// }
///
/// fn write_then_notify(qp: &Qp<Rts>, to: Remote) -> Result {
///     let mut buf = DmaBuf::new(qp.pd(), 8192, GFP_KERNEL)?;
///     buf.as_mut_slice().fill(0xab);
///     qp.post_send(Wr::new(Out { buf }, GFP_KERNEL)?, |o, ops| {
///         ops.write(&o.buf, 0..8192, to)?;
///         ops.send_imm(&o.buf, 0..8, 8192)?;
///         Ok(())
///     })?;
///     Ok(())
/// }
/// ```
pub struct SendOps<'a> {
    pub(crate) wrs: [RawSendWr; MAX_OPS],
    pub(crate) sges: [bindings::ib_sge; MAX_OPS],
    pub(crate) has_sge: [bool; MAX_OPS],
    pub(crate) n: usize,
    pub(crate) inline_len: [u32; MAX_OPS],
    pub(crate) ud_ops: usize,
    _p: PhantomData<&'a DmaBuf>,
}

impl<'a> SendOps<'a> {
    pub(crate) fn new() -> Self {
        // SAFETY: All-zeroes is a valid value of these plain C structs (null pointers, zero
        // counts and opcodes); every used field is set before posting.
        let wrs = unsafe { core::mem::zeroed() };
        Self {
            wrs,
            sges: [bindings::ib_sge::default(); MAX_OPS],
            has_sge: [false; MAX_OPS],
            n: 0,
            inline_len: [0; MAX_OPS],
            ud_ops: 0,
            _p: PhantomData,
        }
    }

    fn push(
        &mut self,
        opcode: bindings::ib_wr_opcode,
        sge: Option<bindings::ib_sge>,
    ) -> Result<&mut RawSendWr> {
        let i = self.n;
        if i >= MAX_OPS {
            return Err(EINVAL);
        }
        self.n += 1;
        if let Some(sge) = sge {
            self.sges[i] = sge;
            self.has_sge[i] = true;
        }
        let wr = &mut self.wrs[i];
        wr.send.opcode = opcode;
        wr.send.num_sge = i32::from(sge.is_some());
        Ok(wr)
    }

    /// SEND `range` of `buf`.
    pub fn send(&mut self, buf: &'a DmaBuf, range: Range<usize>) -> Result<&mut Self> {
        self.push(bindings::ib_wr_opcode_IB_WR_SEND, Some(buf.sge(range)?))?;
        Ok(self)
    }

    /// SEND `range` of `buf` with 32 bits of immediate data, delivered in the receiver's
    /// [`Wc::imm_data`].
    pub fn send_imm(
        &mut self,
        buf: &'a DmaBuf,
        range: Range<usize>,
        imm: u32,
    ) -> Result<&mut Self> {
        let wr = self.push(
            bindings::ib_wr_opcode_IB_WR_SEND_WITH_IMM,
            Some(buf.sge(range)?),
        )?;
        wr.send.ex.imm_data = imm.to_be();
        Ok(self)
    }

    /// SEND `range` of `buf` inline: the driver copies the bytes at post time. The length must
    /// not exceed the QP's `max_inline` (checked when posting, `EINVAL`).
    pub fn send_inline(&mut self, buf: &'a DmaBuf, range: Range<usize>) -> Result<&mut Self> {
        let sge = buf.inline_sge(range)?;
        let i = self.n;
        let wr = self.push(bindings::ib_wr_opcode_IB_WR_SEND, Some(sge))?;
        // SAFETY: `send` is the common prefix of every variant.
        unsafe { wr.send.send_flags |= bindings::ib_send_flags_IB_SEND_INLINE };
        self.inline_len[i] = sge.length;
        Ok(self)
    }

    /// UD: SEND `range` of `buf` to QP `qpn` (with `qkey`) at the address `ah`.
    pub fn send_ud(
        &mut self,
        buf: &'a DmaBuf,
        range: Range<usize>,
        ah: &'a Ah,
        qpn: u32,
        qkey: u32,
    ) -> Result<&mut Self> {
        self.ud(bindings::ib_wr_opcode_IB_WR_SEND, buf, range, ah, qpn, qkey)?;
        Ok(self)
    }

    /// UD: [`SendOps::send_ud`] with 32 bits of immediate data, delivered in the receiver's
    /// [`Wc::imm_data`].
    pub fn send_ud_imm(
        &mut self,
        buf: &'a DmaBuf,
        range: Range<usize>,
        ah: &'a Ah,
        qpn: u32,
        qkey: u32,
        imm: u32,
    ) -> Result<&mut Self> {
        let wr = self.ud(
            bindings::ib_wr_opcode_IB_WR_SEND_WITH_IMM,
            buf,
            range,
            ah,
            qpn,
            qkey,
        )?;
        wr.send.ex.imm_data = imm.to_be();
        Ok(self)
    }

    fn ud(
        &mut self,
        op: bindings::ib_wr_opcode,
        buf: &'a DmaBuf,
        range: Range<usize>,
        ah: &'a Ah,
        qpn: u32,
        qkey: u32,
    ) -> Result<&mut RawSendWr> {
        let sge = buf.sge(range)?;
        if self.n >= MAX_OPS {
            return Err(EINVAL);
        }
        // Counted before `push` borrows `self`; `push` cannot fail past the check above.
        self.ud_ops += 1;
        let wr = self.push(op, Some(sge))?;
        wr.ud.ah = ah.as_raw();
        wr.ud.remote_qpn = qpn;
        wr.ud.remote_qkey = qkey;
        Ok(wr)
    }

    fn rdma(
        &mut self,
        op: bindings::ib_wr_opcode,
        buf: &'a DmaBuf,
        range: Range<usize>,
        remote: Remote,
    ) -> Result<&mut RawSendWr> {
        let wr = self.push(op, Some(buf.sge(range)?))?;
        wr.rdma.remote_addr = remote.addr;
        wr.rdma.rkey = remote.rkey;
        Ok(wr)
    }

    /// RDMA WRITE `range` of `buf` to `remote`.
    pub fn write(
        &mut self,
        buf: &'a DmaBuf,
        range: Range<usize>,
        remote: Remote,
    ) -> Result<&mut Self> {
        self.rdma(bindings::ib_wr_opcode_IB_WR_RDMA_WRITE, buf, range, remote)?;
        Ok(self)
    }

    /// RDMA WRITE `range` of `buf` to `remote`, then consume a receive at the peer, whose
    /// completion carries `imm`.
    pub fn write_imm(
        &mut self,
        buf: &'a DmaBuf,
        range: Range<usize>,
        remote: Remote,
        imm: u32,
    ) -> Result<&mut Self> {
        let wr = self.rdma(
            bindings::ib_wr_opcode_IB_WR_RDMA_WRITE_WITH_IMM,
            buf,
            range,
            remote,
        )?;
        wr.send.ex.imm_data = imm.to_be();
        Ok(self)
    }

    /// RDMA READ from `remote` into `range` of `buf`.
    pub fn read(
        &mut self,
        buf: &'a DmaBuf,
        range: Range<usize>,
        remote: Remote,
    ) -> Result<&mut Self> {
        self.rdma(bindings::ib_wr_opcode_IB_WR_RDMA_READ, buf, range, remote)?;
        Ok(self)
    }

    fn atomic(
        &mut self,
        op: bindings::ib_wr_opcode,
        result: &'a DmaBuf,
        offset: usize,
        remote: Remote,
        add_or_cmp: u64,
        swap: u64,
    ) -> Result<&mut Self> {
        if remote.addr % 8 != 0 || offset % 8 != 0 {
            return Err(EINVAL);
        }
        let end = offset.checked_add(8).ok_or(EINVAL)?;
        let wr = self.push(op, Some(result.sge(offset..end)?))?;
        wr.atomic.remote_addr = remote.addr;
        wr.atomic.rkey = remote.rkey;
        wr.atomic.compare_add = add_or_cmp;
        wr.atomic.swap = swap;
        Ok(self)
    }

    /// Atomic compare-and-swap of the 8 aligned bytes at `remote`: if they equal `compare`
    /// they become `swap`. Their previous value lands in `result[offset..offset + 8]`, in the
    /// byte order of the responder's memory (host order between hosts of one endianness).
    pub fn compare_swap(
        &mut self,
        result: &'a DmaBuf,
        offset: usize,
        remote: Remote,
        compare: u64,
        swap: u64,
    ) -> Result<&mut Self> {
        self.atomic(
            bindings::ib_wr_opcode_IB_WR_ATOMIC_CMP_AND_SWP,
            result,
            offset,
            remote,
            compare,
            swap,
        )
    }

    /// Atomic fetch-and-add of `add` to the 8 aligned bytes at `remote`; their previous value
    /// lands in `result[offset..offset + 8]`.
    pub fn fetch_add(
        &mut self,
        result: &'a DmaBuf,
        offset: usize,
        remote: Remote,
        add: u64,
    ) -> Result<&mut Self> {
        self.atomic(
            bindings::ib_wr_opcode_IB_WR_ATOMIC_FETCH_AND_ADD,
            result,
            offset,
            remote,
            add,
            0,
        )
    }

    /// Invalidate `rkey` locally: remote access with it fails from now on.
    pub fn local_inv(&mut self, rkey: u32) -> Result<&mut Self> {
        let wr = self.push(bindings::ib_wr_opcode_IB_WR_LOCAL_INV, None)?;
        wr.send.ex.invalidate_rkey = rkey;
        Ok(self)
    }

    /// Registers `mr` (mapped with [`Mr::map`] or [`Mr::map_sg`]; `EINVAL` if not) for
    /// `access` under its current keys (`IB_WR_REG_MR`). Local write access is always
    /// included: the device needs it for remote writes.
    pub fn reg_mr(&mut self, mr: &'a Mr, access: Access) -> Result<&mut Self> {
        if !mr.is_mapped() {
            return Err(EINVAL);
        }
        let wr = self.push(bindings::ib_wr_opcode_IB_WR_REG_MR, None)?;
        wr.reg.mr = mr.as_raw();
        wr.reg.key = mr.rkey();
        wr.reg.access = (access | Access::LOCAL_WRITE).bits() as i32;
        Ok(self)
    }

    fn flag(&mut self, set: i32, clear: i32) -> &mut Self {
        if let Some(wr) = self.n.checked_sub(1).map(|i| &mut self.wrs[i]) {
            // SAFETY: `send` is the common prefix of every variant.
            unsafe {
                wr.send.send_flags = (wr.send.send_flags | set) & !clear;
            }
        }
        self
    }

    /// Marks the last operation added as not generating a completion on success (all but the
    /// last operation of a request are unsignaled anyway; the last is always signaled).
    pub fn unsignaled(&mut self) -> &mut Self {
        self.flag(0, bindings::ib_send_flags_IB_SEND_SIGNALED)
    }

    /// Makes the last operation added wait for earlier RDMA READs and atomics to complete.
    pub fn fence(&mut self) -> &mut Self {
        self.flag(bindings::ib_send_flags_IB_SEND_FENCE, 0)
    }

    /// Asks the receiver's CQ to raise a solicited event for the last operation added.
    pub fn solicited(&mut self) -> &mut Self {
        self.flag(bindings::ib_send_flags_IB_SEND_SOLICITED, 0)
    }

    /// Links the operations into a list whose last entry carries `cqe`; returns its head.
    ///
    /// `self` must not move until the list has been posted.
    pub(crate) fn link(&mut self, cqe: *mut bindings::ib_cqe) -> *const bindings::ib_send_wr {
        let n = self.n;
        for i in 0..n {
            let next: *mut bindings::ib_send_wr = if i + 1 < n {
                &raw mut self.wrs[i + 1].send
            } else {
                core::ptr::null_mut()
            };
            let sge: *mut bindings::ib_sge = if self.has_sge[i] {
                &raw mut self.sges[i]
            } else {
                core::ptr::null_mut()
            };
            // SAFETY: `send` is the common prefix of every variant.
            let wr = unsafe { &mut self.wrs[i].send };
            wr.next = next;
            wr.sg_list = sge;
            let signaled = bindings::ib_send_flags_IB_SEND_SIGNALED;
            if i + 1 == n {
                wr.__bindgen_anon_1.wr_cqe = cqe;
                wr.send_flags |= signaled;
            } else {
                // Unsignaled operations report only errors, which the core drops for a null
                // `wr_cqe`; the request completes through its last operation.
                wr.__bindgen_anon_1.wr_cqe = core::ptr::null_mut();
                wr.send_flags &= !signaled;
            }
        }
        &raw const self.wrs[0].send
    }
}

/// The scatter list of one receive [`Wr`]: where an incoming message is placed.
pub struct RecvOps<'a> {
    pub(crate) sges: [bindings::ib_sge; MAX_RECV_SGE],
    pub(crate) n: usize,
    _p: PhantomData<&'a DmaBuf>,
}

impl<'a> RecvOps<'a> {
    pub(crate) fn new() -> Self {
        Self {
            sges: [bindings::ib_sge::default(); MAX_RECV_SGE],
            n: 0,
            _p: PhantomData,
        }
    }

    /// Appends `range` of `buf` to the scatter list. For UD the first [`GRH_LEN`] bytes of the
    /// message are the GRH.
    pub fn buf(&mut self, buf: &'a DmaBuf, range: Range<usize>) -> Result<&mut Self> {
        if self.n >= MAX_RECV_SGE {
            return Err(EINVAL);
        }
        self.sges[self.n] = buf.sge(range)?;
        self.n += 1;
        Ok(self)
    }

    /// Total bytes the scatter list can take.
    pub fn len(&self) -> u64 {
        self.sges[..self.n]
            .iter()
            .map(|s| u64::from(s.length))
            .sum()
    }

    /// Whether no buffer was added.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }
}

/// A post that the device did not accept: the error, and the request, given back unposted.
pub struct PostError<T: Completion> {
    /// Why: `ENOMEM` for a full queue, `EINVAL` for a request the QP cannot carry,
    /// `ESHUTDOWN` after [`Qp::drain`](super::qp::Qp::drain).
    pub err: Error,
    /// The request, with everything it owns.
    pub wr: Wr<T>,
}

impl<T: Completion> From<PostError<T>> for Error {
    fn from(e: PostError<T>) -> Error {
        e.err
    }
}

impl<T: Completion> core::fmt::Debug for PostError<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PostError").field("err", &self.err).finish()
    }
}
