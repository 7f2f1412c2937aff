"""`mcp.json` and `allow_tool` in $AGENVOY_HOME: reading, atomic locked writes, and mirroring
them into the database (SPEC 2). The files are the shared truth with the Agenvoy CLI."""

import fcntl
import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from . import allowlist, names

log = logging.getLogger("mcpcore.files")

MCP_JSON = "mcp.json"
ALLOW_TOOL = "allow_tool"


class ConfigFileError(Exception):
    """A shared file that can't be used; the message names the problem."""


def home() -> Path:
    return Path(settings.AGENVOY_HOME)


def path_of(name: str) -> Path:
    return home() / name


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
def locked(path: Path) -> Iterator[None]:
    """Advisory lock (`flock` on `<file>.lock` beside it) held across read-modify-write, so two
    writers (two consoles, or the console and the Agenvoy CLI) never lose each other's update."""
    private_dir(path.parent)
    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
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
    for name in (MCP_JSON, ALLOW_TOOL):
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


def update_servers(mutate: Callable[[dict], object]) -> object:
    """Locked read-modify-write of `mcp.json`'s `servers`; other top-level keys are kept.

    An unparsable file raises ConfigFileError and is never overwritten.
    """
    path = path_of(MCP_JSON)
    with locked(path):
        data = read_mcp_json()
        before = json.dumps(data, sort_keys=True)
        servers = data.setdefault("servers", {})
        outcome = mutate(servers)
        # A no-op edit (say, removing an unknown server) leaves a hand-written file as it is.
        if json.dumps(data, sort_keys=True) != before or not path.exists():
            atomic_write(path, render_mcp_json(data))
        # Mirror while still holding the lock: done after it, a concurrent writer's newer
        # file could be mirrored first and then overwritten here with this older one.
        sync_servers()
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
            config["type"] = "streamable-http"
        if not (_nonempty(config.get("command")) or _nonempty(config.get("url"))):
            raise ConfigFileError(f"server {name}: command or url is required")
        out[name] = config
    if not out:
        raise ConfigFileError("the file lists no servers")
    return out


def _nonempty(value: object) -> bool:
    return isinstance(value, str) and value.strip() != ""


def import_servers(servers: dict[str, dict]) -> int:
    def mutate(current: dict) -> int:
        current.update(servers)
        return len(servers)

    return update_servers(mutate)  # type: ignore[return-value]


# --- allow_tool ---------------------------------------------------------------------------


def read_allow_tool() -> list[str]:
    try:
        text = path_of(ALLOW_TOOL).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigFileError(f"allow_tool can't be read: {exc}") from None
    return allowlist.parse(text)


def replace_allow_prefix(prefix: str, entries: list[str]) -> list[str]:
    """Replace-by-prefix in `allow_tool` under the lock; returns the prefix's entries now."""
    path = path_of(ALLOW_TOOL)
    with locked(path):
        before = _stat_of(path)
        updated = allowlist.replace_prefix(read_allow_tool(), prefix, entries)
        atomic_write(path, allowlist.render(updated))
        now = allowlist.entries_for(updated, prefix)
        # Under the lock, like the write, so the mirror never holds an older file than the
        # newest write. When the file was as we last mirrored it, only this prefix changed.
        if before is not None and _mirrored.get(str(path)) == before:
            _mirror_allow_prefix(prefix, now)
        else:
            _mirror_allow(updated)
        _mirrored[str(path)] = _stat_of(path)
    return now


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
    from .models import AllowEntry

    try:
        return read_allow_tool()
    except ConfigFileError:
        return list(AllowEntry.objects.values_list("entry", flat=True))


def add_allow_entry(entry: str) -> None:
    """Add one exact entry (approve and remember), leaving every other line alone."""
    if allowlist.entry_problem(entry):
        raise ConfigFileError(f"{allowlist.entry_problem(entry)}: {entry!r}")
    path = path_of(ALLOW_TOOL)
    with locked(path):
        current = read_allow_tool()
        if entry not in current:
            atomic_write(path, allowlist.render([*current, entry]))
            current = [*current, entry]
        _mirror_allow(current)
        _mirrored[str(path)] = _stat_of(path)


# --- mirroring into the database ----------------------------------------------------------


def _record(name: str, error: str) -> None:
    from .models import FileState

    defaults = {"error": error, "checked_at": timezone.now()}
    FileState.objects.update_or_create(name=name, defaults=defaults)


def file_problem(name: str) -> str:
    from .models import FileState

    row = FileState.objects.filter(name=name).first()
    return row.error if row else ""


def _mirror_allow(entries: list[str]) -> None:
    from .models import AllowEntry

    wanted = set(entries)
    with transaction.atomic():
        have = set(AllowEntry.objects.values_list("entry", flat=True))
        if have != wanted:
            AllowEntry.objects.filter(entry__in=have - wanted).delete()
            AllowEntry.objects.bulk_create([AllowEntry(entry=e) for e in sorted(wanted - have)])


def _mirror_allow_prefix(prefix: str, entries: list[str]) -> None:
    from .models import AllowEntry

    wanted = set(entries)
    with transaction.atomic():
        have = set(AllowEntry.objects.filter(entry__startswith=prefix).values_list("entry", flat=True))
        if have != wanted:
            AllowEntry.objects.filter(entry__in=have - wanted).delete()
            AllowEntry.objects.bulk_create([AllowEntry(entry=e) for e in sorted(wanted - have)])


def sync_allow() -> bool:
    """Mirror `allow_tool` into the database; False (and a recorded problem) when unreadable."""
    path = path_of(ALLOW_TOOL)
    try:
        before = _stat_of(path)
        entries = read_allow_tool()
    except ConfigFileError as exc:
        log.warning("%s", exc)
        _record(ALLOW_TOOL, str(exc))
        return False
    _mirror_allow(entries)
    _mirrored[str(path)] = before
    _record(ALLOW_TOOL, "")
    return True


def sync_servers() -> set[str] | None:
    """Mirror `mcp.json` into Server rows; returns the names added, changed or removed, or None
    when the file can't be used (the last good list stays in force and the problem is recorded)."""
    from .models import Server

    try:
        data = read_mcp_json()
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
        for name in set(existing) - set(wanted):
            existing[name].delete()
            changed.add(name)
        for name, config in wanted.items():
            row = existing.get(name)
            if row is not None and row.config_hash == Server.hash_config(config):
                continue
            row = row or Server(name=name)
            row.apply_config(config)
            if not row.enabled:
                row.state = "disabled"
            elif row.misconfigured:
                row.state, row.last_error = "error", "misconfigured: command or url is required"
            elif row.state in ("disabled", "error") and row.last_error.startswith("misconfigured"):
                row.state, row.last_error = "connecting", ""
            row.save()
            changed.add(name)
    for w in warnings:
        log.warning("%s", w)
    _record(MCP_JSON, "; ".join(warnings))
    return changed


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
        return changed_servers
