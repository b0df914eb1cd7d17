// SPDX-License-Identifier: GPL-2.0

//! The checks of a parsed `start` against itself: what a fault, a ping-pong or a `cm=` run
//! needs of the other keys, and the defaults a `cm=` run takes from rping.

use super::{bad, Command, Fault, Op, Role, Spec, HEADER};
use kernel::prelude::*;
use kernel::rdma::{cq::PollContext, qp::QpType};

/// The checks of a `fault=` run: each fault is for the loopback runs whose traffic it breaks.
pub(super) fn check_fault(s: &Spec) -> Result {
    let fits = match s.fault {
        Fault::None => return Ok(()),
        Fault::BadRkey => s.mode == QpType::Rc && s.op.is_rdma(),
        Fault::BadQkey | Fault::BadQpn => s.mode == QpType::Ud,
    };
    if !fits || s.cm || s.role != Role::Loopback || s.pingpong {
        return Err(bad(format_args!(
            "start: fault=bad_rkey is for mode=rc op=write|read, fault=bad_qkey|bad_qpn for mode=ud; loopback runs only"
        )));
    }
    Ok(())
}

/// The checks of a `pingpong=1` run.
pub(super) fn check_pingpong(s: &Spec) -> Result {
    if s.cm || s.role != Role::Loopback || s.mode != QpType::Rc {
        return Err(bad(format_args!(
            "start: pingpong=1 is for mode=rc role=loopback runs (no cm=)"
        )));
    }
    if !matches!(s.op, Op::Send | Op::Write) {
        return Err(bad(format_args!(
            "start: pingpong=1 bounces op=send or op=write, not op={}",
            s.op.name()
        )));
    }
    if s.depth != 1 || s.batch != 1 {
        return Err(bad(format_args!(
            "start: pingpong=1 runs one message at a time (depth=1 batch=1)"
        )));
    }
    Ok(())
}

/// Smallest ping buffer: rping's message header ("rdma-ping-N: ") and its terminating NUL.
const MIN_PING: usize = 32;

/// The checks of a `cm=` run.
pub(super) fn check_cm(
    mut s: Spec,
    op_given: bool,
    size_given: bool,
    role_given: bool,
    addr_given: bool,
) -> Result<Command> {
    if !addr_given || s.addr.port() == 0 {
        return Err(bad(format_args!("start: cm= needs addr= and port=")));
    }
    if s.dev_len != 0 || role_given || s.peer.is_some() || s.hold {
        return Err(bad(format_args!(
            "start: cm= runs find their device from addr= (no dev=, role=, peer= or hold=)"
        )));
    }
    if s.poll == PollContext::Direct {
        return Err(bad(format_args!("start: poll=direct is for role=loopback")));
    }
    match s.mode {
        QpType::Rc => {
            if !op_given {
                s.op = Op::Ping;
            }
            if !size_given {
                // rping's default message is 64 bytes; a server takes up to 64 KiB.
                s.size = if s.role == Role::Server { 65536 } else { 64 };
            }
            if s.op != Op::Ping {
                return Err(bad(format_args!("start: cm= with mode=rc runs op=ping")));
            }
            if s.batch != 1 {
                return Err(bad(format_args!(
                    "start: op=ping runs one round trip at a time (no batch=)"
                )));
            }
            if s.size < MIN_PING {
                return Err(bad(format_args!("start: op=ping needs size>={MIN_PING}")));
            }
        }
        QpType::Ud => {
            if !s.op.uses_recv() {
                return Err(bad(format_args!(
                    "start: cm= with mode=ud runs send or send_imm"
                )));
            }
            if s.validate && s.size < HEADER {
                return Err(bad(format_args!(
                    "start: validate=1 needs size>={} (sequence header)",
                    HEADER
                )));
            }
        }
    }
    Ok(Command::Start(s))
}
