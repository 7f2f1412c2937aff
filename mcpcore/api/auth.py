"""Bearer-token auth and JSON plumbing for `/v1` views."""

import asyncio
import functools
import json
import logging
from collections.abc import Callable

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt

from .. import db
from ..models import ApiToken

log = logging.getLogger("mcpcore.api")


class ApiError(Exception):
    """Raised by a view to answer `{"error": message}` with `status`."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def error(message: str, status: int) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


def _token_of(request: HttpRequest) -> ApiToken | None:
    return authenticate(request.headers.get("Authorization", ""))


def authenticate(header: str | None) -> ApiToken | None:
    """The live token an `Authorization: Bearer <token>` header value names, or None.
    Shared by `/v1` and the MCP endpoints (synchronous: it reads the database)."""
    scheme, _, value = (header or "").partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    token = ApiToken.objects.filter(token_hash=ApiToken.hash(value.strip()), revoked_at__isnull=True).first()
    if token is not None:
        now = timezone.now()
        # Touch last_used at most once a minute: a write per call would cost throughput.
        if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token


def _reject_constant(name: str):
    # Python reads NaN and Infinity, which JSON does not have and the database can't store.
    raise ValueError(f"{name} is not JSON")


def json_body(request: HttpRequest) -> dict:
    """The request body as a JSON object; an empty body is `{}`. What the database and the
    MCP servers could not take (lone surrogates, NaN, absurd nesting) is refused here."""
    try:
        raw = request.body
    except RequestDataTooBig:
        raise ApiError("request body too large", 413) from None
    if not raw:
        return {}
    try:
        data = json.loads(raw, parse_constant=_reject_constant)
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except (ValueError, UnicodeError, RecursionError):
        raise ApiError("request body must be valid JSON") from None
    if not isinstance(data, dict):
        raise ApiError("request body must be a JSON object")
    return data


def api_view(methods: tuple[str, ...]) -> Callable:
    """Token auth, allowed methods and JSON errors for a `/v1` view (sync or async).

    The view gets the token as `request.api_token`; ApiError becomes its JSON answer, and any
    other exception a logged 500 without details (never a traceback in the answer).
    """

    def wrap(view: Callable) -> Callable:
        is_async = asyncio.iscoroutinefunction(view)

        def precheck(request: HttpRequest) -> JsonResponse | None:
            token = _token_of(request)
            if token is None:
                return error("authentication required", 401)
            request.api_token = token
            if request.method not in methods:
                resp = error("method not allowed", 405)
                resp["Allow"] = ", ".join(methods)
                return resp
            return None

        if is_async:

            @functools.wraps(view)
            async def handler(request: HttpRequest, *args, **kwargs):
                denied = await db.run(precheck, request)
                if denied is not None:
                    return denied
                try:
                    return await view(request, *args, **kwargs)
                except ApiError as exc:
                    return error(exc.message, exc.status)
                except Exception:
                    log.exception("unhandled error in %s", request.path)
                    return error("internal error", 500)

        else:

            @functools.wraps(view)
            def handler(request: HttpRequest, *args, **kwargs):
                denied = precheck(request)
                if denied is not None:
                    return denied
                try:
                    return view(request, *args, **kwargs)
                except ApiError as exc:
                    return error(exc.message, exc.status)
                except Exception:
                    log.exception("unhandled error in %s", request.path)
                    return error("internal error", 500)

        return csrf_exempt(handler)

    return wrap
