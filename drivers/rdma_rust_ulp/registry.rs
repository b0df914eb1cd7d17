// SPDX-License-Identifier: GPL-2.0

//! The ULP's registry: the devices it is attached to, their runs, and the commands of the
//! control file that act on them.

use crate::cm;
use crate::ctl::{self, Command, Defaults, Role, ShowEndpoint, Spec, Target};
use crate::run::Run;
use crate::stats;
use core::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};
use kernel::debugfs::command::Escaped;
use kernel::new_mutex;
use kernel::prelude::*;
use kernel::rdma::device::{Device, LinkLayer, Name, PortState, NAME_MAX};
use kernel::rdma::event::{Event, EventHandler, EventRegistration};
use kernel::sync::{Arc, Mutex};
use kernel::types::ARef;

/// Ended runs whose statistics a device keeps (older ones are forgotten).
const KEEP_ENDED: usize = 32;
/// How long a `wait` waits for one run, in ms.
const WAIT_MS: u32 = 300_000;

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

impl Ulp {
    fn find(&self, name: &[u8]) -> Option<Arc<UlpDev>> {
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
    fn all_runs(&self) -> Result<KVec<Arc<Run>>> {
        let mut out = KVec::new();
        for d in self.devices.lock().iter().flatten() {
            for r in d.runs.lock().runs.iter() {
                out.push(r.clone(), GFP_KERNEL)?;
            }
        }
        Ok(out)
    }

    fn runs_of(&self, t: Target) -> Result<KVec<Arc<Run>>> {
        let mut out = KVec::new();
        for r in self.all_runs()? {
            if t == Target::All || t == Target::Id(r.id) {
                out.push(r, GFP_KERNEL)?;
            }
        }
        if out.is_empty() {
            if let Target::Id(id) = t {
                pr_err!("ctl: no run {id}\n");
                return Err(EINVAL);
            }
        }
        Ok(out)
    }

    fn one(&self, id: u32) -> Result<Arc<Run>> {
        self.runs_of(Target::Id(id))?
            .into_iter()
            .next()
            .ok_or(EINVAL)
    }

    /// Frees what ended runs still hold.
    fn reap(&self) -> Result {
        for r in self.all_runs()? {
            if r.sender_done() {
                r.finish();
            }
        }
        Ok(())
    }

    /// Adds `run` to the runs of `ud`; `ENODEV` if the device is being removed.
    fn attach(&self, ud: &UlpDev, run: &Arc<Run>) -> Result {
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

    fn start(&self, spec: Spec) -> Result {
        self.reap()?;
        let active = self.all_runs()?.iter().filter(|r| r.active()).count();
        if active >= self.max_runs as usize {
            pr_err!(
                "start: {active} runs in flight (max_runs={})\n",
                self.max_runs
            );
            return Err(EBUSY);
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (run, name) = if spec.cm {
            let attach = |dev: &Device, run: &Arc<Run>| -> Result {
                let ud = self.find(dev.name().as_bytes()).ok_or(ENODEV)?;
                self.attach(&ud, run)
            };
            let run = cm::start(&spec, id, &attach)
                .inspect_err(|e| pr_err!("start: run {id} ({}) failed: {e:?}\n", spec.addr))?;
            (run, None)
        } else {
            let Some(ud) = self.find(spec.dev()) else {
                pr_err!("start: no RDMA device '{}'\n", Escaped(spec.dev()));
                return Err(ENODEV);
            };
            let run = Run::build(&ud.dev, &spec, id).inspect_err(|e| {
                pr_err!("start: run {id} on {} could not be built: {e:?}\n", ud.name);
            })?;
            if let Err(e) = self.attach(&ud, &run) {
                run.finish();
                return Err(e);
            }
            if let Err(e) = run.go() {
                run.stop();
                run.finish();
                pr_err!("start: run {id} could not post: {e:?}\n");
                return Err(e);
            }
            (run, Some(ud.name))
        };
        match name {
            Some(dev) => pr_info!(
                "run {id} started: {dev} role={} mode={} op={} size={} count={} depth={} poll={} validate={}{}\n",
                spec.role.name(),
                ctl::mode_name(spec.mode),
                spec.op.name(),
                spec.size,
                spec.count,
                spec.depth,
                spec.poll.name(),
                u8::from(spec.validate),
                spec.fault.shown(),
            ),
            None => pr_info!(
                "run {id} started: cm={} addr={} mode={} op={} size={} count={} poll={} validate={}\n",
                spec.role.name(),
                spec.addr,
                ctl::mode_name(spec.mode),
                spec.op.name(),
                spec.size,
                spec.count,
                spec.poll.name(),
                u8::from(spec.validate)
            ),
        }
        if let Some(e) = run.endpoint {
            pr_info!("run {id} endpoint {}\n", ShowEndpoint(e));
        }
        // A direct run makes progress only while someone polls its CQ: the writer does.
        if spec.wait || spec.poll == kernel::rdma::cq::PollContext::Direct {
            let r = run.wait_ended(WAIT_MS);
            run.finish();
            r?;
        }
        Ok(())
    }

    pub(crate) fn command(&self, cmd: Command) -> Result {
        match cmd {
            Command::Start(spec) => self.start(spec),
            Command::Stop(t) => {
                for r in self.runs_of(t)? {
                    r.stop();
                    r.finish();
                }
                Ok(())
            }
            Command::Wait(t) => {
                for r in self.runs_of(t)? {
                    if let Err(e) = r.wait_ended(WAIT_MS) {
                        pr_err!("wait: run {} did not end in {} s\n", r.id, WAIT_MS / 1000);
                        return Err(e);
                    }
                    r.finish();
                }
                Ok(())
            }
            Command::Connect(id, peer) => self.one(id)?.connect(&peer),
            Command::Go(id, remote) => self.one(id)?.release(remote),
            Command::Fail(t) => {
                for r in self.runs_of(t)? {
                    r.fail()?;
                }
                Ok(())
            }
            Command::Clear => {
                for d in self.devices.lock().iter().flatten() {
                    d.runs.lock().runs.retain(|r| r.active());
                }
                Ok(())
            }
        }
    }
}

/// A time in ns, shown in microseconds with two decimals, right-aligned in the field's width.
struct Micros(u64);

impl core::fmt::Display for Micros {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        use core::fmt::Write;
        let (whole, hundredths) = (self.0 / 1000, self.0 % 1000 / 10);
        let len = whole.checked_ilog10().unwrap_or(0) as usize + 1 + 3;
        for _ in len..f.width().unwrap_or(0) {
            f.write_char(' ')?;
        }
        write!(f, "{whole}.{hundredths:02}")
    }
}

pub(crate) fn stats_text(u: &Ulp, t: &mut impl core::fmt::Write) -> core::fmt::Result {
    use stats::Stats as S;
    writeln!(
        t,
        "{:>3} {:<8} {:<4} {:<8} {:>7} {:>9} {:>5} {:<9} {:>3} {:<7} {:>9} {:>11} {:>9} {:>6} {:>5} {:>5} {:>7} {:>9} {:>8} {:>6} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "id", "dev", "mode", "op", "size", "count", "depth", "poll", "val", "state", "messages",
        "bytes", "received", "errors", "lost", "dup", "corrupt", "wc_ok", "wc_flush", "wc_err",
        "MB/s", "lat_min_us", "lat_p50_us", "lat_p99_us", "lat_max_us", "elapsed_us"
    )?;
    for d in u.devices.lock().iter().flatten() {
        for r in d.runs.lock().runs.iter() {
            let s = &r.stats;
            let state = if r.active() {
                if r.sender_done() {
                    "ended"
                } else {
                    "running"
                }
            } else {
                "done"
            };
            let start = r.start_ns.load(Ordering::Relaxed);
            let end = match r.end_ns.load(Ordering::Relaxed) {
                0 => kernel::time::Ktime::ktime_get().to_ns(),
                e => e,
            };
            let elapsed_ns = (end - start).max(1) as u64;
            let bytes = S::get(&s.bytes);
            // MB/s with one decimal: bytes * 1000 / ns = MB/s (10^6 bytes per second).
            let mbps10 = bytes.saturating_mul(10_000) / elapsed_ns;
            let [lmin, l50, l99, lmax] = s.latencies();
            writeln!(
                t,
                "{:>3} {:<8} {:<4} {:<8} {:>7} {:>9} {:>5} {:<9} {:>3} {:<7} {:>9} {:>11} {:>9} {:>6} {:>5} {:>5} {:>7} {:>9} {:>8} {:>6} {:>6}.{} {:>10} {:>10} {:>10} {:>10} {:>10}",
                r.id,
                d.name,
                ctl::mode_name(r.spec.mode),
                r.spec.op.name(),
                r.spec.size,
                r.spec.count,
                r.spec.depth,
                r.spec.poll.name(),
                u8::from(r.spec.validate),
                state,
                S::get(&s.messages),
                bytes,
                S::get(&s.received),
                S::get(&s.errors),
                S::get(&s.lost),
                S::get(&s.dup),
                S::get(&s.corrupt),
                S::get(&s.wc_success),
                S::get(&s.wc_flush),
                S::get(&s.wc_error),
                mbps10 / 10,
                mbps10 % 10,
                Micros(lmin),
                Micros(l50),
                Micros(l99),
                Micros(lmax),
                elapsed_ns / 1000
            )?;
        }
    }
    // Per device: the sums over the runs listed.
    for d in u.devices.lock().iter().flatten() {
        let runs = d.runs.lock();
        let sum = |f: fn(&stats::Stats) -> &core::sync::atomic::AtomicU64| -> u64 {
            runs.runs.iter().map(|r| S::get(f(&r.stats))).sum()
        };
        let port_events = d
            .events
            .lock()
            .as_ref()
            .map_or(0, |r| r.data().events.load(Ordering::Relaxed));
        writeln!(
            t,
            "device {} runs={} messages={} bytes={} received={} errors={} lost={} dup={} corrupt={} wc_ok={} wc_flush={} wc_err={} port_events={}",
            d.name,
            runs.runs.len(),
            sum(|s| &s.messages),
            sum(|s| &s.bytes),
            sum(|s| &s.received),
            sum(|s| &s.errors),
            sum(|s| &s.lost),
            sum(|s| &s.dup),
            sum(|s| &s.corrupt),
            sum(|s| &s.wc_success),
            sum(|s| &s.wc_flush),
            sum(|s| &s.wc_error),
            port_events,
        )?;
    }
    // Server and client runs: this host's QP, for the peer's `peer=`, and an RDMA server's
    // target, for the client's `go ... remote=`.
    for d in u.devices.lock().iter().flatten() {
        for r in d.runs.lock().runs.iter() {
            if let (Some(e), true) = (r.endpoint, r.spec.role != Role::Loopback) {
                writeln!(
                    t,
                    "endpoint {} {} {} {}",
                    r.id,
                    d.name,
                    r.spec.role.name(),
                    ShowEndpoint(e)
                )?;
            }
            if let (Some(m), Role::Server) = (r.target_remote(), r.spec.role) {
                writeln!(t, "target {} {} {}", r.id, d.name, m)?;
            }
        }
    }
    Ok(())
}
