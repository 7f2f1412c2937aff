"""One MCP server's session, owned by its own task: connect, register (tools, prompts,
resources), watch, renew, keep resource subscriptions.

The Client is entered and exited in this task only. Calls from other tasks use the published
client while `ready` is set; a session is published only after its handshake and first listing.
"""

import asyncio
import contextlib
import contextvars
import logging
import math
import random
import uuid
from collections.abc import Callable
from typing import IO, Any, Protocol

import anyio
from django.conf import settings
from mcp import Client
from mcp.client import advertise

from .. import control, db
from ..oauth import upstream as oauth_upstream
from ..calls import notify
from ..choices import ServerState, Transport
from ..models import ResourceSubscription, Server
from . import registry, transport, upstream

log = logging.getLogger("mcpcore.supervisor")

PAGE_CAP = 100
DEBOUNCE = 0.2
BACKOFF_START = 5.0
BACKOFF_MAX = 300.0
NEEDS_AUTHORIZATION = "needs authorization"
HTTP = (Transport.STREAMABLE_HTTP, Transport.SSE)
# The MCP Apps extension (SPEC 20.5): declared so that servers offer their `ui://` apps, which
# the console passes on to the hosts that render them.
UI_EXTENSION = "io.modelcontextprotocol/ui"
UI_SETTINGS = {"mimeTypes": ["text/html;profile=mcp-app"]}
# Each listing: the Client method and the result's field holding the items.
LISTINGS = {
    "tools/list": ("list_tools", "tools"),
    "prompts/list": ("list_prompts", "prompts"),
    "resources/list": ("list_resources", "resources"),
    "resources/templates/list": ("list_resource_templates", "resource_templates"),
}
REFRESHING = (
    "notifications/tools/list_changed",
    "notifications/prompts/list_changed",
    "notifications/resources/list_changed",
)


class Asker(Protocol):
    """What the session needs of a running call to ask its questions (`runner.Asking`): its
    call's id, who made it (token and client session), whether it is asking now, the
    elicitation ids of its URL questions. `elicit(params, sure=False)` asks a question the
    call may not have asked: in the inbox only, never of its client."""

    call_id: str
    caller: tuple
    elicitation_ids: set[str]

    @property
    def busy(self) -> bool: ...

    async def elicit(self, params: Any, sure: bool = True) -> Any: ...


# The call a task runs, for questions asked from inside its own task: the SDK's 2026-07-28
# driver of a prompt get or resource read asks from there (a tool call's rounds are the
# runner's own); 2025 questions come from the session's receiving task (`_asker_for`).
ASKING: contextvars.ContextVar["Asker | None"] = contextvars.ContextVar("agenvoy_asking", default=None)
METHOD_NOT_FOUND = -32601


def not_offered(method: str):
    """The JSON-RPC error for what the console does not offer its servers: sampling and roots
    (deprecated by 2026-07-28; SPEC 20.4)."""
    from mcp_types import ErrorData

    return ErrorData(code=METHOD_NOT_FOUND, message=f"{method} is not offered by this client")


class SessionHost(Protocol):
    """What a ServerSession and the call runner (`runner.py`) need of the supervisor that
    holds them (implemented by `core.Supervisor`):

    - `name`: the worker's name (tags its stdio processes, claims its calls);
    - `stopping`: whether it is shutting down (a call cut short then is interrupted, not
      cancelled);
    - `session(server_name)`: the session it holds for that server, else None;
    - `errlog(server_name)`: the file a stdio server's stderr goes to;
    - `connect_slot()`: one of the few places for connecting (see `Supervisor.connect_slot`).
    """

    name: str

    @property
    def stopping(self) -> bool: ...

    def session(self, server_name: str) -> "ServerSession | None": ...

    def errlog(self, server_name: str) -> IO[str]: ...

    def connect_slot(self) -> contextlib.AbstractAsyncContextManager[Callable[[], None]]: ...


class SessionLost(Exception):
    """The server's session ended under us (transport error, process exit, 404 session)."""


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


def found(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """`exc` itself or the first exception of that kind inside its groups."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        return next((e for e in _leaves(exc) if isinstance(e, kind)), None)
    return None


def is_session_lost(exc: BaseException) -> bool:
    """Errors that mean the session is gone, not that one request failed."""
    from mcp.shared.exceptions import MCPError

    if isinstance(exc, BaseExceptionGroup):
        return any(is_session_lost(e) for e in _leaves(exc))
    if isinstance(exc, MCPError):
        return exc.error.code == -32000 or "session" in str(exc).lower() and "404" in str(exc)
    return isinstance(
        exc,
        (anyio.ClosedResourceError, anyio.BrokenResourceError, EOFError, ConnectionError, anyio.EndOfStream),
    )


INTERNAL_ERROR = -32603


def upstream_error(exc: BaseException, session: "ServerSession | None" = None) -> dict:
    """`{"code", "message"}` of what a server answered (its JSON-RPC error) or of what went
    wrong on the way (-32603), secrets masked."""
    from mcp.shared.exceptions import MCPError

    text = session.describe(exc) if session is not None else describe(exc)
    if isinstance(exc, MCPError):
        message = exc.error.message
        if session is not None:
            message = transport.redact(message, session.secrets)
        return {"code": exc.error.code, "message": message}
    return {"code": INTERNAL_ERROR, "message": text}


def _not_supported(exc: BaseException) -> bool:
    """The server has no such method ("method not found"), even when a task group wrapped it."""
    from mcp.shared.exceptions import MCPError

    if isinstance(exc, BaseExceptionGroup):
        return any(_not_supported(e) for e in _leaves(exc))
    if type(exc).__name__ == "ListenNotSupportedError":
        return True
    return isinstance(exc, MCPError) and exc.error.code == -32601


class ServerSession:
    """Keeps one server connected and its tools registered until stopped."""

    def __init__(self, supervisor: SessionHost, name: str) -> None:
        self.sup = supervisor
        self.name = name
        self.client: Client | None = None
        self.ready = asyncio.Event()
        self.error = ""
        self.protocol = ""
        self.task: asyncio.Task | None = None
        self._wake = asyncio.Event()
        self._refresh = asyncio.Event()
        self._lost = asyncio.Event()
        self._stopping = False
        self._reconnect = False
        self._attempt_done: list[asyncio.Future] = []
        self.call_timeout: float | None = None
        self.active_calls = 0
        # The expanded secret values of the current config, kept out of stored errors and logs.
        self.secrets: list[str] = []
        # The `Server.config_hash` the supervisor last (re)started it for.
        self.config_hash = ""
        # An OAuth server's provider (SPEC 16), shared by its transport and its renewals.
        self.provider: upstream.Provider | None = None
        # Resource subscriptions (SPEC 20.2): the URIs subscribed on the current session, and
        # a wake-up to re-read `ResourceSubscription` rows.
        self.subscribed: set[str] = set()
        self._subscriptions_changed = asyncio.Event()
        self._listen_again = asyncio.Event()
        # Reply channels of `resource.subscribe` requests, told once the set is followed
        # upstream (an update published before that would be lost: listen has no replay).
        self._subscribe_replies: list[str] = []
        # The calls running on this session that may ask questions, by call id, oldest first.
        self.asking: dict[str, Asker] = {}

    def describe(self, exc: BaseException) -> str:
        """`describe(exc)` with this server's secret values masked (SPEC 12.3)."""
        return transport.redact(describe(exc), self.secrets)

    # --- control from other tasks -----------------------------------------------------------

    def start(self) -> None:
        self.task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self.task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self.task), 5)
            except (TimeoutError, asyncio.CancelledError):
                self.task.cancel()
                with _suppress():
                    await self.task
            except Exception:
                pass

    def reconnect(self) -> asyncio.Future:
        """Drop the session and connect again now; the future gets "connected" or the error."""
        fut = asyncio.get_running_loop().create_future()
        self._attempt_done.append(fut)
        self._reconnect = True
        self._wake.set()
        return fut

    def session_lost(self) -> None:
        self._lost.set()

    def resubscribe(self, reply: str | None = None) -> None:
        """Re-read the server's `ResourceSubscription` rows and follow them upstream; `reply`
        (a channel) is told `subscribe.done` once they are followed."""
        if reply:
            self._subscribe_replies.append(reply)
        self._subscriptions_changed.set()

    async def _subscribed_now(self) -> None:
        """Tell whoever asked that the subscriptions they wrote are followed upstream."""
        replies, self._subscribe_replies = self._subscribe_replies, []
        if replies:
            from channels.layers import get_channel_layer

            layer = get_channel_layer()
            for reply in replies:
                await layer.send(reply, {"type": "subscribe.done"})

    async def wait_ready(self, timeout: float) -> Client | None:
        if not self.ready.is_set():
            try:
                await asyncio.wait_for(self.ready.wait(), timeout)
            except TimeoutError:
                return None
        return self.client

    # --- the task ---------------------------------------------------------------------------

    async def _run(self) -> None:
        backoff = BACKOFF_START
        while not self._stopping:
            server = await db.run(Server.objects.filter(name=self.name).first)
            if server is None:
                return
            if not server.enabled or server.misconfigured:
                await self._set_state(
                    ServerState.DISABLED if not server.enabled else ServerState.ERROR,
                    "" if not server.enabled else server.last_error,
                )
                self._finish_attempts(server.last_error or ServerState.DISABLED)
                await self._wait_wake(math.inf)
                continue
            self.call_timeout = server.call_timeout
            self._reconnect = False
            self._wake.clear()
            self._lost.clear()
            await self._set_state(ServerState.CONNECTING, self.error)
            waiting: upstream.NeedsAuthorization | None = None
            try:
                await self._session(server)
            except Exception as exc:  # any failure of this server stays with this server
                waiting = found(exc, upstream.NeedsAuthorization)  # type: ignore[assignment]
                refused = found(exc, upstream.ClientRefused)
                self.error = self.describe(refused or exc)
                if waiting is None:
                    log.warning("server %s: %s", self.name, self.error)
            finally:
                self.client = None
                self.provider = None
                self.ready.clear()
            if self._stopping:
                break
            if waiting is not None:
                # A person is needed, not a retry (SPEC 16.1): no backoff, wait to be woken.
                await self._needs_authorization(waiting.refused)
                backoff = BACKOFF_START
                await self._wait_wake(math.inf)
                continue
            if self._reconnect:
                backoff = BACKOFF_START
                continue
            if not self.error:
                self.error = "session ended"
            await self._set_state(ServerState.ERROR, self.error)
            self._finish_attempts(self.error)
            if self._lost.is_set() and self._was_connected:
                # A session that was up gets renewed at once; backoff is for failing connects.
                self._was_connected = False
                continue
            delay = backoff * random.uniform(0.5, 1.5)
            backoff = min(backoff * 2, BACKOFF_MAX)
            await self._wait_wake(delay)

    _was_connected = False

    async def _wait_wake(self, delay: float) -> None:
        try:
            await asyncio.wait_for(self._wake.wait(), None if delay == math.inf else delay)
        except TimeoutError:
            pass

    async def _session(self, server: Server) -> None:
        """One session, from connect to loss or stop."""
        errlog = self.sup.errlog(self.name)
        tag = f"{self.sup.name}:{self.name}:{uuid.uuid4().hex[:8]}"
        self.secrets = transport.secret_values(server.config)
        self.provider = await self._authorized(server)
        walls = server.sandbox
        # Never unsandboxed instead: no bwrap that works, no process at all (SPEC 26).
        sandbox = (walls, await transport.sandbox_ready(walls)) if walls is not None else None
        target = transport.make_target(
            server.config, server.transport, errlog, tag, auth=self.provider, sandbox=sandbox
        )
        try:
            await self._connected(server, target)
        except Exception:
            if self.provider is None and await self._asks_for_oauth(server):
                raise upstream.NeedsAuthorization() from None
            raise
        finally:
            if server.transport == Transport.STDIO:
                await asyncio.to_thread(transport.sweep, tag)

    async def _authorized(self, server: Server) -> "upstream.Provider | None":
        """An OAuth server's provider with valid tokens (renewed if need be), None for a server
        without OAuth; NeedsAuthorization or ClientRefused otherwise (SPEC 16)."""
        if server.transport not in HTTP:
            return None
        account = await db.run(oauth_upstream.account_for, self.name)
        grant = oauth_upstream.grant_of(server, account)
        if grant is None:
            return None
        return await upstream.ready(server, grant)

    async def _asks_for_oauth(self, server: Server) -> bool:
        """A failed connect of an HTTP server with no `oauth` key and no Authorization header:
        did it answer 401 + `WWW-Authenticate: Bearer` (SPEC 16.1)? Then it is remembered."""
        config = server.config
        if server.transport not in HTTP or "oauth" in config or oauth_upstream.has_authorization_header(config):
            return False
        if not await upstream.asks_for_oauth(config):
            return False
        await db.run(oauth_upstream.mark_detected, self.name, oauth_upstream.server_url(config))
        log.info("server %s asks for OAuth: needs authorization", self.name)
        return True

    async def _needs_authorization(self, refused: str) -> None:
        """The state of SPEC 16.1; after a refused renewal the stored tokens are dropped and
        people are told (SPEC 16.4)."""
        self.error = NEEDS_AUTHORIZATION
        if refused:
            log.warning("server %s: the authorization server refused the renewal: %s", self.name, refused)
            await db.run(oauth_upstream.clear_tokens, self.name)
            await db.run(notify.queue_needs_authorization, self.name)
        await self._set_state(ServerState.NEEDS_AUTHORIZATION, NEEDS_AUTHORIZATION)
        self._finish_attempts(NEEDS_AUTHORIZATION)

    async def _renewer(self) -> None:
        """Renew the access token at 80 % of its lifetime, used or not (SPEC 16.4). Only the
        holder of the server's session runs this. A refusal ends the session (raised)."""
        provider = self.provider
        assert provider is not None
        while True:
            account = await db.run(oauth_upstream.account_for, self.name)
            delay = upstream.renew_in(account.issued_at, account.expires_at) if account else None
            if delay is None:
                return  # a token that does not expire is never renewed
            await anyio.sleep(delay)
            url = account.url if account else ""
            try:
                await upstream.renew(provider, url)
            except (upstream.NeedsAuthorization, upstream.ClientRefused):
                raise
            except Exception as exc:
                # The authorization server is down: the token holds until it expires; again soon.
                log.warning("server %s: token renewal failed: %s", self.name, self.describe(exc))
                await anyio.sleep(5.0)

    async def _connected(self, server: Server, target) -> None:
        client = Client(
            target,
            message_handler=self._on_message,
            cache=None,
            mode="auto",
            extensions=[advertise(UI_EXTENSION, UI_SETTINGS)],
            # With a callback the SDK declares elicitation with `form` and `url` (SPEC 20.4).
            elicitation_callback=self._on_elicit,
        )
        # A few connects at a time: a hundred servers starting together on two cores would
        # all run out their connect time at once, and again on every retry.
        async with self.sup.connect_slot() as release:
            with anyio.CancelScope() as scope:
                # The connect bound covers the handshake and first listing, then is lifted.
                scope.deadline = anyio.current_time() + settings.AGENVOY_CONNECT_TIMEOUT
                async with client:
                    _refuse_sampling_and_roots(client)
                    await self._register(client, connecting=True)
                    scope.deadline = math.inf
                    release()
                    self.client = client
                    self.protocol = client.protocol_version or ""
                    self.error = ""
                    self._was_connected = True
                    await self._publish_connected(client)
                    self.ready.set()
                    self._finish_attempts(ServerState.CONNECTED)
                    await self._watch(client)
        if scope.cancelled_caught and not self._stopping:
            self.error = f"connect timed out after {settings.AGENVOY_CONNECT_TIMEOUT:g}s"

    async def _watch(self, client: Client) -> None:
        """Refresh on list_changed (debounced) and on the jittered poll, until woken or lost."""
        self.subscribed = set()
        self._subscriptions_changed.set()  # every (re)connect subscribes to all rows
        async with anyio.create_task_group() as tg:
            if self.protocol >= "2026":
                tg.start_soon(self._listen, client)
            tg.start_soon(self._subscriber, client)
            tg.start_soon(self._pinger, client)
            if self.provider is not None:
                tg.start_soon(self._renewer)
            poll = settings.AGENVOY_POLL_SECONDS
            next_poll = anyio.current_time() + poll * random.uniform(0.9, 1.1)
            while not (self._wake.is_set() or self._lost.is_set()):
                waits = [self._wake.wait(), self._refresh.wait(), self._lost.wait()]
                timeout = max(0.0, next_poll - anyio.current_time())
                tasks = [asyncio.ensure_future(w) for w in waits]
                try:
                    await asyncio.wait(tasks, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for t in tasks:
                        t.cancel()
                if self._wake.is_set() or self._lost.is_set():
                    break
                if self._refresh.is_set():
                    await asyncio.sleep(DEBOUNCE)
                    self._refresh.clear()
                elif anyio.current_time() < next_poll:
                    continue
                next_poll = anyio.current_time() + poll * random.uniform(0.9, 1.1)
                try:
                    await self._register(client)
                except Exception as exc:
                    self.error = self.describe(exc)
                    log.warning("server %s: tool list failed: %s", self.name, self.error)
                    self._lost.set()
            tg.cancel_scope.cancel()

    async def _pinger(self, client: Client) -> None:
        """An idle session gives no sign of a dead server but an unanswered ping."""
        every = settings.AGENVOY_PING_SECONDS
        while True:
            await anyio.sleep(every * random.uniform(0.9, 1.1))
            if self.active_calls:
                # A call in flight tells about the session itself (a dead server fails it),
                # and a ping would queue behind a large answer and time out.
                continue
            problem = await self._unanswered(client, max(every, 5))
            if problem:
                log.warning("server %s: ping failed: %s", self.name, problem)
                self.error = f"session lost: {problem}"
                self._lost.set()
                return

    async def _unanswered(self, client: Client, timeout: float) -> str:
        """Why the server did not answer a ping ("" when it did). 2026-07-28 servers answer
        `ping` with "method not found": any answer proves the session alive."""
        from mcp.shared.exceptions import MCPError

        try:
            with anyio.fail_after(timeout):
                await client.send_ping()
        except MCPError as exc:
            return self.describe(exc) if exc.error.code in (-32000, -32001) else ""
        except Exception as exc:
            return self.describe(exc) or "timed out"
        return ""

    async def _listen(self, client: Client) -> None:
        """2026-07-28 sessions deliver list changes and resource updates only inside
        `listen()`; the stream is opened again with the new set when the subscriptions change."""
        while True:
            self._listen_again.clear()
            try:
                await self._listen_once(client)
            except Exception as exc:
                if is_session_lost(exc):
                    self._lost.set()
                    return
                if _not_supported(exc):
                    # Servers without subscriptions are covered by the poll alone.
                    log.info("server %s: no listen support (%s); polling only", self.name, self.describe(exc))
                    return
                log.info("server %s: listen ended: %s", self.name, self.describe(exc))
            if self._listen_again.is_set():
                continue
            await anyio.sleep(1)
            # The stream can end when the server dies: a ping tells loss from a quiet close.
            if await self._unanswered(client, settings.AGENVOY_LIST_TIMEOUT):
                self._lost.set()
                return

    async def _listen_once(self, client: Client) -> None:
        from mcp.shared.subscriptions import ResourceUpdated

        uris = sorted(self.subscribed)
        async with anyio.create_task_group() as tg:

            async def reopen() -> None:
                await self._listen_again.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(reopen)
            async with client.listen(
                tools_list_changed=True,
                prompts_list_changed=True,
                resources_list_changed=True,
                resource_subscriptions=uris,
            ) as sub:
                if not self._subscriptions_changed.is_set():
                    await self._subscribed_now()  # the stream is acknowledged with every URI
                async for event in sub:
                    if isinstance(event, ResourceUpdated):
                        await self._updated(event.uri)
                    else:
                        self._refresh.set()
            tg.cancel_scope.cancel()

    async def _subscriber(self, client: Client) -> None:
        """Follow the server's `ResourceSubscription` rows upstream: at connect, and whenever
        told (`resubscribe`). 2025-era servers get `resources/subscribe` and
        `resources/unsubscribe`; 2026-07-28 servers get the listen stream opened again."""
        while True:
            await self._subscriptions_changed.wait()
            self._subscriptions_changed.clear()
            wanted = set(
                await db.run(
                    lambda: list(
                        ResourceSubscription.objects.filter(server_name=self.name).values_list(
                            "uri", flat=True
                        )
                    )
                )
            )
            if wanted == self.subscribed:
                await self._subscribed_now()
                continue
            if self.protocol >= "2026":
                self.subscribed = wanted
                self._listen_again.set()  # `_listen_once` tells the askers once it is back
                continue
            capability = client.server_capabilities.resources
            if capability is not None and capability.subscribe:
                await self._follow(client, wanted)
            await self._subscribed_now()

    async def _follow(self, client: Client, wanted: set[str]) -> None:
        """Subscribe to the new URIs and unsubscribe from the dropped ones (2025 era)."""
        import mcp_types as types

        for uri in sorted(wanted ^ self.subscribed):
            adding = uri in wanted
            request = (
                types.SubscribeRequest(params=types.SubscribeRequestParams(uri=uri))
                if adding
                else types.UnsubscribeRequest(params=types.UnsubscribeRequestParams(uri=uri))
            )
            try:
                with anyio.fail_after(settings.AGENVOY_LIST_TIMEOUT):
                    # The session's own request: its `subscribe_resource` wrapper warns that the
                    # method is gone in 2026-07-28, which this branch has ruled out.
                    await client.session.send_request(request, types.EmptyResult)
            except Exception as exc:
                if is_session_lost(exc):
                    self._lost.set()
                    return
                log.warning("server %s: subscription to %s failed: %s", self.name, uri, self.describe(exc))
                continue
            if adding:
                self.subscribed.add(uri)
            else:
                self.subscribed.discard(uri)

    async def _updated(self, uri: str) -> None:
        """An upstream resource changed: every web process tells its subscribed clients."""
        await control.asend_group(
            control.RESOURCES, {"type": "resource.updated", "server": self.name, "uri": uri}
        )

    async def _on_message(self, message) -> None:
        method = getattr(message, "method", None)
        if method is None and hasattr(message, "root"):
            method = getattr(message.root, "method", None)
        if method in REFRESHING:
            self._refresh.set()
        elif method == "notifications/resources/updated":
            uri = _updated_uri(message)
            if uri:
                await self._updated(uri)
        elif method == "notifications/elicitation/complete":
            await self._completed(getattr(getattr(message, "params", None), "elicitation_id", None))
        elif isinstance(message, Exception):
            log.info("server %s: transport message: %s", self.name, self.describe(message))
            if is_session_lost(message):
                self._lost.set()

    async def _on_elicit(self, ctx, params):
        """A server's question (2025: `elicitation/create`; 2026-07-28: an elicitation inside
        an `InputRequiredResult` the SDK drives): asked by the call it belongs to."""
        from mcp_types import INVALID_REQUEST, ErrorData

        asker = ASKING.get()
        if asker is not None:
            return await asker.elicit(params)
        found = self._asker_for()
        if found is None:
            return ErrorData(code=INVALID_REQUEST, message="no call of this client is running on this server")
        return await found[0].elicit(params, sure=found[1])

    async def _completed(self, elicitation_id) -> None:
        """A 2025 server's URL question done out of band: whoever holds the call's MCP request
        tells its client (SPEC 20.4)."""
        asker = next((a for a in self.asking.values() if elicitation_id in a.elicitation_ids), None)
        if asker is not None:
            await control.asend_group(
                control.call_group(asker.call_id),
                {"type": "question.complete", "elicitation_id": elicitation_id},
            )

    def _asker_for(self) -> "tuple[Asker, bool] | None":
        """The call a 2025 `elicitation/create` is filed under, and whether it surely asked.
        The server sends it on the call's own request (`related_request_id`: its POST's
        response stream), but the client side of the SDK does not say which one: with one
        call in flight it is that one; with several, the oldest not already waiting for an
        answer (a call asks one question at a time), else the oldest. That guess is sure
        only when every call in flight was made by the same token on the same client session:
        else the question may be another caller's, and goes to the inbox alone (SPEC 20.4)."""
        running = list(self.asking.values())
        if not running:
            return None
        asker = next((a for a in running if not a.busy), running[0])
        return asker, len({a.caller for a in running}) == 1

    async def _list_all(self, client: Client, method: str = "tools/list") -> list:
        """Every page of one listing, bypassing the client's cache, bounded; a repeated cursor
        or too many pages is an error."""
        fetch_name, field = LISTINGS[method]
        fetch = getattr(client, fetch_name)
        items: list = []
        cursor = None
        seen: set[str] = set()
        with anyio.fail_after(settings.AGENVOY_LIST_TIMEOUT):
            for _ in range(PAGE_CAP):
                page = await fetch(cursor=cursor, cache_mode="bypass")
                items.extend(getattr(page, field))
                cursor = page.next_cursor
                if not cursor:
                    return items
                if cursor in seen:
                    raise RuntimeError(f"{method} repeated the cursor {cursor!r}")
                seen.add(cursor)
        raise RuntimeError(f"{method} has more than {PAGE_CAP} pages")

    async def _register(self, client: Client, connecting: bool = False) -> None:
        """List the tools, prompts and resources, and register each kind whose signature
        differs from the one recorded (`Server.signature`, `prompt_signature`,
        `resource_signature`, their only records). Tools are always rewritten on a new
        session: what a row holds beyond the signature (titles, annotations, output schemas,
        columns a newer console adds) is then brought up to date once per connect, and never
        rewritten by a poll unless their `_meta` changed. A failed tools/list fails the whole
        (the session is renewed); a failed prompt or resource listing keeps what was
        registered and becomes a warning on the server (SPEC 20.1)."""
        tools = await self._list_all(client)
        rows, warnings = registry.tool_dicts(self.name, tools)
        prompts, resources, failures = await self._listings(client)
        warnings = warnings + failures
        sig = registry.signature(rows)
        metas = {r["tool_name"]: r["meta"] for r in rows}
        changed = []
        if connecting or not await db.run(registry.is_registered, self.name, sig, metas):
            if await db.run(registry.replace_tools, self.name, rows, sig, warnings):
                changed.append(f"{len(rows)} tools")
        if prompts is not None:
            prompt_rows, prompt_warnings = registry.prompt_dicts(self.name, prompts)
            warnings += prompt_warnings
            if await db.run(
                registry.replace_prompts, self.name, prompt_rows, registry.listing_signature(prompt_rows)
            ):
                changed.append(f"{len(prompt_rows)} prompts")
        if resources is not None:
            resource_rows, template_rows = registry.resource_dicts(*resources)
            sig = registry.listing_signature(resource_rows, template_rows)
            if await db.run(registry.replace_resources, self.name, resource_rows, template_rows, sig):
                changed.append(f"{len(resource_rows)} resources, {len(template_rows)} templates")
        await db.run(registry.set_warnings, self.name, warnings)
        if changed:
            await db.run(registry.record_claims)
            log.info("server %s: registered %s", self.name, ", ".join(changed))
            await control.asend_group(control.STATUS, {"type": "status.changed", "server": self.name})

    async def _listings(self, client: Client) -> tuple[list | None, tuple[list, list] | None, list[str]]:
        """The prompts and the (resources, templates) the server declares (empty lists when it
        declares none), None for a kind whose listing failed, and the failures as warnings."""
        capabilities = client.server_capabilities
        failures: list[str] = []

        async def listed(method: str, declared: bool) -> list | None:
            if not declared:
                return []
            try:
                return await self._list_all(client, method)
            except Exception as exc:
                if is_session_lost(exc):
                    raise
                if method == "resources/templates/list" and _not_supported(exc):
                    # The `resources` capability covers templates too, and many servers that
                    # have none leave the method out: no templates, not a failure.
                    return []
                failures.append(f"{method} failed: {self.describe(exc)}")
                log.warning("server %s: %s", self.name, failures[-1])
                return None

        prompts = await listed("prompts/list", capabilities.prompts is not None)
        declared = capabilities.resources is not None
        resources = await listed("resources/list", declared)
        templates = await listed("resources/templates/list", declared)
        both = (resources, templates) if resources is not None and templates is not None else None
        return prompts, both, failures

    async def _publish_connected(self, client: Client) -> None:
        info = client.server_info.model_dump(mode="json", exclude_none=True) if client.server_info else {}
        await db.run(
            Server.objects.filter(name=self.name).update,
            state=ServerState.CONNECTED,
            last_error="",
            protocol_version=self.protocol,
            instructions=(client.instructions or "").strip(),
            server_info=info,
        )
        await control.asend_group(control.STATUS, {"type": "status.changed", "server": self.name})

    async def _set_state(self, state: str, error: str) -> None:
        changed = await db.run(
            Server.objects.filter(name=self.name).exclude(state=state, last_error=error).update,
            state=state,
            last_error=error,
        )
        if changed:
            await control.asend_group(control.STATUS, {"type": "status.changed", "server": self.name})

    def _finish_attempts(self, outcome: str) -> None:
        waiting, self._attempt_done = self._attempt_done, []
        for fut in waiting:
            if not fut.done():
                fut.set_result(outcome)


def _refuse_sampling_and_roots(client: Client) -> None:
    """Answer a server's sampling and roots requests with -32601 (SPEC 20.4). The SDK answers
    them -32600 unless a callback is given, and a callback would declare the capability: so
    the session's dispatch of server requests is wrapped instead, the capabilities untouched."""
    import mcp_types as types

    session = client.session
    dispatch = session.dispatch_input_request

    async def refusing(ctx, request):
        if isinstance(request, (types.CreateMessageRequest, types.ListRootsRequest)):
            return not_offered(request.method)
        return await dispatch(ctx, request)

    session.dispatch_input_request = refusing  # type: ignore[method-assign]


def _updated_uri(message) -> str:
    """The URI of a `notifications/resources/updated` as `message_handler` gets it."""
    root = getattr(message, "root", message)
    params = getattr(root, "params", None)
    uri = getattr(params, "uri", None)
    return str(uri) if uri else ""


class _suppress:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return True
