// SPDX-License-Identifier: GPL-2.0

//! The fuzz stream: a reproducible sequence of capsules and connection requests, mostly
//! mutations of valid ones.

use super::conn::{Answer, Conn, Opened};
use super::wire::{CmSpec, Cmd, ConnectSpec, CC_ENABLE, DATA_LEN, DATA_MAX, FUZZ_WAIT_MS, PD_MAX};
use crate::ctrl::now_ms;
use crate::proto::{FABRICS, FCTYPE_PROP_GET, FCTYPE_PROP_SET, SQE_LEN};
use kernel::prelude::*;
use kernel::rdma::cm::SockAddr;

/// A fuzz stream, as parsed.
pub(super) struct Fuzz<'a> {
    pub(super) addr: SockAddr,
    pub(super) subnqn: &'a [u8],
    pub(super) hostnqn: &'a [u8],
    pub(super) seed: u64,
    pub(super) count: u64,
}

/// xorshift64*: small, fast and reproducible.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self((seed ^ 0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n` (`n` > 0).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// True `pct` times in 100.
    fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }

    /// One of `from`, or `or` one time in five.
    fn pick<T: Copy>(&mut self, from: &[T], or: T) -> T {
        if self.chance(20) {
            return or;
        }
        from.get(self.below(from.len() as u64) as usize)
            .copied()
            .unwrap_or(or)
    }
}

/// What the fuzz stream saw.
#[derive(Default)]
struct Tally {
    capsules: u64,
    cm: u64,
    refused: u64,
    answered: u64,
    errors: u64,
    silent: u64,
    ended: u64,
    sessions: u64,
}

/// A valid command of the admin queue.
fn admin_template(r: &mut Rng) -> Cmd {
    let mut c = Cmd::default();
    match r.below(7) {
        0 => {
            c.opc = 0x06;
            c.cdw[0] = r.pick(&[0, 1, 2, 3, 6], 1);
            c.nsid = r.pick(&[0, 1, 2, 0xffff_ffff], 1);
            c.len = 4096;
        }
        1 => {
            c.opc = 0x02;
            let lid = r.pick(&[1u32, 2, 3, 4, 0x70], 2);
            let numd = r.pick(&[15u32, 127, 1023], 127);
            c.cdw[0] = lid | (numd << 16);
            c.len = (numd + 1) * 4;
        }
        2 => {
            c.opc = 0x09;
            c.cdw[0] = r.pick(&[7u32, 0x0b, 0x0f], 7);
            c.cdw[1] = r.pick(&[0u32, 3, 0x0003_0003, 5000], 0);
        }
        3 => {
            c.opc = 0x0a;
            c.cdw[0] = r.pick(&[7u32, 0x0b, 0x0f], 7);
        }
        4 => c.opc = 0x18,
        5 => {
            c.opc = FABRICS;
            c.nsid = u32::from(FCTYPE_PROP_GET);
            let (attrib, reg) = r.pick(&[(1u32, 0u32), (0, 8), (0, 0x14), (0, 0x1c)], (0, 0x1c));
            c.cdw[0] = attrib;
            c.cdw[1] = reg;
        }
        _ => {
            c.opc = FABRICS;
            c.nsid = u32::from(FCTYPE_PROP_SET);
            c.cdw[1] = crate::proto::reg::CC;
            c.cdw[2] = CC_ENABLE;
        }
    }
    c
}

/// A valid command of an I/O queue, on namespace 1 (of at least 1,031 blocks).
fn io_template(r: &mut Rng) -> Cmd {
    let mut c = Cmd {
        nsid: 1,
        ..Cmd::default()
    };
    let nlb = r.below(8) as u32;
    let slba = r.below(1024);
    c.cdw[0] = slba as u32;
    c.cdw[1] = (slba >> 32) as u32;
    c.cdw[2] = nlb;
    match r.below(6) {
        0 => {
            c.opc = 0x02;
            c.len = (nlb + 1) * 4096;
        }
        1 => {
            c.opc = 0x01;
            c.len = (nlb + 1) * 4096;
        }
        2 => {
            c.opc = 0x01;
            c.cdw[2] = 0;
            c.sgl = 0x01;
            c.len = 4096;
            c.data = 4096;
        }
        3 => c.opc = 0x00,
        4 => c.opc = 0x08,
        _ => {
            c.opc = 0x09;
            c.cdw[0] = 0;
            c.cdw[1] = 4;
            c.len = 16;
        }
    }
    if c.keyed() && r.chance(30) {
        c.sgl = 0x4f;
    }
    c
}

/// Changes up to three fields of `c`.
fn mutate(r: &mut Rng, c: &mut Cmd) {
    let n = if r.chance(25) { 0 } else { 1 + r.below(3) };
    for _ in 0..n {
        let x = r.next();
        match r.below(14) {
            0 => c.opc = r.next() as u8,
            1 => c.flags = r.pick(&[0x00, 0x01, 0x02, 0x80, 0xc0], x as u8),
            2 => c.cid = r.below(8) as u16,
            3 => c.nsid = r.pick(&[0, 1, 2, 0xffff_ffff, 0xffff_fffe], x as u32),
            4..=6 => {
                let i = r.below(6) as usize;
                if let Some(d) = c.cdw.get_mut(i) {
                    *d = if r.chance(50) {
                        *d ^ (1 << r.below(32))
                    } else {
                        r.next() as u32
                    };
                }
            }
            7 => {
                c.sgl = r.pick(
                    &[0x00, 0x01, 0x02, 0x10, 0x20, 0x30, 0x41, 0x4e, 0x4f, 0x50],
                    x as u8,
                )
            }
            8 => c.len = r.pick(&[0, 1, 16, 512, 4095, 4097, 65536, 0x00ff_ffff], x as u32),
            9 if r.chance(20) => c.key = Some(r.next() as u32),
            10 if r.chance(30) => c.addr = Some(r.pick(&[0, 8, DATA_LEN as u64 - 8, u64::MAX], x)),
            11 => c.off = r.pick(&[1, 64, 4096, u64::MAX], 0),
            // Rarely: past the admin queue's 64 bytes, the target ends the connection.
            12 if r.chance(25) => c.data = r.pick(&[0, 1, 63, 512, 4096, 4097, DATA_MAX], 0),
            _ if r.chance(5) => c.size = Some(1 + r.below(SQE_LEN as u64 - 1) as usize),
            _ => {}
        }
    }
}

/// A connection request, mostly valid.
fn cm_request(r: &mut Rng) -> CmSpec {
    let mut cm = if r.chance(50) {
        CmSpec::ADMIN
    } else {
        CmSpec::IO
    };
    let x = r.next();
    match r.below(7) {
        0 => cm.recfmt = r.pick(&[1, 2, 0xffff], x as u16),
        1 => cm.qid = r.pick(&[1, 2, 17, 0xffff], x as u16),
        2 => cm.hrqsize = r.pick(&[0, 1, 33, 257, 0xffff], x as u16),
        3 => cm.hsqsize = r.pick(&[0, 32, 255, 256, 0xffff], x as u16),
        4 => cm.len = r.below(PD_MAX as u64 + 1) as usize,
        5 => cm.reads = Some(r.below(2) as u8),
        _ => {}
    }
    cm
}

/// Carries out a fuzz stream.
pub(super) fn run(f: &Fuzz<'_>) -> Result {
    let tag: &[u8] = b"fuzz";
    let mut r = Rng::new(f.seed);
    let mut t = Tally::default();
    let mut fails = 0;
    pr_info!("hostile fuzz: seed={} count={}\n", f.seed, f.count);
    let t0 = now_ms();
    let spent = |t: &Tally| t.capsules + t.cm;
    while spent(&t) < f.count {
        if r.chance(25) {
            t.cm += 1;
            let cm = cm_request(&mut r);
            match Conn::open(f.addr, &cm, true) {
                Opened::Up(mut c) => {
                    // Accepted: a Connect that is most likely wrong, then gone.
                    let connect = ConnectSpec {
                        qid: Some(r.below(3) as u16),
                        ..ConnectSpec::default()
                    };
                    t.capsules += 1;
                    let _ = c.connect(tag, &connect, f.subnqn, f.hostnqn, 0xffff, cm.hsqsize);
                }
                Opened::Refused { .. } => t.refused += 1,
                Opened::Failed(_) => t.errors += 1,
            }
            continue;
        }
        let mut admin = match Conn::open(f.addr, &CmSpec::ADMIN, true) {
            Opened::Up(c) => c,
            _ => {
                t.errors += 1;
                fails += 1;
                if fails > 20 {
                    pr_err!("hostile fuzz: the target refuses every connection\n");
                    break;
                }
                kernel::rdma::sync::msleep(100);
                continue;
            }
        };
        fails = 0;
        t.sessions += 1;
        let mut connect = ConnectSpec::default();
        if r.chance(10) {
            match r.below(4) {
                0 => connect.cntlid = Some(r.below(0x10000) as u16),
                1 => connect.sqsize = Some(r.pick(&[0, 32, 0xffff], 0)),
                2 => connect.qid = Some(1),
                _ => connect.inline = true,
            }
        }
        t.capsules += 1;
        let cntlid = match admin.connect(tag, &connect, f.subnqn, f.hostnqn, 0xffff, 31) {
            Ok(Some(id)) => id,
            Ok(None) => continue,
            Err(_) => {
                t.errors += 1;
                continue;
            }
        };
        t.capsules += 1;
        let cc = if r.chance(5) {
            r.next() as u32 | 1
        } else {
            CC_ENABLE
        };
        admin.enable(tag, cc);
        let mut io = None;
        if r.chance(70) {
            // A shallow I/O queue: the target sets up a deep one slowly.
            let cm = CmSpec {
                hrqsize: 32,
                hsqsize: 31,
                ..CmSpec::IO
            };
            if let Opened::Up(mut q) = Conn::open(f.addr, &cm, true) {
                t.capsules += 1;
                let c = ConnectSpec::default();
                if let Ok(Some(_)) = q.connect(tag, &c, f.subnqn, f.hostnqn, cntlid, cm.hsqsize) {
                    io = Some(q);
                }
            }
        }
        let n = 1 + r.below(300);
        for _ in 0..n {
            if spent(&t) >= f.count {
                break;
            }
            let on_io = io.is_some() && r.chance(70);
            let mut c = if on_io {
                io_template(&mut r)
            } else {
                admin_template(&mut r)
            };
            mutate(&mut r, &mut c);
            c.wait = FUZZ_WAIT_MS;
            t.capsules += 1;
            let q = match io.as_mut() {
                Some(q) if on_io => q,
                _ => &mut admin,
            };
            match q.command(tag, &c) {
                Ok(Answer::Cqe(_)) => t.answered += 1,
                Ok(Answer::Silent) => t.silent += 1,
                Ok(Answer::Ended) => {
                    t.ended += 1;
                    break;
                }
                Err(_) => {
                    t.errors += 1;
                    break;
                }
            }
        }
    }
    pr_info!(
        "hostile fuzz: seed={} capsules={} cm_requests={} refused={} answered={} unanswered={} ended_by_target={} sessions={} errors={} ms={}\n",
        f.seed,
        t.capsules,
        t.cm,
        t.refused,
        t.answered,
        t.silent,
        t.ended,
        t.sessions,
        t.errors,
        now_ms() - t0
    );
    Ok(())
}
