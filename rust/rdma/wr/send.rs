// SPDX-License-Identifier: GPL-2.0

//! The operations of a send request (`struct ib_send_wr` and its variants).
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use super::{add_sges, FixedVec, Settle, MAX_INVALIDATIONS, MAX_OPS};
use crate::{
    bindings,
    error::{code::*, Result},
    rdma::{
        ah::Ah,
        dma::{DeviceReads, DmaBuf, Gather, Mapped, Scatter, MAX_SGE},
        mr::{Access, Before, Keys, Mr, Region, Remote, State},
        pd::{Pd, PdKey},
        qp::{QpInner, QpType},
    },
};
use core::{
    marker::PhantomData,
    ops::Range,
    sync::atomic::{AtomicBool, Ordering},
};

/// One send-queue operation as the C API lays it out: every variant starts with `ib_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
union RawSendWr {
    send: bindings::ib_send_wr,
    rdma: bindings::ib_rdma_wr,
    atomic: bindings::ib_atomic_wr,
    ud: bindings::ib_ud_wr,
    reg: bindings::ib_reg_wr,
}

/// What the scatter/gather list of an operation is, so that [`SendOps::gather`] and
/// [`SendOps::scatter`] extend only lists of their own kind.
#[derive(Clone, Copy, PartialEq, Eq)]
enum List {
    /// Memory the device reads (SEND, RDMA WRITE).
    Gather,
    /// Memory the device writes (RDMA READ).
    Scatter,
    /// An inline SEND (CPU addresses), an atomic's result, or no memory at all.
    Fixed,
    /// A chain the core prepared ([`Chain`]); `wrs` holds nothing for it.
    Chain,
}

/// A chain of send work requests that the RDMA core prepared for one QP (an `rdma_rw_ctx`:
/// RDMA READs or WRITEs, with the memory registrations they need), posted as one operation.
/// The context is linked in front of the operation after it, or made the signaled end of the
/// request, with `rdma_rw_ctx_wrs` when the request is posted.
///
/// `rdma_rw_ctx_wrs` sets either the `next` of the context's last work request or its `wr_cqe`
/// and `IB_SEND_SIGNALED`, and clears neither: only a context that was never linked before has
/// a last work request with none of them. So a context is linked once, and `posted` says it was.
#[derive(Clone, Copy)]
pub(crate) struct Chain<'a> {
    /// An initialised context never linked before, exclusively lent to the request being built.
    pub(crate) ctx: *mut bindings::rdma_rw_ctx,
    /// Set when the context is linked: it may not be posted again.
    pub(crate) posted: &'a AtomicBool,
    /// The QP the context was made for, and its port.
    pub(crate) qp: *mut bindings::ib_qp,
    pub(crate) port: u32,
    /// Send queue entries the chain takes.
    pub(crate) wqes: u32,
}

/// The operations of one send [`Wr`](super::Wr), chained and posted with one `ib_post_send`.
///
/// Only the last operation is signaled and carries the request's completion; earlier ones may
/// be marked [`SendOps::unsignaled`] (the default for all but the last), since the completion of
/// the last one implies theirs (send queues complete in order). A failed unsignaled operation
/// moves a connected QP to the error state, and the request's completion then reports that
/// operation's status, not the flush of the last one
/// ([`Wc::status`](crate::rdma::cq::Wc::status)). The operations of an R/W context's chain
/// ([`SendOps::rw`]) report through the core's R/W API, which drops the errors of all but its
/// last one, as for a C ULP.
///
/// An operation's memory may be several pieces ([`SendOps::gather`], [`SendOps::scatter`]):
/// a header and a page vector in one SEND, for instance, up to the QP's `send_sge` entries per
/// operation and [`MAX_SGE`] per request.
///
/// # Examples
///
/// An RDMA WRITE of a buffer to the peer, then a SEND with immediate data that tells it the
/// data is there, in one post:
///
/// ```
/// use kernel::rdma::{cq::Wc, dma::DmaBuf, mr::Remote, qp::{Qp, Rts}, wr::{Completion, Wr}};
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
    pd: PdKey,
    ops: FixedVec<Op<'a>, MAX_OPS>,
    /// The memory pieces of all operations, each operation's in one run.
    sges: FixedVec<bindings::ib_sge, MAX_SGE>,
    /// An operation that only iWARP has (READ with invalidate) is in the list.
    iwarp_only: bool,
    _p: PhantomData<&'a mut ()>,
}

/// One operation of a [`SendOps`], and what checking and posting it needs.
#[derive(Clone, Copy)]
struct Op<'a> {
    wr: RawSendWr,
    list: List,
    /// Its first entry in [`SendOps::sges`], and how many it has.
    first: usize,
    count: usize,
    /// The bytes of an inline SEND (at most the QP's `max_inline`), else 0.
    inline_len: u32,
    /// A UD SEND (which only a UD QP takes, and which is all a UD QP takes).
    ud: bool,
    /// The chain of a [`List::Chain`] operation.
    chain: Option<Chain<'a>>,
    /// An MR this operation registers or invalidates, whose state changes when the request is
    /// posted.
    mark: Option<Mark<'a>>,
}

/// An MR that an operation registers (`reg`) or invalidates, and, once the request is being
/// posted, what its state was before ([`SendOps::apply`]).
#[derive(Clone, Copy)]
struct Mark<'a> {
    keys: &'a Keys,
    reg: bool,
    before: Option<Before>,
}

impl<'a> SendOps<'a> {
    pub(crate) fn new(pd: &Pd) -> Self {
        Self {
            pd: PdKey::of(pd),
            ops: FixedVec::new(),
            sges: FixedVec::new(),
            iwarp_only: false,
            _p: PhantomData,
        }
    }

    /// Starts operation `opcode`, whose list is of kind `list` and empty.
    fn push(&mut self, opcode: bindings::ib_wr_opcode, list: List) -> Result<&mut Op<'a>> {
        // SAFETY: All-zeroes is a valid value of these plain C structs (null pointers, zero
        // counts, flags and opcodes); every field the operation uses is set before posting.
        let mut wr: RawSendWr = unsafe { core::mem::zeroed() };
        wr.send.opcode = opcode;
        self.ops.push(Op {
            wr,
            list,
            first: self.sges.len(),
            count: 0,
            inline_len: 0,
            ud: false,
            chain: None,
            mark: None,
        })
    }

    /// The operation added last.
    fn last(&mut self) -> Result<&mut Op<'a>> {
        self.ops.last_mut().ok_or(EINVAL)
    }

    /// Starts operation `opcode`, whose list (of kind `list`) is what `fill` appends to the
    /// pieces (it returns how many). On failure the operations are as they were.
    fn push_with(
        &mut self,
        opcode: bindings::ib_wr_opcode,
        list: List,
        fill: impl FnOnce(&mut FixedVec<bindings::ib_sge, MAX_SGE>) -> Result<usize>,
    ) -> Result<&mut Op<'a>> {
        let n = self.ops.len();
        self.push(opcode, list)?;
        match fill(&mut self.sges) {
            Ok(count) => {
                let op = self.last()?;
                op.count = count;
                Ok(op)
            }
            Err(e) => {
                self.ops.truncate(n);
                Err(e)
            }
        }
    }

    /// Starts operation `opcode`, whose list (of kind `list`) is `range` of `mem`.
    fn push_mem<M: Mapped + ?Sized>(
        &mut self,
        opcode: bindings::ib_wr_opcode,
        list: List,
        mem: &M,
        range: Range<usize>,
    ) -> Result<&mut Op<'a>> {
        let pd = self.pd;
        self.push_with(opcode, list, |sges| add_sges(mem, range, pd, sges))
    }

    /// Starts operation `opcode`, whose list is the one entry `sge` (named by the caller
    /// through an lkey or a CPU address).
    fn push_sge(
        &mut self,
        opcode: bindings::ib_wr_opcode,
        sge: bindings::ib_sge,
    ) -> Result<&mut Op<'a>> {
        self.push_with(opcode, List::Fixed, |sges| sges.push(sge).map(|_| 1))
    }

    /// Starts an operation whose list gathers `range` of `src`.
    fn gathering<M: Gather + ?Sized>(
        &mut self,
        opcode: bindings::ib_wr_opcode,
        src: &'a M,
        range: Range<usize>,
    ) -> Result<&mut RawSendWr> {
        Ok(&mut self.push_mem(opcode, List::Gather, src, range)?.wr)
    }

    /// SEND `range` of `src`.
    ///
    /// # Errors
    ///
    /// `EINVAL` when `range` is empty or not inside `src`, `src` is mapped for another PD than the
    /// QP's, or the request is full ([`MAX_OPS`] operations, [`MAX_SGE`] pieces). What depends on
    /// the QP is checked when posting ([`Qp::post_send`]).
    ///
    /// [`Qp::post_send`]: crate::rdma::qp::Qp::post_send
    pub fn send<M: Gather + ?Sized>(
        &mut self,
        src: &'a M,
        range: Range<usize>,
    ) -> Result<&mut Self> {
        self.gathering(bindings::ib_wr_opcode_IB_WR_SEND, src, range)?;
        Ok(self)
    }

    /// SEND `range` of `src` with 32 bits of immediate data, delivered in the receiver's
    /// [`Wc::imm_data`](crate::rdma::cq::Wc::imm_data).
    ///
    /// # Errors
    ///
    /// `EINVAL` when `range` is empty or not inside `src`, `src` is mapped for another PD than the
    /// QP's, or the request is full ([`MAX_OPS`] operations, [`MAX_SGE`] pieces). What depends on
    /// the QP is checked when posting ([`Qp::post_send`]).
    ///
    /// [`Qp::post_send`]: crate::rdma::qp::Qp::post_send
    pub fn send_imm<M: Gather + ?Sized>(
        &mut self,
        src: &'a M,
        range: Range<usize>,
        imm: u32,
    ) -> Result<&mut Self> {
        let wr = self.gathering(bindings::ib_wr_opcode_IB_WR_SEND_WITH_IMM, src, range)?;
        wr.send.ex.imm_data = imm.to_be();
        Ok(self)
    }

    /// Adds `range` of `mem` to the list of the last operation, which must be of kind `list`.
    fn extend<M: Mapped + ?Sized>(
        &mut self,
        list: List,
        mem: &M,
        range: Range<usize>,
    ) -> Result<&mut Self> {
        let op = self.ops.last_mut().ok_or(EINVAL)?;
        if op.list != list {
            return Err(EINVAL);
        }
        op.count += add_sges(mem, range, self.pd, &mut self.sges)?;
        Ok(self)
    }

    /// Adds `range` of `src` to the memory the last operation (a SEND, RDMA WRITE or UD SEND)
    /// sends: one message from several pieces.
    ///
    /// # Errors
    ///
    /// `EINVAL` after any other operation (or none), when `range` is empty or not inside `src`,
    /// `src` is mapped for another PD than the QP's, or the request has [`MAX_SGE`] pieces already.
    /// The QP's `send_sge` is checked when posting ([`Qp::post_send`]).
    ///
    /// [`Qp::post_send`]: crate::rdma::qp::Qp::post_send
    pub fn gather<M: Gather + ?Sized>(
        &mut self,
        src: &'a M,
        range: Range<usize>,
    ) -> Result<&mut Self> {
        self.extend(List::Gather, src, range)
    }

    /// Adds `range` of `dst` to the memory the last operation (an RDMA READ) reads into.
    ///
    /// # Errors
    ///
    /// `EINVAL` after any other operation (or none), when `range` is empty or not inside `dst`,
    /// `dst` is mapped for another PD than the QP's, or the request has [`MAX_SGE`] pieces already.
    /// The QP's `send_sge` is checked when posting ([`Qp::post_send`]).
    ///
    /// [`Qp::post_send`]: crate::rdma::qp::Qp::post_send
    pub fn scatter<M: Scatter + ?Sized>(
        &mut self,
        dst: &'a mut M,
        range: Range<usize>,
    ) -> Result<&mut Self> {
        self.extend(List::Scatter, &*dst, range)
    }

    /// SEND `range` of `src` and invalidate `rkey` at the receiver (`IB_WR_SEND_WITH_INV`,
    /// RC): the receiver's MR with that rkey grants no access from the moment the message
    /// arrives, and its receive completion says so ([`Wc::invalidated_rkey`]). How a storage
    /// target answers a command whose buffer it is done with.
    ///
    /// # Errors
    ///
    /// `EINVAL` when `range` is empty or not inside `src`, `src` is mapped for another PD than the
    /// QP's, or the request is full ([`MAX_OPS`] operations, [`MAX_SGE`] pieces). What depends on
    /// the QP is checked when posting ([`Qp::post_send`]).
    ///
    /// [`Wc::invalidated_rkey`]: crate::rdma::cq::Wc::invalidated_rkey
    /// [`Qp::post_send`]: crate::rdma::qp::Qp::post_send
    pub fn send_inv<M: Gather + ?Sized>(
        &mut self,
        src: &'a M,
        range: Range<usize>,
        rkey: u32,
    ) -> Result<&mut Self> {
        let wr = self.gathering(bindings::ib_wr_opcode_IB_WR_SEND_WITH_INV, src, range)?;
        wr.send.ex.invalidate_rkey = rkey;
        Ok(self)
    }

    /// SEND `range` of `buf` inline: the driver copies the bytes at post time.
    ///
    /// # Errors
    ///
    /// `EINVAL` when `range` is empty or not inside `buf`, `buf` is mapped for another PD than the
    /// QP's, or the request is full ([`MAX_OPS`] operations, [`MAX_SGE`] pieces). A length above
    /// the QP's `max_inline` is refused when posting ([`Qp::post_send`], `EINVAL`).
    ///
    /// [`Qp::post_send`]: crate::rdma::qp::Qp::post_send
    pub fn send_inline<D: DeviceReads>(
        &mut self,
        buf: &'a DmaBuf<D>,
        range: Range<usize>,
    ) -> Result<&mut Self> {
        self.pd.check(buf.pd())?;
        let (addr, length) = buf.inline_piece(range)?;
        let lkey = self.pd.lkey;
        let sge = bindings::ib_sge { addr, length, lkey };
        let op = self.push_sge(bindings::ib_wr_opcode_IB_WR_SEND, sge)?;
        // SAFETY: `send` is the common prefix of every variant.
        unsafe { op.wr.send.send_flags |= bindings::ib_send_flags_IB_SEND_INLINE };
        op.inline_len = length;
        Ok(self)
    }

    /// UD: SEND `range` of `src` to QP `qpn` (with `qkey`) at the address `ah`, which must be
    /// on the QP's PD.
    ///
    /// # Errors
    ///
    /// `EINVAL` when `range` is empty or not inside `src`, `src` is mapped for another PD than the
    /// QP's or `ah` is on another PD, or the request is full ([`MAX_OPS`] operations, [`MAX_SGE`]
    /// pieces). What depends on the QP is checked when posting ([`Qp::post_send`]). An RC QP
    /// refuses the operation there.
    ///
    /// [`Qp::post_send`]: crate::rdma::qp::Qp::post_send
    pub fn send_ud<M: Gather + ?Sized>(
        &mut self,
        src: &'a M,
        range: Range<usize>,
        ah: &'a Ah,
        qpn: u32,
        qkey: u32,
    ) -> Result<&mut Self> {
        self.ud(bindings::ib_wr_opcode_IB_WR_SEND, src, range, ah, qpn, qkey)?;
        Ok(self)
    }

    /// UD: [`SendOps::send_ud`] with 32 bits of immediate data, delivered in the receiver's
    /// [`Wc::imm_data`](crate::rdma::cq::Wc::imm_data).
    ///
    /// # Errors
    ///
    /// Those of [`SendOps::send_ud`].
    pub fn send_ud_imm<M: Gather + ?Sized>(
        &mut self,
        src: &'a M,
        range: Range<usize>,
        ah: &'a Ah,
        qpn: u32,
        qkey: u32,
        imm: u32,
    ) -> Result<&mut Self> {
        let wr = self.ud(
            bindings::ib_wr_opcode_IB_WR_SEND_WITH_IMM,
            src,
            range,
            ah,
            qpn,
            qkey,
        )?;
        wr.send.ex.imm_data = imm.to_be();
        Ok(self)
    }

    fn ud<M: Gather + ?Sized>(
        &mut self,
        op: bindings::ib_wr_opcode,
        src: &'a M,
        range: Range<usize>,
        ah: &'a Ah,
        qpn: u32,
        qkey: u32,
    ) -> Result<&mut RawSendWr> {
        self.pd.check(ah.pd())?;
        let op = self.push_mem(op, List::Gather, src, range)?;
        op.wr.ud.ah = ah.as_raw();
        op.wr.ud.remote_qpn = qpn;
        op.wr.ud.remote_qkey = qkey;
        op.ud = true;
        Ok(&mut op.wr)
    }

    /// RDMA WRITE `range` of `src` to `remote`.
    ///
    /// # Errors
    ///
    /// `EINVAL` when `range` is empty or not inside `src`, `src` is mapped for another PD than the
    /// QP's, or the request is full ([`MAX_OPS`] operations, [`MAX_SGE`] pieces). What depends on
    /// the QP is checked when posting ([`Qp::post_send`]). A UD QP refuses the operation there.
    ///
    /// [`Qp::post_send`]: crate::rdma::qp::Qp::post_send
    pub fn write<M: Gather + ?Sized>(
        &mut self,
        src: &'a M,
        range: Range<usize>,
        remote: Remote,
    ) -> Result<&mut Self> {
        let wr = self.gathering(bindings::ib_wr_opcode_IB_WR_RDMA_WRITE, src, range)?;
        set_remote(wr, remote);
        Ok(self)
    }

    /// A zero-length RDMA WRITE, which names no memory on either side: the peer's responder
    /// acknowledges it without touching memory or consuming a receive (IBA C9-88; it needs
    /// remote write access, which rdma_cm gives every RC QP). A keep-alive: it completes while
    /// the peer lives and fails with `RetryExcErr` once it is gone, after the QP's retries.
    /// RC only.
    ///
    /// # Errors
    ///
    /// `EINVAL` when the request has [`MAX_OPS`] operations already. A UD QP refuses the operation
    /// when posting ([`Qp::post_send`]).
    ///
    /// [`Qp::post_send`]: crate::rdma::qp::Qp::post_send
    pub fn keepalive(&mut self) -> Result<&mut Self> {
        let op = self.push(bindings::ib_wr_opcode_IB_WR_RDMA_WRITE, List::Fixed)?;
        set_remote(&mut op.wr, Remote { addr: 0, rkey: 0 });
        Ok(self)
    }

    /// RDMA WRITE `range` of `src` to `remote`, then consume a receive at the peer, whose
    /// completion carries `imm`.
    ///
    /// # Errors
    ///
    /// Those of [`SendOps::write`].
    pub fn write_imm<M: Gather + ?Sized>(
        &mut self,
        src: &'a M,
        range: Range<usize>,
        remote: Remote,
        imm: u32,
    ) -> Result<&mut Self> {
        let wr = self.gathering(bindings::ib_wr_opcode_IB_WR_RDMA_WRITE_WITH_IMM, src, range)?;
        set_remote(wr, remote);
        wr.send.ex.imm_data = imm.to_be();
        Ok(self)
    }

    /// RDMA READ from `remote` into `range` of `dst`, which the request alone may reach until it
    /// completes.
    ///
    /// # Errors
    ///
    /// `EINVAL` when `range` is empty or not inside `dst`, `dst` is mapped for another PD than the
    /// QP's, or the request is full ([`MAX_OPS`] operations, [`MAX_SGE`] pieces). What depends on
    /// the QP is checked when posting ([`Qp::post_send`]). A UD QP refuses the operation there.
    ///
    /// [`Qp::post_send`]: crate::rdma::qp::Qp::post_send
    pub fn read<M: Scatter + ?Sized>(
        &mut self,
        dst: &'a mut M,
        range: Range<usize>,
        remote: Remote,
    ) -> Result<&mut Self> {
        let op = self.push_mem(
            bindings::ib_wr_opcode_IB_WR_RDMA_READ,
            List::Scatter,
            &*dst,
            range,
        )?;
        set_remote(&mut op.wr, remote);
        Ok(self)
    }

    fn atomic<M: Scatter + ?Sized>(
        &mut self,
        op: bindings::ib_wr_opcode,
        result: &'a mut M,
        offset: usize,
        remote: Remote,
        add_or_cmp: u64,
        swap: u64,
    ) -> Result<&mut Self> {
        if remote.addr % 8 != 0 || offset % 8 != 0 {
            return Err(EINVAL);
        }
        let end = offset.checked_add(8).ok_or(EINVAL)?;
        let wr = &mut self.push_mem(op, List::Fixed, &*result, offset..end)?.wr;
        wr.atomic.remote_addr = remote.addr;
        wr.atomic.rkey = remote.rkey;
        wr.atomic.compare_add = add_or_cmp;
        wr.atomic.swap = swap;
        Ok(self)
    }

    /// Atomic compare-and-swap of the 8 aligned bytes at `remote`: if they equal `compare`
    /// they become `swap`. Their previous value lands in `result[offset..offset + 8]`, in the
    /// byte order of the responder's memory (host order between hosts of one endianness).
    ///
    /// # Errors
    ///
    /// `EINVAL` when `remote.addr` or `offset` is not a multiple of 8, the 8 bytes at `offset` are
    /// not inside `result`, `result` is mapped for another PD than the QP's, or the request is full
    /// ([`MAX_OPS`] operations, [`MAX_SGE`] pieces). A UD QP refuses the operation when posting
    /// ([`Qp::post_send`]).
    ///
    /// [`Qp::post_send`]: crate::rdma::qp::Qp::post_send
    pub fn compare_swap<M: Scatter + ?Sized>(
        &mut self,
        result: &'a mut M,
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
    ///
    /// # Errors
    ///
    /// Those of [`SendOps::compare_swap`].
    pub fn fetch_add<M: Scatter + ?Sized>(
        &mut self,
        result: &'a mut M,
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

    /// Adds a chain the core prepared; the caller lends its context, never linked before, to
    /// the request for `'a`.
    pub(crate) fn chain(&mut self, chain: Chain<'a>) -> Result<&mut Self> {
        let op = self.push(bindings::ib_wr_opcode_IB_WR_RDMA_WRITE, List::Chain)?;
        op.chain = Some(chain);
        Ok(self)
    }

    /// Invalidate `mr`'s rkey locally (`IB_WR_LOCAL_INV`): remote access with it fails once
    /// this operation has executed. The MR counts as unregistered only once the request has
    /// completed successfully: flushed (its QP stopped first) or failed, the operation may not
    /// have run, and the MR stays registered ([`Region::is_registered`]); meanwhile it is
    /// neither advertised ([`Mr::remote`]) nor registered again.
    ///
    /// # Errors
    ///
    /// `EINVAL` for an MR that is not registered (never, or invalidated already), whose
    /// invalidation is under way, or of another PD than the QP's; or when the request has
    /// [`MAX_OPS`] operations, or [`MAX_INVALIDATIONS`] invalidations, already.
    pub fn local_inv<R: Region + ?Sized>(&mut self, mr: &'a R) -> Result<&mut Self> {
        let keys = mr.keys();
        self.check_invalidation(keys)?;
        let op = self.push(bindings::ib_wr_opcode_IB_WR_LOCAL_INV, List::Fixed)?;
        op.wr.send.ex.invalidate_rkey = keys.rkey();
        op.mark = Some(Mark {
            keys,
            reg: false,
            before: None,
        });
        Ok(self)
    }

    /// `EINVAL` unless `keys` may be invalidated by this request: registered, no invalidation
    /// under way, of the QP's PD, and room for one more invalidation.
    fn check_invalidation(&self, keys: &Keys) -> Result {
        self.pd.check(keys.pd())?;
        let n = self
            .ops
            .as_slice()
            .iter()
            .filter(|op| op.mark.is_some_and(|m| !m.reg))
            .count();
        if keys.state() != State::Registered || n >= MAX_INVALIDATIONS {
            return Err(EINVAL);
        }
        Ok(())
    }

    /// RDMA READ from `remote` into all of `mr`'s memory, then invalidate `mr`
    /// (`IB_WR_RDMA_READ_WITH_INV`). Only iWARP devices have it (soft-RoCE takes the opcode
    /// but does not invalidate).
    ///
    /// The MR counts as unregistered once the request completed successfully, as for
    /// [`SendOps::local_inv`].
    ///
    /// # Errors
    ///
    /// `EINVAL` for an MR that [`SendOps::local_inv`] refuses, or when the request is full
    /// ([`MAX_OPS`] operations, [`MAX_SGE`] pieces). Posting on a port that is not iWARP fails
    /// with `EOPNOTSUPP` ([`Qp::post_send`]).
    ///
    /// [`Qp::post_send`]: crate::rdma::qp::Qp::post_send
    pub fn read_inv(&mut self, mr: &'a mut Mr, remote: Remote) -> Result<&mut Self> {
        let mr: &'a Mr = mr;
        self.check_invalidation(mr.keys())?;
        let length = u32::try_from(mr.len()).map_err(|_| EINVAL)?;
        // The sink is named through the MR itself: its I/O virtual address and lkey.
        let sink = bindings::ib_sge {
            addr: mr.iova(),
            length,
            lkey: mr.lkey(),
        };
        let op = self.push_sge(bindings::ib_wr_opcode_IB_WR_RDMA_READ_WITH_INV, sink)?;
        op.wr.send.ex.invalidate_rkey = mr.lkey();
        set_remote(&mut op.wr, remote);
        op.mark = Some(Mark {
            keys: mr.keys(),
            reg: false,
            before: None,
        });
        self.iwarp_only = true;
        Ok(self)
    }

    /// Registers `mr` (an [`Mr`] mapped with [`Mr::map`] or [`Mr::map_sg`], a [`LentMr`] with
    /// pages lent) for `access` under its current keys (`IB_WR_REG_MR`). Local write access is
    /// always included: the device needs it for remote writes. The MR counts as registered
    /// from the post on (whatever the completion says: once posted, it may have run).
    ///
    /// A registration never reuses the rkey of the one before it: a peer that kept the old
    /// rkey, or a receive completion that revoked it, would reach the new one.
    ///
    /// # Errors
    ///
    /// - `EINVAL` if `mr` maps nothing, is on another PD than the QP's, or `access` lets the peer
    ///   write pages their owner only lent for reading; if its rkey is that of its latest
    ///   registration ([`Region::bump_key`] first); or when the request has [`MAX_OPS`]
    ///   operations already.
    /// - `EBUSY` while the MR is still registered, or an invalidation of it is under way:
    ///   invalidate it first (locally, or by the peer) and wait for that to complete, then
    ///   bump its key.
    ///
    /// [`LentMr`]: super::super::mr::LentMr
    pub fn reg_mr<R: Region + ?Sized>(&mut self, mr: &'a R, access: Access) -> Result<&mut Self> {
        let keys = mr.keys();
        if !mr.is_mapped() || !mr.allows(access) {
            return Err(EINVAL);
        }
        if keys.is_registered() {
            return Err(EBUSY);
        }
        if keys.rkey_used() {
            return Err(EINVAL);
        }
        self.pd.check(keys.pd())?;
        let op = self.push(bindings::ib_wr_opcode_IB_WR_REG_MR, List::Fixed)?;
        op.wr.reg.mr = keys.as_raw();
        op.wr.reg.key = keys.rkey();
        op.wr.reg.access = (access | Access::LOCAL_WRITE).bits() as i32;
        op.mark = Some(Mark {
            keys,
            reg: true,
            before: None,
        });
        Ok(self)
    }

    /// Gives the MRs the request registers or invalidates their new state, keeping the old
    /// one for [`SendOps::revert`], and records the invalidated ones in `settle`, for the
    /// request's completion to settle. Called before posting: once the device has the
    /// request, a registration may run and its invalidation be seen at any moment.
    pub(crate) fn apply(&mut self, settle: &mut Settle) {
        let marks = self
            .ops
            .as_mut_slice()
            .iter_mut()
            .filter_map(|op| op.mark.as_mut());
        for m in marks {
            m.before = Some(if m.reg {
                m.keys.begin_registration()
            } else {
                // Room for each was checked when the operation was added.
                settle.add(m.keys);
                m.keys.begin_invalidation()
            });
        }
    }

    /// Undoes [`SendOps::apply`]: the device did not take the request.
    pub(crate) fn revert(&self) {
        let marks = self.ops.as_slice().iter().rev().filter_map(|op| op.mark);
        for m in marks {
            if let Some(before) = m.before {
                m.keys.revert(before);
            }
        }
    }

    /// Sets and clears send flags of the last operation added: `EINVAL` when there is none, or
    /// when it is a chain, whose work requests are the core's (the operation in the list only
    /// holds its place, and its flags would never reach the device).
    fn flag(&mut self, set: i32, clear: i32) -> Result<&mut Self> {
        let op = self.ops.last_mut().ok_or(EINVAL)?;
        if op.list == List::Chain {
            return Err(EINVAL);
        }
        // SAFETY: `send` is the common prefix of every variant.
        unsafe {
            op.wr.send.send_flags = (op.wr.send.send_flags | set) & !clear;
        }
        Ok(self)
    }

    /// Marks the last operation added as not generating a completion on success (all but the
    /// last operation of a request are unsignaled anyway; the last is always signaled).
    ///
    /// # Errors
    ///
    /// `EINVAL` before any operation, or just after [`SendOps::rw`]: an R/W context's work
    /// requests are the core's, and all but the request's last are unsignaled.
    pub fn unsignaled(&mut self) -> Result<&mut Self> {
        self.flag(0, bindings::ib_send_flags_IB_SEND_SIGNALED)
    }

    /// Makes the last operation added wait for earlier RDMA READs and atomics to complete.
    ///
    /// # Errors
    ///
    /// `EINVAL` before any operation, or just after [`SendOps::rw`], whose work requests are
    /// the core's: fence the operation after it instead (a SEND that answers with a READ's
    /// data).
    pub fn fence(&mut self) -> Result<&mut Self> {
        self.flag(bindings::ib_send_flags_IB_SEND_FENCE, 0)
    }

    /// Asks the receiver's CQ to raise a solicited event for the last operation added.
    ///
    /// # Errors
    ///
    /// `EINVAL` before any operation, or just after [`SendOps::rw`], whose work requests are
    /// the core's RDMA READs and WRITEs (which consume no receive, so raise no event).
    pub fn solicited(&mut self) -> Result<&mut Self> {
        self.flag(bindings::ib_send_flags_IB_SEND_SOLICITED, 0)
    }

    /// The send queue entries the operations take: one each, and what each chain needs.
    pub(crate) fn wqes(&self) -> u32 {
        self.ops
            .as_slice()
            .iter()
            .map(|op| op.chain.map_or(1, |c| c.wqes))
            .sum()
    }

    /// `EINVAL` unless the operations fit `qp`: at least one, inline sends within its
    /// `max_inline`, lists within its `send_sge`, UD sends on UD and RDMA or atomics on RC only,
    /// chains prepared for this very QP; `EOPNOTSUPP` for an iWARP operation on another port.
    pub(crate) fn check(&self, qp: &QpInner) -> Result {
        if self.iwarp_only && !qp.pd().device().is_iwarp(qp.port) {
            return Err(EOPNOTSUPP);
        }
        let ud = qp.qp_type == QpType::Ud;
        let fits = |op: &Op<'_>| {
            op.chain.map_or(true, |c| c.qp == qp.ptr)
                && op.inline_len <= qp.caps.max_inline
                && op.count <= qp.caps.send_sge as usize
                && op.ud == ud
        };
        if !self.ops.is_empty() && self.ops.as_slice().iter().all(fits) {
            Ok(())
        } else {
            Err(EINVAL)
        }
    }

    /// Links the operations into a list whose last entry carries `cqe`, and the others
    /// `failures` (which the core calls with their errors only); returns its head.
    ///
    /// `self` must not move until the list has been posted, and the contexts of its chains
    /// must be lent to the request being posted (as [`SendOps::chain`] requires). Each chain's
    /// context counts as posted from here on, whether the driver then takes the list or not.
    pub(crate) fn link(
        &mut self,
        cqe: *mut bindings::ib_cqe,
        failures: *mut bindings::ib_cqe,
    ) -> *const bindings::ib_send_wr {
        let n = self.ops.len();
        let base = self.sges.as_mut_ptr();
        // Back to front: each operation continues with the head of the one after it.
        let mut next: *mut bindings::ib_send_wr = core::ptr::null_mut();
        for (i, op) in self.ops.as_mut_slice().iter_mut().enumerate().rev() {
            if let Some(c) = op.chain {
                let end = if next.is_null() {
                    cqe
                } else {
                    core::ptr::null_mut()
                };
                // The links set below stay in the context: it is never linked again.
                c.posted.store(true, Ordering::Release);
                // SAFETY: `c.ctx` is an initialised context for `c.qp` on `c.port`, lent to
                // this request and never linked before ([`SendOps::chain`]), so its last
                // request has no `next`, `wr_cqe` or signaled flag yet: with a null `next` it
                // is now signaled with `cqe`, otherwise it continues with `next` (and stays
                // unsignaled, without a `wr_cqe`).
                next = unsafe { bindings::rdma_rw_ctx_wrs(c.ctx, c.qp, c.port, end, next) };
                continue;
            }
            let sge = if op.count > 0 {
                base.wrapping_add(op.first)
            } else {
                core::ptr::null_mut()
            };
            // SAFETY: `send` is the common prefix of every variant.
            let wr = unsafe { &mut op.wr.send };
            wr.next = next;
            wr.sg_list = sge;
            wr.num_sge = op.count as i32;
            let signaled = bindings::ib_send_flags_IB_SEND_SIGNALED;
            if i + 1 == n {
                wr.__bindgen_anon_1.wr_cqe = cqe;
                wr.send_flags |= signaled;
            } else {
                // Unsignaled operations report only errors, which `failures` keeps for the
                // request's completion, through its last operation.
                wr.__bindgen_anon_1.wr_cqe = failures;
                wr.send_flags &= !signaled;
            }
            next = wr;
        }
        next
    }
}

/// Sets the remote address of an RDMA operation.
fn set_remote(wr: &mut RawSendWr, remote: Remote) {
    wr.rdma.remote_addr = remote.addr;
    wr.rdma.rkey = remote.rkey;
}
