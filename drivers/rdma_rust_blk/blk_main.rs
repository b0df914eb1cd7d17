// SPDX-License-Identifier: GPL-2.0

//! rdma_rust_blk: a block-storage ULP over kernel::rdma, in the style of iSER and NVMe over
//! Fabrics, with both roles in one module.
//!
//! Control, through `/sys/kernel/debug/rdma_rust_blk/ctl` (one command per write):
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
//! - `probe addr=IP port=N name=NAME op=N sector=N len=N [tag=N] [inline=N] [imm=N]`: sends one
//!   raw command (or with `imm`, a block write) to a target and logs what it did (see
//!   [`hostile`]), for testing targets.
//!
//! `status` lists the volumes and disks. A malformed command is refused with `EINVAL` and a
//! message, and changes nothing. When an RDMA device goes away (`rdma link delete`), the
//! exports and disks on it go first; unloading the module removes everything.
//!
//! The wire protocol is in [`proto`], the roles in [`target`] and [`initiator`].

use core::sync::atomic::{AtomicPtr, Ordering};
use kernel::debugfs::{
    command::{parse_size, words, Escaped},
    ControlFile, Dir, SeqFile, ShowFile,
};
use kernel::rdma::{
    client::{Client, ClientStorage, Registration},
    cm::SockAddr,
    cq::PollContext,
    device::Device,
};
use kernel::sync::{Arc, Mutex};
use kernel::{c_str, new_mutex, prelude::*, str::CStr};

// In dependency order: each module uses only those above it.
mod hostile;
mod initiator;
mod proto;
mod target;

use hostile::ProbeSpec;
use initiator::{ConnectSpec, Disk, QueueStats, MAX_QUEUES};
use proto::{Name, INLINE_MAX, MAX_DEPTH};
use target::{Export, Volume, MAX_VOLUME};

module! {
    type: RustBlk,
    name: "rdma_rust_blk",
    author: "rdma-rust developers",
    description: "Block storage over RDMA in Rust: RAM volumes exported and served as disks",
    license: "GPL",
}

/// The module's state.
#[pin_data]
struct State {
    #[pin]
    exports: Mutex<KVec<Arc<Export>>>,
    /// Disk `rrbdN` is entry `N`.
    #[pin]
    disks: Mutex<KVec<Option<Disk>>>,
}

/// The state while the module is loaded; set before the debugfs files exist and cleared
/// after they are gone and the client is unregistered.
static STATE: AtomicPtr<State> = AtomicPtr::new(core::ptr::null_mut());

fn state() -> Result<&'static State> {
    let p = STATE.load(Ordering::Acquire);
    // SAFETY: A non-null `STATE` points at the state owned by the module, which clears it only
    // after the debugfs files are removed and the client unregistered, that is, after the last
    // caller of `state()` has returned.
    unsafe { p.as_ref() }.ok_or(ENODEV)
}

struct RustBlk {
    /// `ctl` and `status`; removed first, by `drop`.
    files: Option<Dir>,
    // Dropped in this order: the client first (its `remove` needs the state), then `STATE`
    // is cleared, then the state goes.
    _reg: Registration<BlkClient>,
    _published: Published,
    state: Pin<KBox<State>>,
}

/// Clears `STATE` when dropped.
struct Published;

impl Drop for Published {
    fn drop(&mut self) {
        STATE.store(core::ptr::null_mut(), Ordering::Release);
    }
}

impl kernel::Module for RustBlk {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let state = KBox::pin_init(
            pin_init!(State {
                exports <- new_mutex!(KVec::new(), "rdma_rust_blk_exports"),
                disks <- new_mutex!(KVec::new(), "rdma_rust_blk_disks"),
            }),
            GFP_KERNEL,
        )?;
        STATE.store((&raw const *state).cast_mut(), Ordering::Release);
        let reg = match Registration::<BlkClient>::new() {
            Ok(r) => r,
            Err(e) => {
                STATE.store(core::ptr::null_mut(), Ordering::Release);
                return Err(e);
            }
        };
        // The files' callbacks use the state published above.
        let files = match Dir::new(c_str!("rdma_rust_blk")) {
            Ok(dir) => dir,
            Err(e) => {
                pr_err!("cannot create the debugfs directory: {e:?}\n");
                drop(reg);
                STATE.store(core::ptr::null_mut(), Ordering::Release);
                return Err(e);
            }
        };
        files.control::<Ctl>(c_str!("ctl"));
        files.show::<Status>(c_str!("status"));
        pr_info!("loaded\n");
        Ok(RustBlk {
            files: Some(files),
            _reg: reg,
            _published: Published,
            state,
        })
    }
}

impl Drop for RustBlk {
    fn drop(&mut self) {
        // Returns once no ctl write or status read is running.
        drop(self.files.take());
        // Everything goes before the client: the disks, then the exports.
        let disks = core::mem::take(&mut *self.state.disks.lock());
        for d in disks.into_iter().flatten() {
            d.disconnect();
        }
        let exports = core::mem::take(&mut *self.state.exports.lock());
        for e in exports {
            e.close();
        }
        // `_reg` goes next; `STATE` is cleared once nothing can call `state()` any more.
    }
}

struct BlkClient;

impl Client for BlkClient {
    const NAME: &'static CStr = c_str!("rdma_rust_blk");
    type Data = KBox<()>;

    fn storage() -> &'static ClientStorage {
        static STORAGE: ClientStorage = ClientStorage::new();
        &STORAGE
    }

    fn add(_dev: &Device) -> Result<KBox<()>> {
        Ok(KBox::new((), GFP_KERNEL)?)
    }

    /// The device goes away: its disks and exports go first, before rdma_cm tears their ids
    /// down under them.
    fn remove(dev: &Device, _data: KBox<()>) {
        let Ok(s) = state() else {
            return;
        };
        let gone = {
            let mut disks = s.disks.lock();
            let mut gone = KVec::new();
            for slot in disks.iter_mut() {
                if slot.as_ref().is_some_and(|d| d.is_on(dev)) {
                    if let Some(d) = slot.take() {
                        // Without memory for the list, the disk is removed here, under the lock.
                        let _ = gone.push(d, GFP_KERNEL);
                    }
                }
            }
            gone
        };
        for d in gone {
            pr_info!(
                "rrbd{}: {} is going away: disk removed\n",
                d.index,
                dev.name()
            );
            d.disconnect();
        }
        // One at a time, each closed outside the lock.
        loop {
            let closing = {
                let mut exports = s.exports.lock();
                let i = exports.iter().position(|e| e.is_on(dev));
                i.and_then(|i| exports.remove(i))
            };
            let Some(e) = closing else {
                break;
            };
            pr_info!(
                "export {}: {} is going away: unexported\n",
                e.volume.name,
                dev.name()
            );
            e.close();
        }
    }
}

/// A parsed control command.
enum Cmd {
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
fn parse(input: &[u8]) -> Result<Cmd> {
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
        ],
        _ => {
            return Err(bad(format_args!(
                "unknown command '{}' (export, unexport, fail, connect, disconnect, probe)",
                Escaped(verb)
            )))
        }
    };
    let mut vals: [Option<&[u8]>; 9] = [None; 9];
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
            })
        }
        b"probe" => {
            let port = number(1, 1, 65535)? as u16;
            let optional = |i: usize, max: u64| {
                if vals[i].is_some() {
                    number(i, 0, max)
                } else {
                    Ok(0)
                }
            };
            Cmd::Probe(ProbeSpec {
                conn: ConnectSpec {
                    addr: addr(0, port)?,
                    name: name(2)?,
                    queues: 1,
                    depth: 1,
                    zerocopy: false,
                    poll: PollContext::Workqueue,
                },
                op: number(3, 0, 255)? as u8,
                sector: number(4, 0, u64::MAX)?,
                len: number(5, 0, u64::from(u32::MAX))? as u32,
                tag: optional(6, u64::from(u16::MAX))? as u16,
                inline: optional(7, u64::from(INLINE_MAX))? as usize,
                imm: match vals[8] {
                    Some(_) => Some(number(8, 0, u64::from(u32::MAX))? as u32),
                    None => None,
                },
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

fn command(s: &State, cmd: Cmd) -> Result {
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
fn status(s: &State, t: &mut impl core::fmt::Write) -> core::fmt::Result {
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
            "  rrbd{} name={} target={} dev={} queues={} capacity={} block={} state={} in_flight={} completed={} errors={} timeouts={} inline_writes_lent={} inline_writes_copied={} block_writes={} registered_io={} bounced_io={} poll={}",
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

/// `ctl`: one command per write.
struct Ctl;

impl ControlFile for Ctl {
    const MAX_LEN: usize = 512;

    fn write(data: &[u8]) -> Result {
        command(state()?, parse(data)?)
    }
}

/// `status`: the volumes and disks.
struct Status;

impl ShowFile for Status {
    fn show(m: &SeqFile) -> Result {
        // Writing into a `SeqFile` cannot fail: only a `Display` impl could (`EINVAL`).
        Ok(status(state()?, &mut &*m)?)
    }
}
