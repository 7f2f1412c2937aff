"""The ASGI side of the MCP endpoints: bearer token before anything MCP, the endpoint from
the path, and the SDK's streamable-HTTP session manager, whose `run()` is kept open by a
long-lived task (Daphne has no ASGI lifespan): started by the first request, stopped by
`shutdown()` from the process wiring (`mcpcore.runtime.Runtime.stop`).
"""

import asyncio
import contextvars
import json
import logging

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
from starlette.datastructures import Headers
from starlette.responses import JSONResponse

from .. import db, names
from ..bearer import app_token, authenticate
from . import authserver, catalog, context, holding, reads, tools
from .changes import Changes

log = logging.getLogger("mcpcore.mcpserver")

NAME = "agenvoy-console"


class ConsoleServer(Server):
    """The SDK's low-level server; 2025 sessions are told tools, prompts and resources may
    change (SPEC 13.2, 20.2)."""

    def create_initialization_options(self, notification_options=None, *args, **kwargs):
        changing = NotificationOptions(tools_changed=True, prompts_changed=True, resources_changed=True)
        return super().create_initialization_options(notification_options or changing, *args, **kwargs)


def endpoint_of(path: str) -> str | None:
    """`""` for /mcp, `_permission`, a server name, `v/<view>` for /mcp/v/<view>, or None for
    a path that is none of them."""
    rest = path[len("/mcp") :].strip("/")
    if rest == "" or rest == catalog.PERMISSION:
        return rest
    if rest.startswith(catalog.VIEW):
        view = rest[len(catalog.VIEW) :]
        return rest if names.is_valid_server_name(view) else None
    return rest if names.is_valid_server_name(rest) else None


REALM = 'Bearer realm="agenvoy"'


def challenge_for(header: str | None, path: str = "/mcp") -> str:
    """The 401's `WWW-Authenticate` (SPEC 17.4, 21.1): the realm, the absolute URL of the
    endpoint's protected-resource metadata and the scope; a request that sent a bearer token
    the console does not accept is told `invalid_token` (RFC 6750) as well."""
    scheme, _, value = (header or "").partition(" ")
    metadata = f'resource_metadata="{authserver.resource_metadata_url(path)}", scope="{authserver.SCOPE}"'
    if scheme.lower() == "bearer" and value.strip():
        return f'{REALM}, {metadata}, error="invalid_token"'
    return f"{REALM}, {metadata}"


def _admit(header: str | None, endpoint: str | None, path: str = "/mcp"):
    """The request's token (an API token, or the one an app's access token for this endpoint
    stands for), and whether it may open the endpoint its path names (`catalog.admits`). Run
    through `db.read`: with the token, the server or view and the token's views cached it
    reads one row (the cache generation) on the loop's own connection."""
    token = authenticate(header) or app_token(header, path)
    if token is None:
        return None, False
    return token, catalog.admits(endpoint, token)


class McpEndpoint:
    """`/mcp`, `/mcp/<server>`, `/mcp/v/<view>` and `/mcp/_permission` (SPEC 13.1, 19) as one
    ASGI app."""

    def __init__(self) -> None:
        self.changes = Changes()
        # The handlers return the wire dict, which the SDK takes (its `HandlerResult`); its
        # annotations name only the result models.
        self.server = ConsoleServer(
            NAME,
            on_list_tools=context.on_list,  # type: ignore[arg-type]
            # A plain dict result: the SDK's runner takes one (runner._dump_result), its type not.
            on_call_tool=tools.on_call_tool,  # type: ignore[arg-type]
            # Lists and results as plain dicts too (SPEC 20.2): the SDK shapes them per era.
            on_list_prompts=context.on_list,  # type: ignore[arg-type]
            on_get_prompt=reads.on_get_prompt,  # type: ignore[arg-type]
            on_list_resources=context.on_list,  # type: ignore[arg-type]
            on_list_resource_templates=context.on_list,  # type: ignore[arg-type]
            on_read_resource=reads.on_read_resource,  # type: ignore[arg-type]
            on_subscribe_resource=self.changes.on_subscribe,  # type: ignore[arg-type]
            on_unsubscribe_resource=self.changes.on_unsubscribe,  # type: ignore[arg-type]
            on_completion=reads.on_completion,  # type: ignore[arg-type]
            on_subscriptions_listen=self.changes.on_listen,
            # The schema is ours to check, not the SDK's: without this the 2026 path would
            # run a whole tools/list before each call to validate Mcp-Param headers.
            get_tool_input_schema=lambda name: None,
        )
        # The console's spans in place of the SDK's (context.TraceMiddleware), then its own.
        self.server.middleware = [
            context.TraceMiddleware(),
            context.ConsoleMiddleware(self.changes, self.server),
        ]
        self.manager = StreamableHTTPSessionManager(self.server, json_response=False)
        self._ready: asyncio.Future | None = None
        self._stop: asyncio.Event | None = None
        self._task: asyncio.Task | None = None

    # --- life ----------------------------------------------------------------------------------

    async def _running(self) -> None:
        if self._ready is None:
            loop = asyncio.get_running_loop()
            self._ready = ready = loop.create_future()
            self._stop = stop = asyncio.Event()
            # A fresh context: the sessions' tasks must not inherit the first request's.
            self._task = loop.create_task(self._run(ready, stop), context=contextvars.Context())
        await asyncio.shield(self._ready)

    async def _run(self, ready: asyncio.Future, stop: asyncio.Event) -> None:
        try:
            async with self.manager.run():
                watcher = asyncio.ensure_future(self.changes.watch())
                ready.set_result(None)
                try:
                    await stop.wait()
                finally:
                    watcher.cancel()
                    self.changes.close()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError("stopped"))
            raise

    async def shutdown(self) -> None:
        """Close every MCP session and stream (held calls are cancelled as abandoned)."""
        if self._task is None or self._task.done() or self._stop is None:  # both set together
            return
        self._stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), 5)
        except Exception:
            log.exception("MCP session manager did not stop cleanly")

    def open_sessions(self) -> int:
        """MCP sessions (2025 protocol) open in this process, for `agenvoy_mcp_sessions`."""
        # A private attribute: the session manager counts its sessions but says the count to no
        # one (no SDK issue filed yet; missing: a public count of its open sessions).
        return len(self.manager._server_instances)

    # --- requests ------------------------------------------------------------------------------

    async def __call__(self, scope, receive, send) -> None:
        endpoint = endpoint_of(scope["path"])
        header = Headers(scope=scope).get("authorization")
        token, known = await db.read(_admit, header, endpoint, scope["path"])
        if token is None:
            challenge = challenge_for(header, scope["path"] if endpoint is not None else "/mcp")
            await JSONResponse(
                {"error": "authentication required"}, 401, headers={"WWW-Authenticate": challenge}
            )(scope, receive, send)
            return
        if not known:
            # A view or server the token may not see answers as one that does not exist.
            missing = "view not found" if (endpoint or "").startswith(catalog.VIEW) else "server not found"
            await JSONResponse({"error": missing}, 404)(scope, receive, send)
            return
        scope = dict(scope)
        scope[context.TOKEN_KEY] = token
        scope[context.ENDPOINT_KEY] = endpoint
        # The SDK binds a 2025 session to the principal that opened it.
        scope["user"] = AuthenticatedUser(AccessToken(token="", client_id=f"token-{token.pk}", scopes=[]))
        await self._running()
        if scope["method"] == "POST":
            await self._post(scope, receive, send)
        else:
            await self.manager.handle_request(scope, receive, send)

    async def _post(self, scope, receive, send) -> None:
        """Hand the POST on with its body read, and watch for the client closing it: on a 2025
        session that cancels the call it carried."""
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > DEFAULT_MAX_REQUEST_BODY_SIZE:
                await JSONResponse({"error": "request body too large"}, 413)(scope, receive, send)
                return
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        key = self._inflight_key(scope, body)
        replay = [{"type": "http.request", "body": body, "more_body": False}]
        gone = asyncio.Event()

        async def inner_receive():
            if replay:
                return replay.pop()
            await gone.wait()
            return {"type": "http.disconnect"}

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()
            if key is not None:
                holding.INFLIGHT.cancel(key)

        watcher = asyncio.ensure_future(watch())
        try:
            await self.manager.handle_request(scope, inner_receive, send)
        finally:
            watcher.cancel()

    HELD = ("tools/call", "prompts/get", "resources/read")  # requests that may wait for a person

    @classmethod
    def _inflight_key(cls, scope, body: bytes):
        sid = Headers(scope=scope).get("mcp-session-id")
        if not sid or not any(method.encode() in body for method in cls.HELD):
            return None
        try:
            message = json.loads(body)
        except ValueError:
            return None
        if isinstance(message, dict) and message.get("method") in cls.HELD and "id" in message:
            return holding.Inflight.key(sid, message["id"])
        return None


class McpRouter:
    """`/mcp` and `/mcp/...` to the MCP endpoint, the OAuth authorization server's paths (SPEC
    21) to it, everything else on."""

    def __init__(self, endpoint: McpEndpoint, other) -> None:
        self.endpoint = endpoint
        self.other = other
        self.auth = authserver.AuthServer()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and (scope["path"] == "/mcp" or scope["path"].startswith("/mcp/")):
            return await self.endpoint(scope, receive, send)
        if scope["type"] == "http" and authserver.serves(scope["path"]):
            return await self.auth(scope, receive, send)
        return await self.other(scope, receive, send)
