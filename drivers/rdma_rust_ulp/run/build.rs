// SPDX-License-Identifier: GPL-2.0

//! Setting a run up on a device: its checks against the device, its QPs (connected to each
//! other, or ready for a peer), buffers and RDMA target.

use super::{bad, check_ud_size, register, traffic::pattern, Res, Run, QKEY};
use crate::ctl::{Op, Role, Spec};
use kernel::prelude::*;
use kernel::rdma::{
    ah::Ah,
    device::Device,
    dma::{DmaSg, MAX_BUF, MAX_SG_PAGES},
    mr::{Access, Mr},
    pd::Pd,
    qp::{Init, Qp, QpCaps, QpType, RcParams, Rts},
};
use kernel::sync::Arc;

/// The RDMA port runs use.
const PORT: u32 = 1;
const PAGE: usize = 4096;

impl Run {
    /// Builds a run on `dev` (process context): checks `spec` against the device, allocates,
    /// maps and registers everything. Nothing is posted yet ([`Run::go`]).
    pub(crate) fn build(dev: &Device, spec: &Spec, id: u32) -> Result<Arc<Run>> {
        let attrs = dev.attrs();
        let port = dev.query_port(PORT)?;
        let depth = spec.depth;
        let rx_depth = if spec.op.uses_recv() { 2 * depth } else { 1 };
        if rx_depth >= attrs.max_qp_wr() || depth >= attrs.max_qp_wr() {
            return Err(bad(format_args!(
                "depth={} over the device's max_qp_wr {}",
                depth,
                attrs.max_qp_wr()
            )));
        }
        let max = (port.max_msg_sz() as usize).min(MAX_BUF);
        if spec.size > max {
            return Err(bad(format_args!(
                "size={} over the limit {}",
                spec.size, max
            )));
        }
        if spec.mode == QpType::Ud {
            check_ud_size(spec, &port)?;
        }
        let rdma = matches!(spec.op, Op::Write | Op::Read);
        let target_pages = (depth as usize * spec.size).div_ceil(PAGE);
        if rdma
            && (target_pages > MAX_SG_PAGES
                || target_pages > attrs.max_fast_reg_page_list_len() as usize)
        {
            return Err(bad(format_args!(
                "depth x size = {} bytes of RDMA target over the limit {}",
                depth as usize * spec.size,
                MAX_SG_PAGES * PAGE
            )));
        }
        let pd = Pd::new(dev)?;
        let cq = spec.new_cq(dev, depth + rx_depth + 8)?;
        let tx_caps = QpCaps {
            send_depth: depth,
            recv_depth: 1,
            ..QpCaps::default()
        };
        let rx_caps = QpCaps {
            send_depth: 1,
            recv_depth: rx_depth,
            ..QpCaps::default()
        };
        let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
        let p = RcParams::default();
        let rc = |caps: &QpCaps| -> Result<Qp<Init>> {
            Qp::new(&pd, QpType::Rc, &cq, &cq, caps)?.to_init(PORT, access)
        };
        let ud = |caps: &QpCaps| -> Result<Qp<Rts>> {
            Qp::new(&pd, QpType::Ud, &cq, &cq, caps)?
                .to_init_ud(PORT, QKEY)?
                .ready_ud()
        };
        let arc = |q: Qp<Rts>| Arc::new(q, GFP_KERNEL);
        let (mut tx_qp, mut rx_qp, mut unconnected, mut ah, mut endpoint) =
            (None, None, None, None, None);
        match (spec.mode, spec.role, spec.peer) {
            (QpType::Rc, Role::Loopback, _) => {
                let (a, b) = (rc(&tx_caps)?, rc(&rx_caps)?);
                let (ea, eb) = (a.endpoint()?, b.endpoint()?);
                tx_qp = Some(arc(a.connect(&eb, &p)?)?);
                rx_qp = Some(arc(b.connect(&ea, &p)?)?);
            }
            (QpType::Ud, Role::Loopback, _) => {
                let (a, b) = (ud(&tx_caps)?, ud(&rx_caps)?);
                ah = Some(Ah::new(&pd, PORT, &b.endpoint()?.gid)?);
                tx_qp = Some(arc(a)?);
                rx_qp = Some(arc(b)?);
            }
            (QpType::Rc, Role::Server, _) => {
                let b = rc(&rx_caps)?;
                endpoint = Some(b.endpoint()?);
                unconnected = Some(b);
            }
            (QpType::Ud, Role::Server, _) => {
                let b = ud(&rx_caps)?;
                endpoint = Some(b.endpoint()?);
                rx_qp = Some(arc(b)?);
            }
            (QpType::Rc, Role::Client, Some(peer)) => {
                let a = rc(&tx_caps)?;
                endpoint = Some(a.endpoint()?);
                tx_qp = Some(arc(a.connect(&peer, &p)?)?);
            }
            (QpType::Ud, Role::Client, Some(peer)) => {
                let a = ud(&tx_caps)?;
                endpoint = Some(a.endpoint()?);
                ah = Some(Ah::new(&pd, PORT, &peer.gid)?);
                tx_qp = Some(arc(a)?);
            }
            (_, Role::Client, None) => return Err(EINVAL),
        }
        let target = if rdma {
            let mut sg = DmaSg::new(&pd, target_pages)?;
            if spec.op == Op::Read {
                // Slot k holds message k: what every READ of slot k must return.
                let mut chunk = KVec::from_elem(0u8, spec.size, GFP_KERNEL)?;
                for k in 0..depth as usize {
                    for (i, b) in chunk.iter_mut().enumerate() {
                        *b = pattern(k as u64, i);
                    }
                    sg.write(k * spec.size, &chunk)?;
                }
            }
            let mut mr = Mr::new(&pd, target_pages as u32)?;
            mr.map_sg(sg).map_err(|(e, _)| e)?;
            let qp = rx_qp.as_ref().ok_or(EINVAL)?;
            Some(Arc::new(register(qp, &cq, mr)?, GFP_KERNEL)?)
        } else {
            None
        };
        let res = Res {
            tx_qp,
            rx_qp,
            unconnected,
            target,
            ah,
            ..Res::new(pd, cq)
        };
        Self::new(spec, id, endpoint, res)
    }
}
