// SPDX-License-Identifier: GPL-2.0

//! Cases that move data and check it: each operation, poll context and kind of memory.

use super::*;

/// Copies in and out of mapped memory, at every alignment of either side and lengths around a
/// word: exactly the bytes asked for move, none beside them.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_copy_alignment() -> c_int {
    ret((|| {
        const PAD: usize = 8;
        let dev = rxe0()?;
        let pd = Pd::new(&dev)?;
        let mut page: DmaPage = DmaPage::new(&pd)?;
        let page_size = kernel::page::PAGE_SIZE;
        let mut src = [0u8; 128];
        for (i, b) in src.iter_mut().enumerate() {
            *b = pattern(3, i);
        }
        let zeros = [0u8; 128 + 2 * PAD];
        let mut window = [0u8; 128 + 2 * PAD];
        let mut out = [0u8; 128 + 2 * PAD];
        for base in [PAD, page_size - 128] {
            for at in base..base + 8 {
                for from in 0..8 {
                    for len in [1usize, 7, 8, 9, 15, 16, 17, 63, 64, 65, 100] {
                        let w0 = at - PAD;
                        let wlen = len + 2 * PAD;
                        page.write(w0, &zeros[..wlen])?;
                        page.write(at, &src[from..from + len])?;
                        // The bytes written, and zeros on both sides.
                        page.read(w0, &mut window[..wlen])?;
                        let ok = window[..PAD].iter().all(|&b| b == 0)
                            && window[PAD..PAD + len] == src[from..from + len]
                            && window[PAD + len..wlen].iter().all(|&b| b == 0);
                        check!(ok, "write of {} bytes at {} from {}", len, at, from);
                        // Read back at another alignment: the bytes beside are untouched.
                        out.fill(0xa5);
                        page.read(at, &mut out[from..from + len])?;
                        let ok = out[..from].iter().all(|&b| b == 0xa5)
                            && out[from..from + len] == src[from..from + len]
                            && out[from + len..].iter().all(|&b| b == 0xa5);
                        check!(ok, "read of {} bytes at {} into {}", len, at, from);
                    }
                }
            }
        }
        drop((page, pd));
        leak_check()
    })())
}

/// PD, CQ in every poll context; CQ size and vector limits.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_pd_cq() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let pd = Pd::new(&dev)?;
        let _ = pd.local_dma_lkey();
        for poll in [
            PollContext::Softirq,
            PollContext::Workqueue,
            PollContext::UnboundWorkqueue,
            PollContext::Direct,
        ] {
            let cq = Cq::new(&dev, 32, 0, poll)?;
            check!(
                cq.entries() >= 32,
                "{poll:?}: CQ of {} entries",
                cq.entries()
            );
            check!(
                cq.free_entries() == cq.entries(),
                "fresh CQ has reservations"
            );
        }
        let max = dev.attrs().max_cqe();
        check!(
            Cq::new(&dev, 0, 0, PollContext::Softirq).err() == Some(EINVAL),
            "0 entries"
        );
        check!(
            Cq::new(&dev, max + 1, 0, PollContext::Softirq).err() == Some(EINVAL),
            "max_cqe + 1"
        );
        let v = dev.num_comp_vectors();
        check!(
            Cq::new(&dev, 8, v, PollContext::Softirq).err() == Some(EINVAL),
            "bad vector"
        );
        check!(
            DmaBuf::new(&pd, 0, GFP_KERNEL).err() == Some(EINVAL),
            "empty DmaBuf"
        );
        check!(Mr::new(&pd, 0).err() == Some(EINVAL), "MR of 0 pages");
        Ok(())
    })())
}

/// RC SEND/RECV, 4 KiB, payload checked; SEND_WITH_IMM carries its immediate.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_rc_send_recv() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let p = rc_pair(&dev)?;
        let rs = sink::<DmaBuf>()?;
        let ss = sink::<DmaBuf>()?;
        post_recv(&p.b, &rs, 4096)?;
        post_recv(&p.b, &rs, 4096)?;
        p.a.post_send(twr(filled(&p.pd, 4096, 1)?, &ss)?, |t, ops| {
            ops.send(&t.payload, 0..4096)?;
            Ok(())
        })?;
        p.a.post_send(twr(filled(&p.pd, 100, 2)?, &ss)?, |t, ops| {
            ops.send_imm(&t.payload, 0..100, 0xdead_beef)?;
            Ok(())
        })?;
        let sent = ss.wait(2).inspect_err(|_| diag(&p))?;
        let mut got = rs.wait(2)?;
        for d in sent.iter() {
            check!(
                d.status == WcStatus::Success && d.opcode == Some(WcOpcode::Send),
                "send: {:?} {:?}",
                d.status,
                d.opcode
            );
        }
        check!(got.len() == 2, "{} receives", got.len());
        let [r1, r2] = &mut got[..] else {
            return Err(EINVAL);
        };
        check!(
            r1.status == WcStatus::Success && r1.opcode == Some(WcOpcode::Recv),
            "recv 1: {:?}",
            r1.status
        );
        check!(r1.byte_len == 4096, "recv 1: {} bytes", r1.byte_len);
        check!(r1.imm.is_none(), "recv 1 has immediate data");
        check!(matches(r1.payload.as_slice(), 1), "recv 1: payload differs");
        check!(
            r2.byte_len == 100 && r2.imm == Some(0xdead_beef),
            "recv 2: {} bytes imm {:?}",
            r2.byte_len,
            r2.imm
        );
        check!(
            matches(&r2.payload.as_slice()[..100], 2),
            "recv 2: payload differs"
        );
        check!(
            p.a.send_outstanding() == 0 && p.b.recv_outstanding() == 0,
            "slots not given back"
        );
        drop((sent, got, p));
        leak_check()
    })())
}

/// RDMA WRITE into a fast-registered MR of the peer, then RDMA READ it back.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_rc_write_read() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let p = rc_pair(&dev)?;
        let len = 3 * 4096 + 100;
        let mr = registered_mr(&p.b, len, 0, Access::REMOTE_WRITE | Access::REMOTE_READ)?;
        let remote = mr.remote()?;
        post_one(
            &p.a,
            filled(&p.pd, len, 7)?,
            WcStatus::Success,
            WcOpcode::RdmaWrite,
            |b, ops| {
                ops.write(b, 0..len, remote)?;
                Ok(())
            },
        )?;
        check!(
            matches(&mr_bytes(&mr)?, 7),
            "the peer's MR does not hold what was written"
        );
        // READ the second page back into a fresh buffer.
        let mut r = post_one(
            &p.a,
            DmaBuf::new(&p.pd, 4096, GFP_KERNEL)?,
            WcStatus::Success,
            WcOpcode::RdmaRead,
            |b, ops| {
                ops.read(b, 0..4096, remote.offset(4096))?;
                Ok(())
            },
        )?;
        let expect = mr_bytes(&mr)?;
        check!(
            r.payload.as_slice() == &expect[4096..8192],
            "read data differs from the MR"
        );
        // WRITE_WITH_IMM consumes a receive at the peer, which reports the immediate.
        let rs = sink::<DmaBuf>()?;
        post_recv(&p.b, &rs, 64)?;
        post_one(
            &p.a,
            filled(&p.pd, 64, 9)?,
            WcStatus::Success,
            WcOpcode::RdmaWrite,
            |b, ops| {
                ops.write_imm(b, 0..64, remote, 42)?;
                Ok(())
            },
        )?;
        let got = rs.wait(1)?;
        check!(
            got[0].opcode == Some(WcOpcode::RecvRdmaWithImm) && got[0].imm == Some(42),
            "write_imm at the peer: {:?} {:?}",
            got[0].opcode,
            got[0].imm
        );
        check!(matches(&mr_bytes(&mr)?[..64], 9), "write_imm data");
        drop((r, got, mr, p));
        leak_check()
    })())
}

/// Atomic compare-and-swap and fetch-and-add on the peer's MR, results checked.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_rc_atomics() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        if !dev.attrs().has_atomics() {
            return Err(ENODEV);
        }
        let p = rc_pair(&dev)?;
        let mut mr = registered_mr(&p.b, 64, 0, Access::REMOTE_ATOMIC)?;
        mr.write(0, &5u64.to_ne_bytes())?;
        let remote = mr.remote()?;
        let word = |b: &mut DmaBuf, off: usize| -> Result<u64> {
            let mut w = [0u8; 8];
            w.copy_from_slice(b.as_slice().get(off..off + 8).ok_or(EINVAL)?);
            Ok(u64::from_ne_bytes(w))
        };
        let mut d = post_one(
            &p.a,
            DmaBuf::new(&p.pd, 16, GFP_KERNEL)?,
            WcStatus::Success,
            WcOpcode::CompSwap,
            |b, ops| {
                ops.compare_swap(b, 0, remote, 5, 9)?;
                Ok(())
            },
        )?;
        check!(
            word(&mut d.payload, 0)? == 5,
            "cmp_swp returned {}",
            word(&mut d.payload, 0)?
        );
        check!(mr_word(&mr, 0)? == 9, "cmp_swp left {}", mr_word(&mr, 0)?);
        // A compare that does not match leaves memory alone.
        let mut d = post_one(
            &p.a,
            DmaBuf::new(&p.pd, 16, GFP_KERNEL)?,
            WcStatus::Success,
            WcOpcode::CompSwap,
            |b, ops| {
                ops.compare_swap(b, 8, remote, 5, 77)?;
                Ok(())
            },
        )?;
        check!(
            word(&mut d.payload, 8)? == 9 && mr_word(&mr, 0)? == 9,
            "failed compare changed memory"
        );
        let mut d = post_one(
            &p.a,
            DmaBuf::new(&p.pd, 8, GFP_KERNEL)?,
            WcStatus::Success,
            WcOpcode::FetchAdd,
            |b, ops| {
                ops.fetch_add(b, 0, remote, 3)?;
                Ok(())
            },
        )?;
        check!(
            word(&mut d.payload, 0)? == 9,
            "fetch_add returned {}",
            word(&mut d.payload, 0)?
        );
        check!(
            mr_word(&mr, 0)? == 12,
            "fetch_add left {}",
            mr_word(&mr, 0)?
        );
        // Misaligned atomics are refused before the device sees them, and the request is back.
        let s = sink::<DmaBuf>()?;
        let e =
            p.a.post_send(twr(DmaBuf::new(&p.pd, 16, GFP_KERNEL)?, &s)?, |t, ops| {
                ops.fetch_add(&mut t.payload, 0, remote.offset(4), 1)?;
                Ok(())
            });
        check!(
            matches!(&e, Err(pe) if pe.err == EINVAL),
            "misaligned atomic accepted"
        );
        drop((e, d, mr, p));
        leak_check()
    })())
}

/// UD SEND through an address handle; the receive buffer starts with the GRH.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_ud_send_recv() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let pd = Pd::new(&dev)?;
        let cq = Cq::new(&dev, 64, 0, PollContext::Softirq)?;
        let qkey = 0x1111_2222;
        let a = ud_qp(&pd, &cq, qkey)?;
        let b = ud_qp(&pd, &cq, qkey)?;
        let eb = b.endpoint()?;
        let ah = Ah::new(&pd, 1, &eb.gid)?;
        let rs = sink::<DmaBuf>()?;
        post_recv(&b, &rs, GRH_LEN + 512)?;
        let ss = sink::<(DmaBuf, Arc<Ah>)>()?;
        a.post_send(twr((filled(&pd, 512, 3)?, ah.clone()), &ss)?, |t, ops| {
            ops.send_ud(&t.payload.0, 0..512, &t.payload.1, eb.qpn, qkey)?;
            Ok(())
        })?;
        let sent = ss.wait(1)?;
        check!(
            sent[0].status == WcStatus::Success,
            "UD send: {:?}",
            sent[0].status
        );
        let mut got = rs.wait(1)?;
        let r = &mut got[0];
        check!(r.status == WcStatus::Success, "UD recv: {:?}", r.status);
        check!(
            r.byte_len as usize == GRH_LEN + 512,
            "UD recv of {} bytes",
            r.byte_len
        );
        check!(
            r.src_qp == Some(a.qpn()),
            "UD src_qp {:?}, sender is {}",
            r.src_qp,
            a.qpn()
        );
        check!(
            matches(&r.payload.as_slice()[GRH_LEN..], 3),
            "UD payload differs"
        );
        // RDMA on a UD QP is refused and the request comes back.
        let e = a.post_send(twr((filled(&pd, 8, 0)?, ah.clone()), &ss)?, |t, ops| {
            ops.write(&t.payload.0, 0..8, Remote { addr: 0, rkey: 0 })?;
            Ok(())
        });
        check!(
            matches!(&e, Err(pe) if pe.err == EINVAL),
            "RDMA WRITE on UD accepted"
        );
        drop((e, sent, got, a, b, ah));
        leak_check()
    })())
}

/// Inline sends up to the QP's max_inline; longer ones are refused.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_inline() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let caps = QpCaps {
            max_inline: 128,
            ..QpCaps::default()
        };
        let p = rc_pair_with(&dev, &caps, PollContext::Softirq, &RcParams::default())?;
        let max = p.a.caps().max_inline as usize;
        check!(max >= 128, "max_inline {max}");
        let rs = sink::<DmaBuf>()?;
        let ss = sink::<DmaBuf>()?;
        post_recv(&p.b, &rs, 256)?;
        p.a.post_send(twr(filled(&p.pd, 128, 4)?, &ss)?, |t, ops| {
            ops.send_inline(&t.payload, 0..128)?;
            Ok(())
        })?;
        let _ = ss.wait(1)?;
        let mut got = rs.wait(1)?;
        check!(
            got[0].byte_len == 128 && matches(&got[0].payload.as_slice()[..128], 4),
            "inline payload"
        );
        let big = max + 1;
        let e = p.a.post_send(twr(filled(&p.pd, big, 4)?, &ss)?, |t, ops| {
            ops.send_inline(&t.payload, 0..big)?;
            Ok(())
        });
        check!(
            matches!(&e, Err(pe) if pe.err == EINVAL),
            "inline send over max_inline accepted"
        );
        drop((e, got, p));
        leak_check()
    })())
}

/// A chain of three sends posted at once, only the last signaled: three receives at the
/// peer, one completion at the sender, all slots back.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_post_list() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let p = rc_pair(&dev)?;
        let rs = sink::<DmaBuf>()?;
        for _ in 0..3 {
            post_recv(&p.b, &rs, 1024)?;
        }
        let ss = sink::<KVec<DmaBuf>>()?;
        let mut bufs = KVec::new();
        for seq in 10..13 {
            bufs.push(filled(&p.pd, 1024, seq)?, GFP_KERNEL)?;
        }
        p.a.post_send(twr(bufs, &ss)?, |t, ops| {
            for b in t.payload.iter() {
                ops.send(b, 0..1024)?.unsignaled()?;
            }
            Ok(())
        })?;
        let sent = ss.wait(1)?;
        check!(
            sent.len() == 1 && sent[0].status == WcStatus::Success,
            "one completion for the chain"
        );
        let mut got = rs.wait(3)?;
        for (i, d) in got.iter_mut().enumerate() {
            check!(
                matches(d.payload.as_slice(), 10 + i as u32),
                "message {i} of the chain"
            );
        }
        check!(p.a.send_outstanding() == 0, "chain slots not given back");
        drop((sent, got, p));
        leak_check()
    })())
}

/// The same traffic with each poll context; with DIRECT the test thread polls.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_poll_contexts() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        for poll in [
            PollContext::Workqueue,
            PollContext::UnboundWorkqueue,
            PollContext::Direct,
        ] {
            let p = rc_pair_with(&dev, &QpCaps::default(), poll, &RcParams::default())?;
            let s = sink::<DmaBuf>()?;
            post_recv(&p.b, &s, 256)?;
            p.a.post_send(twr(filled(&p.pd, 256, 5)?, &s)?, |t, ops| {
                ops.send(&t.payload, 0..256)?;
                Ok(())
            })?;
            if poll == PollContext::Direct {
                // Nothing runs the handlers but this thread.
                let mut n = 0;
                for _ in 0..500 {
                    n += p.cq.poll_direct(16)?;
                    if n >= 2 {
                        break;
                    }
                    // Sleeps 10 ms: nothing else can signal the sink.
                    let _ = s.sig.wait_timeout(10);
                }
                check!(n == 2, "poll_direct processed {n} of 2 completions");
            } else {
                check!(
                    p.cq.poll_direct(16).err() == Some(EINVAL),
                    "{poll:?}: poll_direct allowed"
                );
            }
            // With DIRECT the sleeps above may have consumed signals: take the list as it is.
            let mut got = if poll == PollContext::Direct {
                core::mem::take(&mut *s.list.lock())
            } else {
                s.wait(2)?
            };
            check!(got.len() == 2, "{poll:?}: {} completions", got.len());
            check!(
                got.iter_mut()
                    .any(|d| d.opcode == Some(WcOpcode::Recv) && matches(d.payload.as_slice(), 5)),
                "{poll:?}: payload"
            );
            drop(got);
        }
        leak_check()
    })())
}

/// A fast-registered MR over a scatterlist of pages (`ib_dma_map_sg`): RDMA WRITE across
/// page boundaries lands in the right pages, RDMA READ of the last page gives it back.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_mr_sg() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let p = rc_pair(&dev)?;
        check!(
            DmaSg::new(&p.pd, 0).err() == Some(EINVAL),
            "DmaSg of 0 pages"
        );
        check!(
            DmaSg::new(&p.pd, MAX_SG_PAGES + 1).err() == Some(EINVAL),
            "DmaSg over MAX_SG_PAGES"
        );
        const PAGES: usize = 4;
        let mut sg = DmaSg::new(&p.pd, PAGES)?;
        check!(sg.len() == PAGES * 4096, "DmaSg of {} bytes", sg.len());
        let mut pat = KVec::from_elem(0u8, sg.len(), GFP_KERNEL)?;
        for (i, x) in pat.iter_mut().enumerate() {
            *x = pattern(5, i);
        }
        sg.write(0, &pat)?;
        let mut probe = [0u8; 2];
        check!(
            sg.read(sg.len() - 1, &mut probe).err() == Some(EINVAL),
            "read past the end"
        );
        let mut small = Mr::new(&p.pd, PAGES as u32 - 1)?;
        let sg = match small.map_sg(sg) {
            Err((e, sg)) => {
                check!(e == EINVAL, "map_sg into a too small MR: {:?}", e);
                sg
            }
            Ok(()) => {
                check!(false, "map_sg into a too small MR succeeded");
                return Err(EINVAL);
            }
        };
        let mut mr = Mr::new(&p.pd, PAGES as u32)?;
        mr.map_sg(sg).map_err(|(e, _)| e)?;
        let again = DmaSg::new(&p.pd, 1)?;
        check!(
            mr.map_sg(again).err().map(|(e, _)| e) == Some(EBUSY),
            "second map_sg"
        );
        let mr = register(&p.b, mr, Access::REMOTE_WRITE | Access::REMOTE_READ)?;
        let remote = mr.remote()?;
        // 2 pages + 100 bytes, from the middle of page 0 into page 2.
        let (at, len) = (1000usize, 2 * 4096 + 100);
        post_one(
            &p.a,
            filled(&p.pd, len, 8)?,
            WcStatus::Success,
            WcOpcode::RdmaWrite,
            |b, ops| {
                ops.write(b, 0..len, remote.offset(at as u64))?;
                Ok(())
            },
        )?;
        let got = mr_bytes(&mr)?;
        check!(got.len() == PAGES * 4096, "MR of {} bytes", got.len());
        check!(got[..at] == pat[..at], "bytes before the write changed");
        check!(matches(&got[at..at + len], 8), "written bytes differ");
        check!(
            got[at + len..] == pat[at + len..],
            "bytes after the write changed"
        );
        let mut r = post_one(
            &p.a,
            DmaBuf::new(&p.pd, 4096, GFP_KERNEL)?,
            WcStatus::Success,
            WcOpcode::RdmaRead,
            |b, ops| {
                ops.read(b, 0..4096, remote.offset(3 * 4096))?;
                Ok(())
            },
        )?;
        check!(
            r.payload.as_slice() == &got[3 * 4096..],
            "read of the last page differs"
        );
        drop((r, mr, small, p));
        leak_check()
    })())
}

/// The message of one request in several pieces, in memory the caller owns and maps in place
/// for one direction: a 64-byte header from a `KVec` and two pages from a page vector, sent in
/// one SEND and received into a header and two pages of its own; a page (`DmaPage`) as a whole
/// message; an RDMA READ scattered into two buffers. Memory comes back unmapped, intact.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_gather_scatter() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let caps = QpCaps {
            send_sge: 4,
            recv_sge: 4,
            ..QpCaps::default()
        };
        let p = rc_pair_with(&dev, &caps, PollContext::Softirq, &RcParams::default())?;
        let pages = |n: usize| -> Result<KVec<kernel::page::Page>> {
            let mut v = KVec::with_capacity(n, GFP_KERNEL)?;
            for _ in 0..n {
                v.push(kernel::page::Page::alloc_page(GFP_KERNEL)?, GFP_KERNEL)?;
            }
            Ok(v)
        };
        // The sender's header and pages, mapped where they are, for the device to read.
        let mut hdr = KVec::from_elem(0u8, 64, GFP_KERNEL)?;
        for (i, b) in hdr.iter_mut().enumerate() {
            *b = pattern(1, i);
        }
        let hdr = DmaBuf::<ToDevice>::from_vec(&p.pd, hdr).map_err(|(e, _)| e)?;
        let mut data = DmaSg::<ToDevice>::from_pages(&p.pd, pages(2)?).map_err(|(e, _)| e)?;
        let mut body = KVec::from_elem(0u8, 8192, GFP_KERNEL)?;
        for (i, b) in body.iter_mut().enumerate() {
            *b = pattern(2, i);
        }
        data.write(0, &body)?;
        // The receiver's, for the device to write.
        struct Rx {
            hdr: DmaBuf<FromDevice>,
            data: DmaSg<FromDevice>,
        }
        let rx = Rx {
            hdr: DmaBuf::<FromDevice>::alloc(&p.pd, 64, GFP_KERNEL)?,
            data: DmaSg::<FromDevice>::from_pages(&p.pd, pages(2)?).map_err(|(e, _)| e)?,
        };
        let rs = sink::<Rx>()?;
        p.b.post_recv(twr(rx, &rs)?, |t, ops| {
            let r = &mut t.payload;
            ops.buf(&mut r.hdr, 0..64)?.buf(&mut r.data, 0..8192)?;
            Ok(())
        })?;
        struct Tx {
            hdr: DmaBuf<ToDevice>,
            data: DmaSg<ToDevice>,
        }
        let d = post_one(
            &p.a,
            Tx { hdr, data },
            WcStatus::Success,
            WcOpcode::Send,
            |t, ops| {
                ops.send(&t.hdr, 0..64)?.gather(&t.data, 0..8192)?;
                Ok(())
            },
        )?;
        let got = rs.wait(1)?.into_iter().next().ok_or(EINVAL)?;
        check!(
            got.status == WcStatus::Success && got.byte_len == 64 + 8192,
            "receive: {:?}, {} bytes",
            got.status,
            got.byte_len
        );
        let mut r = got.payload;
        check!(matches(r.hdr.as_slice(), 1), "received header differs");
        let mut back = KVec::from_elem(0u8, 8192, GFP_KERNEL)?;
        r.data.read(0, &mut back)?;
        check!(matches(&back, 2), "received pages differ");
        // The memory comes back, unmapped, holding what was sent and received.
        check!(
            matches(&d.payload.hdr.into_vec(), 1),
            "header changed by the send"
        );
        check!(
            r.data.into_pages().len() == 2 && matches(&r.hdr.into_vec(), 1),
            "received memory not given back whole"
        );
        // More pieces than the QP's send_sge: refused, the request comes back.
        let s = sink::<DmaBuf>()?;
        let e = p.a.post_send(twr(filled(&p.pd, 64, 3)?, &s)?, |t, ops| {
            let b = &t.payload;
            ops.send(b, 0..8)?
                .gather(b, 8..16)?
                .gather(b, 16..24)?
                .gather(b, 24..32)?
                .gather(b, 32..40)?;
            Ok(())
        });
        check!(
            matches!(&e, Err(pe) if pe.err == EINVAL),
            "5 pieces on a QP of send_sge 4"
        );
        drop(e);
        // An operation or a piece the builder refuses leaves the list as it was, even when
        // the closure goes on: one SEND of the 64 bytes accepted, not an empty SEND first.
        let rs = sink::<DmaBuf<FromDevice>>()?;
        p.b.post_recv(
            twr(DmaBuf::<FromDevice>::alloc(&p.pd, 64, GFP_KERNEL)?, &rs)?,
            |t, ops| {
                ops.buf(&mut t.payload, 0..64)?;
                Ok(())
            },
        )?;
        let mut refused = 0;
        post_one(
            &p.a,
            filled(&p.pd, 64, 6)?,
            WcStatus::Success,
            WcOpcode::Send,
            |b, ops| {
                refused += usize::from(ops.send(b, 0..65).is_err());
                ops.send(b, 0..16)?;
                refused += usize::from(ops.gather(b, 60..70).is_err());
                ops.gather(b, 16..64)?;
                Ok(())
            },
        )?;
        check!(refused == 2, "{} of two bad pieces refused", refused);
        let mut got = rs.wait(1)?.into_iter().next().ok_or(EINVAL)?;
        check!(
            got.status == WcStatus::Success
                && got.byte_len == 64
                && matches(got.payload.as_slice(), 6),
            "after refused pieces: {:?}, {} bytes",
            got.status,
            got.byte_len
        );
        // A page as a whole message, both ways.
        let mut src =
            DmaPage::<ToDevice>::from_page(&p.pd, kernel::page::Page::alloc_page(GFP_KERNEL)?)
                .map_err(|(e, _)| e)?;
        let mut one = KVec::from_elem(0u8, 4096, GFP_KERNEL)?;
        for (i, b) in one.iter_mut().enumerate() {
            *b = pattern(4, i);
        }
        src.write(0, &one)?;
        let dst =
            DmaPage::<FromDevice>::from_page(&p.pd, kernel::page::Page::alloc_page(GFP_KERNEL)?)
                .map_err(|(e, _)| e)?;
        let ps = sink::<DmaPage<FromDevice>>()?;
        p.b.post_recv(twr(dst, &ps)?, |t, ops| {
            ops.buf(&mut t.payload, 0..4096)?;
            Ok(())
        })?;
        post_one(&p.a, src, WcStatus::Success, WcOpcode::Send, |pg, ops| {
            ops.send(pg, 0..4096)?;
            Ok(())
        })?;
        let got = ps.wait(1)?.into_iter().next().ok_or(EINVAL)?;
        let mut back = KVec::from_elem(0u8, 4096, GFP_KERNEL)?;
        got.payload.read(0, &mut back)?;
        check!(matches(&back, 4), "page received differs");
        // An RDMA READ scattered into two buffers.
        let mr = registered_mr(&p.b, 300, 5, Access::REMOTE_READ)?;
        let remote = mr.remote()?;
        struct Two(DmaBuf<FromDevice>, DmaBuf<FromDevice>);
        let two = Two(
            DmaBuf::<FromDevice>::alloc(&p.pd, 100, GFP_KERNEL)?,
            DmaBuf::<FromDevice>::alloc(&p.pd, 200, GFP_KERNEL)?,
        );
        let mut r = post_one(
            &p.a,
            two,
            WcStatus::Success,
            WcOpcode::RdmaRead,
            |t, ops| {
                ops.read(&mut t.0, 0..100, remote)?
                    .scatter(&mut t.1, 0..200)?;
                Ok(())
            },
        )?;
        let all = mr_bytes(&mr)?;
        check!(
            r.payload.0.as_slice() == &all[..100] && r.payload.1.as_slice() == &all[100..300],
            "scattered READ differs from the MR"
        );
        drop((r, got, mr, p));
        leak_check()
    })())
}
