"""The ASGI handler for `/v1`: Django without its middleware.

The API needs none of sessions, CSRF, messages or auth middleware (a bearer token is checked
by each view's decorator), and every sync middleware costs an async-to-thread hop per request.
"""

from django.conf import settings
from django.core.handlers.asgi import ASGIHandler


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
        # No per-request ThreadSensitiveContext: the API's database work runs on mcpcore.db's
        # threads, and the thread Django would start for each request would only run the
        # request signals' receivers.
        await self.handle(scope, receive, send)


class ApiRouter:
    """`/v1/...` to the API handler, everything else to the full Django handler."""

    def __init__(self, api, site) -> None:
        self.api = api
        self.site = site

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith("/v1/"):
            return await self.api(scope, receive, send)
        return await self.site(scope, receive, send)
