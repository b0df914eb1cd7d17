// SPDX-License-Identifier: GPL-2.0

//! A run's data path: the requests that post themselves again from their completion handlers,
//! and the validation of what they move.
//!
//! A send-side request ([`Tx`]) carries `batch` messages, chained in one post with only the
//! last signaled: its completion stands for all of them. A ping-pong run instead keeps two
//! requests on each QP and pairs them with the messages to answer as they arrive ([`PpSlot`]).

use super::{
    now_ns,
    payload::{check, check_mr, fill, holds},
    target::Target,
    Run,
};
use crate::counters::Counters;
use crate::ctl::{Fault, Op, Role};
use core::sync::atomic::Ordering;
use kernel::prelude::*;
use kernel::rdma::{
    ah::Ah,
    cq::Wc,
    dma::DmaBuf,
    mr::Remote,
    qp::{Qp, QpType, Rts},
    wr::{Completion, RecvOps, SendOps, Wr, GRH_LEN},
};
use kernel::sync::Arc;

/// Whether target slot `slot` holds message `seq`.
fn check_slot(target: Option<&Target>, slot: usize, len: usize, seq: u64) -> bool {
    target
        .and_then(|t| t.slot(slot))
        .is_some_and(|(mr, off)| check_mr(mr, off, len, seq))
}

/// Which QP of a ping-pong run a request is on: the pinging one (the run's sender), or the one
/// that answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Ping,
    Pong,
}

impl Side {
    /// The target slot this side's RDMA WRITEs land in.
    fn slot(self) -> usize {
        match self {
            Side::Ping => 0,
            Side::Pong => 1,
        }
    }
}

/// A send-side request: its buffers (one per message of a post), and what it needs to post
/// itself again.
pub(crate) struct Tx {
    pub(super) bufs: KVec<DmaBuf>,
    pub(super) run: Arc<Run>,
    pub(super) qp: Arc<Qp<Rts>>,
    pub(super) ah: Option<Arc<Ah>>,
    pub(super) target: Option<Arc<Target>>,
    /// A client's RDMA target on the peer (its first slot), when it has no local one.
    pub(super) remote: Option<Remote>,
    pub(super) peer_qpn: u32,
    pub(super) qkey: u32,
    /// The first target slot of its messages (`slot .. slot + batch`).
    pub(super) slot: usize,
    /// The sequence number of its first message, and how many the last post carried.
    pub(super) seq: u64,
    pub(super) n: usize,
    pub(super) posted_ns: i64,
    /// Ping-pong runs: the QP it is on.
    pub(super) side: Option<Side>,
}

/// A receive request.
pub(super) struct Rx {
    pub(super) buf: DmaBuf,
    pub(super) run: Arc<Run>,
    pub(super) qp: Arc<Qp<Rts>>,
    /// Ping-pong runs: the QP it is on, and the target the other side WRITEs into.
    pub(super) side: Option<Side>,
    pub(super) target: Option<Arc<Target>>,
}

impl Rx {
    /// The scatter list of a receive: the whole buffer.
    pub(super) fn scatter<'a>(rx: &'a mut Rx, ops: &mut RecvOps<'a>) -> Result {
        let len = rx.buf.len();
        ops.buf(&mut rx.buf, 0..len)?;
        Ok(())
    }

    /// Posts `wr` again, unless the run is stopping.
    fn repost(wr: Wr<Self>, run: &Run) {
        if run.stopping() {
            return;
        }
        let qp = wr.data().qp.clone();
        if let Err(e) = qp.post_recv(wr, Rx::scatter) {
            if e.err != ESHUTDOWN {
                run.error(format_args!("post_recv: {:?}", e.err));
            }
        }
    }
}

/// Where a request's messages go: the peer's address and QP (UD), or the RDMA target (this
/// host's, or the peer's).
struct Dest<'a> {
    ah: Option<&'a Ah>,
    qpn: u32,
    qkey: u32,
    target: Option<&'a Target>,
    remote: Option<Remote>,
}

/// Adds message `seq`, from `buf`, to `ops`; an RDMA operation's goes to target slot `slot`.
fn add_message<'a>(
    ops: &mut SendOps<'a>,
    run: &Run,
    buf: &'a mut DmaBuf,
    dest: &Dest<'a>,
    slot: usize,
    seq: u64,
) -> Result {
    let spec = &run.spec;
    let size = spec.size;
    let remote = || {
        let mut r = match (dest.target, dest.remote) {
            (Some(t), _) => t.remote(slot)?,
            (None, Some(r)) => r.offset((slot * size) as u64),
            (None, None) => return Err(EINVAL),
        };
        if spec.fault == Fault::BadRkey {
            // The key byte of the rkey: the MR's index stays, its key no longer matches.
            r.rkey ^= 0xff;
        }
        Ok(r)
    };
    match (spec.mode, spec.op) {
        (QpType::Ud, Op::SendImm) => {
            let ah = dest.ah.ok_or(EINVAL)?;
            ops.send_ud_imm(buf, 0..size, ah, dest.qpn, dest.qkey, seq as u32)?;
        }
        (QpType::Ud, _) => {
            ops.send_ud(buf, 0..size, dest.ah.ok_or(EINVAL)?, dest.qpn, dest.qkey)?;
        }
        (_, Op::Send) if spec.inline => {
            ops.send_inline(buf, 0..size)?;
        }
        (_, Op::Send) => {
            ops.send(buf, 0..size)?;
        }
        (_, Op::SendImm) => {
            ops.send_imm(buf, 0..size, seq as u32)?;
        }
        // A ping-pong WRITE tells the other side with its immediate data.
        (_, Op::Write) if spec.pingpong => {
            ops.write_imm(buf, 0..size, remote()?, seq as u32)?;
        }
        (_, Op::Write) => {
            ops.write(buf, 0..size, remote()?)?;
        }
        (_, Op::Read) => {
            ops.read(buf, 0..size, remote()?)?;
        }
        // CM ping runs have their own requests (`cm.rs`).
        (_, Op::Ping) => return Err(EINVAL),
    }
    Ok(())
}

/// Readies `wr` to carry messages `seq .. seq + n`: their payloads (validated runs; READ
/// targets are filled when the run is built) and the time of the post.
fn prepare(wr: &mut Wr<Tx>, run: &Run, seq: u64, n: usize) {
    let spec = &run.spec;
    let t = wr.data_mut();
    t.seq = seq;
    t.n = n;
    if spec.validate && spec.op != Op::Read {
        // Messages to a receiver carry their sequence number; RDMA WRITEs are checked in
        // their slot, by position.
        let header = spec.op.uses_recv();
        for (j, buf) in t.bufs.iter_mut().enumerate().take(n) {
            fill(buf.as_mut_slice(), run.id, seq + j as u64, header);
        }
    }
    t.posted_ns = now_ns();
}

/// Posts the messages [`prepare`] readied, chained, on `qp`. On failure the run counts the
/// error (unless the QP is being drained) and the request is dropped; returns whether it was
/// posted.
fn post(wr: Wr<Tx>, run: &Run, qp: &Qp<Rts>) -> bool {
    let batch = run.spec.batch as usize;
    let posted = qp.post_send(wr, |t, ops| {
        let Tx {
            bufs,
            ah,
            target,
            remote,
            peer_qpn,
            qkey,
            slot,
            seq,
            n,
            side,
            ..
        } = t;
        let dest = Dest {
            ah: ah.as_deref(),
            qpn: *peer_qpn,
            qkey: *qkey,
            target: target.as_deref(),
            remote: *remote,
        };
        for (j, buf) in bufs.iter_mut().enumerate().take(*n) {
            let to = match side {
                // A ping-pong side WRITEs into its own slot of the shared target.
                Some(s) => s.slot(),
                None => *slot * batch + j,
            };
            add_message(ops, run, buf, &dest, to, *seq + j as u64)?;
        }
        Ok(())
    });
    match posted {
        Ok(()) => true,
        Err(e) => {
            if e.err != ESHUTDOWN {
                run.error(format_args!("post_send: {:?}", e.err));
            }
            false
        }
    }
}

/// Posts `wr` with the next messages, parks it while a paced run's receiver is behind
/// ([`Run::pace`]), or retires it when the run is over. Any context.
pub(super) fn post_next(wr: Wr<Tx>) {
    let run = wr.data().run.clone();
    let qp = wr.data().qp.clone();
    // A validated run posts in sequence order, which its receiver checks; otherwise claiming
    // sequence numbers is enough.
    let _order = run.spec.validate.then(|| run.posting.order.lock());
    let Some(mut wr) = run.pace(wr) else {
        return;
    };
    let claimed = if run.stopping() {
        None
    } else {
        run.claim(run.spec.batch)
    };
    let Some((seq, n)) = claimed else {
        drop(wr);
        run.retire();
        return;
    };
    prepare(&mut wr, &run, seq, n);
    if !post(wr, &run, &qp) {
        run.retire();
    }
}

/// Checks what the messages of a completed request left behind: RDMA WRITEs in their target
/// slots, RDMA READs in the request's buffers.
fn verify(t: &mut Tx, run: &Run) {
    let spec = &run.spec;
    let (size, batch) = (spec.size, spec.batch as usize);
    for j in 0..t.n {
        let (seq, slot) = (t.seq + j as u64, t.slot * batch + j);
        let ok = match spec.op {
            Op::Write => check_slot(t.target.as_deref(), slot, size, seq),
            Op::Read => t
                .bufs
                .get_mut(j)
                .is_some_and(|b| holds(b.as_slice(), 0, slot as u64)),
            _ => true,
        };
        if !ok {
            Counters::add(&run.counters.corrupt, 1);
            run.error(format_args!(
                "{} of message {seq} does not match",
                spec.op.name()
            ));
        }
    }
}

impl Completion for Tx {
    fn done(mut wr: Wr<Self>, wc: &Wc) {
        let run = wr.data().run.clone();
        let ok = run.completed(wc.status(), run.spec.op.name());
        if wr.data().side.is_some() {
            pp_sent(wr, &run, ok);
            return;
        }
        if !ok {
            drop(wr);
            run.retire();
            return;
        }
        let t = wr.data_mut();
        let lat = now_ns().saturating_sub(t.posted_ns);
        run.counters.latency(lat.max(0) as u64);
        let n = t.n as u64;
        Counters::add(&run.counters.messages, n);
        Counters::add(&run.counters.bytes, n * run.spec.size as u64);
        if run.spec.validate {
            verify(t, &run);
        }
        post_next(wr);
    }
}

/// Counts and checks a message that arrived (SEND, SEND_WITH_IMM) at the receiving QP.
fn received(r: &mut Rx, run: &Run, wc: &Wc) {
    let spec = &run.spec;
    let received = run.counters.received.fetch_add(1, Ordering::Relaxed) + 1;
    if spec.role == Role::Server && received == spec.count {
        run.receives_over();
    }
    if !spec.validate {
        run.rx_expected.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let skip = if spec.mode == QpType::Ud { GRH_LEN } else { 0 };
    let len = (wc.byte_len() as usize).saturating_sub(skip);
    let data = r.buf.as_slice().get(skip..skip + len).unwrap_or(&[]);
    let sender = (spec.role == Role::Loopback).then_some(run.id);
    let Some(seq) = check(data, sender).filter(|_| len == spec.size) else {
        Counters::add(&run.counters.corrupt, 1);
        run.error(format_args!("received a corrupt message ({len} bytes)"));
        return;
    };
    let seq = u64::from(seq);
    if spec.op == Op::SendImm && wc.imm_data() != Some(seq as u32) {
        Counters::add(&run.counters.corrupt, 1);
        run.error(format_args!("message {seq}: immediate {:?}", wc.imm_data()));
    }
    let want = run.rx_expected.load(Ordering::Relaxed);
    if seq >= want {
        Counters::add(&run.counters.lost, seq - want);
        run.rx_expected.store(seq + 1, Ordering::Relaxed);
    } else {
        Counters::add(&run.counters.dup, 1);
    }
}

impl Completion for Rx {
    fn done(mut wr: Wr<Self>, wc: &Wc) {
        let run = wr.data().run.clone();
        let side = wr.data().side;
        if !run.completed(wc.status(), "receive") {
            match side {
                Some(_) => run.pp_end(),
                // A server ends with its receives: none will arrive any more.
                None if run.spec.role == Role::Server => run.receives_over(),
                None => {}
            }
            return;
        }
        match side {
            Some(side) => pp_received(wr.data_mut(), &run, side, wc),
            None => received(wr.data_mut(), &run, wc),
        }
        Rx::repost(wr, &run);
        run.receive_returned();
    }
}

/// One side of a ping-pong run: its send requests that are back from the device, and the
/// messages it owes (that arrived while none was back), with the sequence number of the last.
pub(crate) struct PpSlot {
    free: [Option<Wr<Tx>>; 2],
    owed: u32,
    seq: u64,
}

impl PpSlot {
    pub(super) fn new() -> Self {
        Self {
            free: [None, None],
            owed: 0,
            seq: 0,
        }
    }

    fn take(&mut self) -> Option<Wr<Tx>> {
        self.free.iter_mut().find_map(Option::take)
    }

    /// Keeps `wr`; gives it back if there is no room.
    pub(super) fn put(&mut self, wr: Wr<Tx>) -> Option<Wr<Tx>> {
        match self.free.iter_mut().find(|f| f.is_none()) {
            Some(f) => {
                *f = Some(wr);
                None
            }
            None => Some(wr),
        }
    }

    /// Gives up the requests it keeps (the run is over).
    pub(super) fn clear(&mut self) -> [Option<Wr<Tx>>; 2] {
        core::mem::take(&mut self.free)
    }
}

/// Side `side` of a ping-pong owes message `seq`: sends it now with a request that is back, or
/// as soon as one comes back.
fn pp_owe(run: &Run, side: Side, seq: u64) {
    if run.stopping() {
        run.pp_end();
        return;
    }
    let wr = {
        let mut s = run.pp(side).lock();
        let wr = s.take();
        if wr.is_none() {
            s.owed += 1;
            s.seq = seq;
        }
        wr
    };
    if let Some(wr) = wr {
        pp_send(wr, run, seq);
    }
}

/// Sends message `seq` from a ping-pong side.
pub(super) fn pp_send(mut wr: Wr<Tx>, run: &Run, seq: u64) {
    let qp = wr.data().qp.clone();
    prepare(&mut wr, run, seq, 1);
    if wr.data().side == Some(Side::Ping) {
        run.pp.ping_ns.store(wr.data().posted_ns, Ordering::Relaxed);
    }
    if !post(wr, run, &qp) {
        run.pp_end();
    }
}

/// A ping-pong side's send request is back: it answers what the side owes, or waits for it.
fn pp_sent(wr: Wr<Tx>, run: &Run, ok: bool) {
    let Some(side) = wr.data().side.filter(|_| ok && !run.stopping()) else {
        drop(wr);
        run.pp_end();
        return;
    };
    let (send, extra) = {
        let mut s = run.pp(side).lock();
        if s.owed > 0 {
            s.owed -= 1;
            (Some((wr, s.seq)), None)
        } else {
            (None, s.put(wr))
        }
    };
    // Two requests per side: there is always room for the one that came back.
    drop(extra);
    if let Some((wr, seq)) = send {
        pp_send(wr, run, seq);
    }
}

/// A ping (at the answering side) or its answer (at the pinging side) arrived.
fn pp_received(r: &mut Rx, run: &Run, side: Side, wc: &Wc) {
    let spec = &run.spec;
    // What this side waits for: the next ping, or the answer to the ping in flight.
    let want = match side {
        Side::Pong => run.rx_expected.load(Ordering::Relaxed),
        Side::Ping => Counters::get(&run.counters.messages),
    };
    let from = match side {
        Side::Pong => Side::Ping,
        Side::Ping => Side::Pong,
    };
    let intact = !spec.validate
        || match spec.op {
            Op::Write => {
                wc.imm_data() == Some(want as u32)
                    && check_slot(r.target.as_deref(), from.slot(), spec.size, want)
            }
            _ => {
                let len = wc.byte_len() as usize;
                let data = r.buf.as_slice().get(..len).unwrap_or(&[]);
                len == spec.size && check(data, Some(run.id)) == Some(want as u32)
            }
        };
    if !intact {
        Counters::add(&run.counters.corrupt, 1);
        run.error(format_args!("ping-pong message {want} does not match"));
        run.stop();
        run.pp_end();
        return;
    }
    match side {
        Side::Pong => {
            Counters::add(&run.counters.received, 1);
            run.rx_expected.store(want + 1, Ordering::Relaxed);
            pp_owe(run, Side::Pong, want);
        }
        Side::Ping => {
            let rtt = now_ns().saturating_sub(run.pp.ping_ns.load(Ordering::Relaxed));
            run.counters.latency(rtt.max(0) as u64);
            Counters::add(&run.counters.messages, 1);
            Counters::add(&run.counters.bytes, spec.size as u64);
            if want + 1 >= spec.count {
                run.pp_end();
            } else {
                pp_owe(run, Side::Ping, want + 1);
            }
        }
    }
}
