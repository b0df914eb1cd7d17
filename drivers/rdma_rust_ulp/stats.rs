// SPDX-License-Identifier: GPL-2.0

//! The text of `/sys/kernel/debug/rdma_rust_ulp/stats`: every run the registry keeps, with its
//! [counters](crate::counters), the sums per device, and what a peer needs of this host.

use crate::counters::Counters;
use crate::ctl::{self, Role, ShowEndpoint};
use crate::registry::Ulp;
use crate::run::now_ns;
use core::fmt::{self, Write};
use core::sync::atomic::{AtomicU64, Ordering};

/// A time in ns, shown in microseconds with two decimals, right-aligned in the field's width.
struct Micros(u64);

impl fmt::Display for Micros {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (whole, hundredths) = (self.0 / 1000, self.0 % 1000 / 10);
        let len = whole.checked_ilog10().unwrap_or(0) as usize + 1 + 3;
        for _ in len..f.width().unwrap_or(0) {
            f.write_char(' ')?;
        }
        write!(f, "{whole}.{hundredths:02}")
    }
}

/// Writes the text of `stats` into `t`: a line per run, then a line per device, then the
/// endpoints and targets a peer is given.
pub(crate) fn text(u: &Ulp, t: &mut impl Write) -> fmt::Result {
    writeln!(
        t,
        "{:>3} {:<8} {:<4} {:<8} {:>7} {:>9} {:>5} {:<9} {:>3} {:<7} {:>9} {:>11} {:>9} {:>6} {:>5} {:>5} {:>7} {:>9} {:>8} {:>6} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10} {:>5}",
        "id", "dev", "mode", "op", "size", "count", "depth", "poll", "val", "state", "messages",
        "bytes", "received", "errors", "lost", "dup", "corrupt", "wc_ok", "wc_flush", "wc_err",
        "MB/s", "lat_min_us", "lat_p50_us", "lat_p99_us", "lat_max_us", "elapsed_us", "waits"
    )?;
    u.each_device(|d, runs| -> fmt::Result {
        for r in runs {
            let s = &r.counters;
            let state = if r.active() {
                if r.sender_done() {
                    "ended"
                } else {
                    "running"
                }
            } else {
                "done"
            };
            let start = r.start_ns.load(Ordering::Relaxed);
            let end = match r.end_ns.load(Ordering::Relaxed) {
                0 => now_ns(),
                e => e,
            };
            let elapsed_ns = (end - start).max(1) as u64;
            let bytes = Counters::get(&s.bytes);
            // MB/s with one decimal: bytes * 1000 / ns = MB/s (10^6 bytes per second).
            let mbps10 = bytes.saturating_mul(10_000) / elapsed_ns;
            let [lmin, l50, l99, lmax] = s.latencies();
            writeln!(
                t,
                "{:>3} {:<8} {:<4} {:<8} {:>7} {:>9} {:>5} {:<9} {:>3} {:<7} {:>9} {:>11} {:>9} {:>6} {:>5} {:>5} {:>7} {:>9} {:>8} {:>6} {:>6}.{} {:>10} {:>10} {:>10} {:>10} {:>10} {:>5}",
                r.id,
                d.name(),
                ctl::mode_name(r.spec.mode),
                r.spec.op.name(),
                r.spec.size,
                r.spec.count,
                r.spec.depth,
                r.spec.poll.name(),
                u8::from(r.spec.validate),
                state,
                Counters::get(&s.messages),
                bytes,
                Counters::get(&s.received),
                Counters::get(&s.errors),
                Counters::get(&s.lost),
                Counters::get(&s.dup),
                Counters::get(&s.corrupt),
                Counters::get(&s.wc_success),
                Counters::get(&s.wc_flush),
                Counters::get(&s.wc_error),
                mbps10 / 10,
                mbps10 % 10,
                Micros(lmin),
                Micros(l50),
                Micros(l99),
                Micros(lmax),
                elapsed_ns / 1000,
                Counters::get(&s.waits)
            )?;
        }
        Ok(())
    })?;
    // Per device: the sums over the runs listed.
    u.each_device(|d, runs| -> fmt::Result {
        let sum = |f: fn(&Counters) -> &AtomicU64| -> u64 {
            runs.iter().map(|r| Counters::get(f(&r.counters))).sum()
        };
        writeln!(
            t,
            "device {} runs={} messages={} bytes={} received={} errors={} lost={} dup={} corrupt={} wc_ok={} wc_flush={} wc_err={} port_events={}",
            d.name(),
            runs.len(),
            sum(|s| &s.messages),
            sum(|s| &s.bytes),
            sum(|s| &s.received),
            sum(|s| &s.errors),
            sum(|s| &s.lost),
            sum(|s| &s.dup),
            sum(|s| &s.corrupt),
            sum(|s| &s.wc_success),
            sum(|s| &s.wc_flush),
            sum(|s| &s.wc_error),
            d.port_events(),
        )
    })?;
    // Server and client runs: this host's QP, for the peer's `peer=`, and an RDMA server's
    // target, for the client's `go ... remote=`.
    u.each_device(|d, runs| -> fmt::Result {
        for r in runs {
            if let (Some(e), true) = (r.endpoint, r.spec.role != Role::Loopback) {
                writeln!(
                    t,
                    "endpoint {} {} {} {}",
                    r.id,
                    d.name(),
                    r.spec.role.name(),
                    ShowEndpoint(e)
                )?;
            }
            if let (Some(m), Role::Server) = (r.target_remote(), r.spec.role) {
                writeln!(t, "target {} {} {}", r.id, d.name(), m)?;
            }
        }
        Ok(())
    })
}
