"""`mcp.json`, `allow_tool` and `rules` in $AGENVOY_HOME: reading, atomic locked writes, and
mirroring them into the database (SPEC 2, 14.2), and the pins that follow `allow_tool` (14.1).
The files are the shared truth with the Agenvoy CLI.

Every change the mirror takes in is an audit row (SPEC 22.2), written in the mirror's own
transaction: the console's own writes mirror what they wrote under the file's lock, as the
actor who asked for them; whatever else the mirror finds (an edit by another program) is
recorded as `file`, and is picked up under the same lock, so one change is never told twice
nor by the wrong actor."""

import fcntl
import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from . import allowlist, audit, names, rules
from .choices import AuditAction, ServerState, Transport
from .models import AllowEntry, FileState, OAuthAccount, OAuthFlow, RuleLine, Server, Tool, ToolPin

log = logging.getLogger("mcpcore.files")

MCP_JSON = "mcp.json"
ALLOW_TOOL = "allow_tool"
RULES = "rules"


class ConfigFileError(Exception):
    """A shared file that can't be used; the message names the problem."""


def home() -> Path:
    return Path(settings.AGENVOY_HOME)


def path_of(name: str) -> Path:
    return home() / name


def stat_key(name: str) -> tuple | None:
    """What says a shared file may have changed: its path and stat (`(path, None)` while it
    is missing; None when it can't be read, so a cache keyed by it is never trusted)."""
    path = path_of(name)
    try:
        st = path.stat()
    except FileNotFoundError:
        return (str(path), None)
    except OSError:
        return None
    return (str(path), st.st_mtime_ns, st.st_size, st.st_ino)


def private_dir(folder: Path) -> Path:
    """Make `folder` (and its missing parents) if needed; one the console creates is 0700
    (SPEC 12.3): it holds secrets. An existing folder's mode is the operator's choice."""
    if not folder.is_dir():
        folder.parent.mkdir(parents=True, exist_ok=True)
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            pass
    return folder


def open_private(path: Path, mode: str = "a", **kwargs):
    """`open(path, mode)` for a file that, when created, is readable by the owner only."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if "a" in mode else os.O_TRUNC)
    return open(os.open(path, flags, 0o600), mode, **kwargs)


@contextmanager
def locked(path: Path, wait: bool = True) -> Iterator[bool]:
    """Advisory lock (`flock` on `<file>.lock` beside it) held across read-modify-write, so two
    writers (two consoles, or the console and the Agenvoy CLI) never lose each other's update.
    Yields whether it holds the lock: always, unless `wait` is False and another holds it.
    Not re-entrant: one process taking it twice waits for itself."""
    private_dir(path.parent)
    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    held = False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
            held = True
        except BlockingIOError:
            pass
        yield held
    finally:
        if held:
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def atomic_write(path: Path, text: str, mode: int = 0o600) -> None:
    """Temp file in the same folder, fsync, rename: readers see the old or the new file whole.
    A new file is 0600; a file that exists keeps its mode."""
    private_dir(path.parent)
    if path.exists():
        mode = path.stat().st_mode & 0o777
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with _ignore():
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


@contextmanager
def _ignore() -> Iterator[None]:
    try:
        yield
    except OSError:
        pass


def sweep_stale_temp_files(older_than: float = 60.0) -> int:
    """Remove temp files that a writer killed mid-write left behind (`.<name>.*.tmp`). Young
    ones may belong to a write in progress elsewhere, so only old ones go."""
    removed = 0
    cutoff = time.time() - older_than
    for name in (MCP_JSON, ALLOW_TOOL, RULES):
        for tmp in home().glob(f".{name}.*.tmp"):
            with _ignore():
                if tmp.stat().st_mtime < cutoff:
                    tmp.unlink()
                    removed += 1
    return removed


# --- mcp.json -----------------------------------------------------------------------------


def render_mcp_json(data: dict) -> str:
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def parse_mcp_json(text: str) -> dict:
    """The whole document of an `mcp.json`; raises ConfigFileError when it can't be used."""
    if text.strip() == "":
        return {"servers": {}}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigFileError(f"mcp.json is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigFileError("mcp.json must hold a JSON object")
    servers = data.get("servers", {})
    if not isinstance(servers, dict):
        raise ConfigFileError('mcp.json: "servers" must be an object')
    for name, config in servers.items():
        if not isinstance(config, dict):
            raise ConfigFileError(f"mcp.json: server {name!r} must be an object")
    return data


def read_mcp_json() -> dict:
    path = path_of(MCP_JSON)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {"servers": {}}
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigFileError(f"mcp.json can't be read: {exc}") from None
    return parse_mcp_json(text)


def update_servers[T](mutate: Callable[[dict], T], by: audit.Actor = audit.BY_SYSTEM) -> T:
    """Locked read-modify-write of `mcp.json`'s `servers`; other top-level keys are kept.
    Returns what `mutate` returned. What it changed is audited as `by`'s; what another
    program had changed before it, as `file`'s.

    An unparsable file raises ConfigFileError and is never overwritten.
    """
    path = path_of(MCP_JSON)
    with locked(path):
        data = read_mcp_json()
        _sync_servers(audit.BY_FILE, data)
        before = json.dumps(data, sort_keys=True)
        servers = data.setdefault("servers", {})
        outcome = mutate(servers)
        # A no-op edit (say, removing an unknown server) leaves a hand-written file as it is.
        if json.dumps(data, sort_keys=True) != before or not path.exists():
            atomic_write(path, render_mcp_json(data))
        # Mirror while still holding the lock: done after it, a concurrent writer's newer
        # file could be mirrored first and then overwritten here with this older one.
        _sync_servers(by)
    return outcome


def import_shape(data: object) -> dict[str, dict]:
    """Servers from an import file: Agenvoy's `{"servers": ...}` or the common
    `{"mcpServers": ...}` (Claude Desktop, Cursor, Cline; VS Code's `type` picks the transport)."""
    if not isinstance(data, dict):
        raise ConfigFileError("the file must hold a JSON object")
    if isinstance(data.get("mcpServers"), dict):
        servers = data["mcpServers"]
    elif isinstance(data.get("servers"), dict):
        servers = data["servers"]
    else:
        raise ConfigFileError('no "servers" or "mcpServers" object in the file')
    out = {}
    for name, config in servers.items():
        problem = names.server_name_problem(name)
        if problem:
            raise ConfigFileError(f"invalid server name: {name}: {problem}")
        if not isinstance(config, dict):
            raise ConfigFileError(f"server {name} must be an object")
        config = dict(config)
        if config.get("type") == "http":
            config["type"] = Transport.STREAMABLE_HTTP
        if not (_nonempty(config.get("command")) or _nonempty(config.get("url"))):
            raise ConfigFileError(f"server {name}: command or url is required")
        out[name] = config
    if not out:
        raise ConfigFileError("the file lists no servers")
    return out


def _nonempty(value: object) -> bool:
    return isinstance(value, str) and value.strip() != ""


def import_servers(servers: dict[str, dict], by: audit.Actor = audit.BY_SYSTEM) -> int:
    def mutate(current: dict) -> int:
        current.update(servers)
        return len(servers)

    return update_servers(mutate, by)


# --- allow_tool ---------------------------------------------------------------------------


def read_allow_tool() -> list[str]:
    try:
        text = path_of(ALLOW_TOOL).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigFileError(f"allow_tool can't be read: {exc}") from None
    return allowlist.parse(text)


def replace_allow_prefix(
    prefix: str, entries: list[str], repin: bool = False, by: audit.Actor = audit.BY_SYSTEM
) -> list[str]:
    """Replace-by-prefix in `allow_tool` under the lock; returns the prefix's entries now.
    `repin` (the trust editor's Save) pins the current definitions of the prefix's trusted
    tools again; otherwise only tools that became trusted are pinned."""
    path = path_of(ALLOW_TOOL)
    with locked(path):
        current = _picked_up(path)
        updated = allowlist.replace_prefix(current, prefix, entries)
        atomic_write(path, allowlist.render(updated))
        now = allowlist.entries_for(updated, prefix)
        # Under the lock, like the write, so the mirror never holds an older file than the
        # newest write; the rest of the file is mirrored already (`_picked_up`).
        _mirror_allow_prefix(prefix, now, by)
        _mirrored[str(path)] = _stat_of(path)
        sync_pins(updated, prefix=prefix, repin=repin)
    return now


def _picked_up(path: Path) -> list[str]:
    """`allow_tool` as it is, read under its lock before the console changes it, with what
    another program changed since the last mirror mirrored (and audited as `file`'s). When
    the file is as this process last mirrored it, the mirror holds it already."""
    before = _stat_of(path)
    current = read_allow_tool()
    if before is None or _mirrored.get(str(path)) != before:
        _mirror_allow(current, audit.BY_FILE)
        _mirrored[str(path)] = before
    return current


_mirrored: dict[str, tuple | None] = {}  # allow_tool's stat when last mirrored whole


def _stat_of(path: Path) -> tuple | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def current_allow() -> list[str]:
    """The allow-list now: the file is the truth; the mirrored table answers when the file
    can't be read."""
    try:
        return read_allow_tool()
    except ConfigFileError:
        return list(AllowEntry.objects.values_list("entry", flat=True))


def add_allow_entry(entry: str, repin: bool = False, by: audit.Actor = audit.BY_SYSTEM) -> None:
    """Add one exact entry (approve and remember), leaving every other line alone; `repin`
    pins that tool's current definition again."""
    if allowlist.entry_problem(entry):
        raise ConfigFileError(f"{allowlist.entry_problem(entry)}: {entry!r}")
    path = path_of(ALLOW_TOOL)
    with locked(path):
        current = _picked_up(path)
        if entry not in current:
            atomic_write(path, allowlist.render([*current, entry]))
            current = [*current, entry]
        _mirror_allow_prefix(entry, allowlist.entries_for(current, entry), by)
        _mirrored[str(path)] = _stat_of(path)
        sync_pins(current, only=entry, repin=repin)


# --- mirroring into the database ----------------------------------------------------------


def _record(name: str, error: str) -> None:
    defaults = {"error": error, "checked_at": timezone.now()}
    FileState.objects.update_or_create(name=name, defaults=defaults)


def file_problem(name: str) -> str:
    row = FileState.objects.filter(name=name).first()
    return row.error if row else ""


def _mirror_allow(entries: list[str], by: audit.Actor) -> None:
    _mirror_allow_prefix("", entries, by, ALLOW_TOOL)


def _mirror_allow_prefix(prefix: str, entries: list[str], by: audit.Actor, object: str = "") -> None:
    """Make the mirrored entries starting with `prefix` these; what changed is one
    `trust.change` of `by`'s (`object`: the prefix, or the one entry, it was about)."""
    wanted = set(entries)
    with transaction.atomic():
        have = set(AllowEntry.objects.filter(entry__startswith=prefix).values_list("entry", flat=True))
        if have != wanted:
            AllowEntry.objects.filter(entry__in=have - wanted).delete()
            AllowEntry.objects.bulk_create([AllowEntry(entry=e) for e in sorted(wanted - have)])
            audit.record_lines(
                AuditAction.TRUST_CHANGE, object or prefix, sorted(wanted - have), sorted(have - wanted), by
            )


def sync_allow() -> bool:
    """Mirror `allow_tool` into the database; False (and a recorded problem) when unreadable.
    Under the file's lock: a change found here is another program's (`file`)."""
    path = path_of(ALLOW_TOOL)
    with locked(path):
        try:
            before = _stat_of(path)
            entries = read_allow_tool()
        except ConfigFileError as exc:
            log.warning("%s", exc)
            _record(ALLOW_TOOL, str(exc))
            return False
        _mirror_allow(entries, audit.BY_FILE)
        _mirrored[str(path)] = before
        sync_pins(entries)  # trust written by anyone else pins what it trusts, too
    _record(ALLOW_TOOL, "")
    return True


def sync_servers() -> set[str] | None:
    """Mirror `mcp.json` into Server rows; returns the names added, changed or removed, or None
    when the file can't be used (the last good list stays in force and the problem is recorded).
    Under the file's lock: a change found here is another program's (`file`)."""
    with locked(path_of(MCP_JSON)):
        return _sync_servers(audit.BY_FILE)


def _sync_servers(by: audit.Actor, data: dict | None = None) -> set[str] | None:
    """`sync_servers` of `data` (default: the file as it is now), each server added, changed
    or removed audited as `by`'s. The caller holds the file's lock."""
    try:
        data = read_mcp_json() if data is None else data
    except ConfigFileError as exc:
        log.warning("%s", exc)
        _record(MCP_JSON, str(exc))
        return None
    servers = data.get("servers", {})
    warnings = []
    wanted = {}
    for name, config in servers.items():
        problem = names.server_name_problem(name)
        if problem:
            warnings.append(f"server {name!r} ignored: invalid server name: {problem}")
            continue
        wanted[name] = config
    changed: set[str] = set()
    with transaction.atomic():
        existing = {s.name: s for s in Server.objects.select_for_update()}
        gone = set(existing) - set(wanted)
        for name in sorted(gone):
            audit.record(AuditAction.SERVER_REMOVE, name, actor=by, before=existing[name].config)
            existing[name].delete()
            changed.add(name)
        # A removed server's OAuth tokens and flows go with it (SPEC 16.4: nothing left behind
        # for a later server of the same name).
        OAuthAccount.objects.filter(server_name__in=gone).delete()
        OAuthFlow.objects.filter(server_name__in=gone).delete()
        for name, config in wanted.items():
            row = existing.get(name)
            if row is not None and row.config_hash == Server.hash_config(config):
                continue
            before, after = audit.server_states(row.config if row else None, config)
            action = AuditAction.SERVER_EDIT if row else AuditAction.SERVER_ADD
            audit.record(action, name, actor=by, before=before, after=after)
            row = row or Server(name=name)
            row.apply_config(config)
            if not row.enabled:
                row.state = ServerState.DISABLED
            elif row.misconfigured:
                row.state, row.last_error = ServerState.ERROR, "misconfigured: command or url is required"
            elif row.state in (ServerState.DISABLED, ServerState.ERROR) and row.last_error.startswith(
                "misconfigured"
            ):
                row.state, row.last_error = ServerState.CONNECTING, ""
            row.save()
            changed.add(name)
    for w in warnings:
        log.warning("%s", w)
    _record(MCP_JSON, "; ".join(warnings))
    return changed


# --- rules (SPEC 14.2) -----------------------------------------------------------------------


def read_rules_text() -> str:
    try:
        return path_of(RULES).read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigFileError(f"rules can't be read: {exc}") from None


def group_names() -> set[str]:
    """The groups that exist: a rule naming another is a bad line (SPEC 24.1)."""
    from .models import Group

    return set(Group.objects.values_list("name", flat=True))


def mirrored_rules() -> list[rules.Rule]:
    """The last good rules, as mirrored."""
    out = []
    for line, text in RuleLine.objects.values_list("line", "text"):
        try:
            rule = rules.parse_line(text, line)
        except rules.RuleError:  # written by an older parser; leave it out
            continue
        if rule is not None:
            out.append(rule)
    return out


def current_rules(mirror: bool = False) -> tuple[list[rules.Rule], str]:
    """(the rules in force, the file's problem): the file when it parses, else the last good
    rules and why the file can't be used. `mirror`: a file that parses is mirrored as the
    last good rules at once (the gate reads the file on a change, which can be sooner than
    the watcher's next look), unless a writer holds the file's lock (it mirrors what it
    writes itself: mirrored here, its change would be taken for another program's)."""
    path = path_of(RULES)
    with locked(path, wait=False) if mirror else nullcontext(False) as held:
        try:
            found = rules.parse(read_rules_text(), group_names())
        except (rules.RuleError, ConfigFileError) as exc:
            return mirrored_rules(), str(exc)
        if held:
            _mirror_rules(found, audit.BY_FILE)
    return found, ""


def write_rules(lines: list[str], by: audit.Actor = audit.BY_SYSTEM) -> list[rules.Rule]:
    """Replace the `rules` file with these lines (locked, atomic). A bad line raises
    RuleError before anything is written."""
    text = rules.render(lines)
    parsed = rules.parse(text, group_names())
    path = path_of(RULES)
    with locked(path):
        _pick_up_rules()
        atomic_write(path, text)
        _mirror_rules(parsed, by)
        _record(RULES, "")
    return parsed


def _mirror_rules(parsed: list[rules.Rule], by: audit.Actor) -> None:
    """Make the mirrored rules these; the lines added and removed are one `rules.change` of
    `by`'s (a line that only moved is no change)."""
    wanted = [(r.line, r.text) for r in parsed]
    with transaction.atomic():
        have = list(RuleLine.objects.values_list("line", "text"))
        if have != wanted:
            RuleLine.objects.all().delete()
            RuleLine.objects.bulk_create([RuleLine(line=n, text=t) for n, t in wanted])
            added, removed = audit.added_removed([t for _, t in have], [t for _, t in wanted])
            audit.record_lines(AuditAction.RULES_CHANGE, RULES, added, removed, by)


def _pick_up_rules() -> bool:
    """Mirror `rules` as it is (the caller holds its lock): what changed is another program's.
    False, and the problem recorded, for a file with a bad line."""
    try:
        parsed = rules.parse(read_rules_text(), group_names())
    except (rules.RuleError, ConfigFileError) as exc:
        log.warning("%s", exc)
        _record(RULES, str(exc))
        return False
    _mirror_rules(parsed, audit.BY_FILE)
    return True


def sync_rules() -> bool:
    """Mirror `rules` into the database; a file with a bad line is reported and the last good
    rules stay mirrored (and in force)."""
    with locked(path_of(RULES)):
        if not _pick_up_rules():
            return False
    _record(RULES, "")
    return True


# --- pins (SPEC 14.1) ------------------------------------------------------------------------


def pin_if_listed(name: str) -> None:
    """Pin `name` when `allow_tool` lists it now: for a call that sees an entry another
    program wrote before the pick-up has pinned it. Read under the file's lock, as every pin
    is, so an untrust written meanwhile is never undone by a pin from the older file; never
    waits for the lock (a writer holding it pins what it wrote; the caller may be inside a
    database transaction that writer waits for)."""
    with locked(path_of(ALLOW_TOOL), wait=False) as held:
        if held:
            sync_pins(current_allow(), only=name)


def sync_pins(entries: list[str], *, prefix: str = "", only: str | None = None, repin: bool = False) -> None:
    """Make the pins follow trust: a trusted tool without a pin is pinned at its current
    definition (`repin`: every trusted tool in scope is); a pin of a tool no longer trusted
    is dropped. Scope: names starting with `prefix`, or the one name `only`."""
    scope = only if only is not None else prefix
    if scope:  # only the entries that can cover a name in scope: a long allow_tool is cheap
        entries = [
            e for e in entries if e.startswith(scope) or (e.endswith("*") and scope.startswith(e[:-1]))
        ]
    match = allowlist.Matcher(entries)
    tools = Tool.objects.exclude(digest="")
    pins = ToolPin.objects.all()
    if only is not None:
        tools, pins = tools.filter(registered_name=only), pins.filter(registered_name=only)
    elif prefix:
        tools = tools.filter(registered_name__startswith=prefix)
        pins = pins.filter(registered_name__startswith=prefix)
    with transaction.atomic():
        have = dict(pins.values_list("registered_name", "digest"))
        gone = [n for n in have if not match(n)]
        if gone:
            ToolPin.objects.filter(registered_name__in=gone).delete()
        fresh = []
        for name, digest, description, schema in tools.values_list(
            "registered_name", "digest", "description", "input_schema"
        ):
            if not match(name) or (name in have and (not repin or have[name] == digest)):
                continue
            fields = {"digest": digest, "description": description, "input_schema": schema}
            if name in have:
                ToolPin.objects.filter(registered_name=name).update(pinned_at=timezone.now(), **fields)
            else:
                fresh.append(ToolPin(registered_name=name, **fields))
        ToolPin.objects.bulk_create(fresh, ignore_conflicts=True)


def trust_states(tools: list, match: "allowlist.Matcher | None" = None) -> dict[str, str]:
    """`trusted`, `changed` or `untrusted` per registered name (SPEC 14.1). `match`: the
    allow-list's Matcher, when the caller has built one already. A listed tool with a digest
    and no pin yet is not trusted yet (`calls.trusted`: the pin comes first)."""
    if match is None:
        match = allowlist.Matcher(current_allow())
    pins = dict(ToolPin.objects.values_list("registered_name", "digest"))
    out = {}
    for tool in tools:
        name = tool.registered_name
        if not match(name) or (tool.digest and name not in pins):
            out[name] = "untrusted"
        elif tool.digest and pins[name] != tool.digest:
            out[name] = "changed"
        else:
            out[name] = "trusted"
    return out


class FileWatcher:
    """Notices edits to the shared files, so edits by others are mirrored within 2 seconds.

    A stat (mtime, size, inode) is cheap enough to check every second. An in-place edit of the
    same size within the file system's timestamp resolution keeps the stat, so while a file's
    mtime is recent its content hash is compared too.
    """

    RECENT_NS = 3_000_000_000

    def __init__(self) -> None:
        self._seen: dict[str, tuple | None] = {}
        self._hashes: dict[str, str] = {}

    @staticmethod
    def _stat(name: str) -> tuple | None:
        try:
            st = path_of(name).stat()
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def _hash(self, name: str) -> str:
        try:
            return hashlib.sha256(path_of(name).read_bytes()).hexdigest()
        except OSError:
            return ""

    def changed(self, name: str) -> bool:
        now = self._stat(name)
        recent = now is not None and time.time_ns() - now[0] < self.RECENT_NS
        if name in self._seen and self._seen[name] == now:
            if not recent:
                return False
            digest = self._hash(name)
            if digest == self._hashes.get(name):
                return False
            self._hashes[name] = digest
            return True
        self._seen[name] = now
        self._hashes[name] = self._hash(name) if recent else ""
        return True

    def check(self) -> set[str] | None:
        """Sync what changed; returns the server names that changed in `mcp.json` (or None)."""
        changed_servers: set[str] | None = set()
        if self.changed(ALLOW_TOOL):
            sync_allow()
        if self.changed(MCP_JSON):
            changed_servers = sync_servers()
        if self.changed(RULES):
            sync_rules()
        return changed_servers
