// SPDX-License-Identifier: GPL-2.0

//! RDMA devices and their ports.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use crate::{
    bindings,
    error::{code::*, to_result, Error, Result},
    str::CStr,
    types::{ARef, AlwaysRefCounted, Opaque},
};
use core::{fmt, ops::RangeInclusive, ptr::NonNull};

mod attr;

pub use attr::{AtomicCap, DeviceAttr};

/// Longest RDMA device name, terminating NUL included (`IB_DEVICE_NAME_MAX`).
pub const NAME_MAX: usize = bindings::IB_DEVICE_NAME_MAX as usize;

/// Longest network interface name, terminating NUL included (`IFNAMSIZ`).
const IFNAMSIZ: usize = bindings::IFNAMSIZ as usize;

/// An RDMA device (`struct ib_device`).
///
/// A `&Device` is handed to [`Client`](super::client::Client) callbacks, which run while the
/// RDMA core holds a reference on the device. [`Device::get_by_name`] returns an [`ARef`] that
/// keeps the `struct ib_device` alive; note that holding one makes `ib_unregister_device`
/// wait until it is dropped, so per-device state must drop its references in `remove`.
///
/// # Invariants
///
/// The wrapped `struct ib_device` is registered with the RDMA core (or in the middle of being
/// registered or unregistered) and its reference count is non-zero for the lifetime of the
/// `Device`.
///
/// # Examples
///
/// ```
/// use kernel::c_str;
/// use kernel::rdma::device::Device;
///
/// // Nothing is registered under this name: the lookup finds nothing.
/// assert!(Device::get_by_name(c_str!("no-such-rdma-dev")).is_none());
/// ```
#[repr(transparent)]
pub struct Device(Opaque<bindings::ib_device>);

// SAFETY: `struct ib_device` is reference counted and the verbs called through `&Device` may be
// called from any thread.
unsafe impl Send for Device {}

// SAFETY: The verbs called through `&Device` are safe to call concurrently; the RDMA core
// serialises what needs it.
unsafe impl Sync for Device {}

// SAFETY: `refcount_inc` and `ib_device_put` manage `ib_device.refcount`, which keeps the
// structure alive; the type invariant guarantees the count is non-zero while a `&Device` exists.
unsafe impl AlwaysRefCounted for Device {
    fn inc_ref(&self) {
        // SAFETY: The invariant says the refcount is non-zero, so it may be incremented.
        unsafe { bindings::refcount_inc(&raw mut (*self.as_raw()).refcount) };
    }

    unsafe fn dec_ref(obj: NonNull<Self>) {
        // SAFETY: The caller owns a reference, which is given back here.
        unsafe { bindings::ib_device_put(obj.cast::<bindings::ib_device>().as_ptr()) };
    }
}

impl Device {
    /// Creates a reference to a [`Device`] from a raw pointer.
    ///
    /// # Safety
    ///
    /// `ptr` must point to an `ib_device` that satisfies the type invariants for `'a`.
    #[inline]
    pub(crate) unsafe fn from_raw<'a>(ptr: *mut bindings::ib_device) -> &'a Self {
        // SAFETY: `Device` is `repr(transparent)` over the C struct; the caller guarantees
        // validity for `'a`.
        unsafe { &*ptr.cast::<Self>() }
    }

    /// Whether the device's DMA addresses are CPU addresses (`ib_uses_virt_dma`: the software
    /// providers, which have no DMA device): mapping them is arithmetic, syncing and checking
    /// them nothing.
    #[inline]
    pub(crate) fn uses_virt_dma(&self) -> bool {
        // SAFETY: `self.as_raw()` is valid (invariant); `dma_device` is set at registration
        // and not changed while the device is registered.
        cfg!(CONFIG_INFINIBAND_VIRT_DMA) && unsafe { (*self.as_raw()).dma_device.is_null() }
    }

    /// Returns the raw `struct ib_device` pointer.
    #[inline]
    pub(crate) fn as_raw(&self) -> *mut bindings::ib_device {
        self.0.get()
    }

    /// Looks up a registered RDMA device by name (`ib_device_get_by_name`).
    ///
    /// Returns `None` when no device of that name is registered.
    pub fn get_by_name(name: &CStr) -> Option<ARef<Device>> {
        // SAFETY: `name` is NUL-terminated; `RDMA_DRIVER_UNKNOWN` matches any driver.
        let ptr = unsafe {
            bindings::ib_device_get_by_name(
                name.as_char_ptr(),
                bindings::rdma_driver_id_RDMA_DRIVER_UNKNOWN,
            )
        };
        let ptr = NonNull::new(ptr)?;
        // SAFETY: `ib_device_get_by_name` returned a registered device with a reference that
        // is now owned by the `ARef`.
        Some(unsafe { ARef::from_raw(ptr.cast::<Device>()) })
    }

    /// Returns a copy of the device's current name (e.g. `rxe0`).
    ///
    /// A device can be renamed (`rdma dev set NAME name NEW`) at any time, so the name is
    /// copied rather than borrowed.
    pub fn name(&self) -> Name<NAME_MAX> {
        // SAFETY: `self.as_raw()` is valid (invariant); `dev_name` returns a NUL-terminated
        // string owned by the device's kobject, copied before returning.
        unsafe {
            Name::copy_from(bindings::dev_name(
                &raw const (*self.as_raw()).__bindgen_anon_1.dev,
            ))
        }
    }

    /// Returns the node GUID, in host byte order.
    pub fn node_guid(&self) -> u64 {
        // SAFETY: `self.as_raw()` is valid (invariant); `node_guid` is set before registration.
        u64::from_be(unsafe { (*self.as_raw()).node_guid })
    }

    /// Returns the valid port numbers of the device (`rdma_start_port..=rdma_end_port`).
    ///
    /// Switches have only port 0; HCAs and RNICs number their ports from 1.
    pub fn ports(&self) -> RangeInclusive<u32> {
        // SAFETY: `self.as_raw()` is valid (invariant); both helpers only read fields that are
        // immutable after registration.
        unsafe { bindings::rdma_start_port(self.as_raw())..=bindings::rdma_end_port(self.as_raw()) }
    }

    fn check_port(&self, port: u32) -> Result {
        if self.ports().contains(&port) {
            Ok(())
        } else {
            Err(EINVAL)
        }
    }

    /// Queries the attributes of `port` (`ib_query_port`). May sleep.
    ///
    /// # Errors
    ///
    /// - `EINVAL` for a port number outside [`Device::ports`].
    /// - `ENODEV` for an iWARP port without a network device.
    /// - Otherwise what the driver's `query_port` returns.
    pub fn query_port(&self, port: u32) -> Result<PortAttr> {
        self.check_port(port)?;
        let mut attr = bindings::ib_port_attr::default();
        // SAFETY: `self.as_raw()` is valid (invariant), `port` is valid, and `attr` is a
        // writable `ib_port_attr`.
        to_result(unsafe { bindings::ib_query_port(self.as_raw(), port, &mut attr) })?;
        Ok(PortAttr(attr))
    }

    /// Returns the link layer of `port` (`rdma_port_get_link_layer`).
    ///
    /// # Errors
    ///
    /// `EINVAL` for a port number outside [`Device::ports`].
    pub fn link_layer(&self, port: u32) -> Result<LinkLayer> {
        self.check_port(port)?;
        // SAFETY: `self.as_raw()` is valid (invariant) and `port` has been checked, so the
        // core indexes its port array in bounds.
        let ll = unsafe { bindings::rdma_port_get_link_layer(self.as_raw(), port) };
        Ok(LinkLayer::from_raw(ll))
    }

    /// Whether `port` speaks iWARP (`rdma_protocol_iwarp`); false for a port outside
    /// [`Device::ports`].
    pub fn is_iwarp(&self, port: u32) -> bool {
        // SAFETY: `self.as_raw()` is valid (invariant) and `port` is checked first, so the core
        // indexes its port array in bounds.
        self.check_port(port).is_ok()
            && unsafe { bindings::rdma_protocol_iwarp(self.as_raw(), port) }
    }

    /// Whether the device is an iWARP RNIC (`RDMA_NODE_RNIC`: soft-iWARP, `siw`, is one). Its
    /// QPs are RC only, and only the connection manager connects them (iw_cm, over TCP): the
    /// crate refuses a QP made by hand, a UD QP, a multicast join, immediate data and, where
    /// the device has none (`siw`), atomic operations, each with `EOPNOTSUPP` and before the
    /// driver is called. How its QPs end differs too: see
    /// [`Device::flush_may_precede_disconnect`].
    pub fn is_rnic(&self) -> bool {
        // SAFETY: `self.as_raw()` is valid (invariant); `node_type` is fixed at registration.
        let node = unsafe { (*self.as_raw()).node_type };
        u32::from(node) == bindings::RDMA_NODE_RNIC
    }

    /// Whether a connected QP of this device may see its requests flushed
    /// ([`WcStatus::WrFlushErr`]) before rdma_cm reports the disconnect that caused it.
    ///
    /// On InfiniBand and RoCE a flush the ULP did not cause (by moving the QP to the error
    /// state or disconnecting) means the QP failed on its own: a peer's READ or WRITE broke
    /// a rule of this side's responder, with nothing else to report it, so the ULP should end
    /// the connection. An iWARP QP follows its TCP stream instead: a peer's close moves it to
    /// the error state, and a broken rule reaches the peer as a TERMINATE that closes the
    /// stream; either way rdma_cm reports the end, so a flush there is no news.
    ///
    /// [`WcStatus::WrFlushErr`]: crate::rdma::cq::WcStatus::WrFlushErr
    pub fn flush_may_precede_disconnect(&self) -> bool {
        self.is_rnic()
    }

    /// Returns the name of the network device bound to `port` (RoCE and iWARP), e.g. `eth0`.
    ///
    /// # Errors
    ///
    /// - `EINVAL` for a port outside [`Device::ports`].
    /// - `ENODEV` when no network device is bound to the port (for instance on InfiniBand).
    pub fn netdev_name(&self, port: u32) -> Result<Name<IFNAMSIZ>> {
        self.check_port(port)?;
        // SAFETY: `self.as_raw()` is valid (invariant) and `port` has been checked.
        let ndev = unsafe { bindings::ib_device_get_netdev(self.as_raw(), port) };
        if ndev.is_null() {
            return Err(ENODEV);
        }
        // SAFETY: `ib_device_get_netdev` returned a held `net_device`, whose `name` is a
        // NUL-terminated array of `IFNAMSIZ` bytes.
        let name = unsafe { Name::copy_from((*ndev).name.as_ptr()) };
        // SAFETY: Gives back the reference taken by `ib_device_get_netdev`.
        unsafe { bindings::dev_put(ndev) };
        Ok(name)
    }
}

impl Device {
    /// Returns the first primary IPv4 address of the network device bound to `port` (RoCE
    /// and iWARP): an address at which rdma_cm reaches the port.
    ///
    /// # Errors
    ///
    /// - `EINVAL` for a port outside [`Device::ports`].
    /// - `EADDRNOTAVAIL` when no network device is bound to the port, or it has no IPv4
    ///   address.
    pub fn ipv4_addr(&self, port: u32) -> Result<[u8; 4]> {
        self.check_port(port)?;
        // SAFETY: `self.as_raw()` is valid (invariant) and `port` has been checked; the helper
        // holds the network device while it reads its addresses.
        let addr = unsafe { bindings::rdma_port_ipv4(self.as_raw(), port) };
        // The address is in network order in memory: its bytes as they are.
        match addr.to_ne_bytes() {
            [0, 0, 0, 0] => Err(Error::from_errno(-(bindings::EADDRNOTAVAIL as i32))),
            ip => Ok(ip),
        }
    }

    /// Returns the device's capabilities (`ib_device.attrs`), fixed at registration.
    pub fn attrs(&self) -> DeviceAttr<'_> {
        // SAFETY: `self.as_raw()` is valid (invariant); `attrs` is filled in by the driver
        // before registration and not changed afterwards.
        DeviceAttr(unsafe { &(*self.as_raw()).attrs })
    }

    /// The number of completion vectors (interrupts) a CQ may be bound to.
    pub fn num_comp_vectors(&self) -> u32 {
        // SAFETY: `self.as_raw()` is valid (invariant); the field is fixed at registration.
        u32::try_from(unsafe { (*self.as_raw()).num_comp_vectors }).unwrap_or(0)
    }

    /// Returns entry `index` of the GID table of `port` (`rdma_get_gid_attr`). May sleep.
    ///
    /// # Errors
    ///
    /// - `EINVAL` for a port outside [`Device::ports`], or an index outside the port's table.
    /// - `ENODATA` for an empty entry.
    pub fn gid(&self, port: u32, index: u32) -> Result<GidEntry> {
        self.check_port(port)?;
        let index_c = i32::try_from(index).map_err(|_| EINVAL)?;
        // SAFETY: `self.as_raw()` is valid and `port` has been checked; the core checks `index`.
        let attr = unsafe { bindings::rdma_get_gid_attr(self.as_raw(), port, index_c) };
        let attr = crate::error::from_err_ptr(attr.cast_mut())?;
        // SAFETY: `rdma_get_gid_attr` returned a held, valid entry.
        Ok(unsafe { GidEntry::take(attr) }.1)
    }

    /// Returns entry `index` of the P_Key table of `port` (`ib_query_pkey`); RoCE ports have
    /// the default P_Key `0xffff` at index 0. May sleep.
    ///
    /// # Errors
    ///
    /// - `EINVAL` for a port outside [`Device::ports`].
    /// - `EOPNOTSUPP` when the driver has no P_Key table (no `query_pkey`).
    /// - Otherwise what the driver's `query_pkey` returns: `EINVAL` for an index outside the
    ///   table (soft-RoCE has index 0 only).
    pub fn pkey(&self, port: u32, index: u16) -> Result<u16> {
        self.check_port(port)?;
        let mut pkey = 0u16;
        // SAFETY: `self.as_raw()` is valid, `port` checked; the core checks `index`.
        to_result(unsafe { bindings::ib_query_pkey(self.as_raw(), port, index, &mut pkey) })?;
        Ok(pkey)
    }

    /// Finds the P_Key `pkey` in the table of `port` and returns its index (`ib_find_pkey`;
    /// the full-membership bit is preferred over the limited one). May sleep.
    ///
    /// # Errors
    ///
    /// - `EINVAL` for a port outside [`Device::ports`].
    /// - `ENOENT` when the table does not hold `pkey`.
    /// - What reading the table returns ([`Device::pkey`]).
    pub fn find_pkey(&self, port: u32, pkey: u16) -> Result<u16> {
        self.check_port(port)?;
        let mut index = 0u16;
        // SAFETY: `self.as_raw()` is valid and `port` checked.
        to_result(unsafe { bindings::ib_find_pkey(self.as_raw(), port, pkey, &mut index) })?;
        Ok(index)
    }

    /// Finds `gid` of type `kind` in the GID tables of every port (`rdma_find_gid`) and returns
    /// the port and entry holding it. May sleep.
    ///
    /// # Errors
    ///
    /// `ENOENT` when no port has it.
    pub fn find_gid(&self, gid: &Gid, kind: GidType) -> Result<(u32, GidEntry)> {
        let raw = bindings::ib_gid { raw: gid.0 };
        let ty = match kind {
            GidType::Ib => bindings::ib_gid_type_IB_GID_TYPE_IB,
            GidType::RoceV2 => bindings::ib_gid_type_IB_GID_TYPE_ROCE_UDP_ENCAP,
        };
        // SAFETY: `self.as_raw()` is valid and `raw` outlives the call; no netdev filter.
        let attr =
            unsafe { bindings::rdma_find_gid(self.as_raw(), &raw, ty, core::ptr::null_mut()) };
        let attr = crate::error::from_err_ptr(attr.cast_mut())?;
        // SAFETY: `rdma_find_gid` returned a held, valid entry.
        Ok(unsafe { GidEntry::take(attr) })
    }

    /// The GID of `port` that this crate sources RoCE traffic from: a RoCE v2 GID that maps an
    /// IPv4 address (`::ffff:a.b.c.d`), or else the first valid GID. Only the first 256 entries
    /// are looked at: an address vector names its source GID in 8 bits. (Not `ib_find_gid`,
    /// which looks a given GID up: that is [`Device::find_gid`].) May sleep.
    ///
    /// # Errors
    ///
    /// - `ENOENT` when the table holds no valid GID (for instance no address on the netdev).
    /// - What [`Device::query_port`] returns: `EINVAL` for a port outside [`Device::ports`].
    pub fn preferred_gid(&self, port: u32) -> Result<GidEntry> {
        let len = self.query_port(port)?.gid_tbl_len().min(256);
        let mut first = None;
        for i in 0..len {
            let Ok(g) = self.gid(port, i) else { continue };
            if g.roce_v2 && g.ipv4 {
                return Ok(g);
            }
            first.get_or_insert(g);
        }
        first.ok_or(ENOENT)
    }
}

/// A GID (`union ib_gid`): the 128-bit address of a port, an IPv6 or IPv4-mapped address on
/// RoCE.
///
/// # Examples
///
/// ```
/// use kernel::rdma::device::Gid;
///
/// let mut raw = [0u8; 16];
/// raw[10..].copy_from_slice(&[0xff, 0xff, 10, 77, 0, 1]);
/// let s = kernel::str::CString::try_from_fmt(kernel::fmt!("{}", Gid(raw)))?;
/// assert_eq!(s.to_str()?, "0000:0000:0000:0000:0000:ffff:0a4d:0001");
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// Whether the GID maps an IPv4 address (`::ffff:a.b.c.d`).
    fn is_v4_mapped(&self) -> bool {
        self.0[..10].iter().all(|&b| b == 0) && self.0[10..12] == [0xff, 0xff]
    }

    /// Whether the GID is a multicast address: `ff00::/8`, or an IPv4-mapped
    /// `::ffff:224.0.0.0/4` (how RoCE v2 names an IPv4 group).
    pub fn is_multicast(&self) -> bool {
        self.0[0] == 0xff || (self.is_v4_mapped() && self.0[12] & 0xf0 == 0xe0)
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, pair) in self.0.chunks(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
        }
        Ok(())
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The type of a GID (`enum ib_gid_type`), for [`Device::find_gid`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GidType {
    /// InfiniBand, and RoCE v1 (`IB_GID_TYPE_IB`).
    Ib,
    /// RoCE v2, over UDP (`IB_GID_TYPE_ROCE_UDP_ENCAP`).
    RoceV2,
}

impl GidEntry {
    /// The port and entry of `attr`, whose reference is given back.
    ///
    /// # Safety
    ///
    /// `attr` must be a valid GID table entry the caller holds a reference of.
    unsafe fn take(attr: *const bindings::ib_gid_attr) -> (u32, Self) {
        // SAFETY: Valid per the safety requirements.
        let (raw, gid_type, port, index) = unsafe {
            (
                (*attr).gid.raw,
                (*attr).gid_type,
                (*attr).port_num,
                (*attr).index,
            )
        };
        // SAFETY: Gives back the caller's reference; nothing reads `attr` afterwards.
        unsafe { bindings::rdma_put_gid_attr(attr) };
        let gid = Gid(raw);
        let entry = GidEntry {
            gid,
            index: u32::from(index),
            roce_v2: gid_type == bindings::ib_gid_type_IB_GID_TYPE_ROCE_UDP_ENCAP,
            ipv4: gid.is_v4_mapped(),
        };
        (port, entry)
    }
}

/// An entry of a port's GID table, as returned by [`Device::gid`].
#[derive(Clone, Copy, Debug)]
pub struct GidEntry {
    /// The GID.
    pub gid: Gid,
    /// Its index in the table (the `sgid_index` of address vectors).
    pub index: u32,
    /// Whether it is a RoCE v2 (UDP-encapsulated) GID.
    pub roce_v2: bool,
    /// Whether it maps an IPv4 address.
    pub ipv4: bool,
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device")
            .field("name", &self.name())
            .finish()
    }
}

/// A name copied out of a C string (device or interface name), at most `N - 1` bytes long.
#[derive(Clone, Copy)]
pub struct Name<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> Name<N> {
    /// Copies at most `N - 1` bytes of the NUL-terminated string at `ptr`.
    ///
    /// # Safety
    ///
    /// `ptr` must be null or point to a NUL-terminated string that stays valid during the call.
    unsafe fn copy_from(ptr: *const crate::ffi::c_char) -> Self {
        let mut name = Name {
            buf: [0; N],
            len: 0,
        };
        if ptr.is_null() {
            return name;
        }
        let ptr = ptr.cast::<u8>();
        while name.len + 1 < N {
            // SAFETY: The string is NUL-terminated and we stop at the NUL, so every byte read
            // is inside it.
            let c = unsafe { *ptr.add(name.len) };
            if c == 0 {
                break;
            }
            name.buf[name.len] = c;
            name.len += 1;
        }
        name
    }

    /// Returns the name as bytes, without the terminating NUL.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// Returns the name as a C string.
    pub fn as_cstr(&self) -> &CStr {
        // SAFETY: `buf[len]` is NUL (the buffer starts zeroed and `len < N`), and no byte before
        // it is NUL because `copy_from` stops at the first one.
        unsafe { CStr::from_bytes_with_nul_unchecked(&self.buf[..=self.len]) }
    }
}

impl<const N: usize> PartialEq<str> for Name<N> {
    fn eq(&self, other: &str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl<const N: usize> fmt::Display for Name<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.as_cstr(), f)
    }
}

impl<const N: usize> fmt::Debug for Name<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_cstr(), f)
    }
}

/// The logical state of a port (`enum ib_port_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortState {
    /// No state change (`IB_PORT_NOP`).
    Nop,
    /// Link down (`IB_PORT_DOWN`).
    Down,
    /// Link up, not yet configured (`IB_PORT_INIT`).
    Init,
    /// Configured, not yet active (`IB_PORT_ARMED`).
    Armed,
    /// Ready for traffic (`IB_PORT_ACTIVE`).
    Active,
    /// Active, pending a state change (`IB_PORT_ACTIVE_DEFER`).
    ActiveDefer,
    /// A value this wrapper does not know.
    Unknown(u32),
}

impl PortState {
    fn from_raw(state: bindings::ib_port_state) -> Self {
        match state {
            bindings::ib_port_state_IB_PORT_NOP => Self::Nop,
            bindings::ib_port_state_IB_PORT_DOWN => Self::Down,
            bindings::ib_port_state_IB_PORT_INIT => Self::Init,
            bindings::ib_port_state_IB_PORT_ARMED => Self::Armed,
            bindings::ib_port_state_IB_PORT_ACTIVE => Self::Active,
            bindings::ib_port_state_IB_PORT_ACTIVE_DEFER => Self::ActiveDefer,
            other => Self::Unknown(other),
        }
    }
}

/// The link layer under a port (`enum rdma_link_layer`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkLayer {
    /// Not reported by the driver.
    Unspecified,
    /// InfiniBand.
    Infiniband,
    /// Ethernet: RoCE (soft-RoCE, `rdma_rxe`, included) or iWARP.
    Ethernet,
}

impl LinkLayer {
    fn from_raw(ll: bindings::rdma_link_layer) -> Self {
        match ll {
            bindings::rdma_link_layer_IB_LINK_LAYER_INFINIBAND => Self::Infiniband,
            bindings::rdma_link_layer_IB_LINK_LAYER_ETHERNET => Self::Ethernet,
            _ => Self::Unspecified,
        }
    }
}

/// An InfiniBand path MTU (`enum ib_mtu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256,
    /// 512 bytes.
    Mtu512,
    /// 1024 bytes.
    Mtu1024,
    /// 2048 bytes.
    Mtu2048,
    /// 4096 bytes.
    Mtu4096,
}

impl Mtu {
    pub(crate) fn from_raw(mtu: bindings::ib_mtu) -> Option<Self> {
        match mtu {
            bindings::ib_mtu_IB_MTU_256 => Some(Self::Mtu256),
            bindings::ib_mtu_IB_MTU_512 => Some(Self::Mtu512),
            bindings::ib_mtu_IB_MTU_1024 => Some(Self::Mtu1024),
            bindings::ib_mtu_IB_MTU_2048 => Some(Self::Mtu2048),
            bindings::ib_mtu_IB_MTU_4096 => Some(Self::Mtu4096),
            _ => None,
        }
    }

    pub(crate) fn to_raw(self) -> bindings::ib_mtu {
        match self {
            Self::Mtu256 => bindings::ib_mtu_IB_MTU_256,
            Self::Mtu512 => bindings::ib_mtu_IB_MTU_512,
            Self::Mtu1024 => bindings::ib_mtu_IB_MTU_1024,
            Self::Mtu2048 => bindings::ib_mtu_IB_MTU_2048,
            Self::Mtu4096 => bindings::ib_mtu_IB_MTU_4096,
        }
    }

    /// Returns the MTU in bytes.
    ///
    /// ```
    /// use kernel::rdma::device::Mtu;
    ///
    /// assert_eq!(Mtu::Mtu256.bytes(), 256);
    /// assert_eq!(Mtu::Mtu4096.bytes(), 4096);
    /// ```
    pub fn bytes(self) -> u32 {
        match self {
            Self::Mtu256 => 256,
            Self::Mtu512 => 512,
            Self::Mtu1024 => 1024,
            Self::Mtu2048 => 2048,
            Self::Mtu4096 => 4096,
        }
    }
}

/// Attributes of a port, as returned by [`Device::query_port`] (`struct ib_port_attr`).
pub struct PortAttr(bindings::ib_port_attr);

impl PortAttr {
    /// Logical port state.
    pub fn state(&self) -> PortState {
        PortState::from_raw(self.0.state)
    }

    /// Largest MTU the port supports, or `None` if the driver reports none.
    pub fn max_mtu(&self) -> Option<Mtu> {
        Mtu::from_raw(self.0.max_mtu)
    }

    /// MTU currently in effect on the link, or `None` if the driver reports none.
    pub fn active_mtu(&self) -> Option<Mtu> {
        Mtu::from_raw(self.0.active_mtu)
    }

    /// Number of entries in the port's GID table.
    pub fn gid_tbl_len(&self) -> u32 {
        self.0.gid_tbl_len.try_into().unwrap_or(0)
    }

    /// Number of entries in the port's P_Key table.
    pub fn pkey_tbl_len(&self) -> u16 {
        self.0.pkey_tbl_len
    }

    /// Largest message the port can send, in bytes.
    pub fn max_msg_sz(&self) -> u32 {
        self.0.max_msg_sz
    }

    /// Base LID of the port (InfiniBand only; zero on RoCE).
    pub fn lid(&self) -> u32 {
        self.0.lid
    }
}

impl fmt::Debug for PortAttr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PortAttr")
            .field("state", &self.state())
            .field("active_mtu", &self.active_mtu())
            .field("gid_tbl_len", &self.gid_tbl_len())
            .finish()
    }
}
