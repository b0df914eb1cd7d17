#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Collect the KTAP suites of one or more guest console logs into one KTAP document.

The kernel prints its built-in suites at boot under one KTAP header, and each
module's suites, without a header, when the module loads; the guest's shell
checks print suites of the same form. This script does not interpret results:
it cuts every suite block out of the logs (dropping kernel timestamps and
turning unrelated kernel lines inside a block into KTAP diagnostics), numbers
them under a single header, and adds a failing suite for each thing that must
fail the run but is not itself a KTAP result:

  - an expected suite that never ran (module not loaded, guest died first),
  - a suite cut off before its result line (a crash or a hang),
  - a kernel splat (BUG, WARNING, lockdep, KASAN, Oops, ...) in a log,
  - a guest that did not finish (timeout) or did not shut down cleanly.

tools/testing/kunit/kunit.py (from the kernel tree) parses the result.
"""

import argparse
import os
import re
import sys

TIMESTAMP = re.compile(r'^\[\s*\d+\.\d+\]\s?')
SUITE_START = re.compile(r'^ {4}KTAP version \d+$')
SUBTEST = re.compile(r'^ {4}# Subtest: (\S+)')
SUITE_RESULT = re.compile(r'^(not )?ok \d+ (\S+)(.*)$')
KTAP_LINE = re.compile(r'^ {4,}(KTAP version|# |1\.\.|ok |not ok )')


# Kernel messages that mean the kernel is broken, whatever the tests said: the
# file `splats` beside this one, which the guests' own checks read too.
def read_splats(path):
    """The patterns of a splat list: one a line, '#' comments and blank lines left out."""
    with open(path) as f:
        return [line.rstrip('\n') for line in f if line.strip() and not line.startswith('#')]


SPLATS = [re.compile(p) for p in read_splats(os.path.join(os.path.dirname(__file__), 'splats'))]

# Lines that match a splat pattern but are not one.
NOT_SPLATS = [
    re.compile(p) for p in (
        r'lockdep: Lockdep is enabled', r'Lock dependency validator',
        r'kmemleak: Kernel memory leak detector', r'KernelAddressSanitizer initialized',
    )
]


# Between these markers a test makes allocations fail on purpose (fail_nth);
# the allocator's own report of such a failure (warn_alloc: a stack dump after
# "vmalloc error: size N, ..." or "page allocation failure") is expected there,
# and only there. Every other splat pattern still counts inside the window.
# vmalloc words its report by the step that failed ("vm_struct allocation
# failed", "failed to allocate pages", "failed to allocated page array", ...):
# which one an injected failure hits varies from run to run.
INJECT_ON = re.compile(r'rdma_kunit: fault injection: on')
INJECT_OFF = re.compile(r'rdma_kunit: fault injection: off')
ALLOC_REPORT = re.compile(r'vmalloc error: size \d+, |page allocation failure: ')


def splat_lines(lines):
    """The lines of `lines` that report a kernel splat."""
    out = []
    injecting = False
    last_report = -100
    for i, line in enumerate(lines):
        if INJECT_ON.search(line):
            injecting = True
        elif INJECT_OFF.search(line):
            injecting = False
        if injecting and ALLOC_REPORT.search(line):
            last_report = i
        if not any(p.search(line) for p in SPLATS):
            continue
        if any(p.search(line) for p in NOT_SPLATS):
            continue
        if injecting and line.startswith('Call Trace:') and i - last_report <= 5:
            continue
        out.append(line)
    return out


def clean(line):
    line = line.rstrip('\r\n')
    return TIMESTAMP.sub('', line)


def suite_blocks(lines):
    """Yields (name, lines, verdict) for each suite block in `lines`.

    verdict is 'ok' or 'not ok' as the kernel printed it, or None if the block has no result.
    """
    block = None
    name = None
    for line in lines:
        if SUITE_START.match(line):
            if block is not None:
                yield name, block, None
            block, name = [line], None
            continue
        if block is None:
            continue
        m = SUBTEST.match(line)
        if m and name is None:
            name = m.group(1)
            block.append(line)
            continue
        m = SUITE_RESULT.match(line)
        if m:
            if name is None or m.group(2) == name:
                yield name, block, 'not ok' if m.group(1) else 'ok'
                block = None
                continue
        if KTAP_LINE.match(line):
            block.append(line)
        elif line.strip():
            # A kernel message printed while the suite ran: keep it as a diagnostic.
            block.append('    # log: ' + line.strip())
    if block is not None:
        yield name, block, None


def failing_suite(name, case, reason_lines):
    out = ['    KTAP version 1', f'    # Subtest: {name}', '    1..1']
    out += [f'    # {r}' for r in reason_lines]
    out.append(f'    not ok 1 {case}')
    return name, out, 'fail'


def passing_suite(name, case):
    return name, ['    KTAP version 1', f'    # Subtest: {name}', '    1..1', f'    ok 1 {case}'], 'ok'


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--expect', default='', help='comma-separated suites that must be present')
    ap.add_argument('--guest', action='append', default=[],
                    help='NAME=LOG=STATUS: a guest, its console log, and "ok" or why it failed')
    ap.add_argument('--rename', action='append', default=[],
                    help='GUEST:SUITE=NEW: report SUITE of GUEST as NEW (a suite that runs '
                         'again in another guest, under other conditions)')
    ap.add_argument('--out', required=True)
    args = ap.parse_args()
    renames = {}
    for spec in args.rename:
        where, new = spec.split('=', 1)
        renames[tuple(where.split(':', 1))] = new

    suites = []  # (name, lines, 'ok' | 'fail')
    for spec in args.guest:
        gname, log, status = spec.split('=', 2)
        try:
            with open(log, errors='replace') as f:
                lines = [clean(line) for line in f]
        except OSError as e:
            lines = []
            status = f'no console log: {e}'
        for name, block, verdict in suite_blocks(lines):
            name = name or 'unnamed'
            new = renames.get((gname, name))
            if new:
                block = [f'    # Subtest: {new}' if SUBTEST.match(l) else l for l in block]
                name = new
            if verdict is None:
                block.append('    # the kernel log ended inside this suite (crash or hang)')
                suites.append((name, block, 'fail'))
            else:
                suites.append((name, block, 'ok' if verdict == 'ok' else 'fail'))
        splats = splat_lines(lines)
        if splats:
            suites.append(failing_suite(f'{gname}_kernel_log', 'no_kernel_splats',
                                        ['kernel splat in ' + log + ':'] + splats[:20]))
        else:
            suites.append(passing_suite(f'{gname}_kernel_log', 'no_kernel_splats'))
        if status == 'ok':
            suites.append(passing_suite(f'{gname}_vm', 'completed'))
        else:
            suites.append(failing_suite(f'{gname}_vm', 'completed', [status]))

    present = {s[0] for s in suites}
    for want in filter(None, args.expect.split(',')):
        if want not in present:
            suites.append(failing_suite(want, 'suite_ran', [f'suite {want} did not run']))

    with open(args.out, 'w') as out:
        out.write('KTAP version 1\n')
        out.write(f'1..{len(suites)}\n')
        for i, (name, block, how) in enumerate(suites, 1):
            for line in block:
                out.write(line + '\n')
            out.write(f'{"not ok" if how == "fail" else "ok"} {i} {name}\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
