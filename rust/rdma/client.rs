// SPDX-License-Identifier: GPL-2.0

//! RDMA core clients (`struct ib_client`).
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! A client is how a ULP learns about RDMA devices: the core calls `add` for every registered
//! device (those present when the client registers and those that appear later) and `remove`
//! when a device is unregistered (`rdma link delete`, driver unload) or the client itself
//! unregisters. Both run in process context and may sleep; `remove` must release everything
//! the client holds on the device, or device unregistration blocks.

use super::{
    device::Device,
    owner::{watch_unloads, Hold, Owner},
};
use crate::{
    bindings,
    error::{code::*, from_result, to_result, Result},
    str::CStr,
    types::{ForeignOwnable, Opaque},
};
use core::{
    marker::PhantomData,
    sync::atomic::{AtomicBool, AtomicUsize, Ordering},
};

/// Static storage for the `struct ib_client` of one [`Client`].
///
/// The C `add` callback is not told which `ib_client` it belongs to, so each client type has
/// its `ib_client` in a `static`, returned by [`Client::storage`]. The client type declares it,
/// in that function (see the example of [`Client`]);
/// [`module_ib_client!`](crate::module_ib_client) does not.
///
/// # Invariants
///
/// `registered` is true while `client` is registered with the RDMA core by a [`Registration`].
pub struct ClientStorage {
    client: Opaque<bindings::ib_client>,
    registered: AtomicBool,
    /// The `add` trampoline of the client type registered here: the callbacks of another type
    /// refuse to use this storage (a `storage()` that does not always return the same storage
    /// could otherwise hand one client's data to another's `remove`).
    kind: AtomicUsize,
}

// SAFETY: The `ib_client` is written only by `Registration::new` while `registered` is claimed,
// and otherwise accessed only by the RDMA core, which serialises its accesses.
unsafe impl Sync for ClientStorage {}

impl ClientStorage {
    /// Creates storage for an unregistered client.
    pub const fn new() -> Self {
        Self {
            client: Opaque::uninit(),
            registered: AtomicBool::new(false),
            kind: AtomicUsize::new(0),
        }
    }
}

impl Default for ClientStorage {
    fn default() -> Self {
        Self::new()
    }
}

/// A ULP's view of RDMA devices: what to build when a device appears and to tear down when it
/// goes.
///
/// # Examples
///
/// A client that counts the ports of every device it sees. At boot no RDMA device is
/// registered yet, so registering and unregistering it calls neither callback.
///
/// ```
/// use core::sync::atomic::{AtomicUsize, Ordering};
/// use kernel::prelude::*;
/// use kernel::rdma::{
///     client::{Client, ClientStorage, Registration},
///     device::Device,
/// };
///
/// static ADDED: AtomicUsize = AtomicUsize::new(0);
///
/// struct PortCounter;
///
/// impl Client for PortCounter {
///     const NAME: &'static CStr = kernel::c_str!("port_counter");
///     type Data = KBox<usize>;
///
///     fn storage() -> &'static ClientStorage {
///         static STORAGE: ClientStorage = ClientStorage::new();
///         &STORAGE
///     }
///
///     fn add(dev: &Device) -> Result<KBox<usize>> {
///         ADDED.fetch_add(1, Ordering::Relaxed);
///         Ok(KBox::new(dev.ports().count(), GFP_KERNEL)?)
///     }
/// }
///
/// let reg = Registration::<PortCounter>::new()?;
/// // One registration per client type at a time.
/// assert_eq!(Registration::<PortCounter>::new().err(), Some(EBUSY));
/// // Dropping the registration calls `remove` for each device `add` accepted.
/// drop(reg);
/// # Ok::<(), Error>(())
/// ```
pub trait Client: 'static {
    /// The client's name, as the RDMA core reports it.
    const NAME: &'static CStr;

    /// Per-device state, owned by the RDMA core between [`Client::add`] and
    /// [`Client::remove`].
    type Data: ForeignOwnable + Send;

    /// Returns the static storage of this client's `struct ib_client`.
    fn storage() -> &'static ClientStorage;

    /// Called for each RDMA device; returns the client's state for it.
    ///
    /// Runs in process context and may sleep. On error the device is skipped: the core does
    /// not call [`Client::remove`] for it, so `add` must free what it built (returning `Err`
    /// drops everything owned on the way).
    fn add(device: &Device) -> Result<Self::Data>;

    /// Called when `device` goes away or the client unregisters, with the state `add`
    /// returned.
    ///
    /// Runs in process context and may sleep. Everything that holds resources of the device
    /// must be released before this returns; dropping `data` (the default) does that when the
    /// state owns its resources.
    fn remove(device: &Device, data: Self::Data) {
        let _ = device;
        drop(data);
    }
}

/// A registered [`Client`]; dropping it unregisters the client.
///
/// It holds the module of `T`'s callbacks ([`owner`](super::owner)): a registration that is
/// leaked (`mem::forget`) makes the module's unload wait for ever, loudly, instead of leaving
/// the core with callbacks into freed memory.
///
/// # Invariants
///
/// `storage` is registered with the RDMA core (`ib_register_client`), with the trampolines of
/// `T` as callbacks and `kind` set to `T`'s, for the lifetime of the `Registration`.
pub struct Registration<T: Client> {
    storage: &'static ClientStorage,
    _hold: Option<Hold>,
    _t: PhantomData<T>,
}

// SAFETY: The only operation on a `Registration` is dropping it, which calls
// `ib_unregister_client`; that may happen on any thread.
unsafe impl<T: Client> Send for Registration<T> {}

// SAFETY: `&Registration` gives access to nothing.
unsafe impl<T: Client> Sync for Registration<T> {}

impl<T: Client> Registration<T> {
    /// Registers `T` with the RDMA core (`ib_register_client`).
    ///
    /// `T::add` runs for each existing device before this returns; a device whose `add` fails
    /// is skipped, which does not fail the registration. May sleep.
    ///
    /// # Errors
    ///
    /// - `EBUSY` if `T` is already registered.
    /// - `EAGAIN` in atomic context.
    /// - `ENOSPC` when the module of `T`'s callbacks cannot be tracked
    ///   ([`owner`](super::owner)).
    /// - `ENOMEM` when the core cannot allocate its entry for the client or for a device.
    pub fn new() -> Result<Self> {
        watch_unloads();
        super::sync::sleepable()?;
        let owner = Owner::tracked(Self::add_callback as *const () as usize)?;
        let storage = T::storage();
        if storage
            .registered
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Err(EBUSY);
        }
        storage
            .kind
            .store(Self::add_callback as *const () as usize, Ordering::Release);
        let client = storage.client.get();
        // SAFETY: `ib_client` is a plain C struct for which all-zeroes is the "nothing set"
        // value `ib_register_client` expects; the name and callbacks are filled in below.
        let mut c: bindings::ib_client = unsafe { core::mem::zeroed() };
        c.name = T::NAME.as_char_ptr();
        c.add = Some(Self::add_callback);
        c.remove = Some(Self::remove_callback);
        // SAFETY: We own the storage (`registered` was claimed above) and it is not registered,
        // so nothing else reads it; it is static, so it never moves.
        unsafe { client.write(c) };
        // SAFETY: `client` is initialised and static.
        if let Err(e) = to_result(unsafe { bindings::ib_register_client(client) }) {
            storage.registered.store(false, Ordering::Release);
            return Err(e);
        }
        // INVARIANT: The client is registered with our trampolines.
        Ok(Self {
            storage,
            _hold: owner.map(Owner::hold),
            _t: PhantomData,
        })
    }

    /// # Safety
    ///
    /// Called by the RDMA core with a valid device, for the client registered by
    /// [`Registration::new`].
    unsafe extern "C" fn add_callback(ibdev: *mut bindings::ib_device) -> crate::ffi::c_int {
        from_result(|| {
            let storage = T::storage();
            if storage.kind.load(Ordering::Acquire) != Self::add_callback as *const () as usize {
                crate::pr_err!(
                    "kernel::rdma: client {}: storage() returned another client's storage\n",
                    T::NAME
                );
                return Err(EINVAL);
            }
            // SAFETY: The core holds a reference on `ibdev` for the duration of `add`.
            let device = unsafe { Device::from_raw(ibdev) };
            let data = T::add(device)?;
            // SAFETY: `T::storage()` is our registered `ib_client` and `ibdev` is valid; the
            // core created our slot in `client_data` before calling `add`, so storing into it
            // cannot fail for lack of memory.
            unsafe {
                bindings::ib_set_client_data(
                    ibdev,
                    storage.client.get(),
                    data.into_foreign().cast_mut(),
                )
            };
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// Called by the RDMA core with a valid device and the data set by `add_callback`.
    unsafe extern "C" fn remove_callback(
        ibdev: *mut bindings::ib_device,
        data: *mut crate::ffi::c_void,
    ) {
        // SAFETY: The core holds a reference on `ibdev` for the duration of `remove`.
        let device = unsafe { Device::from_raw(ibdev) };
        // SAFETY: The core calls `remove` once, only for devices whose `add` succeeded, whose
        // client data is the pointer `add_callback` got from `into_foreign`.
        let data = unsafe { T::Data::from_foreign(data) };
        T::remove(device, data);
    }
}

impl<T: Client> Drop for Registration<T> {
    fn drop(&mut self) {
        // SAFETY: The invariant says the client is registered; unregistering calls `remove`
        // for every device (and waits for them), after which no callback runs.
        unsafe { bindings::ib_unregister_client(self.storage.client.get()) };
        self.storage.kind.store(0, Ordering::Release);
        self.storage.registered.store(false, Ordering::Release);
        // The hold on the module goes with the fields, after this.
    }
}
