// SPDX-License-Identifier: GPL-2.0

//! The control language of `/sys/kernel/debug/rdma_rust_ulp/ctl`.
//!
//! One command per write:
//!
//! - `start key=value ...` starts a run (keys below); `dev=` is required.
//! - `stop id=N` / `stop all` stops runs and frees what they hold.
//! - `wait id=N` / `wait all` waits until runs have ended, then frees what they hold.
//! - `clear` forgets the statistics of ended runs.
//! - `connect id=N peer=QPN:GID:PSN` connects the QP of an RC server run to its client.
//! - `go id=N [remote=ADDR:RKEY:LEN]` starts the sends of a client run started with `hold=1`; an
//!   RDMA client (`op=write|read`) gets the server's target here (its `target` line in `stats`).
//!
//! Runs over the RDMA connection manager find their peer by IP address instead:
//! `start cm=server addr=IP port=N ...` listens on a local address (of an RDMA device's
//! netdev: the run belongs to that device), `start cm=client addr=IP port=N ...` connects to a
//! server. With `mode=rc` (op `ping`, the default) they speak rping's protocol, and work with
//! `rping -s` / `rping -c` as the other side; with `mode=ud` the client sends datagrams
//! (`op=send|send_imm`) to the server's QP, found by the CM's SIDR exchange. A client's `size`
//! is the ping's buffer, a server's the largest buffer it accepts.
//!
//! Keys of `start`: `mode=rc|ud`, `op=send|send_imm|write|read`, `size=N` (bytes),
//! `count=N` (messages), `depth=N` (requests in flight), `dev=NAME`,
//! `poll=softirq|workqueue|direct`, `pool=0|1` (the run's CQ is a share of the device's CQ
//! pool, `ib_cq_pool_get`, instead of its own), `validate=0|1`, `wait=0|1`,
//! `role=loopback|server|client`, `peer=QPN:GID:PSN` (client), `hold=0|1` (client),
//! `cm=server|client`, `addr=A.B.C.D` or `addr=X:X::X[%SCOPE]` (IPv6; a link-local address
//! needs its interface index as scope), `port=N` (CM runs), `mcast=GROUP` (UD CM runs: the
//! server receives what is sent to the multicast group, the client sends to it; both join
//! it from their local `addr=`).
//!
//! Keys for the fault suite: `fault=bad_rkey` (RC WRITE/READ with an rkey the target does
//! not have), `fault=bad_qkey|bad_qpn` (UD datagrams with the wrong Q_Key, or to a QP number
//! nobody has), `cq=N` (the run's CQ gets N entries: too few for the run's queues, and it is
//! refused when its QPs are created). `fail id=N` / `fail all` forces the QPs of runs into the
//! error state.
//!
//! Keys that shape the data path: `batch=N` (1..=8; N messages per post, chained, only the
//! last signaled; must divide `depth`), `inline=0|1` (RC SEND: the driver copies the message
//! at post time; the size must fit the QP's inline limit), `pingpong=0|1` (an RC loopback
//! run that sends one message at a time and waits for the answer: the other QP sends it
//! back as soon as it arrives; `op=send` bounces SENDs, `op=write` RDMA WRITEs with immediate
//! data; the latency columns are round trips), `spin=0|1` (with `poll=direct`: the writer
//! busy-polls the CQ, yielding only to tasks waiting for its CPU, instead of sleeping 1 ms
//! whenever it finds nothing; the lowest latency, at the price of a CPU).
//!
//! A `loopback` run (the default) connects two QPs of the device: by hand, or on iWARP (whose
//! QPs only the connection manager connects, and which has no UD) through rdma_cm, a client id
//! to a listener on the port's IPv4 address. A run between two hosts is
//! a `server` on one (it receives; its endpoint is listed in `stats`) and a `client` on the
//! other, started with the server's endpoint; for RC the server is then connected to the
//! client's endpoint, and the client (held until then) is let go. With `op=write|read` the
//! server is the RDMA target: it registers its target when it is connected and lists it in
//! `stats`; the client, started with `hold=1`, gets it with `go`. Such a server run ends when
//! it is stopped; a WRITE client cannot check what lands on the peer (`validate=0`).
//!
//! Parsing only checks syntax and ranges that do not depend on the device; the device's own
//! limits are checked when the run is built. Every rejection says why in the kernel log.

use kernel::debugfs::command::{parse_size, words, Escaped};
use kernel::prelude::*;
use kernel::rdma::{
    cm::{SockAddr, SockAddrV4},
    cq::{Cq, PollContext},
    device::Device,
    qp::{Endpoint, QpType},
};
use kernel::sync::Arc;

use crate::wait::Pace;

mod addr;
mod check;

use addr::{parse_endpoint, parse_remote};
pub(crate) use addr::{PeerTarget, ShowEndpoint};
use check::{check_cm, check_fault, check_pingpong};

/// Which QPs of a run are on this host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// Both: two QPs of one device.
    Loopback,
    /// The receiving QP; the sender is on another host.
    Server,
    /// The sending QP; the receiver is on another host.
    Client,
}

impl Role {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Role::Loopback => "loopback",
            Role::Server => "server",
            Role::Client => "client",
        }
    }
}

/// What a run sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Send,
    SendImm,
    Write,
    Read,
    /// rping's round trip (CM RC runs): advertise, RDMA READ, go ahead, RDMA WRITE, go ahead.
    Ping,
}

impl Op {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Op::Send => "send",
            Op::SendImm => "send_imm",
            Op::Write => "write",
            Op::Read => "read",
            Op::Ping => "ping",
        }
    }

    /// Whether it is an RDMA operation (it needs a target).
    pub(crate) fn is_rdma(self) -> bool {
        matches!(self, Op::Write | Op::Read)
    }

    /// Whether the peer posts receives for it.
    pub(crate) fn uses_recv(self) -> bool {
        matches!(self, Op::Send | Op::SendImm)
    }
}

pub(crate) fn mode_name(m: QpType) -> &'static str {
    match m {
        QpType::Rc => "rc",
        QpType::Ud => "ud",
    }
}

/// Bytes of the sequence header of a validated message (see [`crate::run`]): a validated
/// message that the peer receives is at least this long.
pub(crate) const HEADER: usize = 8;
/// Largest message count of one run.
pub(crate) const MAX_COUNT: u64 = 1 << 32;
/// Largest depth of one run.
pub(crate) const MAX_DEPTH: u32 = 1024;
/// Most messages one post chains (`batch=`): the operations one work request carries.
pub(crate) const MAX_BATCH: u32 = kernel::rdma::wr::MAX_OPS as u32;
/// The most CQ entries `cq=` asks for.
pub(crate) const MAX_CQ: u32 = 65536;
/// Longest device name.
const DEV_MAX: usize = 63;

/// A run as the control string describes it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Spec {
    pub(crate) mode: QpType,
    pub(crate) op: Op,
    pub(crate) size: usize,
    pub(crate) count: u64,
    pub(crate) depth: u32,
    pub(crate) dev: [u8; DEV_MAX + 1],
    pub(crate) dev_len: usize,
    pub(crate) poll: PollContext,
    /// The run's CQ comes from the device's CQ pool.
    pub(crate) pool: bool,
    pub(crate) validate: bool,
    pub(crate) wait: bool,
    pub(crate) role: Role,
    pub(crate) peer: Option<Endpoint>,
    pub(crate) hold: bool,
    /// A run over the connection manager (its role is `role`: server or client).
    pub(crate) cm: bool,
    /// CM runs: the address to listen on (server) or connect to (client); with `mcast`, the
    /// local address either role binds to.
    pub(crate) addr: SockAddr,
    /// UD CM runs: the multicast group the server receives from and the client sends to.
    pub(crate) mcast: Option<SockAddr>,
    /// Messages per post (chained; only the last one signaled).
    pub(crate) batch: u32,
    /// RC SENDs are posted inline.
    pub(crate) inline: bool,
    /// One message at a time, answered by the other QP (round-trip latency).
    pub(crate) pingpong: bool,
    /// `poll=direct`: the writer busy-polls the CQ instead of sleeping between polls.
    pub(crate) spin: bool,
    /// The fault the run injects.
    pub(crate) fault: Fault,
    /// The CQ's entries, when given (`cq=N`): the run is refused if they are too few.
    pub(crate) cq: Option<u32>,
}

impl Spec {
    /// How the writer of a `poll=direct` run waits for it.
    pub(crate) fn pace(&self) -> Pace {
        if self.spin {
            Pace::Spin
        } else {
            Pace::Sleep
        }
    }

    /// The receives the receiving QP of a run (not a ping-pong) keeps posted. RC waits for one
    /// (RNR retry), but a UD datagram that finds none is dropped: up to `depth` datagrams are
    /// in flight, and rxe's responder may hold back more while the sender's completions keep
    /// coming, then consume receives faster than the handler gives them back. With twice the
    /// depth a loaded host lost 21 of 300 datagrams: UD keeps four times the depth (perftest
    /// keeps 512), and a validated loopback run also paces its sends by them (`Run::paced`).
    pub(crate) fn receives(&self) -> u32 {
        match (self.op.uses_recv(), self.mode) {
            (false, _) => 1,
            (true, QpType::Ud) => 4 * self.depth,
            (true, _) => 2 * self.depth,
        }
    }

    /// The device name as given.
    pub(crate) fn dev(&self) -> &[u8] {
        &self.dev[..self.dev_len]
    }

    /// The run's CQ of at least `entries` entries on `dev`: its own, or a share of the
    /// device's pool (`pool=1`).
    pub(crate) fn new_cq(&self, dev: &Device, entries: u32) -> Result<Arc<Cq>> {
        let entries = self.cq.unwrap_or(entries);
        if self.pool {
            Cq::from_pool(dev, entries, None, self.poll)
        } else {
            Cq::new(dev, entries, 0, self.poll)
        }
    }
}

/// Which runs a `stop` or `wait` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    All,
    Id(u32),
}

/// One parsed command.
pub(crate) enum Command {
    Start(Spec),
    Stop(Target),
    Wait(Target),
    Clear,
    Connect(u32, Endpoint),
    Go(u32, Option<PeerTarget>),
    /// Forces the QPs of runs into the error state (the fault suite's "QP error mid-run").
    Fail(Target),
}

/// A fault a run injects (`fault=`), for the fault suite: what a peer with a stale rkey, or
/// a datagram to the wrong QP or with the wrong Q_Key, does to a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    None,
    /// RC WRITE/READ: every request carries an rkey the target does not have.
    BadRkey,
    /// UD: every datagram carries a Q_Key the receiver does not have.
    BadQkey,
    /// UD: every datagram goes to a QP number nobody has.
    BadQpn,
}

/// Defaults of a run (the module parameters, checked at load).
#[derive(Clone, Copy)]
pub(crate) struct Defaults {
    pub(crate) depth: u32,
    pub(crate) poll: PollContext,
}

/// The poll context a run may ask for by name: any but the unbound workqueue.
pub(crate) fn parse_poll(v: &[u8]) -> Option<PollContext> {
    PollContext::from_name(v).filter(|p| *p != PollContext::UnboundWorkqueue)
}

fn bad(what: core::fmt::Arguments<'_>) -> Error {
    pr_err!("ctl: {}\n", what);
    EINVAL
}

fn parse_target(words: &mut dyn Iterator<Item = &[u8]>, cmd: &str) -> Result<Target> {
    let t = match words.next() {
        Some(b"all") => Target::All,
        Some(w) if w.starts_with(b"id=") => {
            let id = parse_size(&w[3..])
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| bad(format_args!("{cmd}: bad run id '{}'", Escaped(&w[3..]))))?;
            Target::Id(id)
        }
        Some(w) => {
            return Err(bad(format_args!(
                "{cmd}: expected id=N or all, got '{}'",
                Escaped(w)
            )))
        }
        None => return Err(bad(format_args!("{cmd}: expected id=N or all"))),
    };
    if let Some(w) = words.next() {
        return Err(bad(format_args!("{cmd}: unexpected '{}'", Escaped(w))));
    }
    Ok(t)
}

/// The key of a `key=value` word (the whole word if it has no `=`).
fn key_of(w: &[u8]) -> &[u8] {
    w.split(|&c| c == b'=').next().unwrap_or(w)
}

/// Parses one command.
pub(crate) fn parse(input: &[u8], d: &Defaults) -> Result<Command> {
    let mut words = words(input);
    let cmd = words
        .next()
        .ok_or_else(|| bad(format_args!("empty command")))?;
    match cmd {
        b"stop" => return Ok(Command::Stop(parse_target(&mut words, "stop")?)),
        b"wait" => return Ok(Command::Wait(parse_target(&mut words, "wait")?)),
        b"fail" => return Ok(Command::Fail(parse_target(&mut words, "fail")?)),
        b"clear" => {
            if let Some(w) = words.next() {
                return Err(bad(format_args!("clear: unexpected '{}'", Escaped(w))));
            }
            return Ok(Command::Clear);
        }
        b"connect" | b"go" => return parse_connect_go(cmd, &mut words),
        b"start" => {}
        _ => {
            return Err(bad(format_args!(
                "unknown command '{}' (start, stop, wait, clear, connect, go, fail)",
                Escaped(cmd)
            )))
        }
    }
    let mut s = Spec {
        mode: QpType::Rc,
        op: Op::Send,
        size: 4096,
        count: 1000,
        depth: d.depth,
        dev: [0; DEV_MAX + 1],
        dev_len: 0,
        poll: d.poll,
        pool: false,
        validate: true,
        wait: false,
        role: Role::Loopback,
        peer: None,
        hold: false,
        cm: false,
        addr: SockAddr::V4(SockAddrV4 {
            ip: [0; 4],
            port: 0,
        }),
        mcast: None,
        batch: 1,
        inline: false,
        pingpong: false,
        spin: false,
        fault: Fault::None,
        cq: None,
    };
    let (mut op_given, mut size_given, mut role_given, mut addr_given) =
        (false, false, false, false);
    let mut depth_given = false;
    let keys = words.clone();
    for (i, w) in words.enumerate() {
        let Some(eq) = w.iter().position(|&c| c == b'=') else {
            return Err(bad(format_args!(
                "start: '{}' is not key=value",
                Escaped(w)
            )));
        };
        let (k, v) = (&w[..eq], &w[eq + 1..]);
        // A command is at most a page: comparing with the keys before is cheap enough.
        if keys.clone().take(i).any(|p| key_of(p) == k) {
            return Err(bad(format_args!("start: {}= is given twice", Escaped(k))));
        }
        let num = |lo: u64, hi: u64| {
            parse_size(v)
                .filter(|n| (lo..=hi).contains(n))
                .ok_or_else(|| {
                    bad(format_args!(
                        "start: {}={} is not a number in {lo}..={hi}",
                        Escaped(k),
                        Escaped(v)
                    ))
                })
        };
        let flag = || match v {
            b"0" => Ok(false),
            b"1" => Ok(true),
            _ => Err(bad(format_args!(
                "start: {}={} (0 or 1)",
                Escaped(k),
                Escaped(v)
            ))),
        };
        match k {
            b"mode" => {
                s.mode = match v {
                    b"rc" => QpType::Rc,
                    b"ud" => QpType::Ud,
                    _ => return Err(bad(format_args!("start: mode={} (rc or ud)", Escaped(v)))),
                }
            }
            b"op" => {
                op_given = true;
                s.op = match v {
                    b"send" => Op::Send,
                    b"send_imm" => Op::SendImm,
                    b"write" => Op::Write,
                    b"read" => Op::Read,
                    b"ping" => Op::Ping,
                    _ => {
                        return Err(bad(format_args!(
                            "start: op={} (send, send_imm, write, read or ping)",
                            Escaped(v)
                        )))
                    }
                }
            }
            b"size" => {
                size_given = true;
                s.size = num(1, 1 << 30)? as usize
            }
            b"count" => s.count = num(1, MAX_COUNT)?,
            b"depth" => {
                depth_given = true;
                s.depth = num(1, u64::from(MAX_DEPTH))? as u32
            }
            b"batch" => s.batch = num(1, u64::from(MAX_BATCH))? as u32,
            b"inline" => s.inline = flag()?,
            b"pingpong" => s.pingpong = flag()?,
            b"spin" => s.spin = flag()?,
            b"fault" => {
                s.fault = match v {
                    b"none" => Fault::None,
                    b"bad_rkey" => Fault::BadRkey,
                    b"bad_qkey" => Fault::BadQkey,
                    b"bad_qpn" => Fault::BadQpn,
                    _ => {
                        return Err(bad(format_args!(
                            "start: fault={} (none, bad_rkey, bad_qkey or bad_qpn)",
                            Escaped(v)
                        )))
                    }
                }
            }
            b"cq" => s.cq = Some(num(1, u64::from(MAX_CQ))? as u32),
            b"dev" => {
                if v.is_empty() || v.len() > DEV_MAX {
                    return Err(bad(format_args!("start: bad device name '{}'", Escaped(v))));
                }
                s.dev[..v.len()].copy_from_slice(v);
                s.dev_len = v.len();
            }
            b"poll" => {
                s.poll = parse_poll(v).ok_or_else(|| {
                    bad(format_args!(
                        "start: poll={} (softirq, workqueue or direct)",
                        Escaped(v)
                    ))
                })?
            }
            b"pool" => s.pool = flag()?,
            b"validate" => s.validate = flag()?,
            b"wait" => s.wait = flag()?,
            b"hold" => s.hold = flag()?,
            b"role" => {
                role_given = true;
                s.role = match v {
                    b"loopback" => Role::Loopback,
                    b"server" => Role::Server,
                    b"client" => Role::Client,
                    _ => {
                        return Err(bad(format_args!(
                            "start: role={} (loopback, server or client)",
                            Escaped(v)
                        )))
                    }
                }
            }
            b"peer" => {
                s.peer = Some(parse_endpoint(v).ok_or_else(|| {
                    bad(format_args!(
                        "start: peer={} is not QPN:GID:PSN",
                        Escaped(v)
                    ))
                })?)
            }
            b"cm" => {
                s.cm = true;
                s.role = match v {
                    b"server" => Role::Server,
                    b"client" => Role::Client,
                    _ => {
                        return Err(bad(format_args!(
                            "start: cm={} (server or client)",
                            Escaped(v)
                        )))
                    }
                }
            }
            b"addr" => {
                addr_given = true;
                s.addr = SockAddr::parse(v, s.addr.port()).ok_or_else(|| {
                    bad(format_args!(
                        "start: addr={} is not an IPv4 or IPv6 address (A.B.C.D, X:X::X[%SCOPE])",
                        Escaped(v)
                    ))
                })?;
            }
            b"mcast" => {
                s.mcast = Some(
                    SockAddr::parse(v, 0)
                        .filter(SockAddr::is_multicast)
                        .ok_or_else(|| {
                            bad(format_args!(
                                "start: mcast={} is not a multicast group (224.0.0.0/4, ff00::/8)",
                                Escaped(v)
                            ))
                        })?,
                );
            }
            b"port" => s.addr = s.addr.with_port(num(1, 65535)? as u16),
            _ => return Err(bad(format_args!("start: unknown key '{}'", Escaped(k)))),
        }
    }
    if s.pool && s.poll == PollContext::Direct {
        return Err(bad(format_args!(
            "start: pool=1 needs poll=softirq or workqueue (the core polls pool CQs)"
        )));
    }
    check_fault(&s)?;
    if s.spin && s.poll != PollContext::Direct {
        return Err(bad(format_args!(
            "start: spin=1 needs poll=direct (the writer busy-polls the run's CQ)"
        )));
    }
    if s.mcast.is_some() && !(s.cm && s.mode == QpType::Ud) {
        return Err(bad(format_args!(
            "start: mcast= is for cm= runs with mode=ud"
        )));
    }
    if s.pingpong {
        // One message at a time, unless told otherwise (and then refused below).
        if !depth_given {
            s.depth = 1;
        }
        check_pingpong(&s)?;
    }
    if s.depth.checked_rem(s.batch) != Some(0) {
        return Err(bad(format_args!(
            "start: batch={} must divide depth={} (whole posts in flight)",
            s.batch, s.depth
        )));
    }
    if s.inline && !(s.mode == QpType::Rc && s.op == Op::Send) {
        return Err(bad(format_args!("start: inline=1 is for mode=rc op=send")));
    }
    if s.cm {
        return check_cm(s, op_given, size_given, role_given, addr_given);
    }
    if addr_given || s.addr.port() != 0 || s.op == Op::Ping {
        return Err(bad(format_args!(
            "start: addr=, port= and op=ping are for cm= runs"
        )));
    }
    if s.dev_len == 0 {
        return Err(bad(format_args!("start: dev= is required")));
    }
    if s.mode == QpType::Ud && !s.op.uses_recv() {
        return Err(bad(format_args!(
            "start: op={} needs mode=rc (UD has no RDMA)",
            s.op.name()
        )));
    }
    if (s.role == Role::Client) != s.peer.is_some() {
        return Err(bad(format_args!(
            "start: peer= is for role=client, which needs it"
        )));
    }
    if s.role != Role::Loopback && s.poll == PollContext::Direct {
        return Err(bad(format_args!(
            "start: poll=direct is for role=loopback (the writer polls until the run ends)"
        )));
    }
    if s.hold && s.role != Role::Client {
        return Err(bad(format_args!("start: hold=1 is for role=client")));
    }
    if s.role == Role::Client && s.op.is_rdma() && !s.hold {
        return Err(bad(format_args!(
            "start: role=client op={} needs hold=1 (the server's target comes with go)",
            s.op.name()
        )));
    }
    if s.role == Role::Client && s.op == Op::Write && s.validate {
        return Err(bad(format_args!(
            "start: role=client op=write writes the peer's memory, which it cannot check (validate=0)"
        )));
    }
    if s.validate && s.op.uses_recv() && s.size < HEADER {
        return Err(bad(format_args!(
            "start: validate=1 needs size>={} (sequence header)",
            HEADER
        )));
    }
    Ok(Command::Start(s))
}

impl Fault {
    /// How a run's start line shows it: nothing for no fault.
    pub(crate) fn shown(self) -> &'static str {
        match self {
            Fault::None => "",
            Fault::BadRkey => " fault=bad_rkey",
            Fault::BadQkey => " fault=bad_qkey",
            Fault::BadQpn => " fault=bad_qpn",
        }
    }
}

fn parse_connect_go(cmd: &[u8], words: &mut dyn Iterator<Item = &[u8]>) -> Result<Command> {
    let name = if cmd == b"go" { "go" } else { "connect" };
    let mut id = None;
    let mut peer = None;
    let mut remote = None;
    for w in words {
        if let Some(v) = w.strip_prefix(b"id=") {
            id = Some(
                parse_size(v)
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| bad(format_args!("{name}: bad run id '{}'", Escaped(v))))?,
            );
        } else if let (Some(v), "connect") = (w.strip_prefix(b"peer="), name) {
            peer = Some(parse_endpoint(v).ok_or_else(|| {
                bad(format_args!(
                    "connect: peer={} is not QPN:GID:PSN",
                    Escaped(v)
                ))
            })?);
        } else if let (Some(v), "go") = (w.strip_prefix(b"remote="), name) {
            remote = Some(parse_remote(v).ok_or_else(|| {
                bad(format_args!(
                    "go: remote={} is not ADDR:RKEY:LEN (hex)",
                    Escaped(v)
                ))
            })?);
        } else {
            return Err(bad(format_args!("{name}: unexpected '{}'", Escaped(w))));
        }
    }
    let id = id.ok_or_else(|| bad(format_args!("{name}: id= is required")))?;
    match (name, peer) {
        ("go", _) => Ok(Command::Go(id, remote)),
        (_, Some(p)) => Ok(Command::Connect(id, p)),
        _ => Err(bad(format_args!("connect: peer= is required"))),
    }
}
