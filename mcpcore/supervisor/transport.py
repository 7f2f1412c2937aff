"""From a server's `mcp.json` entry to an `mcp` Client target: transports, `$VAR` expansion
and the Authorization rule (SPEC 2.1, 12.3). Expanded values live only in memory, never in
files, and `redact` keeps them out of the errors the console stores and logs."""

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import IO, Any

import anyio
import httpx2
import psutil
from django.conf import settings
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from ..choices import Transport
from ..schemas import Sandbox
from . import sandbox as walls
from . import stdio
from .stdio import stdio_transport

_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


# The console's own settings are never handed to a server: whoever may edit mcp.json must not
# be able to read the secret key or the database password through `$VAR` (SPEC 12.3).
_PROTECTED_PREFIXES = ("DJANGO_", "AGENVOY_")
_PROTECTED = {"DATABASE_URL", "REDIS_URL"}


def protected(name: str) -> bool:
    return name.startswith(_PROTECTED_PREFIXES) or name in _PROTECTED


def expand(value: str, environ: Mapping[str, str] | None = None) -> str:
    """`$VAR` and `${VAR}` from the environment; unknown variables become empty, and the
    console's own settings are left as written."""
    env = os.environ if environ is None else environ

    def value_of(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        return m.group(0) if protected(name) else env.get(name, "")

    return _VAR.sub(value_of, value)


REDACTED = "********"
_MIN_SECRET = 4  # shorter values would blank out ordinary words of a message


def secret_values(config: dict, environ: Mapping[str, str] | None = None) -> list[str]:
    """What a server's connection carries that must not be shown: every expanded env and
    headers value (SPEC 2.1: all secrets) and every value `$VAR` put into its args. Longest
    first, so a secret that contains another is replaced whole."""
    env = os.environ if environ is None else environ
    found: set[str] = set()
    for key in ("env", "headers"):
        for value in (config.get(key) or {}).values():
            expanded = expand(str(value), env)
            found.update({expanded, auth_header(expanded), expanded.strip()})
    oauth = config.get("oauth")
    if isinstance(oauth, dict) and isinstance(oauth.get("client_secret"), str):
        found.add(expand(oauth["client_secret"], env))
    for text in [*(config.get("args") or []), *(str(v) for v in (config.get("env") or {}).values())]:
        for m in _VAR.finditer(str(text)):
            name = m.group(1) or m.group(2)
            if not protected(name):
                found.add(env.get(name, ""))
    return sorted((v for v in found if len(v) >= _MIN_SECRET), key=len, reverse=True)


def redact(text: str, secrets: list[str]) -> str:
    """`text` with every secret value replaced by the mask."""
    for value in secrets:
        if value in text:
            text = text.replace(value, REDACTED)
    return text


def auth_header(value: str) -> str:
    """A single-token Authorization value gets `Bearer ` in front; a value with a scheme is
    left alone."""
    value = value.strip()
    if value and " " not in value:
        return f"Bearer {value}"
    return value


def expanded_headers(config: dict) -> dict[str, str]:
    headers = {}
    for key, value in (config.get("headers") or {}).items():
        value = expand(str(value))
        if key.lower() == "authorization":
            value = auth_header(value)
        headers[key] = value
    return headers


TAG_VAR = "AGENVOY_SESSION_TAG"


def stdio_params(config: dict, tag: str = "", cwd: Path | None = None) -> StdioServerParameters:
    env = {k: expand(str(v)) for k, v in (config.get("env") or {}).items()}
    if tag:
        # Children inherit the tag, so the whole tree can be found and ended after the session.
        env[TAG_VAR] = tag
    # Servers launched through npx/uvx need the usual environment to find their tools;
    # the SDK passes only a safe minimum, so hand PATH and the like through as well.
    base = {k: v for k, v in os.environ.items() if k in _PASS_THROUGH}
    return StdioServerParameters(
        command=expand(config["command"]),
        args=[expand(str(a)) for a in config.get("args") or []],
        env={**base, **env},
        cwd=str(cwd) if cwd else None,
    )


_PASS_THROUGH = {
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "USER",
    "SHELL",
    "TERM",
    "NODE_PATH",
    "PYENV_ROOT",
    "VIRTUAL_ENV",
}


class SandboxUnavailable(Exception):
    """A sandboxed server that can't be started in its sandbox (SPEC 26): bubblewrap missing or
    unusable, or the walls as configured can't be set up. It is not started at all."""

    def __init__(self, why: str) -> None:
        super().__init__(f"sandbox unavailable: {why}")


PROBE_TIMEOUT = 10.0  # seconds bubblewrap gets to run `true` in a sandbox
_USABLE: set[str] = set()  # the bwrap programs seen to work in this process
_PROBING = anyio.Lock()  # servers connecting together wait for one probe, not one each


async def sandbox_ready(sandbox: Sandbox) -> str:
    """The `bwrap` to run `sandbox`'s server with: found on PATH and seen to start a sandbox
    once in this process (a failure is probed again at the next connect, so installing it is
    enough). SandboxUnavailable otherwise."""
    if sandbox.problem:
        raise SandboxUnavailable(sandbox.problem)
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxUnavailable("bwrap not found (install the Debian package bubblewrap)")
    if bwrap not in _USABLE:
        async with _PROBING:
            if bwrap not in _USABLE:
                await _probe(bwrap)
                _USABLE.add(bwrap)
    return bwrap


async def _probe(bwrap: str) -> None:
    """Run `true` in a sandbox (where the system keeps it, whatever the console's PATH says);
    SandboxUnavailable with bubblewrap's own words when it can't."""
    probe = walls.bwrap_command(bwrap, "true", [], path=os.pathsep.join(["/usr/bin", "/bin"]))
    try:
        with anyio.fail_after(PROBE_TIMEOUT):
            done = await anyio.run_process(probe, check=False, stdin=subprocess.DEVNULL)
    except TimeoutError:
        raise SandboxUnavailable(f"bwrap did not start a sandbox within {PROBE_TIMEOUT:g} s") from None
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        raise SandboxUnavailable(said[-1] if said else f"bwrap exited with {done.returncode}")


def sandboxed(params: StdioServerParameters, sandbox: Sandbox, bwrap: str) -> StdioServerParameters:
    """The same server, started by bubblewrap inside its walls, with its environment as it
    would have it unsandboxed (HOME the private home)."""
    env = params.env or {}
    try:
        argv = walls.bwrap_command(
            bwrap,
            params.command,
            params.args,
            read=sandbox.read,
            write=sandbox.write,
            network=sandbox.network,
            path=env.get("PATH") or os.environ.get("PATH"),
            hidden=_console_folders(),
        )
    except walls.SandboxError as exc:
        raise SandboxUnavailable(str(exc)) from None
    return StdioServerParameters(command=argv[0], args=argv[1:], env=walls.sandbox_env(env))


def _console_folders() -> tuple[str, ...]:
    """What no server may see (SPEC 26): the data folder (the database, the secret key) and
    AGENVOY_HOME (`mcp.json` with every server's secrets), as written and resolved."""
    out: list[str] = []
    for folder in (settings.DATA_DIR, settings.AGENVOY_HOME):
        out += {os.path.abspath(folder), os.path.realpath(folder)}
    return tuple(out)


def make_target(
    config: dict,
    transport: str,
    errlog: IO[str],
    tag: str = "",
    auth: httpx2.Auth | None = None,
    sandbox: tuple[Sandbox, str] | None = None,
):
    """The transport object the Client connects through; `auth` (an OAuth provider, SPEC 16)
    signs the HTTP requests of an OAuth server; `sandbox` (the walls and the `bwrap` that
    `sandbox_ready` gave) puts a stdio server in a sandbox (SPEC 26)."""
    if transport == Transport.STDIO:
        params = stdio_params(config, tag)
        if sandbox is not None:
            params = sandboxed(params, *sandbox)
        return stdio_transport(params, errlog)
    # Not expanded (SPEC 12.3): a URL built from the environment could send a header's secret
    # to a host nobody wrote down.
    url = config["url"].strip()
    headers = expanded_headers(config)
    if transport == Transport.SSE:
        return sse_client(url, headers=headers, auth=auth)
    client = httpx2.AsyncClient(
        auth=auth,
        headers=headers,
        timeout=httpx2.Timeout(30.0, read=None),
        transport=_Bounded(httpx2.AsyncHTTPTransport()),
    )
    return _OwnedHttp(url, client)


class MessageTooLarge(httpx2.StreamError):
    """An HTTP answer over the bound; the SDK turns it into an error for that request."""


class _Bounded(httpx2.AsyncBaseTransport):
    """Caps each JSON answer at `stdio.MAX_MESSAGE` bytes as it streams in (SSE streams are
    capped per event by the SDK), so a server can't make the console buffer without bound."""

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self.inner = inner

    async def handle_async_request(self, request):
        response = await self.inner.handle_async_request(request)
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            response.stream = _BoundedStream(response.stream, stdio.MAX_MESSAGE)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


class _BoundedStream(httpx2.AsyncByteStream):
    def __init__(self, inner, limit: int) -> None:
        self.inner = inner
        self.limit = limit

    async def __aiter__(self):
        size = 0
        async for chunk in self.inner:
            size += len(chunk)
            if size > self.limit:
                raise MessageTooLarge(
                    f"the server's answer is over the {self.limit // 2**20} MiB limit and was dropped"
                )
            yield chunk

    async def aclose(self) -> None:
        close = getattr(self.inner, "aclose", None)
        if close is not None:
            await close()


class _OwnedHttp:
    """Streamable HTTP through our own httpx client (for headers), closed with the session."""

    def __init__(self, url: str, client: "httpx2.AsyncClient") -> None:
        self.url = url
        self.client = client
        self._cm: AbstractAsyncContextManager[Any] | None = None

    async def __aenter__(self):
        # One SSE event (one message) may be as large as a stdio line, and no larger.
        self._cm = cm = streamable_http_client(
            self.url, http_client=self.client, max_sse_event_size=stdio.MAX_MESSAGE
        )
        return await cm.__aenter__()

    async def __aexit__(self, *exc):
        assert self._cm is not None  # exited only once entered
        try:
            return await self._cm.__aexit__(*exc)
        finally:
            await self.client.aclose()


def sweep(tag: str) -> int:
    """End every process still carrying a session's tag. The SDK signals the server's process
    group only when the server itself won't exit, so a server that exits on EOF can leave its
    own children (npx -> node, shells) behind."""
    ended = 0
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(TAG_VAR) == tag:
                proc.kill()
                ended += 1
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return ended
