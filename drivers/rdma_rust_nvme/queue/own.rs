// SPDX-License-Identifier: GPL-2.0

//! The host's own commands on a queue, beside the block requests: one synchronous command
//! at a time on tag 0 ([`Queue::command`]: Connect, Property Get/Set, Identify, Set
//! Features, Get Log Page, Keep Alive), and on the admin queue the Asynchronous Event Request
//! on its own tag ([`Queue::post_event`]), which stays in flight until the controller has an
//! event.

use super::{Data, Io, Queue, Slot, User, BOUNCE, EVENT_TAG};
use crate::proto::{self, admin, Command, Cqe, Dptr, SQE_LEN};
use kernel::prelude::*;
use kernel::rdma::{mr::Access, sync::msleep, sync::SpinLockBh, wr::Wr};

impl Queue {
    /// Sends `cmd` with `data` on tag 0 and waits up to `ms` for its completion; one at a
    /// time. `ECONNRESET` once the queue failed, `ETIMEDOUT` when no completion came (the
    /// queue then fails: its tag may still be in use). Process context.
    pub(crate) fn command(&self, mut cmd: Command, mut data: Data<'_>, ms: u32) -> Result<Cqe> {
        let _one = self.sync.lock();
        let slot = self.slots.first().ok_or(EINVAL)?;
        // The last command's request may come back after its completion: up to a second.
        let mut waited = 0;
        let (mut wr, gen) = loop {
            match self.take_io(slot) {
                Some(t) => break t,
                None if self.is_dead() => return Err(ECONNRESET),
                None if waited < 1000 => {
                    msleep(10);
                    waited += 10;
                }
                None => return Err(EBUSY),
            }
        };
        let cid = proto::cid(0, gen);
        cmd.set_cid(cid);
        let io = wr.data_mut();
        io.direct = false;
        io.read_len = 0;
        let (len, access) = match &data {
            Data::None => (0, Access::REMOTE_READ),
            Data::ToTarget(b) => (b.len(), Access::REMOTE_READ),
            Data::FromTarget(b) => (b.len(), Access::REMOTE_WRITE),
        };
        io.keyed = len > 0;
        let mut prepared = if len > BOUNCE { Err(EINVAL) } else { Ok(()) };
        if let (Ok(()), Data::ToTarget(src)) = (&prepared, &data) {
            prepared = io.bounce.write(0, src);
        }
        let dptr = match io.named_mut() {
            None => Ok(Dptr::None),
            Some(r) => r.bump_key().map(|()| Dptr::Keyed {
                addr: r.iova(),
                len: len as u32,
                key: r.rkey(),
            }),
        };
        let prepared = prepared.and(dptr);
        let dptr = match prepared {
            Ok(d) => d,
            Err(e) => {
                drop(slot.lock().put_back(wr));
                return Err(e);
            }
        };
        cmd.set_dptr(dptr);
        if let Some(b) = io.cmd.as_mut_slice().get_mut(..SQE_LEN) {
            b.copy_from_slice(&cmd.0);
        }
        self.sync_done.reinit();
        let wr = self.claim(slot, wr, User::Sync, cid, dptr != Dptr::None)?;
        let posted = self.qp.post_send(wr, |io, ops| {
            if let Some(r) = io.named() {
                ops.reg_mr(r, access)?;
            }
            ops.send(&io.cmd, 0..SQE_LEN)?;
            Ok(())
        });
        if let Err(e) = posted {
            return Err(unclaim(slot, e.wr));
        }
        let timed_out = self.sync_done.wait_timeout(ms).is_err();
        let result = slot.lock().sync_result.take();
        let cqe = match result {
            Some(r) => r?,
            None if self.is_dead() => return Err(ECONNRESET),
            None => {
                if timed_out {
                    self.fail(
                        format_args!("command {:#04x} had no completion in {ms} ms", cmd.opcode()),
                        true,
                    );
                }
                return Err(ETIMEDOUT);
            }
        };
        if let (true, Data::FromTarget(dst)) = (cqe.is_ok(), &mut data) {
            // The command has ended: its request is back, its region invalidated.
            let taken = slot.lock().io.take();
            let Some(mut wr) = taken else {
                return Err(EIO);
            };
            let read = wr.data_mut().bounce.read(0, dst);
            drop(slot.lock().put_back(wr));
            read?;
        }
        Ok(cqe)
    }

    /// Sends an Asynchronous Event Request on tag [`EVENT_TAG`] of the admin queue: it stays
    /// in flight until the controller has an event, whose completion goes to the
    /// controller's supervisor ([`Health::event`]). One at a time: `EBUSY` while one is.
    /// Process context.
    pub(crate) fn post_event(&self) -> Result {
        if self.qid != 0 {
            return Err(EINVAL);
        }
        let slot = self.slots.get(EVENT_TAG).ok_or(EINVAL)?;
        let (mut wr, gen) = match self.take_io(slot) {
            Some(t) => t,
            None if self.is_dead() => return Err(ECONNRESET),
            None => return Err(EBUSY),
        };
        let cid = proto::cid(EVENT_TAG as u16, gen);
        let mut cmd = Command::new(admin::ASYNC_EVENT, 0);
        cmd.set_cid(cid);
        cmd.set_dptr(Dptr::None);
        let io = wr.data_mut();
        io.direct = false;
        io.read_len = 0;
        io.keyed = false;
        if let Some(b) = io.cmd.as_mut_slice().get_mut(..SQE_LEN) {
            b.copy_from_slice(&cmd.0);
        }
        let wr = self.claim(slot, wr, User::Event, cid, false)?;
        let posted = self.qp.post_send(wr, |io, ops| {
            ops.send(&io.cmd, 0..SQE_LEN)?;
            Ok(())
        });
        posted.map_err(|e| unclaim(slot, e.wr))
    }

    /// Makes the tag of `slot` `user`'s, under command id `cid` (`keyed`: with data the
    /// target moves), before its request `wr` is posted; `ECONNRESET`, the request put
    /// back, once the queue failed.
    fn claim(
        &self,
        slot: &SpinLockBh<Slot>,
        wr: Wr<Io>,
        user: User,
        cid: u16,
        keyed: bool,
    ) -> Result<Wr<Io>> {
        let mut s = slot.lock();
        if self.is_dead() {
            drop(s.put_back(wr));
            return Err(ECONNRESET);
        }
        s.user = Some(user);
        s.cid = cid;
        s.answer = None;
        s.sync_result = None;
        if keyed {
            s.counts.keyed += 1;
        }
        Ok(wr)
    }
}

/// Undoes [`Queue::claim`] for a request `wr` whose post failed: `EIO`.
fn unclaim(slot: &SpinLockBh<Slot>, wr: Wr<Io>) -> Error {
    let mut s = slot.lock();
    s.user = None;
    drop(s.put_back(wr));
    EIO
}
