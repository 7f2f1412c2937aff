#!/usr/bin/env python
"""Run the benchmarks and print a table; writes bench/results.json.

bench/run.py                      every benchmark
bench/run.py overhead pages ...   only those named
"""

import argparse
import datetime
import importlib
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if sys.path and Path(sys.path[0]).resolve() == HERE:
    sys.path.pop(0)  # bench/ itself must not shadow module names
sys.path.insert(0, str(ROOT))

BENCHES = [
    "overhead",
    "throughput",
    "approval",
    "decide",
    "watchloop",
    "pages",
    "history",
    "retention",
    "allowlist",
    "rules",
    "memory",
    "mcp_endpoint",
    "held",
    "toolviews",
    "audit",
    "mcp_lists",
    "apptokens",
    "sandbox",
    "guards",
    "traces",
    "routing",
]


def fmt(value) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.1f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def table(figures) -> str:
    rows = [("benchmark", "figure", "value", "baseline", "target", "result")]
    for f in figures:
        base = f"{fmt(f.baseline)} ({f.baseline_name})" if f.baseline is not None else "-"
        rows.append((f.bench, f.name, f"{fmt(f.value)} {f.unit}", base, f.target or "-", f.status))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for n, r in enumerate(rows):
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def cleanup() -> None:
    """Remove the temporary folders this process made (in-process Django, the migrated
    database template of tests.live)."""
    import shutil

    from bench import common
    from tests import live

    common.django_teardown()
    if live._TEMPLATE is not None:
        shutil.rmtree(live._TEMPLATE.parent, ignore_errors=True)


def other_load() -> float:
    """% of the machine's CPU in use during one second between benchmarks, when nothing of
    ours runs: what other processes take from the figures."""
    import psutil

    return psutil.cpu_percent(interval=1.0)


def run_one(name: str) -> list:
    from bench.common import Figure

    started = time.perf_counter()
    load = other_load()
    busy = (
        f"  (machine busy: {load:.0f}% of its CPUs used by other processes; figures will be noisy)"
        if load > 25
        else ""
    )
    print(f"== {name} ...{busy}", flush=True)
    try:
        figures = importlib.import_module(f"bench.{name}").run()
    except Exception as exc:
        traceback.print_exc()
        figures = [Figure(name, "benchmark failed", None, "", note=f"{type(exc).__name__}: {exc}")]
    for f in figures:
        f.extra = {**f.extra, "other_cpu_percent_at_start": round(load)}
    print(f"== {name} done in {time.perf_counter() - started:.0f} s", flush=True)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "benches",
        nargs="*",
        choices=[[], *BENCHES],
        metavar="BENCH",
        help=f"any of: {', '.join(BENCHES)} (default: all)",
    )
    parser.add_argument("--output", default=str(HERE / "results.json"))
    args = parser.parse_args()
    chosen = args.benches or BENCHES
    started = time.perf_counter()
    when = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    figures = []
    try:
        for name in chosen:
            figures += run_one(name)
    finally:
        cleanup()
    print()
    print(table(figures))
    misses = [f for f in figures if f.status in ("MISS", "ERROR", "N/A")]
    print()
    if misses:
        print("Targets missed (MISS), not measurable (N/A) or failed (ERROR):")
        for f in misses:
            print(
                f"  - {f.status} {f.bench}: {f.name} = {fmt(f.value)} {f.unit} (target {f.target or 'none'})"
                + (f"; {f.note}" if f.note else "")
            )
    else:
        print("Every target met.")
    notes = [f for f in figures if f.note and f not in misses]
    if notes:
        print("\nNotes:")
        for f in notes:
            print(f"  - {f.bench}: {f.name}: {f.note}")
    total = time.perf_counter() - started
    print(f"\nTotal {total:.0f} s. Results in {args.output}")
    Path(args.output).write_text(
        json.dumps(
            {
                "started": when,
                "seconds": round(total, 1),
                "machine": {
                    "cpus": os.cpu_count(),
                    "python": platform.python_version(),
                    "platform": platform.platform(),
                },
                "benches": chosen,
                "figures": [f.as_dict() for f in figures],
                "missed": [f"{f.bench}: {f.name}" for f in misses],
            },
            indent=2,
        )
        + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
