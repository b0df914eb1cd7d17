// SPDX-License-Identifier: GPL-2.0

//! Sample: an RC client over rdma_cm, run from the module's thread.
//!
//! The connection manager finds the device from the peer's IP address and moves the QP
//! through its states. The steps: resolve the address (which device), then the route, create
//! the QP on the id, connect, and wait for [`Event::Established`] ([`Qp::established`]). Each
//! answer reaches the id's [`Handler`] in process context (the CM's work queue), and the
//! thread waits for it. A client's `add` notes the IPv4 address of each device's port (that of
//! its network device: RoCE and iWARP alike); the module connects to `rdma_rust_cm_server` at
//! each address in turn and checks `MESSAGES` echoes. On iWARP the server's receives must be
//! posted before it accepts (see the server), and this client's before it sends.

use core::sync::atomic::{AtomicU32, Ordering};
use kernel::prelude::*;
use kernel::rdma::{
    client::{Client, ClientStorage, Registration},
    cm::{CmId, ConnParam, Event, Handler, Id, PortSpace, SockAddrV4},
    cq::{Cq, PollContext},
    device::Device,
    dma::DmaBuf,
    pd::Pd,
    qp::{Qp, QpCaps, Rts},
    sync::Completion as Signal,
    wr::{Pending, Waited},
};
use kernel::sync::{Arc, Mutex};
use kernel::{c_str, new_mutex};

module! {
    type: CmClient,
    name: "rdma_rust_cm_client",
    author: "rdma-rust developers",
    description: "Sample: an RC client over rdma_cm, checked against an echo server",
    license: "GPL",
}

const PORT: u16 = 7471;
const MESSAGES: u8 = 8;
const LEN: usize = 64;
const WAIT_MS: u32 = 5000;
// The steps the handler reports, as bits.
const ADDR: u32 = 1;
const ROUTE: u32 = 2;
const UP: u32 = 4;

/// Devices whose address the module tries, at most.
const MAX_ADDRS: usize = 8;
/// The IPv4 address of each device's port in network order, in the order found; 0: none.
static FOUND: [AtomicU32; MAX_ADDRS] = [const { AtomicU32::new(0) }; MAX_ADDRS];

struct Finder;

impl Client for Finder {
    const NAME: &'static CStr = c_str!("rdma_rust_cm_client");
    type Data = KBox<()>;

    fn storage() -> &'static ClientStorage {
        static STORAGE: ClientStorage = ClientStorage::new();
        &STORAGE
    }

    fn add(dev: &Device) -> Result<KBox<()>> {
        // One address per device: a second port would reach the same server.
        if let Some(ip) = dev.ports().find_map(|port| dev.ipv4_addr(port).ok()) {
            let ip = u32::from_be_bytes(ip);
            // The first free slot; none left: the device is not tried.
            let _ = FOUND.iter().any(|slot| {
                slot.compare_exchange(0, ip, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            });
        }
        Ok(KBox::new((), GFP_KERNEL)?)
    }
}

/// What the handler tells the module's thread.
#[pin_data]
struct Steps {
    #[pin]
    state: Mutex<(u32, Option<Error>)>,
    #[pin]
    sig: Signal,
}

impl Steps {
    /// Waits until the steps `want` are done, or the handler reported a failure.
    fn wait(&self, want: u32) -> Result {
        loop {
            match *self.state.lock() {
                (_, Some(e)) => return Err(e),
                (done, None) if done & want == want => return Ok(()),
                _ => {}
            }
            self.sig.wait_timeout(WAIT_MS)?;
        }
    }
}

struct Side(Arc<Steps>);

impl Handler for Side {
    fn event(&self, _id: &Id, event: Event<'_, Self>) {
        let step = match event {
            Event::AddrResolved => Ok(ADDR),
            Event::RouteResolved => Ok(ROUTE),
            Event::Established { .. } => Ok(UP),
            Event::AddrError(e) | Event::RouteError(e) => Err(e),
            Event::ConnectError(e) | Event::Unreachable(e) => Err(e),
            Event::Rejected { .. } => Err(ECONNREFUSED),
            _ => return,
        };
        let mut s = self.0.state.lock();
        match step {
            Ok(bit) => s.0 |= bit,
            Err(e) => s.1 = Some(e),
        }
        drop(s);
        self.0.sig.complete();
    }
}

fn recv(qp: &Qp<Rts>) -> Result<Pending<DmaBuf>> {
    let (wr, pending) = Waited::new(DmaBuf::new(qp.pd(), LEN, GFP_KERNEL)?, GFP_KERNEL)?;
    qp.post_recv(wr, |w, ops| {
        ops.buf(&mut w.data, 0..LEN)?;
        Ok(())
    })?;
    Ok(pending)
}

/// Waits for a request; its buffer, if it succeeded.
fn done(pending: Pending<DmaBuf>) -> Result<DmaBuf> {
    let (buf, wc) = pending.wait(WAIT_MS)?;
    wc.is_ok().then_some(buf).ok_or(EIO)
}

/// Connects to `addr`; returns how many messages came back intact.
fn echo(addr: SockAddrV4) -> Result<u8> {
    let steps = Arc::pin_init(
        pin_init!(Steps { state <- new_mutex!((0, None)), sig <- Signal::new() }),
        GFP_KERNEL,
    )?;
    let id = CmId::new(PortSpace::Tcp, Side(steps.clone()))?;
    id.resolve_addr(None, addr, WAIT_MS)?;
    steps.wait(ADDR)?;
    id.resolve_route(WAIT_MS)?;
    steps.wait(ROUTE)?;
    // The id now knows its device: build the QP there.
    let dev = id.device().ok_or(ENODEV)?;
    let (pd, cq) = (Pd::new(&dev)?, Cq::new(&dev, 8, 0, PollContext::Softirq)?);
    let caps = QpCaps {
        send_depth: 1,
        recv_depth: 1,
        ..QpCaps::default()
    };
    let qp = id.create_qp(&pd, &cq, &cq, &caps)?;
    id.connect(&ConnParam::default())?;
    steps.wait(UP)?;
    let qp: Qp<Rts> = qp.established()?;
    let mut echoed = 0;
    for i in 0..MESSAGES {
        let answer = recv(&qp)?;
        let mut msg = DmaBuf::new(&pd, LEN, GFP_KERNEL)?;
        msg.as_mut_slice().fill(i ^ 0xa5);
        let (wr, sent) = Waited::new(msg, GFP_KERNEL)?;
        qp.post_send(wr, |w, ops| {
            ops.send(&w.data, 0..LEN)?;
            Ok(())
        })?;
        done(sent)?;
        if done(answer)?.as_slice().iter().all(|&x| x == i ^ 0xa5) {
            echoed += 1;
        }
    }
    id.disconnect()?;
    drop((qp, id)); // The QP first: it holds the id.
    Ok(echoed)
}

struct CmClient {
    _reg: Registration<Finder>,
}

impl kernel::Module for CmClient {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        // `add` runs for every device present before this returns; no lock is held after.
        let reg = Registration::<Finder>::new()?;
        let found = FOUND.iter().map(|slot| slot.load(Ordering::Relaxed));
        let mut tried = 0;
        for ip in found.filter(|&ip| ip != 0).map(u32::to_be_bytes) {
            tried += 1;
            let [a, b, c, d] = ip;
            match echo(SockAddrV4 { ip, port: PORT }) {
                Ok(n) => pr_info!(
                    "{a}.{b}.{c}.{d}:{PORT}: RC echo over rdma_cm: {n} of {MESSAGES} messages of {LEN} bytes\n"
                ),
                Err(e) => pr_err!("{a}.{b}.{c}.{d}:{PORT}: RC echo over rdma_cm failed: {e:?}\n"),
            }
        }
        if tried == 0 {
            pr_err!("no RDMA port with an IPv4 address: nothing to connect to\n");
            return Err(ENODEV);
        }
        Ok(CmClient { _reg: reg })
    }
}
