// SPDX-License-Identifier: GPL-2.0

//! The operations of a send request (`struct ib_send_wr` and its variants).
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! Here the list of operations, their flags, the chains the core prepares, and what posting
//! needs (checking the list against the QP, linking it); `ops` adds the operations that move
//! data, `reg` those that register or invalidate an MR, and the MRs' state around the post.

use super::{add_sges, FixedVec, MAX_OPS};
use crate::{
    bindings,
    error::{code::*, Result},
    rdma::{
        dma::{Mapped, MAX_SGE},
        mr::{Before, Keys, Remote},
        pd::{Pd, PdKey},
        qp::{QpInner, QpType},
    },
};
use core::{
    marker::PhantomData,
    ops::Range,
    sync::atomic::{AtomicBool, Ordering},
};

mod ops;
mod reg;

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
    /// An atomic operation is in the list.
    atomics: bool,
    /// An operation with immediate data (which iWARP has not) is in the list.
    imm: bool,
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
    #[inline]
    pub(crate) fn new(pd: &Pd) -> Self {
        Self {
            pd: PdKey::of(pd),
            ops: FixedVec::new(),
            sges: FixedVec::new(),
            iwarp_only: false,
            atomics: false,
            imm: false,
            _p: PhantomData,
        }
    }

    /// Starts operation `opcode`, whose list is of kind `list` and empty.
    #[inline]
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
    #[inline]
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

    /// Adds a chain the core prepared; the caller lends its context, never linked before, to
    /// the request for `'a`.
    pub(crate) fn chain(&mut self, chain: Chain<'a>) -> Result<&mut Self> {
        let op = self.push(bindings::ib_wr_opcode_IB_WR_RDMA_WRITE, List::Chain)?;
        op.chain = Some(chain);
        Ok(self)
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
    #[inline]
    pub(crate) fn wqes(&self) -> u32 {
        self.ops
            .as_slice()
            .iter()
            .map(|op| op.chain.map_or(1, |c| c.wqes))
            .sum()
    }

    /// `EINVAL` unless the operations fit `qp`: at least one, inline sends within its
    /// `max_inline`, lists within its `send_sge`, UD sends on UD and RDMA or atomics on RC only,
    /// chains prepared for this very QP; `EOPNOTSUPP` for an iWARP operation on another port,
    /// immediate data on an iWARP port, or an atomic operation on a device without atomics
    /// (iWARP's).
    #[inline]
    pub(crate) fn check(&self, qp: &QpInner) -> Result {
        let iwarp = qp.iwarp;
        if (self.iwarp_only && !iwarp)
            || (self.imm && iwarp)
            || (self.atomics && !qp.pd().device().attrs().has_atomics())
        {
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
