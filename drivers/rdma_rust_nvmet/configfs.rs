// SPDX-License-Identifier: GPL-2.0

//! The configfs tree: `/sys/kernel/config/rdma_rust_nvmet/`, with nvmet's nouns and layout.
//!
//! ```text
//! subsystems/<nqn>/                 mkdir: Subsys::new; rmdir: forgotten (no port links it)
//!     attr_allow_any_host           0 or 1
//!     attr_serial, attr_model       Identify's serial number and model
//!     namespaces/<nsid>/            mkdir: Ns::new; rmdir: Ns::remove
//!         size                      bytes (k, m, g suffixes), a multiple of 4096
//!         device_uuid               xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx
//!         enable                    1: Ns::enable, 0: Ns::disable
//!     allowed_hosts/<link>          ln -s ../../../hosts/<nqn>: Subsys::allow_host
//! ports/<id>/                       mkdir: Port::new; rmdir: Port::close
//!     addr_traddr, addr_trsvcid     the address to listen on
//!     addr_adrfam                   ipv4 or ipv6
//!     addr_trtype                   rdma
//!     subsystems/<link>             ln -s ../../../subsystems/<nqn>: Port::link (the first
//!                                   one makes the port listen, the last unlink stops it)
//! hosts/<nqn>/                      a host NQN, for allowed_hosts links
//! ```
//!
//! Each callback is one call into the configuration model ([`crate::config`], and the
//! listeners of [`crate::port`]; the module's lists of subsystems and ports keep what is
//! made here, as they keep what the debugfs hook makes); what the model
//! refuses is refused with its error, and what is refused here (a name or a value that does
//! not parse) with `EINVAL` and a message. configfs itself refuses `rmdir` of a directory that
//! a link points to (`EBUSY`) or that holds links or directories (`ENOTEMPTY`).

use crate::config::{Ns, PortConf, Subsys};
use crate::port::Port;
use kernel::configfs::{
    AttrRef, Attribute, Attrs, Children, DefaultGroups, Group, ItemType, Links, Page, Registration,
};
use kernel::debugfs::command::{parse_size, Escaped};
use kernel::prelude::*;
use kernel::str::CStr;
use kernel::sync::Arc;
use kernel::{c_str, ThisModule};

/// The longest NQN (NVMe base specification: 223 bytes).
const NQN_MAX: usize = 223;

/// Registers the tree. It goes when the registration is dropped (at module exit: configfs
/// keeps the module while users' directories are there).
pub(crate) fn register() -> Result<Registration<Root>> {
    Registration::new(c_str!("rdma_rust_nvmet"), Arc::new((), GFP_KERNEL)?)
}

/// What one write to an attribute holds: without the newline `echo` adds.
fn value(input: &[u8]) -> &[u8] {
    input.strip_suffix(b"\n").unwrap_or(input)
}

/// A boolean attribute's value, as nvmet takes it (`kstrtobool`'s words).
fn boolean(what: &str, input: &[u8]) -> Result<bool> {
    match value(input) {
        b"1" | b"y" | b"Y" | b"on" => Ok(true),
        b"0" | b"n" | b"N" | b"off" => Ok(false),
        v => {
            pr_err!("{what} '{}': 0 or 1\n", Escaped(v));
            Err(EINVAL)
        }
    }
}

/// A directory's name as a decimal number of type `T`.
fn number<T: TryFrom<u64>>(what: &str, name: &CStr) -> Result<T> {
    let text = name.as_bytes();
    let n = core::str::from_utf8(text)
        .ok()
        .filter(|t| t.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|t| t.parse::<u64>().ok())
        .and_then(|n| T::try_from(n).ok());
    n.ok_or_else(|| {
        pr_err!("{what} '{}': not a number of its range\n", Escaped(text));
        EINVAL
    })
}

/// `/sys/kernel/config/rdma_rust_nvmet/`: `subsystems/`, `ports/` and `hosts/`.
pub(crate) struct Root;

impl Group for Root {
    type Data = ();
    const OWNER: &'static ThisModule = &crate::THIS_MODULE;
    const TYPE: ItemType<Self> = ItemType::new();

    fn defaults(_: &Arc<()>, groups: &mut DefaultGroups<'_>) -> Result {
        groups.add::<SubsystemsDir>(c_str!("subsystems"), Arc::new((), GFP_KERNEL)?)?;
        groups.add::<PortsDir>(c_str!("ports"), Arc::new((), GFP_KERNEL)?)?;
        groups.add::<HostsDir>(c_str!("hosts"), Arc::new((), GFP_KERNEL)?)
    }
}

/// `subsystems/`: `mkdir subsystems/<nqn>` makes a subsystem.
pub(crate) struct SubsystemsDir;

impl Group for SubsystemsDir {
    type Data = ();
    const OWNER: &'static ThisModule = &crate::THIS_MODULE;
    const TYPE: ItemType<Self> = ItemType::new().with_children();
}

impl Children for SubsystemsDir {
    type Child = SubsysDir;

    fn make(_: &Arc<()>, name: &CStr) -> Result<Arc<Subsys>> {
        let s = crate::state()?;
        let subsys = Subsys::new(name.as_bytes())?;
        s.subsystems.lock().push(subsys.clone(), GFP_KERNEL)?;
        Ok(subsys)
    }

    /// No port links it any more (configfs refuses `rmdir` while a link points to it), so
    /// no controller is left on it: it is only forgotten.
    fn drop_item(_: &Arc<()>, subsys: &Arc<Subsys>) {
        if let Ok(s) = crate::state() {
            s.subsystems.lock().retain(|x| !Arc::ptr_eq(x, subsys));
        }
    }
}

/// `subsystems/<nqn>/`.
pub(crate) struct SubsysDir;

impl Group for SubsysDir {
    type Data = Subsys;
    const OWNER: &'static ThisModule = &crate::THIS_MODULE;
    const TYPE: ItemType<Self> = ItemType::new().with_attrs(&SUBSYS_ATTRS);

    fn defaults(subsys: &Arc<Subsys>, groups: &mut DefaultGroups<'_>) -> Result {
        groups.add::<NamespacesDir>(c_str!("namespaces"), subsys.clone())?;
        groups.add::<AllowedHostsDir>(c_str!("allowed_hosts"), subsys.clone())
    }
}

const SUBSYS_ATTRS: Attrs<SubsysDir, 3> = Attrs::new([
    AttrRef::of::<AttrAllowAnyHost>(),
    AttrRef::of::<AttrSerial>(),
    AttrRef::of::<AttrModel>(),
]);

/// `attr_allow_any_host`: whether every host may connect, or only the allowed ones.
struct AttrAllowAnyHost;

impl Attribute for AttrAllowAnyHost {
    type Kind = SubsysDir;
    const NAME: &'static CStr = c_str!("attr_allow_any_host");

    fn show(subsys: &Subsys, page: &mut Page<'_>) -> Result {
        writeln!(page, "{}", u8::from(subsys.allow_any_host()));
        Ok(())
    }

    fn store(subsys: &Subsys, input: &[u8]) -> Result {
        subsys.set_allow_any_host(boolean("attr_allow_any_host", input)?);
        Ok(())
    }
}

/// `attr_serial`: the serial number Identify shows.
struct AttrSerial;

impl Attribute for AttrSerial {
    type Kind = SubsysDir;
    const NAME: &'static CStr = c_str!("attr_serial");

    fn show(subsys: &Subsys, page: &mut Page<'_>) -> Result {
        page.write_bytes(&subsys.serial()?);
        page.write_bytes(b"\n");
        Ok(())
    }

    fn store(subsys: &Subsys, input: &[u8]) -> Result {
        subsys.set_serial(value(input))
    }
}

/// `attr_model`: the model number Identify shows.
struct AttrModel;

impl Attribute for AttrModel {
    type Kind = SubsysDir;
    const NAME: &'static CStr = c_str!("attr_model");

    fn show(subsys: &Subsys, page: &mut Page<'_>) -> Result {
        page.write_bytes(&subsys.model()?);
        page.write_bytes(b"\n");
        Ok(())
    }

    fn store(subsys: &Subsys, input: &[u8]) -> Result {
        subsys.set_model(value(input))
    }
}

/// `subsystems/<nqn>/namespaces/`: `mkdir namespaces/<nsid>` makes a namespace.
pub(crate) struct NamespacesDir;

impl Group for NamespacesDir {
    type Data = Subsys;
    const OWNER: &'static ThisModule = &crate::THIS_MODULE;
    const TYPE: ItemType<Self> = ItemType::new().with_children();
}

impl Children for NamespacesDir {
    type Child = NsDir;

    fn make(subsys: &Arc<Subsys>, name: &CStr) -> Result<Arc<Ns>> {
        Ns::new(subsys, number("namespace", name)?)
    }

    fn drop_item(subsys: &Arc<Subsys>, ns: &Arc<Ns>) {
        if ns.remove(subsys) {
            ns_changed(ns.nsid, |s| core::ptr::eq(s, &**subsys));
        }
    }
}

/// Namespace `nsid` of the subsystems `which` picks was enabled, disabled or removed: the
/// controllers hear of it (nothing to tell while the module is going).
fn ns_changed(nsid: u32, which: impl Fn(&Subsys) -> bool) {
    if let Ok(s) = crate::state() {
        s.target.ns_changed(nsid, which);
    }
}

/// `subsystems/<nqn>/namespaces/<nsid>/`.
pub(crate) struct NsDir;

impl Group for NsDir {
    type Data = Ns;
    const OWNER: &'static ThisModule = &crate::THIS_MODULE;
    const TYPE: ItemType<Self> = ItemType::new().with_attrs(&NS_ATTRS);
}

const NS_ATTRS: Attrs<NsDir, 3> = Attrs::new([
    AttrRef::of::<NsSize>(),
    AttrRef::of::<NsDeviceUuid>(),
    AttrRef::of::<NsEnable>(),
]);

/// `size`: the namespace's size in bytes, set while it is disabled.
struct NsSize;

impl Attribute for NsSize {
    type Kind = NsDir;
    const NAME: &'static CStr = c_str!("size");

    fn show(ns: &Ns, page: &mut Page<'_>) -> Result {
        writeln!(page, "{}", ns.size());
        Ok(())
    }

    fn store(ns: &Ns, input: &[u8]) -> Result {
        let v = value(input);
        let Some(size) = parse_size(v) else {
            pr_err!("size '{}': bytes, with an optional k, m or g\n", Escaped(v));
            return Err(EINVAL);
        };
        ns.set_size(size)
    }
}

/// `device_uuid`: the namespace's UUID, set while it is disabled.
struct NsDeviceUuid;

/// The text of a UUID: 36 bytes, `8-4-4-4-12` hex digits.
fn parse_uuid(text: &[u8]) -> Option<[u8; 16]> {
    let mut uuid = [0u8; 16];
    let mut digits = text
        .iter()
        .enumerate()
        .filter(|&(i, _)| !matches!(i, 8 | 13 | 18 | 23));
    if text.len() != 36 || [8, 13, 18, 23].iter().any(|&i| text.get(i) != Some(&b'-')) {
        return None;
    }
    for byte in uuid.iter_mut() {
        let hi = char::from(*digits.next()?.1).to_digit(16)?;
        let lo = char::from(*digits.next()?.1).to_digit(16)?;
        // Each is below 16: the byte fits.
        *byte = (hi * 16 + lo) as u8;
    }
    Some(uuid)
}

impl Attribute for NsDeviceUuid {
    type Kind = NsDir;
    const NAME: &'static CStr = c_str!("device_uuid");

    fn show(ns: &Ns, page: &mut Page<'_>) -> Result {
        for (i, b) in ns.uuid().iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                page.write_bytes(b"-");
            }
            write!(page, "{b:02x}");
        }
        page.write_bytes(b"\n");
        Ok(())
    }

    fn store(ns: &Ns, input: &[u8]) -> Result {
        let v = value(input);
        let Some(uuid) = parse_uuid(v) else {
            pr_err!(
                "device_uuid '{}': xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx\n",
                Escaped(v)
            );
            return Err(EINVAL);
        };
        ns.set_uuid(uuid)
    }
}

/// `enable`: 1 serves the namespace (its size set), 0 stops.
struct NsEnable;

impl Attribute for NsEnable {
    type Kind = NsDir;
    const NAME: &'static CStr = c_str!("enable");

    fn show(ns: &Ns, page: &mut Page<'_>) -> Result {
        writeln!(page, "{}", u8::from(ns.enabled()));
        Ok(())
    }

    /// A change is noticed by the controllers of the namespace's subsystem.
    fn store(ns: &Ns, input: &[u8]) -> Result {
        let changed = if boolean("enable", input)? {
            ns.enable()?
        } else {
            ns.disable()
        };
        if changed {
            ns_changed(ns.nsid, |s| s.has(ns));
        }
        Ok(())
    }
}

/// `subsystems/<nqn>/allowed_hosts/`: links to `hosts/<nqn>`, the hosts allowed to connect.
pub(crate) struct AllowedHostsDir;

impl Group for AllowedHostsDir {
    type Data = Subsys;
    const OWNER: &'static ThisModule = &crate::THIS_MODULE;
    const TYPE: ItemType<Self> = ItemType::new().with_links();
}

impl Links for AllowedHostsDir {
    type Target = HostDir;
    const EXPECTED: &'static str = "a host (hosts/<nqn>)";

    fn allow_link(subsys: &Arc<Subsys>, host: &Arc<Host>) -> Result {
        // As nvmet: the list would not be used.
        if subsys.allow_any_host() {
            pr_err!(
                "subsystem {}: allows any host: set attr_allow_any_host to 0 first\n",
                Escaped(subsys.nqn())
            );
            return Err(EINVAL);
        }
        subsys.allow_host(&host.nqn)
    }

    fn drop_link(subsys: &Arc<Subsys>, host: &Arc<Host>) {
        subsys.disallow_host(&host.nqn);
    }
}

/// `hosts/`: `mkdir hosts/<nqn>` names a host.
pub(crate) struct HostsDir;

impl Group for HostsDir {
    type Data = ();
    const OWNER: &'static ThisModule = &crate::THIS_MODULE;
    const TYPE: ItemType<Self> = ItemType::new().with_children();
}

impl Children for HostsDir {
    type Child = HostDir;

    fn make(_: &Arc<()>, name: &CStr) -> Result<Arc<Host>> {
        let text = name.as_bytes();
        if text.len() > NQN_MAX || !text.iter().all(|b| b.is_ascii_graphic()) {
            pr_err!(
                "host '{}': an NQN is 1 to {NQN_MAX} printable characters\n",
                Escaped(text)
            );
            return Err(EINVAL);
        }
        let mut nqn = KVec::with_capacity(text.len(), GFP_KERNEL)?;
        nqn.extend_from_slice(text, GFP_KERNEL)?;
        Ok(Arc::new(Host { nqn }, GFP_KERNEL)?)
    }
}

/// A host: its NQN, which has no model of its own.
pub(crate) struct Host {
    nqn: KVec<u8>,
}

/// `hosts/<nqn>/`.
pub(crate) struct HostDir;

impl Group for HostDir {
    type Data = Host;
    const OWNER: &'static ThisModule = &crate::THIS_MODULE;
    const TYPE: ItemType<Self> = ItemType::new();
}

/// `ports/`: `mkdir ports/<id>` makes a port.
pub(crate) struct PortsDir;

impl Group for PortsDir {
    type Data = ();
    const OWNER: &'static ThisModule = &crate::THIS_MODULE;
    const TYPE: ItemType<Self> = ItemType::new().with_children();
}

impl Children for PortsDir {
    type Child = PortDir;

    fn make(_: &Arc<()>, name: &CStr) -> Result<Arc<Port>> {
        let s = crate::state()?;
        let port = Port::new(&s.target, number("port", name)?)?;
        s.ports.lock().push(port.clone(), GFP_KERNEL)?;
        Ok(port)
    }

    /// Its links are gone (configfs refuses `rmdir` before), so it does not listen; closed
    /// all the same, and forgotten.
    fn drop_item(_: &Arc<()>, port: &Arc<Port>) {
        port.close();
        if let Ok(s) = crate::state() {
            s.ports.lock().retain(|x| !Arc::ptr_eq(x, port));
        }
    }
}

/// `ports/<id>/`.
pub(crate) struct PortDir;

impl Group for PortDir {
    type Data = Port;
    const OWNER: &'static ThisModule = &crate::THIS_MODULE;
    const TYPE: ItemType<Self> = ItemType::new().with_attrs(&PORT_ATTRS);

    fn defaults(port: &Arc<Port>, groups: &mut DefaultGroups<'_>) -> Result {
        groups.add::<PortSubsystemsDir>(c_str!("subsystems"), port.clone())
    }
}

const PORT_ATTRS: Attrs<PortDir, 4> = Attrs::new([
    AttrRef::of::<AddrTraddr>(),
    AttrRef::of::<AddrTrsvcid>(),
    AttrRef::of::<AddrAdrfam>(),
    AttrRef::of::<AddrTrtype>(),
]);

/// A port's address attribute: `$name`, shown by `$show` (the text, from the port's
/// configuration) and stored with `PortConf::$set`.
macro_rules! addr_attr {
    ($(#[$doc:meta])* $ty:ident, $name:literal, $show:expr, $set:ident) => {
        $(#[$doc])*
        struct $ty;

        impl Attribute for $ty {
            type Kind = PortDir;
            const NAME: &'static CStr = c_str!($name);

            fn show(port: &Port, page: &mut Page<'_>) -> Result {
                let show: fn(&PortConf, &mut Page<'_>) -> Result = $show;
                show(&port.conf, page)?;
                page.write_bytes(b"\n");
                Ok(())
            }

            fn store(port: &Port, input: &[u8]) -> Result {
                port.conf.$set(value(input))
            }
        }
    };
}

addr_attr!(
    /// `addr_traddr`: the IP address to listen on.
    AddrTraddr,
    "addr_traddr",
    |c, page| {
        page.write_bytes(&c.traddr()?);
        Ok(())
    },
    set_traddr
);
addr_attr!(
    /// `addr_trsvcid`: the port number to listen on.
    AddrTrsvcid,
    "addr_trsvcid",
    |c, page| {
        page.write_bytes(&c.trsvcid()?);
        Ok(())
    },
    set_trsvcid
);
addr_attr!(
    /// `addr_adrfam`: `ipv4` or `ipv6`.
    AddrAdrfam,
    "addr_adrfam",
    |c, page| {
        page.write_bytes(c.adrfam());
        Ok(())
    },
    set_adrfam
);
addr_attr!(
    /// `addr_trtype`: `rdma`, the only transport served.
    AddrTrtype,
    "addr_trtype",
    |_, page| {
        page.write_bytes(b"rdma");
        Ok(())
    },
    set_trtype
);

/// `ports/<id>/subsystems/`: links to `subsystems/<nqn>`, the subsystems the port serves.
pub(crate) struct PortSubsystemsDir;

impl Group for PortSubsystemsDir {
    type Data = Port;
    const OWNER: &'static ThisModule = &crate::THIS_MODULE;
    const TYPE: ItemType<Self> = ItemType::new().with_links();
}

impl Links for PortSubsystemsDir {
    type Target = SubsysDir;
    const EXPECTED: &'static str = "a subsystem (subsystems/<nqn>)";

    fn allow_link(port: &Arc<Port>, subsys: &Arc<Subsys>) -> Result {
        port.link(subsys)
    }

    fn drop_link(port: &Arc<Port>, subsys: &Arc<Subsys>) {
        port.unlink(subsys);
    }
}
