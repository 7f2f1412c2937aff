"""Views of SPEC 19: which tools a client sees. Pure functions: the shape of a view's name
and patterns, and which registered names a view (or a token limited to views) holds.

A pattern is a registered name (`mcp__<server>__<tool>`) or a prefix of one followed by `*`
(`*` only at the end). A tool is in a view when an include matches and no exclude does;
matching is the allow-list's own (`allowlist.Matcher`: an exact name, or a `*` entry whose
text before the `*` starts the name), so views, the allow-list and the rules never disagree
about what a pattern names.
"""

from collections.abc import Iterable

from . import allowlist, names


def name_problem(name: object) -> str | None:
    """Why `name` can't be a view's name (section 3's server-name rules), or None."""
    return names.server_name_problem(name)


def _server_prefix_ok(rest: str) -> bool:
    """Whether `rest` can start `<server>__` for some valid server name."""
    if rest == "":
        return True
    core = rest[:-1] if rest.endswith("_") else rest  # a last `_` may begin the `__`
    return (
        core != ""
        and not core.startswith("_")
        and len(core) <= 64
        and "__" not in core
        and all(c.isascii() and (c.isalnum() or c in "-_") for c in core)
    )


def is_pattern(pattern: object) -> bool:
    """Whether `pattern` is a registered-name shape, or a prefix of one followed by `*`."""
    return isinstance(pattern, str) and not _misshapen(pattern)


def _misshapen(pattern: str) -> bool:
    if pattern == "" or allowlist.entry_problem(pattern):
        return True
    wildcard = pattern.endswith("*")
    text = pattern[:-1] if wildcard else pattern
    if "*" in text:
        return True
    if not wildcard:
        split = names.split_registered(text)
        return split is None or split[1] != split[1].strip()
    if len(text) <= len(names.PREFIX):
        return not names.PREFIX.startswith(text)
    if not text.startswith(names.PREFIX):
        return True
    rest = text[len(names.PREFIX) :]
    server, sep, _tool = rest.partition(names.SEP)
    if sep:
        return not names.is_valid_server_name(server)
    return not _server_prefix_ok(rest)


def clean_patterns(patterns: Iterable[str]) -> list[str]:
    """Patterns as a view keeps them: trimmed, blank ones dropped, repeats dropped, in order
    (`/v1` refuses a blank one before this; the page drops blank lines)."""
    out: list[str] = []
    for p in patterns:
        p = p.strip()
        if p and p not in out:
            out.append(p)
    return out


class Selection:
    """One view's patterns, compiled: `selection(name)` says whether the tool is in the view."""

    __slots__ = ("include", "exclude", "_include", "_exclude")

    def __init__(self, include: Iterable[str], exclude: Iterable[str]) -> None:
        self.include = tuple(include)  # what a query may narrow by before the exact check
        self.exclude = tuple(exclude)
        self._include = allowlist.Matcher(self.include)
        self._exclude = allowlist.Matcher(self.exclude)

    def __call__(self, registered: str) -> bool:
        return self._include(registered) and not self._exclude(registered)

    def holds_server(self, server: str) -> bool:
        """Whether the view holds the server whole (SPEC 20.2: then its prompts and resources
        too): an include covers every name of the server (`mcp__<server>__*`, or a shorter
        prefix of it) and no exclude could match any of them."""
        prefix = names.server_prefix(server)
        whole = any(p.endswith("*") and prefix.startswith(p[:-1]) for p in self.include)
        return whole and not any(_touches(p, prefix) for p in self.exclude)


class Scope:
    """What a token limited to views may see: the tools of any of its views (none at all when
    it has no view left). `views` are the names of those views."""

    __slots__ = ("views", "include", "_selections")

    def __init__(self, views: dict[str, Selection]) -> None:
        self.views = frozenset(views)
        self._selections = tuple(views.values())
        self.include = tuple(p for s in self._selections for p in s.include)

    def __call__(self, registered: str) -> bool:
        return any(s(registered) for s in self._selections)

    def holds_server(self, server: str) -> bool:
        return any(s.holds_server(server) for s in self._selections)


def _touches(pattern: str, prefix: str) -> bool:
    """Whether `pattern` may match some name that starts with `prefix`."""
    if pattern.endswith("*"):
        text = pattern[:-1]
        return text.startswith(prefix) or prefix.startswith(text)
    return pattern.startswith(prefix)


def split_patterns(patterns: Iterable[str]) -> tuple[list[str], list[str]]:
    """(exact names, prefixes) of patterns: what a database query can select them by."""
    exact: list[str] = []
    prefixes: list[str] = []
    for p in patterns:
        (prefixes if p.endswith("*") else exact).append(p.removesuffix("*"))
    return exact, prefixes
