"""From a server's `mcp.json` entry to an `mcp` Client target: transports, `$VAR` expansion
and the Authorization rule (SPEC 2.1). Expanded values live only in memory, never in files."""

import os
import re
from pathlib import Path
from typing import IO

import httpx2
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from .stdio import stdio_transport

_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def expand(value: str, environ: dict[str, str] | None = None) -> str:
    """`$VAR` and `${VAR}` from the environment; unknown variables become empty."""
    env = os.environ if environ is None else environ
    return _VAR.sub(lambda m: env.get(m.group(1) or m.group(2), ""), value)


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


def make_target(config: dict, transport: str, errlog: IO[str], tag: str = ""):
    """The transport object the Client connects through."""
    if transport == "stdio":
        return stdio_transport(stdio_params(config, tag), errlog)
    url = expand(config["url"]).strip()
    headers = expanded_headers(config)
    if transport == "sse":
        return sse_client(url, headers=headers)
    client = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=None))
    return _OwnedHttp(url, client)


class _OwnedHttp:
    """Streamable HTTP through our own httpx client (for headers), closed with the session."""

    def __init__(self, url: str, client: "httpx2.AsyncClient") -> None:
        self.url = url
        self.client = client
        self._cm = None

    async def __aenter__(self):
        self._cm = streamable_http_client(self.url, http_client=self.client)
        return await self._cm.__aenter__()

    async def __aexit__(self, *exc):
        try:
            return await self._cm.__aexit__(*exc)
        finally:
            await self.client.aclose()


def sweep(tag: str) -> int:
    """End every process still carrying a session's tag. The SDK signals the server's process
    group only when the server itself won't exit, so a server that exits on EOF can leave its
    own children (npx -> node, shells) behind."""
    import psutil

    ended = 0
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(TAG_VAR) == tag:
                proc.kill()
                ended += 1
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return ended
