// SPDX-License-Identifier: GPL-2.0

//! What a device can do (`struct ib_device_attr`): the limits a ULP sizes itself by.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use crate::bindings;
use core::fmt;

/// A device's capabilities (`struct ib_device_attr`), as returned by [`Device::attrs`](super::Device::attrs).
pub struct DeviceAttr<'a>(pub(super) &'a bindings::ib_device_attr);

/// Converts a C `int` limit to `u32`, treating a negative value as "none".
fn limit(v: i32) -> u32 {
    u32::try_from(v).unwrap_or(0)
}

impl DeviceAttr<'_> {
    /// Largest number of outstanding work requests on one queue of a QP.
    pub fn max_qp_wr(&self) -> u32 {
        limit(self.0.max_qp_wr)
    }

    /// Largest number of scatter/gather entries of a send work request.
    pub fn max_send_sge(&self) -> u32 {
        limit(self.0.max_send_sge)
    }

    /// Largest number of scatter/gather entries of a receive work request.
    pub fn max_recv_sge(&self) -> u32 {
        limit(self.0.max_recv_sge)
    }

    /// Largest number of entries of a CQ.
    pub fn max_cqe(&self) -> u32 {
        limit(self.0.max_cqe)
    }

    /// Largest number of outstanding RDMA READs and atomics a QP can be the target of.
    pub fn max_qp_rd_atom(&self) -> u32 {
        limit(self.0.max_qp_rd_atom)
    }

    /// Largest number of outstanding RDMA READs and atomics a QP can initiate.
    pub fn max_qp_init_rd_atom(&self) -> u32 {
        limit(self.0.max_qp_init_rd_atom)
    }

    /// Whether atomic operations are supported (`atomic_cap != IB_ATOMIC_NONE`).
    pub fn has_atomics(&self) -> bool {
        self.0.atomic_cap != bindings::ib_atomic_cap_IB_ATOMIC_NONE
    }

    /// Largest number of pages a fast-registered memory region can map.
    pub fn max_fast_reg_page_list_len(&self) -> u32 {
        self.0.max_fast_reg_page_list_len
    }

    /// Largest number of memory regions.
    pub fn max_mr(&self) -> u32 {
        limit(self.0.max_mr)
    }

    /// Largest number of work requests of a shared receive queue.
    pub fn max_srq_wr(&self) -> u32 {
        limit(self.0.max_srq_wr)
    }

    /// Largest number of scatter/gather entries of a shared receive queue's work requests.
    pub fn max_srq_sge(&self) -> u32 {
        limit(self.0.max_srq_sge)
    }

    /// Largest message size of a memory region.
    pub fn max_mr_size(&self) -> u64 {
        self.0.max_mr_size
    }

    /// Largest number of QPs.
    pub fn max_qp(&self) -> u32 {
        limit(self.0.max_qp)
    }

    /// Largest number of CQs.
    pub fn max_cq(&self) -> u32 {
        limit(self.0.max_cq)
    }

    /// Largest number of PDs.
    pub fn max_pd(&self) -> u32 {
        limit(self.0.max_pd)
    }

    /// Largest number of address handles.
    pub fn max_ah(&self) -> u32 {
        limit(self.0.max_ah)
    }

    /// Largest number of shared receive queues.
    pub fn max_srq(&self) -> u32 {
        limit(self.0.max_srq)
    }

    /// Largest number of scatter/gather entries of an RDMA READ.
    pub fn max_sge_rd(&self) -> u32 {
        limit(self.0.max_sge_rd)
    }

    /// The page sizes the device can map, as a bit mask (bit `n`: pages of `2^n` bytes).
    pub fn page_size_cap(&self) -> u64 {
        self.0.page_size_cap
    }

    /// How atomic operations behave (`atomic_cap`).
    pub fn atomic_cap(&self) -> AtomicCap {
        match self.0.atomic_cap {
            bindings::ib_atomic_cap_IB_ATOMIC_HCA => AtomicCap::Hca,
            bindings::ib_atomic_cap_IB_ATOMIC_GLOB => AtomicCap::Global,
            _ => AtomicCap::None,
        }
    }

    /// Largest number of RDMA READs and atomics outstanding towards the device as a whole.
    pub fn max_res_rd_atom(&self) -> u32 {
        limit(self.0.max_res_rd_atom)
    }

    /// Largest number of multicast groups.
    pub fn max_mcast_grp(&self) -> u32 {
        limit(self.0.max_mcast_grp)
    }

    /// Largest number of QPs attached to one multicast group.
    pub fn max_mcast_qp_attach(&self) -> u32 {
        limit(self.0.max_mcast_qp_attach)
    }

    /// Number of entries of each port's P_Key table.
    pub fn max_pkeys(&self) -> u32 {
        u32::from(self.0.max_pkeys)
    }
}

/// How a device performs atomic operations (`enum ib_atomic_cap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicCap {
    /// No atomics.
    None,
    /// Atomic among the device's own QPs only.
    Hca,
    /// Atomic also against the CPU and other devices.
    Global,
}

impl fmt::Debug for DeviceAttr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceAttr")
            .field("max_qp_wr", &self.max_qp_wr())
            .field("max_send_sge", &self.max_send_sge())
            .field("max_cqe", &self.max_cqe())
            .field("max_qp_rd_atom", &self.max_qp_rd_atom())
            .field("atomic_cap", &self.atomic_cap())
            .field("max_sge_rd", &self.max_sge_rd())
            .field(
                "max_fast_reg_page_list_len",
                &self.max_fast_reg_page_list_len(),
            )
            .finish()
    }
}
