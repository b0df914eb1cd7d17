// SPDX-License-Identifier: GPL-2.0

//! The socket addresses of connection manager ids (`struct sockaddr_in`, `sockaddr_in6`).
//!
//! C header: [`include/linux/in6.h`](srctree/include/uapi/linux/in6.h)

use crate::bindings;
use core::fmt;

/// An IPv4 address and port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SockAddrV4 {
    /// The address, most significant byte first (`[10, 0, 0, 1]` is 10.0.0.1).
    pub ip: [u8; 4],
    /// The port (0: any, for a bind).
    pub port: u16,
}

/// An IPv6 address, port and scope.
///
/// # Examples
///
/// ```
/// use kernel::rdma::cm::{SockAddr, SockAddrV6};
///
/// let mut ip = [0u8; 16];
/// ip[..2].copy_from_slice(&[0xfe, 0x80]);
/// ip[15] = 1;
/// let a = SockAddr::from(SockAddrV6 { ip, port: 7000, scope_id: 3 });
/// let s = kernel::str::CString::try_from_fmt(kernel::fmt!("{a}"))?;
/// assert_eq!(s.to_str()?, "[fe80:0:0:0:0:0:0:1%3]:7000");
/// assert!(a.is_link_local());
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SockAddrV6 {
    /// The address, most significant byte first.
    pub ip: [u8; 16],
    /// The port (0: any, for a bind).
    pub port: u16,
    /// The interface index a link-local address belongs to (0 for other addresses).
    pub scope_id: u32,
}

/// The address of one end of a connection: IPv4 or IPv6.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SockAddr {
    /// IPv4.
    V4(SockAddrV4),
    /// IPv6, including link-local addresses with their scope.
    V6(SockAddrV6),
}

impl From<SockAddrV4> for SockAddr {
    fn from(a: SockAddrV4) -> Self {
        Self::V4(a)
    }
}

impl From<SockAddrV6> for SockAddr {
    fn from(a: SockAddrV6) -> Self {
        Self::V6(a)
    }
}

impl SockAddr {
    /// The port.
    pub fn port(&self) -> u16 {
        match self {
            Self::V4(a) => a.port,
            Self::V6(a) => a.port,
        }
    }

    /// Whether this is an IPv6 link-local address (`fe80::/10`), which needs its scope.
    pub fn is_link_local(&self) -> bool {
        matches!(self, Self::V6(a) if a.ip[0] == 0xfe && a.ip[1] & 0xc0 == 0x80)
    }

    /// Whether this is a multicast group address (`224.0.0.0/4`, `ff00::/8`): what
    /// [`Id::join_multicast`](super::Id::join_multicast) takes.
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::cm::{SockAddr, SockAddrV4};
    ///
    /// let group = SockAddr::from(SockAddrV4 { ip: [239, 1, 2, 3], port: 0 });
    /// let host = SockAddr::from(SockAddrV4 { ip: [10, 1, 2, 3], port: 0 });
    /// assert!(group.is_multicast() && !host.is_multicast());
    /// ```
    pub fn is_multicast(&self) -> bool {
        match self {
            Self::V4(a) => a.ip[0] & 0xf0 == 0xe0,
            Self::V6(a) => a.ip[0] == 0xff,
        }
    }

    /// The same address with port `port`.
    pub fn with_port(self, port: u16) -> Self {
        match self {
            Self::V4(a) => Self::V4(SockAddrV4 { port, ..a }),
            Self::V6(a) => Self::V6(SockAddrV6 { port, ..a }),
        }
    }

    /// Parses an address as a control file or module parameter spells it, with port `port`:
    /// dotted-quad IPv4, or IPv6 (`::` standing for one run of zero groups) with an optional
    /// numeric scope (`fe80::1%3`). `None` for anything else.
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::cm::{SockAddr, SockAddrV4};
    ///
    /// let a = SockAddr::parse(b"10.77.0.1", 7000);
    /// assert_eq!(a, Some(SockAddr::from(SockAddrV4 { ip: [10, 77, 0, 1], port: 7000 })));
    /// assert!(SockAddr::parse(b"fe80::1%2", 1).is_some_and(|a| a.is_link_local()));
    /// assert!(SockAddr::parse(b"10.77.0.256", 1).is_none());
    /// assert!(SockAddr::parse(b"1:2:3:4:5:6:7:8:9", 1).is_none());
    /// ```
    pub fn parse(text: &[u8], port: u16) -> Option<Self> {
        if !text.contains(&b':') {
            return Some(Self::V4(SockAddrV4 {
                ip: parse_ipv4(text)?,
                port,
            }));
        }
        let (ip, scope_id) = match text.iter().position(|&c| c == b'%') {
            Some(i) => (
                &text[..i],
                u32::try_from(decimal(&text[i + 1..], 10)?).ok()?,
            ),
            None => (text, 0),
        };
        Some(Self::V6(SockAddrV6 {
            ip: parse_ipv6(ip)?,
            port,
            scope_id,
        }))
    }

    /// The address as the C API takes it.
    pub(crate) fn to_raw(self) -> bindings::__kernel_sockaddr_storage {
        // SAFETY: All-zeroes is a valid socket address storage (and the padding of both
        // address kinds must be zero).
        let mut ss: bindings::__kernel_sockaddr_storage = unsafe { core::mem::zeroed() };
        let at = (&raw mut ss).cast::<u8>();
        match self {
            Self::V4(a) => {
                // SAFETY: All-zeroes is a valid `sockaddr_in`.
                let mut sin: bindings::sockaddr_in = unsafe { core::mem::zeroed() };
                sin.sin_family = bindings::AF_INET as u16;
                sin.sin_port = a.port.to_be();
                sin.sin_addr.s_addr = u32::from_ne_bytes(a.ip);
                // SAFETY: The storage is large enough for any socket address.
                unsafe { at.cast::<bindings::sockaddr_in>().write_unaligned(sin) };
            }
            Self::V6(a) => {
                // SAFETY: All-zeroes is a valid `sockaddr_in6`.
                let mut sin6: bindings::sockaddr_in6 = unsafe { core::mem::zeroed() };
                sin6.sin6_family = bindings::AF_INET6 as u16;
                sin6.sin6_port = a.port.to_be();
                sin6.sin6_addr.in6_u.u6_addr8 = a.ip;
                sin6.sin6_scope_id = a.scope_id;
                // SAFETY: The storage is large enough for any socket address.
                unsafe { at.cast::<bindings::sockaddr_in6>().write_unaligned(sin6) };
            }
        }
        ss
    }

    /// # Safety
    ///
    /// `ss` must point at a valid socket address.
    pub(crate) unsafe fn from_raw(ss: *const bindings::__kernel_sockaddr_storage) -> Option<Self> {
        // SAFETY: Every socket address starts with its family; the storage is large enough for
        // either kind, which it holds when the family says so.
        unsafe {
            match u32::from((*ss.cast::<bindings::sockaddr>()).sa_family) {
                bindings::AF_INET => {
                    let sin = ss.cast::<bindings::sockaddr_in>().read_unaligned();
                    Some(Self::V4(SockAddrV4 {
                        ip: sin.sin_addr.s_addr.to_ne_bytes(),
                        port: u16::from_be(sin.sin_port),
                    }))
                }
                bindings::AF_INET6 => {
                    let sin6 = ss.cast::<bindings::sockaddr_in6>().read_unaligned();
                    Some(Self::V6(SockAddrV6 {
                        ip: sin6.sin6_addr.in6_u.u6_addr8,
                        port: u16::from_be(sin6.sin6_port),
                        scope_id: sin6.sin6_scope_id,
                    }))
                }
                _ => None,
            }
        }
    }
}

/// A decimal number of 1 to `max_digits` digits.
fn decimal(v: &[u8], max_digits: usize) -> Option<u64> {
    if v.is_empty() || v.len() > max_digits {
        return None;
    }
    v.iter().try_fold(0u64, |n, &d| {
        d.is_ascii_digit().then(|| n * 10 + u64::from(d - b'0'))
    })
}

/// Parses a dotted-quad IPv4 address.
fn parse_ipv4(v: &[u8]) -> Option<[u8; 4]> {
    let mut ip = [0u8; 4];
    let mut parts = v.split(|&c| c == b'.');
    for b in ip.iter_mut() {
        *b = u8::try_from(decimal(parts.next()?, 3)?).ok()?;
    }
    parts.next().is_none().then_some(ip)
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
    let elided = v.windows(2).position(|w| w == b"::");
    let (nh, nt) = match elided {
        Some(i) => {
            let (nh, nt) = (groups(&v[..i], &mut head)?, groups(&v[i + 2..], &mut tail)?);
            // `::` stands for at least one group.
            if nh + nt > 7 {
                return None;
            }
            (nh, nt)
        }
        None => (groups(v, &mut head)?, 0),
    };
    if elided.is_none() && nh != 8 {
        return None;
    }
    let mut ip = [0u8; 16];
    let all = head[..nh]
        .iter()
        .enumerate()
        .chain(tail[..nt].iter().enumerate().map(|(i, g)| (8 - nt + i, g)));
    for (i, g) in all {
        let [hi, lo] = g.to_be_bytes();
        ip[2 * i] = hi;
        ip[2 * i + 1] = lo;
    }
    Some(ip)
}

impl fmt::Display for SockAddrV4 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d] = self.ip;
        write!(f, "{a}.{b}.{c}.{d}:{}", self.port)
    }
}

impl fmt::Display for SockAddrV6 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, pair) in self.ip.chunks(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:x}", u16::from_be_bytes([pair[0], pair[1]]))?;
        }
        if self.scope_id != 0 {
            write!(f, "%{}", self.scope_id)?;
        }
        write!(f, "]:{}", self.port)
    }
}

impl fmt::Display for SockAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::V4(a) => a.fmt(f),
            Self::V6(a) => a.fmt(f),
        }
    }
}
