// SPDX-License-Identifier: GPL-2.0

//! The ULP's registry: the module-wide state, the devices the ULP is attached to and their
//! runs. [`crate::dispatch`] carries out the commands of the control file on it, and
//! [`crate::stats`] shows it.

use crate::ctl::Defaults;
use crate::run::Run;
use core::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};
use kernel::new_mutex;
use kernel::prelude::*;
use kernel::rdma::device::{Device, LinkLayer, Name, PortState, NAME_MAX};
use kernel::rdma::event::{Event, EventHandler, EventRegistration};
use kernel::sync::{Arc, Mutex};
use kernel::types::ARef;

/// Ended runs whose statistics a device keeps (older ones are forgotten).
const KEEP_ENDED: usize = 32;

/// The runs of one device.
struct DevRuns {
    /// Set by `remove`: no run may start any more.
    removing: bool,
    runs: KVec<Arc<Run>>,
}

/// The ULP's state for one RDMA device.
#[pin_data]
pub(crate) struct UlpDev {
    dev: ARef<Device>,
    name: Name<NAME_MAX>,
    #[pin]
    runs: Mutex<DevRuns>,
    /// The device's event registration, until `remove`.
    #[pin]
    events: Mutex<Option<EventRegistration<PortWatch>>>,
}

/// Logs the port events of a device and counts them (`port_events` in its `device` line).
/// Runs are not stopped by a port going down: their requests fail or wait for the port to
/// come back, as the transport decides, and the runs end by themselves or with `stop`.
struct PortWatch {
    events: AtomicU64,
}

impl EventHandler for PortWatch {
    fn event(&self, device: &Device, event: Event) {
        let (port, what) = match event {
            Event::PortActive(p) => (p, "ACTIVE"),
            Event::PortErr(p) => (p, "DOWN"),
            Event::GidChange(p) => (p, "GID table changed"),
            Event::DeviceFatal => (0, "device fatal error"),
            _ => return,
        };
        self.events.fetch_add(1, Ordering::Relaxed);
        pr_info!("{}: port {port}: {what}\n", device.name());
    }
}

/// Module-wide state.
#[pin_data]
pub(crate) struct Ulp {
    /// The attached devices; `None` marks a place left by a removed one.
    #[pin]
    devices: Mutex<KVec<Option<Arc<UlpDev>>>>,
    next_id: AtomicU32,
    defaults: Defaults,
    max_runs: u32,
}

/// The module's state, published for the client callbacks and the debugfs entry points.
///
/// Set before the client registers and the debugfs files exist, cleared after both are gone
/// (see [`StateGuard`]), so every callback sees it set.
static ULP: AtomicPtr<Ulp> = AtomicPtr::new(core::ptr::null_mut());

pub(crate) fn ulp() -> Result<&'static Ulp> {
    let p = ULP.load(Ordering::Acquire);
    // SAFETY: A non-null `ULP` points at the `Ulp` owned by `StateGuard`, which clears it only
    // after the client is unregistered and the debugfs files are removed, that is, after the
    // last caller of `ulp()` has returned.
    unsafe { p.as_ref() }.ok_or(ENODEV)
}

/// Owns the module-wide state and unpublishes it when dropped.
pub(crate) struct StateGuard {
    _ulp: Arc<Ulp>,
}

impl Drop for StateGuard {
    fn drop(&mut self) {
        ULP.store(core::ptr::null_mut(), Ordering::Release);
    }
}

impl Ulp {
    /// Creates the module-wide state and publishes it for the callbacks until the returned
    /// guard is dropped.
    pub(crate) fn publish(defaults: Defaults, max_runs: u32) -> Result<StateGuard> {
        let state = Arc::pin_init(
            pin_init!(Ulp {
                devices <- new_mutex!(KVec::new(), "rdma_rust_ulp_devices"),
                next_id: AtomicU32::new(1),
                defaults,
                max_runs,
            }),
            GFP_KERNEL,
        )?;
        ULP.store((&raw const *state).cast_mut(), Ordering::Release);
        Ok(StateGuard { _ulp: state })
    }

    /// The defaults of a run (the module parameters).
    pub(crate) fn defaults(&self) -> &Defaults {
        &self.defaults
    }

    /// The most runs in flight at once (the module parameter `max_runs`).
    pub(crate) fn max_runs(&self) -> u32 {
        self.max_runs
    }
}

/// Attaches to `dev`: logs its ports and returns its state (the client's `add`).
pub(crate) fn add_device(dev: &Device) -> Result<Arc<UlpDev>> {
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
    let watch = EventRegistration::new(
        dev,
        PortWatch {
            events: AtomicU64::new(0),
        },
    )?;
    let ud = Arc::pin_init(
        pin_init!(UlpDev {
            dev: dev.into(),
            name,
            runs <- new_mutex!(DevRuns { removing: false, runs: KVec::new() }, "rdma_rust_ulp_runs"),
            events <- new_mutex!(Some(watch), "rdma_rust_ulp_events"),
        }),
        GFP_KERNEL,
    )?;
    {
        let u = ulp()?;
        let mut devs = u.devices.lock();
        if let Some(place) = devs.iter_mut().find(|d| d.is_none()) {
            *place = Some(ud.clone());
        } else {
            devs.push(Some(ud.clone()), GFP_KERNEL)?;
        }
    }
    pr_info!("{name}: attached (node GUID {:016x})\n", dev.node_guid());
    Ok(ud)
}

/// Detaches from a device (the client's `remove`): its runs are stopped, drained and freed
/// before this returns.
pub(crate) fn remove_device(ud: Arc<UlpDev>) {
    if let Ok(u) = ulp() {
        let mut devs = u.devices.lock();
        if let Some(place) = devs
            .iter_mut()
            .find(|d| d.as_ref().is_some_and(|d| Arc::ptr_eq(d, &ud)))
        {
            *place = None;
        }
    }
    // Unregistered before the device goes (the registration holds a reference on it).
    drop(ud.events.lock().take());
    let runs = {
        let mut r = ud.runs.lock();
        r.removing = true;
        core::mem::take(&mut r.runs)
    };
    let mut stopped = 0;
    for run in runs.iter() {
        if run.active() {
            stopped += 1;
        }
        run.stop();
        run.finish();
    }
    pr_info!(
        "{}: detached ({} runs stopped), device state freed\n",
        ud.name,
        stopped
    );
}

impl UlpDev {
    /// The RDMA device.
    pub(crate) fn device(&self) -> &Device {
        &self.dev
    }

    /// The device's name, as it was when the ULP attached to it.
    pub(crate) fn name(&self) -> &Name<NAME_MAX> {
        &self.name
    }

    /// The port events the device has had (until `remove`).
    pub(crate) fn port_events(&self) -> u64 {
        self.events
            .lock()
            .as_ref()
            .map_or(0, |r| r.data().events.load(Ordering::Relaxed))
    }
}

impl Ulp {
    /// The id of a new run.
    pub(crate) fn next_id(&self) -> u32 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The attached device named `name`.
    pub(crate) fn find(&self, name: &[u8]) -> Option<Arc<UlpDev>> {
        self.devices
            .lock()
            .iter()
            .flatten()
            .find(|d| d.name.as_bytes() == name)
            .cloned()
    }

    /// Ticks what every active run holds besides its QPs (the keep-alive; process context),
    /// outside the registry's locks.
    pub(crate) fn tick(&self) {
        let Ok(runs) = self.all_runs() else {
            return;
        };
        for r in runs {
            if let Some(a) = r.attached() {
                a.tick();
            }
        }
    }

    /// Every run of every device.
    pub(crate) fn all_runs(&self) -> Result<KVec<Arc<Run>>> {
        let mut out = KVec::new();
        for d in self.devices.lock().iter().flatten() {
            for r in d.runs.lock().runs.iter() {
                out.push(r.clone(), GFP_KERNEL)?;
            }
        }
        Ok(out)
    }

    /// Calls `f` with every device and its runs, holding the registry's locks: `f` must not
    /// call back into the registry.
    pub(crate) fn each_device<E>(
        &self,
        mut f: impl FnMut(&UlpDev, &[Arc<Run>]) -> Result<(), E>,
    ) -> Result<(), E> {
        for d in self.devices.lock().iter().flatten() {
            f(d, &d.runs.lock().runs)?;
        }
        Ok(())
    }

    /// Frees what ended runs still hold.
    pub(crate) fn reap(&self) -> Result {
        for r in self.all_runs()? {
            if r.sender_done() {
                r.finish();
            }
        }
        Ok(())
    }

    /// Forgets the runs that hold nothing any more (`clear`).
    pub(crate) fn forget_ended(&self) {
        for d in self.devices.lock().iter().flatten() {
            d.runs.lock().runs.retain(|r| r.active());
        }
    }

    /// Adds `run` to the runs of `ud`; `ENODEV` if the device is being removed.
    pub(crate) fn attach(&self, ud: &UlpDev, run: &Arc<Run>) -> Result {
        let mut r = ud.runs.lock();
        if r.removing {
            pr_err!("start: {} is being removed\n", ud.name);
            return Err(ENODEV);
        }
        // Forget the oldest ended runs beyond what is kept.
        while r.runs.len() >= KEEP_ENDED {
            let Some(i) = r.runs.iter().position(|x| !x.active()) else {
                break;
            };
            drop(r.runs.remove(i));
        }
        r.runs.push(run.clone(), GFP_KERNEL)?;
        Ok(())
    }
}
