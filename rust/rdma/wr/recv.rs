// SPDX-License-Identifier: GPL-2.0

//! The scatter list of a receive request (`struct ib_recv_wr`).
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use super::{add_sges, FixedVec};
use crate::{
    bindings,
    error::{code::EINVAL, Result},
    rdma::{
        dma::{Scatter, MAX_RECV_SGE},
        pd::{Pd, PdKey},
    },
};
use core::{marker::PhantomData, ops::Range};

/// The scatter list of one receive [`Wr`](super::Wr): where an incoming message is placed.
///
/// The memory is written by the device, so each piece is lent exclusively (`&'a mut`): a
/// buffer cannot be named twice, nor be read by anyone else while the receive is posted.
pub struct RecvOps<'a> {
    pd: PdKey,
    sges: FixedVec<bindings::ib_sge, MAX_RECV_SGE>,
    _p: PhantomData<&'a mut ()>,
}

impl<'a> RecvOps<'a> {
    #[inline]
    pub(crate) fn new(pd: &Pd) -> Self {
        Self {
            pd: PdKey::of(pd),
            sges: FixedVec::new(),
            _p: PhantomData,
        }
    }

    /// Appends `range` of `dst` to the scatter list. For UD the first
    /// [`GRH_LEN`](super::GRH_LEN) bytes of the message are the GRH.
    ///
    /// # Errors
    ///
    /// `EINVAL` for an empty or out-of-bounds range, memory of another PD than the QP's (or
    /// SRQ's), or more than [`MAX_RECV_SGE`] entries. The queue's own limit (`recv_sge`) is
    /// checked when posting.
    pub fn buf<M: Scatter + ?Sized>(
        &mut self,
        dst: &'a mut M,
        range: Range<usize>,
    ) -> Result<&mut Self> {
        add_sges(&*dst, range, self.pd, &mut self.sges)?;
        Ok(self)
    }

    /// Total bytes the scatter list can take.
    pub fn len(&self) -> u64 {
        self.sges
            .as_slice()
            .iter()
            .map(|s| u64::from(s.length))
            .sum()
    }

    /// Whether no memory was added.
    pub fn is_empty(&self) -> bool {
        self.sges.is_empty()
    }

    /// `EINVAL` unless the list has between one and `max_sge` entries (the queue's limit).
    #[inline]
    pub(crate) fn check(&self, max_sge: u32) -> Result {
        let n = self.sges.len();
        if n == 0 || n > max_sge as usize {
            return Err(EINVAL);
        }
        Ok(())
    }

    /// The `ib_recv_wr` of the list, carrying `cqe`; valid while `self` does not move.
    #[inline]
    pub(crate) fn raw(&mut self, cqe: *mut bindings::ib_cqe) -> bindings::ib_recv_wr {
        bindings::ib_recv_wr {
            next: core::ptr::null_mut(),
            __bindgen_anon_1: bindings::ib_recv_wr__bindgen_ty_1 { wr_cqe: cqe },
            sg_list: self.sges.as_mut_ptr(),
            num_sge: self.sges.len() as i32,
        }
    }
}
