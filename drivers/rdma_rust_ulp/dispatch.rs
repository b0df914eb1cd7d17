// SPDX-License-Identifier: GPL-2.0

//! The commands of the control file ([`crate::ctl`]), carried out on the registry.

use crate::cm;
use crate::ctl::{self, Command, ShowEndpoint, Spec, Target};
use crate::registry::Ulp;
use crate::run::Run;
use kernel::debugfs::command::Escaped;
use kernel::prelude::*;
use kernel::rdma::device::Device;
use kernel::sync::Arc;

/// How long a `wait` waits for one run, in ms.
const WAIT_MS: u32 = 300_000;

/// The runs `t` names; `EINVAL` if it names a run that does not exist.
fn runs_of(u: &Ulp, t: Target) -> Result<KVec<Arc<Run>>> {
    let mut out = KVec::new();
    for r in u.all_runs()? {
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

/// Run `id`.
fn one(u: &Ulp, id: u32) -> Result<Arc<Run>> {
    runs_of(u, Target::Id(id))?.into_iter().next().ok_or(EINVAL)
}

/// `start`: builds a run and starts it (and with `wait=1` or `poll=direct` waits for its end).
fn start(u: &Ulp, spec: Spec) -> Result {
    u.reap()?;
    let active = u.all_runs()?.iter().filter(|r| r.active()).count();
    if active >= u.max_runs() as usize {
        pr_err!(
            "start: {active} runs in flight (max_runs={})\n",
            u.max_runs()
        );
        return Err(EBUSY);
    }
    let id = u.next_id();
    let (run, name) = if spec.cm {
        let attach = |dev: &Device, run: &Arc<Run>| -> Result {
            let ud = u.find(dev.name().as_bytes()).ok_or(ENODEV)?;
            u.attach(&ud, run)
        };
        let run = cm::start(&spec, id, &attach)
            .inspect_err(|e| pr_err!("start: run {id} ({}) failed: {e:?}\n", spec.addr))?;
        (run, None)
    } else {
        let Some(ud) = u.find(spec.dev()) else {
            pr_err!("start: no RDMA device '{}'\n", Escaped(spec.dev()));
            return Err(ENODEV);
        };
        let run = Run::build(ud.device(), &spec, id).inspect_err(|e| {
            pr_err!(
                "start: run {id} on {} could not be built: {e:?}\n",
                ud.name()
            );
        })?;
        if let Err(e) = u.attach(&ud, &run) {
            run.finish();
            return Err(e);
        }
        if let Err(e) = run.go() {
            run.stop();
            run.finish();
            pr_err!("start: run {id} could not post: {e:?}\n");
            return Err(e);
        }
        (run, Some(*ud.name()))
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

/// Carries out `cmd` (process context: it may wait for runs).
pub(crate) fn command(u: &Ulp, cmd: Command) -> Result {
    match cmd {
        Command::Start(spec) => start(u, spec),
        Command::Stop(t) => {
            for r in runs_of(u, t)? {
                r.stop();
                r.finish();
            }
            Ok(())
        }
        Command::Wait(t) => {
            for r in runs_of(u, t)? {
                if let Err(e) = r.wait_ended(WAIT_MS) {
                    pr_err!("wait: run {} did not end in {} s\n", r.id, WAIT_MS / 1000);
                    return Err(e);
                }
                r.finish();
            }
            Ok(())
        }
        Command::Connect(id, peer) => one(u, id)?.connect(&peer),
        Command::Go(id, remote) => one(u, id)?.release(remote),
        Command::Fail(t) => {
            for r in runs_of(u, t)? {
                r.fail()?;
            }
            Ok(())
        }
        Command::Clear => {
            u.forget_ended();
            Ok(())
        }
    }
}
