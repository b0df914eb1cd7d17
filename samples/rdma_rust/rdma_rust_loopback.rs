// SPDX-License-Identifier: GPL-2.0

//! Sample: one RC message on each RDMA device, through a loopback QP pair.
//!
//! For each device it is added to, the module builds a PD, a CQ polled in softirq context and
//! two RC QPs connected to each other without rdma_cm, posts a receive on one, sends a
//! greeting from the other, waits for both completions and logs what arrived. Everything is
//! freed when the device goes away or the module unloads: the state owns it all.

use kernel::prelude::*;
use kernel::rdma::{
    client::{Client, ClientStorage},
    cq::{Cq, PollContext, Wc, WcStatus},
    device::Device,
    dma::DmaBuf,
    mr::Access,
    pd::Pd,
    qp::{Qp, QpCaps, QpType, RcParams},
    sync::Completion as Signal,
    wr::{Completion, Wr},
};
use kernel::{c_str, sync::Arc};

kernel::module_ib_client! {
    type: Loopback,
    name: "rdma_rust_loopback",
    author: "rdma-rust developers",
    description: "Sample: an RC message through a loopback QP pair on each RDMA device",
    license: "GPL",
}

const GREETING: &[u8] = b"hello from kernel::rdma";

/// A request: its buffer, what a receive must find in it, and the signal its completion
/// raises.
struct Msg {
    buf: DmaBuf,
    expect: Option<&'static [u8]>,
    done: Arc<Done>,
}

#[pin_data]
struct Done {
    #[pin]
    sig: Signal,
    ok: core::sync::atomic::AtomicBool,
    len: core::sync::atomic::AtomicU32,
}

impl Completion for Msg {
    // Softirq context: no sleeping, only atomics and the completion.
    fn done(mut wr: Wr<Self>, wc: &Wc) {
        let msg = wr.data_mut();
        let content_ok = match msg.expect {
            Some(e) => msg.buf.as_slice().get(..e.len()) == Some(e),
            None => true,
        };
        let ok = wc.status() == WcStatus::Success && content_ok;
        msg.done.ok.store(ok, core::sync::atomic::Ordering::Relaxed);
        msg.done
            .len
            .store(wc.byte_len(), core::sync::atomic::Ordering::Relaxed);
        msg.done.sig.complete();
        // Dropping `wr` here frees the request and its buffer (no sleeping involved).
    }
}

fn done() -> Result<Arc<Done>> {
    Arc::pin_init(
        pin_init!(Done {
            sig <- Signal::new(),
            ok: core::sync::atomic::AtomicBool::new(false),
            len: core::sync::atomic::AtomicU32::new(0),
        }),
        GFP_KERNEL,
    )
}

/// Sends one message from one QP to the other and returns how many bytes arrived.
fn exchange(dev: &Device) -> Result<u32> {
    let pd = Pd::new(dev)?;
    // Two QPs of 4 + 4 requests (and one drain slot per queue): 20 entries at most.
    let cq = Cq::new(dev, 32, 0, PollContext::Softirq)?;
    let caps = QpCaps {
        send_depth: 4,
        recv_depth: 4,
        ..QpCaps::default()
    };
    let a = Qp::new(&pd, QpType::Rc, &cq, &cq, &caps)?.to_init(1, Access::NONE)?;
    let b = Qp::new(&pd, QpType::Rc, &cq, &cq, &caps)?.to_init(1, Access::NONE)?;
    let (ea, eb) = (a.endpoint()?, b.endpoint()?);
    let a = a.connect(&eb, &RcParams::default())?;
    let b = b.connect(&ea, &RcParams::default())?;

    let (sent, got) = (done()?, done()?);
    let rx = Msg {
        buf: DmaBuf::new(&pd, 64, GFP_KERNEL)?,
        expect: Some(GREETING),
        done: got.clone(),
    };
    b.post_recv(Wr::new(rx, GFP_KERNEL)?, |m, ops| {
        let len = m.buf.len();
        ops.buf(&mut m.buf, 0..len)?;
        Ok(())
    })?;
    let mut greeting = KVec::new();
    greeting.extend_from_slice(GREETING, GFP_KERNEL)?;
    // The buffer is mapped for the device from here on; the CPU wrote it before.
    let buf = DmaBuf::from_vec(&pd, greeting).map_err(|(e, _)| e)?;
    let tx = Msg {
        buf,
        expect: None,
        done: sent.clone(),
    };
    a.post_send(Wr::new(tx, GFP_KERNEL)?, |m, ops| {
        ops.send(&m.buf, 0..m.buf.len())?;
        Ok(())
    })?;
    sent.sig.wait_timeout(5000)?;
    got.sig.wait_timeout(5000)?;
    let ok = |d: &Done| d.ok.load(core::sync::atomic::Ordering::Relaxed);
    if !ok(&sent) || !ok(&got) {
        return Err(EIO);
    }
    Ok(got.len.load(core::sync::atomic::Ordering::Relaxed))
    // `a`, `b`, `cq` and `pd` are dropped here, QPs first: they hold the CQ and the PD.
}

struct Loopback;

impl Client for Loopback {
    const NAME: &'static CStr = c_str!("rdma_rust_loopback");
    type Data = KBox<()>;

    fn storage() -> &'static ClientStorage {
        static STORAGE: ClientStorage = ClientStorage::new();
        &STORAGE
    }

    fn add(dev: &Device) -> Result<KBox<()>> {
        let name = dev.name();
        match exchange(dev) {
            Ok(n) => pr_info!("{name}: RC loopback: {n} bytes sent, received and checked\n"),
            // iWARP connects QPs through rdma_cm only: kernel::rdma refuses one made by hand.
            Err(e) if e == EOPNOTSUPP && dev.is_rnic() => {
                pr_info!(
                    "{name}: iWARP refuses a QP made by hand (EOPNOTSUPP): \
                     rdma_cm connects them\n"
                )
            }
            Err(e) => pr_err!("{name}: RC loopback failed: {e:?}\n"),
        }
        Ok(KBox::new((), GFP_KERNEL)?)
    }
}
