"""One MCP server's session, owned by its own task: connect, register, watch, renew.

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
from django.conf import settings
from mcp import Client

from .. import control, db, notify, oauth
from ..choices import ServerState, Transport
from ..models import Server
from . import registry, transport, upstream

log = logging.getLogger("mcpcore.supervisor")

PAGE_CAP = 100
DEBOUNCE = 0.2
BACKOFF_START = 5.0
BACKOFF_MAX = 300.0
NEEDS_AUTHORIZATION = "needs authorization"
HTTP = (Transport.STREAMABLE_HTTP, Transport.SSE)


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


def _not_supported(exc: BaseException) -> bool:
    from mcp.shared.exceptions import MCPError

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
        target = transport.make_target(server.config, server.transport, errlog, tag, auth=self.provider)
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
        account = await db.run(oauth.account_for, self.name)
        grant = oauth.grant_of(server, account)
        if grant is None:
            return None
        return await upstream.ready(server, grant)

    async def _asks_for_oauth(self, server: Server) -> bool:
        """A failed connect of an HTTP server with no `oauth` key and no Authorization header:
        did it answer 401 + `WWW-Authenticate: Bearer` (SPEC 16.1)? Then it is remembered."""
        config = server.config
        if server.transport not in HTTP or "oauth" in config or oauth.has_authorization_header(config):
            return False
        if not await upstream.asks_for_oauth(config):
            return False
        await db.run(oauth.mark_detected, self.name, oauth.server_url(config))
        log.info("server %s asks for OAuth: needs authorization", self.name)
        return True

    async def _needs_authorization(self, refused: str) -> None:
        """The state of SPEC 16.1; after a refused renewal the stored tokens are dropped and
        people are told (SPEC 16.4)."""
        self.error = NEEDS_AUTHORIZATION
        if refused:
            log.warning("server %s: the authorization server refused the renewal: %s", self.name, refused)
            await db.run(oauth.clear_tokens, self.name)
            await db.run(notify.queue_needs_authorization, self.name)
        await self._set_state(ServerState.NEEDS_AUTHORIZATION, NEEDS_AUTHORIZATION)
        self._finish_attempts(NEEDS_AUTHORIZATION)

    async def _renewer(self) -> None:
        """Renew the access token at 80 % of its lifetime, used or not (SPEC 16.4). Only the
        holder of the server's session runs this. A refusal ends the session (raised)."""
        provider = self.provider
        assert provider is not None
        while True:
            account = await db.run(oauth.account_for, self.name)
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
        client = Client(target, message_handler=self._on_message, cache=None, mode="auto")
        # A few connects at a time: a hundred servers starting together on two cores would
        # all run out their connect time at once, and again on every retry.
        async with self.sup.connect_slot() as release:
            with anyio.CancelScope() as scope:
                # The connect bound covers the handshake and first listing, then is lifted.
                scope.deadline = anyio.current_time() + settings.AGENVOY_CONNECT_TIMEOUT
                async with client:
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
        async with anyio.create_task_group() as tg:
            if self.protocol >= "2026":
                tg.start_soon(self._listen, client)
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
        """2026-07-28 sessions deliver list_changed only inside `listen()`."""
        while True:
            try:
                async with client.listen(tools_list_changed=True) as sub:
                    async for _event in sub:
                        self._refresh.set()
            except Exception as exc:
                if is_session_lost(exc):
                    self._lost.set()
                    return
                if _not_supported(exc):
                    # Servers without subscriptions are covered by the poll alone.
                    log.info("server %s: no listen support (%s); polling only", self.name, self.describe(exc))
                    return
                log.info("server %s: listen ended: %s", self.name, self.describe(exc))
            await anyio.sleep(1)
            # The stream can end when the server dies: a ping tells loss from a quiet close.
            if await self._unanswered(client, settings.AGENVOY_LIST_TIMEOUT):
                self._lost.set()
                return

    async def _on_message(self, message) -> None:
        method = getattr(message, "method", None)
        if method is None and hasattr(message, "root"):
            method = getattr(message.root, "method", None)
        if method == "notifications/tools/list_changed":
            self._refresh.set()
        elif isinstance(message, Exception):
            log.info("server %s: transport message: %s", self.name, self.describe(message))
            if is_session_lost(message):
                self._lost.set()

    async def _list_all(self, client: Client) -> list:
        """Every page of tools/list, bounded; a repeated cursor or too many pages is an error."""
        tools: list = []
        cursor = None
        seen: set[str] = set()
        with anyio.fail_after(settings.AGENVOY_LIST_TIMEOUT):
            for _ in range(PAGE_CAP):
                page = await client.list_tools(cursor=cursor, cache_mode="bypass")
                tools.extend(page.tools)
                cursor = page.next_cursor
                if not cursor:
                    return tools
                if cursor in seen:
                    raise RuntimeError(f"tools/list repeated the cursor {cursor!r}")
                seen.add(cursor)
        raise RuntimeError(f"tools/list has more than {PAGE_CAP} pages")

    async def _register(self, client: Client, connecting: bool = False) -> None:
        """List the tools and register them when their signature differs from the one recorded
        (`Server.signature`, its only record), and always on a new session: what a row holds
        beyond the signature (titles, annotations, output schemas, columns a newer console adds)
        is then brought up to date once per connect, and never rewritten by a poll."""
        tools = await self._list_all(client)
        rows, warnings = registry.tool_dicts(self.name, tools)
        sig = registry.signature(rows)
        if not connecting and await db.run(registry.is_registered, self.name, sig):
            return  # SPEC 3: an unchanged signature writes nothing
        if await db.run(registry.replace_tools, self.name, rows, sig, warnings):
            log.info("server %s: %d tools registered", self.name, len(rows))
            await control.asend_group(control.STATUS, {"type": "status.changed", "server": self.name})

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


class _suppress:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return True
