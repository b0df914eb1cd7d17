// SPDX-License-Identifier: GPL-2.0

//! The RDMA target of a run: one slot of `size` bytes for each message in flight, over as many
//! memory regions as that takes.
//!
//! One fast-registered MR maps at most [`MAX_SG_PAGES`] pages (and at most the device's
//! `max_fast_reg_page_list_len`), so deep queues of large RDMA WRITEs or READs need several:
//! slot `k` is slot `k % per_mr` of MR `k / per_mr`. Each slot is named by one request at a
//! time, so a validated WRITE can be checked in its slot when it completes.

use super::{bad, payload::fill_pattern, register};
use crate::ctl::{Op, Spec};
use kernel::prelude::*;
use kernel::rdma::{
    cq::Cq,
    device::Device,
    dma::{DmaSg, MAX_SG_PAGES},
    mr::{Mr, Remote},
    pd::Pd,
    qp::{Qp, Rts},
};
use kernel::sync::Arc;

const PAGE: usize = 4096;
/// The most memory one run's target may take.
pub(crate) const MAX_TARGET: usize = 64 << 20;

pub(crate) struct Target {
    mrs: KVec<Mr>,
    /// Slots in each MR.
    per_mr: usize,
    size: usize,
}

/// The most bytes one MR of a target maps on `dev`.
pub(super) fn mr_bytes(dev: &Device) -> usize {
    (dev.attrs().max_fast_reg_page_list_len() as usize).min(MAX_SG_PAGES) * PAGE
}

impl Target {
    /// The target of a run of `spec` with `slots` slots, registered through `qp` (waiting on
    /// `cq`); an RDMA READ's holds message `k` in slot `k`.
    pub(super) fn for_run(spec: &Spec, qp: &Qp<Rts>, cq: &Cq, slots: usize) -> Result<Self> {
        let mr_bytes = mr_bytes(qp.pd().device());
        let fill = spec.op == Op::Read;
        Self::new(qp.pd(), qp, cq, slots, spec.size, mr_bytes, fill)
    }

    /// Allocates, maps and registers (through `qp`, waiting on `cq`) a target of `slots` slots
    /// of `size` bytes, in MRs of at most `mr_bytes` each. With `fill`, slot `k` holds message
    /// `k` (what an RDMA READ of it must return). Process context.
    fn new(
        pd: &Arc<Pd>,
        qp: &Qp<Rts>,
        cq: &Cq,
        slots: usize,
        size: usize,
        mr_bytes: usize,
        fill: bool,
    ) -> Result<Self> {
        let per_mr = mr_bytes.checked_div(size).unwrap_or(0);
        if per_mr == 0 {
            return Err(bad(format_args!(
                "size={size} over the largest RDMA target one MR maps ({mr_bytes})"
            )));
        }
        let total = slots.checked_mul(size).ok_or(EINVAL)?;
        if total > MAX_TARGET {
            return Err(bad(format_args!(
                "depth x size = {total} bytes of RDMA target over the limit {MAX_TARGET}"
            )));
        }
        let mut mrs = KVec::new();
        let mut chunk = if fill {
            KVec::from_elem(0u8, size, GFP_KERNEL)?
        } else {
            KVec::new()
        };
        let mut first = 0;
        while first < slots {
            let n = per_mr.min(slots - first);
            let pages = (n * size).div_ceil(PAGE);
            let mut sg = DmaSg::new(pd, pages)?;
            if fill {
                for k in 0..n {
                    fill_pattern(&mut chunk, (first + k) as u64);
                    sg.write(k * size, &chunk)?;
                }
            }
            let mut mr = Mr::new(pd, pages as u32)?;
            mr.map_sg(sg).map_err(|(e, _)| e)?;
            mrs.push(register(qp, cq, mr)?, GFP_KERNEL)?;
            first += n;
        }
        Ok(Self { mrs, per_mr, size })
    }

    /// Its size in bytes, when it is one MR (what a peer can be given: one address and rkey).
    pub(super) fn single_len(&self) -> Option<usize> {
        (self.mrs.len() == 1).then(|| self.mrs.first().map_or(0, |m| m.len()))
    }

    /// The MR that holds slot `k`, and the slot's offset in it.
    pub(super) fn slot(&self, k: usize) -> Option<(&Mr, usize)> {
        let mr = self.mrs.get(k.checked_div(self.per_mr)?)?;
        Some((mr, k.checked_rem(self.per_mr)? * self.size))
    }

    /// The remote address of slot `k`, for the peer's RDMA operations.
    pub(super) fn remote(&self, k: usize) -> Result<Remote> {
        let (mr, off) = self.slot(k).ok_or(EINVAL)?;
        Ok(mr.remote()?.offset(off as u64))
    }
}
