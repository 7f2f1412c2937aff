"""The ASGI handler for `/v1`: Django without its middleware.

The API needs none of sessions, CSRF, messages or auth middleware (a bearer token is checked
by each view's decorator), and every sync middleware costs an async-to-thread hop per request.
"""

import asyncio
from contextlib import closing
from typing import TYPE_CHECKING, cast

from django.conf import settings
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.urls import set_script_prefix

if TYPE_CHECKING:
    from .auth import ApiRequest


class ApiHandler(ASGIHandler):
    """An ASGIHandler whose middleware chain is empty."""

    def load_middleware(self, is_async: bool = False) -> None:
        # load_middleware reads settings.MIDDLEWARE; this runs once, at import, before any
        # request, so swapping the list for the duration is safe.
        saved = settings.MIDDLEWARE
        settings.MIDDLEWARE = []
        try:
            super().load_middleware(is_async)
        finally:
            settings.MIDDLEWARE = saved

    async def __call__(self, scope, receive, send):
        # No per-request ThreadSensitiveContext: every `/v1` view is async (`api_view` runs a
        # sync view's body on mcpcore.db's view threads, so sync views never queue on one
        # shared thread), and the thread Django would start for each request would only run
        # the request signals' receivers.
        await self.handle(scope, receive, send)

    async def handle(self, scope, receive, send):
        """Django's request cycle without the request_started/finished signals, whose only
        receivers here (closing the request thread's database connections) have nothing to
        do: `/v1` answers are JSON built in memory, and its database work runs on mcpcore.db's
        threads. Saves two thread hand-offs per call."""
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        with closing(body_file):
            set_script_prefix(get_script_prefix(scope))
            request, error_response = self.create_request(scope, body_file)
            if request is None:
                await self.send_response(error_response, send)
                return
            # Long polls (`wait=`) watch this future and stop when the client has gone away.
            # This request becomes the ApiRequest its view gets: `client_gone` is attached
            # here, the token and the rest by `api_view` (a typing view of the same object).
            api_request = cast("ApiRequest", request)
            api_request.client_gone = asyncio.get_running_loop().create_future()
            listener = asyncio.ensure_future(_watch_disconnect(receive, api_request.client_gone))
            try:
                response = await self.run_get_response(request)
            finally:
                listener.cancel()
            if not api_request.client_gone.done():
                await self.send_response(response, send)

    async def send_response(self, response, send):
        # CommonMiddleware sets it for pages; without it the server sends the body chunked.
        if not response.streaming and not response.has_header("Content-Length"):
            response["Content-Length"] = str(len(response.content))
        await super().send_response(response, send)


async def _watch_disconnect(receive, gone: asyncio.Future) -> None:
    # After the body, the only message a server sends is http.disconnect.
    while (await receive())["type"] != "http.disconnect":
        pass
    if not gone.done():
        gone.set_result(None)


class ApiRouter:
    """`/v1/...` to the API handler, everything else to the full Django handler."""

    def __init__(self, api, site) -> None:
        self.api = api
        self.site = site

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith("/v1/"):
            return await self.api(scope, receive, send)
        return await self.site(scope, receive, send)
