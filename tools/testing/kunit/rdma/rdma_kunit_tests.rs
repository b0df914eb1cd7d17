// SPDX-License-Identifier: GPL-2.0

//! KUnit tests of `kernel::rdma` against soft-RoCE devices.
//!
//! The suites are declared in `rdma_kunit_suites.c`; each case calls one `extern "C"` function
//! here. The tests look for devices named `rxe0` .. `rxe7` (the harness creates them) and
//! return `ENODEV`, reported as a skip, when there is none.

use core::{
    fmt::Arguments,
    sync::atomic::{AtomicPtr, AtomicUsize, Ordering},
};
use kernel::{
    c_str,
    ffi::{c_char, c_int},
    fmt, new_mutex,
    prelude::*,
    rdma::{
        client::{Client, ClientStorage, Registration},
        device::{Device, LinkLayer, Name, PortState, NAME_MAX},
    },
    str::CString,
    sync::Mutex,
    types::ARef,
};

module! {
    type: RdmaKunit,
    name: "rdma_kunit",
    author: "rdma-rust developers",
    description: "KUnit tests of kernel::rdma on soft-RoCE",
    license: "GPL",
}

extern "C" {
    /// Runs a shell command line in user space and returns its exit status (C glue).
    fn rdma_kunit_run(cmd: *const c_char) -> c_int;
}

/// What the test client saw: the devices it is attached to, and those it was removed from.
#[pin_data]
struct Tracker {
    #[pin]
    attached: Mutex<KVec<Name<NAME_MAX>>>,
    #[pin]
    removed: Mutex<KVec<Name<NAME_MAX>>>,
}

static TRACKER: AtomicPtr<Tracker> = AtomicPtr::new(core::ptr::null_mut());
/// Number of `DevState` objects alive: `add` makes one, dropping it in `remove` frees it.
static LIVE: AtomicUsize = AtomicUsize::new(0);

struct RdmaKunit {
    _tracker: Pin<KBox<Tracker>>,
}

impl kernel::Module for RdmaKunit {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let tracker = KBox::pin_init(
            pin_init!(Tracker {
                attached <- new_mutex!(KVec::new()),
                removed <- new_mutex!(KVec::new()),
            }),
            GFP_KERNEL,
        )?;
        TRACKER.store(
            &*tracker as *const Tracker as *mut Tracker,
            Ordering::Release,
        );
        Ok(RdmaKunit { _tracker: tracker })
    }
}

impl Drop for RdmaKunit {
    fn drop(&mut self) {
        TRACKER.store(core::ptr::null_mut(), Ordering::Release);
    }
}

fn tracker() -> Result<&'static Tracker> {
    let p = TRACKER.load(Ordering::Acquire);
    // SAFETY: The pointer is set in `init` to the module's pinned `Tracker` and cleared before it
    // is freed at unload; the KUnit cases that call this run between the two.
    unsafe { p.as_ref() }.ok_or(EINVAL)
}

/// Per-device state of the test client.
struct DevState {
    name: Name<NAME_MAX>,
}

impl Drop for DevState {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::Relaxed);
        if let Ok(t) = tracker() {
            let mut attached = t.attached.lock();
            let len = attached.len();
            if let Some(i) = attached
                .iter()
                .position(|n| n.as_bytes() == self.name.as_bytes())
            {
                attached.as_mut_slice().swap(i, len - 1);
                // SAFETY: `len - 1 < len` initialised elements remain; `Name` is `Copy`, so
                // the element cut off needs no drop.
                unsafe { attached.set_len(len - 1) };
            }
            drop(attached);
            // Best effort: a failed push only makes a later check fail, visibly.
            let _ = t.removed.lock().push(self.name, GFP_KERNEL);
        }
    }
}

struct TestClient;

impl Client for TestClient {
    const NAME: &'static CStr = c_str!("rdma_kunit");
    type Data = KBox<DevState>;

    fn storage() -> &'static ClientStorage {
        static STORAGE: ClientStorage = ClientStorage::new();
        &STORAGE
    }

    fn add(dev: &Device) -> Result<KBox<DevState>> {
        let name = dev.name();
        tracker()?.attached.lock().push(name, GFP_KERNEL)?;
        LIVE.fetch_add(1, Ordering::Relaxed);
        Ok(KBox::new(DevState { name }, GFP_KERNEL)?)
    }
}

/// Logs a failed check and turns it into an error.
macro_rules! check {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            pr_err!("check failed: {} ({}:{}): {}\n", stringify!($cond), file!(), line!(),
                    format_args!($($arg)+));
            return Err(EINVAL);
        }
    };
}

/// Returns the registered rxe devices, or `ENODEV` if there are none.
fn rxe_devices() -> Result<KVec<ARef<Device>>> {
    let mut devs = KVec::new();
    for i in 0..8 {
        let name = CString::try_from_fmt(fmt!("rxe{i}"))?;
        if let Some(dev) = Device::get_by_name(&name) {
            devs.push(dev, GFP_KERNEL)?;
        }
    }
    if devs.is_empty() {
        return Err(ENODEV);
    }
    Ok(devs)
}

fn is_attached(name: &Name<NAME_MAX>) -> Result<bool> {
    let attached = tracker()?.attached.lock();
    Ok(attached.iter().any(|n| n.as_bytes() == name.as_bytes()))
}

fn run(cmd: Arguments<'_>) -> Result<c_int> {
    let cmd = CString::try_from_fmt(cmd)?;
    // SAFETY: `cmd` is a NUL-terminated string that outlives the call.
    let status = unsafe { rdma_kunit_run(cmd.as_char_ptr()) };
    pr_info!("ran '{}': status {}\n", &*cmd, status);
    Ok(status)
}

mod verbs;

fn ret(r: Result) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// `add` runs for every RDMA device that exists when the client registers.
#[no_mangle]
extern "C" fn rdma_kunit_client_add_each_device() -> c_int {
    ret((|| {
        let devs = rxe_devices()?;
        let reg = Registration::<TestClient>::new()?;
        for dev in devs.iter() {
            let name = dev.name();
            check!(is_attached(&name)?, "add() was not called for {name}");
        }
        check!(
            LIVE.load(Ordering::Relaxed) >= devs.len(),
            "{} states alive for {} devices",
            LIVE.load(Ordering::Relaxed),
            devs.len()
        );
        drop(devs);
        drop(reg);
        Ok(())
    })())
}

/// Unregistering the client calls `remove` for each device and frees every state.
#[no_mangle]
extern "C" fn rdma_kunit_client_unregister_removes_all() -> c_int {
    ret((|| {
        let n = rxe_devices()?.len();
        let before = tracker()?.removed.lock().len();
        let reg = Registration::<TestClient>::new()?;
        check!(
            LIVE.load(Ordering::Relaxed) >= n,
            "add() was not called for all devices"
        );
        drop(reg);
        check!(
            LIVE.load(Ordering::Relaxed) == 0,
            "{} device states leaked",
            LIVE.load(Ordering::Relaxed)
        );
        check!(
            tracker()?.attached.lock().is_empty(),
            "devices still attached after unregister"
        );
        let removed = tracker()?.removed.lock().len().saturating_sub(before);
        check!(removed >= n, "remove() ran {removed} times for {n} devices");
        Ok(())
    })())
}

/// A client type can be registered only once at a time, and again after it is dropped.
#[no_mangle]
extern "C" fn rdma_kunit_client_busy() -> c_int {
    ret((|| {
        let reg = Registration::<TestClient>::new()?;
        check!(
            Registration::<TestClient>::new().err() == Some(EBUSY),
            "second registration of one client type did not fail with EBUSY"
        );
        drop(reg);
        let again = Registration::<TestClient>::new();
        check!(again.is_ok(), "re-registration after drop failed");
        Ok(())
    })())
}

/// `rdma link delete` calls `remove` (the state is freed), `rdma link add` calls `add` again.
#[no_mangle]
extern "C" fn rdma_kunit_client_link_delete_and_add() -> c_int {
    ret((|| {
        let (name, ndev) = {
            let devs = rxe_devices()?;
            let dev = devs.first().ok_or(ENODEV)?;
            let port = *dev.ports().start();
            (dev.name(), dev.netdev_name(port)?)
            // The device references are dropped here: holding one would make the
            // unregistration below wait forever.
        };
        let reg = Registration::<TestClient>::new()?;
        check!(is_attached(&name)?, "add() was not called for {name}");
        let live = LIVE.load(Ordering::Relaxed);

        let status = run(fmt!("rdma link delete {name}"))?;
        check!(
            status == 0,
            "'rdma link delete {name}' exited with {status}"
        );
        check!(!is_attached(&name)?, "remove() was not called for {name}");
        check!(
            LIVE.load(Ordering::Relaxed) == live.saturating_sub(1),
            "the state of {name} was not freed ({} alive, expected {})",
            LIVE.load(Ordering::Relaxed),
            live.saturating_sub(1)
        );
        check!(
            Device::get_by_name(name.as_cstr()).is_none(),
            "{name} still registered"
        );

        let status = run(fmt!("rdma link add {name} type rxe netdev {ndev}"))?;
        check!(
            status == 0,
            "'rdma link add {name} type rxe netdev {ndev}' exited with {status}"
        );
        check!(
            is_attached(&name)?,
            "add() was not called for the re-added {name}"
        );
        check!(
            LIVE.load(Ordering::Relaxed) == live,
            "state count did not come back"
        );
        let dev = Device::get_by_name(name.as_cstr()).ok_or(ENODEV)?;
        let attr = dev.query_port(*dev.ports().start())?;
        check!(
            attr.state() == PortState::Active,
            "re-added {name} port is {:?}",
            attr.state()
        );
        drop(dev);
        drop(reg);
        check!(LIVE.load(Ordering::Relaxed) == 0, "device states leaked");
        Ok(())
    })())
}

/// Every rxe port is ACTIVE, Ethernet, with an MTU and a GID table.
#[no_mangle]
extern "C" fn rdma_kunit_device_port_active() -> c_int {
    ret((|| {
        for dev in rxe_devices()?.iter() {
            let name = dev.name();
            check!(
                dev.ports() == (1..=1),
                "{name}: ports {:?}, rxe has exactly port 1",
                dev.ports()
            );
            for port in dev.ports() {
                let attr = dev.query_port(port)?;
                check!(
                    attr.state() == PortState::Active,
                    "{name}/{port}: {:?}",
                    attr.state()
                );
                check!(
                    dev.link_layer(port)? == LinkLayer::Ethernet,
                    "{name}/{port}: not Ethernet"
                );
                check!(attr.active_mtu().is_some(), "{name}/{port}: no active MTU");
                check!(attr.gid_tbl_len() > 0, "{name}/{port}: empty GID table");
                let ndev = dev.netdev_name(port)?;
                check!(!ndev.as_bytes().is_empty(), "{name}/{port}: no netdev");
            }
            check!(dev.node_guid() != 0, "{name}: zero node GUID");
        }
        Ok(())
    })())
}

/// Port numbers outside the device are rejected with `EINVAL`, not passed to the core.
#[no_mangle]
extern "C" fn rdma_kunit_device_bad_port() -> c_int {
    ret((|| {
        for dev in rxe_devices()?.iter() {
            let bad = *dev.ports().end() + 1;
            for port in [0, bad, u32::MAX] {
                check!(
                    dev.query_port(port).err() == Some(EINVAL),
                    "query_port({port})"
                );
                check!(
                    dev.link_layer(port).err() == Some(EINVAL),
                    "link_layer({port})"
                );
                check!(
                    dev.netdev_name(port).err() == Some(EINVAL),
                    "netdev_name({port})"
                );
            }
        }
        Ok(())
    })())
}

/// Looking a device up by its own name finds the same device; unknown names find nothing.
#[no_mangle]
extern "C" fn rdma_kunit_device_lookup() -> c_int {
    ret((|| {
        for dev in rxe_devices()?.iter() {
            let name = dev.name();
            let again = Device::get_by_name(name.as_cstr()).ok_or(EINVAL)?;
            check!(
                core::ptr::eq(&*again, &**dev),
                "lookup of {name} returned another device"
            );
            check!(again.node_guid() == dev.node_guid(), "{name}: GUID differs");
        }
        check!(
            Device::get_by_name(c_str!("rxe-missing")).is_none(),
            "found a missing device"
        );
        Ok(())
    })())
}
