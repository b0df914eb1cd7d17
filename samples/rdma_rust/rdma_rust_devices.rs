// SPDX-License-Identifier: GPL-2.0

//! Sample: the RDMA devices a ULP meets, what it asks of them, and their port events.
//!
//! A [`Client`]'s `add` runs for every RDMA device present when the module loads and for every
//! one added later (`rdma link add`). This one logs what a ULP usually asks first: the
//! device's limits, and for each port its state, MTU, link layer, netdev and GIDs. It then
//! registers an event handler for the device, which logs port events (the netdev under a
//! soft-RoCE port going down or up, a GID added) until `remove` runs, when the device goes
//! away (`rdma link delete`) or the module unloads: dropping the registration there
//! unregisters the handler before the device can be freed.
//!
//! Try it: `insmod rdma_rust_devices.ko; ip link set <netdev> down; ip link set <netdev> up;
//! rmmod rdma_rust_devices; dmesg`.

use kernel::c_str;
use kernel::prelude::*;
use kernel::rdma::{
    client::{Client, ClientStorage},
    device::{Device, LinkLayer, Mtu},
    event::{Event, EventHandler, EventRegistration},
};

kernel::module_ib_client! {
    type: Devices,
    name: "rdma_rust_devices",
    author: "rdma-rust developers",
    description: "Sample: RDMA devices, their ports and port events",
    license: "GPL",
}

/// GID table entries shown per port (soft-RoCE fills one per IP address of the netdev).
const SHOW_GIDS: u32 = 4;

/// Logs one device's limits and ports. Process context (the client's `add`).
fn show(dev: &Device) {
    let name = dev.name();
    let a = dev.attrs();
    pr_info!(
        "{name}: node GUID {:016x}, ports {}..={}, {} completion vectors\n",
        dev.node_guid(),
        dev.ports().start(),
        dev.ports().end(),
        dev.num_comp_vectors()
    );
    pr_info!(
        "{name}: limits: {} QPs of {} requests, {} CQs of {} entries, {} MRs of {} bytes, \
         fast registration of {} pages, {} SGEs per send\n",
        a.max_qp(),
        a.max_qp_wr(),
        a.max_cq(),
        a.max_cqe(),
        a.max_mr(),
        a.max_mr_size(),
        a.max_fast_reg_page_list_len(),
        a.max_send_sge()
    );
    for port in dev.ports() {
        // A port can fail to answer (a driver going away): say so and go on.
        let attr = match dev.query_port(port) {
            Ok(attr) => attr,
            Err(e) => {
                pr_warn!("{name}: port {port}: query failed: {e:?}\n");
                continue;
            }
        };
        let mtu = |m: Option<Mtu>| m.map_or(0, |m| m.bytes());
        let netdev = dev.netdev_name(port);
        pr_info!(
            "{name}: port {port}: {:?}, MTU {} (max {}), link layer {:?}, netdev {}\n",
            attr.state(),
            mtu(attr.active_mtu()),
            mtu(attr.max_mtu()),
            dev.link_layer(port).unwrap_or(LinkLayer::Unspecified),
            netdev
                .as_ref()
                .map_or("none", |n| n.as_cstr().to_str().unwrap_or("?"))
        );
        // Empty entries answer an error: only the valid ones are shown.
        for index in 0..attr.gid_tbl_len().min(SHOW_GIDS) {
            if let Ok(g) = dev.gid(port, index) {
                let kind = if g.roce_v2 { "RoCE v2" } else { "IB/RoCE v1" };
                pr_info!("{name}: port {port}: GID {index}: {} ({kind})\n", g.gid);
            }
        }
    }
}

/// The per-device event handler: runs in process context (the core's `ib_wq`); registering
/// another handler for its own device from here would wait for itself.
struct PortLog;

impl EventHandler for PortLog {
    fn event(&self, dev: &Device, event: Event) {
        let name = dev.name();
        match event {
            Event::PortActive(p) => pr_info!("{name}: port {p}: event: ACTIVE\n"),
            Event::PortErr(p) => pr_info!("{name}: port {p}: event: DOWN\n"),
            Event::GidChange(p) => pr_info!("{name}: port {p}: event: GID table changed\n"),
            other => pr_info!("{name}: event: {other:?}\n"),
        }
    }
}

struct Devices;

impl Client for Devices {
    const NAME: &'static CStr = c_str!("rdma_rust_devices");
    /// What the core keeps for each device until `remove`: the event registration.
    type Data = KBox<EventRegistration<PortLog>>;

    fn storage() -> &'static ClientStorage {
        static STORAGE: ClientStorage = ClientStorage::new();
        &STORAGE
    }

    fn add(dev: &Device) -> Result<Self::Data> {
        show(dev);
        let reg = EventRegistration::new(dev, PortLog)?;
        pr_info!("{}: watching port events\n", dev.name());
        Ok(KBox::new(reg, GFP_KERNEL)?)
    }

    fn remove(dev: &Device, reg: Self::Data) {
        // Unregisters the handler; no event of this device reaches `PortLog` after this.
        drop(reg);
        pr_info!("{}: removed\n", dev.name());
    }
}
