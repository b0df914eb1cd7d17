// SPDX-License-Identifier: GPL-2.0

//! The connect options: an nvme-fabrics options string, as `nvme connect` writes to
//! `/dev/nvme-fabrics` (`transport=rdma,traddr=10.0.0.1,trsvcid=4420,nqn=...`).
//!
//! Every option is `name=value`, separated by commas (a final newline is ignored). An unknown
//! option, a value out of range, an option given twice or a required one missing fails the
//! write with `EINVAL` and says which in the kernel log.

use crate::proto::NQN_MAX;
use kernel::fmt;
use kernel::prelude::*;
use kernel::rdma::{cm::SockAddr, sync::online_cpus};
use kernel::str::CString;

/// The NVMe/RDMA port number when `trsvcid` is not given.
pub(crate) const DEFAULT_PORT: u16 = 4420;
/// I/O queues a controller gets at most.
pub(crate) const MAX_IO_QUEUES: u16 = 16;
/// The longest options string taken.
pub(crate) const MAX_LEN: usize = 1024;

/// A connect's options, checked.
pub(crate) struct Options {
    pub(crate) addr: SockAddr,
    /// The address and port as given, for the status file.
    pub(crate) traddr: KVec<u8>,
    pub(crate) trsvcid: u16,
    pub(crate) subnqn: KVec<u8>,
    pub(crate) hostnqn: KVec<u8>,
    pub(crate) hostid: [u8; 16],
    /// I/O queues to ask for: at most one per CPU online (as nvme-fabrics caps them).
    pub(crate) nr_io_queues: u16,
    /// Entries of each I/O queue.
    pub(crate) queue_size: u16,
    /// Keep-alive timeout in seconds (0: none).
    pub(crate) kato: u32,
    /// Seconds between reconnects, and after which a lost controller fails its I/O (-1:
    /// never).
    pub(crate) reconnect_delay: u32,
    pub(crate) ctrl_loss_tmo: i32,
}

/// A decimal number within `lo..=hi`.
fn number(v: &[u8], lo: i64, hi: i64) -> Option<i64> {
    let (neg, digits) = match v.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, v),
    };
    if digits.is_empty() || digits.len() > 10 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits
        .iter()
        .fold(0i64, |n, &d| n * 10 + i64::from(d - b'0'));
    let n = if neg { -n } else { n };
    (lo..=hi).contains(&n).then_some(n)
}

/// A host identifier: a UUID in its text form.
fn uuid(v: &[u8]) -> Option<[u8; 16]> {
    let hex: KVec<u8> = {
        let mut h = KVec::new();
        for (i, &c) in v.iter().enumerate() {
            if c == b'-' && [8, 13, 18, 23].contains(&i) && v.len() == 36 {
                continue;
            }
            h.push(c, GFP_KERNEL).ok()?;
        }
        h
    };
    if hex.len() != 32 {
        return None;
    }
    let mut id = [0u8; 16];
    for (i, pair) in hex.chunks(2).enumerate() {
        let s = core::str::from_utf8(pair).ok()?;
        id[i] = u8::from_str_radix(s, 16).ok()?;
    }
    Some(id)
}

/// An NQN: 1 to [`NQN_MAX`] printable bytes.
fn nqn(v: &[u8]) -> Option<KVec<u8>> {
    if v.is_empty() || v.len() > NQN_MAX || !v.iter().all(|c| c.is_ascii_graphic()) {
        return None;
    }
    let mut n = KVec::new();
    n.extend_from_slice(v, GFP_KERNEL).ok()?;
    Some(n)
}

impl Options {
    /// Parses and checks an options string; `default_host` is the host NQN and identifier
    /// when it names none.
    pub(crate) fn parse(text: &[u8], default_host: (&[u8], &[u8; 16])) -> Result<Self> {
        let text = text.strip_suffix(b"\n").unwrap_or(text);
        let mut seen: u32 = 0;
        let (mut transport, mut traddr, mut port) = (false, None, DEFAULT_PORT);
        let mut o = Options {
            addr: SockAddr::parse(b"0.0.0.0", 0).ok_or(EINVAL)?,
            traddr: KVec::new(),
            trsvcid: DEFAULT_PORT,
            subnqn: KVec::new(),
            hostnqn: KVec::new(),
            hostid: *default_host.1,
            nr_io_queues: MAX_IO_QUEUES,
            queue_size: 128,
            kato: 5,
            reconnect_delay: 10,
            ctrl_loss_tmo: 600,
        };
        for opt in text.split(|&c| c == b',') {
            let (name, v) = match opt.iter().position(|&c| c == b'=') {
                Some(i) => (&opt[..i], &opt[i + 1..]),
                None => (opt, &b""[..]),
            };
            let names: [&[u8]; 11] = [
                b"transport",
                b"traddr",
                b"trsvcid",
                b"nqn",
                b"hostnqn",
                b"hostid",
                b"nr_io_queues",
                b"queue_size",
                b"keep_alive_tmo",
                b"reconnect_delay",
                b"ctrl_loss_tmo",
            ];
            let Some(which) = names.iter().position(|n| *n == name) else {
                pr_err!("unknown option '{}'\n", Text(opt));
                return Err(EINVAL);
            };
            if seen & (1 << which) != 0 {
                pr_err!("option '{}' given twice\n", Text(name));
                return Err(EINVAL);
            }
            seen |= 1 << which;
            let ok = match which {
                0 => {
                    transport = v == b"rdma";
                    transport
                }
                1 => {
                    traddr = Some(v);
                    !v.is_empty()
                }
                2 => number(v, 1, 65535).map(|n| port = n as u16).is_some(),
                3 => nqn(v).map(|n| o.subnqn = n).is_some(),
                4 => nqn(v).map(|n| o.hostnqn = n).is_some(),
                5 => uuid(v).map(|id| o.hostid = id).is_some(),
                6 => number(v, 1, i64::from(MAX_IO_QUEUES))
                    .map(|n| o.nr_io_queues = n as u16)
                    .is_some(),
                7 => number(v, 16, 256)
                    .map(|n| o.queue_size = n as u16)
                    .is_some(),
                8 => number(v, 0, 3600).map(|n| o.kato = n as u32).is_some(),
                9 => number(v, 1, 3600)
                    .map(|n| o.reconnect_delay = n as u32)
                    .is_some(),
                _ => number(v, -1, 1 << 20)
                    .map(|n| o.ctrl_loss_tmo = n as i32)
                    .is_some(),
            };
            if !ok {
                pr_err!("invalid value in '{}'\n", Text(opt));
                return Err(EINVAL);
            }
        }
        if !transport || seen & 1 == 0 {
            pr_err!("transport=rdma is required\n");
            return Err(EINVAL);
        }
        let Some(traddr) = traddr else {
            pr_err!("traddr is required\n");
            return Err(EINVAL);
        };
        o.addr = match SockAddr::parse(traddr, port) {
            Some(a) => a,
            None => {
                pr_err!("traddr '{}' is not an IPv4 or IPv6 address\n", Text(traddr));
                return Err(EINVAL);
            }
        };
        o.traddr.extend_from_slice(traddr, GFP_KERNEL)?;
        o.trsvcid = port;
        if o.subnqn.is_empty() {
            pr_err!("nqn is required\n");
            return Err(EINVAL);
        }
        if o.hostnqn.is_empty() {
            o.hostnqn.extend_from_slice(default_host.0, GFP_KERNEL)?;
        }
        // More queues than CPUs would carry no request: blk-mq maps every CPU to one.
        let cpus = u16::try_from(online_cpus()).unwrap_or(u16::MAX).max(1);
        o.nr_io_queues = o.nr_io_queues.min(cpus);
        Ok(o)
    }
}

/// Shows bytes from user space or the wire as text in a message.
pub(crate) use crate::proto::Text;

/// The default host NQN for identifier `id` (nvme-fabrics' form).
pub(crate) fn default_hostnqn(id: &[u8; 16]) -> Result<CString> {
    CString::try_from_fmt(fmt!(
        "nqn.2014-08.org.nvmexpress:uuid:{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        u32::from_be_bytes([id[0], id[1], id[2], id[3]]),
        u16::from_be_bytes([id[4], id[5]]),
        u16::from_be_bytes([id[6], id[7]]),
        u16::from_be_bytes([id[8], id[9]]),
        u64::from_be_bytes([0, 0, id[10], id[11], id[12], id[13], id[14], id[15]])
    ))
}
