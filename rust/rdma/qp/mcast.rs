// SPDX-License-Identifier: GPL-2.0

//! Multicast groups of UD QPs (`ib_attach_mcast`, `ib_detach_mcast`).
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! A UD QP attached to a group gets the datagrams sent to it. The group is joined through the
//! connection manager (`Id::join_multicast`, which on RoCE also joins the IP group so that the
//! netdev takes the packets), which says the group's GID and Q_Key; the QP is attached here.
//! A QP attached to a group cannot be destroyed (the core counts the attachment as a user), so
//! every group still attached is detached when the QP is torn down.

use super::{Qp, QpInner, QpType, State};
use crate::{
    alloc::{flags::GFP_KERNEL, KVec},
    bindings,
    error::{code::*, to_result, Result},
    rdma::{device::Gid, sync::sleepable},
};

/// Most groups one QP may be attached to.
pub const MAX_GROUPS: usize = 8;

impl<S: State> Qp<S> {
    /// Attaches this UD QP to multicast group `mgid` (`ib_attach_mcast`; `mlid` is the group's
    /// LID on InfiniBand, 0 on RoCE). The QP must be ready to receive and use the group's Q_Key.
    /// May sleep.
    ///
    /// # Errors
    ///
    /// - `EINVAL` for an RC QP or a GID that is not a multicast address.
    /// - `EBUSY` for a group the QP is attached to already.
    /// - `ENOSPC` beyond [`MAX_GROUPS`].
    /// - `EAGAIN` in atomic context.
    /// - `ENOMEM` when an allocation fails.
    /// - `EOPNOTSUPP` when the device has no multicast, or what the driver's `attach_mcast`
    ///   returns.
    pub fn attach_mcast(&self, mgid: &Gid, mlid: u16) -> Result {
        sleepable()?;
        let inner = &*self.inner;
        if inner.qp_type != QpType::Ud || !mgid.is_multicast() {
            return Err(EINVAL);
        }
        let mut groups = inner.shared().groups.lock();
        if groups.iter().any(|g| g == &(*mgid, mlid)) {
            return Err(EBUSY);
        }
        if groups.len() >= MAX_GROUPS {
            return Err(ENOSPC);
        }
        groups.reserve(1, GFP_KERNEL)?;
        let mut gid = bindings::ib_gid { raw: mgid.0 };
        // SAFETY: `ptr` is a valid UD QP (invariant) and `gid` lives for the call.
        to_result(unsafe { bindings::ib_attach_mcast(inner.ptr, &mut gid, mlid) })?;
        // Room was reserved above: this cannot fail.
        groups.push((*mgid, mlid), GFP_KERNEL)?;
        Ok(())
    }

    /// Detaches this QP from group `mgid` (`ib_detach_mcast`): datagrams sent to the group no
    /// longer arrive here. May sleep.
    ///
    /// # Errors
    ///
    /// - `EINVAL` for a group the QP is not attached to.
    /// - `EAGAIN` in atomic context.
    /// - Otherwise what the driver's `detach_mcast` returns (the QP then stays attached).
    pub fn detach_mcast(&self, mgid: &Gid, mlid: u16) -> Result {
        sleepable()?;
        let inner = &*self.inner;
        let mut groups = inner.shared().groups.lock();
        let i = groups
            .iter()
            .position(|g| g == &(*mgid, mlid))
            .ok_or(EINVAL)?;
        inner.detach(mgid, mlid)?;
        let last = groups.len() - 1;
        groups.as_mut_slice().swap(i, last);
        // SAFETY: `last < len` elements stay initialised; the pair cut off is `Copy`, so it
        // needs no drop.
        unsafe { groups.set_len(last) };
        Ok(())
    }
}

impl QpInner {
    fn detach(&self, mgid: &Gid, mlid: u16) -> Result {
        let mut gid = bindings::ib_gid { raw: mgid.0 };
        // SAFETY: `ptr` is valid (invariant) and `gid` lives for the call.
        to_result(unsafe { bindings::ib_detach_mcast(self.ptr, &mut gid, mlid) })
    }

    /// Detaches every group still attached: the QP cannot be destroyed before. Sleeps.
    pub(super) fn detach_all(&self) {
        let mut groups = self.shared().groups.lock();
        for (mgid, mlid) in groups.iter() {
            if let Err(e) = self.detach(mgid, *mlid) {
                crate::pr_err!(
                    "kernel::rdma: QP {}: detaching from group {:?} failed: {:?}\n",
                    self.qpn(),
                    mgid,
                    e
                );
            }
        }
        *groups = KVec::new();
    }
}
