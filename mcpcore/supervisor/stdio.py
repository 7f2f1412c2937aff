"""A stdio transport for MCP servers (POSIX) that stays fast with very large messages.

The SDK's stdio client appends each chunk to the line read so far, which is quadratic in the
line's length (about 15 s of event-loop time for a 50 MB result, stalling every other server),
and parses every line on the event loop. Here a line is assembled from its chunks once, and a
large line is parsed on a worker thread. A line over MAX_MESSAGE is not kept: the request it
answers gets a JSON-RPC error instead, and memory stays bounded whatever a server writes.
Shutdown follows the spec's order: close stdin, wait, then end the process group.
"""

import json
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import IO

import anyio
import anyio.to_thread
import mcp_types
from mcp.client.stdio import StdioServerParameters, get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

log = logging.getLogger("mcpcore.supervisor")

BIG_LINE = 256 * 1024  # bytes: parsed off the event loop from here on
MAX_MESSAGE = 64 * 2**20  # bytes: a longer line is dropped, and its request ends with an error
EXIT_GRACE = 2.0
_EDGE = 4096  # bytes kept from each end of a dropped line, to find its id
_ID_VALUE = rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.){0,200}")'
# Anchored, so an "id" inside the result's content can't be taken for the message's own, and
# only a response counts (a server's own request has an id of the server's id space).
_RESPONSE_START = re.compile(
    rb'^\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?(?:' + _ID_VALUE + rb'\s*,\s*)?"(?:result|error)"\s*:'
)
_ID_LAST = re.compile(_ID_VALUE + rb"\s*\}\s*$")


def too_long_error(head: bytes, tail: bytes, size: int, limit: int) -> SessionMessage | Exception:
    """What the session gets for a dropped line: an error answer to the request whose id the
    line carries (serializers put `id` first or last), else an exception it logs."""
    text = f"the server's message of {size} bytes is over the {limit // 2**20} MiB limit and was dropped"
    start = _RESPONSE_START.search(head)
    found = None
    if start is not None:
        found = start if start.group(1) else _ID_LAST.search(tail)
    if found is None:
        log.warning("server wrote a line of %d bytes that is not a response we can name; dropped", size)
        return ValueError(text)
    raw = found.group(1)
    request_id = int(raw) if raw[:1] != b'"' else json_string(raw)
    error = mcp_types.JSONRPCError(
        jsonrpc="2.0", id=request_id, error=mcp_types.ErrorData(code=-32603, message=text)
    )
    return SessionMessage(error)


def json_string(raw: bytes) -> str:
    return json.loads(raw)


class _Line:
    """One stdout line as it arrives in chunks: joined once at its end, or, past MAX_MESSAGE,
    no longer kept (only its first and last bytes, where its id is)."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = limit or MAX_MESSAGE
        self._reset()

    def _reset(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0
        self.dropping = False
        self.head = self.tail = b""

    def add(self, piece: bytes) -> None:
        if not self.dropping and self.size + len(piece) > self.limit:
            self.dropping = True
            self.head = b"".join([*self.parts, piece[:_EDGE]])[:_EDGE]
            self.parts = []
        if self.dropping:
            self.tail = (self.tail + piece)[-_EDGE:]
        else:
            self.parts.append(piece)
        self.size += len(piece)

    async def take(self) -> SessionMessage | Exception | None:
        """The message of the line just ended (None for a blank line); starts the next one."""
        if self.dropping:
            message = too_long_error(self.head, self.tail, self.size, self.limit)
            self._reset()
            return message
        line = b"".join(self.parts)
        self._reset()
        if not line.strip():
            return None
        return await anyio.to_thread.run_sync(_parse, line) if len(line) >= BIG_LINE else _parse(line)


def _parse(line: bytes) -> SessionMessage | Exception:
    """One stdout line; what isn't JSON-RPC goes to the session as an error value."""
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        # Not the line itself: it can hold expanded secret values (SPEC 12.3).
        log.warning("server wrote a line of %d bytes that is not JSON-RPC", len(line))
        return exc


@asynccontextmanager
async def stdio_transport(params: StdioServerParameters, errlog: IO[str]) -> AsyncIterator[tuple]:
    """(read stream, write stream) of SessionMessages to a server process over its pipes."""
    process = await anyio.open_process(
        [params.command, *params.args],
        env=get_default_environment() | (params.env or {}),
        stderr=errlog,
        cwd=params.cwd,
        start_new_session=True,
    )
    stdout, stdin = process.stdout, process.stdin
    assert stdout is not None and stdin is not None  # open_process pipes both by default
    read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)

    async def reader() -> None:
        line = _Line()
        async with read_send:
            with suppress(
                anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, ConnectionError
            ):
                async for chunk in stdout:
                    start = 0
                    while (end := chunk.find(b"\n", start)) != -1:
                        line.add(chunk[start:end])
                        start = end + 1
                        message = await line.take()
                        if message is not None:
                            await read_send.send(message)
                    if start < len(chunk):
                        line.add(chunk[start:])

    async def writer() -> None:
        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            async with write_recv:
                async for item in write_recv:
                    data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await stdin.send(data.encode("utf-8") + b"\n")
        # The server can't be written to any more: let the session see the end.
        await read_send.aclose()

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        tg.start_soon(writer)
        try:
            yield read_recv, write_send
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(process)
            tg.cancel_scope.cancel()


async def _stop(process) -> None:
    """Close stdin, give the server time to exit, then end its whole process group."""
    with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdin.aclose()
    if not await _exited(process, EXIT_GRACE):
        await terminate_posix_process_tree(process, EXIT_GRACE)
        await _exited(process, EXIT_GRACE)
    with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdout.aclose()


async def _exited(process, timeout: float) -> bool:
    # Not process.wait(): it also waits for pipe EOF, which a surviving child can hold open.
    deadline = anyio.current_time() + timeout
    while process.returncode is None:
        if anyio.current_time() >= deadline:
            return False
        await anyio.sleep(0.05)
    return True
