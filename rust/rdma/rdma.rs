// SPDX-License-Identifier: GPL-2.0

//! RDMA verbs for kernel upper-layer protocols (ULPs).
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! A ULP (NFS/RDMA, iSER, NVMe-oF, RDS, ...) registers an [`client::Client`] with the RDMA core.
//! The core calls [`client::Client::add`] for every RDMA device that exists or appears later,
//! and the ULP returns its per-device state; when the device goes away (or the ULP
//! unregisters), [`client::Client::remove`] gets that state back and dropping it frees it. The
//! rules that C ULPs keep by convention (who owns what, what may sleep, in which order things
//! are torn down) are carried by the types here.
//!
//! A whole ULP module can be declared with [`module_ib_client!`](crate::module_ib_client).
//!
//! Reference: <https://docs.kernel.org/infiniband/core_locking.html>

// Bottom up, in layers: each module imports only modules of the layers above its own. `make
// check` keeps it so (`tools/testing/kunit/imports.py rust/rdma rdma crate::rdma --order`; `-v`
// prints the graph). rustfmt sorts each layer by name.

// Contexts and locks shared with completion handlers.
pub mod sync;

// The module a callback runs in, held while it may be called.
pub mod owner;

// Teardown from process context; devices and ports.
pub mod defer;
pub mod device;

// What hangs off a device: addresses, events, protection domains.
pub mod addr;
pub mod event;
pub mod pd;

// Completion queues and DMA-mapped memory.
pub mod cq;
pub mod dma;

// What names memory or a peer, or holds receives: address handles, memory regions, SRQs.
pub mod ah;
pub mod mr;
pub mod srq;

// Queue pairs.
pub mod qp;

// Work requests and posting.
pub mod wr;

// Built on QPs and work requests: the connection manager, the core's R/W API.
pub mod cm;
pub mod rw;

// Clients: how a ULP meets the devices.
pub mod client;

/// Declares a kernel module whose only job is to register one [`client::Client`].
///
/// The client is registered when the module loads and unregistered (which calls
/// [`client::Client::remove`] for every device it is attached to) when it unloads.
///
/// # Examples
///
/// ```ignore
/// use kernel::prelude::*;
/// use kernel::rdma::{client::{Client, ClientStorage}, device::Device};
///
/// kernel::module_ib_client! {
///     type: MyUlp,
///     name: "my_ulp",
///     author: "Rust for Linux Contributors",
///     description: "An RDMA ULP",
///     license: "GPL",
/// }
///
/// struct MyUlp;
///
/// impl Client for MyUlp {
///     const NAME: &'static CStr = c_str!("my_ulp");
///     type Data = KBox<u32>;
///
///     fn storage() -> &'static ClientStorage {
///         static STORAGE: ClientStorage = ClientStorage::new();
///         &STORAGE
///     }
///
///     fn add(dev: &Device) -> Result<KBox<u32>> {
///         Ok(KBox::new(dev.ports().count() as u32, GFP_KERNEL)?)
///     }
/// }
/// ```
#[macro_export]
macro_rules! module_ib_client {
    (type: $client:ty, $($f:tt)*) => {
        struct Module {
            _reg: $crate::rdma::client::Registration<$client>,
        }

        $crate::prelude::module! {
            type: Module,
            $($f)*
        }

        impl $crate::Module for Module {
            fn init(_module: &'static $crate::ThisModule) -> $crate::error::Result<Self> {
                Ok(Module {
                    _reg: $crate::rdma::client::Registration::<$client>::new()?,
                })
            }
        }
    };
}
