// SPDX-License-Identifier: GPL-2.0

//! Asking the target: a keep-alive when a block request waits long ([`IoQueue::tick`], from
//! blk-mq's timeout work), and a raw command on a queue that serves no disk
//! ([`IoQueue::probe`], for the tests' hostile initiator).

use super::{
    IoQueue, IO_TIMEOUT_MS, KEEPALIVE_MS, KEEPALIVE_UNANSWERED_MS, PROBE_IDLE, PROBE_WAITING,
};
use crate::proto::{Command, Opcode, CMD_LEN, INLINE_MAX};
use core::sync::atomic::Ordering;
use kernel::prelude::*;
use kernel::rdma::{
    mr::{Access, Region},
    sync::msleep,
};
use kernel::time::Ktime;

impl IoQueue {
    /// Sends one raw command on a queue that serves no disk (tag 0's request, with its MR
    /// registered for opcodes 1 and 2): opcode `op` whatever it is, and `inline` bytes of
    /// zeros after it; with `imm`, those bytes alone in a SEND with that immediate data (a
    /// block write, whatever it names). Its answer, or the queue's failure, is waited for by
    /// [`Self::probe_wait`]; `ECONNRESET` if the queue failed before. Process context.
    pub(crate) fn probe(
        &self,
        op: u8,
        tag: u16,
        sector: u64,
        len: u32,
        inline: usize,
        imm: Option<u32>,
    ) -> Result {
        if inline > INLINE_MAX as usize {
            return Err(EINVAL);
        }
        // The last probe's SEND may come back after its answer: up to a second.
        let mut waited = 0;
        let mut wr = loop {
            match self.slots.first().and_then(|s| s.lock().io.take()) {
                Some(wr) => break wr,
                None if self.is_dead() => return Err(ECONNRESET),
                None if waited < 1000 => {
                    msleep(10);
                    waited += 10;
                }
                None => return Err(EBUSY),
            }
        };
        self.probe.store(PROBE_WAITING, Ordering::Release);
        self.probe_done.reinit();
        let buffer = op == Opcode::Read as u8 || op == Opcode::Write as u8;
        let io = wr.data_mut();
        io.op = Opcode::Flush;
        io.direct = false;
        if let Some(b) = io.cmd.as_mut_slice().get_mut(CMD_LEN..CMD_LEN + inline) {
            b.fill(0);
        }
        let posted = self.qp.post_send(wr, |io, ops| {
            if buffer {
                io.mr.bump_key()?;
                ops.reg_mr(&io.mr, Access::REMOTE_READ | Access::REMOTE_WRITE)?;
            }
            let (addr, rkey) = if buffer {
                (io.mr.iova(), io.mr.rkey())
            } else {
                (0, 0)
            };
            let b = io.cmd.as_mut_slice();
            Command {
                op: Opcode::Flush,
                tag,
                len,
                sector,
                addr,
                rkey,
            }
            .encode(b);
            b[0] = op;
            match imm {
                Some(imm) => ops.send_imm(&io.cmd, CMD_LEN..CMD_LEN + inline, imm)?,
                None => ops.send(&io.cmd, 0..CMD_LEN + inline)?,
            };
            Ok(())
        });
        if let Err(e) = posted {
            if let Some(s) = self.slots.first() {
                let late = s.lock().put_back(e.wr);
                drop(late);
            }
            self.probe.store(PROBE_IDLE, Ordering::Release);
            return Err(e.err);
        }
        Ok(())
    }

    /// Waits up to `ms` for the probe's answer: `Ok(status)`, or `Err(ECONNRESET)` if the queue
    /// failed first (the target ended the connection), `Err(ETIMEDOUT)` if neither came.
    pub(crate) fn probe_wait(&self, ms: u32) -> Result<i32> {
        let signalled = self.probe_done.wait_timeout(ms);
        match self.probe.load(Ordering::Acquire) {
            PROBE_IDLE => Err(EINVAL),
            PROBE_WAITING if self.dead.load(Ordering::Acquire) => Err(ECONNRESET),
            PROBE_WAITING => Err(signalled.err().unwrap_or(ETIMEDOUT)),
            status => Ok(status as i32),
        }
    }

    /// A block request of `tag` has waited another [`KEEPALIVE_MS`]: asks the target whether
    /// it lives, unless it has waited [`IO_TIMEOUT_MS`] in all (`false`: it has). Process
    /// context (blk-mq's timeout work).
    ///
    /// A keep-alive completes, or fails, within the QP's retries (3.8 s). One still out after
    /// [`KEEPALIVE_UNANSWERED_MS`] fails the queue: the device has stopped retrying without
    /// reporting it.
    pub(crate) fn tick(&self, tag: usize) -> bool {
        let Some(slot) = self.slots.get(tag) else {
            return false;
        };
        let ticks = {
            let mut s = slot.lock();
            s.ticks += 1;
            s.ticks
        };
        if ticks * KEEPALIVE_MS >= IO_TIMEOUT_MS || self.dead.load(Ordering::Acquire) {
            return false;
        }
        let now = Ktime::ktime_get().to_ms();
        // `None`: the last keep-alive is still out.
        let Some(wr) = self.keepalive.lock().take() else {
            let sent = self.keepalive_sent.load(Ordering::Acquire);
            if sent != 0 && now - sent >= i64::from(KEEPALIVE_UNANSWERED_MS) {
                self.fail(
                    format_args!(
                        "the target does not answer: a keep-alive is unanswered after {} ms",
                        now - sent
                    ),
                    true,
                );
            }
            return true;
        };
        self.keepalive_sent.store(now.max(1), Ordering::Release);
        if let Err(e) = self.qp.post_send(wr, |_, ops| {
            ops.keepalive()?;
            Ok(())
        }) {
            self.keepalive_sent.store(0, Ordering::Release);
            *self.keepalive.lock() = Some(e.wr);
        }
        true
    }
}
