// SPDX-License-Identifier: GPL-2.0

//! The addresses a control string names: a QP endpoint (`QPN:GID:PSN`), an IPv4 or IPv6
//! socket address, and an RDMA server's target (`ADDR:RKEY:LEN`); each parsed and shown in
//! the form the control file takes.

use super::parse_num;
use kernel::rdma::{
    cm::{SockAddr, SockAddrV4, SockAddrV6},
    device::Gid,
    mr::Remote,
    qp::Endpoint,
};

/// Shows an endpoint as `QPN:GID:PSN` (GID in 32 hex digits), the form `peer=` takes.
pub(crate) struct ShowEndpoint(pub(crate) Endpoint);

impl core::fmt::Display for ShowEndpoint {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}:", self.0.qpn)?;
        for b in self.0.gid.0 {
            write!(f, "{b:02x}")?;
        }
        write!(f, ":{}", self.0.psn)
    }
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Parses `QPN:GID:PSN` (see [`ShowEndpoint`]).
pub(super) fn parse_endpoint(v: &[u8]) -> Option<Endpoint> {
    let mut parts = v.split(|&c| c == b':');
    let qpn = u32::try_from(parse_num(parts.next()?)?).ok()?;
    let g = parts.next()?;
    let psn = u32::try_from(parse_num(parts.next()?)?).ok()?;
    if parts.next().is_some() || g.len() != 32 || qpn > 0xff_ffff || psn > 0xff_ffff {
        return None;
    }
    let mut gid = [0u8; 16];
    for (i, b) in gid.iter_mut().enumerate() {
        *b = hex(g[2 * i])? << 4 | hex(g[2 * i + 1])?;
    }
    Some(Endpoint {
        qpn,
        gid: Gid(gid),
        psn,
    })
}

/// `a` with port `port`.
pub(super) fn with_port(a: SockAddr, port: u16) -> SockAddr {
    match a {
        SockAddr::V4(v) => SockAddr::V4(SockAddrV4 { port, ..v }),
        SockAddr::V6(v) => SockAddr::V6(SockAddrV6 { port, ..v }),
    }
}

/// Parses an IPv4 address, or an IPv6 one with an optional numeric scope (`fe80::1%3`), with
/// port `port`.
pub(super) fn parse_addr(v: &[u8], port: u16) -> Option<SockAddr> {
    if !v.contains(&b':') {
        return Some(SockAddr::V4(SockAddrV4 {
            ip: parse_ipv4(v)?,
            port,
        }));
    }
    let (ip, scope_id) = match v.iter().position(|&c| c == b'%') {
        Some(i) => (&v[..i], u32::try_from(parse_num(&v[i + 1..])?).ok()?),
        None => (v, 0),
    };
    Some(SockAddr::V6(SockAddrV6 {
        ip: parse_ipv6(ip)?,
        port,
        scope_id,
    }))
}

/// Parses the groups of an IPv6 address, `::` standing for one run of zero groups.
fn parse_ipv6(v: &[u8]) -> Option<[u8; 16]> {
    let groups = |s: &[u8], out: &mut [u16; 8]| -> Option<usize> {
        if s.is_empty() {
            return Some(0);
        }
        let mut n = 0;
        for g in s.split(|&c| c == b':') {
            if g.is_empty() || g.len() > 4 || n == 8 {
                return None;
            }
            let mut x = 0u16;
            for &c in g {
                x = (x << 4) | u16::from((c as char).to_digit(16)? as u8);
            }
            out[n] = x;
            n += 1;
        }
        Some(n)
    };
    let (mut head, mut tail) = ([0u16; 8], [0u16; 8]);
    let (nh, nt) = match v.windows(2).position(|w| w == b"::") {
        Some(i) => {
            let (h, t) = (&v[..i], &v[i + 2..]);
            let (nh, nt) = (groups(h, &mut head)?, groups(t, &mut tail)?);
            // `::` stands for at least one group.
            if nh + nt > 7 {
                return None;
            }
            (nh, nt)
        }
        None => (groups(v, &mut head)?, 0),
    };
    if !v.windows(2).any(|w| w == b"::") && nh != 8 {
        return None;
    }
    let mut all = [0u16; 8];
    all[..nh].copy_from_slice(&head[..nh]);
    all[8 - nt..].copy_from_slice(&tail[..nt]);
    let mut ip = [0u8; 16];
    for (i, g) in all.iter().enumerate() {
        ip[2 * i..2 * i + 2].copy_from_slice(&g.to_be_bytes());
    }
    Some(ip)
}

/// Parses a dotted-quad IPv4 address.
fn parse_ipv4(v: &[u8]) -> Option<[u8; 4]> {
    let mut ip = [0u8; 4];
    let mut parts = v.split(|&c| c == b'.');
    for b in ip.iter_mut() {
        let p = parts.next()?;
        if p.is_empty() || p.len() > 3 || !p.iter().all(u8::is_ascii_digit) {
            return None;
        }
        *b = u8::try_from(parse_num(p)?).ok()?;
    }
    parts.next().is_none().then_some(ip)
}

/// An RDMA server's target as its peer is given it: where it starts, and how long it is.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PeerTarget {
    pub(crate) remote: Remote,
    pub(crate) len: u64,
}

impl core::fmt::Display for PeerTarget {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "{:x}:{:x}:{:x}",
            self.remote.addr, self.remote.rkey, self.len
        )
    }
}

/// Parses `ADDR:RKEY:LEN` (hex), the form of a server's `target` line ([`PeerTarget`]).
pub(super) fn parse_remote(v: &[u8]) -> Option<PeerTarget> {
    let num = |s: &[u8]| {
        if s.is_empty() || s.len() > 16 {
            return None;
        }
        s.iter()
            .try_fold(0u64, |n, &c| Some(n << 4 | u64::from(hex(c)?)))
    };
    let mut parts = v.split(|&c| c == b':');
    let (addr, rkey, len) = (
        num(parts.next()?)?,
        num(parts.next()?)?,
        num(parts.next()?)?,
    );
    if parts.next().is_some() {
        return None;
    }
    Some(PeerTarget {
        remote: Remote {
            addr,
            rkey: u32::try_from(rkey).ok()?,
        },
        len,
    })
}
