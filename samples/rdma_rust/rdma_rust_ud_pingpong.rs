// SPDX-License-Identifier: GPL-2.0

//! Sample: a UD ping-pong between two datagram QPs of each RDMA device.
//!
//! Unreliable datagram (UD) QPs are not connected: every send names its destination with an
//! address handle (where: the peer's GID, which on RoCE is an IP address), a QP number (to
//! whom) and a Q_Key (the password both QPs share). The pinger knows the ponger's GID and QP
//! number; the ponger knows nobody and answers each datagram with an address handle made from
//! the datagram itself: the Global Route Header that the device writes in the first
//! [`GRH_LEN`] bytes of every UD receive buffer, and the source QP number in the completion.
//!
//! The thread of the client's `add` drives it, waiting for each request with
//! [`Waited`]/[`Pending`]: the buffers come back to it only once the device is done with them.

use kernel::c_str;
use kernel::prelude::*;
use kernel::rdma::{
    ah::Ah,
    client::{Client, ClientStorage},
    cq::{Cq, PollContext, Wc},
    device::Device,
    dma::{DmaBuf, ToDevice},
    pd::Pd,
    qp::{Qp, QpCaps, QpType, Rts},
    wr::{Pending, Waited, GRH_LEN},
};
use kernel::sync::Arc;

kernel::module_ib_client! {
    type: UdPingPong,
    name: "rdma_rust_ud_pingpong",
    author: "rdma-rust developers",
    description: "Sample: a UD ping-pong between two datagram QPs on each RDMA device",
    license: "GPL",
}

const PORT: u32 = 1;
const QKEY: u32 = 0x1234_5678;
const ROUNDS: u8 = 16;
const LEN: usize = 64;
const WAIT_MS: u32 = 5000;

/// A UD QP ready to send: Reset, then Init (port and Q_Key), then ready to receive and send.
fn ud_qp(pd: &Arc<Pd>, cq: &Arc<Cq>) -> Result<Qp<Rts>> {
    let caps = QpCaps {
        send_depth: 2,
        recv_depth: 2,
        ..QpCaps::default()
    };
    Qp::new(pd, QpType::Ud, cq, cq, &caps)?
        .to_init_ud(PORT, QKEY)?
        .ready_ud()
}

/// Posts a receive for one datagram: its GRH, then up to `LEN` bytes of payload.
fn recv(qp: &Qp<Rts>) -> Result<Pending<DmaBuf>> {
    let buf = DmaBuf::new(qp.pd(), GRH_LEN + LEN, GFP_KERNEL)?;
    let (wr, pending) = Waited::new(buf, GFP_KERNEL)?;
    qp.post_recv(wr, |w, ops| {
        let n = w.data.len();
        ops.buf(&mut w.data, 0..n)?;
        Ok(())
    })?;
    Ok(pending)
}

/// Sends `msg` to QP `qpn` at `ah` and waits until the device is done with the buffer.
fn send(qp: &Qp<Rts>, ah: &Arc<Ah>, qpn: u32, msg: &[u8]) -> Result {
    let mut v = KVec::with_capacity(msg.len(), GFP_KERNEL)?;
    v.extend_from_slice(msg, GFP_KERNEL)?;
    let buf = DmaBuf::<ToDevice>::from_vec(qp.pd(), v).map_err(|(e, _)| e)?;
    // The request owns the buffer and a reference to the address handle until it completes.
    let (wr, pending) = Waited::new((buf, ah.clone()), GFP_KERNEL)?;
    qp.post_send(wr, |w, ops| {
        let (buf, ah) = &w.data;
        ops.send_ud(buf, 0..buf.len(), ah, qpn, QKEY)?;
        Ok(())
    })?;
    let (_, wc) = pending.wait(WAIT_MS)?;
    ok(&wc)
}

/// Waits for a datagram; returns its buffer (GRH first) and completion.
fn received(pending: Pending<DmaBuf>) -> Result<(DmaBuf, Wc)> {
    let (buf, wc) = pending.wait(WAIT_MS)?;
    ok(&wc)?;
    if wc.byte_len() as usize != GRH_LEN + LEN {
        pr_err!(
            "a datagram of {} bytes, expected {}\n",
            wc.byte_len(),
            GRH_LEN + LEN
        );
        return Err(EIO);
    }
    Ok((buf, wc))
}

fn ok(wc: &Wc) -> Result {
    if wc.is_ok() {
        return Ok(());
    }
    pr_err!("request failed: {:?}\n", wc.status());
    Err(EIO)
}

/// Plays `ROUNDS` rounds; returns how many came back intact.
fn pingpong(dev: &Device) -> Result<u8> {
    let pd = Pd::new(dev)?;
    let cq = Cq::new(dev, 16, 0, PollContext::Softirq)?;
    let (ping, pong) = (ud_qp(&pd, &cq)?, ud_qp(&pd, &cq)?);
    let to_pong = pong.endpoint()?;
    let ah = Ah::new(&pd, PORT, &to_pong.gid)?;
    for round in 0..ROUNDS {
        let msg = [round ^ 0x5a; LEN];
        // Receives first: a datagram that finds no receive posted is dropped, not retried.
        let (pong_rx, ping_rx) = (recv(&pong)?, recv(&ping)?);
        send(&ping, &ah, to_pong.qpn, &msg)?;
        let (mut req, wc) = received(pong_rx)?;
        let (grh, payload) = req.as_slice().split_at(GRH_LEN);
        // The answer goes where the datagram says it came from.
        let back = Ah::from_wc(&pd, PORT, &wc, grh)?;
        send(&pong, &back, wc.src_qp().ok_or(EINVAL)?, payload)?;
        let (mut answer, _) = received(ping_rx)?;
        if answer.as_slice()[GRH_LEN..] != msg[..] {
            pr_err!("round {round}: the answer differs from the question\n");
            return Ok(round);
        }
    }
    Ok(ROUNDS)
    // Dropped in reverse order of creation: QPs (which hold the CQ and PD), then the rest.
}

struct UdPingPong;

impl Client for UdPingPong {
    const NAME: &'static CStr = c_str!("rdma_rust_ud_pingpong");
    type Data = KBox<()>;

    fn storage() -> &'static ClientStorage {
        static STORAGE: ClientStorage = ClientStorage::new();
        &STORAGE
    }

    fn add(dev: &Device) -> Result<KBox<()>> {
        let name = dev.name();
        match pingpong(dev) {
            Ok(n) => pr_info!("{name}: UD ping-pong: {n} of {ROUNDS} rounds of {LEN} bytes\n"),
            // iWARP connects QPs through rdma_cm only: kernel::rdma refuses one made by hand.
            Err(e) if e == EOPNOTSUPP && dev.is_rnic() => {
                pr_info!(
                    "{name}: iWARP refuses a QP made by hand (EOPNOTSUPP): \
                     rdma_cm connects them\n"
                )
            }
            Err(e) => pr_err!("{name}: UD ping-pong failed: {e:?}\n"),
        }
        // Nothing is kept: every object of the exchange was dropped by `pingpong`.
        Ok(KBox::new((), GFP_KERNEL)?)
    }
}
