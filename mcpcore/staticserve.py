"""Serves static files (CSS, htmx) from the one-process server without DEBUG, so `make run`
works with no reverse proxy. Files come from the staticfiles finders, read-only."""

import mimetypes
from pathlib import Path

from django.conf import settings
from django.contrib.staticfiles import finders


class StaticFiles:
    """ASGI wrapper: GET/HEAD under STATIC_URL answered from the finders, the rest passed on."""

    def __init__(self, app) -> None:
        self.app = app
        self.prefix = "/" + settings.STATIC_URL.strip("/") + "/"
        self._cache: dict[str, tuple[bytes, str] | None] = {}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not scope["path"].startswith(self.prefix):
            return await self.app(scope, receive, send)
        found = self._find(scope["path"][len(self.prefix) :])
        if found is None or scope["method"] not in ("GET", "HEAD"):
            status, body, ctype = 404, b"not found", "text/plain"
        else:
            status, (body, ctype) = 200, found
        headers = [
            (b"content-type", ctype.encode()),
            (b"content-length", str(len(body)).encode()),
            (b"cache-control", b"public, max-age=3600"),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})

    def _find(self, rel: str) -> tuple[bytes, str] | None:
        if rel not in self._cache:
            path = finders.find(rel) if ".." not in Path(rel).parts else None
            if not path:
                self._cache[rel] = None
            else:
                ctype = mimetypes.guess_type(path)[0] or "application/octet-stream"
                if ctype.startswith("text/") or ctype == "application/javascript":
                    ctype += "; charset=utf-8"
                self._cache[rel] = (Path(path).read_bytes(), ctype)
        return self._cache[rel]
