// SPDX-License-Identifier: GPL-2.0

//! rping's bytes: the 16-byte buffer advertisement and the ping message, whose pattern each
//! side writes and the other checks.

use kernel::prelude::*;
use kernel::rdma::mr::Mr;

/// Bytes of rping's buffer advertisement (`struct rping_rdma_info`).
pub(super) const INFO_LEN: usize = 16;
/// rping's page, by which a ping buffer is sized.
pub(super) const PAGE: usize = 4096;

/// A buffer advertisement.
#[derive(Clone, Copy)]
pub(super) struct Info {
    pub(super) addr: u64,
    pub(super) rkey: u32,
    pub(super) len: u32,
}

impl Info {
    pub(super) fn encode(self, b: &mut [u8]) {
        if b.len() >= INFO_LEN {
            b[..8].copy_from_slice(&self.addr.to_be_bytes());
            b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
            b[12..16].copy_from_slice(&self.len.to_be_bytes());
        }
    }

    pub(super) fn decode(b: &[u8]) -> Option<Self> {
        Some(Info {
            addr: u64::from_be_bytes(b.get(..8)?.try_into().ok()?),
            rkey: u32::from_be_bytes(b.get(8..12)?.try_into().ok()?),
            len: u32::from_be_bytes(b.get(12..16)?.try_into().ok()?),
        })
    }
}

/// rping's message header for ping `n`: `rdma-ping-N: `.
struct Header {
    buf: [u8; 32],
    len: usize,
}

impl Header {
    fn new(n: u64) -> Self {
        let mut h = Header {
            buf: [0; 32],
            len: 0,
        };
        let _ = core::fmt::Write::write_fmt(&mut h, format_args!("rdma-ping-{n}: "));
        h
    }
}

impl core::fmt::Write for Header {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let end = self.len + s.len();
        self.buf
            .get_mut(self.len..end)
            .ok_or(core::fmt::Error)?
            .copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// Byte `i` of rping's `size`-byte message `n` with header `h`: the header, then letters
/// 'A'..='z' in turn from the n-th one, then a NUL.
fn ping_byte(h: &Header, n: u64, size: usize, i: usize) -> u8 {
    let hl = h.len;
    if i + 1 == size {
        0
    } else if i < hl {
        h.buf[i]
    } else {
        65 + ((n % 58) as usize + (i - hl)).rem_euclid(58) as u8
    }
}

/// The ping number of `data` if it is a well-formed rping message.
pub(super) fn check_ping(data: &[u8]) -> Option<u64> {
    let rest = data.strip_prefix(b"rdma-ping-")?;
    let digits = rest.iter().take_while(|c| c.is_ascii_digit()).count();
    if digits == 0 || digits > 19 {
        return None;
    }
    let mut n: u64 = 0;
    for &d in &rest[..digits] {
        n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    let h = Header::new(n);
    let ok = data
        .iter()
        .enumerate()
        .all(|(i, &b)| b == ping_byte(&h, n, data.len(), i));
    ok.then_some(n)
}

/// Whether the first `size` bytes of `a` and `b` are the same.
pub(super) fn same(a: &Mr, b: &Mr, size: usize) -> bool {
    let (mut x, mut y) = ([0u8; 128], [0u8; 128]);
    let mut off = 0;
    while off < size {
        let n = (size - off).min(128);
        if a.read(off, &mut x[..n]).is_err() || b.read(off, &mut y[..n]).is_err() {
            return false;
        }
        if x[..n] != y[..n] {
            return false;
        }
        off += n;
    }
    true
}

/// Writes rping's message `n` into the first `size` bytes of `mr`.
pub(super) fn fill_ping(mr: &mut Mr, n: u64, size: usize) -> Result {
    let h = Header::new(n);
    let mut chunk = [0u8; 128];
    let mut off = 0;
    while off < size {
        let len = (size - off).min(128);
        for (i, b) in chunk[..len].iter_mut().enumerate() {
            *b = ping_byte(&h, n, size, off + i);
        }
        mr.write(off, &chunk[..len])?;
        off += len;
    }
    Ok(())
}
