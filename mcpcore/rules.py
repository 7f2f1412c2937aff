"""Argument rules of SPEC 14.2: parsing the `rules` file and deciding a call. Pure functions.

A line is `<decision> <pattern>`; the pattern is a registered name or `<prefix>*`, optionally
followed by `(<arg>:<glob>[, <arg>:<glob>...])`. A glob matches the whole value of a top-level
argument (`*` any run, `?` one character): a string as it is, any other value as its compact
JSON with sorted keys, so an agent can't dodge a rule on an object argument by reordering its
keys. An absent argument never matches; every listed argument must match. Of the rules that
match a call, a `deny` wins over an `ask`, an `ask` over an `allow`, and among equals the first
line.

Checks are on every call's path, so a `RuleSet` indexes its rules by exact name and by prefix
(grouped by length: one dict lookup per distinct prefix length), keeps each name's candidates
once found, and compiles every glob once.
"""

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

from .choices import RuleDecision

_RANK = {d.value: i for i, d in enumerate(RuleDecision)}  # declared in the order they win
_ABSENT = object()
# Arguments are split at a comma that is followed by `<arg>:`; an argument name holds no space,
# quote, bracket, brace, comma, colon or parenthesis, so a JSON glob (`{"a":1,"b":*}`) stays whole.
_ARG_NAME = r"[^\s,:()\"'{}\[\]]+"
_ARG_SPLIT = re.compile(rf",\s*(?={_ARG_NAME}:)")
_ARG_NAME_RE = re.compile(_ARG_NAME)
_CACHE_MAX = 4096  # names whose candidate rules are kept


class RuleError(ValueError):
    """A line that is not a rule; the message is the API's error text."""

    def __init__(self, line: int, why: str) -> None:
        super().__init__(f"invalid rule on line {line}: {why}")
        self.line = line
        self.why = why


def value_text(value: object) -> str:
    """What a glob is matched against: a string as it is, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


class Glob:
    """A whole-value glob. Split at `*` into fixed-length pieces (`?` is one character): the
    first must start the value, the last end it, the ones between are found leftmost in order.
    Taking each leftmost is enough for a match and never backtracks, so a long value costs
    linear time whatever the pattern (a regex `.*a.*a.*b` can take polynomial time)."""

    __slots__ = ("text", "_pieces", "_star", "_min")

    def __init__(self, text: str) -> None:
        self.text = text
        parts = text.split("*")
        self._star = len(parts) > 1
        # (literal text, or a compiled pattern when the piece holds `?`; its length)
        self._pieces = [(self._piece(p), len(p)) for p in parts]
        self._min = sum(len(p) for p in parts)

    @staticmethod
    def _piece(part: str) -> str | re.Pattern:
        if "?" not in part:
            return part
        return re.compile("".join("." if c == "?" else re.escape(c) for c in part), re.DOTALL)

    @staticmethod
    def _at(piece: str | re.Pattern, value: str, pos: int) -> bool:
        if isinstance(piece, str):
            return value.startswith(piece, pos)
        return piece.match(value, pos) is not None

    def __call__(self, value: str) -> bool:
        if len(value) < self._min:
            return False
        pieces = self._pieces
        if not self._star:
            piece = pieces[0][0]
            return value == piece if isinstance(piece, str) else piece.fullmatch(value) is not None
        (head, head_len), (tail, tail_len) = pieces[0], pieces[-1]
        end = len(value) - tail_len
        if not self._at(head, value, 0) or not self._at(tail, value, end):
            return False
        pos = head_len
        for piece, size in pieces[1:-1]:
            if isinstance(piece, str):
                found = value.find(piece, pos, end)
            else:
                m = piece.search(value, pos, end)
                found = m.start() if m else -1
            if found < 0:
                return False
            pos = found + size
        return pos <= end


@dataclass(frozen=True)
class Rule:
    """One line of the file. `name` is the exact name, or the prefix before `*`."""

    line: int
    decision: str
    pattern: str
    name: str
    prefix: bool
    text: str  # the line as it reads in the file, trimmed
    args: tuple[tuple[str, Glob], ...] = ()

    def matches_args(self, arguments: dict) -> bool:
        for key, glob in self.args:
            value = arguments.get(key, _ABSENT)
            if value is _ABSENT or not glob(value_text(value)):
                return False
        return True

    def to_dict(self) -> dict:
        return {"line": self.line, "decision": self.decision, "pattern": self.pattern}


def parse_line(raw: str, number: int) -> Rule | None:
    """The rule on one line, None for a blank or `#` line; raises RuleError."""
    line = raw.strip()
    if not line or line.startswith("#"):
        return None
    # The decision ends at the first run of white space (spaces or tabs).
    decision, pattern = (line.split(None, 1) + [""])[:2]
    pattern = pattern.strip()
    if decision not in _RANK:
        raise RuleError(number, f'unknown decision "{decision}" (use allow, ask or deny)')
    if not pattern:
        raise RuleError(number, f'"{decision}" needs a pattern: a tool name or <prefix>*')
    name, paren, rest = pattern.partition("(")
    name = name.strip()
    if not name:
        raise RuleError(number, "the pattern needs a tool name or <prefix>* before (")
    if "*" in name[:-1]:
        raise RuleError(number, f'"*" may only end the name: {name}')
    if any(c.isspace() for c in name):
        raise RuleError(number, f'a tool name has no spaces: "{name}"')
    args: tuple[tuple[str, Glob], ...] = ()
    if paren:
        if not rest.endswith(")"):
            raise RuleError(number, 'the argument list must end with ")" at the end of the line')
        args = _parse_args(rest[:-1], number)
        pattern = f"{name}({rest}"
    else:
        pattern = name
    prefix = name.endswith("*")
    return Rule(number, decision, pattern, name[:-1] if prefix else name, prefix, line, args)


def _parse_args(inner: str, number: int) -> tuple[tuple[str, Glob], ...]:
    if not inner.strip():
        raise RuleError(number, "empty argument list: write (<arg>:<glob>) or leave the parentheses out")
    out = []
    for item in _ARG_SPLIT.split(inner):
        key, colon, glob = item.strip().partition(":")
        key = key.strip()
        if not colon or not _ARG_NAME_RE.fullmatch(key):
            raise RuleError(number, f'expected <arg>:<glob>, got "{item.strip()}"')
        # White space around the glob is layout (`path: /etc/*`); `?` matches a real space.
        out.append((key, Glob(glob.strip())))
    return tuple(out)


def parse(text: str) -> list[Rule]:
    """Every rule of a `rules` file; the first bad line raises RuleError. Lines end at `\\n`
    (as in `allow_tool`)."""
    rules = []
    for number, raw in enumerate(text.split("\n"), start=1):
        rule = parse_line(raw, number)
        if rule is not None:
            rules.append(rule)
    return rules


def render(lines: Iterable[str]) -> str:
    """A file body from lines as given (comments and blanks kept), one `\\n` after each."""
    return "".join(f"{line.rstrip()}\n" for line in lines)


class RuleSet:
    """Rules indexed for fast checks: `check(name, arguments)` is the deciding rule or None."""

    def __init__(self, rules: Iterable[Rule] = ()) -> None:
        self.rules = sorted(rules, key=lambda r: r.line)
        ordered = sorted(self.rules, key=lambda r: (_RANK[r.decision], r.line))
        self._exact: dict[str, list[Rule]] = {}
        by_len: dict[int, dict[str, list[Rule]]] = {}
        for rule in ordered:
            if rule.prefix:
                by_len.setdefault(len(rule.name), {}).setdefault(rule.name, []).append(rule)
            else:
                self._exact.setdefault(rule.name, []).append(rule)
        self._by_len = sorted(by_len.items())
        self._cache: dict[str, tuple[Rule, ...]] = {}

    def __len__(self) -> int:
        return len(self.rules)

    def candidates(self, name: str) -> tuple[Rule, ...]:
        """The rules whose name part covers `name`, deciding order first."""
        found = self._cache.get(name)
        if found is not None:
            return found
        lists = [self._exact.get(name, ())]
        for size, table in self._by_len:
            if size > len(name):
                break
            lists.append(table.get(name[:size], ()))
        merged = [r for group in lists for r in group]
        if len(lists) > 1:
            merged.sort(key=lambda r: (_RANK[r.decision], r.line))
        found = tuple(merged)
        if len(self._cache) >= _CACHE_MAX:
            self._cache.clear()
        self._cache[name] = found
        return found

    def check(self, name: str, arguments: dict) -> Rule | None:
        for rule in self.candidates(name):
            if not rule.args or rule.matches_args(arguments):
                return rule
        return None

    def for_prefix(self, prefix: str) -> list[Rule]:
        """The rules that can apply to some name starting with `prefix` (a server's tools)."""
        return [
            r
            for r in self.rules
            if (r.prefix and (r.name.startswith(prefix) or prefix.startswith(r.name)))
            or (not r.prefix and r.name.startswith(prefix))
        ]
