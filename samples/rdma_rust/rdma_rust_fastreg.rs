// SPDX-License-Identifier: GPL-2.0

//! Sample: RDMA WRITE and READ into a fast-registered memory region, and its invalidation.
//!
//! A peer reaches memory only through a memory region (MR) registered for remote access: the
//! owner maps a buffer into an MR ([`Mr::map`]) and registers it with a REG_MR work request on
//! its QP ("fast registration"), after which the MR's [`Remote`] (address and rkey) is what it
//! hands the peer. Here, on each device, QP `b` exposes 4 KiB that way; QP `a` writes a pattern
//! into it with an RDMA WRITE and reads it back with an RDMA READ, without `b`'s CPU taking
//! part. Then `b` invalidates the rkey (LOCAL_INV) and `a`'s next WRITE with it fails with a
//! remote access error: a peer's access ends when the owner says so. Each request owns what
//! it names (buffer, MR) until its completion hands it back ([`Waited`]).

use kernel::c_str;
use kernel::prelude::*;
use kernel::rdma::{
    client::{Client, ClientStorage},
    cq::{Cq, PollContext, WcStatus},
    device::Device,
    dma::DmaBuf,
    mr::{Access, Mr, Remote},
    pd::Pd,
    qp::{Qp, QpCaps, QpType, RcParams, Rts},
    wr::{SendOps, Waited},
};

kernel::module_ib_client! {
    type: FastReg,
    name: "rdma_rust_fastreg",
    author: "rdma-rust developers",
    description: "Sample: RDMA WRITE and READ into a fast-registered MR",
    license: "GPL",
}

const LEN: usize = 4096;
const WAIT_MS: u32 = 5000;

/// Posts one send-queue request owning `data`, built by `build`, waits for its completion and
/// returns `data` with the completion's status.
fn post<T: Send + 'static>(
    qp: &Qp<Rts>,
    data: T,
    build: impl for<'a> FnOnce(&'a mut T, &mut SendOps<'a>) -> Result,
) -> Result<(T, WcStatus)> {
    let (wr, pending) = Waited::new(data, GFP_KERNEL)?;
    qp.post_send(wr, |w, ops| build(&mut w.data, ops))?;
    let (data, wc) = pending.wait(WAIT_MS)?;
    Ok((data, wc.status()))
}

fn expect(what: &str, got: WcStatus, want: WcStatus) -> Result {
    if got == want {
        return Ok(());
    }
    pr_err!("{what}: {got:?}, expected {want:?}\n");
    Err(EIO)
}

fn pattern(len: usize) -> impl Iterator<Item = u8> {
    (0..len).map(|i| (i % 251) as u8)
}

fn exchange(dev: &Device) -> Result {
    let pd = Pd::new(dev)?;
    let cq = Cq::new(dev, 16, 0, PollContext::Softirq)?;
    let caps = QpCaps {
        send_depth: 4,
        recv_depth: 1,
        ..QpCaps::default()
    };
    // `b` lets its peer read and write its memory (the MR still decides which memory).
    let remote_rw = Access::REMOTE_READ | Access::REMOTE_WRITE;
    let a = Qp::new(&pd, QpType::Rc, &cq, &cq, &caps)?.to_init(1, Access::NONE)?;
    let b = Qp::new(&pd, QpType::Rc, &cq, &cq, &caps)?.to_init(1, remote_rw)?;
    let (ea, eb) = (a.endpoint()?, b.endpoint()?);
    let a: Qp<Rts> = a.connect(&eb, &RcParams::default())?;
    let b: Qp<Rts> = b.connect(&ea, &RcParams::default())?;

    // `b` maps a zeroed buffer into an MR and registers it through its own QP.
    // Two pages: enough for 4 KiB wherever the buffer starts.
    let mut mr = Mr::new(&pd, 2)?;
    mr.map(DmaBuf::new(&pd, LEN, GFP_KERNEL)?)
        .map_err(|(e, _)| e)?;
    let (mr, st) = post(&b, mr, |mr, ops| {
        ops.reg_mr(mr, remote_rw)?;
        Ok(())
    })?;
    expect("REG_MR", st, WcStatus::Success)?;
    let remote: Remote = mr.remote()?;

    // `a` writes the pattern into it...
    let mut src = DmaBuf::new(&pd, LEN, GFP_KERNEL)?;
    src.as_mut_slice()
        .iter_mut()
        .zip(pattern(LEN))
        .for_each(|(x, p)| *x = p);
    let (_, st) = post(&a, src, |src, ops| {
        ops.write(src, 0..LEN, remote)?;
        Ok(())
    })?;
    expect("RDMA WRITE", st, WcStatus::Success)?;
    let mut seen = KVec::from_elem(0u8, LEN, GFP_KERNEL)?;
    mr.read(0, &mut seen)?;
    let written = seen.iter().copied().eq(pattern(LEN));

    // ...and reads it back into a buffer only the request may touch while it runs.
    let (mut back, st) = post(&a, DmaBuf::new(&pd, LEN, GFP_KERNEL)?, |dst, ops| {
        ops.read(dst, 0..LEN, remote)?;
        Ok(())
    })?;
    expect("RDMA READ", st, WcStatus::Success)?;
    let read = back.as_slice().iter().copied().eq(pattern(LEN));
    if !written || !read {
        pr_err!("data differs: written {written}, read back {read}\n");
        return Err(EIO);
    }

    // `b` withdraws the rkey; `a`'s next access with it fails at `b`'s device.
    let (mr, st) = post(&b, mr, |mr, ops| {
        ops.local_inv(mr)?;
        Ok(())
    })?;
    expect("LOCAL_INV", st, WcStatus::Success)?;
    let (_, st) = post(&a, DmaBuf::new(&pd, 64, GFP_KERNEL)?, |src, ops| {
        ops.write(src, 0..64, remote)?;
        Ok(())
    })?;
    expect("RDMA WRITE after invalidation", st, WcStatus::RemAccessErr)?;
    drop(mr);
    Ok(())
    // `a`, `b`, `cq` and `pd` are dropped here; `a` is in the error state after the failed
    // WRITE, which is how RC reports a remote access error.
}

struct FastReg;

impl Client for FastReg {
    const NAME: &'static CStr = c_str!("rdma_rust_fastreg");
    type Data = KBox<()>;

    fn storage() -> &'static ClientStorage {
        static STORAGE: ClientStorage = ClientStorage::new();
        &STORAGE
    }

    fn add(dev: &Device) -> Result<KBox<()>> {
        let name = dev.name();
        match exchange(dev) {
            Ok(()) => pr_info!(
                "{name}: fast-registered MR: {LEN} bytes written and read back, \
                 rkey refused after invalidation\n"
            ),
            // iWARP connects QPs through rdma_cm only: kernel::rdma refuses one made by hand.
            Err(e) if e == EOPNOTSUPP && dev.is_rnic() => {
                pr_info!(
                    "{name}: iWARP refuses a QP made by hand (EOPNOTSUPP): \
                     rdma_cm connects them\n"
                )
            }
            Err(e) => pr_err!("{name}: fast-registered MR failed: {e:?}\n"),
        }
        Ok(KBox::new((), GFP_KERNEL)?)
    }
}
