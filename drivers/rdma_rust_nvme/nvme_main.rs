// SPDX-License-Identifier: GPL-2.0

//! rdma_rust_nvme: an NVMe over Fabrics host on RDMA, over kernel::rdma and
//! kernel::block::mq.
//!
//! It is controlled the way the kernel's own host is: an nvme-fabrics options string written
//! to `/dev/rdma_rust_nvme-fabrics` connects a controller (see [`options`]), and a read of the
//! same open file tells which (`instance=N,cntlid=M`); `disconnect=N` deletes controller `N`.
//! Each active namespace of the subsystem becomes a disk, `/dev/rnvme<N>n<nsid>`. The status
//! of every controller is in `/sys/kernel/debug/rdma_rust_nvme/status`. When an RDMA device
//! goes away (`rdma link delete`), the controllers on it go first; unloading the module
//! deletes every controller.

use core::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use kernel::debugfs::{Dir, SeqFile, ShowFile};
use kernel::miscdevice::{MiscFile, Registration as MiscRegistration};
use kernel::rdma::{
    client::{Client, ClientStorage, Registration},
    device::Device,
};
use kernel::str::CString;
use kernel::sync::Mutex;
use kernel::{c_str, fmt, new_mutex, prelude::*, str::CStr};

// The modules bottom-up: each uses only those above it (imports.py in tools/testing/kunit
// checks that no import points up). At the bottom, the wire formats: the target's, shared,
// then the host's own.
#[allow(dead_code)]
#[path = "../rdma_rust_nvmet/proto.rs"]
mod wire;
// (Kept apart: rustfmt sorts adjacent declarations.)
mod proto;
// A namespace's identity, for its disk's sysfs files.
mod ident;
// The connect options.
mod options;
// A queue: its connection's events, its tags and their commands.
mod queue;
// The disks the I/O queues serve.
mod disk;
// Connecting a queue.
mod connect;
// The controller: its queues brought up, its namespaces' disks, the keep-alive.
mod ctrl;

use ctrl::Ctrl;
use options::{Options, Text};

module! {
    type: RustNvme,
    name: "rdma_rust_nvme",
    author: "rdma-rust developers",
    description: "NVMe over Fabrics host on RDMA in Rust",
    license: "GPL",
}

/// The module's state.
#[pin_data]
struct State {
    #[pin]
    ctrls: Mutex<KVec<Ctrl>>,
    next: AtomicU32,
    /// The host NQN and identifier a connect names when its options do not.
    hostnqn: CString,
    hostid: [u8; 16],
}

/// The state while the module is loaded; set before the device and files exist and cleared
/// after they are gone and the client is unregistered.
static STATE: AtomicPtr<State> = AtomicPtr::new(core::ptr::null_mut());

fn state() -> Result<&'static State> {
    let p = STATE.load(Ordering::Acquire);
    // SAFETY: A non-null `STATE` points at the state owned by the module, which clears it only
    // after the device and the debugfs files are removed and the client unregistered, that
    // is, after the last caller of `state()` has returned.
    unsafe { p.as_ref() }.ok_or(ENODEV)
}

struct RustNvme {
    /// The control device and the status file; removed first, by `drop`.
    misc: Option<Pin<KBox<MiscRegistration<Fabrics>>>>,
    files: Option<Dir>,
    // Dropped in this order: the client first (its `remove` needs the state), then `STATE`
    // is cleared, then the state goes.
    _reg: Registration<NvmeClient>,
    _published: Published,
    state: Pin<KBox<State>>,
}

/// Clears `STATE` when dropped.
struct Published;

impl Drop for Published {
    fn drop(&mut self) {
        STATE.store(core::ptr::null_mut(), Ordering::Release);
    }
}

/// A host identifier of this boot: the time the module was loaded, mixed.
fn make_hostid() -> [u8; 16] {
    let mut x = kernel::time::Ktime::ktime_get().to_ns() as u64 ^ 0x9e37_79b9_7f4a_7c15;
    let mut id = [0u8; 16];
    for half in id.chunks_mut(8) {
        // splitmix64
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        half.copy_from_slice(&(z ^ (z >> 31)).to_be_bytes());
    }
    // A version 4, variant 1 UUID.
    id[6] = (id[6] & 0x0f) | 0x40;
    id[8] = (id[8] & 0x3f) | 0x80;
    id
}

impl kernel::Module for RustNvme {
    fn init(module: &'static ThisModule) -> Result<Self> {
        let hostid = make_hostid();
        let hostnqn = options::default_hostnqn(&hostid)?;
        let state = KBox::pin_init(
            pin_init!(State {
                ctrls <- new_mutex!(KVec::new(), "rdma_rust_nvme_ctrls"),
                next: AtomicU32::new(0),
                hostnqn,
                hostid,
            }),
            GFP_KERNEL,
        )?;
        STATE.store((&raw const *state).cast_mut(), Ordering::Release);
        let published = Published;
        let reg = Registration::<NvmeClient>::new()?;
        let files = Dir::new(c_str!("rdma_rust_nvme"))
            .inspect_err(|e| pr_err!("cannot create the debugfs directory: {e:?}\n"))?;
        files.show::<Status>(c_str!("status"));
        let misc = KBox::pin_init(
            MiscRegistration::<Fabrics>::register(c_str!("rdma_rust_nvme-fabrics"), module),
            GFP_KERNEL,
        )
        .inspect_err(|e| pr_err!("cannot register /dev/rdma_rust_nvme-fabrics: {e:?}\n"))?;
        pr_info!("loaded\n");
        Ok(RustNvme {
            misc: Some(misc),
            files: Some(files),
            _reg: reg,
            _published: published,
            state,
        })
    }
}

impl Drop for RustNvme {
    fn drop(&mut self) {
        // No file of the device is open (each pins the module), and no status read runs once
        // the directory is gone.
        drop(self.misc.take());
        drop(self.files.take());
        let ctrls = core::mem::take(&mut *self.state.ctrls.lock());
        for c in ctrls {
            pr_info!("rnvme{}: deleting the controller\n", c.instance());
            drop(c);
        }
    }
}

struct NvmeClient;

impl Client for NvmeClient {
    const NAME: &'static CStr = c_str!("rdma_rust_nvme");
    type Data = KBox<()>;

    fn storage() -> &'static ClientStorage {
        static STORAGE: ClientStorage = ClientStorage::new();
        &STORAGE
    }

    fn add(_dev: &Device) -> Result<KBox<()>> {
        Ok(KBox::new((), GFP_KERNEL)?)
    }

    /// The device goes away: its controllers go first, before rdma_cm tears their ids down
    /// under them.
    fn remove(dev: &Device, _data: KBox<()>) {
        let Ok(s) = state() else {
            return;
        };
        loop {
            let gone = {
                let mut ctrls = s.ctrls.lock();
                let i = ctrls.iter().position(|c| c.is_on(dev));
                i.and_then(|i| ctrls.remove(i))
            };
            let Some(c) = gone else {
                break;
            };
            pr_info!(
                "rnvme{}: {} is going away: controller deleted\n",
                c.instance(),
                dev.name()
            );
            drop(c);
        }
    }
}

/// An open file of `/dev/rdma_rust_nvme-fabrics`: its last connect's result.
#[pin_data]
struct Fabrics {
    #[pin]
    last: Mutex<Option<(u32, u16)>>,
}

impl MiscFile for Fabrics {
    const MAX_LEN: usize = options::MAX_LEN;

    fn open() -> Result<Pin<KBox<Self>>> {
        KBox::pin_init(
            pin_init!(Fabrics {
                last <- new_mutex!(None, "rdma_rust_nvme_fabrics_last"),
            }),
            GFP_KERNEL,
        )
    }

    fn write(&self, data: &[u8]) -> Result {
        let s = state()?;
        let text = data.strip_suffix(b"\n").unwrap_or(data);
        if let Some(n) = text.strip_prefix(b"disconnect=") {
            return disconnect(s, n);
        }
        let opts = Options::parse(text, (s.hostnqn.as_bytes(), &s.hostid))?;
        let instance = s.next.fetch_add(1, Ordering::Relaxed);
        let ctrl = Ctrl::connect(opts, instance)?;
        let cntlid = ctrl.cntlid();
        pr_info!(
            "rnvme{instance}: connected to {} at {} (controller {cntlid})\n",
            Text(&ctrl.opts().subnqn),
            ctrl.opts().addr
        );
        let mut ctrls = s.ctrls.lock();
        // On failure the list's lock goes before the controller (whose drop sleeps for long).
        ctrls.reserve(1, GFP_KERNEL)?;
        ctrls.push(ctrl, GFP_KERNEL)?;
        drop(ctrls);
        *self.last.lock() = Some((instance, cntlid));
        Ok(())
    }

    fn show(&self, m: &SeqFile) -> Result {
        if let Some((instance, cntlid)) = *self.last.lock() {
            let line = CString::try_from_fmt(fmt!("instance={instance},cntlid={cntlid}\n"))?;
            m.write_bytes(line.as_bytes());
        }
        Ok(())
    }
}

/// `disconnect=N`: deletes controller `N`.
fn disconnect(s: &State, n: &[u8]) -> Result {
    let instance = core::str::from_utf8(n)
        .ok()
        .and_then(|t| t.parse::<u32>().ok())
        .ok_or_else(|| {
            pr_err!("disconnect: '{}' is not a controller number\n", Text(n));
            EINVAL
        })?;
    let gone = {
        let mut ctrls = s.ctrls.lock();
        let i = ctrls.iter().position(|c| c.instance() == instance);
        i.and_then(|i| ctrls.remove(i))
    };
    match gone {
        Some(c) => {
            pr_info!("rnvme{instance}: disconnected\n");
            drop(c);
            Ok(())
        }
        None => {
            pr_err!("disconnect: no controller {instance}\n");
            Err(ENOENT)
        }
    }
}

/// `status`: one line per controller.
struct Status;

impl ShowFile for Status {
    fn show(m: &SeqFile) -> Result {
        let s = state()?;
        let ctrls = s.ctrls.lock();
        for c in ctrls.iter() {
            c.status(&mut &*m).map_err(|_| EINVAL)?;
        }
        Ok(())
    }
}
