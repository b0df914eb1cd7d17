// SPDX-License-Identifier: GPL-2.0

//! The RC loopback pair of a device whose QPs cannot be connected by hand (iWARP): the
//! connection manager connects them, a client id to a listener on the port's IPv4 address
//! (iw_cm over TCP underneath). Both sides are the run's: the run posts its receives before
//! its first send, once both are up, so no receive has to go on the QP before the accept.

use super::{bad, Attached};
use kernel::new_mutex;
use kernel::prelude::*;
use kernel::rdma::{
    cm::{CmId, ConnParam, Event, Handler, Id, PortSpace, Request, SockAddr, SockAddrV4},
    cq::Cq,
    device::Device,
    pd::Pd,
    qp::{Init, Qp, QpCaps, Rts},
    sync::Completion as Signal,
};
use kernel::sync::{Arc, Mutex};

/// How long address and route resolution may take.
const RESOLVE_MS: u32 = 2000;
/// How long the pair may take to connect.
const CONNECT_MS: u32 = 10_000;

/// What the server side's QP is made of: PD, CQ, queue sizes and RDMA READs in flight.
type Recipe = (Arc<Pd>, Arc<Cq>, QpCaps, u8);

/// What the ids' handler tells the building thread.
#[derive(Default)]
struct Seen {
    addr: bool,
    route: bool,
    established: u32,
    failed: Option<Error>,
    /// What the server side's QP is made of, until its request came.
    make: Option<Recipe>,
    /// The id the listener took, with its QP, until the building thread takes them.
    child: Option<(CmId<PairEv>, Qp<Init>)>,
}

#[pin_data]
struct Shared {
    #[pin]
    seen: Mutex<Seen>,
    #[pin]
    sig: Signal,
}

/// The handler of the pair's ids: a listener, a client and the id the listener took.
struct PairEv(Arc<Shared>);

impl PairEv {
    fn accept(&self, req: Request<'_, Self>) -> Result {
        let (pd, cq, caps, rd) = self.0.seen.lock().make.take().ok_or(EINVAL)?;
        let child = req.take(PairEv(self.0.clone()))?;
        let qp = child.create_qp(&pd, &cq, &cq, &caps)?;
        child.accept(&param(rd))?;
        self.0.seen.lock().child = Some((child, qp));
        Ok(())
    }
}

impl Handler for PairEv {
    fn event(&self, _id: &Id, event: Event<'_, Self>) {
        let failed = match event {
            Event::AddrResolved => {
                self.0.seen.lock().addr = true;
                None
            }
            Event::RouteResolved => {
                self.0.seen.lock().route = true;
                None
            }
            Event::ConnectRequest(req) => self.accept(req).err(),
            Event::Established { .. } => {
                self.0.seen.lock().established += 1;
                None
            }
            Event::AddrError(e)
            | Event::RouteError(e)
            | Event::ConnectError(e)
            | Event::Unreachable(e) => Some(e),
            Event::Rejected { .. } => Some(ECONNREFUSED),
            _ => return,
        };
        if let Some(e) = failed {
            self.0.seen.lock().failed.get_or_insert(e);
        }
        self.0.sig.complete();
    }
}

/// Both sides' RDMA READs in flight at most.
fn param(rd: u8) -> ConnParam<'static> {
    ConnParam {
        responder_resources: rd,
        initiator_depth: rd,
        ..ConnParam::default()
    }
}

/// The pair's ids, destroyed once the run's QPs are drained (the QPs hold them too).
#[pin_data]
struct Ids {
    #[pin]
    ids: Mutex<Option<KVec<CmId<PairEv>>>>,
}

impl Attached for Ids {
    fn release(&self) {
        let ids = self.ids.lock().take();
        // Outside the lock: destroying an id waits for its handler.
        drop(ids);
    }
}

/// Waits until `done` holds of what the handler saw; the first failure it reported, or
/// `ETIMEDOUT` after `ms`.
fn wait(sh: &Shared, ms: u32, what: &str, done: impl Fn(&Seen) -> bool) -> Result {
    let mut left = ms;
    loop {
        {
            let seen = sh.seen.lock();
            if let Some(e) = seen.failed {
                return Err(bad(format_args!("rdma_cm pair: {what}: {e:?}")));
            }
            if done(&seen) {
                return Ok(());
            }
        }
        if left == 0 {
            return Err(bad(format_args!("rdma_cm pair: no {what} within {ms} ms")));
        }
        // Woken by every event; a wait that times out ends the loop above.
        left = if sh.sig.wait_timeout(left.min(100)).is_ok() {
            left
        } else {
            left.saturating_sub(100)
        };
    }
}

/// The pair [`connect`] makes: the client's QP, the server's, and their ids, to release after
/// them.
pub(super) type Pair = (Qp<Rts>, Qp<Rts>, Arc<dyn Attached>);

/// Connects a QP of `tx` caps (the client's) to one of `rx` caps (the server's) on `dev`'s
/// port 1 through the connection manager, `rd` RDMA READs in flight each way; returns both
/// QPs, ready to send, and the ids to release after them.
pub(super) fn connect(
    dev: &Device,
    pd: &Arc<Pd>,
    cq: &Arc<Cq>,
    tx: &QpCaps,
    rx: &QpCaps,
    rd: u8,
) -> Result<Pair> {
    let ip = dev.ipv4_addr(1).map_err(|e| {
        bad(format_args!(
            "{}: no IPv4 address on its network device ({e:?}): rdma_cm connects its QPs",
            dev.name()
        ))
    })?;
    let sh = Arc::pin_init(
        pin_init!(Shared {
            seen <- new_mutex!(Seen::default(), "rdma_rust_ulp_cm_pair"),
            sig <- Signal::new(),
        }),
        GFP_KERNEL,
    )?;
    sh.seen.lock().make = Some((pd.clone(), cq.clone(), *rx, rd));
    let listener = CmId::new(PortSpace::Tcp, PairEv(sh.clone()))?;
    // Port 0: the CM picks a free one.
    listener.bind(SockAddrV4 { ip, port: 0 })?;
    listener.listen(1)?;
    let port = match listener.local_addr() {
        Some(SockAddr::V4(a)) => a.port,
        _ => return Err(EINVAL),
    };
    let client = CmId::new(PortSpace::Tcp, PairEv(sh.clone()))?;
    client.resolve_addr(None, SockAddrV4 { ip, port }, RESOLVE_MS)?;
    wait(&sh, RESOLVE_MS + 1000, "address", |s| s.addr)?;
    client.resolve_route(RESOLVE_MS)?;
    wait(&sh, RESOLVE_MS + 1000, "route", |s| s.route)?;
    let a = client.create_qp(pd, cq, cq, tx)?;
    client.connect(&param(rd))?;
    let up = wait(&sh, CONNECT_MS, "connection", |s| s.established >= 2);
    // No request is taken after this: destroying the listener waits for its handler, which
    // may be storing the child. The child is then out of the shared state in any case (its
    // handler holds that state).
    drop(listener);
    let child = {
        let mut seen = sh.seen.lock();
        seen.make = None;
        seen.child.take()
    };
    up?;
    let (child, b) = child.ok_or(EINVAL)?;
    let (a, b) = (a.established()?, b.established()?);
    let mut ids = KVec::with_capacity(2, GFP_KERNEL)?;
    for id in [child, client] {
        ids.push(id, GFP_KERNEL)?;
    }
    let ids = Arc::pin_init(
        pin_init!(Ids {
            ids <- new_mutex!(Some(ids), "rdma_rust_ulp_cm_pair_ids"),
        }),
        GFP_KERNEL,
    )?;
    Ok((a, b, ids))
}
