// SPDX-License-Identifier: GPL-2.0

//! A hostile NVMe/RDMA host, for testing the target (the debugfs file `probe`): a raw client
//! over rdma_cm that sends what it is told, as a broken or malicious host would, and logs what
//! came back. The stock host only ever sends well-formed capsules.
//!
//! One write of `probe` is one probe, a line of `key=value` words:
//!
//! - `probe addr=IP [port=N] [tag=WORD] subnqn=NQN hostnqn=NQN` and then, all optional:
//! - the connection request of the probed queue: `recfmt=N qid=N hrqsize=N hsqsize=N`,
//!   `pdlen=N` (bytes of private data sent, 0 to [`PD_MAX`]; the CM pads them with zeroes),
//!   `ird=N` (the RDMA READs the target may have outstanding against the probe);
//! - its Connect: `connect=0` (none), `cqid=N cntlid=N sqsize=N kato=MS`, `csubnqn=NQN` and
//!   `chostnqn=NQN` (other NQNs than the admin queue's), `cinline=1` (the 1 KiB of data in the
//!   capsule instead of by keyed SGL from a buffer the target reads);
//! - `enable=0`: no Property Set of CC.EN after the admin Connect;
//! - `io=1`: the probed queue is an I/O queue (qid 1 unless told) of a controller whose admin
//!   queue is set up correctly first; the request and Connect fields above are its own;
//! - `silent=MS`: after the admin queue is up, sends nothing for up to `MS` and logs whether
//!   and when the target ended the connection (a host whose keep-alive lapsed);
//! - raw capsules, each started by the word `cmd`: `opc=N flags=N cid=N nsid=N cdw10=N` to
//!   `cdw15=N`, `sgl=keyed|inv|inline|none|N` (a keyed data block, the same with invalidate,
//!   a data block at an offset in the capsule, or any type byte), `len=N key=N sgladdr=N`
//!   (a keyed SGL names the probe's registered buffer unless told), `off=N` (in-capsule
//!   offset), `data=N` (bytes of in-capsule data sent after the command), `size=N` (bytes of
//!   the SEND, to cut the capsule short), `wait=MS` (for its completion, 0: not at all).
//!   Defaults: flags 0x40 (SGLs), a keyed SGL of `len` (0) bytes, a wait of 3 s.
//!
//! Numbers are decimal (with `k`, `m`, `g`) or `0x` hexadecimal. Each line the probe logs
//! starts with `hostile TAG:`: `rejected status=N reason=N` (the NVMe/RDMA CM status of a
//! refused connection request), a completion (`connect`, `enable` or `cqe` with `qid cid
//! status result sqhd inv`: the status without the phase bit, `inv` the rkey a SEND with
//! invalidate revoked), `ended by the target`, `no completion`, and `done` at the end.
//!
//! `fuzz addr=IP [port=N] subnqn=NQN hostnqn=NQN seed=N count=N`: a reproducible stream of
//! `count` capsules and connection requests from the pseudo-random `seed`, mostly mutations
//! of valid ones (they reach further into the target than random bytes), on connections that
//! are made again whenever the target ends one. It logs its seed first and what it saw last.
//! Its I/O writes land in the subsystem's namespaces: give it a subsystem of its own.
//!
//! The probe runs in the writer's process and is over, its connections closed, when the write
//! returns.

mod conn;
mod fuzz;
mod wire;

use crate::ctrl::now_ms;
use crate::proto::{Text, SQE_LEN};
use conn::{open_logged, Answer};
use kernel::debugfs::command::{parse_size, words};
use kernel::prelude::*;
use kernel::rdma::cm::SockAddr;
use wire::{CmSpec, Cmd, ConnectSpec, CC_ENABLE, DATA_MAX, PD_MAX};

fn bad(what: core::fmt::Arguments<'_>) -> Error {
    pr_err!("probe: {what}\n");
    EINVAL
}

/// A number: decimal (with a size suffix) or `0x` hexadecimal.
fn number(v: &[u8]) -> Result<u64> {
    let n = match v.strip_prefix(b"0x") {
        Some(hex) if !hex.is_empty() && hex.len() <= 16 => hex.iter().try_fold(0u64, |n, &c| {
            let d = (c as char).to_digit(16)?;
            Some((n << 4) | u64::from(d))
        }),
        Some(_) => None,
        None => parse_size(v),
    };
    n.ok_or_else(|| bad(format_args!("'{}' is not a number", Text(v))))
}

fn num<T: TryFrom<u64>>(v: &[u8]) -> Result<T> {
    T::try_from(number(v)?).map_err(|_| bad(format_args!("{} is out of range", Text(v))))
}

/// One probe, as parsed.
struct Probe<'a> {
    tag: &'a [u8],
    addr: SockAddr,
    subnqn: &'a [u8],
    hostnqn: &'a [u8],
    cm: Option<CmSpec>,
    connect: Option<ConnectSpec<'a>>,
    enable: bool,
    io: bool,
    silent: Option<u32>,
    cmds: KVec<Cmd>,
}

/// Carries out one write of the `probe` file.
pub(crate) fn command(input: &[u8]) -> Result {
    let line = input.strip_suffix(b"\n").unwrap_or(input);
    let mut w = words(line);
    let verb = w.next().unwrap_or(b"");
    if verb != b"probe" && verb != b"fuzz" {
        return Err(bad(format_args!(
            "unknown command '{}' (probe, fuzz)",
            Text(verb)
        )));
    }
    let mut addr = None;
    let mut port = 4420u16;
    let (mut tag, mut subnqn, mut hostnqn): (&[u8], &[u8], &[u8]) = (b"-", b"", b"");
    // The request's fields given: recfmt, qid, hrqsize, hsqsize, pdlen, ird.
    let mut cm_fields: [Option<u64>; 6] = [None; 6];
    let mut connect = ConnectSpec::default();
    let (mut want_connect, mut enable, mut io, mut silent) = (true, true, false, None);
    let (mut seed, mut count) = (0u64, 100u64);
    let mut cmds = KVec::new();
    let mut cmd: Option<Cmd> = None;
    for word in w {
        if word == b"cmd" {
            if let Some(c) = cmd.replace(Cmd::default()) {
                cmds.push(c, GFP_KERNEL)?;
            }
            continue;
        }
        let eq = word.iter().position(|&c| c == b'=');
        let (k, v) = match eq {
            Some(i) => (&word[..i], &word[i + 1..]),
            None => return Err(bad(format_args!("'{}' is not key=value", Text(word)))),
        };
        if let Some(c) = cmd.as_mut() {
            match k {
                b"opc" => c.opc = num(v)?,
                b"flags" => c.flags = num(v)?,
                b"cid" => c.cid = num(v)?,
                b"nsid" => c.nsid = num(v)?,
                b"cdw10" | b"cdw11" | b"cdw12" | b"cdw13" | b"cdw14" | b"cdw15" => {
                    let i = usize::from(k[4] - b'0');
                    if let Some(d) = c.cdw.get_mut(i) {
                        *d = num(v)?;
                    }
                }
                b"sgl" => {
                    c.sgl = match v {
                        b"keyed" => 0x40,
                        b"inv" => 0x4f,
                        b"inline" => 0x01,
                        b"none" => 0x00,
                        _ => num(v)?,
                    }
                }
                b"len" => c.len = num(v)?,
                b"key" => c.key = Some(num(v)?),
                b"sgladdr" => c.addr = Some(number(v)?),
                b"off" => c.off = number(v)?,
                b"data" => {
                    c.data = num(v)?;
                    if c.data > DATA_MAX {
                        return Err(bad(format_args!("data={} is over {DATA_MAX}", c.data)));
                    }
                }
                b"size" => {
                    let n: usize = num(v)?;
                    if n == 0 || n > SQE_LEN + DATA_MAX {
                        return Err(bad(format_args!("size={n}: 1 to {}", SQE_LEN + DATA_MAX)));
                    }
                    c.size = Some(n);
                }
                b"wait" => c.wait = num(v)?,
                _ => return Err(bad(format_args!("unknown capsule field '{}'", Text(k)))),
            }
            continue;
        }
        match k {
            b"addr" => addr = Some(v),
            b"port" => port = num(v)?,
            b"tag" => tag = v,
            b"subnqn" => subnqn = v,
            b"hostnqn" => hostnqn = v,
            b"recfmt" => cm_fields[0] = Some(u64::from(num::<u16>(v)?)),
            b"qid" => cm_fields[1] = Some(u64::from(num::<u16>(v)?)),
            b"hrqsize" => cm_fields[2] = Some(u64::from(num::<u16>(v)?)),
            b"hsqsize" => cm_fields[3] = Some(u64::from(num::<u16>(v)?)),
            b"pdlen" => cm_fields[4] = Some(number(v)?),
            b"ird" => cm_fields[5] = Some(u64::from(num::<u8>(v)?)),
            b"connect" => want_connect = number(v)? != 0,
            b"cqid" => connect.qid = Some(num(v)?),
            b"csubnqn" => connect.subnqn = Some(v),
            b"chostnqn" => connect.hostnqn = Some(v),
            b"cntlid" => connect.cntlid = Some(num(v)?),
            b"sqsize" => connect.sqsize = Some(num(v)?),
            b"kato" => connect.kato = num(v)?,
            b"cinline" => connect.inline = number(v)? != 0,
            b"enable" => enable = number(v)? != 0,
            b"io" => io = number(v)? != 0,
            b"silent" => silent = Some(num(v)?),
            b"seed" => seed = number(v)?,
            b"count" => count = number(v)?,
            _ => return Err(bad(format_args!("unknown field '{}'", Text(k)))),
        }
    }
    if let Some(c) = cmd {
        cmds.push(c, GFP_KERNEL)?;
    }
    let addr = addr
        .and_then(|a| SockAddr::parse(a, port))
        .ok_or_else(|| bad(format_args!("addr=IP is needed")))?;
    // The fields given change the request a correct host sends for the probed queue.
    let cm_set = cm_fields.iter().any(Option::is_some);
    let mut cm = if io { CmSpec::IO } else { CmSpec::ADMIN };
    let field = |i: usize, or: u16| cm_fields[i].map_or(or, |v| v as u16);
    cm.recfmt = field(0, cm.recfmt);
    cm.qid = field(1, cm.qid);
    cm.hrqsize = field(2, cm.hrqsize);
    cm.hsqsize = field(3, cm.hsqsize);
    cm.len = cm_fields[4].map_or(cm.len, |v| v as usize);
    cm.reads = cm_fields[5].map(|v| v as u8);
    if cm.len > PD_MAX {
        return Err(bad(format_args!("pdlen={} is over {PD_MAX}", cm.len)));
    }
    if subnqn.len() > 255 || hostnqn.len() > 255 {
        return Err(bad(format_args!("an NQN of more than 255 bytes")));
    }
    if verb == b"fuzz" {
        return fuzz::run(&fuzz::Fuzz {
            addr,
            subnqn,
            hostnqn,
            seed,
            count,
        });
    }
    probe(&Probe {
        tag,
        addr,
        subnqn,
        hostnqn,
        cm: (cm_set || io).then_some(cm),
        connect: want_connect.then_some(connect),
        enable,
        io,
        silent,
        cmds,
    })
}

/// Carries out a probe.
fn probe(p: &Probe<'_>) -> Result {
    let tag = p.tag;
    let admin_cm = match p.cm {
        Some(cm) if !p.io => cm,
        _ => CmSpec::ADMIN,
    };
    let r = probe_queues(p, &admin_cm);
    pr_info!("hostile {}: done\n", Text(tag));
    r
}

fn probe_queues(p: &Probe<'_>, admin_cm: &CmSpec) -> Result {
    let tag = p.tag;
    let Some(mut admin) = open_logged(tag, p.addr, admin_cm, false)? else {
        return Ok(());
    };
    let admin_connect = if p.io {
        Some(ConnectSpec {
            kato: p.connect.map_or(0, |c| c.kato),
            ..ConnectSpec::default()
        })
    } else {
        p.connect
    };
    let mut cntlid = 0xffff;
    if let Some(c) = admin_connect {
        match admin.connect(tag, &c, p.subnqn, p.hostnqn, 0xffff, admin_cm.hsqsize)? {
            Some(id) => cntlid = id,
            None => return Ok(()),
        }
        if p.enable && !admin.enable(tag, CC_ENABLE) {
            pr_info!("hostile {}: the controller was not enabled\n", Text(tag));
            return Ok(());
        }
    }
    if let Some(ms) = p.silent {
        let t0 = now_ms();
        match admin.answer(tag, 0xffff, ms) {
            Answer::Ended => pr_info!(
                "hostile {}: ended by the target after {} ms\n",
                Text(tag),
                now_ms() - t0
            ),
            _ => pr_info!("hostile {}: still connected after {ms} ms\n", Text(tag)),
        }
        return Ok(());
    }
    let mut io = None;
    if p.io {
        let cm = p.cm.unwrap_or(CmSpec::IO);
        let Some(mut q) = open_logged(tag, p.addr, &cm, false)? else {
            return Ok(());
        };
        if let Some(c) = p.connect {
            if q.connect(tag, &c, p.subnqn, p.hostnqn, cntlid, cm.hsqsize)?
                .is_none()
            {
                return Ok(());
            }
        }
        io = Some(q);
    }
    let q = io.as_mut().unwrap_or(&mut admin);
    for c in p.cmds.iter() {
        match q.command(tag, c)? {
            Answer::Cqe(_) => {}
            Answer::Ended => {
                pr_info!("hostile {}: ended by the target\n", Text(tag));
                return Ok(());
            }
            Answer::Silent if c.wait > 0 => pr_info!(
                "hostile {}: no completion for cid {} within {} ms\n",
                Text(tag),
                c.cid,
                c.wait
            ),
            Answer::Silent => {}
        }
    }
    // What else comes (a held command's completion, an end) within a moment.
    if let Answer::Ended = q.answer(tag, 0xffff, 200) {
        pr_info!("hostile {}: ended by the target\n", Text(tag));
    }
    Ok(())
}
