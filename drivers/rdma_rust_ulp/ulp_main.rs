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

use kernel::rdma::{
    client::{Client, ClientStorage, Registration},
    device::Device,
};
use kernel::sync::Arc;
use kernel::{c_str, ffi::c_char, prelude::*, str::CStr};

// In dependency order: each module uses only those above it.
mod cm;
mod ctl;
mod registry;
mod run;
mod stats;
mod util;
mod watchdog;

use ctl::{Defaults, Show};
use registry::{StateGuard, Text, Ulp, UlpDev};
use watchdog::{Watchdog, WatchdogGuard};

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
    fn rdma_rust_ulp_seq_write(m: *mut core::ffi::c_void, s: *const u8, len: usize);
    fn rdma_rust_ulp_debugfs_init() -> i32;
    fn rdma_rust_ulp_debugfs_exit();
}

struct RustUlp {
    // Dropped in this order: the watchdog (it ticks the runs), the client (its `remove` needs
    // the state), then the state.
    _watchdog: WatchdogGuard,
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
            Show(poll.as_bytes())
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
        let watchdog = Watchdog::start()?;
        // SAFETY: Creates the debugfs files; their callbacks use the state published above.
        let ret = unsafe { rdma_rust_ulp_debugfs_init() };
        if ret < 0 {
            pr_err!("cannot create the debugfs files: {ret}\n");
            return Err(Error::from_errno(ret));
        }
        pr_info!(
            "loaded (default_depth={} default_poll={} max_runs={})\n",
            defaults.depth,
            ctl::poll_name(defaults.poll),
            max_runs
        );
        Ok(RustUlp {
            _watchdog: watchdog,
            _reg: reg,
            _state: state,
        })
    }
}

impl Drop for RustUlp {
    fn drop(&mut self) {
        // SAFETY: Removes the debugfs files; returns once no ctl or stats call is running.
        unsafe { rdma_rust_ulp_debugfs_exit() };
        // The fields go next: unregistering the client stops and frees every run.
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

/// Entry point of a `ctl` write.
///
/// # Safety
///
/// `buf` must be valid for reads of `len` bytes for the duration of the call (the glue passes
/// the copied user buffer). Process context.
#[no_mangle]
unsafe extern "C" fn rdma_rust_ulp_ctl(buf: *const c_char, len: usize) -> i32 {
    // SAFETY: Per the safety requirements.
    let input = unsafe { core::slice::from_raw_parts(buf.cast::<u8>(), len) };
    let r = registry::ulp().and_then(|u| {
        let cmd = ctl::parse(input, u.defaults())?;
        u.command(cmd)
    });
    match r {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// Entry point of a `stats` read: writes the table into the seq_file `m`.
///
/// # Safety
///
/// `m` must be the seq_file of a read in progress. Process context.
#[no_mangle]
unsafe extern "C" fn rdma_rust_ulp_stats(m: *mut core::ffi::c_void) -> i32 {
    let Ok(u) = registry::ulp() else {
        return ENODEV.to_errno();
    };
    let mut t = Text(KVec::new());
    if registry::stats_text(u, &mut t).is_err() {
        return ENOMEM.to_errno();
    }
    // SAFETY: `m` is the seq_file of the read in progress; the text lives for the call.
    unsafe { rdma_rust_ulp_seq_write(m, t.0.as_ptr(), t.0.len()) };
    0
}
