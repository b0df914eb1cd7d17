// SPDX-License-Identifier: GPL-2.0

//! rdma_rust_nvmet: an NVMe over Fabrics target on RDMA, in Rust, over kernel::rdma.
//!
//! The kernel's own host (nvme-rdma, with nvme-cli) connects to it unmodified: `nvme
//! discover`, `nvme connect -t rdma`, and a /dev/nvmeXnY on RAM namespaces. It is configured as
//! nvmet is: subsystems, namespaces, ports and hosts (see [`config`] and [`port`]).
//!
//! The wire formats are in [`proto`], Identify and the log pages in [`ident`], controllers and
//! admin commands in [`ctrl`], the NVM command set in [`io`], a queue's connection in
//! [`queue`], the listeners in [`port`].

use core::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use kernel::configfs::Registration;
use kernel::debugfs::{ControlFile, Dir, SeqFile, ShowFile};
use kernel::rdma::sync::{flush_work, msleep};
use kernel::sync::{Arc, Mutex};
use kernel::workqueue::{self, impl_has_work, new_work, Work, WorkItem};
use kernel::{c_str, new_mutex, prelude::*};

// The modules bottom-up: each uses only those above it (imports.py checks it). At the bottom,
// the wire formats.
mod proto;
// What is configured: subsystems, namespaces, ports' addresses.
mod config;
// What Identify and the log pages show.
mod ident;
// The bad target of the host's tests (the file `misbehave`).
mod misbehave;
// Controllers and their admin commands.
mod ctrl;
// The NVM command set.
mod io;
// A queue's connection.
mod queue;
// The listeners.
mod port;
// The hostile host of the tests (the file `probe`): it uses the wire formats only.
mod hostile;
// The configfs tree, /sys/kernel/config/rdma_rust_nvmet: nvmet's configuration interface.
mod configfs;

use ctrl::Target;
use port::Port;

module! {
    type: RustNvmet,
    name: "rdma_rust_nvmet",
    author: "rdma-rust developers",
    description: "NVMe over Fabrics target on RDMA, in Rust",
    license: "GPL",
}

/// How often controllers' keep-alive deadlines are checked.
const TICK_MS: u32 = 500;

/// Ports that lost their listener try again every this many ticks (5 s).
const REPAIR_TICKS: u32 = 10;

/// Lets every port whose device went away listen again if it can.
fn repair_ports() {
    let Ok(s) = state() else {
        return;
    };
    let ports: KVec<Arc<Port>> = {
        let list = s.ports.lock();
        let mut v = KVec::new();
        for p in list.iter() {
            if v.push(p.clone(), GFP_KERNEL).is_err() {
                break;
            }
        }
        v
    };
    for p in ports {
        p.repair();
    }
}

/// The module's state.
#[pin_data]
struct State {
    target: Arc<Target>,
    #[pin]
    ports: Mutex<KVec<Arc<Port>>>,
    #[pin]
    subsystems: Mutex<KVec<Arc<config::Subsys>>>,
}

/// The state while the module is loaded: set before the debugfs files exist, cleared after.
static STATE: AtomicPtr<State> = AtomicPtr::new(core::ptr::null_mut());

fn state() -> Result<&'static State> {
    let p = STATE.load(Ordering::Acquire);
    // SAFETY: A non-null `STATE` points at the state owned by the module, which clears it only
    // after the debugfs files are removed and the ticker stopped, that is, after the last
    // caller of `state()` has returned.
    unsafe { p.as_ref() }.ok_or(ENODEV)
}

/// Checks the controllers' keep-alive deadlines every [`TICK_MS`].
#[pin_data]
struct Ticker {
    stop: AtomicBool,
    target: Arc<Target>,
    #[pin]
    work: Work<Ticker>,
}

impl_has_work! {
    impl HasWork<Self> for Ticker { self.work }
}

impl WorkItem for Ticker {
    type Pointer = Arc<Ticker>;

    fn run(this: Arc<Ticker>) {
        let mut ticks: u32 = 0;
        while !this.stop.load(Ordering::Acquire) {
            this.target.tick();
            if ticks % REPAIR_TICKS == 0 {
                repair_ports();
            }
            ticks = ticks.wrapping_add(1);
            msleep(TICK_MS);
        }
    }
}

struct RustNvmet {
    /// Unregistered first, by `drop` (its callbacks use the state). No directory made by
    /// mkdir is left by then: each holds the module.
    configfs: Option<Registration<configfs::Root>>,
    /// Removed next.
    files: Option<Dir>,
    ticker: Arc<Ticker>,
    state: Pin<KBox<State>>,
}

impl kernel::Module for RustNvmet {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let target = Target::new()?;
        let state = KBox::pin_init(
            pin_init!(State {
                target,
                ports <- new_mutex!(KVec::new(), "rdma_rust_nvmet_ports"),
                subsystems <- new_mutex!(KVec::new(), "rdma_rust_nvmet_subsystems"),
            }),
            GFP_KERNEL,
        )?;
        let tick_target = state.target.clone();
        let ticker = Arc::pin_init(
            pin_init!(Ticker {
                stop: AtomicBool::new(false),
                target: tick_target,
                work <- new_work!("rdma_rust_nvmet_ticker"),
            }),
            GFP_KERNEL,
        )?;
        workqueue::system_long()
            .enqueue(ticker.clone())
            .map_err(|_| EBUSY)?;
        STATE.store((&raw const *state).cast_mut(), Ordering::Release);
        let files = match Dir::new(c_str!("rdma_rust_nvmet")) {
            Ok(dir) => dir,
            Err(e) => {
                pr_err!("cannot create the debugfs directory: {e:?}\n");
                STATE.store(core::ptr::null_mut(), Ordering::Release);
                ticker.stop.store(true, Ordering::Release);
                flush_work(&ticker.work);
                return Err(e);
            }
        };
        files.show::<Status>(c_str!("status"));
        files.control::<ProbeFile>(c_str!("probe"));
        files.control::<MisbehaveFile>(c_str!("misbehave"));
        let configfs = match configfs::register() {
            Ok(reg) => reg,
            Err(e) => {
                pr_err!("cannot register the configfs tree: {e:?}\n");
                drop(files);
                STATE.store(core::ptr::null_mut(), Ordering::Release);
                ticker.stop.store(true, Ordering::Release);
                flush_work(&ticker.work);
                return Err(e);
            }
        };
        pr_info!("loaded\n");
        Ok(RustNvmet {
            configfs: Some(configfs),
            files: Some(files),
            ticker,
            state,
        })
    }
}

impl Drop for RustNvmet {
    fn drop(&mut self) {
        drop(self.configfs.take());
        drop(self.files.take());
        let ports = core::mem::take(&mut *self.state.ports.lock());
        for p in ports {
            p.close();
        }
        self.state.target.end_all();
        self.ticker.stop.store(true, Ordering::Release);
        flush_work(&self.ticker.work);
        STATE.store(core::ptr::null_mut(), Ordering::Release);
    }
}

/// `probe`: a hostile host's probe or fuzz stream (see [`hostile`]).
struct ProbeFile;

impl ControlFile for ProbeFile {
    const MAX_LEN: usize = 4096;

    fn write(data: &[u8]) -> Result {
        hostile::command(data)
    }
}

/// `misbehave`: a rule of the protocol to break once, for the host's tests (see
/// [`misbehave`]).
struct MisbehaveFile;

impl ControlFile for MisbehaveFile {
    const MAX_LEN: usize = 64;

    fn write(data: &[u8]) -> Result {
        misbehave::arm(data)
    }
}

/// `status`: ports, connections and controllers.
struct Status;

impl ShowFile for Status {
    fn show(m: &SeqFile) -> Result {
        let s = state()?;
        let mut w: &SeqFile = m;
        use core::fmt::Write;
        for p in s.ports.lock().iter() {
            writeln!(w, "port {} connections {}", p.conf.id, p.connections())
                .map_err(|_| EINVAL)?;
            let [commands, in_capsule, fetched] = p.counters();
            writeln!(
                w,
                "port {} commands {commands} in_capsule {in_capsule} fetched {fetched}",
                p.conf.id
            )
            .map_err(|_| EINVAL)?;
        }
        writeln!(w, "controllers {}", s.target.count()).map_err(|_| EINVAL)?;
        let (armed, fired) = misbehave::status();
        writeln!(w, "misbehave {armed} fired {fired}").map_err(|_| EINVAL)?;
        Ok(())
    }
}
