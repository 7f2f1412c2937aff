"""Argument rules of SPEC 14.2: parsing the `rules` file and deciding a call. Pure functions.

A line is `<decision> <pattern>`; the pattern is a registered name or `<prefix>*`, optionally
followed by `(<arg>:<glob>[, <arg>:<glob>...])`. A glob matches the whole value of a top-level
argument (`*` any run, `?` one character): a string as it is, any other value as its compact
JSON with sorted keys, so an agent can't dodge a rule on an object argument by reordering its
keys. An absent argument never matches; every listed argument must match. Of the rules that
match a call, a `deny` wins over an `ask`, an `ask` over an `allow`, and among equals the first
line.

Two more forms (SPEC 20.3) decide the console's other calls: `prompt:<registered prompt name or
prefix*>`, optionally with arguments over the prompt's arguments, and
`resource:<server or *>(uri:<glob>)`. A call is checked under a name that carries its form:
`prompt:<registered prompt name>` for a prompt get, `resource:<server>` with `{"uri": <uri>}`
for a resource read (`prompt_subject`, `resource_subject`), a tool's registered name or a
permission prompt's tool name for the rest. Each form is indexed apart: a plain rule (even
`deny *`) never decides a prompt or a resource, and a form's rule never a tool.

A resource rule sees a read's URI in normal form (`normal_uri`: RFC 3986 6.2.2, and for
`file:` no `localhost` authority and no repeated `/`); the MCP door refuses any other spelling
before a rule is asked, so `file:///home/u/%2essh/id_rsa` cannot slip past `.ssh` in a glob.
Normal form keeps `%2F` encoded (it is not `/` to RFC 3986), but a server's URI template decodes
it into a path: a URI with escapes is checked as written and decoded (`decoded_uri`), and the
stricter rule of the two decides.

`limit <n>/<unit> <pattern>` lines (SPEC 25.1) set rate limits rather than decide: a `RuleSet`
keeps them in indexes of their own (`limits`), so `check` never sees them; their pattern is one
of the forms above, or `*` alone, which a limit reads as every call of every form.

Checks are on every call's path, so a `RuleSet` indexes its rules by exact name and by prefix
(grouped by length: one dict lookup per distinct prefix length), keeps each name's candidates
once found, and compiles every glob once.
"""

import json
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from urllib.parse import unquote

from . import names
from .choices import RuleDecision

_RANK = {d.value: i for i, d in enumerate(RuleDecision)}  # declared in the order they win
_ABSENT = object()
# Arguments are split at a comma that is followed by `<arg>:`; an argument name holds no space,
# quote, bracket, brace, comma, colon or parenthesis, so a JSON glob (`{"a":1,"b":*}`) stays whole.
_ARG_NAME = r"[^\s,:()\"'{}\[\]]+"
_ARG_SPLIT = re.compile(rf",\s*(?={_ARG_NAME}:)")
_ARG_NAME_RE = re.compile(_ARG_NAME)
_CACHE_MAX = 4096  # names whose candidate rules are kept
# Who decides an `ask` (SPEC 24.1, 24.2): `ask[<group>]`, `ask[<group>:<n>]`, `ask[:<n>]`.
GROUP_NAME = re.compile(r"[a-z0-9_-]{1,64}\Z")
_ASK_WHO = re.compile(r"ask\[([^\]]*)\]\Z")
_ASK_GROUP = re.compile(r"^\s*ask\[([^\]:]*)")
APPROVALS = range(2, 6)

# The forms of SPEC 20.3, by the prefix their patterns (and the names they are checked under)
# start with; "" is the plain form of 14.2 (tools and permission prompts).
PROMPT = "prompt"
RESOURCE = "resource"
PLAIN = ""
_FORMS = (PROMPT, RESOURCE)
LIMIT = RuleDecision.LIMIT.value
EVERY = "*"  # a limit's pattern for every call, prompt gets and resource reads included (25.1)

# A rate: `<n>/<unit>`, and for AGENVOY_REPEAT_LIMIT's window `<n>/<k><unit>` too (`10/5m`).
_RATE = re.compile(r"([0-9]+)/([0-9]*)([smhd])")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def rate(text: str, multiples: bool = False) -> tuple[int, int, str] | None:
    """(n, k, unit) of a rate `<n>/<unit>` (n from 1), or with `multiples` `<n>/<k><unit>`
    (k from 1, 1 when absent); None when `text` is no such rate."""
    found = _RATE.fullmatch(text)
    if found is None or (found.group(2) and not multiples):
        return None
    n, k = int(found.group(1)), int(found.group(2) or 1)
    return (n, k, found.group(3)) if n >= 1 and k >= 1 else None


def prompt_subject(registered_name: str) -> str:
    """The name a prompt get is checked under: `prompt:<registered prompt name>`."""
    return f"{PROMPT}:{registered_name}"


def resource_subject(server: str) -> str:
    """The name a resource read is checked under (with arguments `{"uri": <uri>}`)."""
    return f"{RESOURCE}:{server}"


# RFC 3986 appendix B: scheme, authority, path, query, fragment of any URI reference.
_URI = re.compile(r"^(?:([^:/?#]+):)?(?://([^/?#]*))?([^?#]*)(?:\?([^#]*))?(?:#(.*))?$", re.S)
_PERCENT = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def _percent(part: str) -> str:
    """Percent-encodings of unreserved characters decoded, the others' hex digits upper-case."""

    def one(m: re.Match) -> str:
        char = chr(int(m.group(1), 16))
        return char if char in _UNRESERVED else "%" + m.group(1).upper()

    return _PERCENT.sub(one, part)


def _without_dots(path: str) -> str:
    """RFC 3986 5.2.4 `remove_dot_segments`."""
    out: list[str] = []
    while path:
        if path.startswith("../"):
            path = path[3:]
        elif path.startswith("./"):
            path = path[2:]
        elif path.startswith("/./"):
            path = path[2:]
        elif path == "/.":
            path = "/"
        elif path.startswith("/../"):
            path = path[3:]
            if out:
                out.pop()
        elif path == "/..":
            path = "/"
            if out:
                out.pop()
        elif path in (".", ".."):
            path = ""
        else:
            cut = path.find("/", 1)
            cut = len(path) if cut == -1 else cut
            out.append(path[:cut])
            path = path[cut:]
    return "".join(out)


def normal_uri(uri: str) -> str:
    """`uri` in normal form (SPEC 20.3): RFC 3986 6.2.2's (scheme and host lower-case,
    percent-encodings of unreserved characters decoded and the rest's hex upper-case, `.` and
    `..` segments removed where the path is hierarchical), and for `file:` no `localhost`
    authority, an absolute path always under an (empty) authority, and no repeated `/`."""
    scheme, authority, path, query, fragment = _URI.match(uri).groups()  # type: ignore[union-attr]
    scheme = scheme.lower() if scheme is not None else None
    path = _percent(path)
    if authority is not None:
        info, at, hostport = _percent(authority).rpartition("@")
        authority = info + at + hostport.lower()
    if scheme == "file":
        if authority == "localhost":
            authority = ""
        if authority is None and path.startswith("/"):
            authority = ""
        path = re.sub("/{2,}", "/", path)
    if authority is not None or path.startswith("/"):
        path = _without_dots(path)
        if scheme == "file":
            path = re.sub("/{2,}", "/", path)
    out = "" if scheme is None else scheme + ":"
    if authority is not None:
        out += "//" + authority
    out += path
    if query is not None:
        out += "?" + _percent(query)
    if fragment is not None:
        out += "#" + _percent(fragment)
    return out


def decoded_uri(uri: str) -> str:
    """`uri` as a server's template match reads it: every escape decoded (`%2F` too), then in
    normal form (so `..%2F` climbs as `../` does)."""
    return normal_uri(unquote(uri))


def form_of(name: str) -> str:
    """The form a name (or a rule's name part) belongs to: `prompt`, `resource` or plain ""."""
    head, colon, _ = name.partition(":")
    return head if colon and head in _FORMS else PLAIN


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
    form: str = PLAIN  # `prompt`, `resource` (SPEC 20.3) or plain (tools, permission prompts)
    group: str | None = None  # an `ask` for this group's members and admins only (SPEC 24.1)
    approvals: int = 1  # distinct approvals an `ask` needs (24.2)
    routed: bool = False  # written `ask[...]`: `GET /v1/rules` says "for" and "approvals"
    limit: str = ""  # a limit line's `<n>/<unit>` (SPEC 25.1)

    def matches_args(self, arguments: dict) -> bool:
        for key, glob in self.args:
            value = arguments.get(key, _ABSENT)
            if value is _ABSENT or not glob(value_text(value)):
                return False
        return True

    def to_dict(self) -> dict:
        out = {"line": self.line, "decision": self.decision, "pattern": self.pattern}
        if self.routed:
            out.update({"for": self.group, "approvals": self.approvals})
        if self.limit:
            out["limit"] = self.limit
        return out


def parse_line(raw: str, number: int) -> Rule | None:
    """The rule on one line, None for a blank or `#` line; raises RuleError."""
    line = raw.strip()
    if not line or line.startswith("#"):
        return None
    # The decision ends at the first run of white space (spaces or tabs).
    decision, pattern = (line.split(None, 1) + [""])[:2]
    pattern = pattern.strip()
    who = _ASK_WHO.match(decision)
    group, approvals = _who(who.group(1), number) if who else (None, 1)
    if who:
        decision = RuleDecision.ASK.value
    limit = ""
    if decision == LIMIT:
        limit, pattern = (pattern.split(None, 1) + [""])[:2]
        pattern = pattern.strip()
        if rate(limit) is None:
            raise RuleError(
                number,
                f'a limit reads limit <n>/<unit> <pattern>, n from 1, unit s, m, h or d: got "{limit}"',
            )
        if pattern == EVERY:
            return Rule(number, decision, pattern, "", True, line, (), EVERY, limit=limit)
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
    form = form_of(name)
    if form:
        _check_form(form, name, prefix, args, number)
    stem = name[:-1] if prefix else name
    return Rule(number, decision, pattern, stem, prefix, line, args, form, group, approvals, bool(who), limit)


def _who(inside: str, number: int) -> tuple[str | None, int]:
    """(group, approvals) of `ask[<inside>]`: `<group>`, `<group>:<n>` or `:<n>`."""
    group, colon, count = inside.partition(":")
    if group and not GROUP_NAME.match(group):
        raise RuleError(number, f"invalid group name: {group}")
    if not colon:
        if not group:
            raise RuleError(number, "ask[] names a group, a number of approvals, or both: ask[<group>:<n>]")
        return group, 1
    if not count.isdigit() or int(count) not in APPROVALS:
        raise RuleError(number, f"the number of approvals is from 2 to 5, got {count!r}")
    return group or None, int(count)


def groups_named(text: str) -> set[str]:
    """The groups the `ask[...]` lines of a rules text name, good lines or not."""
    found = (_ASK_GROUP.match(line) for line in text.split("\n"))
    return {m.group(1) for m in found if m and m.group(1)}


def _check_form(form: str, name: str, prefix: bool, args: tuple, number: int) -> None:
    """Raise RuleError unless a `prompt:` or `resource:` pattern is one SPEC 20.3 allows."""
    subject = name.partition(":")[2]
    if form == PROMPT:
        stem = subject[:-1] if prefix else subject
        if prefix and (names.PREFIX.startswith(stem) or stem.startswith(names.PREFIX)):
            return
        if not prefix and names.split_registered(subject) is not None:
            return
        raise RuleError(
            number,
            f"a prompt rule names a registered prompt: prompt:mcp__<server>__<prompt> or a prefix "
            f'ending in "*", got "{name}"',
        )
    if subject != "*":
        if prefix:
            raise RuleError(number, f'a resource rule names one server or "*", not a prefix: "{name}"')
        problem = names.server_name_problem(subject)
        if problem is not None:
            raise RuleError(number, f'a resource rule names a server or "*": "{subject}" {problem}')
    if [key for key, _ in args] != ["uri"]:
        raise RuleError(number, f"a resource rule takes exactly one argument, uri: {name}(uri:<glob>)")


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


def parse(text: str, groups: Collection[str] | None = None) -> list[Rule]:
    """Every rule of a `rules` file; the first bad line raises RuleError. Lines end at `\\n`
    (as in `allow_tool`). With `groups` (the names that exist), an `ask` naming another group
    is a bad line (SPEC 24.1)."""
    rules = []
    for number, raw in enumerate(text.split("\n"), start=1):
        rule = parse_line(raw, number)
        if rule is None:
            continue
        if groups is not None and rule.group is not None and rule.group not in groups:
            raise RuleError(number, f"unknown group: {rule.group}")
        rules.append(rule)
    return rules


def render(lines: Iterable[str]) -> str:
    """A file body from lines as given (comments and blanks kept), one `\\n` after each."""
    return "".join(f"{line.rstrip()}\n" for line in lines)


class _Index:
    """The rules of one form, indexed by exact name and by prefix length."""

    def __init__(self, ordered: list[Rule]) -> None:
        self._exact: dict[str, list[Rule]] = {}
        by_len: dict[int, dict[str, list[Rule]]] = {}
        for rule in ordered:
            if rule.prefix:
                by_len.setdefault(len(rule.name), {}).setdefault(rule.name, []).append(rule)
            else:
                self._exact.setdefault(rule.name, []).append(rule)
        self._by_len = sorted(by_len.items())
        self._cache: dict[str, tuple[Rule, ...]] = {}

    def candidates(self, name: str) -> tuple[Rule, ...]:
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


class RuleSet:
    """Rules indexed for fast checks: `check(name, arguments)` is the deciding rule or None.

    The name says the call's form (`form_of`): `prompt:<registered>` is checked against the
    prompt rules only, `resource:<server>` against the resource rules only, any other name
    against the plain rules only. A caller whose name must never be read as a form (a
    permission prompt's tool name is the agent's to choose) passes `form` (plain "")."""

    def __init__(self, rules: Iterable[Rule] = ()) -> None:
        self.rules = sorted(rules, key=lambda r: r.line)
        ordered = sorted(self.rules, key=lambda r: (_RANK[r.decision], r.line))
        deciding = [r for r in ordered if r.decision != LIMIT]
        limits = [r for r in self.rules if r.decision == LIMIT]
        self._forms = {form: _Index([r for r in deciding if r.form == form]) for form in (PLAIN, *_FORMS)}
        self._limits = {form: _Index([r for r in limits if r.form == form]) for form in (PLAIN, *_FORMS)}
        self._every = tuple(r for r in limits if r.form == EVERY)

    def __len__(self) -> int:
        return len(self.rules)

    def candidates(self, name: str, form: str | None = None) -> tuple[Rule, ...]:
        """The rules of the name's form whose name part covers `name`, deciding order first."""
        return self._forms[form_of(name) if form is None else form].candidates(name)

    def check(self, name: str, arguments: dict, form: str | None = None) -> Rule | None:
        candidates = self.candidates(name, form)
        uri = arguments.get("uri") if candidates and form_of(name) == RESOURCE else None
        # Candidates come in deciding order, so the first that matches either spelling of the
        # URI is the stricter decision.
        decoded = {"uri": decoded_uri(uri)} if isinstance(uri, str) and "%" in uri else None
        for rule in candidates:
            if not rule.args or rule.matches_args(arguments) or (decoded and rule.matches_args(decoded)):
                return rule
        return None

    def limits(self, name: str, arguments: dict, form: str | None = None) -> list[Rule]:
        """The limit lines (SPEC 25.1) that match a call checked under `name` (as `check`
        takes it), in line order: those of its form, and `*`."""
        candidates = self._limits[form_of(name) if form is None else form].candidates(name)
        if not candidates:
            return list(self._every)
        uri = arguments.get("uri") if form_of(name) == RESOURCE else None
        decoded = {"uri": decoded_uri(uri)} if isinstance(uri, str) and "%" in uri else None
        found = [
            r
            for r in candidates
            if not r.args or r.matches_args(arguments) or (decoded and r.matches_args(decoded))
        ]
        return sorted([*found, *self._every], key=lambda r: r.line) if self._every else found

    def for_prefix(self, prefix: str) -> list[Rule]:
        """The plain rules that can apply to some name starting with `prefix` (a server's tools)."""
        return [r for r in self.rules if r.form == PLAIN and _covers(r, prefix)]

    def for_server(self, server: str) -> list[Rule]:
        """The rules that can apply to a server's calls, in line order: the plain ones for its
        tools, the prompt rules that can name one of its prompts, and the resource rules that
        name it or `*`."""
        prefix = names.server_prefix(server)
        out = []
        for r in self.rules:
            if r.form == EVERY:
                hit = True
            elif r.form == PLAIN:
                hit = _covers(r, prefix)
            elif r.form == PROMPT:
                hit = _covers(r, prompt_subject(prefix))
            else:
                hit = r.name == resource_subject(server) or (r.prefix and r.name == f"{RESOURCE}:")
            if hit:
                out.append(r)
        return out


def _covers(rule: Rule, prefix: str) -> bool:
    """Whether the rule can apply to some name starting with `prefix`."""
    if rule.prefix:
        return rule.name.startswith(prefix) or prefix.startswith(rule.name)
    return rule.name.startswith(prefix)
