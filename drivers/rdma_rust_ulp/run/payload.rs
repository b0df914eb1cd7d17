// SPDX-License-Identifier: GPL-2.0

//! What a validated run's messages hold, and the checks of it: byte `i` of message `seq` is
//! [`pattern`]`(seq, i)`; a message to a receiver starts with an 8-byte header (its sequence
//! number and its run's id) instead, while an RDMA target's slot holds the bare pattern, checked
//! in place by position.

use crate::ctl::HEADER;
use kernel::rdma::mr::Mr;

/// Byte `i` of message `seq`.
fn pattern(seq: u64, i: usize) -> u8 {
    (seq as usize).wrapping_mul(31).wrapping_add(i) as u8 ^ 0xa5
}

/// Writes message `seq`'s pattern into `buf` (its bytes `0 .. buf.len()`).
pub(super) fn fill_pattern(buf: &mut [u8], seq: u64) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = pattern(seq, i);
    }
}

/// Whether `buf` holds bytes `from .. from + buf.len()` of message `seq`'s pattern.
pub(super) fn holds(buf: &[u8], from: usize, seq: u64) -> bool {
    buf.iter()
        .enumerate()
        .all(|(i, &b)| b == pattern(seq, from + i))
}

/// Writes message `seq` of run `id` into `buf`: the pattern, under a header when `header`
/// (messages to a receiver; RDMA WRITEs are checked in place by position, without one).
pub(super) fn fill(buf: &mut [u8], id: u32, seq: u64, header: bool) {
    fill_pattern(buf, seq);
    if header && buf.len() >= HEADER {
        buf[..4].copy_from_slice(&(seq as u32).to_le_bytes());
        buf[4..8].copy_from_slice(&id.to_le_bytes());
    }
}

/// The sequence number of a validated message of run `id` (of any run if `None`: the sender
/// is on another host), if it is intact.
pub(super) fn check(buf: &[u8], id: Option<u32>) -> Option<u32> {
    let seq = u32::from_le_bytes(buf.get(..4)?.try_into().ok()?);
    let run = u32::from_le_bytes(buf.get(4..8)?.try_into().ok()?);
    let ok = id.map_or(true, |id| run == id)
        && buf
            .get(HEADER..)
            .is_some_and(|rest| holds(rest, HEADER, u64::from(seq)));
    ok.then_some(seq)
}

/// Whether bytes `off .. off + len` of `mr` hold message `seq` (with no header: RDMA target).
pub(super) fn check_mr(mr: &Mr, off: usize, len: usize, seq: u64) -> bool {
    let mut chunk = [0u8; 128];
    let mut done = 0;
    while done < len {
        let n = (len - done).min(chunk.len());
        if mr.read(off + done, &mut chunk[..n]).is_err() {
            return false;
        }
        if !holds(&chunk[..n], done, seq) {
            return false;
        }
        done += n;
    }
    true
}
