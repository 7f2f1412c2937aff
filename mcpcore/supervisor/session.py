"""One MCP server's session, owned by its own task: connect, watch, renew. Its other jobs are
parts it owns: `listings` (register tools, prompts, resources), `subscriptions` (resource
subscriptions), `askers` (the questions of the calls running on it). The runner uses the
session through `running(asker)`, `needs_authorization` and `renew_after_loss()`.

The Client is entered and exited in this task only. Calls from other tasks use the published
client while `ready` is set; a session is published only after its handshake and first listing.
"""

import asyncio
import contextlib
import logging
import math
import random
import uuid
from collections.abc import Callable
from typing import IO, Protocol

import anyio
import mcp_types as types
from django.conf import settings
from mcp import Client
from mcp.client import advertise
from mcp.shared.exceptions import MCPError
from mcp_types import ErrorData

from .. import control, db
from ..calls import notify
from ..choices import ServerState, Transport
from ..models import Server
from ..oauth import upstream as oauth_upstream
from . import transport, upstream
from .askers import Asker, Askers, Filed
from .errors import describe, found, is_session_lost
from .listings import Listings
from .subscriptions import Subscriptions

log = logging.getLogger("mcpcore.supervisor")

DEBOUNCE = 0.2
BACKOFF_START = 5.0
BACKOFF_MAX = 300.0
NEEDS_AUTHORIZATION = "needs authorization"
HTTP = (Transport.STREAMABLE_HTTP, Transport.SSE)
# The MCP Apps extension (SPEC 20.5): declared so that servers offer their `ui://` apps, which
# the console passes on to the hosts that render them.
UI_EXTENSION = "io.modelcontextprotocol/ui"
UI_SETTINGS = {"mimeTypes": ["text/html;profile=mcp-app"]}
REFRESHING = (
    "notifications/tools/list_changed",
    "notifications/prompts/list_changed",
    "notifications/resources/list_changed",
)


METHOD_NOT_FOUND = -32601


def not_offered(method: str):
    """The JSON-RPC error for what the console does not offer its servers: sampling and roots
    (deprecated by 2026-07-28; SPEC 20.4)."""
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


INTERNAL_ERROR = -32603


def upstream_error(exc: BaseException, session: "ServerSession | None" = None) -> dict:
    """`{"code", "message"}` of what a server answered (its JSON-RPC error) or of what went
    wrong on the way (-32603), secrets masked."""
    text = session.describe(exc) if session is not None else describe(exc)
    if isinstance(exc, MCPError):
        message = exc.error.message
        if session is not None:
            message = transport.redact(message, session.secrets)
        return {"code": exc.error.code, "message": message}
    return {"code": INTERNAL_ERROR, "message": text}


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
        # The expanded secret values of the current config, kept out of stored errors and logs.
        self.secrets: list[str] = []
        # The `Server.config_hash` the supervisor last (re)started it for.
        self.config_hash = ""
        # An OAuth server's provider (SPEC 16), shared by its transport and its renewals.
        self.provider: upstream.Provider | None = None
        # Its parts, one job each: listing and registering, resource subscriptions (SPEC
        # 20.2), the questions of the calls running on it (SPEC 20.4).
        self.listings = Listings(self)
        self.subscriptions = Subscriptions(self)
        self.askers = Askers()

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

    def running(self, asker: Asker) -> Filed:
        """A call running on this session, from its start to its end: filed for the questions
        its server asks (`askers`), and so counted (`active_calls`)."""
        return self.askers.filed(asker)

    @property
    def active_calls(self) -> int:
        """The calls running on it: no ping is sent while one runs, and the supervisor keeps
        the session where it is."""
        return len(self.askers.running)

    @property
    def needs_authorization(self) -> bool:
        """Waiting for a person to authorize it (SPEC 16.1): a call fails at once."""
        return self.error == NEEDS_AUTHORIZATION and not self.ready.is_set()

    async def renew_after_loss(self) -> None:
        """A call found the session gone: renew it, and let the call wait for the new one."""
        self.session_lost()
        await asyncio.sleep(0)
        self.ready.clear()

    def list_changed(self) -> None:
        """The server said a list changed: register again (debounced)."""
        self._refresh.set()

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
                waiting = found(exc, upstream.NeedsAuthorization)
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
        if (
            server.transport not in HTTP
            or "oauth" in config
            or oauth_upstream.has_authorization_header(config)
        ):
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
            elicitation_callback=self.askers.on_elicit,
        )
        # A few connects at a time: a hundred servers starting together on two cores would
        # all run out their connect time at once, and again on every retry.
        async with self.sup.connect_slot() as release:
            with anyio.CancelScope() as scope:
                # The connect bound covers the handshake and first listing, then is lifted.
                scope.deadline = anyio.current_time() + settings.AGENVOY_CONNECT_TIMEOUT
                async with client:
                    _refuse_sampling_and_roots(client)
                    await self.listings.register(client, connecting=True)
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
        self.subscriptions.connected()
        async with anyio.create_task_group() as tg:
            if self.protocol >= "2026":
                tg.start_soon(self.subscriptions.listen, client)
            tg.start_soon(self.subscriptions.follow, client)
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
                    await self.listings.register(client)
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
            problem = await self.unanswered(client, max(every, 5))
            if problem:
                log.warning("server %s: ping failed: %s", self.name, problem)
                self.error = f"session lost: {problem}"
                self._lost.set()
                return

    async def unanswered(self, client: Client, timeout: float) -> str:
        """Why the server did not answer a ping ("" when it did). 2026-07-28 servers answer
        `ping` with "method not found": any answer proves the session alive."""
        try:
            with anyio.fail_after(timeout):
                await client.send_ping()
        except MCPError as exc:
            return self.describe(exc) if exc.error.code in (-32000, -32001) else ""
        except Exception as exc:
            return self.describe(exc) or "timed out"
        return ""

    async def _on_message(self, message) -> None:
        method = getattr(message, "method", None)
        if method is None and hasattr(message, "root"):
            method = getattr(message.root, "method", None)
        if method in REFRESHING:
            self._refresh.set()
        elif method == "notifications/resources/updated":
            uri = _updated_uri(message)
            if uri:
                await self.subscriptions.updated(uri)
        elif method == "notifications/elicitation/complete":
            await self.askers.completed(getattr(getattr(message, "params", None), "elicitation_id", None))
        elif isinstance(message, Exception):
            log.info("server %s: transport message: %s", self.name, self.describe(message))
            if is_session_lost(message):
                self._lost.set()

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
