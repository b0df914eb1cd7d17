// SPDX-License-Identifier: GPL-2.0

//! UD servers: answering whoever sent a datagram, with an AH made from its completion.

use super::*;

/// A UD server answers a client it has never heard of: the AH comes from the request's
/// completion and GRH; the AH reports where it points, and can be pointed elsewhere.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_ud_reply() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        let pd = Pd::new(&dev)?;
        let cq = Cq::new(&dev, 64, 0, PollContext::Softirq)?;
        let qkey = 0x0bad_cafe;
        let client = ud_qp(&pd, &cq, qkey)?;
        let ec = client.endpoint()?;
        let server = ud_qp(&pd, &cq, qkey)?;
        let es = server.endpoint()?;
        // The client knows the server; the server knows nobody.
        let to_server = Ah::new(&pd, 1, &es.gid)?;
        let server_rx = sink::<DmaBuf>()?;
        let client_rx = sink::<DmaBuf>()?;
        post_recv(&server, &server_rx, GRH_LEN + 256)?;
        post_recv(&client, &client_rx, GRH_LEN + 256)?;
        let ss = sink::<(DmaBuf, Arc<Ah>)>()?;
        client.post_send(
            twr((filled(&pd, 256, 1)?, to_server.clone()), &ss)?,
            |t, ops| {
                ops.send_ud(&t.payload.0, 0..256, &t.payload.1, es.qpn, qkey)?;
                Ok(())
            },
        )?;
        let sent = ss.wait(1)?;
        check!(
            sent[0].status == WcStatus::Success,
            "request: {:?}",
            sent[0].status
        );
        // A send completion carries no GRH: no AH from it.
        check!(
            Ah::from_wc(&pd, 1, &sent[0].wc, &[0u8; GRH_LEN]).err() == Some(EINVAL),
            "an AH from a send completion"
        );
        let mut got = server_rx.wait(1)?;
        let req = &mut got[0];
        check!(
            req.status == WcStatus::Success,
            "request in: {:?}",
            req.status
        );
        let src = req.src_qp.ok_or(EINVAL)?;
        let grh = &req.payload.as_slice()[..GRH_LEN];
        check!(
            Ah::from_wc(&pd, 1, &req.wc, &grh[..GRH_LEN - 1]).err() == Some(EINVAL),
            "a short GRH"
        );
        let back = Ah::from_wc(&pd, 1, &req.wc, grh)?;
        let a = back.query()?;
        check!(
            a.port == 1 && a.dgid == ec.gid,
            "AH from the request points at {:?}, the client is {:?}",
            a,
            ec.gid
        );
        server.post_send(twr((filled(&pd, 128, 2)?, back.clone()), &ss)?, |t, ops| {
            ops.send_ud(&t.payload.0, 0..128, &t.payload.1, src, qkey)?;
            Ok(())
        })?;
        check!(
            ss.wait(1)?[0].status == WcStatus::Success,
            "answer not sent"
        );
        let mut ans = client_rx.wait(1)?;
        let r = &mut ans[0];
        check!(
            r.status == WcStatus::Success
                && r.src_qp == Some(es.qpn)
                && matches(&r.payload.as_slice()[GRH_LEN..GRH_LEN + 128], 2),
            "answer: {:?} from {:?}",
            r.status,
            r.src_qp
        );
        // Pointed at the server itself, the AH says so.
        back.modify(&es.gid)?;
        check!(
            back.query()?.dgid == es.gid,
            "modified AH: {:?}",
            back.query()?
        );
        drop((sent, got, ans, client, server, to_server, back));
        leak_check()
    })())
}
