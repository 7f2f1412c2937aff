"""bubblewrap's command line for a sandboxed stdio server (SPEC 26): what it reads, what it
writes, and nothing else. Pure: no Django, no `mcp`; it only looks at the file system to find
the command's own files (its folder tree as written and as resolved, the interpreter a script
names), so it is tested without a console.

The walls, in bubblewrap's terms: every namespace unshared (`--unshare-all`: its own network
with only its own loopback unless `network`, its own PID namespace), the system read-only, the
command's trees, existing absolute arguments and `read` read-only, `write` read-write, a private
tmpfs `/tmp` and home, the root itself read-only, `--die-with-parent` so it ends with the
console, `--new-session` so it can't type into a terminal.
"""

import glob
import os
import shutil
from collections.abc import Mapping, Sequence

HOME = "/home/sandbox"  # the private home: HOME and the working directory, a tmpfs
SYSTEM = ("/usr", "/bin", "/sbin", "/etc")  # with every /lib* (lib64 is absent on some machines)
_BIN = ("bin", ".bin")  # a command's folder whose parent is its package (venv, prefix, node_modules)


class SandboxError(ValueError):
    """The sandbox as configured can't be set up (a `read` or `write` path that isn't there)."""


def bwrap_command(
    bwrap: str,
    command: str,
    args: Sequence[str],
    *,
    read: Sequence[str] = (),
    write: Sequence[str] = (),
    network: bool = False,
    path: str | None = None,
    hidden: Sequence[str] = (),
) -> list[str]:
    """`bwrap ... -- command args`: the full argv that runs `command` (found on `path`, a PATH
    value, when it has no slash) sandboxed. `hidden` (the console's data folder and
    AGENVOY_HOME) is an empty folder inside whatever readable tree holds it: an argument `~`
    must not show `mcp.json`. FileNotFoundError when the command isn't there, SandboxError when
    a `read` or `write` path isn't."""
    program = shutil.which(command, path=path) if "/" not in command else command
    if program is None or not os.path.exists(program):
        raise FileNotFoundError(2, "No such file or directory", command)
    program = os.path.abspath(program)
    for kind, paths in (("read", read), ("write", write)):
        for p in paths:
            if not os.path.exists(p):
                raise SandboxError(f"{kind} path {p} does not exist")
    argv = [bwrap, "--unshare-all", "--die-with-parent", "--new-session"]
    if network:
        argv.append("--share-net")
    argv += system_binds()
    argv += ["--proc", "/proc", "--dev", "/dev"]
    readable = command_trees(program, path) + [p for a in args for p in argument_paths(a)] + list(read)
    binds = [(p, "--ro-bind") for p in _uncovered(readable)] + [(p, "--bind") for p in write]
    # Shallow first, so a deeper path (a `write` folder inside a `read` one, the private home
    # inside a readable `/home`) wins where they meet; the private /tmp and home go before the
    # binds of their own depth, so a `write` of `/tmp` itself is the host's.
    mounts = [("/tmp", "--tmpfs"), (HOME, "--tmpfs"), *dict(binds).items()]
    for p, kind in sorted(mounts, key=lambda item: item[0].rstrip("/").count("/")):
        argv += [kind, p] if kind == "--tmpfs" else [kind, p, p]
    for h in hidden:
        if any(_inside(h, p) for p, _ in binds):
            argv += ["--tmpfs", h]
    # Last: the mount points made above sit on the root tmpfs, which must not take writes.
    argv += ["--remount-ro", "/", "--chdir", HOME, "--", program, *args]
    return argv


def _inside(p: str, folder: str) -> bool:
    folder = folder.rstrip("/")
    return p == folder or p.startswith(folder + "/")


def sandbox_env(env: Mapping[str, str]) -> dict[str, str]:
    """The server's environment as it would get it unsandboxed, with HOME (and TMPDIR, when
    set) pointing at what it has inside."""
    out = {**env, "HOME": HOME}
    if "TMPDIR" in out:
        out["TMPDIR"] = "/tmp"
    return out


def system_binds() -> list[str]:
    """The system read-only, as this machine has it: a symlinked `/bin` or `/lib64` stays the
    same symlink inside, a folder that isn't there is left out."""
    out: list[str] = []
    for p in [*SYSTEM, *sorted(glob.glob("/lib*"))]:
        if os.path.islink(p):
            out += ["--symlink", os.readlink(p), p]
        elif os.path.isdir(p):
            out += ["--ro-bind", p, p]
    return out


def command_trees(program: str, path: str | None = None) -> list[str]:
    """The folders a command needs, as written and as resolved: its tree, and for a script the
    tree of the interpreter its `#!` line names (a virtualenv's python, and the interpreter
    that one links to)."""
    found: list[str] = []
    for p in _written_and_resolved(program):
        found.append(tree(p))
    interpreter = _interpreter(program, path)
    if interpreter:
        for p in _written_and_resolved(interpreter):
            found.append(tree(p))
    return found


def tree(p: str) -> str:
    """The folder tree a file belongs to: the outermost `node_modules` above it; for a file in
    a `bin` folder, that folder's parent when it is a package (a virtualenv, an interpreter's
    prefix: it has `lib` or `pyvenv.cfg`), never `/`; else the file's own folder."""
    parts = p.split("/")
    if "node_modules" in parts:
        return "/".join(parts[: parts.index("node_modules") + 1])
    folder = os.path.dirname(p)
    parent = os.path.dirname(folder)
    if os.path.basename(folder) in _BIN and parent != "/" and _is_package(parent):
        return parent
    return folder


def _is_package(folder: str) -> bool:
    return any(os.path.exists(os.path.join(folder, name)) for name in ("pyvenv.cfg", "lib"))


def argument_paths(arg: str) -> list[str]:
    """What an argument that is an existing absolute path makes readable: the path itself (as
    written and resolved), or for a file in a `node_modules`, the whole of it (its package needs
    its dependencies)."""
    if not arg.startswith("/") or not os.path.exists(arg):
        return []
    return [tree(p) if "/node_modules/" in p else p for p in _written_and_resolved(arg)]


def _written_and_resolved(p: str) -> list[str]:
    real = os.path.realpath(p)
    return [p] if real == p else [p, real]


def _interpreter(program: str, path: str | None) -> str | None:
    """The interpreter a script's `#!` line names (`/usr/bin/env node`: node, found on PATH)."""
    try:
        with open(program, "rb") as f:
            head = f.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode(errors="replace").split()
    if not words:
        return None
    if os.path.basename(words[0]) == "env" and len(words) > 1:
        named = [w for w in words[1:] if not w.startswith("-")]
        return shutil.which(named[0], path=path) if named else None
    return words[0] if os.path.isabs(words[0]) and os.path.exists(words[0]) else None


def _uncovered(paths: Sequence[str]) -> list[str]:
    """`paths` without those the system binds already show (or that repeat one another)."""
    covered = [*SYSTEM, *glob.glob("/lib*")]
    out: list[str] = []
    for p in paths:
        p = os.path.normpath(p)
        if p == "/" or any(p == c or p.startswith(c + "/") for c in covered) or p in out:
            continue
        out.append(p)
    return out
