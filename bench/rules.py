"""7. Argument rules: `rules.RuleSet.check` with 10,000 rules (SPEC 14.2), as the gate runs it
on every call: a call that a rule with argument globs decides, a call under a server-wide rule,
and a call no rule covers, against the allow-list check of the same call (the check every call
already pays). Also the cost of building the set, paid once per change of the file."""

import time

from bench.common import Figure, ms

NAME = "rules"
RULES = 10_000
CHECKS = 20_000
TARGET_US = 20.0


def rule_lines() -> list[str]:
    """9,000 rules on 3,000 tools of 300 servers (argument globs, three decisions), 900
    server-wide rules and 100 rules on other prefixes."""
    lines = []
    for i in range(3_000):
        tool = f"mcp__srv{i % 300:03d}__tool_{i // 300:02d}"
        lines.append(f"deny {tool}(path:/etc/*)")
        lines.append(f"ask {tool}(path:/home/*/secret?, mode:w*)")
        lines.append(f"allow {tool}(path:/srv/docs/*)")
    lines += [f"ask mcp__grant{i:03d}__*" for i in range(900)]
    lines += [f"deny mcp__srv{i % 300:03d}__danger_{i:03d}*" for i in range(100)]
    return lines


def per_check(fn, cases: list[tuple[str, dict]]) -> float:
    """Seconds per call over the cases (best of 5 passes)."""
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for name, args in cases:
            fn(name, args)
        best = min(best, (time.perf_counter() - t) / len(cases))
    return best


def run() -> list[Figure]:
    from mcpcore import allowlist, rules

    lines = rule_lines()
    assert len(lines) == RULES
    t = time.perf_counter()
    ruleset = rules.RuleSet(rules.parse("\n".join(lines)))
    build = time.perf_counter() - t
    tools = [f"mcp__srv{i % 300:03d}__tool_{i // 300:02d}" for i in range(3_000)]
    paths = ["/etc/passwd", "/home/ann/secrets", "/srv/docs/a.txt", "/tmp/x"]
    cases = {
        "argument rules decide": [
            (tools[i % 3_000], {"path": paths[i % 4], "mode": "write", "text": "x" * 200})
            for i in range(CHECKS)
        ],
        "server-wide rule": [(f"mcp__grant{i % 900:03d}__tool_{i % 7}", {"q": i}) for i in range(CHECKS)],
        "no rule applies": [
            (f"mcp__other{i % 500:03d}__tool_{i % 9}", {"path": "/etc/x"}) for i in range(CHECKS)
        ],
    }
    expected = {"argument rules decide": None, "server-wide rule": "ask", "no rule applies": None}
    match = allowlist.Matcher([f"mcp__srv{s:03d}__*" for s in range(300)])
    floor = per_check(lambda name, args: match(name), cases["argument rules decide"]) * 1e6
    figures = []
    for label, calls in cases.items():
        if expected[label] is not None:
            assert all(ruleset.check(n, a).decision == expected[label] for n, a in calls[:100])
        us = per_check(ruleset.check, calls) * 1e6
        figures.append(
            Figure(
                NAME,
                f"RuleSet.check, {RULES:,} rules, {label}",
                us,
                "µs",
                floor,
                "allow-list check",
                f"< {TARGET_US:g} µs",
                us < TARGET_US,
            )
        )
    figures.append(
        Figure(
            NAME,
            f"RuleSet build from {RULES:,} lines (parse + index)",
            ms(build),
            "ms",
            note="paid once per change of the rules file (the gate caches it by the file's stat)",
        )
    )
    return figures
