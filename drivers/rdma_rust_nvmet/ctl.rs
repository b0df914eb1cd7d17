// SPDX-License-Identifier: GPL-2.0

//! A test hook: `/sys/kernel/debug/rdma_rust_nvmet/ctl` builds a configuration, one command
//! per write, until the configfs tree replaces it:
//!
//! - `subsys NQN [any]`: a subsystem (allowing any host with `any`);
//! - `host NQN HOSTNQN`: allows a host on it;
//! - `ns NQN NSID BYTES`: an enabled RAM namespace of it;
//! - `port ID ADDR SVCID`: a port (IPv4 or IPv6 by the address);
//! - `link ID NQN`: the subsystem on the port (the first link makes it listen);
//! - `fail ID`: forces the port's QPs into the error state.
//!
//! A malformed command is refused with `EINVAL` and a message.

use crate::config::{Ns, Subsys};
use crate::ctrl::Target;
use crate::port::Port;
use crate::proto::Text;
use kernel::debugfs::command::words;
use kernel::prelude::*;
use kernel::sync::{Arc, Mutex};

fn bad(what: core::fmt::Arguments<'_>) -> Error {
    pr_err!("ctl: {what}\n");
    EINVAL
}

fn number(w: &[u8]) -> Result<u64> {
    core::str::from_utf8(w)
        .ok()
        .and_then(|t| t.parse::<u64>().ok())
        .ok_or_else(|| bad(format_args!("'{}' is not a number", Text(w))))
}

/// Carries out one command.
pub(crate) fn command(
    target: &Arc<Target>,
    ports: &Mutex<KVec<Arc<Port>>>,
    subsystems: &Mutex<KVec<Arc<Subsys>>>,
    input: &[u8],
) -> Result {
    let line = input.strip_suffix(b"\n").unwrap_or(input);
    let mut w: KVec<&[u8]> = KVec::new();
    for word in words(line) {
        w.push(word, GFP_KERNEL)?;
    }
    let find_subsys = |nqn: &[u8]| {
        subsystems
            .lock()
            .iter()
            .find(|s| s.nqn() == nqn)
            .cloned()
            .ok_or_else(|| bad(format_args!("no subsystem {}", Text(nqn))))
    };
    let find_port = |id: u64| {
        ports
            .lock()
            .iter()
            .find(|p| u64::from(p.conf.id) == id)
            .cloned()
            .ok_or_else(|| bad(format_args!("no port {id}")))
    };
    match w.as_slice() {
        [b"subsys", nqn, rest @ ..] => {
            let s = Subsys::new(nqn)?;
            match rest {
                [] => {}
                [b"any"] => s.set_allow_any_host(true),
                _ => return Err(bad(format_args!("subsys NQN [any]"))),
            }
            subsystems.lock().push(s, GFP_KERNEL)?;
        }
        [b"host", nqn, host] => find_subsys(nqn)?.allow_host(host)?,
        [b"ns", nqn, nsid, size] => {
            let s = find_subsys(nqn)?;
            let nsid = u32::try_from(number(nsid)?).map_err(|_| EINVAL)?;
            let ns = Ns::new(&s, nsid)?;
            let enabled = ns.set_size(number(size)?).and_then(|()| ns.enable());
            if let Err(e) = enabled {
                ns.remove(&s);
                return Err(e);
            }
        }
        [b"port", id, addr, svcid] => {
            let id = u16::try_from(number(id)?).map_err(|_| EINVAL)?;
            let p = Port::new(target, id)?;
            p.conf.set_traddr(addr)?;
            p.conf.set_trsvcid(svcid)?;
            if addr.contains(&b':') {
                p.conf.set_adrfam(b"ipv6")?;
            }
            ports.lock().push(p, GFP_KERNEL)?;
        }
        [b"link", id, nqn] => find_port(number(id)?)?.link(&find_subsys(nqn)?)?,
        [b"fail", id] => {
            let n = find_port(number(id)?)?.fail();
            pr_info!("ctl: {n} connections failed\n");
        }
        _ => return Err(bad(format_args!("unknown command '{}'", Text(line)))),
    }
    Ok(())
}
