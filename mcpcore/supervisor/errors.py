"""What an MCP server's session raised, read: a one-line description, the exception of a kind
inside a group, and whether it means the session is gone or only that the server lacks a
method. Shared by the session and its parts (listings, subscriptions) and the call runner."""

import asyncio

import anyio
from mcp.shared.exceptions import MCPError


def describe(exc: BaseException) -> str:
    """A one-line, human-readable error from whatever a connect or call raised."""
    if isinstance(exc, BaseExceptionGroup):
        leaves = [e for e in _leaves(exc) if not isinstance(e, (asyncio.CancelledError,))]
        if leaves:
            return describe(leaves[0])
    if isinstance(exc, FileNotFoundError):
        return f"command not found: {exc.filename or exc}"
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, TimeoutError):
        return text if str(exc).strip() else "timed out"
    return text.splitlines()[0][:500]


def _leaves(group: BaseExceptionGroup):
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            yield from _leaves(exc)
        else:
            yield exc


def found[E: BaseException](exc: BaseException, kind: type[E]) -> E | None:
    """`exc` itself or the first exception of that kind inside its groups."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        return next((e for e in _leaves(exc) if isinstance(e, kind)), None)
    return None


def is_session_lost(exc: BaseException) -> bool:
    """Errors that mean the session is gone, not that one request failed."""
    if isinstance(exc, BaseExceptionGroup):
        return any(is_session_lost(e) for e in _leaves(exc))
    if isinstance(exc, MCPError):
        return exc.error.code == -32000 or "session" in str(exc).lower() and "404" in str(exc)
    return isinstance(
        exc,
        (anyio.ClosedResourceError, anyio.BrokenResourceError, EOFError, ConnectionError, anyio.EndOfStream),
    )


def not_supported(exc: BaseException) -> bool:
    """The server has no such method ("method not found"), even when a task group wrapped it."""
    if isinstance(exc, BaseExceptionGroup):
        return any(not_supported(e) for e in _leaves(exc))
    if type(exc).__name__ == "ListenNotSupportedError":
        return True
    return isinstance(exc, MCPError) and exc.error.code == -32601
