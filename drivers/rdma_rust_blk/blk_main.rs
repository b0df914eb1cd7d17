// SPDX-License-Identifier: GPL-2.0

//! rdma_rust_blk: a block-storage ULP over kernel::rdma, in the style of iSER and NVMe over
//! Fabrics, with both roles in one module.
//!
//! A target exports RAM volumes, and an initiator serves one as a disk, both as told through
//! `/sys/kernel/debug/rdma_rust_blk/ctl` (see [`ctl`]); `status` lists the volumes and disks.
//! When an RDMA device goes away (`rdma link delete`), the exports and disks on it go first;
//! unloading the module removes everything.
//!
//! The wire protocol is in [`proto`], the roles in [`target`] and [`initiator`].

use core::sync::atomic::{AtomicPtr, Ordering};
use kernel::debugfs::{ControlFile, Dir, SeqFile, ShowFile};
use kernel::rdma::{
    client::{Client, ClientStorage, Registration},
    device::Device,
};
use kernel::sync::{Arc, Mutex};
use kernel::{c_str, new_mutex, prelude::*, str::CStr};

// The modules bottom-up: each uses only those above it (imports.py in tools/testing/kunit
// checks that no import points up). At the bottom, the wire protocol.
mod proto;
// The two roles.
mod initiator;
mod target;
// The hostile initiator of the tests (the command `probe`).
mod hostile;
// The control language, carried out on the module's state, and the status text.
mod ctl;

use initiator::Disk;
use target::Export;

module! {
    type: RustBlk,
    name: "rdma_rust_blk",
    author: "rdma-rust developers",
    description: "Block storage over RDMA in Rust: RAM volumes exported and served as disks",
    license: "GPL",
}

/// The module's state.
#[pin_data]
struct State {
    #[pin]
    exports: Mutex<KVec<Arc<Export>>>,
    /// Disk `rrbdN` is entry `N`.
    #[pin]
    disks: Mutex<KVec<Option<Disk>>>,
}

/// The state while the module is loaded; set before the debugfs files exist and cleared
/// after they are gone and the client is unregistered.
static STATE: AtomicPtr<State> = AtomicPtr::new(core::ptr::null_mut());

fn state() -> Result<&'static State> {
    let p = STATE.load(Ordering::Acquire);
    // SAFETY: A non-null `STATE` points at the state owned by the module, which clears it only
    // after the debugfs files are removed and the client unregistered, that is, after the last
    // caller of `state()` has returned.
    unsafe { p.as_ref() }.ok_or(ENODEV)
}

struct RustBlk {
    /// `ctl` and `status`; removed first, by `drop`.
    files: Option<Dir>,
    // Dropped in this order: the client first (its `remove` needs the state), then `STATE`
    // is cleared, then the state goes.
    _reg: Registration<BlkClient>,
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

impl kernel::Module for RustBlk {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let state = KBox::pin_init(
            pin_init!(State {
                exports <- new_mutex!(KVec::new(), "rdma_rust_blk_exports"),
                disks <- new_mutex!(KVec::new(), "rdma_rust_blk_disks"),
            }),
            GFP_KERNEL,
        )?;
        STATE.store((&raw const *state).cast_mut(), Ordering::Release);
        let reg = match Registration::<BlkClient>::new() {
            Ok(r) => r,
            Err(e) => {
                STATE.store(core::ptr::null_mut(), Ordering::Release);
                return Err(e);
            }
        };
        // The files' callbacks use the state published above.
        let files = match Dir::new(c_str!("rdma_rust_blk")) {
            Ok(dir) => dir,
            Err(e) => {
                pr_err!("cannot create the debugfs directory: {e:?}\n");
                drop(reg);
                STATE.store(core::ptr::null_mut(), Ordering::Release);
                return Err(e);
            }
        };
        files.control::<Ctl>(c_str!("ctl"));
        files.show::<Status>(c_str!("status"));
        pr_info!("loaded\n");
        Ok(RustBlk {
            files: Some(files),
            _reg: reg,
            _published: Published,
            state,
        })
    }
}

impl Drop for RustBlk {
    fn drop(&mut self) {
        // Returns once no ctl write or status read is running.
        drop(self.files.take());
        // Everything goes before the client: the disks, then the exports.
        let disks = core::mem::take(&mut *self.state.disks.lock());
        for d in disks.into_iter().flatten() {
            d.disconnect();
        }
        let exports = core::mem::take(&mut *self.state.exports.lock());
        for e in exports {
            e.close();
        }
        // `_reg` goes next; `STATE` is cleared once nothing can call `state()` any more.
    }
}

struct BlkClient;

impl Client for BlkClient {
    const NAME: &'static CStr = c_str!("rdma_rust_blk");
    type Data = KBox<()>;

    fn storage() -> &'static ClientStorage {
        static STORAGE: ClientStorage = ClientStorage::new();
        &STORAGE
    }

    fn add(_dev: &Device) -> Result<KBox<()>> {
        Ok(KBox::new((), GFP_KERNEL)?)
    }

    /// The device goes away: its disks and exports go first, before rdma_cm tears their ids
    /// down under them.
    fn remove(dev: &Device, _data: KBox<()>) {
        let Ok(s) = state() else {
            return;
        };
        let gone = {
            let mut disks = s.disks.lock();
            let mut gone = KVec::new();
            for slot in disks.iter_mut() {
                if slot.as_ref().is_some_and(|d| d.is_on(dev)) {
                    if let Some(d) = slot.take() {
                        // Without memory for the list, the disk is removed here, under the lock.
                        let _ = gone.push(d, GFP_KERNEL);
                    }
                }
            }
            gone
        };
        for d in gone {
            pr_info!(
                "rrbd{}: {} is going away: disk removed\n",
                d.index,
                dev.name()
            );
            d.disconnect();
        }
        // One at a time, each closed outside the lock.
        loop {
            let closing = {
                let mut exports = s.exports.lock();
                let i = exports.iter().position(|e| e.is_on(dev));
                i.and_then(|i| exports.remove(i))
            };
            let Some(e) = closing else {
                break;
            };
            pr_info!(
                "export {}: {} is going away: unexported\n",
                e.volume.name,
                dev.name()
            );
            e.close();
        }
    }
}

/// `ctl`: one command per write.
struct Ctl;

impl ControlFile for Ctl {
    const MAX_LEN: usize = 512;

    fn write(data: &[u8]) -> Result {
        ctl::command(state()?, ctl::parse(data)?)
    }
}

/// `status`: the volumes and disks.
struct Status;

impl ShowFile for Status {
    fn show(m: &SeqFile) -> Result {
        // Writing into a `SeqFile` cannot fail: only a `Display` impl could (`EINVAL`).
        Ok(ctl::status(state()?, &mut &*m)?)
    }
}
