"""A lean benchmark client: keep-alive HTTP/1.1 over asyncio streams, and MCP's JSON-RPC over
it in both protocol eras, so that what a benchmark measures is the server, not a client
library (httpx2 and the SDK's streamable-HTTP transport cost more CPU per call than the
console does on this 2-core machine; `client_cpu` shows what this one costs).

Enough HTTP for our servers (Daphne, uvicorn): one request at a time per connection, bodies
with Content-Length or chunked, server-sent events read as they arrive."""

import asyncio
import itertools
import json
import time
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    PROTOCOL_VERSION_META_KEY,
)

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
CLIENT_INFO = {"name": "agenvoy-bench-raw", "version": "1"}


def client_cpu() -> float:
    """CPU seconds (user + system) used so far by this process: the benchmark's clients."""
    return time.process_time()


class Response:
    __slots__ = ("status", "headers", "body")

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    @property
    def status_code(self) -> int:  # as httpx2 names it, so either client fits a benchmark
        return self.status

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.body)


class Connection:
    """One keep-alive HTTP/1.1 connection. `request` sends and reads a whole answer; with
    `on_event`, a `text/event-stream` answer is handed over event by event as it arrives."""

    def __init__(self, url: str, headers: dict[str, str] | None = None) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname, parts.port or 80
        self.fixed = "".join(f"{k}: {v}\r\n" for k, v in {"Host": parts.netloc, **(headers or {})}.items())
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def _open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port, limit=2**22)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.reader = self.writer = None

    async def request(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        on_event: Callable[[bytes], Awaitable[None] | None] | None = None,
    ) -> Response:
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        head = f"{method} {path} HTTP/1.1\r\n{self.fixed}{extra}Content-Length: {len(body)}\r\n\r\n"
        data = head.encode("latin-1") + body
        reused = self.writer is not None
        if not reused:
            await self._open()
        self.writer.write(data)
        try:
            return await self._answer(on_event)
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            self.close()
            if not reused or (isinstance(exc, asyncio.IncompleteReadError) and exc.partial):
                raise
        except BaseException:
            self.close()  # half-read: the connection cannot be reused
            raise
        # The server had closed the idle connection (uvicorn does after 5 s): once more, anew.
        await self._open()
        self.writer.write(data)
        try:
            return await self._answer(on_event)
        except BaseException:
            self.close()
            raise

    async def _answer(self, on_event) -> Response:
        reader = self.reader
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            if line:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
        events = on_event is not None and headers.get("content-type", "").startswith("text/event-stream")
        if "content-length" in headers:
            body = await reader.readexactly(int(headers["content-length"]))
            if events:
                await _events(body, on_event)
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            body = await self._chunked(on_event if events else None)
        else:  # to the end of the connection
            body = await reader.read()
            self.close()
        if headers.get("connection", "").lower() == "close":
            self.close()
        return Response(status, headers, body)

    async def _chunked(self, on_event) -> bytes:
        reader, parts, pending = self.reader, [], b""
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                break
            chunk = (await reader.readexactly(size + 2))[:-2]
            parts.append(chunk)
            if on_event is not None:
                pending += chunk
                *whole, pending = pending.replace(b"\r\n", b"\n").split(b"\n\n")
                if whole:
                    await _events(b"\n\n".join(whole) + b"\n\n", on_event)
        if on_event is not None and pending.strip():
            await _events(pending, on_event)
        return b"".join(parts)


async def _events(raw: bytes, on_event) -> None:
    for event in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = b"\n".join(line[5:].lstrip() for line in event.split(b"\n") if line.startswith(b"data:"))
        if data:
            out = on_event(data)
            if out is not None:
                await out


def sse_messages(body: bytes) -> list[dict]:
    """The JSON-RPC messages of a whole `text/event-stream` body."""
    out = []
    for event in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = b"\n".join(line[5:].lstrip() for line in event.split(b"\n") if line.startswith(b"data:"))
        if data:
            out.append(json.loads(data))
    return out


class McpError(Exception):
    pass


class RawMcp:
    """An MCP client that writes JSON-RPC by hand over `Connection`s: the 2026-07-28 era (no
    session; per-request `_meta` and `MCP-Protocol-Version`/`Mcp-Method`/`Mcp-Name` headers) or
    2025-11-25 (`initialize`, then `Mcp-Session-Id` on every POST). Each `call` takes a free
    connection of its own, opening one when none is free, so N concurrent callers use N."""

    def __init__(self, url: str, era: str = MODERN, token: str | None = None) -> None:
        parts = urlsplit(url)
        self.base, self.path, self.era = f"{parts.scheme}://{parts.netloc}", parts.path or "/", era
        self.headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        self.session_id: str | None = None
        self.instructions: str | None = None
        self._free: list[Connection] = []
        self._all: list[Connection] = []
        self._ids = itertools.count(1)

    async def __aenter__(self):
        if self.era == LEGACY:
            await self._initialize()
        return self

    async def __aexit__(self, *exc) -> None:
        if self.session_id is not None:
            try:
                await self._send("DELETE", b"", {"Mcp-Session-Id": self.session_id})
            except (OSError, asyncio.IncompleteReadError):
                pass
        for conn in self._all:
            conn.close()

    async def _send(self, method: str, body: bytes, headers: dict, on_event=None) -> Response:
        conn = self._free.pop() if self._free else None
        if conn is None:
            conn = Connection(self.base, self.headers)
            self._all.append(conn)
        try:
            response = await conn.request(method, self.path, body, headers, on_event)
        finally:
            self._free.append(conn)
        return response

    async def _initialize(self) -> None:
        body = {
            "jsonrpc": "2.0",
            "id": next(self._ids),
            "method": "initialize",
            "params": {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": CLIENT_INFO},
        }
        r = await self._send("POST", json.dumps(body).encode(), {})
        answer = self._answer(r, body["id"])
        self.session_id = r.headers.get("mcp-session-id")
        self.instructions = answer.get("instructions")
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        r = await self._send(
            "POST", json.dumps(note).encode(), self._era_headers("notifications/initialized")
        )
        if r.status != 202:
            raise McpError(f"initialized: HTTP {r.status} {r.body[:200]!r}")

    def _era_headers(self, method: str, name: str | None = None) -> dict:
        if self.era == LEGACY:
            h = {"MCP-Protocol-Version": LEGACY}
            if self.session_id:
                h["Mcp-Session-Id"] = self.session_id
            return h
        h = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
        if name is not None:
            h["Mcp-Name"] = name
        return h

    @staticmethod
    def _answer(r: Response, request_id) -> dict:
        if r.status != 200:
            raise McpError(f"HTTP {r.status}: {r.body[:300]!r}")
        if r.headers.get("content-type", "").startswith("text/event-stream"):
            messages = [m for m in sse_messages(r.body) if m.get("id") == request_id]
            if not messages:
                raise McpError(f"no answer in the event stream: {r.body[:300]!r}")
            message = messages[-1]
        else:
            message = json.loads(r.body)
        if "error" in message:
            raise McpError(f"{message['error'].get('code')}: {message['error'].get('message')}")
        return message["result"]

    async def list_tools(self) -> dict:
        """`tools/list` (one page); the result as a dict."""
        return await self.rpc("tools/list")

    async def rpc(self, method: str, params: dict | None = None, name: str | None = None) -> dict:
        """Any request without progress (`prompts/list`, `resources/read`, ...); its result as a
        dict. `name` is the era's `Mcp-Name` header (a URI or prompt name, where it has one)."""
        request_id = next(self._ids)
        params = dict(params or {})
        if self.era == MODERN:
            params["_meta"] = {
                PROTOCOL_VERSION_META_KEY: MODERN,
                CLIENT_CAPABILITIES_META_KEY: {},
                CLIENT_INFO_META_KEY: CLIENT_INFO,
            }
        body = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        r = await self._send("POST", body.encode(), self._era_headers(method, name))
        return self._answer(r, request_id)

    async def call(
        self,
        name: str,
        arguments: dict,
        progress_token=None,
        on_progress: Callable[[dict], None] | None = None,
        meta: dict | None = None,
    ) -> dict:
        """`tools/call`; the result as a dict. With a progress token, each progress
        notification's params go to `on_progress` as it arrives."""
        request_id = next(self._ids)
        params: dict = {"name": name, "arguments": arguments}
        m = dict(meta or {})
        if progress_token is not None:
            m["progressToken"] = progress_token
        if self.era == MODERN:
            m[PROTOCOL_VERSION_META_KEY] = MODERN
            m[CLIENT_CAPABILITIES_META_KEY] = {}
            m[CLIENT_INFO_META_KEY] = CLIENT_INFO
        if m:
            params["_meta"] = m
        body = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})
        on_event = None
        if on_progress is not None:

            def on_event(data: bytes) -> None:
                message = json.loads(data)
                if message.get("method") == "notifications/progress":
                    on_progress(message["params"])

        r = await self._send("POST", body.encode(), self._era_headers("tools/call", name), on_event)
        return self._answer(r, request_id)


class RawHttp:
    """JSON over a pool of keep-alive `Connection`s with a bearer token (for `/v1`)."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.headers = {"Authorization": f"Bearer {token}"}
        self._free: list[Connection] = []
        self._all: list[Connection] = []

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc) -> None:
        for conn in self._all:
            conn.close()

    async def request(self, method: str, path: str, payload=None) -> Response:
        conn = self._free.pop() if self._free else None
        if conn is None:
            conn = Connection(self.url, self.headers)
            self._all.append(conn)
        body = b"" if payload is None else json.dumps(payload).encode()
        headers = {"Content-Type": "application/json"} if payload is not None else None
        try:
            return await conn.request(method, path, body, headers)
        finally:
            self._free.append(conn)

    async def post(self, path: str, json=None) -> Response:  # noqa: A002 (httpx2's name for it)
        return await self.request("POST", path, json)

    async def get(self, path: str) -> Response:
        return await self.request("GET", path)
