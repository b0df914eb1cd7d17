// SPDX-License-Identifier: GPL-2.0

//! Every constructor with each of its allocations failing in turn.

use super::*;

extern "C" {
    fn rdma_kunit_fail_nth(n: u32) -> c_int;
    fn rdma_kunit_fail_left() -> u32;
}

/// Marks, in the kernel log, where allocations fail on purpose: the harness accepts the
/// allocator's failure reports (a stack dump after "vmalloc error") only inside.
struct InjectionWindow;

impl InjectionWindow {
    fn open() -> Self {
        pr_info!("rdma_kunit: fault injection: on\n");
        InjectionWindow
    }
}

impl Drop for InjectionWindow {
    fn drop(&mut self) {
        // SAFETY: Disarms fault injection for this task.
        unsafe { rdma_kunit_fail_nth(0) };
        pr_info!("rdma_kunit: fault injection: off\n");
    }
}

/// Runs `build` with its 1st, 2nd, 3rd ... allocation (any fault-injection point of this task)
/// failing, until it passes all of them; after each failure, nothing it built may be left:
/// no RDMA object on the device, and `settled` (e.g. CQ reservations) must hold. Memory is
/// left to kmemleak, which the harness runs after the suites. Returns how many allocations
/// it made.
fn every_failure<T>(
    what: &str,
    mut build: impl FnMut() -> Result<T>,
    settled: impl Fn() -> bool,
) -> Result<u32> {
    let base = res_count()?;
    let _window = InjectionWindow::open();
    for n in 1..=400u32 {
        // SAFETY: Arms fault injection for this task only; disarmed below.
        if unsafe { rdma_kunit_fail_nth(n) } != 0 {
            return Err(ENODEV);
        }
        let built = build();
        // SAFETY: As above.
        let left = unsafe { rdma_kunit_fail_left() };
        // SAFETY: As above.
        unsafe { rdma_kunit_fail_nth(0) };
        let passed = built.is_ok() && left > 0;
        drop(built);
        let now = res_count()?;
        check!(
            now == base,
            "{what}: with allocation {n} failing, {} RDMA objects were left",
            now - base
        );
        check!(
            settled(),
            "{what}: with allocation {n} failing, state was not restored"
        );
        if passed {
            return Ok(n - 1);
        }
    }
    check!(false, "{what}: did not succeed within 400 allocations");
    Err(EINVAL)
}

/// Every constructor, with each of its allocations failing in turn (`fail_nth`), fails
/// cleanly and leaves nothing behind; with none failing it succeeds.
#[no_mangle]
extern "C" fn rdma_kunit_verbs_ctor_failures() -> c_int {
    ret((|| {
        let dev = rxe0()?;
        // SAFETY: Disarmed at once; this only probes for CONFIG_FAULT_INJECTION.
        if unsafe { rdma_kunit_fail_nth(0) } != 0 {
            pr_err!("CONFIG_FAULT_INJECTION is off: cannot inject failures\n");
            return Err(EINVAL);
        }
        let pd = Pd::new(&dev)?;
        let cq = Cq::new(&dev, 256, 0, PollContext::Softirq)?;
        let idle = || cq.free_entries() == cq.entries();
        let always = || true;
        let mut counts = KVec::new();
        let n = every_failure("Pd::new", || Pd::new(&dev), always)?;
        counts.push(n, GFP_KERNEL)?;
        for poll in [PollContext::Softirq, PollContext::Workqueue] {
            let n = every_failure("Cq::new", || Cq::new(&dev, 64, 0, poll), always)?;
            counts.push(n, GFP_KERNEL)?;
        }
        let caps = QpCaps::default();
        let n = every_failure(
            "RC Qp::new + to_init + connect",
            || {
                let a = Qp::new(&pd, QpType::Rc, &cq, &cq, &caps)?.to_init(1, Access::NONE)?;
                let e = a.endpoint()?;
                a.connect(&e, &RcParams::default())
            },
            idle,
        )?;
        counts.push(n, GFP_KERNEL)?;
        let n = every_failure(
            "UD Qp::new + ready_ud + Ah::new",
            || {
                let q = Qp::new(&pd, QpType::Ud, &cq, &cq, &caps)?
                    .to_init_ud(1, 0x1111)?
                    .ready_ud()?;
                let ah = Ah::new(&pd, 1, &q.endpoint()?.gid)?;
                Ok((q, ah))
            },
            idle,
        )?;
        counts.push(n, GFP_KERNEL)?;
        let n = every_failure(
            "Srq::new + Qp::new_with_srq",
            || {
                let srq = Srq::new(&pd, &cq, 32, 1)?;
                let q = Qp::new_with_srq(&pd, QpType::Rc, &cq, &srq, &caps)?;
                Ok((q, srq))
            },
            idle,
        )?;
        counts.push(n, GFP_KERNEL)?;
        let n = every_failure(
            "Mr::new + map",
            || {
                let mut mr = Mr::new(&pd, 4)?;
                mr.map(DmaBuf::new(&pd, 3 * 4096, GFP_KERNEL)?)
                    .map_err(|(e, _)| e)?;
                Ok(mr)
            },
            always,
        )?;
        counts.push(n, GFP_KERNEL)?;
        let n = every_failure(
            "Mr::new + map_sg",
            || {
                let mut mr = Mr::new(&pd, 4)?;
                mr.map_sg(DmaSg::new(&pd, 4)?).map_err(|(e, _)| e)?;
                Ok(mr)
            },
            always,
        )?;
        counts.push(n, GFP_KERNEL)?;
        let n = every_failure("DmaPage::new", || DmaPage::new(&pd), always)?;
        counts.push(n, GFP_KERNEL)?;
        let n = every_failure(
            "EventRegistration::new",
            || EventRegistration::new(&dev, Watch(Events::new()?)),
            always,
        )?;
        counts.push(n, GFP_KERNEL)?;
        pr_info!(
            "rdma_kunit: allocations per constructor (each failed in turn): {:?}\n",
            &counts[..]
        );
        check!(
            counts.iter().all(|&c| c > 0),
            "a constructor made no allocation: the injection did not reach it"
        );
        Ok(())
    })())
}
