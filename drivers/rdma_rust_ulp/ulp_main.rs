// SPDX-License-Identifier: GPL-2.0

//! rdma_rust_ulp: an RDMA upper-layer protocol written in Rust.
//!
//! The module registers as an RDMA core client. For every RDMA device it is added to it keeps
//! per-device state; on request (`/sys/kernel/debug/rdma_rust_ulp/ctl`, see [`ctl`]) it runs
//! RC or UD traffic between two QPs of the device, driven entirely by completion handlers (in
//! softirq context by default), and reports it in `/sys/kernel/debug/rdma_rust_ulp/stats`.
//!
//! Teardown: when a device goes away (`rdma link delete`, driver unload) its runs are stopped,
//! drained and freed before `remove` returns; unloading the module does the same for every
//! device, after the debugfs files are gone (so no control request races with it).

use kernel::debugfs::{command::Escaped, ControlFile, Dir, SeqFile, ShowFile};
use kernel::rdma::{
    client::{Client, ClientStorage, Registration},
    device::Device,
};
use kernel::sync::Arc;
use kernel::{c_str, ffi::c_char, prelude::*, str::CStr};

// The modules bottom-up: each uses only those above it (imports.py in tools/testing/kunit
// checks that no import points up). At the bottom, what uses no other: a run's counters, the
// keep-alive ticker and the one wait for the handlers.
mod counters;
mod keepalive;
mod wait;
// The control language.
mod ctl;
// A run: its QPs, buffers and data path.
mod run;
// Runs over the RDMA connection manager.
mod cm;
// The devices and their runs.
mod registry;
// The commands of `ctl`, carried out on the registry.
mod dispatch;
// The text of `stats`.
mod stats;

use ctl::Defaults;
use keepalive::{Keepalive, KeepaliveGuard};
use registry::{StateGuard, Ulp, UlpDev};

module! {
    type: RustUlp,
    name: "rdma_rust_ulp",
    author: "rdma-rust developers",
    description: "RDMA upper-layer protocol in Rust: RC and UD traffic from completion handlers",
    license: "GPL",
}

extern "C" {
    fn rdma_rust_ulp_param_default_depth() -> u32;
    fn rdma_rust_ulp_param_default_poll() -> *const c_char;
    fn rdma_rust_ulp_param_max_runs() -> u32;
}

struct RustUlp {
    // Dropped in this order: the files `ctl` and `stats` (removing them returns once no
    // control request or read is running, so none races with the rest), the keep-alive (it
    // ticks the runs), the client (its `remove` needs the state and stops and frees every
    // run), then the state.
    _files: Dir,
    _keepalive: KeepaliveGuard,
    _reg: Registration<UlpClient>,
    _state: StateGuard,
}

fn defaults() -> Result<(Defaults, u32)> {
    // SAFETY: The parameter getters read module parameters, which are set before init.
    let (depth, poll, max_runs) = unsafe {
        (
            rdma_rust_ulp_param_default_depth(),
            CStr::from_char_ptr(rdma_rust_ulp_param_default_poll()),
            rdma_rust_ulp_param_max_runs(),
        )
    };
    if depth == 0 || depth > ctl::MAX_DEPTH {
        pr_err!("default_depth={depth}: must be 1..={}\n", ctl::MAX_DEPTH);
        return Err(EINVAL);
    }
    let Some(poll) = ctl::parse_poll(poll.as_bytes()) else {
        pr_err!(
            "default_poll={}: must be softirq, workqueue or direct\n",
            Escaped(poll.as_bytes())
        );
        return Err(EINVAL);
    };
    if max_runs == 0 || max_runs > 64 {
        pr_err!("max_runs={max_runs}: must be 1..=64\n");
        return Err(EINVAL);
    }
    Ok((Defaults { depth, poll }, max_runs))
}

impl kernel::Module for RustUlp {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let (defaults, max_runs) = defaults()?;
        let state = Ulp::publish(defaults, max_runs)?;
        let reg = Registration::<UlpClient>::new()?;
        // Every active run, ticked: rdma_cm connections probe a peer that has gone quiet.
        let keepalive = Keepalive::start(|| {
            if let Ok(u) = registry::ulp() {
                u.tick();
            }
        })?;
        // The files' callbacks use the state published above.
        let files = Dir::new(c_str!("rdma_rust_ulp")).inspect_err(|e| {
            pr_err!("cannot create the debugfs directory: {e:?}\n");
        })?;
        files.control::<Ctl>(c_str!("ctl"));
        files.show::<Stats>(c_str!("stats"));
        pr_info!(
            "loaded (default_depth={} default_poll={} max_runs={})\n",
            defaults.depth,
            defaults.poll.name(),
            max_runs
        );
        Ok(RustUlp {
            _files: files,
            _keepalive: keepalive,
            _reg: reg,
            _state: state,
        })
    }
}

struct UlpClient;

impl Client for UlpClient {
    const NAME: &'static CStr = c_str!("rdma_rust_ulp");
    type Data = Arc<UlpDev>;

    fn storage() -> &'static ClientStorage {
        static STORAGE: ClientStorage = ClientStorage::new();
        &STORAGE
    }

    fn add(dev: &Device) -> Result<Arc<UlpDev>> {
        registry::add_device(dev)
    }

    fn remove(_dev: &Device, ud: Arc<UlpDev>) {
        registry::remove_device(ud);
    }
}

/// `ctl`: one command per write (see [`ctl`]).
struct Ctl;

impl ControlFile for Ctl {
    const MAX_LEN: usize = 1024;

    fn write(data: &[u8]) -> Result {
        let u = registry::ulp()?;
        dispatch::command(u, ctl::parse(data, u.defaults())?)
    }
}

/// `stats`: the table of runs.
struct Stats;

impl ShowFile for Stats {
    fn show(m: &SeqFile) -> Result {
        // Writing into a `SeqFile` cannot fail: only a `Display` impl could (`EINVAL`).
        Ok(stats::text(registry::ulp()?, &mut &*m)?)
    }
}
