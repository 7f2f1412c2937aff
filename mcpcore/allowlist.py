"""The allow-list rules of SPEC 2.2: parsing, matching, replace-by-prefix. Pure functions. (What
an edit may hold is the input contract's: `schemas.ToolAllow`.)"""

import bisect
from collections.abc import Iterable


def parse(text: str) -> list[str]:
    """Entries of an `allow_tool` file: blank lines and `#` comments are ignored.

    Lines end at `\\n` only (with an optional `\\r`): `str.splitlines` also splits at
    U+2028 and other separators, so a tool named `x<U+2028>*` would read back as `*`.
    """
    entries = []
    for line in text.split("\n"):
        line = line.strip()
        if line and not line.startswith("#"):
            entries.append(line)
    return entries


def sorted_unique(entries: Iterable[str]) -> list[str]:
    """Entries in byte order without repeats. Python orders strings by code point, which is
    UTF-8 byte order; a list already in that order (as the file keeps it) is used as it is."""
    items = entries if isinstance(entries, list) else list(entries)
    if all(a < b for a, b in zip(items, items[1:], strict=False)):
        return items
    return sorted(set(items))


def render(entries: Iterable[str]) -> str:
    """The file body: unique entries sorted by byte order, one entry and `\\n` per line."""
    return "".join(f"{e}\n" for e in sorted_unique(entries))


def matches(entries: Iterable[str], name: str) -> bool:
    """A name is allowed when it equals an entry, or an entry ends in `*` and the name starts
    with the text before it."""
    for entry in entries:
        if entry == name or (entry.endswith("*") and name.startswith(entry[:-1])):
            return True
    return False


class Matcher:
    """Precomputed allow-list for fast repeated checks (exact set plus the `*` prefixes)."""

    def __init__(self, entries: Iterable[str]) -> None:
        self.exact: set[str] = set()
        prefixes = set()
        for entry in entries:
            if entry.endswith("*"):
                prefixes.add(entry[:-1])
            else:
                self.exact.add(entry)
        self.prefixes = tuple(sorted(prefixes))
        # The registered-name prefix `mcp__<server>__` covers the usual whole-server grants:
        # index those so a check is one dict lookup instead of a scan. Only prefixes whose first
        # `__` after `mcp__` is their last two characters qualify: for those (and only those)
        # the first `__` after `mcp__` in any name starting with them ends exactly there, so
        # the lookup below agrees with `matches` (`mcp__a___` or `mcp_____` would not).
        self._server_prefixes = {
            p for p in self.prefixes if p.startswith("mcp__") and p.find("__", 5) == len(p) - 2
        }
        self._other_prefixes = tuple(p for p in self.prefixes if p not in self._server_prefixes)

    def __call__(self, name: str) -> bool:
        if name in self.exact:
            return True
        if name.startswith("mcp__"):
            end = name.find("__", 5)
            if end != -1 and name[: end + 2] in self._server_prefixes:
                return True
        return any(name.startswith(p) for p in self._other_prefixes)


_UNSAFE = set(map(chr, range(0x20))) | {"\x7f", "\x85", "\u2028", "\u2029"}


def entry_problem(entry: str) -> str | None:
    """Why `entry` can't be a line of `allow_tool` (it would not read back as itself)."""
    if entry.startswith("#"):
        return "an entry can't start with '#'"
    if any(c in _UNSAFE for c in entry) or entry != entry.strip():
        return "an entry can't hold control characters, line separators or edge spaces"
    return None


def replace_prefix(current: Iterable[str], prefix: str, new_entries: Iterable[str]) -> list[str]:
    """Remove every entry starting with `prefix`, add the new ones; `<prefix>*` among the new
    entries collapses the prefix's entries to that one line. Others are left as they were."""
    new = list(new_entries)
    if f"{prefix}*" in new:
        new = [f"{prefix}*"]
    entries = sorted_unique(current)
    lo, hi = _prefix_range(entries, prefix)
    return entries[:lo] + sorted(set(new)) + entries[hi:]


def _prefix_range(entries: list[str], prefix: str) -> tuple[int, int]:
    """In sorted entries, those starting with `prefix` are one run beginning where `prefix`
    itself would go."""
    lo = bisect.bisect_left(entries, prefix)
    hi = lo
    while hi < len(entries) and entries[hi].startswith(prefix):
        hi += 1
    return lo, hi


def entries_for(entries: Iterable[str], prefix: str) -> list[str]:
    items = sorted_unique(entries)
    lo, hi = _prefix_range(items, prefix)
    return items[lo:hi]
