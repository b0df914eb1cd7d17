// SPDX-License-Identifier: GPL-2.0

//! Sample: a storage-style exchange with the core's R/W API and remote invalidation.
//!
//! This is how NVMe-oF, iSER and SRP move a read's data. On each device, QP `ini` (the
//! initiator) registers a buffer in an MR for remote writes and sends a command naming it
//! (address, rkey, length). QP `tgt` (the target) receives the command and answers with one
//! post: an [`RwCtx`] RDMA WRITE of its pages into that buffer, chained with a SEND_WITH_INV
//! of the response that revokes the initiator's rkey. When the initiator's receive completes,
//! the data is in place and its MR no longer grants anyone access: the buffer is the
//! initiator's again without a LOCAL_INV of its own. [`RwCtx`] lets the core choose how to
//! reach the pages (scatter/gather entries, or MRs of the QP's pool on devices that need
//! them) and holds the pages, mapped, until its request completes.

use kernel::c_str;
use kernel::page::PAGE_SIZE;
use kernel::prelude::*;
use kernel::rdma::{
    client::{Client, ClientStorage},
    cq::{Cq, PollContext, Wc},
    device::Device,
    dma::{DmaBuf, DmaSg, ToDevice},
    mr::{Access, Mr, Region, Remote},
    pd::Pd,
    qp::{Qp, QpCaps, QpType, RcParams, Rts},
    rw::RwCtx,
    wr::{Pending, SendOps, Waited},
};
use kernel::sync::Arc;

kernel::module_ib_client! {
    type: RwSample,
    name: "rdma_rust_rw",
    author: "rdma-rust developers",
    description: "Sample: an rdma_rw transfer answered with SEND_WITH_INV",
    license: "GPL",
}

const PAGES: usize = 4;
const LEN: usize = PAGES * PAGE_SIZE;
/// The command: the buffer's address (8 bytes), rkey (4) and length (4), little endian.
const CMD_LEN: usize = 16;
const WAIT_MS: u32 = 5000;

fn byte(i: usize) -> u8 {
    (i % 253) as u8
}

/// Posts a receive of up to `len` bytes.
fn recv(qp: &Qp<Rts>, len: usize) -> Result<Pending<DmaBuf>> {
    let (wr, pending) = Waited::new(DmaBuf::new(qp.pd(), len, GFP_KERNEL)?, GFP_KERNEL)?;
    qp.post_recv(wr, |w, ops| {
        ops.buf(&mut w.data, 0..len)?;
        Ok(())
    })?;
    Ok(pending)
}

/// Posts one send-queue request owning `data` and waits for it; `EIO` if it failed.
fn post<T: Send + 'static>(
    qp: &Qp<Rts>,
    data: T,
    build: impl for<'a> FnOnce(&'a mut T, &mut SendOps<'a>) -> Result,
) -> Result<T> {
    let (wr, pending) = Waited::new(data, GFP_KERNEL)?;
    qp.post_send(wr, |w, ops| build(&mut w.data, ops))?;
    let (data, wc) = pending.wait(WAIT_MS)?;
    ok(&wc, "send")?;
    Ok(data)
}

fn ok(wc: &Wc, what: &str) -> Result {
    if wc.is_ok() {
        return Ok(());
    }
    pr_err!("{what}: {:?}\n", wc.status());
    Err(EIO)
}

fn exchange(dev: &Device) -> Result {
    let pd = Pd::new(dev)?;
    let cq = Cq::new(dev, 64, 0, PollContext::Softirq)?;
    // The target's QP carries R/W contexts: the core sizes its send queue (and MR pool) for
    // them, which is why it needs the port up front.
    let tgt_caps = QpCaps {
        send_depth: 8,
        recv_depth: 1,
        send_sge: 4,
        rdma_ctxs: 1,
        port: 1,
        ..QpCaps::default()
    };
    let ini_caps = QpCaps {
        send_depth: 4,
        recv_depth: 1,
        ..QpCaps::default()
    };
    let tgt = Qp::new(&pd, QpType::Rc, &cq, &cq, &tgt_caps)?.to_init(1, Access::NONE)?;
    let ini = Qp::new(&pd, QpType::Rc, &cq, &cq, &ini_caps)?.to_init(1, Access::REMOTE_WRITE)?;
    let (et, ei) = (tgt.endpoint()?, ini.endpoint()?);
    // An `RwCtx` keeps its QP alive: the target's QP is shared through an `Arc`.
    let tgt: Arc<Qp<Rts>> = Arc::new(tgt.connect(&ei, &RcParams::default())?, GFP_KERNEL)?;
    let ini: Qp<Rts> = ini.connect(&et, &RcParams::default())?;

    // Initiator: register the buffer the data goes to, wait for the answer, send the command.
    let mut mr = Mr::new(&pd, PAGES as u32 + 1)?;
    mr.map(DmaBuf::new(&pd, LEN, GFP_KERNEL)?)
        .map_err(|(e, _)| e)?;
    let mr = post(&ini, mr, |mr, ops| {
        ops.reg_mr(mr, Access::REMOTE_WRITE)?;
        Ok(())
    })?;
    let Remote { addr, rkey } = mr.remote()?;
    let answer = recv(&ini, 64)?;
    let command = recv(&tgt, CMD_LEN)?;
    let mut cmd = KVec::with_capacity(CMD_LEN, GFP_KERNEL)?;
    cmd.extend_from_slice(&addr.to_le_bytes(), GFP_KERNEL)?;
    cmd.extend_from_slice(&rkey.to_le_bytes(), GFP_KERNEL)?;
    cmd.extend_from_slice(&(LEN as u32).to_le_bytes(), GFP_KERNEL)?;
    let cmd = DmaBuf::<ToDevice>::from_vec(&pd, cmd).map_err(|(e, _)| e)?;
    post(&ini, cmd, |cmd, ops| {
        ops.send(cmd, 0..CMD_LEN)?;
        Ok(())
    })?;

    // Target: parse the command (a peer's message: check it), WRITE the data, answer.
    let (mut c, wc) = command.wait(WAIT_MS)?;
    ok(&wc, "command")?;
    let c = c.as_slice();
    let field = |r: core::ops::Range<usize>| c.get(r).ok_or(EINVAL);
    let to = Remote {
        addr: u64::from_le_bytes(field(0..8)?.try_into().map_err(|_| EINVAL)?),
        rkey: u32::from_le_bytes(field(8..12)?.try_into().map_err(|_| EINVAL)?),
    };
    let len = u32::from_le_bytes(field(12..16)?.try_into().map_err(|_| EINVAL)?) as usize;
    if wc.byte_len() as usize != CMD_LEN || len == 0 || len > LEN {
        pr_err!("malformed command: {} bytes, length {len}\n", wc.byte_len());
        return Err(EINVAL);
    }
    let mut data = DmaSg::new(&pd, PAGES)?;
    let mut page = KVec::from_elem(0u8, PAGE_SIZE, GFP_KERNEL)?;
    for p in 0..PAGES {
        page.iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = byte(p * PAGE_SIZE + i));
        data.write(p * PAGE_SIZE, &page)?;
    }
    let rw = RwCtx::<ToDevice>::new(&tgt, data.into_pages(), len, to).map_err(|(e, _)| e)?;
    let resp = DmaBuf::new(&pd, 64, GFP_KERNEL)?;
    post(&tgt, (rw, resp), |(rw, resp), ops| {
        ops.rw(rw)?;
        ops.send_inv(resp, 0..64, to.rkey)?;
        Ok(())
    })?;

    // Initiator: the answer says which rkey is dead; the data is in place.
    let (_, wc) = answer.wait(WAIT_MS)?;
    ok(&wc, "answer")?;
    if wc.invalidated_rkey() != Some(rkey) || !mr.invalidated_by(&wc) || mr.is_registered() {
        pr_err!(
            "rkey {rkey:#x} not invalidated: {:?}\n",
            wc.invalidated_rkey()
        );
        return Err(EIO);
    }
    let mut got = KVec::from_elem(0u8, LEN, GFP_KERNEL)?;
    mr.read(0, &mut got)?;
    if got.iter().enumerate().any(|(i, &x)| x != byte(i)) {
        pr_err!("the data in the initiator's buffer differs\n");
        return Err(EIO);
    }
    Ok(())
}

struct RwSample;

impl Client for RwSample {
    const NAME: &'static CStr = c_str!("rdma_rust_rw");
    type Data = KBox<()>;

    fn storage() -> &'static ClientStorage {
        static STORAGE: ClientStorage = ClientStorage::new();
        &STORAGE
    }

    fn add(dev: &Device) -> Result<KBox<()>> {
        let name = dev.name();
        match exchange(dev) {
            Ok(()) => pr_info!(
                "{name}: rdma_rw: {LEN} bytes written, answered with SEND_WITH_INV, rkey revoked\n"
            ),
            // iWARP connects QPs through rdma_cm only: kernel::rdma refuses one made by hand.
            Err(e) if e == EOPNOTSUPP && dev.is_rnic() => {
                pr_info!(
                    "{name}: iWARP refuses a QP made by hand (EOPNOTSUPP): \
                     rdma_cm connects them\n"
                )
            }
            Err(e) => pr_err!("{name}: rdma_rw exchange failed: {e:?}\n"),
        }
        Ok(KBox::new((), GFP_KERNEL)?)
    }
}
