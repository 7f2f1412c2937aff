"""Serves static files (CSS, htmx) from the one-process server without DEBUG, so `make run`
works with no reverse proxy. Files come from the staticfiles finders, read-only."""

import mimetypes
from pathlib import Path

from django.conf import settings
from django.contrib.staticfiles import finders
from django.core.exceptions import SuspiciousFileOperation


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
        """The file and its type, or None. Only files found are cached: remembering misses
        would let anyone grow the cache without bound with made-up paths."""
        if rel in self._cache:
            return self._cache[rel]
        path = _lookup(rel)
        if path is None:
            return None
        ctype = mimetypes.guess_type(path)[0] or "application/octet-stream"
        if ctype.startswith("text/") or ctype == "application/javascript":
            ctype += "; charset=utf-8"
        try:
            self._cache[rel] = (Path(path).read_bytes(), ctype)
        except OSError:
            return None
        return self._cache[rel]


def _lookup(rel: str) -> str | None:
    """The finders' file for a relative static path; None for a path that is absolute, climbs
    out, or is not a plain relative name (the finders raise on some of those)."""
    parts = Path(rel).parts
    if (
        not rel
        or len(rel) > 1024
        or rel.startswith("/")
        or "\\" in rel
        or "\x00" in rel
        or ".." in parts
        or any(p.startswith("/") for p in parts)
    ):
        return None
    try:
        found = finders.find(rel)
    except (SuspiciousFileOperation, ValueError, OSError):
        return None
    if isinstance(found, list):  # find(all=True) shape, not used here, but be strict
        found = found[0] if found else None
    return found if found and Path(found).is_file() else None
