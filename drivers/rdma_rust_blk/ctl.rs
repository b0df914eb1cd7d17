// SPDX-License-Identifier: GPL-2.0

//! The control language of `/sys/kernel/debug/rdma_rust_blk/ctl`, its commands carried out on
//! the module's state, and the text of `status`.
//!
//! One command per write:
//!
//! - `export name=NAME size=BYTES addr=IP port=N`: a target exports a new RAM volume;
//! - `unexport name=NAME`: ends its connections and frees it;
//! - `fail name=NAME`: forces the QPs of the volume's connections into the error state, as a
//!   fatal device error would (nothing but flushes), for testing that the target then ends
//!   them and its initiators learn it;
//! - `connect addr=IP port=N name=NAME [queues=N] [depth=N] [zerocopy=0|1]
//!   [poll=workqueue|softirq]`: an initiator connects to the volume and serves it as the disk
//!   `rrbdN` (its index is the lowest free one); the device reads and writes the block
//!   requests' own pages (an inline write's SEND gathers them, larger I/Os register them for
//!   the target), or with `zerocopy=0` the data is copied (into the command's buffer, through
//!   bounce buffers); completions run in the high-priority completion workqueue, or with
//!   `poll=softirq` in softirq;
//! - `disconnect dev=rrbdN`: removes the disk and ends its connections;
//! - `probe addr=IP port=N name=NAME op=N sector=N len=N [tag=N] [inline=N] [imm=N] [count=N]
//!   [depth=N] [reads=N]`: sends one raw command (or with `imm`, a block write; `count` times
//!   in a row) to a target and logs what it did (see [`hostile`](crate::hostile)), for testing
//!   targets; `depth` and `reads` set the queue depth and the responder resources its
//!   connect offers; `probe addr=IP port=N name=NAME abort=1 [depth=N]` connects and refuses
//!   the target's accept instead.
//!
//! A malformed command is refused with `EINVAL` and a message, and changes nothing. `status`
//! lists the volumes and disks.

use crate::hostile::{self, ProbeSpec};
use crate::initiator::{ConnectSpec, Disk, Handshake, QueueStats, MAX_QUEUES};
use crate::proto::{Name, INLINE_MAX, MAX_DEPTH};
use crate::target::{self, Export, Volume, MAX_VOLUME};
use crate::State;
use kernel::debugfs::command::{parse_size, words, Escaped};
use kernel::prelude::*;
use kernel::rdma::{cm::SockAddr, cq::PollContext};

/// A parsed control command.
pub(crate) enum Cmd {
    Export {
        name: Name,
        size: u64,
        addr: SockAddr,
    },
    Unexport {
        name: Name,
    },
    Fail {
        name: Name,
    },
    Connect(ConnectSpec),
    Disconnect {
        index: u32,
    },
    Probe(ProbeSpec),
}

/// Refuses a command with `EINVAL` and says why.
fn bad(what: core::fmt::Arguments<'_>) -> Error {
    pr_err!("ctl: {what}\n");
    EINVAL
}

/// Parses a command: a verb and `key=value` words, each key known to the verb and given once.
pub(crate) fn parse(input: &[u8]) -> Result<Cmd> {
    let line = match input.iter().position(|&c| c == b'\n') {
        // One line, with its newline: nothing may follow it.
        Some(i) if i + 1 == input.len() => &input[..i],
        Some(_) => return Err(bad(format_args!("one command per write"))),
        None => input,
    };
    let mut words = words(line);
    let verb = words
        .next()
        .ok_or_else(|| bad(format_args!("empty command")))?;
    let keys: &[&[u8]] = match verb {
        b"export" => &[b"name", b"size", b"addr", b"port"],
        b"unexport" => &[b"name"],
        b"fail" => &[b"name"],
        b"connect" => &[
            b"addr",
            b"port",
            b"name",
            b"queues",
            b"depth",
            b"zerocopy",
            b"poll",
        ],
        b"disconnect" => &[b"dev"],
        b"probe" => &[
            b"addr", b"port", b"name", b"op", b"sector", b"len", b"tag", b"inline", b"imm",
            b"count", b"depth", b"reads", b"abort",
        ],
        _ => {
            return Err(bad(format_args!(
                "unknown command '{}' (export, unexport, fail, connect, disconnect, probe)",
                Escaped(verb)
            )))
        }
    };
    let mut vals: [Option<&[u8]>; 13] = [None; 13];
    for w in words {
        let eq = w
            .iter()
            .position(|&c| c == b'=')
            .ok_or_else(|| bad(format_args!("'{}' is not key=value", Escaped(w))))?;
        let (k, v) = (&w[..eq], &w[eq + 1..]);
        let i = keys.iter().position(|&known| known == k).ok_or_else(|| {
            bad(format_args!(
                "{}: unknown key '{}'",
                Escaped(verb),
                Escaped(k)
            ))
        })?;
        if v.is_empty() {
            return Err(bad(format_args!("{}: empty value", Escaped(k))));
        }
        if vals[i].replace(v).is_some() {
            return Err(bad(format_args!("{}: given twice", Escaped(k))));
        }
    }
    let need = |i: usize| {
        vals[i].ok_or_else(|| {
            bad(format_args!(
                "{}: {}= is missing",
                Escaped(verb),
                Escaped(keys[i])
            ))
        })
    };
    let number = |i: usize, min: u64, max: u64| -> Result<u64> {
        let v = need(i)?;
        parse_size(v)
            .filter(|n| (min..=max).contains(n))
            .ok_or_else(|| {
                bad(format_args!(
                    "{}={}: must be {min}..={max}",
                    Escaped(keys[i]),
                    Escaped(v)
                ))
            })
    };
    let name = |i: usize| {
        let v = need(i)?;
        Name::new(v).map_err(|_| {
            bad(format_args!(
                "name={}: 1 to 32 letters, digits, '-', '_' or '.'",
                Escaped(v)
            ))
        })
    };
    let addr = |i: usize, port: u16| {
        let v = need(i)?;
        SockAddr::parse(v, port).ok_or_else(|| {
            bad(format_args!(
                "addr={}: not an IPv4 or IPv6 address",
                Escaped(v)
            ))
        })
    };
    Ok(match verb {
        b"export" => {
            let size = number(1, 4096, MAX_VOLUME)?;
            if size % u64::from(target::BLOCK) != 0 {
                return Err(bad(format_args!(
                    "size={size}: must be a multiple of {}",
                    target::BLOCK
                )));
            }
            let port = number(3, 1, 65535)? as u16;
            Cmd::Export {
                name: name(0)?,
                size,
                addr: addr(2, port)?,
            }
        }
        b"unexport" => Cmd::Unexport { name: name(0)? },
        b"fail" => Cmd::Fail { name: name(0)? },
        b"connect" => {
            let port = number(1, 1, 65535)? as u16;
            let queues = if vals[3].is_some() {
                number(3, 1, u64::from(MAX_QUEUES))?
            } else {
                1
            };
            let depth = if vals[4].is_some() {
                number(4, 1, u64::from(MAX_DEPTH))?
            } else {
                32
            };
            // The block requests' own pages unless `zerocopy=0` asks for copies.
            let zerocopy = vals[5].is_none() || number(5, 0, 1)? == 1;
            let poll = match vals[6] {
                None => PollContext::Workqueue,
                Some(v) => match PollContext::from_name(v) {
                    Some(p @ (PollContext::Workqueue | PollContext::Softirq)) => p,
                    _ => {
                        return Err(bad(format_args!(
                            "poll={}: must be workqueue or softirq",
                            Escaped(v)
                        )))
                    }
                },
            };
            Cmd::Connect(ConnectSpec {
                addr: addr(0, port)?,
                name: name(2)?,
                queues: queues as u16,
                depth: depth as u16,
                zerocopy,
                poll,
                handshake: Handshake::default(),
            })
        }
        b"probe" => {
            let port = number(1, 1, 65535)? as u16;
            let optional = |i: usize, min: u64, max: u64, default: u64| {
                if vals[i].is_some() {
                    number(i, min, max)
                } else {
                    Ok(default)
                }
            };
            let abort = optional(12, 0, 1, 0)? == 1;
            // An aborted connect sends no command: what it would be may be left out.
            let command = |i: usize, max: u64| {
                if abort {
                    optional(i, 0, max, 0)
                } else {
                    number(i, 0, max)
                }
            };
            Cmd::Probe(ProbeSpec {
                conn: ConnectSpec {
                    addr: addr(0, port)?,
                    name: name(2)?,
                    queues: 1,
                    depth: optional(10, 1, u64::from(MAX_DEPTH), 1)? as u16,
                    zerocopy: false,
                    poll: PollContext::Workqueue,
                    handshake: Handshake {
                        reads: match vals[11] {
                            Some(_) => Some(number(11, 0, 255)? as u8),
                            None => None,
                        },
                        abort,
                    },
                },
                op: command(3, 255)? as u8,
                sector: command(4, u64::MAX)?,
                len: command(5, u64::from(u32::MAX))? as u32,
                tag: optional(6, 0, u64::from(u16::MAX), 0)? as u16,
                inline: optional(7, 0, u64::from(INLINE_MAX), 0)? as usize,
                imm: match vals[8] {
                    Some(_) => Some(number(8, 0, u64::from(u32::MAX))? as u32),
                    None => None,
                },
                count: optional(9, 1, 1000, 1)? as u32,
            })
        }
        _ => {
            let v = need(0)?;
            // Digits only: `parse_size` would take a size suffix.
            let index = v
                .strip_prefix(b"rrbd")
                .filter(|d| d.iter().all(u8::is_ascii_digit))
                .and_then(parse_size)
                .filter(|&n| n < 1024)
                .ok_or_else(|| bad(format_args!("dev={}: not an rrbd disk", Escaped(v))))?;
            Cmd::Disconnect {
                index: index as u32,
            }
        }
    })
}

/// Carries out `cmd` on the module's state (process context).
pub(crate) fn command(s: &State, cmd: Cmd) -> Result {
    match cmd {
        Cmd::Export { name, size, addr } => {
            let mut exports = s.exports.lock();
            if exports.iter().any(|e| e.volume.name == name) {
                return Err(bad(format_args!("export: {name} is exported already")));
            }
            exports.reserve(1, GFP_KERNEL)?;
            let volume = Volume::new(name, size).inspect_err(|e| {
                pr_err!("export {name}: no volume of {size} bytes: {e:?}\n");
            })?;
            let export = Export::new(volume, addr)?;
            pr_info!(
                "export {name}: {size} bytes on {addr} ({})\n",
                Escaped(
                    export
                        .device_name()
                        .as_ref()
                        .map_or(&b"?"[..], |n| n.as_bytes())
                )
            );
            // Reserved above.
            let _ = exports.push(export, GFP_KERNEL);
            Ok(())
        }
        Cmd::Unexport { name } => {
            let export = {
                let mut exports = s.exports.lock();
                let i = exports.iter().position(|e| e.volume.name == name);
                i.and_then(|i| exports.remove(i))
            };
            let Some(export) = export else {
                return Err(bad(format_args!("unexport: no volume {name}")));
            };
            export.close();
            pr_info!("export {name}: unexported\n");
            Ok(())
        }
        Cmd::Fail { name } => {
            let export = s
                .exports
                .lock()
                .iter()
                .find(|e| e.volume.name == name)
                .cloned();
            let Some(export) = export else {
                return Err(bad(format_args!("fail: no volume {name}")));
            };
            let n = export.fail();
            pr_info!("export {name}: {n} connections' QPs forced into the error state\n");
            Ok(())
        }
        Cmd::Connect(spec) => {
            // One connect at a time: the disk's index is taken until it is done.
            let mut disks = s.disks.lock();
            let index = disks
                .iter()
                .position(Option::is_none)
                .unwrap_or(disks.len());
            if index >= 1024 {
                return Err(bad(format_args!("connect: 1024 disks already")));
            }
            if index == disks.len() {
                disks.push(None, GFP_KERNEL)?;
            }
            let disk = Disk::connect(&spec, index as u32).inspect_err(|e| {
                pr_err!("connect {} name={}: failed: {e:?}\n", spec.addr, spec.name);
            })?;
            pr_info!(
                "rrbd{index}: {} of {} bytes on {} ({} queues of depth {})\n",
                spec.name,
                disk.conn.welcome.capacity,
                spec.addr,
                spec.queues,
                spec.depth
            );
            disks[index] = Some(disk);
            Ok(())
        }
        Cmd::Disconnect { index } => {
            let disk = s
                .disks
                .lock()
                .get_mut(index as usize)
                .and_then(Option::take)
                .ok_or_else(|| bad(format_args!("disconnect: no disk rrbd{index}")))?;
            disk.disconnect();
            pr_info!("rrbd{index}: disconnected\n");
            Ok(())
        }
        Cmd::Probe(spec) => hostile::probe(&spec),
    }
}

/// The `status` text.
pub(crate) fn status(s: &State, t: &mut impl core::fmt::Write) -> core::fmt::Result {
    use core::sync::atomic::Ordering::Relaxed;
    writeln!(t, "volumes:")?;
    for e in s.exports.lock().iter() {
        let dev = e.device_name();
        writeln!(
            t,
            "  {} size={} addr={} dev={} connections={} commands={} errors={}",
            e.volume.name,
            e.volume.size,
            e.addr,
            Escaped(dev.as_ref().map_or(&b"-"[..], |n| n.as_bytes())),
            e.connections(),
            e.commands.load(Relaxed),
            e.errors.load(Relaxed)
        )?;
    }
    writeln!(t, "disks:")?;
    for d in s.disks.lock().iter().flatten() {
        let c = &d.conn;
        let mut sum = QueueStats::default();
        for q in c.queues.iter() {
            sum.add(&q.stats());
        }
        writeln!(
            t,
            "  rrbd{} name={} target={} dev={} queues={} capacity={} block={} state={} in_flight={} completed={} errors={} timeouts={} inline_writes_lent={} inline_writes_copied={} block_writes={} registered_io={} bounced_io={} unended={} poll={}",
            d.index,
            c.name,
            c.addr,
            Escaped(&c.dev_name),
            c.queues.len(),
            c.welcome.capacity,
            c.welcome.block_size,
            if c.dead_queues() == 0 { "live" } else { "failed" },
            c.in_flight(),
            sum.completed,
            sum.errors,
            c.timeouts.load(Relaxed),
            sum.writes_lent,
            sum.writes_copied,
            sum.block_writes,
            sum.registered,
            sum.bounced,
            sum.unended + c.unended.load(Relaxed),
            c.poll.name()
        )?;
        write!(t, "    per_queue_completed=")?;
        for (i, q) in c.queues.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            write!(t, "{sep}{}", q.stats().completed)?;
        }
        writeln!(t)?;
    }
    Ok(())
}
