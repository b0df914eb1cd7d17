#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Turns the `rdmabench:` lines of `make bench` guests into a table, a CSV and a chart.

Usage: bench_report.py --out DIR [--title TEXT] [--pool] LOG...

Each timed run is a line `rdmabench: run case=C side=peer|ulp cfg=G round=R value=V p99=P
msgs=M lost=L cpu_us=U` (see guest-bench.sh). The peer runs a throughput case in several
configurations (cfg: perftest's defaults, a post list, event mode); the report compares the ULP
with the configuration whose median is best (`best_cfg`), and the CPU time per message with the
event mode's, which sleeps as the ULP does. For every case it gives the median and the range of
each side over the rounds, the ratio ULP/peer of the medians, the CPU time per message of each
side, the rounds' own ratios with a confidence interval for their median (see `paired`), and
whether rxe bounds the case (see `rxe_ceiling`). A run that failed or reported 0 is a failure,
never a figure. It writes DIR/bench.csv and, from the size
sweep, DIR/bench.png (throughput against message size, ULP and perftest on one chart). Exits
non-zero when a run failed, a validated run failed, or the guest did not finish.

With --pool, each LOG is a boot of its own (of the same tree) and the report is over the
rounds of all of them: one boot's rounds resolve about 15 % on this host, several boots'
pooled rounds what the interval then shows.
"""

import argparse
import csv
import math
import os
import re
import statistics
import subprocess
import sys

KIND_UNIT = {
    "rate": "msgs/s",
    "bw": "MB/s",
    "lat": "p50 us, half round trip (lower is better)",
    "rt": "round trips/s",
    "iops": "IOPS",
    "blklat": "p50 us per I/O at QD 1 (lower is better)",
}
PEER_TOOL = {
    "rc_send": "ib_send_bw",
    "ud_send": "ib_send_bw -c UD",
    "rc_write": "ib_write_bw",
    "rc_read": "ib_read_bw",
    "lat_send": "ib_send_lat",
    "lat_write": "ib_write_lat",
    "rping": "rping -s/-c",
    "rping_siw": "rping -s/-c on siw0",
    "rc_send_siw": "ib_send_bw -R on siw0",
    "rc_write_siw": "ib_write_bw -R on siw0",
    "rc_read_siw": "ib_read_bw -R on siw0",
    "cross_send": "ib_send_bw",
    "cross_write": "ib_write_bw",
    "nvmf": "nvmet-rdma (fio)",
    "nvmh": "nvme-rdma host (fio)",
    "nvmp": "nvme-rdma + nvmet-rdma (fio)",
}
# A case is bounded by rxe when the faster side reaches this share of what rxe alone
# allows for its message size (see rxe_ceiling), and is not above it by more than the noise:
# a case NOISE above its ceiling shows the ceiling was not the limit.
BOUND_SHARE = 0.85
# What one boot's rounds resolve on this host (see --pool).
NOISE = 0.15
# The peer's configurations (guest-bench.sh peer_cfgs), as perftest's arguments.
CFG_ARGS = {"base": "", "list": "-l 8", "event": "-l 8 -e"}

LINE = re.compile(r"rdmabench: (\w+)(.*)")


def fields(rest):
    return dict(kv.split("=", 1) for kv in rest.split() if "=" in kv)


def parse(logs, pool=False):
    runs, other, failures = {}, [], []
    order, ended = [], 0
    for boot, path in enumerate(logs):
        with open(path, errors="replace") as f:
            for line in f:
                m = LINE.search(line)
                if not m:
                    continue
                what, rest = m.group(1), m.group(2).strip()
                kv = fields(rest)
                if pool and "round" in kv:
                    kv["round"] = f"{boot}:{kv['round']}"
                if what == "run":
                    key = kv["case"]
                    if key not in runs:
                        runs[key] = {"peer": [], "ulp": []}
                        order.append(key)
                    kv.setdefault("cfg", "base" if kv["side"] == "peer" else "-")
                    if not float(kv.get("value", "0")) > 0:
                        failures.append(f"run reported no figure (0): {rest}")
                        continue
                    runs[key][kv["side"]].append(kv)
                elif what == "cpu":
                    cfg = kv.get("cfg", "base" if kv["side"] == "peer" else "-")
                    cpu_extra[(kv["case"], kv["side"], cfg, kv["round"])] = int(kv["ticks"])
                elif what == "fail":
                    failures.append(f"run failed: {rest}")
                elif what == "check" and " ok " not in f" {rest} ":
                    failures.append(f"validated run failed: {rest}")
                elif what == "end":
                    ended += 1
                elif what == "case":
                    meta[kv["case"]] = kv
                other.append((what, rest, kv))
    return runs, order, other, failures, ended


meta = {}
# CPU ticks (USER_HZ) of the other guest of a two-guest run, by (case, side, cfg, round).
cpu_extra = {}


def add_other_guest_cpu(runs):
    """A two-guest run's CPU time is both guests': the sender's line has its own, the
    other guest's `cpu` line the rest."""
    for name, sides in runs.items():
        for side, rs in sides.items():
            for r in rs:
                ticks = cpu_extra.get((name, side, r["cfg"], r["round"]))
                if ticks is not None:
                    r["cpu_us"] = str(float(r["cpu_us"]) + ticks * 10000 / float(r["msgs"]))


def stats(rs, key="value"):
    v = [float(r[key]) for r in rs]
    if not v:
        return None
    return statistics.median(v), min(v), max(v)


def paired(sides):
    """The ratio ULP/peer of each round (each side's median within the round: the latency
    cases run several times a round), sorted. A round is a pair run back to back, so drift
    that spans the rounds cancels out of its ratio, which the ratio of the medians keeps."""
    by_round = {}
    for side in ("peer", "ulp"):
        for r in sides[side]:
            by_round.setdefault(r["round"], {}).setdefault(side, []).append(float(r["value"]))
    ratios = []
    for got in by_round.values():
        if "peer" in got and "ulp" in got and statistics.median(got["peer"]) > 0:
            ratios.append(statistics.median(got["ulp"]) / statistics.median(got["peer"]))
    return sorted(ratios)


# The coverage a median's interval must reach for a verdict.
COVERAGE = 0.95


def median_interval(xs):
    """A distribution-free interval for the median of xs (the sign test's): the k-th smallest
    and the k-th largest value cover it with probability 1 - 2 P(B < k), B ~ Binomial(n, 1/2).
    Returns (low, high, coverage) for the narrowest such interval that still reaches
    COVERAGE, or (min, max, its coverage) when none does (fewer than 6 rounds)."""
    n = len(xs)
    if n == 0:
        return None

    def coverage(k):
        return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2**n

    k = 1
    while k + 1 <= (n + 1) // 2 and coverage(k + 1) >= COVERAGE:
        k += 1
    return xs[k - 1], xs[n - k], coverage(k)


def verdict(kind, interval):
    """Which side the rounds' ratios say is ahead, if their interval resolves it."""
    if not interval or interval[2] < COVERAGE:
        return "-"
    low, high, _ = interval
    lower_is_better = kind in ("lat", "blklat")
    if (high < 1) if lower_is_better else (low > 1):
        return "ULP ahead"
    if (low > 1) if lower_is_better else (high < 1):
        return "peer ahead"
    return "tie"


def case_kind(name):
    return meta.get(name, {}).get("kind", "bw")


def case_size(name):
    return int(meta.get(name, {}).get("size", "0"))


def case_op(name):
    return meta.get(name, {}).get("op", "")


def lower_is_better(kind):
    return kind in ("lat", "blklat")


def by_cfg(rs):
    """A side's runs by configuration, in the order first seen."""
    out = {}
    for r in rs:
        out.setdefault(r["cfg"], []).append(r)
    return out


def best_cfg(kind, peer_runs):
    """The peer's configuration whose median is best, and its runs: what the ULP is compared
    with, so that the peer runs at its best, not at its defaults."""
    cfgs = by_cfg(peer_runs)
    if not cfgs:
        return None, []
    pick = min if lower_is_better(kind) else max
    cfg = pick(cfgs, key=lambda c: statistics.median(float(r["value"]) for r in cfgs[c]))
    return cfg, cfgs[cfg]


def rxe_ceiling(name, floors):
    """What rxe allows for a case, in the case's unit: the lower of its message rate for
    the op (1-byte messages, where bytes cost nothing) and its byte rate for the op (1 MiB
    messages, where the per-message work is negligible; UD: RC SEND's) at the case's size.
    Each floor is the better of the two sides' figures, both measured in the same boot. rxe's
    requester, responder and completer run as separate tasks on the guest's CPUs, so a
    stream of messages is held to the slower of the two limits, not to their sum. The
    message rate includes the cheapest side's own work per message: at small sizes the bound
    is "rxe plus the least a consumer can do", which is what either side can reach. None
    where no floor applies; else (ceiling, which side's which floor set it)."""
    op, kind, size = case_op(name), case_kind(name), case_size(name)
    msg = {"rc_send": "rc_send_1B", "rc_write": "rc_write_1B", "rc_read": "rc_read_1B",
           "ud_send": "ud_send_1B"}.get(op)
    per_byte = {"rc_send": "rc_send_1M", "rc_write": "rc_write_1M", "rc_read": "rc_read_1M",
                "ud_send": "rc_send_1M"}.get(op)
    if kind not in ("rate", "bw") or msg not in floors or per_byte not in floors or not size:
        return None
    by_msg, by_byte = best(floors[msg]), best(floors[per_byte])
    rate, src = min((by_msg[0], f"{by_msg[1]} {msg}"),
                    (by_byte[0] * 1e6 / size, f"{by_byte[1]} {per_byte}"))
    return (rate if kind == "rate" else rate * size / 1e6), src


TOOL_NAME = {"ulp": "ULP", "peer": "perftest"}


def best(by_tool):
    """The best figure of a floor, and whose it is."""
    tool = max(by_tool, key=by_tool.get)
    return by_tool[tool], TOOL_NAME.get(tool, tool)


def bound_text(share, src):
    """Whether rxe bounds a case whose faster side reaches `share` of its ceiling."""
    if share < BOUND_SHARE:
        return f"no ({share:.0%})"
    if share > 1 + NOISE:
        return f"no: above it ({share:.0%})"
    return f"rxe ({share:.0%} of {src})"


SECTION_TITLE = {
    0: "One guest, QP pairs on rxe0 (loopback):",
    2: "Two guests, one RoCE host each (a serves, b sends):",
    3: "NVMe over Fabrics on rxe0 (loopback): the nvme-rdma host against rdma_rust_nvmet (ULP) "
       "and nvmet-rdma (peer), fio on both, IOPS / MB/s and CPU us per I/O:",
    4: "NVMe over Fabrics hosts on rxe0 (loopback): rdma_rust_nvme (ULP) and the nvme-rdma host "
       "(peer), both against nvmet-rdma, fio on both, IOPS / MB/s and CPU us per I/O:",
    5: "NVMe over Fabrics pairs on rxe0 (loopback): rdma_rust_nvme + rdma_rust_nvmet (ULP) "
       "against nvme-rdma + nvmet-rdma (peer), fio on both, IOPS / MB/s and CPU us per I/O:",
}


def section(name):
    """The table's sections: one-guest verbs cases, the block cases, two-guest cases."""
    if name.startswith("nvmf_"):
        return 3
    if name.startswith("nvmh_"):
        return 4
    if name.startswith("nvmp_"):
        return 5
    return 2 if name.startswith("cross_") else 0


def fmt(x):
    if x is None:
        return "-"
    if x >= 1000:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def interval_text(r):
    i = r["interval"]
    if not i:
        return "-"
    return f"{r['paired']:.2f} ({i[0]:.2f}-{i[1]:.2f}, {i[2]:.0%})"


def cpu_text(r):
    """The peer's CPU per message: in event mode, with the busy-polling post list's beside it;
    "(busy)" where perftest has no event mode (WRITE)."""
    if r["peer_busy_cpu"] is None:
        return fmt(r["peer_cpu"])
    if r["peer_cpu_cfg"] != "event":
        return f"{fmt(r['peer_cpu'])} (busy)"
    return f"{fmt(r['peer_cpu'])}; {fmt(r['peer_busy_cpu'])}"


def rng(s):
    return f"{fmt(s[0])} ({fmt(s[1])}-{fmt(s[2])})" if s else "-"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default="make bench")
    ap.add_argument("--expect-guests", type=int, default=1)
    ap.add_argument("--pool", action="store_true",
                    help="each log is a boot of its own: pool their rounds")
    ap.add_argument("logs", nargs="+")
    a = ap.parse_args()
    runs, order, other, failures, ended = parse(a.logs, a.pool)
    add_other_guest_cpu(runs)
    floors = {}
    for what, rest, kv in other:
        if what == "floor":
            val = kv.get("msgs_per_s") or kv.get("MB_per_s")
            tools = floors.setdefault(kv["what"], {})
            tool = kv.get("tool", "ulp")
            tools[tool] = max(tools.get(tool, 0.0), float(val))

    rows, cfg_notes, loss_notes = [], [], []
    for name in order:
        kind = case_kind(name)
        cfg, peer_runs = best_cfg(kind, runs[name]["peer"])
        cfgs = by_cfg(runs[name]["peer"])
        peer, ulp = stats(peer_runs), stats(runs[name]["ulp"])
        ratio = ulp[0] / peer[0] if peer and ulp and peer[0] else None
        ratios = paired({"peer": peer_runs, "ulp": runs[name]["ulp"]})
        interval = median_interval(ratios)
        # CPU: against the peer in event mode, which sleeps as the ULP does; the busy-polling
        # figure (the post list's) beside it.
        cpu_cfg = "event" if "event" in cfgs else cfg
        pcpu = stats(cfgs.get(cpu_cfg, []), "cpu_us")
        busy = stats(cfgs["list"], "cpu_us") if "list" in cfgs else None
        ucpu = stats(runs[name]["ulp"], "cpu_us")
        p99p, p99u = stats(peer_runs, "p99"), stats(runs[name]["ulp"], "p99")
        ceiling = rxe_ceiling(name, floors)
        bound = "-"
        if ceiling and peer and ulp:
            bound = bound_text(max(peer[0], ulp[0]) / ceiling[0], ceiling[1])
        if len(cfgs) > 1:
            cfg_notes.append(f"{name}: " + "; ".join(
                f"{(PEER_TOOL.get(case_op(name), '?') + ' ' + CFG_ARGS.get(c, c)).strip()} "
                f"{fmt(statistics.median(float(r['value']) for r in rs))}"
                + (" (best)" if c == cfg else "") for c, rs in cfgs.items()))
        if case_op(name) == "ud_send":
            for side, rs in (("ULP", runs[name]["ulp"]), ("perftest", peer_runs)):
                lost = sum(int(r.get("lost", "0")) for r in rs)
                got = sum(int(r["msgs"]) for r in rs)
                if got + lost:
                    loss_notes.append(f"{name}: {side} lost {lost:,} of {got + lost:,} datagrams "
                                      f"({lost / (got + lost):.2%}) over {len(rs)} timed runs")
        label = PEER_TOOL.get(case_op(name), "?")
        if cfg and CFG_ARGS.get(cfg):
            label += " " + CFG_ARGS[cfg]
        rows.append({
            "case": name, "kind": kind, "unit": KIND_UNIT[kind],
            "size": case_size(name), "peer": label,
            "peer_s": peer, "ulp_s": ulp, "ratio": ratio,
            "peer_cpu": pcpu[0] if pcpu else None, "ulp_cpu": ucpu[0] if ucpu else None,
            "peer_busy_cpu": busy[0] if busy else None, "peer_cpu_cfg": cpu_cfg,
            "peer_p99": p99p[0] if p99p else None, "ulp_p99": p99u[0] if p99u else None,
            "ceiling": ceiling[0] if ceiling else None, "bound": bound,
            "rounds": len(runs[name]["ulp"]),
            "paired": statistics.median(ratios) if ratios else None, "interval": interval,
            "verdict": verdict(kind, interval),
        })

    os.makedirs(a.out, exist_ok=True)
    head = ["case", "unit", "peer", "peer figure (median, min-max)",
            "ULP figure (median, min-max)", "ratio ULP/peer", "rounds' ratios (median, interval)",
            "verdict", "CPU us/msg peer (-e; busy)", "CPU us/msg ULP", "rxe bound"]
    table = [head]
    for r in sorted(rows, key=lambda r: section(r["case"])):
        peer_fig, ulp_fig = rng(r["peer_s"]), rng(r["ulp_s"])
        if r["kind"] in ("lat", "blklat"):
            peer_fig += f" p99 {fmt(r['peer_p99'])}"
            ulp_fig += f" p99 {fmt(r['ulp_p99'])}"
        table.append([r["case"], r["unit"], r["peer"], peer_fig, ulp_fig,
                      f"{r['ratio']:.2f}" if r["ratio"] else "-", interval_text(r),
                      r["verdict"], cpu_text(r),
                      fmt(r["ulp_cpu"]), r["bound"]])
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    head_lines = [" | ".join(c.ljust(w) for c, w in zip(head, widths)).rstrip(),
                  "-+-".join("-" * w for w in widths)]
    lines = [a.title]
    for i, row in enumerate(table[1:]):
        if i == 0 or section(row[0]) != section(table[i][0]):
            lines += ["", SECTION_TITLE[section(row[0])], *head_lines]
        lines.append(" | ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    if len(table) == 1:
        lines += ["", *head_lines]
    lines.append("")
    lines.append("Rounds' ratios: each round runs both sides back to back; the median of the "
                 "rounds' ratios ULP/peer, and the interval that holds the true median with the "
                 "probability given (sign test). The verdict names a side only when the interval "
                 f"reaches {COVERAGE:.0%} and stays on one side of 1 (fewer than 6 rounds "
                 "cannot: -); \"tie\" means the rounds do not resolve a difference. The peer "
                 "column names perftest's best configuration of the case (of its defaults, "
                 "a post list of 8, and a post list with -e), the one the ratios are against; "
                 "CPU per message: the peer in event mode (-e), which sleeps on CQ events as "
                 "the ULP does, then busy-polling with the post list; each side's fixed costs "
                 "(a 16-message run of the same side) subtracted.")
    if cfg_notes:
        lines.append("")
        lines.append("The peer's configurations (medians):")
        lines += [f"  {n}" for n in cfg_notes]
    if loss_notes:
        lines.append("")
        lines.append("UD losses (the figures count the datagrams that arrived; perftest's "
                     "receiver fails its run on a loss):")
        lines += [f"  {n}" for n in loss_notes]
    if floors:
        lines.append("")
        lines.append("What rxe allows (same boot; a case is bounded when the faster side "
                     f"reaches {BOUND_SHARE:.0%} of the lower of its op's two limits at its size "
                     f"and is not more than the noise ({NOISE:.0%}) above it: then the limit was "
                     "not rxe's; the column names whose floor set the limit), message rate at "
                     "1 B and byte rate at 1 MiB, ULP / perftest (the better of its configurations):")
        for k, by_tool in floors.items():
            unit = " MB/s" if k.endswith("1M") else " msgs/s"
            lines.append(f"  {k}: " + " / ".join(
                fmt(by_tool[t]) + unit if t in by_tool else "-" for t in ("ulp", "peer")))
    for what, rest, kv in other:
        if what in ("alloc", "check", "start", "resources", "note"):
            lines.append(f"{what}: {rest}")
    for f in failures:
        lines.append(f"FAILED: {f}")
    if ended < a.expect_guests:
        failures.append(f"{a.expect_guests - ended} guest(s) did not finish the bench")
        lines.append(f"FAILED: {failures[-1]}")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(a.out, "bench.txt"), "w") as f:
        f.write(text)
    sys.stdout.write(text)

    with open(os.path.join(a.out, "bench.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["case", "kind", "unit", "size", "peer", "rounds",
                    "peer_median", "peer_min", "peer_max", "ulp_median", "ulp_min", "ulp_max",
                    "ratio_ulp_peer", "round_ratio_median", "round_ratio_low",
                    "round_ratio_high", "round_ratio_coverage", "verdict", "peer_cpu_us_per_msg",
                    "peer_busy_cpu_us_per_msg", "ulp_cpu_us_per_msg",
                    "peer_p99", "ulp_p99", "rxe_ceiling", "rxe_bound"])
        for r in rows:
            p, u = r["peer_s"] or (None,) * 3, r["ulp_s"] or (None,) * 3
            w.writerow([r["case"], r["kind"], r["unit"], r["size"], r["peer"], r["rounds"],
                        *p, *u, r["ratio"], r["paired"], *(r["interval"] or (None,) * 3),
                        r["verdict"], r["peer_cpu"], r["peer_busy_cpu"] or "", r["ulp_cpu"],
                        r["peer_p99"] if r["kind"] in ("lat", "blklat") else "",
                        r["ulp_p99"] if r["kind"] in ("lat", "blklat") else "",
                        r["ceiling"] or "", r["bound"]])
    chart(rows, a.out, a.title)
    print(f"table: {os.path.join(a.out, 'bench.txt')}\ncsv: {os.path.join(a.out, 'bench.csv')}")
    if os.path.exists(os.path.join(a.out, "bench.png")):
        print(f"chart: {os.path.join(a.out, 'bench.png')}")
    return 1 if failures else 0


def chart(rows, out, title):
    """Throughput against message size for SEND and WRITE, ULP and perftest (gnuplot)."""
    series = {}
    for r in rows:
        if r["kind"] not in ("bw", "rate") or case_op(r["case"]) not in ("rc_send", "rc_write"):
            continue
        op = case_op(r["case"])[3:]
        # A message rate (64 B SEND) is drawn as MB/s like the rest.
        scale = r["size"] / 1e6 if r["kind"] == "rate" else 1.0
        for side, tool in (("ulp_s", "ULP"), ("peer_s", "perftest")):
            if r[side]:
                series.setdefault(f"{tool} {op.upper()}", []).append(
                    (r["size"], r[side][0] * scale))
    if not series:
        return
    dat = os.path.join(out, "bench-sweep.dat")
    with open(dat, "w") as f:
        for name, pts in series.items():
            f.write(f'"{name}"\n')
            for size, v in sorted(pts):
                f.write(f"{size} {v}\n")
            f.write("\n\n")
    styles = {"ULP SEND": "lc rgb '#1f77b4' dt 1", "perftest SEND": "lc rgb '#1f77b4' dt 2",
              "ULP WRITE": "lc rgb '#d62728' dt 1", "perftest WRITE": "lc rgb '#d62728' dt 2"}
    plots = ", ".join(
        f"'{dat}' index {i} using 1:2 with linespoints lw 2 pt 7 {styles.get(n, '')} title '{n}'"
        for i, n in enumerate(series))
    script = f"""
set terminal pngcairo size 900,560 font 'sans,10'
set output '{os.path.join(out, "bench.png")}'
set title '{title}: throughput against message size (rxe0 loopback)'
set logscale x 2
set logscale y 10
set xlabel 'message size (bytes)'
set ylabel 'MB/s (10^6 bytes/s)'
set xtics ('64' 64, '256' 256, '1K' 1024, '4K' 4096, '16K' 16384, '64K' 65536, '256K' 262144, '1M' 1048576)
set grid
set key left top
plot {plots}
"""
    try:
        subprocess.run(["gnuplot"], input=script, text=True, check=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        print(f"chart not drawn: {e}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
