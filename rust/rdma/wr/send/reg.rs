// SPDX-License-Identifier: GPL-2.0

//! The operations of a [`SendOps`] that register or invalidate an MR (`IB_WR_REG_MR`,
//! `IB_WR_LOCAL_INV`, `IB_WR_RDMA_READ_WITH_INV`), and the MRs' state kept in step with the
//! post ([`SendOps::apply`], [`SendOps::revert`]).
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use super::{set_remote, List, Mark, SendOps};
use crate::{
    bindings,
    error::{code::*, Result},
    rdma::{
        mr::{Access, Keys, Mr, Region, Remote, State},
        wr::{Settle, MAX_INVALIDATIONS},
    },
};

impl<'a> SendOps<'a> {
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
    ///
    /// [`MAX_OPS`]: crate::rdma::wr::MAX_OPS
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
    /// [`MAX_OPS`]: crate::rdma::wr::MAX_OPS
    /// [`MAX_SGE`]: crate::rdma::dma::MAX_SGE
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
    /// [`LentMr`]: crate::rdma::mr::LentMr
    /// [`MAX_OPS`]: crate::rdma::wr::MAX_OPS
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
}
