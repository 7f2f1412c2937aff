"""The lab's ASGI app: the SDK's `MCPServer` with its auth settings (authorization routes, dynamic
registration, revocation, protected resource metadata, bearer middleware on `/mcp`), plus:

- `/consent`: the page the authorize endpoint sends a browser to, `Approve` or `Deny`;
- a `/token` route put in front of the SDK's: `client_credentials` is answered here (the SDK's
  `ClientAuthenticator` checks the client, the provider mints the token), every other grant goes
  to the SDK's own `TokenHandler` (with HTTP Basic's client id copied into the form, which the
  SDK's authenticator needs); the garbage switch answers here too;
- the authorization server metadata of the SDK's `build_metadata`, advertising that grant and the
  RFC 9207 `iss` the consent step sends back;
- `/_lab/...`: stats, every token string issued, events, the raw authorize requests, switches.
"""

import base64
import hashlib
import html
import json
import time
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode

from mcp.server.auth.handlers.metadata import MetadataHandler
from mcp.server.auth.handlers.token import TokenErrorResponse, TokenHandler
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.middleware.client_auth import AuthenticationError, ClientAuthenticator
from mcp.server.auth.provider import TokenError
from mcp.server.auth.routes import build_metadata, cors_middleware
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tests.servers.oauthlab.provider import LabProvider

SCOPES = ["lab.read", "lab.write"]
REQUIRED_SCOPES = ["lab.read"]


def mcp_server(provider: LabProvider) -> MCPServer:
    """The protected MCP server: the SDK wires the authorization server and the bearer check."""
    mcp = MCPServer(
        "oauthlab",
        instructions="A protected MCP server: every request needs a bearer token from this lab.",
        auth_server_provider=provider,
        log_level="WARNING",
        # Strings, not AnyHttpUrl: AuthSettings keeps a path-less issuer without a trailing slash
        # only from a string, and the `iss` of the consent redirect must equal it exactly.
        auth=AuthSettings(
            issuer_url=provider.issuer,  # type: ignore[arg-type]
            resource_server_url=provider.resource,  # type: ignore[arg-type]
            validate_token_resource=True,
            required_scopes=REQUIRED_SCOPES,
            client_registration_options=ClientRegistrationOptions(
                enabled=True, valid_scopes=SCOPES, default_scopes=SCOPES
            ),
            revocation_options=RevocationOptions(enabled=True),
        ),
    )

    @mcp.tool()
    def whoami() -> dict:
        """Who the bearer token speaks for: its client id, subject, scopes and a fingerprint
        (the lab's /_lab/tokens names the same fingerprint; the token itself is never shown)."""
        token = get_access_token()
        if token is None:  # the bearer middleware lets nothing through without one
            raise RuntimeError("no access token in the request")
        provider.count("tool_calls", tool="whoami", client_id=token.client_id)
        return {
            "client_id": token.client_id,
            "subject": token.subject,
            "scopes": token.scopes,
            "token_fingerprint": fingerprint(token.token),
        }

    @mcp.tool()
    def echo(text: str) -> str:
        """Return the text unchanged."""
        provider.count("tool_calls", tool="echo")
        return text

    return mcp


def fingerprint(token: str) -> str:
    """What whoami shows of a token: enough to match it against /_lab/tokens, nothing to use."""
    return hashlib.sha256(token.encode()).hexdigest()[:16]


# --- the consent step --------------------------------------------------------------------------

CONSENT = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Authorize {client} - OAuth lab</title></head>
<body><main>
<h1>Authorize {client}</h1>
<p>{client} asks to use the lab's MCP server as <strong>{subject}</strong>, with the scopes:
{scopes}.</p>
<form method="post" action="/consent">
<input type="hidden" name="request" value="{request}">
<button type="submit" name="decision" value="approve">Approve</button>
<button type="submit" name="decision" value="deny">Deny</button>
</form>
</main></body></html>
"""


def consent_routes(provider: LabProvider) -> list[Route]:
    async def consent(request: Request) -> Response:
        if request.method == "GET":
            request_id = request.query_params.get("request", "")
            pending = provider.pending_request(request_id)
            if pending is None:
                return HTMLResponse("<h1>Unknown or finished authorization request</h1>", status_code=400)
            client = provider.data.clients[pending.client_id]
            scopes = provider.granted_scopes(client, pending.params.scopes)
            return HTMLResponse(
                CONSENT.format(
                    client=html.escape(client.client_name or pending.client_id),
                    subject="lab-user",
                    scopes=html.escape(" ".join(scopes) or "(none)"),
                    request=html.escape(request_id),
                )
            )
        form = await request.form()
        target = provider.decide(str(form.get("request", "")), form.get("decision") == "approve")
        if target is None:
            return HTMLResponse("<h1>Unknown or finished authorization request</h1>", status_code=400)
        return RedirectResponse(target, status_code=302, headers={"Cache-Control": "no-store"})

    return [Route("/consent", consent, methods=["GET", "POST"])]


# --- the token endpoint: client_credentials beside the SDK's grants ----------------------------


def token_route(provider: LabProvider) -> Route:
    authenticator = ClientAuthenticator(provider)
    sdk = TokenHandler(provider, authenticator)

    async def token(request: Request) -> Response:
        if provider.token_garbage is not None and provider.garbage_left != 0:
            if provider.garbage_left > 0:
                provider.garbage_left -= 1
            provider.count("garbage_answers", mode=provider.token_garbage)
            if provider.token_garbage == "html":
                return HTMLResponse("<html><body><h1>Service temporarily unavailable</h1></body></html>")
            return PlainTextResponse("Internal Server Error", status_code=500)
        request = await with_basic_client_id(request)
        form = await request.form()  # Starlette keeps it: the SDK's handler reads it again
        if form.get("grant_type") == "client_credentials":
            answer = await client_credentials(request, form)
        else:
            answer = await sdk.handle(request)
        if answer.status_code >= 400:
            error = json.loads(bytes(answer.body)).get("error", "unknown")
            provider.refused(error, endpoint="token", grant_type=form.get("grant_type"))
        return answer

    async def client_credentials(request: Request, form: Any) -> Response:
        try:
            client = await authenticator.authenticate_request(request)
        except AuthenticationError as e:
            return sdk_error(TokenErrorResponse(error="invalid_client", error_description=e.message), 401)
        scope, resource = form.get("scope"), form.get("resource")
        try:
            tokens = provider.client_credentials(
                client, str(scope) if scope else None, str(resource) if resource else None
            )
        except TokenError as e:
            return sdk.response(TokenErrorResponse(error=e.error, error_description=e.error_description))
        return sdk.response(tokens)

    def sdk_error(body: TokenErrorResponse, status: int) -> Response:
        answer = sdk.response(body)
        answer.status_code = status
        return answer

    return Route("/token", token, methods=["POST"])


async def with_basic_client_id(request: Request) -> Request:
    """The SDK's `ClientAuthenticator` wants `client_id` in the form even when the client
    authenticates with HTTP Basic, which RFC 6749 (2.3.1) does not ask of a client (the SDK's own
    `ClientCredentialsOAuthProvider` sends it only in the header): the same request, with the
    header's client id added to the form, for the SDK to check as usual."""
    form = await request.form()
    header = request.headers.get("authorization", "")
    if form.get("client_id") or not header.startswith("Basic "):
        return request
    try:
        client_id = unquote(base64.b64decode(header[6:]).decode().split(":", 1)[0])
    except (ValueError, UnicodeDecodeError):
        return request  # the SDK's authenticator refuses it as it stands
    body = urlencode([*form.multi_items(), ("client_id", client_id)]).encode()

    async def receive() -> Message:
        return {"type": "http.request", "body": body, "more_body": False}

    return Request(request.scope, receive)


def metadata_route(provider: LabProvider, settings: AuthSettings) -> Route:
    metadata = build_metadata(
        settings.issuer_url,
        None,
        settings.client_registration_options or ClientRegistrationOptions(),
        settings.revocation_options or RevocationOptions(),
    )
    metadata.grant_types_supported = [*(metadata.grant_types_supported or []), "client_credentials"]
    metadata.authorization_response_iss_parameter_supported = True
    return Route(
        "/.well-known/oauth-authorization-server",
        endpoint=cors_middleware(MetadataHandler(metadata).handle, ["GET", "OPTIONS"]),
        methods=["GET", "OPTIONS"],
    )


# --- /_lab/: what tests read and the switches they flip ------------------------------------------


def lab_routes(provider: LabProvider, authorize_requests: list[dict]) -> list[Route]:
    async def stats(request: Request) -> Response:
        return JSONResponse(provider.stats())

    async def tokens(request: Request) -> Response:
        return JSONResponse(provider.data.issued)

    async def events(request: Request) -> Response:
        return JSONResponse(provider.data.events)

    async def authorizes(request: Request) -> Response:
        return JSONResponse(authorize_requests)

    async def fail_refresh(request: Request) -> Response:
        body = await request.json()
        provider.fail_refreshes = int(body.get("count", 1))
        return JSONResponse({"fail_refreshes": provider.fail_refreshes})

    async def token_garbage(request: Request) -> Response:
        body = await request.json()
        mode = body.get("mode")
        if mode not in ("html", "500", "off", None):
            return JSONResponse({"error": "mode must be html, 500 or off"}, status_code=400)
        provider.token_garbage = None if mode in ("off", None) else mode
        provider.garbage_left = int(body.get("count", -1))
        return JSONResponse({"mode": provider.token_garbage, "count": provider.garbage_left})

    async def expire_access(request: Request) -> Response:
        """Every access token issued so far has expired (a test's shortcut to 'later')."""
        past = int(time.time()) - 1  # not 0: the SDK's bearer check reads 0 as "never expires"
        for token in provider.data.access.values():
            token.expires_at = past
        provider.save()
        return JSONResponse({"expired": len(provider.data.access)})

    return [
        Route("/_lab/stats", stats),
        Route("/_lab/tokens", tokens),
        Route("/_lab/events", events),
        Route("/_lab/authorize-requests", authorizes),
        Route("/_lab/fail-refresh", fail_refresh, methods=["POST"]),
        Route("/_lab/token-garbage", token_garbage, methods=["POST"]),
        Route("/_lab/expire-access", expire_access, methods=["POST"]),
    ]


class Watch:
    """Around the whole app: counts what `/mcp` refused (and expired tokens sent to it), keeps the
    raw query of each `/authorize` request, and says `oauthlab ready` once the lifespan started."""

    def __init__(self, app: ASGIApp, provider: LabProvider, authorize_requests: list[dict], ready: str):
        self.app, self.provider, self.authorize_requests, self.ready = (
            app,
            provider,
            authorize_requests,
            ready,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, self._announce(send))
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if path == "/authorize":
            self.authorize_requests.append(dict(parse_qsl(scope["query_string"].decode())))
        if path.startswith("/mcp"):
            bearer = dict(scope["headers"]).get(b"authorization", b"").decode()
            if bearer.lower().startswith("bearer ") and self.provider.expired(bearer[7:]):
                self.provider.count("mcp_expired_token")
            send = self._count_401(send)
        await self.app(scope, receive, send)

    def _announce(self, send: Send) -> Send:
        async def announcing(message: Message) -> None:
            await send(message)
            if message["type"] == "lifespan.startup.complete":
                print(self.ready, flush=True)

        return announcing

    def _count_401(self, send: Send) -> Send:
        async def counting(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 401:
                self.provider.count("mcp_unauthorized")
            await send(message)

        return counting


def build(provider: LabProvider) -> ASGIApp:
    """The whole lab: the SDK's app with the lab's routes in front of (and after) its own."""
    mcp = mcp_server(provider)
    app: Starlette = mcp.streamable_http_app(host="127.0.0.1")
    assert mcp.settings.auth is not None
    authorize_requests: list[dict] = []
    # In front: these paths exist in the SDK's app too; Starlette takes the first match.
    app.router.routes[0:0] = [token_route(provider), metadata_route(provider, mcp.settings.auth)]
    app.router.routes.extend([*consent_routes(provider), *lab_routes(provider, authorize_requests)])
    return Watch(app, provider, authorize_requests, f"oauthlab ready {provider.issuer}")
