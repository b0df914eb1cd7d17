// SPDX-License-Identifier: GPL-2.0

//! The addresses a control string names: a QP endpoint (`QPN:GID:PSN`) and an RDMA server's
//! target (`ADDR:RKEY:LEN`), each parsed and shown in the form the control file takes (socket
//! addresses: [`SockAddr::parse`](kernel::rdma::cm::SockAddr::parse)).

use kernel::debugfs::command::parse_size;
use kernel::rdma::{device::Gid, mr::Remote, qp::Endpoint};

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
    let qpn = u32::try_from(parse_size(parts.next()?)?).ok()?;
    let g = parts.next()?;
    let psn = u32::try_from(parse_size(parts.next()?)?).ok()?;
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
