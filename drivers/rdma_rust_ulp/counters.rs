// SPDX-License-Identifier: GPL-2.0

//! The counters of a run, updated lock-free from completion handlers: what the `stats` file
//! shows ([`crate::stats`]).

use core::sync::atomic::{AtomicU64, Ordering};
use kernel::prelude::*;
use kernel::rdma::cq::WcStatus;

/// Sub-buckets per power of two of the latency histogram: 2^5 (3% wide; a percentile is
/// reported at its bucket's middle, within 1.6% of the true value).
const SUB_BITS: usize = 5;
const SUB: usize = 1 << SUB_BITS;
/// Buckets: exact below `SUB`, then `SUB` for each power of two up to 2^63.
const BUCKETS: usize = (65 - SUB_BITS) * SUB;

/// The histogram bucket of a latency of `v` ns.
fn bucket(v: u64) -> usize {
    if v < SUB as u64 {
        return v as usize;
    }
    let msb = 63 - v.leading_zeros() as usize;
    let sub = ((v >> (msb - SUB_BITS)) & (SUB as u64 - 1)) as usize;
    (msb - SUB_BITS + 1) * SUB + sub
}

/// The middle of the latencies that fall in bucket `i`.
fn bucket_mid(i: usize) -> u64 {
    if i < SUB {
        return i as u64;
    }
    let shift = i / SUB - 1;
    let low = ((SUB + i % SUB) as u64) << shift;
    low + ((1u64 << shift) >> 1)
}

/// Counters of one run. Every field is only ever added to (or min/max-ed) by handlers.
pub(crate) struct Counters {
    /// Send-side operations completed successfully.
    pub(crate) messages: AtomicU64,
    pub(crate) bytes: AtomicU64,
    /// Receives completed successfully (SEND, SEND_WITH_IMM).
    pub(crate) received: AtomicU64,
    pub(crate) wc_success: AtomicU64,
    pub(crate) wc_flush: AtomicU64,
    pub(crate) wc_error: AtomicU64,
    /// Failed completions (other than flushes), failed posts, validation failures.
    pub(crate) errors: AtomicU64,
    /// Messages that never arrived (a gap in the sequence, or missing at the end).
    pub(crate) lost: AtomicU64,
    /// Messages that arrived again or out of order.
    pub(crate) dup: AtomicU64,
    /// Payloads (or immediates) that did not match what was sent.
    pub(crate) corrupt: AtomicU64,
    /// A paced run's send requests that waited for the receiver (`Run::pace`).
    pub(crate) waits: AtomicU64,
    lat_min: AtomicU64,
    lat_max: AtomicU64,
    lat_n: AtomicU64,
    /// On the heap: 15 KiB is too much to build on a kernel stack.
    hist: KVec<AtomicU64>,
}

impl Counters {
    pub(crate) fn new() -> Result<Self> {
        let mut hist = KVec::with_capacity(BUCKETS, GFP_KERNEL)?;
        for _ in 0..BUCKETS {
            hist.push(AtomicU64::new(0), GFP_KERNEL)?;
        }
        Ok(Self {
            messages: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            received: AtomicU64::new(0),
            wc_success: AtomicU64::new(0),
            wc_flush: AtomicU64::new(0),
            wc_error: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            dup: AtomicU64::new(0),
            corrupt: AtomicU64::new(0),
            waits: AtomicU64::new(0),
            lat_min: AtomicU64::new(u64::MAX),
            lat_max: AtomicU64::new(0),
            lat_n: AtomicU64::new(0),
            hist,
        })
    }

    pub(crate) fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }

    /// Counts a completion by its status; returns whether it was an error (not a flush). The
    /// caller reports an error through `Run::error`, which counts it in `errors`.
    pub(crate) fn completion(&self, status: WcStatus) -> bool {
        match status {
            WcStatus::Success => Self::add(&self.wc_success, 1),
            WcStatus::WrFlushErr => Self::add(&self.wc_flush, 1),
            _ => {
                Self::add(&self.wc_error, 1);
                return true;
            }
        }
        false
    }

    /// Records one latency sample, in ns.
    pub(crate) fn latency(&self, ns: u64) {
        self.lat_min.fetch_min(ns, Ordering::Relaxed);
        self.lat_max.fetch_max(ns, Ordering::Relaxed);
        self.lat_n.fetch_add(1, Ordering::Relaxed);
        if let Some(b) = self.hist.get(bucket(ns)) {
            b.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Latency min, p50, p99, max (ns); zeros without samples.
    pub(crate) fn latencies(&self) -> [u64; 4] {
        let n = Self::get(&self.lat_n);
        if n == 0 {
            return [0; 4];
        }
        let pct = |p: u64| {
            let want = (n * p).div_ceil(100).max(1);
            let mut seen = 0;
            for (i, b) in self.hist.iter().enumerate() {
                seen += b.load(Ordering::Relaxed);
                if seen >= want {
                    return bucket_mid(i);
                }
            }
            Self::get(&self.lat_max)
        };
        let (min, max) = (Self::get(&self.lat_min), Self::get(&self.lat_max));
        [min, pct(50).clamp(min, max), pct(99).clamp(min, max), max]
    }
}
