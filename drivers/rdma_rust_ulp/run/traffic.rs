// SPDX-License-Identifier: GPL-2.0

//! A run's data path: the requests that post themselves again from their completion handlers,
//! and the validation of what they move.

use super::{now_ns, Run};
use crate::ctl::{Op, Role, HEADER};
use crate::stats::Stats;
use core::sync::atomic::Ordering;
use kernel::prelude::*;
use kernel::rdma::{
    ah::Ah,
    cq::Wc,
    dma::DmaBuf,
    mr::{Mr, Remote},
    qp::{Qp, QpType, Rts},
    wr::{Completion, RecvOps, Wr, GRH_LEN},
};
use kernel::sync::Arc;

/// Byte `i` of message `seq`.
pub(super) fn pattern(seq: u64, i: usize) -> u8 {
    (seq as usize).wrapping_mul(31).wrapping_add(i) as u8 ^ 0xa5
}

/// Writes message `seq` of run `id` into `buf`: the pattern, under a header when `header`
/// (messages to a receiver; RDMA WRITEs are checked in place by position, without one).
fn fill(buf: &mut [u8], id: u32, seq: u64, header: bool) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = pattern(seq, i);
    }
    if header && buf.len() >= HEADER {
        buf[..4].copy_from_slice(&(seq as u32).to_le_bytes());
        buf[4..8].copy_from_slice(&id.to_le_bytes());
    }
}

/// The sequence number of a validated message of run `id` (of any run if `None`: the sender
/// is on another host), if it is intact.
fn check(buf: &[u8], id: Option<u32>) -> Option<u32> {
    let seq = u32::from_le_bytes(buf.get(..4)?.try_into().ok()?);
    let run = u32::from_le_bytes(buf.get(4..8)?.try_into().ok()?);
    let ok = id.map_or(true, |id| run == id)
        && buf
            .iter()
            .enumerate()
            .skip(HEADER)
            .all(|(i, &b)| b == pattern(u64::from(seq), i));
    ok.then_some(seq)
}

/// Whether bytes `off .. off + len` of `mr` hold message `seq` (with no header: RDMA target).
fn check_mr(mr: &Mr, off: usize, len: usize, seq: u64) -> bool {
    let mut chunk = [0u8; 128];
    let mut done = 0;
    while done < len {
        let n = (len - done).min(chunk.len());
        if mr.read(off + done, &mut chunk[..n]).is_err() {
            return false;
        }
        if !chunk[..n]
            .iter()
            .enumerate()
            .all(|(i, &b)| b == pattern(seq, done + i))
        {
            return false;
        }
        done += n;
    }
    true
}

/// A send-side request: its buffer, and what it needs to post itself again.
pub(crate) struct Tx {
    pub(super) buf: DmaBuf,
    pub(super) run: Arc<Run>,
    pub(super) qp: Arc<Qp<Rts>>,
    pub(super) ah: Option<Arc<Ah>>,
    pub(super) target: Option<Arc<Mr>>,
    pub(super) remote: Remote,
    pub(super) peer_qpn: u32,
    pub(super) qkey: u32,
    pub(super) slot: usize,
    pub(super) seq: u64,
    pub(super) posted_ns: i64,
}

/// A receive request.
pub(super) struct Rx {
    pub(super) buf: DmaBuf,
    pub(super) run: Arc<Run>,
    pub(super) qp: Arc<Qp<Rts>>,
}

impl Rx {
    /// The scatter list of a receive: the whole buffer.
    pub(super) fn scatter<'a>(rx: &'a mut Rx, ops: &mut RecvOps<'a>) -> Result {
        let len = rx.buf.len();
        ops.buf(&mut rx.buf, 0..len)?;
        Ok(())
    }
}

/// Posts `wr` with the next sequence number, or retires it when the run is over. Any context.
pub(super) fn post_next(mut wr: Wr<Tx>) {
    let run = wr.data().run.clone();
    let qp = wr.data().qp.clone();
    let spec = &run.spec;
    let _order = run.post_lock.lock();
    let seq = run.next_seq.load(Ordering::Relaxed);
    if run.stopping.load(Ordering::Acquire) || seq >= spec.count {
        drop(wr);
        run.retire();
        return;
    }
    run.next_seq.store(seq + 1, Ordering::Relaxed);
    {
        let t = wr.data_mut();
        t.seq = seq;
        if spec.validate && spec.op != Op::Read {
            fill(t.buf.as_mut_slice(), run.id, seq, spec.op.uses_recv());
        }
        t.posted_ns = now_ns();
    }
    let size = spec.size;
    let (op, mode) = (spec.op, spec.mode);
    let posted = qp.post_send(wr, |t, ops| {
        let at = t.remote.offset((t.slot * size) as u64);
        match (mode, op) {
            (QpType::Ud, Op::SendImm) => {
                let ah = t.ah.as_deref().ok_or(EINVAL)?;
                ops.send_ud_imm(&t.buf, 0..size, ah, t.peer_qpn, t.qkey, t.seq as u32)?;
            }
            (QpType::Ud, _) => {
                let ah = t.ah.as_deref().ok_or(EINVAL)?;
                ops.send_ud(&t.buf, 0..size, ah, t.peer_qpn, t.qkey)?;
            }
            (_, Op::Send) => {
                ops.send(&t.buf, 0..size)?;
            }
            (_, Op::SendImm) => {
                ops.send_imm(&t.buf, 0..size, t.seq as u32)?;
            }
            (_, Op::Write) => {
                ops.write(&t.buf, 0..size, at)?;
            }
            (_, Op::Read) => {
                ops.read(&mut t.buf, 0..size, at)?;
            }
            // CM ping runs have their own requests (`cm.rs`).
            (_, Op::Ping) => return Err(EINVAL),
        }
        Ok(())
    });
    if let Err(e) = posted {
        if e.err != ESHUTDOWN {
            run.error(format_args!("post_send: {:?}", e.err));
        }
        drop(e.wr);
        run.retire();
    }
}

impl Completion for Tx {
    fn done(mut wr: Wr<Self>, wc: &Wc) {
        let t = wr.data_mut();
        let run = t.run.clone();
        if run.stats.completion(wc.status()) {
            run.error(format_args!(
                "{} {} completed with {:?}",
                crate::ctl::mode_name(run.spec.mode),
                run.spec.op.name(),
                wc.status()
            ));
            // An error moves an RC QP to the error state: the run cannot go on.
            run.stop();
        }
        if !wc.is_ok() {
            drop(wr);
            run.retire();
            return;
        }
        let lat = now_ns().saturating_sub(t.posted_ns);
        run.stats.latency(lat.max(0) as u64);
        Stats::add(&run.stats.messages, 1);
        Stats::add(&run.stats.bytes, run.spec.size as u64);
        if run.spec.validate {
            let size = run.spec.size;
            let ok = match run.spec.op {
                Op::Write => t
                    .target
                    .as_ref()
                    .is_some_and(|m| check_mr(m, t.slot * size, size, t.seq)),
                Op::Read => t
                    .buf
                    .as_slice()
                    .iter()
                    .enumerate()
                    .all(|(i, &b)| b == pattern(t.slot as u64, i)),
                _ => true,
            };
            if !ok {
                Stats::add(&run.stats.corrupt, 1);
                run.error(format_args!(
                    "{} of message {} does not match",
                    run.spec.op.name(),
                    t.seq
                ));
            }
        }
        post_next(wr);
    }
}

impl Completion for Rx {
    fn done(mut wr: Wr<Self>, wc: &Wc) {
        let r = wr.data_mut();
        let run = r.run.clone();
        if run.stats.completion(wc.status()) {
            run.error(format_args!("receive completed with {:?}", wc.status()));
            run.stop();
        }
        if !wc.is_ok() {
            return;
        }
        let received = run.stats.received.fetch_add(1, Ordering::Relaxed) + 1;
        let spec = &run.spec;
        if spec.role == Role::Server && received == spec.count {
            run.retire();
        }
        if spec.validate {
            let skip = if spec.mode == QpType::Ud { GRH_LEN } else { 0 };
            let len = (wc.byte_len() as usize).saturating_sub(skip);
            let data = r.buf.as_slice().get(skip..skip + len).unwrap_or(&[]);
            let sender = (spec.role == Role::Loopback).then_some(run.id);
            match check(data, sender).filter(|_| len == spec.size) {
                None => {
                    Stats::add(&run.stats.corrupt, 1);
                    run.error(format_args!("received a corrupt message ({len} bytes)"));
                }
                Some(seq) => {
                    let seq = u64::from(seq);
                    if spec.op == Op::SendImm && wc.imm_data() != Some(seq as u32) {
                        Stats::add(&run.stats.corrupt, 1);
                        run.error(format_args!("message {seq}: immediate {:?}", wc.imm_data()));
                    }
                    let want = run.rx_expected.load(Ordering::Relaxed);
                    if seq >= want {
                        Stats::add(&run.stats.lost, seq - want);
                        run.rx_expected.store(seq + 1, Ordering::Relaxed);
                    } else {
                        Stats::add(&run.stats.dup, 1);
                    }
                }
            }
        } else {
            run.rx_expected.fetch_add(1, Ordering::Relaxed);
        }
        if run.stopping.load(Ordering::Acquire) {
            return;
        }
        let qp = r.qp.clone();
        if let Err(e) = qp.post_recv(wr, Rx::scatter) {
            if e.err != ESHUTDOWN {
                run.error(format_args!("post_recv: {:?}", e.err));
            }
        }
    }
}
