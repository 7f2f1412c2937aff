"""The one place that wires a process: the ASGI application (`agenvoy_site/asgi.py`, for a web
process under any ASGI server), the one-process console (`serve`), and a supervisor worker
(`mcpworker`).

    process = Runtime(supervisor)          # or Runtime() for a web process without one
    app = process.application(django_app)  # the ASGI application (web processes)
    await process.start()                  # host the supervisor on the running loop
    await process.stop(timeout)            # MCP clients' streams, then the supervisor

A Runtime moves this process's database work to `mcpcore.db`'s long-lived threads
(`db.use_dedicated_threads`) and turns `mcpcore.db.cache` on (tokens, tools, pins, server names
and views kept in memory while the database says they are current). While it hosts a
supervisor, every HTTP request carries it in its ASGI scope (`calls.LOCAL`): that is how the
call path of this process reaches it, as a `calls.LocalSupervisor`, and nothing else in the web
side holds it.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from channels.auth import AuthMiddlewareStack
from channels.routing import ProtocolTypeRouter, URLRouter
from channels.security.websocket import AllowedHostsOriginValidator

from . import calls, control, db, metrics
from .api.app import ApiHandler, ApiRouter
from .calls import traces
from .db import cache
from .mcpserver import McpEndpoint, McpRouter
from .supervisor import Supervisor, host
from .web import routing
from .web.staticserve import StaticFiles

log = logging.getLogger("mcpcore.runtime")

# An ASGI application as Django's own handler is typed: it receives and sends any mapping.
ASGIApp = Callable[
    [
        dict[str, Any],
        Callable[[], Awaitable[Mapping[str, Any]]],
        Callable[[Mapping[str, Any]], Awaitable[None]],
    ],
    Awaitable[Any],
]


class Runtime:
    """One process's wiring: its database threads, its MCP endpoint, and the supervisor it
    hosts (None in a web process beside `mcpworker`s, or under a plain ASGI server)."""

    def __init__(self, supervisor: Supervisor | None = None) -> None:
        db.use_dedicated_threads()
        cache.enable()
        traces.setup()
        self.supervisor = supervisor
        self.endpoint: McpEndpoint | None = None
        # The supervisor as requests see it: set once it is hosted, cleared first on stop.
        self._local: Supervisor | None = None
        self._host: asyncio.Task | None = None
        self._settled = False

    def application(self, site: ASGIApp) -> ASGIApp:
        """The ASGI application: `/mcp` through the MCP SDK's server side, `/v1` through a
        middleware-free Django handler, pages through `site` (the full Django handler),
        WebSockets through Channels routing, static files served directly."""
        self.endpoint = McpEndpoint()
        metrics.count_sessions_with(self.endpoint.open_sessions)
        http = McpRouter(self.endpoint, ApiRouter(ApiHandler(), site))
        websocket = AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(routing.websocket_urlpatterns)))

        async def with_local(scope: dict, receive, send) -> None:
            if not self._settled:
                self._settle()  # a web process under a plain ASGI server has no `start`
            local = self._local
            if local is not None:
                scope = {**scope, calls.LOCAL: local}
            await http(scope, receive, send)

        return StaticFiles(ProtocolTypeRouter({"http": with_local, "websocket": websocket}))

    async def start(self) -> None:
        """Host the supervisor (if any) on the running loop: it starts in a task, so pages
        answer while its servers connect, and calls of this process reach it from now on.
        Sync code on other threads reaches this loop through `control.run_to_end`."""
        self._settle()
        if self.supervisor is None or self._host is not None:
            return
        self._local = self.supervisor
        self._host = asyncio.ensure_future(host.run(self.supervisor))

    def _settle(self) -> None:
        """Sync code on other threads (pages' views, database jobs) reaches this loop, where
        the one-process channel layer's queues live, through `control.run_to_end`."""
        control.settle(asyncio.get_running_loop())
        self._settled = True

    async def stop(self, timeout: float) -> None:
        """MCP clients' streams first (their held calls end as cancelled), then the supervisor
        within `timeout` seconds: every session and stdio process closed, leases given back."""
        if self.endpoint is not None:
            await self.endpoint.shutdown()
        self._local = None
        if self.supervisor is not None:
            try:
                await asyncio.wait_for(self.supervisor.stop(), timeout)
            except Exception:
                log.exception("supervisor stop failed")
            if self._host is not None:
                self._host.cancel()
        # Last: the spans of calls the supervisor ended while stopping are in the batch.
        traces.shutdown()
