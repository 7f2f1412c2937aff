"""A stdio transport for MCP servers (POSIX) that stays fast with very large messages.

The SDK's stdio client appends each chunk to the line read so far, which is quadratic in the
line's length (about 15 s of event-loop time for a 50 MB result, stalling every other server),
and parses every line on the event loop. Here a line is assembled from its chunks once, and a
large line is parsed on a worker thread. Shutdown follows the spec's order: close stdin, wait,
then end the process group.
"""

import logging
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
EXIT_GRACE = 2.0


def _parse(line: bytes) -> SessionMessage | Exception:
    """One stdout line; what isn't JSON-RPC goes to the session as an error value."""
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        log.warning("server wrote a line that is not JSON-RPC: %.200r", line)
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
    read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)

    async def reader() -> None:
        parts: list[bytes] = []
        async with read_send:
            with suppress(
                anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, ConnectionError
            ):
                async for chunk in process.stdout:
                    start = 0
                    while (end := chunk.find(b"\n", start)) != -1:
                        parts.append(chunk[start:end])
                        line, parts = b"".join(parts), []
                        start = end + 1
                        if line.strip():
                            message = (
                                await anyio.to_thread.run_sync(_parse, line)
                                if len(line) >= BIG_LINE
                                else _parse(line)
                            )
                            await read_send.send(message)
                    if start < len(chunk):
                        parts.append(chunk[start:])

    async def writer() -> None:
        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            async with write_recv:
                async for item in write_recv:
                    data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(data.encode("utf-8") + b"\n")
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
