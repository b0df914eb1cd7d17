// SPDX-License-Identifier: GPL-2.0

//! Sample: an RC echo server over rdma_cm, run by completion handlers.
//!
//! It listens on port 7471 of every IPv4 address. A connection request reaches the
//! listener's [`Handler`] (process context, the CM's work queue), which takes it, builds a PD,
//! CQ and QP on the new id's device, posts its receives and accepts. The echo then runs in
//! softirq completion handlers, without allocating: a completed receive is posted again as a
//! SEND of the same buffer, and that SEND, once complete, as a receive again. On a disconnect
//! or a device removal the connection's handler moves the QP to the error state: its requests
//! come back flushed and are dropped with the last references to the QP, which then goes.
//!
//! The receives go on the QP before the accept: an iWARP client may send as soon as the
//! connection is up, and iWARP has no receiver-not-ready retry. Their completions post on the
//! same QP after the accept, so it is shared as the connection manager's ([`Qp::managed`]):
//! a state in which both receives and sends may be posted, the CM making it ready to send.

use kernel::new_mutex;
use kernel::prelude::*;
use kernel::rdma::{
    cm::{CmId, ConnParam, Event, Handler, Id, PortSpace, Request, SockAddr, SockAddrV4},
    cq::{Cq, PollContext, Wc, WcOpcode},
    dma::DmaBuf,
    pd::Pd,
    qp::{Cm, Qp, QpCaps},
    wr::{Completion, Wr},
};
use kernel::sync::{Arc, Mutex};

module! {
    type: CmServer,
    name: "rdma_rust_cm_server",
    author: "rdma-rust developers",
    description: "Sample: an RC echo server over rdma_cm, run by completion handlers",
    license: "GPL",
}

const PORT: u16 = 7471;
const LEN: usize = 4096; // The longest message echoed.
const BUFS: u32 = 4; // Buffers per connection, each a receive or a SEND at any time.
const MAX_CONNS: usize = 8; // Connections at once; more are refused.

/// One buffer of a connection, travelling receive -> SEND -> receive.
struct Echo {
    buf: DmaBuf,
    len: usize,
    qp: Arc<Qp<Cm>>,
}

impl Completion for Echo {
    // Softirq context: no sleeping; posting neither sleeps nor allocates.
    fn done(mut wr: Wr<Self>, wc: &Wc) {
        if !wc.is_ok() {
            // Flushed (closing) or failed: dropping `wr` frees its buffer and QP reference.
            return;
        }
        let qp = wr.data().qp.clone();
        let len = wc.byte_len() as usize;
        let r = if wc.opcode() == Some(WcOpcode::Recv) && (1..=LEN).contains(&len) {
            wr.data_mut().len = len;
            qp.post_send(wr, |e, ops| {
                ops.send(&e.buf, 0..e.len)?;
                Ok(())
            })
        } else {
            qp.post_recv(wr, recv_ops)
        };
        if let Err(e) = r {
            pr_warn!("a buffer was not posted again: {:?}\n", e.err);
        }
    }
}

fn recv_ops<'a>(e: &'a mut Echo, ops: &mut kernel::rdma::wr::RecvOps<'a>) -> Result {
    ops.buf(&mut e.buf, 0..LEN)?;
    Ok(())
}

/// An open connection: its id, and its QP.
type Conn = Option<(CmId<Server>, Arc<Qp<Cm>>)>;

#[pin_data]
struct Conns {
    #[pin]
    list: Mutex<[Conn; MAX_CONNS]>,
}

/// The handler of the listener and of every connection.
struct Server(Arc<Conns>);

impl Server {
    fn accept(&self, req: Request<'_, Server>) -> Result {
        let mut list = self.0.list.lock();
        // No room: returning drops `req`, which refuses the connection.
        let slot = list.iter_mut().find(|c| c.is_none()).ok_or(EBUSY)?;
        let id = req.take(Server(self.0.clone()))?;
        let dev = id.device().ok_or(ENODEV)?;
        let (pd, cq) = (Pd::new(&dev)?, Cq::new(&dev, 16, 0, PollContext::Softirq)?);
        let caps = QpCaps {
            send_depth: BUFS,
            recv_depth: BUFS,
            ..QpCaps::default()
        };
        let qp = Arc::new(id.create_qp(&pd, &cq, &cq, &caps)?.managed()?, GFP_KERNEL)?;
        let posted = (0..BUFS).try_for_each(|_| {
            let e = Echo {
                buf: DmaBuf::new(&pd, LEN, GFP_KERNEL)?,
                len: 0,
                qp: qp.clone(),
            };
            Ok(qp.post_recv(Wr::new(e, GFP_KERNEL)?, recv_ops)?)
        });
        // The accept moves the QP to Ready to Send before the client may send.
        if let Err(e) = posted.and_then(|()| id.accept(&ConnParam::default())) {
            // The posted buffers hold the QP: flush them, or it would never go.
            let _ = qp.set_error();
            return Err(e);
        }
        *slot = Some((id, qp));
        Ok(())
    }

    /// The connection of `id` is over: flush its buffers and forget it.
    fn close(&self, id: &Id) {
        let mut list = self.0.list.lock();
        let mine = |c: &&mut Conn| matches!(c, Some((c, _)) if core::ptr::eq::<Id>(&**c, id));
        let Some((c, qp)) = list.iter_mut().find(mine).and_then(Option::take) else {
            return;
        };
        drop(list);
        let _ = qp.set_error();
        // Dropping an id in its own handler is safe: it is destroyed when the handler returns.
        drop((qp, c));
    }
}

/// A peer's address, for the log (0.0.0.0:0 if the CM has none).
fn show(a: Option<SockAddr>) -> SockAddr {
    const NONE: SockAddrV4 = SockAddrV4 {
        ip: [0; 4],
        port: 0,
    };
    a.unwrap_or(NONE.into())
}

impl Handler for Server {
    fn event(&self, id: &Id, event: Event<'_, Self>) {
        match event {
            Event::ConnectRequest(req) => {
                let peer = show(req.peer_addr());
                match self.accept(req) {
                    Ok(()) => pr_info!("{peer}: connection accepted\n"),
                    Err(e) => pr_err!("{peer}: connection failed: {e:?}\n"),
                }
            }
            Event::Disconnected | Event::DeviceRemoval => {
                pr_info!("{}: connection closed\n", show(id.peer_addr()));
                self.close(id);
            }
            _ => {}
        }
    }
}

struct CmServer {
    listener: Option<CmId<Server>>,
    conns: Arc<Conns>,
}

impl kernel::Module for CmServer {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let conns = Arc::pin_init(
            pin_init!(Conns { list <- new_mutex!([const { None }; MAX_CONNS]) }),
            GFP_KERNEL,
        )?;
        let listener = CmId::new(PortSpace::Tcp, Server(conns.clone()))?;
        listener.bind(SockAddrV4 {
            ip: [0; 4],
            port: PORT,
        })?;
        listener.listen(8)?;
        pr_info!("listening on port {PORT}\n");
        Ok(CmServer {
            listener: Some(listener),
            conns,
        })
    }
}

impl Drop for CmServer {
    fn drop(&mut self) {
        // No new connections first; then end those that are open.
        drop(self.listener.take());
        let open = core::mem::take(&mut *self.conns.list.lock());
        for (id, qp) in open.into_iter().flatten() {
            let _ = id.disconnect();
            let _ = qp.set_error();
        }
    }
}
