// SPDX-License-Identifier: GPL-2.0

//! What the target serves, as configured: subsystems, their namespaces on RAM and the hosts
//! they allow (the configfs tree writes them, see [`crate::configfs`]).
//!
//! A [`Subsys`] has an NQN, a serial and model for Identify, a set of allowed host NQNs (or
//! any host) and its [`Ns`]s. A namespace has a size and a UUID while it is disabled; enabling
//! it allocates its [`Volume`], which lives as long as an I/O still uses it.

use crate::proto::{Text, DISCOVERY_NQN, LBA_SIZE, NQN_MAX};
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::page::Page;
use kernel::prelude::*;
use kernel::rdma::dma::{copy_from_pages, copy_to_pages};
use kernel::sync::{Arc, Mutex, SpinLock};
use kernel::{new_mutex, new_spinlock};

/// A volume is kept in chunks of this size, each under its own lock.
const CHUNK: usize = 1 << 20;
/// The largest namespace (the test guests have 512 MiB to 1 GiB of memory).
pub(crate) const MAX_NS_SIZE: u64 = 1 << 30;
/// Most namespaces a subsystem has (also the NN and MNAN of Identify).
pub(crate) const MAX_NAMESPACES: u32 = 1024;
/// Longest serial number (Identify's SN field).
const SERIAL_MAX: usize = 20;
/// Longest model number (Identify's MN field).
const MODEL_MAX: usize = 40;

/// A namespace's RAM.
pub(crate) struct Volume {
    pub(crate) size: u64,
    chunks: KVec<Pin<KBox<SpinLock<KVVec<u8>>>>>,
}

impl Volume {
    /// Allocates a zeroed volume of `size` bytes (checked by [`Ns::set_size`]).
    fn new(size: u64) -> Result<Arc<Self>> {
        let n = (size as usize).div_ceil(CHUNK);
        let mut chunks = KVec::with_capacity(n, GFP_KERNEL)?;
        for i in 0..n {
            let len = CHUNK.min(size as usize - i * CHUNK);
            let bytes = KVVec::from_elem(0u8, len, GFP_KERNEL)?;
            chunks.push(
                KBox::pin_init(new_spinlock!(bytes, "rdma_rust_nvmet_chunk"), GFP_KERNEL)?,
                GFP_KERNEL,
            )?;
        }
        Ok(Arc::new(Self { size, chunks }, GFP_KERNEL)?)
    }

    /// The logical blocks of the volume.
    pub(crate) fn blocks(&self) -> u64 {
        self.size / LBA_SIZE as u64
    }

    /// Calls `f(chunk bytes, offset in the I/O)` for each chunk piece of `at .. at + len`, under
    /// the chunk's lock; `EINVAL` when the range is not inside the volume.
    fn pieces(&self, at: u64, len: usize, mut f: impl FnMut(&mut [u8], usize) -> Result) -> Result {
        if at
            .checked_add(len as u64)
            .map_or(true, |end| end > self.size)
        {
            return Err(EINVAL);
        }
        let mut done = 0;
        while done < len {
            let pos = at as usize + done;
            let (i, off) = (pos / CHUNK, pos % CHUNK);
            let chunk = self.chunks.get(i).ok_or(EINVAL)?;
            let mut bytes = chunk.lock();
            let n = (bytes.len() - off).min(len - done);
            f(&mut bytes[off..off + n], done)?;
            done += n;
        }
        Ok(())
    }

    /// Copies `at .. at + len` into `pages`.
    pub(crate) fn read(&self, at: u64, pages: &mut [Page], len: usize) -> Result {
        self.pieces(at, len, |bytes, done| copy_to_pages(pages, done, bytes))
    }

    /// Copies `len` bytes of `pages` into `at ..`.
    pub(crate) fn write(&self, at: u64, pages: &[Page], len: usize) -> Result {
        self.pieces(at, len, |bytes, done| copy_from_pages(pages, done, bytes))
    }

    /// Copies `bytes` into `at ..`.
    pub(crate) fn write_bytes(&self, at: u64, bytes: &[u8]) -> Result {
        self.pieces(at, bytes.len(), |chunk, done| {
            let src = bytes.get(done..done + chunk.len()).ok_or(EINVAL)?;
            chunk.copy_from_slice(src);
            Ok(())
        })
    }

    /// Zeroes `at .. at + len`.
    pub(crate) fn zero(&self, at: u64, len: usize) -> Result {
        self.pieces(at, len, |bytes, _| {
            bytes.fill(0);
            Ok(())
        })
    }
}

/// A 128-bit hash of `parts` (FNV-1a in two lanes): stable names derived from a subsystem's
/// NQN, so that a namespace keeps its UUID and a subsystem its serial across reloads.
fn hash128(parts: &[&[u8]]) -> [u8; 16] {
    let mut a: u64 = 0xcbf2_9ce4_8422_2325;
    let mut b: u64 = 0x8422_2325_cbf2_9ce4;
    for p in parts {
        for &x in Iterator::chain(p.iter(), &[0xff]) {
            a = (a ^ u64::from(x)).wrapping_mul(0x0000_0100_0000_01b3);
            b = (b ^ u64::from(x).rotate_left(3)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&a.to_be_bytes());
    out[8..].copy_from_slice(&b.to_be_bytes());
    out
}

/// What can change of a namespace.
struct NsState {
    size: u64,
    uuid: [u8; 16],
    volume: Option<Arc<Volume>>,
}

/// A namespace of a subsystem, on RAM.
#[pin_data]
pub(crate) struct Ns {
    pub(crate) nsid: u32,
    #[pin]
    state: Mutex<NsState>,
}

impl Ns {
    /// Adds namespace `nsid` to `subsys`, disabled and of no size.
    pub(crate) fn new(subsys: &Arc<Subsys>, nsid: u32) -> Result<Arc<Ns>> {
        if nsid == 0 || nsid == u32::MAX || nsid > MAX_NAMESPACES {
            pr_err!(
                "subsystem {}: namespace {nsid}: the NSID must be 1 to {MAX_NAMESPACES}\n",
                Text(&subsys.nqn)
            );
            return Err(EINVAL);
        }
        // A UUID (RFC 9562 version 8: a name of our own making) from the NQN and the NSID.
        let mut uuid = hash128(&[&subsys.nqn, &nsid.to_le_bytes()]);
        uuid[6] = (uuid[6] & 0x0f) | 0x80;
        uuid[8] = (uuid[8] & 0x3f) | 0x80;
        let ns = Arc::pin_init(
            pin_init!(Ns {
                nsid,
                state <- new_mutex!(NsState { size: 0, uuid, volume: None }, "rdma_rust_nvmet_ns"),
            }),
            GFP_KERNEL,
        )?;
        let mut list = subsys.namespaces.lock();
        if list.iter().any(|n| n.nsid == nsid) {
            return Err(EEXIST);
        }
        // Kept in NSID order: the active namespace list is read from it.
        let at = list
            .iter()
            .position(|n| n.nsid > nsid)
            .unwrap_or(list.len());
        list.push(ns.clone(), GFP_KERNEL)?;
        list[at..].rotate_right(1);
        Ok(ns)
    }

    /// Removes the namespace from `subsys` (disabled first). I/Os still running on it finish on
    /// its volume, which goes with the last of them. `true` if it was enabled.
    pub(crate) fn remove(&self, subsys: &Subsys) -> bool {
        let was = self.disable();
        subsys
            .namespaces
            .lock()
            .retain(|n| !core::ptr::eq(&**n, self));
        was
    }

    /// Sets the size in bytes: a positive multiple of the block size, at most
    /// [`MAX_NS_SIZE`]; `EBUSY` while enabled.
    pub(crate) fn set_size(&self, size: u64) -> Result {
        if size == 0 || size % LBA_SIZE as u64 != 0 || size > MAX_NS_SIZE {
            pr_err!(
                "namespace {}: size {size}: must be a positive multiple of {LBA_SIZE} bytes, at most {MAX_NS_SIZE}\n",
                self.nsid
            );
            return Err(EINVAL);
        }
        let mut s = self.state.lock();
        if s.volume.is_some() {
            pr_err!("namespace {}: disable it to change its size\n", self.nsid);
            return Err(EBUSY);
        }
        s.size = size;
        Ok(())
    }

    pub(crate) fn size(&self) -> u64 {
        self.state.lock().size
    }

    pub(crate) fn uuid(&self) -> [u8; 16] {
        self.state.lock().uuid
    }

    /// Sets the UUID (and the NGUID, made from it); `EBUSY` while enabled.
    pub(crate) fn set_uuid(&self, uuid: [u8; 16]) -> Result {
        let mut s = self.state.lock();
        if s.volume.is_some() {
            pr_err!("namespace {}: disable it to change its UUID\n", self.nsid);
            return Err(EBUSY);
        }
        s.uuid = uuid;
        Ok(())
    }

    /// Allocates the namespace's RAM (zeroed): from now on hosts see it. `EINVAL` without a
    /// size; enabling an enabled namespace does nothing (`Ok(false)`).
    pub(crate) fn enable(&self) -> Result<bool> {
        let mut s = self.state.lock();
        if s.volume.is_some() {
            return Ok(false);
        }
        if s.size == 0 {
            pr_err!("namespace {}: set its size before enabling it\n", self.nsid);
            return Err(EINVAL);
        }
        s.volume = Some(Volume::new(s.size)?);
        Ok(true)
    }

    /// Hosts no longer see the namespace; its data goes. `true` if it was enabled.
    pub(crate) fn disable(&self) -> bool {
        let volume = self.state.lock().volume.take();
        volume.is_some()
    }

    pub(crate) fn enabled(&self) -> bool {
        self.state.lock().volume.is_some()
    }

    /// The volume, while enabled.
    pub(crate) fn volume(&self) -> Option<Arc<Volume>> {
        self.state.lock().volume.clone()
    }
}

/// Identify's text of a subsystem.
struct Ident {
    serial: KVec<u8>,
    model: KVec<u8>,
}

/// An NVM subsystem: its namespaces and the hosts allowed on it.
#[pin_data]
pub(crate) struct Subsys {
    nqn: KVec<u8>,
    allow_any: AtomicBool,
    #[pin]
    hosts: Mutex<KVec<KVec<u8>>>,
    #[pin]
    ident: Mutex<Ident>,
    /// In NSID order.
    #[pin]
    namespaces: Mutex<KVec<Arc<Ns>>>,
}

/// Checks an NQN given by a user: 1 to [`NQN_MAX`] printable bytes.
pub(crate) fn check_nqn(nqn: &[u8]) -> Result {
    if nqn.is_empty() || nqn.len() > NQN_MAX || !nqn.iter().all(|b| b.is_ascii_graphic()) {
        pr_err!(
            "'{}': an NQN is 1 to {NQN_MAX} printable characters\n",
            Text(nqn)
        );
        return Err(EINVAL);
    }
    Ok(())
}

/// Copies `text` into a new vector.
fn owned(text: &[u8]) -> Result<KVec<u8>> {
    let mut v = KVec::with_capacity(text.len(), GFP_KERNEL)?;
    v.extend_from_slice(text, GFP_KERNEL)?;
    Ok(v)
}

/// Checks an Identify string: printable ASCII, at most `max` bytes.
fn check_text(what: &str, text: &[u8], max: usize) -> Result {
    if text.is_empty() || text.len() > max || !text.iter().all(|&b| (0x20..0x7f).contains(&b)) {
        pr_err!("{what} '{}': 1 to {max} printable characters\n", Text(text));
        return Err(EINVAL);
    }
    Ok(())
}

impl Subsys {
    /// A subsystem named `nqn` with no namespace, allowing no host; `EINVAL` for a bad NQN or
    /// the discovery NQN (the target's discovery controller has it).
    pub(crate) fn new(nqn: &[u8]) -> Result<Arc<Self>> {
        check_nqn(nqn)?;
        if nqn == DISCOVERY_NQN {
            pr_err!("the discovery NQN is the target's own\n");
            return Err(EINVAL);
        }
        // A serial of 16 hex digits from the NQN (nvmet picks a random one).
        let h = hash128(&[nqn]);
        let mut serial = KVec::with_capacity(16, GFP_KERNEL)?;
        for b in &h[..8] {
            for d in [b >> 4, b & 0xf] {
                serial.push(b"0123456789abcdef"[d as usize], GFP_KERNEL)?;
            }
        }
        let (nqn, model) = (owned(nqn)?, owned(b"rdma_rust_nvmet")?);
        Arc::pin_init(
            pin_init!(Subsys {
                nqn,
                allow_any: AtomicBool::new(false),
                hosts <- new_mutex!(KVec::new(), "rdma_rust_nvmet_hosts"),
                ident <- new_mutex!(Ident { serial, model }, "rdma_rust_nvmet_ident"),
                namespaces <- new_mutex!(KVec::new(), "rdma_rust_nvmet_namespaces"),
            }),
            GFP_KERNEL,
        )
    }

    pub(crate) fn nqn(&self) -> &[u8] {
        &self.nqn
    }

    pub(crate) fn set_allow_any_host(&self, any: bool) {
        self.allow_any.store(any, Ordering::Release);
    }

    pub(crate) fn allow_any_host(&self) -> bool {
        self.allow_any.load(Ordering::Acquire)
    }

    /// Allows the host `hostnqn`; `EEXIST` when it is already.
    pub(crate) fn allow_host(&self, hostnqn: &[u8]) -> Result {
        check_nqn(hostnqn)?;
        let mut hosts = self.hosts.lock();
        if hosts.iter().any(|h| h.as_slice() == hostnqn) {
            return Err(EEXIST);
        }
        hosts.push(owned(hostnqn)?, GFP_KERNEL)?;
        Ok(())
    }

    /// No longer allows `hostnqn` (its controllers stay until they disconnect, as in nvmet).
    pub(crate) fn disallow_host(&self, hostnqn: &[u8]) {
        self.hosts.lock().retain(|h| h.as_slice() != hostnqn);
    }

    /// Whether `hostnqn` may connect.
    pub(crate) fn allows(&self, hostnqn: &[u8]) -> bool {
        self.allow_any_host() || self.hosts.lock().iter().any(|h| h.as_slice() == hostnqn)
    }

    pub(crate) fn set_serial(&self, serial: &[u8]) -> Result {
        check_text("serial", serial, SERIAL_MAX)?;
        self.ident.lock().serial = owned(serial)?;
        Ok(())
    }

    pub(crate) fn serial(&self) -> Result<KVec<u8>> {
        owned(&self.ident.lock().serial)
    }

    pub(crate) fn set_model(&self, model: &[u8]) -> Result {
        check_text("model", model, MODEL_MAX)?;
        self.ident.lock().model = owned(model)?;
        Ok(())
    }

    pub(crate) fn model(&self) -> Result<KVec<u8>> {
        owned(&self.ident.lock().model)
    }

    /// Whether `ns` is one of the subsystem's namespaces.
    pub(crate) fn has(&self, ns: &Ns) -> bool {
        self.namespaces
            .lock()
            .iter()
            .any(|n| core::ptr::eq(&**n, ns))
    }

    /// The enabled namespace `nsid`'s volume.
    pub(crate) fn volume(&self, nsid: u32) -> Option<Arc<Volume>> {
        let ns = self
            .namespaces
            .lock()
            .iter()
            .find(|n| n.nsid == nsid)
            .cloned()?;
        ns.volume()
    }

    /// The enabled namespaces' NSIDs above `after`, in order, at most `max` of them.
    pub(crate) fn active_nsids(&self, after: u32, max: usize) -> Result<KVec<u32>> {
        let list = self.namespaces.lock();
        let mut out = KVec::new();
        for ns in list.iter().filter(|n| n.nsid > after && n.enabled()) {
            if out.len() == max {
                break;
            }
            out.push(ns.nsid, GFP_KERNEL)?;
        }
        Ok(out)
    }

    /// The UUID of namespace `nsid` while it is enabled.
    pub(crate) fn ns_uuid(&self, nsid: u32) -> Option<[u8; 16]> {
        let list = self.namespaces.lock();
        let ns = list.iter().find(|n| n.nsid == nsid)?;
        ns.enabled().then(|| ns.uuid())
    }
}

/// A port's address, as text (what the discovery log shows).
pub(crate) struct PortAddr {
    pub(crate) traddr: KVec<u8>,
    pub(crate) trsvcid: KVec<u8>,
    /// 1: IPv4, 2: IPv6 (NVMF_ADDR_FAMILY_IP4 and _IP6).
    pub(crate) adrfam: u8,
}

/// What can change of a port.
struct PortState {
    traddr: KVec<u8>,
    trsvcid: KVec<u8>,
    adrfam: u8,
    /// The subsystems linked to the port, which hosts may reach through it.
    subsystems: KVec<Arc<Subsys>>,
    /// Whether it listens: its address may not change then.
    enabled: bool,
    /// Changes of the subsystems listed (the discovery log's GENCTR).
    generation: u64,
}

/// A port's configuration: the address it listens on and the subsystems linked to it (the
/// listener is [`crate::port::Port`]'s).
#[pin_data]
pub(crate) struct PortConf {
    pub(crate) id: u16,
    #[pin]
    state: Mutex<PortState>,
}

/// Checks a port's address text (at most `max` printable bytes).
fn check_addr(what: &str, text: &[u8], max: usize) -> Result {
    if text.is_empty() || text.len() > max || !text.iter().all(|b| b.is_ascii_graphic()) {
        pr_err!("{what} '{}': 1 to {max} printable characters\n", Text(text));
        return Err(EINVAL);
    }
    Ok(())
}

impl PortConf {
    /// Port `id`, IPv4 with no address yet.
    pub(crate) fn new(id: u16) -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(PortConf {
                id,
                state <- new_mutex!(PortState {
                    traddr: KVec::new(),
                    trsvcid: KVec::new(),
                    adrfam: 1,
                    subsystems: KVec::new(),
                    enabled: false,
                    generation: 0,
                }, "rdma_rust_nvmet_port"),
            }),
            GFP_KERNEL,
        )
    }

    /// Runs `f` on the state unless the port is enabled (`EACCES`, as nvmet answers).
    fn change(&self, f: impl FnOnce(&mut PortState) -> Result) -> Result {
        let mut s = self.state.lock();
        if s.enabled {
            pr_err!(
                "port {}: its address cannot change while subsystems are linked to it\n",
                self.id
            );
            return Err(EACCES);
        }
        f(&mut s)
    }

    pub(crate) fn set_traddr(&self, text: &[u8]) -> Result {
        check_addr("addr_traddr", text, 255)?;
        self.change(|s| {
            s.traddr = owned(text)?;
            Ok(())
        })
    }

    pub(crate) fn set_trsvcid(&self, text: &[u8]) -> Result {
        check_addr("addr_trsvcid", text, 31)?;
        let port = core::str::from_utf8(text)
            .ok()
            .and_then(|t| t.parse::<u16>().ok())
            .filter(|&p| p != 0);
        if port.is_none() {
            pr_err!("addr_trsvcid '{}': a port number, 1 to 65535\n", Text(text));
            return Err(EINVAL);
        }
        self.change(|s| {
            s.trsvcid = owned(text)?;
            Ok(())
        })
    }

    pub(crate) fn set_adrfam(&self, text: &[u8]) -> Result {
        let fam = match text {
            b"ipv4" => 1,
            b"ipv6" => 2,
            _ => {
                pr_err!("addr_adrfam '{}': ipv4 or ipv6\n", Text(text));
                return Err(EINVAL);
            }
        };
        self.change(|s| {
            s.adrfam = fam;
            Ok(())
        })
    }

    /// Only RDMA is served: anything else is refused.
    pub(crate) fn set_trtype(&self, text: &[u8]) -> Result {
        if text != b"rdma" {
            pr_err!(
                "addr_trtype '{}': this target serves rdma only\n",
                Text(text)
            );
            return Err(EINVAL);
        }
        self.change(|_| Ok(()))
    }

    pub(crate) fn addr_text(&self) -> Result<PortAddr> {
        let s = self.state.lock();
        Ok(PortAddr {
            traddr: owned(&s.traddr)?,
            trsvcid: owned(&s.trsvcid)?,
            adrfam: s.adrfam,
        })
    }

    pub(crate) fn adrfam(&self) -> &'static [u8] {
        if self.state.lock().adrfam == 2 {
            b"ipv6"
        } else {
            b"ipv4"
        }
    }

    /// The subsystems linked to the port.
    pub(crate) fn subsystems(&self) -> Result<KVec<Arc<Subsys>>> {
        let s = self.state.lock();
        let mut v = KVec::with_capacity(s.subsystems.len(), GFP_KERNEL)?;
        for sub in s.subsystems.iter() {
            v.push(sub.clone(), GFP_KERNEL)?;
        }
        Ok(v)
    }

    /// The subsystem `nqn`, if it is linked to the port.
    pub(crate) fn subsystem(&self, nqn: &[u8]) -> Option<Arc<Subsys>> {
        let s = self.state.lock();
        s.subsystems.iter().find(|x| x.nqn() == nqn).cloned()
    }

    /// Whether a subsystem is linked (the port should listen).
    pub(crate) fn has_subsystems(&self) -> bool {
        !self.state.lock().subsystems.is_empty()
    }

    pub(crate) fn generation(&self) -> u64 {
        self.state.lock().generation
    }

    /// Links `subsys`; `first` tells whether it is the port's first (the port must start
    /// listening). `EEXIST` when it is linked already.
    pub(crate) fn link(&self, subsys: &Arc<Subsys>) -> Result<bool> {
        let mut s = self.state.lock();
        if s.subsystems.iter().any(|x| Arc::ptr_eq(x, subsys)) {
            return Err(EEXIST);
        }
        s.subsystems.push(subsys.clone(), GFP_KERNEL)?;
        s.generation += 1;
        Ok(s.subsystems.len() == 1)
    }

    /// Unlinks `subsys`; whether the port has no subsystem left.
    pub(crate) fn unlink(&self, subsys: &Subsys) -> bool {
        let mut s = self.state.lock();
        s.subsystems.retain(|x| !core::ptr::eq(&**x, subsys));
        s.generation += 1;
        s.subsystems.is_empty()
    }

    /// The address to listen on (`EINVAL` and a message when it is incomplete or not an IP
    /// address of the family).
    pub(crate) fn sockaddr(&self) -> Result<kernel::rdma::cm::SockAddr> {
        let s = self.state.lock();
        let port = core::str::from_utf8(&s.trsvcid)
            .ok()
            .and_then(|t| t.parse::<u16>().ok());
        let addr = port.and_then(|p| kernel::rdma::cm::SockAddr::parse(&s.traddr, p));
        let fam_ok = match addr {
            Some(kernel::rdma::cm::SockAddr::V4(_)) => s.adrfam == 1,
            Some(kernel::rdma::cm::SockAddr::V6(_)) => s.adrfam == 2,
            None => false,
        };
        if !fam_ok {
            pr_err!(
                "port {}: addr_traddr '{}' addr_trsvcid '{}' is not an address of its addr_adrfam\n",
                self.id,
                Text(&s.traddr),
                Text(&s.trsvcid)
            );
            return Err(EINVAL);
        }
        addr.ok_or(EINVAL)
    }

    /// Marks the port as listening (or not).
    pub(crate) fn set_enabled(&self, enabled: bool) {
        self.state.lock().enabled = enabled;
    }

    pub(crate) fn traddr(&self) -> Result<KVec<u8>> {
        owned(&self.state.lock().traddr)
    }

    pub(crate) fn trsvcid(&self) -> Result<KVec<u8>> {
        owned(&self.state.lock().trsvcid)
    }
}
