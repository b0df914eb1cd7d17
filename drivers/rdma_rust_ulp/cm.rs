// SPDX-License-Identifier: GPL-2.0

//! Runs over the RDMA connection manager: a peer found by its IP address.
//!
//! RC runs speak rping's protocol (rdma-core's `librdmacm/examples/rping.c`, also krping's), so
//! that either side can be `rping`. Each round trip:
//!
//! 1. the client SENDs the address, rkey and length of its source buffer (16 bytes, big
//!    endian: `u64 addr, u32 rkey, u32 len`), which holds `rdma-ping-N: ` and a run of
//!    letters, NUL-terminated;
//! 2. the server RDMA READs that buffer, then SENDs a "go ahead" (16 bytes);
//! 3. the client SENDs the address, rkey and length of its sink buffer;
//! 4. the server RDMA WRITEs what it read into the sink, then SENDs a "go ahead";
//! 5. the client checks that the sink matches the source.
//!
//! Every step after the connection is made runs in completion handlers (softirq by default):
//! each request is owned by its buffer's holder and posted again, no allocation or sleep.
//! A server accepts any number of connections, each with its own QP and buffer, and counts
//! the round trips of all of them; its `count` ends the run.
//!
//! UD runs: the server creates one UD QP on its listener and answers every SIDR request with
//! it; the client's ESTABLISHED event gives it the server's QP number, Q_Key and an address
//! handle, and from there the run is an ordinary UD client run ([`crate::run`]).
//!
//! Multicast UD runs ([`mcast`]): both roles join the group; the server's QP is attached to
//! it and receives, the client sends to it.
//!
//! A client connects with 8 bytes of private data, `RRUL` and its buffer size (little
//! endian); a server that cannot take that size rejects the connection with `RRUL` and its
//! own limit, which the client reports. rping sends no private data.

use crate::counters::Counters;
use crate::ctl::{Role, Spec};
use crate::run::{check_ud_size, Attached, Res, Run};
use crate::wait::{wait_until, Pace};
use kernel::new_mutex;
use kernel::prelude::*;
use kernel::rdma::{
    ah::Ah,
    cm::{CmId, ConnParam, Event, Handler, Id, PortSpace, UdPeer},
    cq::Cq,
    defer::DropOutside,
    device::{Device, Gid},
    pd::Pd,
    qp::{QpCaps, QpType},
    sync::Completion as Signal,
};
use kernel::sync::{Arc, Mutex};

mod mcast;
mod ping;
mod server;

use ping::Conn;
use server::server;

/// How long address and route resolution may take.
const RESOLVE_MS: u32 = 2000;
/// How long a connection may take to be established (or refused).
const CONNECT_MS: u32 = 30_000;
/// Connections a server run serves at once.
const MAX_SESSIONS: usize = 8;
/// Private data magic of this ULP.
const MAGIC: &[u8; 4] = b"RRUL";

/// How far the starting thread's connection has come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Idle,
    AddrResolved,
    RouteResolved,
    Established,
    /// A multicast group was joined.
    Joined,
    Failed(Error),
}

/// What the handlers of a run's ids share with the thread that started it.
struct Shared {
    step: Step,
    run: Option<Arc<Run>>,
    pd: Option<Arc<Pd>>,
    cq: Option<Arc<Cq>>,
    /// A UD server's QP number (answered to every request).
    ud_qpn: u32,
    /// A UD client's peer, from the SIDR reply or the multicast join.
    ud: Option<(Arc<Ah>, u32, u32)>,
    /// The joined multicast group's GID and LID.
    group: Option<(Gid, u16)>,
    /// The run's ids and connections, until the run releases them ([`Attached`]).
    link: Option<Link>,
}

#[pin_data]
pub(crate) struct Waiter {
    #[pin]
    shared: Mutex<Shared>,
    #[pin]
    signal: Signal,
}

impl Waiter {
    fn new() -> Result<Arc<Waiter>> {
        Arc::pin_init(
            pin_init!(Waiter {
                shared <- new_mutex!(Shared {
                    step: Step::Idle,
                    run: None,
                    pd: None,
                    cq: None,
                    ud_qpn: 0,
                    ud: None,
                    group: None,
                    link: None,
                }, "rdma_rust_ulp_cm_waiter"),
                signal <- Signal::new(),
            }),
            GFP_KERNEL,
        )
    }

    fn set_step(&self, s: Step) {
        self.shared.lock().step = s;
        self.signal.complete();
    }

    /// Waits up to `ms` for step `want` (or a failure).
    fn wait(&self, want: Step, ms: u32) -> Result {
        let mut outcome = Err(ETIMEDOUT);
        let _ = wait_until(None, Some(&self.signal), ms, Pace::Sleep, || {
            match self.shared.lock().step {
                s if s == want => outcome = Ok(()),
                Step::Failed(e) => outcome = Err(e),
                _ => return false,
            }
            true
        });
        outcome
    }

    fn run(&self) -> Option<Arc<Run>> {
        self.shared.lock().run.clone()
    }

    /// Runs `f` on the run's ids and connections, unless the run has released them.
    fn with_link<R>(&self, f: impl FnOnce(&mut Link) -> R) -> Option<R> {
        self.shared.lock().link.as_mut().map(f)
    }
}

impl Attached for Waiter {
    fn release(&self) {
        let link = self.shared.lock().link.take();
        // Dropped outside the lock: destroying an id waits for its handler, which takes it.
        drop(link);
    }

    fn tick(&self) {
        self.with_link(|l| {
            if let Some(c) = &l.conn {
                c.tick();
            }
            for s in l.sessions.iter() {
                s.conn.tick();
            }
        });
    }
}

/// The event handler of a run's ids.
pub(crate) struct Ev {
    waiter: Arc<Waiter>,
    /// A server's connection.
    conn: Option<Arc<Conn>>,
}

/// A server's connection: its id and state, ended when dropped. Kept in a [`DropOutside`]:
/// dropped in its id's event handler (a disconnect), it ends from a work item, since draining
/// its QP there would wait for CQ work under rdma_cm's handler lock.
struct Session {
    id: CmId<Ev>,
    conn: Arc<Conn>,
}

impl Drop for Session {
    fn drop(&mut self) {
        // The peer sees the connection end now rather than when the id goes.
        self.conn.closing();
        let _ = self.id.disconnect();
        self.conn.teardown();
    }
}

/// A CM run's ids: its listener or connecting id, and a server's connections. Dropped in
/// process context: the connections are drained and freed, then the ids destroyed.
pub(crate) struct Link {
    id: Option<CmId<Ev>>,
    /// A client's RC connection.
    conn: Option<Arc<Conn>>,
    sessions: KVec<DropOutside<Session>>,
}

impl Drop for Link {
    fn drop(&mut self) {
        if let (Some(id), Some(c)) = (&self.id, &self.conn) {
            // The peer sees the connection end now rather than when the id goes.
            c.closing();
            let _ = id.disconnect();
            c.teardown();
        }
        drop(core::mem::take(&mut self.sessions));
        drop(self.id.take());
    }
}

impl Handler for Ev {
    fn event(&self, id: &Id, event: Event<'_, Self>) {
        match event {
            Event::AddrResolved => self.waiter.set_step(Step::AddrResolved),
            Event::RouteResolved => self.waiter.set_step(Step::RouteResolved),
            Event::AddrError(e) | Event::RouteError(e) => {
                pr_err!("cm: cannot reach {}: {e:?}\n", Show(id.peer_addr()));
                self.waiter.set_step(Step::Failed(e));
            }
            Event::ConnectRequest(req) => self.request(req),
            Event::Established { ud, .. } => {
                if ud.map_or(true, |ud| self.take_ud(&ud)) {
                    self.waiter.set_step(Step::Established);
                }
            }
            Event::MulticastJoin(ud) => {
                if self.take_ud(&ud) {
                    self.waiter.shared.lock().group = Some((ud.gid(), ud.lid()));
                    self.waiter.set_step(Step::Joined);
                }
            }
            Event::MulticastError(e) => {
                pr_err!("cm: the multicast join failed: {e:?}\n");
                self.waiter.set_step(Step::Failed(e));
            }
            Event::Rejected {
                reason,
                private_data,
            } => {
                if private_data.starts_with(MAGIC) && private_data.len() >= 8 {
                    let mut b = [0u8; 4];
                    b.copy_from_slice(&private_data[4..8]);
                    pr_err!(
                        "cm: {} rejected the connection: it takes buffers up to {} bytes\n",
                        Show(id.peer_addr()),
                        u32::from_le_bytes(b)
                    );
                } else {
                    pr_err!(
                        "cm: {} rejected the connection (reason {reason})\n",
                        Show(id.peer_addr())
                    );
                }
                self.waiter.set_step(Step::Failed(ECONNREFUSED));
            }
            Event::Unreachable(e) | Event::ConnectError(e) => {
                pr_err!("cm: {} unreachable: {e:?}\n", Show(id.peer_addr()));
                self.waiter.set_step(Step::Failed(ETIMEDOUT));
            }
            Event::Disconnected | Event::DeviceRemoval => {
                let removal = matches!(event, Event::DeviceRemoval);
                self.waiter.set_step(Step::Failed(ESHUTDOWN));
                self.closed(id, removal);
            }
            Event::TimewaitExit | Event::AddrChange | Event::Other(..) => {}
        }
    }
}

impl Ev {
    /// Keeps a UD peer (its address handle, QP number and Q_Key) for the starting thread;
    /// `false`, with the run failed, when no address handle can be made for it.
    fn take_ud(&self, ud: &UdPeer<'_>) -> bool {
        let pd = self.waiter.shared.lock().pd.clone();
        match pd.ok_or(EINVAL).and_then(|pd| ud.create_ah(&pd)) {
            Ok(ah) => {
                self.waiter.shared.lock().ud = Some((ah, ud.qpn(), ud.qkey()));
                true
            }
            Err(e) => {
                pr_err!("cm: no address handle for the UD peer: {e:?}\n");
                self.waiter.set_step(Step::Failed(e));
                false
            }
        }
    }
}

/// Shows an address in a message (`?` when the id has none).
struct Show(Option<kernel::rdma::cm::SockAddr>);

impl core::fmt::Display for Show {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            Some(a) => core::fmt::Display::fmt(&a, f),
            None => f.write_str("?"),
        }
    }
}

impl Ev {
    /// A connection ended (peer disconnected, or the device is going away).
    fn closed(&self, id: &Id, removal: bool) {
        let Some(run) = self.waiter.run() else {
            return;
        };
        let what = if removal {
            "device removal"
        } else {
            "disconnected"
        };
        match &self.conn {
            // A server connection: ended from a work item (see `Session`).
            Some(conn) => {
                // Ended now, though freed from a work item: the flushes that follow (on
                // iWARP the QP is in the error state already) are its drain.
                conn.closing();
                pr_info!(
                    "run {}: {} {what} after {} round trips\n",
                    run.id,
                    Show(id.peer_addr()),
                    conn.round_trips()
                );
                let session = self.waiter.with_link(|l| {
                    let i = l.sessions.iter().position(|s| Arc::ptr_eq(&s.conn, conn))?;
                    l.sessions.remove(i)
                });
                drop(session);
            }
            None => {
                if run.spec.role == Role::Client {
                    let done = Counters::get(&run.counters.messages);
                    if done < run.spec.count && !run.stopping() {
                        run.error(format_args!("{what} after {done} of {}", run.spec.count));
                    }
                    run.stop();
                    if let Some(Some(c)) = self.waiter.with_link(|l| l.conn.clone()) {
                        c.end();
                        if !removal {
                            // The server asked (a DREQ): answered now, not when the run is
                            // reaped, so that its side ends at once. The QP moves to the
                            // error state; its flushes are an ended connection's drain.
                            let _ = id.disconnect();
                        }
                    }
                } else if removal {
                    run.stop();
                }
            }
        }
    }
}

/// The queues of a ping connection: two REG_MRs, two SENDs, a READ or WRITE and a keep-alive
/// at most in flight; one receive.
fn ping_caps() -> QpCaps {
    QpCaps {
        send_depth: 7,
        recv_depth: 2,
        ..QpCaps::default()
    }
}

/// Starts a CM run: a server binds and listens, a client resolves, connects and starts.
/// `attach` registers the run with the device the address led to. Process context; a client
/// waits up to half a minute for the server.
pub(crate) fn start(
    spec: &Spec,
    run_id: u32,
    attach: &dyn Fn(&Device, &Arc<Run>) -> Result,
) -> Result<Arc<Run>> {
    let waiter = Waiter::new()?;
    let ps = match spec.mode {
        QpType::Rc => PortSpace::Tcp,
        QpType::Ud => PortSpace::Udp,
    };
    let id = CmId::new(
        ps,
        Ev {
            waiter: waiter.clone(),
            conn: None,
        },
    )?;
    let r = if spec.mcast.is_some() {
        mcast::start(spec, run_id, id, &waiter, attach)
    } else if spec.role == Role::Server {
        server(spec, run_id, id, &waiter, attach)
    } else {
        client(spec, run_id, id, &waiter, attach)
    };
    // Nothing of a run that did not start is left behind.
    if r.is_err() {
        forget_run(&waiter);
    }
    r
}

/// Breaks the waiter's references to a run that is over (or never started), and frees the
/// ids and connections it still holds.
fn forget_run(waiter: &Waiter) {
    let taken = {
        let mut s = waiter.shared.lock();
        (
            s.run.take(),
            s.pd.take(),
            s.cq.take(),
            s.ud.take(),
            s.link.take(),
        )
    };
    drop(taken);
}

fn client(
    spec: &Spec,
    run_id: u32,
    id: CmId<Ev>,
    waiter: &Arc<Waiter>,
    attach: &dyn Fn(&Device, &Arc<Run>) -> Result,
) -> Result<Arc<Run>> {
    let to = spec.addr;
    id.resolve_addr(None, to, RESOLVE_MS)?;
    waiter
        .wait(Step::AddrResolved, RESOLVE_MS + 1000)
        .inspect_err(|e| pr_err!("start: cannot resolve {to}: {e:?}\n"))?;
    id.resolve_route(RESOLVE_MS)?;
    waiter
        .wait(Step::RouteResolved, RESOLVE_MS + 1000)
        .inspect_err(|e| pr_err!("start: no route to {to}: {e:?}\n"))?;
    let dev = id.device().ok_or(ENODEV)?;
    let pd = Pd::new(&dev)?;
    let (caps, entries) = match spec.mode {
        QpType::Rc => (ping_caps(), 16),
        QpType::Ud => {
            check_ud_size(spec, &dev.query_port(id.port())?)?;
            (
                QpCaps {
                    send_depth: spec.depth,
                    recv_depth: 1,
                    ..QpCaps::default()
                },
                spec.depth + 8,
            )
        }
    };
    let cq = spec.new_cq(&dev, entries)?;
    waiter.shared.lock().pd = Some(pd.clone());
    let qp = id.create_qp(&pd, &cq, &cq, &caps)?;
    // An RC run's connection: its receive is posted before the server can send.
    let run_conn = if spec.mode == QpType::Rc {
        let run = Run::new(spec, run_id, None, Res::new(pd.clone(), cq.clone()))?;
        let conn = Conn::new(&run, false, spec.size)?;
        conn.prepare(&qp, &pd)?;
        Some((run, conn))
    } else {
        None
    };
    let mut hello = [0u8; 8];
    hello[..4].copy_from_slice(MAGIC);
    hello[4..].copy_from_slice(&(spec.size as u32).to_le_bytes());
    // Whichever fails, the connect itself (a TCP connect under iWARP, which a signal to the
    // writer interrupts) or the wait, the connection's requests go: they hold it.
    let connected = id
        .connect(&ConnParam {
            private_data: &hello,
            ..ConnParam::default()
        })
        .and_then(|()| waiter.wait(Step::Established, CONNECT_MS));
    if let Err(e) = connected {
        pr_err!("start: cannot connect to {to}: {e:?}\n");
        if let Some((run, conn)) = run_conn {
            conn.teardown();
            drop(qp);
            run.finish();
        }
        return Err(e);
    }
    let qp = match qp.established() {
        Ok(qp) => qp,
        Err(e) => {
            if let Some((run, conn)) = run_conn {
                conn.teardown();
                run.finish();
            }
            return Err(e);
        }
    };
    let link = |conn| Link {
        id: Some(id),
        conn,
        sessions: KVec::new(),
    };
    let run = match run_conn {
        Some((run, conn)) => {
            // The run was built before the connection was up: its id goes in now.
            waiter.shared.lock().link = Some(link(Some(conn.clone())));
            run.attach(waiter.clone());
            waiter.shared.lock().run = Some(run.clone());
            let started = attach(&dev, &run).and_then(|()| {
                run.begin();
                conn.begin(qp, &cq)
            });
            if let Err(e) = started {
                pr_err!("start: run {run_id}: cannot start the pings: {e:?}\n");
                run.stop();
                run.finish();
                return Err(e);
            }
            run
        }
        None => {
            let Some((ah, qpn, qkey)) = waiter.shared.lock().ud.take() else {
                return Err(EINVAL);
            };
            waiter.shared.lock().link = Some(link(None));
            let res = Res {
                tx_qp: Some(Arc::new(qp, GFP_KERNEL)?),
                ah: Some(ah),
                ud_peer: Some((qpn, qkey)),
                attached: Some(waiter.clone()),
                ..Res::new(pd, cq.clone())
            };
            let run = Run::new(spec, run_id, None, res)?;
            waiter.shared.lock().run = Some(run.clone());
            if let Err(e) = attach(&dev, &run).and_then(|()| run.go()) {
                run.stop();
                run.finish();
                return Err(e);
            }
            pr_info!("run {run_id}: UD peer {to} is QP {qpn}\n");
            run
        }
    };
    pr_info!("run {run_id}: connected to {to} ({})\n", dev.name());
    Ok(run)
}
