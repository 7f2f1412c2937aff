"""The messages between processes, through the channel layer: the doors' requests to the
supervisors (`config.changed`, `call.run`, `call.cancel`, `servers.reconnect`,
`oauth.authorize`, `oauth.callback`, `server.complete`, `resource.subscribe`, answered on reply
channels where they need an answer), and the groups every side tells of changes (`STATUS` and
`PENDING`, which open pages and the MCP endpoints follow, `RESOURCES` (`resource.updated`),
which the MCP endpoints follow, and a call's own group, which its waiters follow). Web code never talks to MCP itself: it writes
what is wanted in the database and says so here (or, for a call in the process that hosts its
supervisor, through `calls.LocalSupervisor`)."""

import asyncio
import contextvars
from collections.abc import Callable, Coroutine
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.conf import settings

from . import db
from .choices import ServerState
from .models import ResourceSubscription, Server, Worker
from .oauth import upstream

_loop: asyncio.AbstractEventLoop | None = None


def settle(loop: asyncio.AbstractEventLoop) -> None:
    """The event loop this process serves on (`mcpcore.runtime`): `run_to_end` runs there."""
    global _loop
    _loop = loop


def run_to_end[T](fn: Callable[..., Coroutine[Any, Any, T]], *args: Any, **kwargs: Any) -> T:
    """`await fn(*args, **kwargs)` from sync code on another thread (a page's view, a `/v1`
    view's thread, a database job): run to its end on the process's loop, as a task of its own
    in a context of its own, and its result.

    Not `async_to_sync`, which under an ASGI server runs the coroutine as part of the request:
    a browser that goes away (a new page, htmx dropping a request) cancels it halfway (a reply
    recorded but its approved call never started), and the request's task then keeps the
    view thread's executor, which Django uses once that thread has quit ("CurrentThreadExecutor
    already quit or is broken"); tasks it starts, such as the approved call's run, would carry
    that executor too. Where no loop serves (tests under Django's client, management commands)
    it is `async_to_sync`."""
    loop = _loop
    if loop is None or not loop.is_running() or _on_a_loop():
        return async_to_sync(fn)(*args, **kwargs)

    async def own_task() -> T:
        return await loop.create_task(fn(*args, **kwargs), context=contextvars.Context())

    return asyncio.run_coroutine_threadsafe(own_task(), loop).result()


def _on_a_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


SUPERVISORS = "mcp-supervisors"  # group every supervisor worker joins
STATUS = "mcp-status"  # group browsers join for live server status
PENDING = "mcp-pending"  # group browsers join for live pending confirmations
RESOURCES = "mcp-resources"  # group the MCP endpoints join for upstream resource updates


def call_group(call_id: str) -> str:
    return f"mcp-call-{call_id}"


def config_changed() -> None:
    """Ask every supervisor to re-read the servers (added, changed, removed or reconnect)."""
    send_group(SUPERVISORS, {"type": "config.changed"})


def send_group(group: str, message: dict) -> None:
    layer = get_channel_layer()
    if layer is not None:
        run_to_end(layer.group_send, group, message)


async def asend_group(group: str, message: dict) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    if isinstance(layer, InMemoryChannelLayer) and not layer.groups.get(group):
        # Nobody in this process listens (most calls' own groups): the in-memory layer would
        # still sweep every channel and group for expired entries first.
        return
    await layer.group_send(group, message)


async def reconnect(name: str | None) -> dict[str, str] | None:
    """Ask the owners of one server (or all) to reconnect, servers in parallel, and gather what
    each became within the connect timeout. None when `name` is not a server."""

    def plan() -> dict[str, list[str]] | None:
        rows = Server.objects.all() if name is None else Server.objects.filter(name=name)
        servers = list(rows.values_list("name", "owner", "enabled", "state", "last_error"))
        if name is not None and not servers:
            return None
        channels = dict(Worker.objects.values_list("name", "channel"))
        by_channel: dict[str, list[str]] = {}
        for sname, owner, enabled, _state, _error in servers:
            key = channels.get(owner) if enabled else None
            by_channel.setdefault(key or f"!none:{sname}", []).append(sname)
        return by_channel

    by_channel = await db.run(plan)
    if by_channel is None:
        return None
    outcome: dict[str, str] = {}
    layer = get_channel_layer()
    reply = await layer.new_channel()
    asked = 0
    for channel, names in by_channel.items():
        if channel.startswith("!none:"):
            row = await Server.objects.filter(name=names[0]).afirst()
            outcome[names[0]] = (
                ServerState.DISABLED
                if row and not row.enabled
                else (
                    row.last_error if row and row.last_error else "not connected: no worker holds this server"
                )
            )
            continue
        await layer.send(channel, {"type": "servers.reconnect", "names": names, "reply": reply})
        asked += 1
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settings.AGENVOY_CONNECT_TIMEOUT + 3
    while asked and loop.time() < deadline:
        try:
            message = await asyncio.wait_for(layer.receive(reply), deadline - loop.time())
        except TimeoutError:
            break
        outcome.update(message.get("servers", {}))
        asked -= 1
    for names in by_channel.values():
        for n in names:
            outcome.setdefault(n, "reconnect timed out")
    return dict(sorted(outcome.items()))


async def cancel_call(call) -> None:
    """Tell the worker running a call to cancel it (it sends notifications/cancelled)."""
    channel = await db.run(
        lambda: Worker.objects.filter(name=call.worker).values_list("channel", flat=True).first()
    )
    if channel:
        await get_channel_layer().send(channel, {"type": "call.cancel", "call_id": str(call.id)})


class AuthorizeRefused(Exception):
    """`authorize` could not start a flow; the message is the answer's error."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


async def authorize(name: str, person: str) -> str:
    """Start a person's authorization-code flow for a server (SPEC 16.2) in the worker that
    holds it, and return the authorization URL to send the browser to. The flow's row is
    written here first (replacing any earlier flow); the holder fills it in. AuthorizeRefused
    when no worker holds the server or the authorization server can't be reached."""

    def plan() -> tuple[str, str]:
        owner = Server.objects.filter(name=name).values_list("owner", flat=True).first() or ""
        channel = (
            Worker.objects.filter(name=owner).values_list("channel", flat=True).first() if owner else None
        )
        flow = upstream.new_flow(name, person)
        return channel or "", str(flow.id)

    channel, flow_id = await db.run(plan)
    if not channel:
        raise AuthorizeRefused(f"server {name} is not connected: no worker holds this server", 503)
    layer = get_channel_layer()
    reply = await layer.new_channel()
    await layer.send(channel, {"type": "oauth.authorize", "server": name, "flow": flow_id, "reply": reply})
    try:
        message = await asyncio.wait_for(layer.receive(reply), settings.AGENVOY_CONNECT_TIMEOUT + 3)
    except TimeoutError:
        raise AuthorizeRefused(
            "authorization failed: the worker holding the server did not answer", 504
        ) from None
    if message.get("url"):
        return message["url"]
    raise AuthorizeRefused(message.get("error") or "authorization failed", 502)


def flow_callback(flow_id: str) -> None:
    """`/oauth/callback` wrote the code (or the error) into a flow's row: wake the worker
    that runs it, wherever it is."""
    send_group(SUPERVISORS, {"type": "oauth.callback", "flow": flow_id})


def _holder_channel(server: str) -> str:
    """The channel of the worker that holds the server's session, "" when none does."""
    owner = Server.objects.filter(name=server).values_list("owner", flat=True).first() or ""
    return (
        (Worker.objects.filter(name=owner).values_list("channel", flat=True).first() or "") if owner else ""
    )


class Unanswered(Exception):
    """No worker holds the server, or it did not answer in time."""


class Refused(Exception):
    """The server answered a JSON-RPC error; `code` and `message` are its own."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


async def complete(server: str, ref: dict, argument: dict, context: dict | None) -> dict:
    """Ask the holder of `server` for a completion (SPEC 20.2) and return the server's
    `CompleteResult` as wire JSON."""

    channel = await db.run(_holder_channel, server)
    if not channel:
        raise Unanswered(server)
    layer = get_channel_layer()
    reply = await layer.new_channel()
    message = {"type": "server.complete", "server": server, "ref": ref, "argument": argument}
    await layer.send(channel, {**message, "context": context, "reply": reply})
    try:
        answer = await asyncio.wait_for(layer.receive(reply), settings.AGENVOY_LIST_TIMEOUT)
    except TimeoutError:
        raise Unanswered(server) from None
    error = answer.get("error")
    if isinstance(error, dict):
        raise Refused(int(error.get("code", -32603)), str(error.get("message", "")))
    if not isinstance(answer.get("result"), dict):
        raise Unanswered(server)
    return answer["result"]


async def subscribe(server: str, uri: str) -> None:
    """Keep `uri` subscribed upstream (SPEC 20.2): a row every holder of the server reads at
    connect, and a word to the one holding it now, whose answer is awaited (bounded) so the
    client's subscription is acknowledged only once the server's updates are followed: an
    update in between would be lost."""

    def record() -> str:
        ResourceSubscription.objects.get_or_create(server_name=server, uri=uri)
        return _holder_channel(server)

    channel = await db.run(record)
    if not channel:
        return  # whoever holds the server next subscribes at connect
    layer = get_channel_layer()
    reply = await layer.new_channel()
    await layer.send(channel, {"type": "resource.subscribe", "server": server, "reply": reply})
    try:
        await asyncio.wait_for(layer.receive(reply), settings.AGENVOY_LIST_TIMEOUT)
    except TimeoutError:
        pass  # the row stands: it is followed when the holder gets to it
