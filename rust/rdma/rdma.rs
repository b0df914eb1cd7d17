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
/// It expands to a `struct Module` holding a [`client::Registration`] of the client, a
/// [`module!`](crate::prelude::module) declaration with the fields given after `type:`, and
/// the `init` that registers the client. The client is registered when the module loads
/// (which calls [`client::Client::add`] for every device present) and unregistered (which
/// calls [`client::Client::remove`] for every device it is attached to) when it unloads. If
/// registering fails, loading the module fails with that error (see
/// [`client::Registration::new`]).
///
/// The macro declares no storage for the client's `struct ib_client`: the client type's
/// [`client::Client::storage`] returns a [`client::ClientStorage`] of its own, a `static`
/// declared in that function.
///
/// # Examples
///
/// A kernel doctest runs inside a KUnit test function, where no module can be declared, so
/// the examples are samples, which `make build` compiles.
/// `samples/rdma_rust/rdma_rust_devices.rs` declares its module with
/// `kernel::module_ib_client! { type: Devices, name: "rdma_rust_devices", author: ...,
/// description: ..., license: "GPL" }`, where `Devices` implements [`client::Client`]; the
/// loopback, UD, fast registration and R/W samples do the same.
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
