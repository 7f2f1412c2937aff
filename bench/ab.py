#!/usr/bin/env python
"""Same-run A/B of the call path: this tree (HEAD) against another commit (BASE).

    make bench-ab BASE=<commit> [CYCLES=3]
    .venv/bin/python bench/ab.py <commit> [--cycles 3] [--benches overhead throughput ...]

On this shared machine a figure means something only against another taken in the same minutes,
so the two builds are run alternately: each cycle runs `bench/run.py` with the call-path
benchmarks once in each tree, the order swapped every cycle so that a trend in the machine's load
favours neither. BASE is built from a clean checkout: a temporary `git worktree` with its own
`.venv` made by BASE's own `make setup` (pip, BASE's requirements files). The servers' venv and
node_modules are linked from this tree when BASE pins the same servers (the same
`requirements-time.txt` and `package-lock.json`), else BASE's `make setup-test` installs its own.

Printed: per figure, each side's median, and the median of the per-cycle difference
(HEAD - BASE) and ratio (HEAD / BASE) with their range over the cycles (min..max). Each run's
own results.json, and the table, go to `bench/ab-results.json`.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if sys.path and Path(sys.path[0]).resolve() == HERE:
    sys.path.pop(0)  # bench/ itself must not shadow module names
sys.path.insert(0, str(ROOT))

from bench.run import fmt  # noqa: E402  (after the path is set, as run.py's own imports)

CALL_PATH = ["overhead", "throughput", "mcp_endpoint"]
SERVER_PINS = ("requirements-time.txt", "package-lock.json")


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True).stdout


def servers_dir(tree: Path) -> Path:
    """Where a tree keeps its test servers' pins and node_modules (older trees: `servers/`)."""
    for rel in ("tests/servers", "servers"):
        if (tree / rel / "package-lock.json").exists():
            return tree / rel
    raise SystemExit(f"no servers' package-lock.json under {tree}")


def build(base: str, tree: Path) -> None:
    """BASE checked out at `tree` and set up as a clean clone would be."""
    git("worktree", "add", "--detach", str(tree), base)
    subprocess.run(["make", "-s", "-C", str(tree), "setup"], check=True)
    mine, theirs = servers_dir(ROOT), servers_dir(tree)
    if all((mine / pin).read_bytes() == (theirs / pin).read_bytes() for pin in SERVER_PINS):
        (tree / ".venv-servers").symlink_to((ROOT / ".venv-servers").resolve())
        (theirs / "node_modules").symlink_to((mine / "node_modules").resolve())
        print(f"BASE pins the same test servers: their venv and node_modules are this tree's ({mine})")
    else:
        print("BASE pins other test servers: installing its own")
        subprocess.run(["make", "-s", "-C", str(tree), "setup-test"], check=True)


def run_side(tree: Path, benches: list[str], out: Path, log: Path) -> dict[str, dict]:
    """One `bench/run.py` of `benches` in `tree` (its own venv); its figures by key."""
    python = tree / ".venv" / "bin" / "python"
    with log.open("w") as sink:
        done = subprocess.run(
            [str(python), str(tree / "bench" / "run.py"), *benches, "--output", str(out)],
            cwd=tree,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    if done.returncode != 0 or not out.exists():
        print(log.read_text()[-3000:])
        raise SystemExit(f"bench/run.py failed in {tree} (exit {done.returncode}); its output: {log}")
    figures = json.loads(out.read_text())["figures"]
    return {key(f): f for f in figures if f["value"] is not None and f.get("valid", True)}


def key(figure: dict) -> str:
    # A rate's name carries its run's error count ("calls/s, 8 clients (0 errors)").
    return f"{figure['bench']}: {re.sub(r' \(\d+ errors?\)', '', figure['name'])}"


def spread(values: list[float]) -> str:
    return f"{fmt(statistics.median(values))} ({fmt(min(values))}..{fmt(max(values))})"


def compare(runs: dict[str, list[dict]]) -> list[tuple[str, ...]]:
    """Rows of the table: per figure both medians, and the per-cycle difference and ratio."""
    head, base = runs["HEAD"], runs["BASE"]
    names = list(dict.fromkeys(k for cycle in head + base for k in cycle))
    rows = [("figure", "unit", "HEAD", "BASE", "HEAD - BASE (min..max)", "HEAD / BASE (min..max)", "n")]
    for name in names:
        pairs = [
            (h[name]["value"], b[name]["value"])
            for h, b in zip(head, base, strict=True)
            if name in h and name in b
        ]
        if not pairs:
            rows.append((name, "", "-", "-", "only one side has it", "", "0"))
            continue
        unit = next(c[name]["unit"] for c in head + base if name in c)
        ratios = [h / b for h, b in pairs if b]
        rows.append(
            (
                name,
                unit,
                fmt(statistics.median(h for h, _ in pairs)),
                fmt(statistics.median(b for _, b in pairs)),
                spread([h - b for h, b in pairs]),
                spread(ratios) if ratios else "-",
                str(len(pairs)),
            )
        )
    return rows


def table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("base", help="the commit to compare against (any name git takes)")
    parser.add_argument("--cycles", type=int, default=3, help="HEAD/BASE pairs (at least 3)")
    parser.add_argument("--benches", nargs="+", default=CALL_PATH, help=f"default: {' '.join(CALL_PATH)}")
    parser.add_argument("--output", default=str(HERE / "ab-results.json"))
    args = parser.parse_args()
    if args.cycles < 3:
        parser.error("--cycles: at least 3 (one pair says nothing on a shared machine)")
    base = git("rev-parse", "--verify", f"{args.base}^{{commit}}").strip()
    head = git("rev-parse", "HEAD").strip()
    dirty = bool(git("status", "--porcelain", "--untracked-files=no").strip())
    work = Path(tempfile.mkdtemp(prefix="agenvoy-bench-ab-"))
    tree = work / "base"
    trees = {"HEAD": ROOT, "BASE": tree}
    runs: dict[str, list[dict]] = {"HEAD": [], "BASE": []}
    started = time.perf_counter()
    try:
        print(f"BASE {base[:12]}: building in {tree}", flush=True)
        build(base, tree)
        for cycle in range(args.cycles):
            order = ("HEAD", "BASE") if cycle % 2 == 0 else ("BASE", "HEAD")
            for side in order:
                began = time.perf_counter()
                out, log = work / f"{side}-{cycle + 1}.json", work / f"{side}-{cycle + 1}.log"
                runs[side].append(run_side(trees[side], args.benches, out, log))
                took = time.perf_counter() - began
                print(f"cycle {cycle + 1}/{args.cycles}: {side} done in {took:.0f} s", flush=True)
    finally:
        if os.environ.get("BENCH_AB_KEEP"):
            print(f"kept: {work} (remove with: git worktree remove --force {tree})")
        else:
            # The links to this tree's servers go first: nothing of theirs is removed with BASE.
            for link in (
                tree / ".venv-servers",
                tree / "tests/servers/node_modules",
                tree / "servers/node_modules",
            ):
                if link.is_symlink():
                    link.unlink()
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
            shutil.rmtree(work, ignore_errors=True)
    rows = compare(runs)
    print()
    print(f"HEAD {head[:12]}{' (with uncommitted changes)' if dirty else ''} against BASE {base[:12]},")
    print(f"{args.cycles} cycles of {' '.join(args.benches)}, alternating; medians over the cycles:")
    print()
    print(table(rows))
    print(f"\nTotal {time.perf_counter() - started:.0f} s. Results in {args.output}")
    Path(args.output).write_text(
        json.dumps(
            {
                "head": head,
                "dirty": dirty,
                "base": base,
                "benches": args.benches,
                "runs": runs,
                "table": rows,
            },
            indent=2,
        )
        + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
