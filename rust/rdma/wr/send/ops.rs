// SPDX-License-Identifier: GPL-2.0

//! The operations a [`SendOps`] adds: SENDs (plain, with immediate data, with invalidation,
//! inline, UD), RDMA WRITE and READ, atomics, and the memory pieces added to the last one.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use super::{set_remote, List, RawSendWr, SendOps};
use crate::{
    bindings,
    error::{code::*, Result},
    rdma::{
        ah::Ah,
        dma::{DeviceReads, DmaBuf, Gather, Mapped, Scatter},
        mr::Remote,
        wr::add_sges,
    },
};
use core::ops::Range;

impl<'a> SendOps<'a> {
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
    /// [`MAX_OPS`]: crate::rdma::wr::MAX_OPS
    /// [`MAX_SGE`]: crate::rdma::dma::MAX_SGE
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
    /// the QP is checked when posting ([`Qp::post_send`]); an iWARP port refuses immediate
    /// data there (`EOPNOTSUPP`: iWARP has none).
    ///
    /// [`Qp::post_send`]: crate::rdma::qp::Qp::post_send
    /// [`MAX_OPS`]: crate::rdma::wr::MAX_OPS
    /// [`MAX_SGE`]: crate::rdma::dma::MAX_SGE
    pub fn send_imm<M: Gather + ?Sized>(
        &mut self,
        src: &'a M,
        range: Range<usize>,
        imm: u32,
    ) -> Result<&mut Self> {
        let wr = self.gathering(bindings::ib_wr_opcode_IB_WR_SEND_WITH_IMM, src, range)?;
        wr.send.ex.imm_data = imm.to_be();
        self.imm = true;
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
    /// [`MAX_SGE`]: crate::rdma::dma::MAX_SGE
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
    /// [`MAX_SGE`]: crate::rdma::dma::MAX_SGE
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
    /// [`MAX_OPS`]: crate::rdma::wr::MAX_OPS
    /// [`MAX_SGE`]: crate::rdma::dma::MAX_SGE
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
    /// [`MAX_OPS`]: crate::rdma::wr::MAX_OPS
    /// [`MAX_SGE`]: crate::rdma::dma::MAX_SGE
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
    /// [`MAX_OPS`]: crate::rdma::wr::MAX_OPS
    /// [`MAX_SGE`]: crate::rdma::dma::MAX_SGE
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
        // No UD QP exists on iWARP, but the rule is the opcode's.
        self.imm = true;
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
    /// [`MAX_OPS`]: crate::rdma::wr::MAX_OPS
    /// [`MAX_SGE`]: crate::rdma::dma::MAX_SGE
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
    /// [`MAX_OPS`]: crate::rdma::wr::MAX_OPS
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
    /// Those of [`SendOps::write`]; an iWARP port refuses immediate data when posting
    /// (`EOPNOTSUPP`: iWARP has none).
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
        self.imm = true;
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
    /// [`MAX_OPS`]: crate::rdma::wr::MAX_OPS
    /// [`MAX_SGE`]: crate::rdma::dma::MAX_SGE
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
        self.atomics = true;
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
    /// ([`Qp::post_send`]), and so does a device without atomics (iWARP's), with `EOPNOTSUPP`.
    ///
    /// [`Qp::post_send`]: crate::rdma::qp::Qp::post_send
    /// [`MAX_OPS`]: crate::rdma::wr::MAX_OPS
    /// [`MAX_SGE`]: crate::rdma::dma::MAX_SGE
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
}
