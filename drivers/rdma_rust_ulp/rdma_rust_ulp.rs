// SPDX-License-Identifier: GPL-2.0

//! rdma_rust_ulp: an RDMA upper-layer protocol written in Rust.
//!
//! The module registers as an RDMA core client. For every RDMA device it is added to it builds
//! its per-device state (for now, what it learnt about the device's ports) and logs it; when the
//! device goes away (`rdma link delete`, driver unload) or the module unloads, the state is
//! handed back and freed.

use kernel::rdma::{
    client::{Client, ClientStorage},
    device::{Device, LinkLayer, Name, PortState, NAME_MAX},
};
use kernel::{c_str, prelude::*};

kernel::module_ib_client! {
    type: RustUlp,
    name: "rdma_rust_ulp",
    author: "rdma-rust developers",
    description: "RDMA upper-layer protocol in Rust",
    license: "GPL",
}

/// The ULP's state for one RDMA device.
struct UlpDevice {
    name: Name<NAME_MAX>,
}

impl Drop for UlpDevice {
    fn drop(&mut self) {
        pr_info!("{}: detached, device state freed\n", self.name);
    }
}

struct RustUlp;

impl Client for RustUlp {
    const NAME: &'static CStr = c_str!("rdma_rust_ulp");
    type Data = KBox<UlpDevice>;

    fn storage() -> &'static ClientStorage {
        static STORAGE: ClientStorage = ClientStorage::new();
        &STORAGE
    }

    fn add(dev: &Device) -> Result<KBox<UlpDevice>> {
        let name = dev.name();
        for port in dev.ports() {
            let attr = dev.query_port(port)?;
            let ll = match dev.link_layer(port)? {
                LinkLayer::Ethernet => "Ethernet",
                LinkLayer::Infiniband => "InfiniBand",
                LinkLayer::Unspecified => "unspecified",
            };
            let state = match attr.state() {
                PortState::Active => "ACTIVE",
                PortState::Down => "DOWN",
                PortState::Init => "INIT",
                PortState::Armed => "ARMED",
                PortState::ActiveDefer => "ACTIVE_DEFER",
                PortState::Nop | PortState::Unknown(_) => "unknown",
            };
            let mtu = attr.active_mtu().map_or(0, |m| m.bytes());
            match dev.netdev_name(port) {
                Ok(ndev) => pr_info!(
                    "{name}: port {port} {state} link_layer {ll} active_mtu {mtu} netdev {ndev}\n"
                ),
                Err(_) => {
                    pr_info!("{name}: port {port} {state} link_layer {ll} active_mtu {mtu}\n")
                }
            }
        }
        let data = KBox::new(UlpDevice { name }, GFP_KERNEL)?;
        pr_info!("{name}: attached (node GUID {:016x})\n", dev.node_guid());
        Ok(data)
    }
}
