// SPDX-License-Identifier: GPL-2.0

//! Setting a run up on a device: its checks against the device, its QPs (connected to each
//! other, or ready for a peer), buffers and RDMA target.

use super::{bad, check_ud_size, rc_params, target::mr_bytes, Res, Run, Target, PP_RECEIVES, QKEY};
use crate::ctl::{Role, Spec};
use kernel::prelude::*;
use kernel::rdma::{
    ah::Ah,
    device::Device,
    dma::MAX_BUF,
    mr::Access,
    pd::Pd,
    qp::{Init, Qp, QpCaps, QpType, Rts},
};
use kernel::sync::Arc;

/// The RDMA port runs use.
const PORT: u32 = 1;

impl Run {
    /// Builds a run on `dev` (process context): checks `spec` against the device, allocates,
    /// maps and registers everything. Nothing is posted yet ([`Run::go`]).
    pub(crate) fn build(dev: &Device, spec: &Spec, id: u32) -> Result<Arc<Run>> {
        let attrs = dev.attrs();
        let port = dev.query_port(PORT)?;
        let depth = spec.depth;
        let rx_depth = spec.receives();
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
            if dev.is_rnic() {
                pr_err!("start: {}: iWARP has no UD (mode=rc)\n", dev.name());
                return Err(EOPNOTSUPP);
            }
            check_ud_size(spec, &port)?;
        }
        let rdma = spec.op.is_rdma();
        // A server's target goes to its peer as one address and rkey: one MR.
        if rdma && spec.role == Role::Server && depth as usize * spec.size > mr_bytes(dev) {
            return Err(bad(format_args!(
                "role=server: depth x size = {} bytes of RDMA target over one MR's {}",
                depth as usize * spec.size,
                mr_bytes(dev)
            )));
        }
        let max_inline = if spec.inline { spec.size as u32 } else { 0 };
        // A ping-pong's QPs both send (two requests each) and receive.
        let (tx_caps, rx_caps) = if spec.pingpong {
            let caps = QpCaps {
                send_depth: 2,
                recv_depth: PP_RECEIVES,
                max_inline,
                ..QpCaps::default()
            };
            (caps, caps)
        } else {
            let tx = QpCaps {
                send_depth: depth,
                recv_depth: 1,
                max_inline,
                ..QpCaps::default()
            };
            let rx = QpCaps {
                send_depth: 1,
                recv_depth: rx_depth,
                ..QpCaps::default()
            };
            (tx, rx)
        };
        let pd = Pd::new(dev)?;
        let entries = tx_caps.send_depth + tx_caps.recv_depth + rx_caps.send_depth;
        let cq = spec.new_cq(dev, entries + rx_caps.recv_depth + 8)?;
        let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
        let p = rc_params(spec);
        let rc = |caps: &QpCaps| -> Result<Qp<Init>> {
            let qp = Qp::new(&pd, QpType::Rc, &cq, &cq, caps).inspect_err(|e| {
                if caps.max_inline > 0 {
                    pr_err!(
                        "start: inline=1: the device refuses {max_inline} bytes inline ({e:?})\n"
                    );
                }
            })?;
            qp.to_init(PORT, access)
        };
        let ud = |caps: &QpCaps| -> Result<Qp<Rts>> {
            Qp::new(&pd, QpType::Ud, &cq, &cq, caps)?
                .to_init_ud(PORT, QKEY)?
                .ready_ud()
        };
        let arc = |q: Qp<Rts>| Arc::new(q, GFP_KERNEL);
        let (mut tx_qp, mut rx_qp, mut unconnected, mut ah, mut endpoint, mut attached) =
            (None, None, None, None, None, None);
        match (spec.mode, spec.role, spec.peer) {
            // iWARP QPs are connected by the connection manager only.
            (QpType::Rc, Role::Loopback, _) if dev.is_rnic() => {
                // Both sides are this run's: each is initiator and responder (the connection
                // manager's parameters are held to the device's limits).
                let rd = p.max_rd_atomic.max(1);
                let (a, b, ids) = super::cm_pair::connect(dev, &pd, &cq, &tx_caps, &rx_caps, rd)?;
                tx_qp = Some(arc(a)?);
                rx_qp = Some(arc(b)?);
                attached = Some(ids);
            }
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
        // An RDMA server registers its target once connected ([`Run::connect`]); a client's
        // is on the peer.
        let target = if rdma && spec.role == Role::Loopback {
            // A slot per message in flight; a ping-pong's two sides WRITE into one each. READ
            // targets hold message k in slot k: what every READ of slot k must return.
            let slots = if spec.pingpong { 2 } else { depth as usize };
            let qp = rx_qp.as_ref().ok_or(EINVAL)?;
            Some(Arc::new(
                Target::for_run(spec, qp, &cq, slots)?,
                GFP_KERNEL,
            )?)
        } else {
            None
        };
        let res = Res {
            tx_qp,
            rx_qp,
            unconnected,
            target,
            ah,
            attached,
            ..Res::new(pd, cq)
        };
        Self::new(spec, id, endpoint, res)
    }
}
