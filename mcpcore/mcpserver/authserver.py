"""The console as its own OAuth authorization server for its MCP endpoints (SPEC 21), on the
`mcp` SDK's server side: its authorize, token, registration and revocation handlers
(`create_auth_routes`) and its protected-resource metadata (`create_protected_resource_routes`),
over `ConsoleProvider`, the SDK's provider protocol on the console's rows (`oauth/clients.py`,
`oauth/grants.py`): the door's part of the authorization server.

What the SDK does not do (STACK.md) is filled in here, around its handlers, never by patching
them: Client ID Metadata Documents (`get_client` resolves an `https` client_id), the metadata
fields it lacks (the metadata route is the console's), `iss` on every redirect back to a client
(added to its answers on the way out), loopback redirect URIs with any port and the scope
`mcp` only (`ConsoleClient`), the redirect scheme check at registration (`register_client`),
single-use codes, the `resource` of a token request (read from the form on the way in), HTTP
Basic client auth without `client_id` in the form (added on the way in), an unknown client or
redirect URI answered with a page rather than JSON, `POST /revoke` answering 200 always, and
a public client's revocation without a `client_secret` field, and the 401 of the MCP
endpoints (`app.challenge_for`).
"""

import asyncio
import base64
import binascii
import contextvars
import html
import logging
from types import SimpleNamespace
from typing import Any, cast
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from django.conf import settings
from django.http import HttpRequest
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    AuthorizeError,
    RefreshToken,
    RegistrationError,
    TokenError,
)
from mcp.server.auth.routes import build_metadata, create_auth_routes, create_protected_resource_routes
from mcp.server.auth.settings import ClientRegistrationOptions, RevocationOptions
from mcp.shared.auth import InvalidRedirectUriError, InvalidScopeError, OAuthClientInformationFull, OAuthToken
from pydantic import AnyHttpUrl, AnyUrl
from starlette.datastructures import Headers
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from .. import audit, calls, db
from ..models import AppClient, AppGrant
from ..oauth import clients, grants

log = logging.getLogger("mcpcore.mcpserver.oauth")

SCOPE = "mcp"
RESOURCE_NAME = "Agenvoy console"
WELL_KNOWN_AS = "/.well-known/oauth-authorization-server"
WELL_KNOWN_PR = "/.well-known/oauth-protected-resource"
PATHS = ("/authorize", "/token", "/register", "/revoke")
BODY_MOST = 64 * 1024
CORS = {"Access-Control-Allow-Origin": "*"}  # as the SDK's own routes answer (browser-based clients)

# Set by the console's wrappers around the SDK's handlers, read by the provider they call.
_address: contextvars.ContextVar[str] = contextvars.ContextVar("client_address", default="")
_resource: contextvars.ContextVar[str | None] = contextvars.ContextVar("token_resource", default=None)
_revoking: contextvars.ContextVar[bool] = contextvars.ContextVar("revoking", default=False)
_refused: contextvars.ContextVar[dict] = contextvars.ContextVar("register_refused")


def issuer() -> str:
    return settings.AGENVOY_PUBLIC_URL


def serves(path: str) -> bool:
    """Whether a path is this server's (everything else goes on to the other apps)."""
    return (
        path in PATHS
        or path == WELL_KNOWN_AS
        or path == WELL_KNOWN_PR
        or path.startswith(WELL_KNOWN_PR + "/")
    )


def resource_metadata_url(path: str) -> str:
    """The absolute URL of the protected-resource metadata of the MCP endpoint at `path`."""
    return issuer() + WELL_KNOWN_PR + (path.rstrip("/") or "/mcp")


# --- the client, as the SDK's handlers see it ----------------------------------------------------


class ConsoleClient(OAuthClientInformationFull):
    """A client of the console: loopback redirect URIs match with any port (RFC 8252 7.3), the
    only scope is `mcp`. `allowed`: a person has allowed it (its row's `allowed_at`)."""

    allowed: bool = False

    def validate_redirect_uri(self, redirect_uri: AnyUrl | None) -> AnyUrl:
        registered = [str(u) for u in self.redirect_uris or []]
        asked = str(redirect_uri) if redirect_uri is not None else None
        if asked is None:
            if len(registered) == 1:
                return AnyUrl(registered[0])
            raise InvalidRedirectUriError("redirect_uri must be given: the client registered more than one")
        if any(clients.redirect_matches(r, asked) for r in registered):
            return cast(AnyUrl, redirect_uri)
        raise InvalidRedirectUriError(f"redirect_uri {asked} is not registered for this client")

    def validate_scope(self, requested_scope: str | None) -> list[str] | None:
        if requested_scope is None:
            return None
        scopes = requested_scope.split()
        for scope in scopes:
            if scope != SCOPE:
                raise InvalidScopeError(f"unknown scope {scope}; the only scope is {SCOPE}")
        return scopes


def _client_info(row: AppClient) -> ConsoleClient:
    secret = clients.secret_of(row)
    return ConsoleClient(
        client_id=row.client_id,
        client_secret=secret,
        client_id_issued_at=int(row.created_at.timestamp()),
        client_secret_expires_at=0 if secret else None,
        redirect_uris=[AnyUrl(u) for u in row.redirect_uris] or None,
        token_endpoint_auth_method=row.auth_method,
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        scope=SCOPE,
        client_name=row.name or None,
        allowed=row.allowed_at is not None,
    )


async def client_or_why(client_id: str) -> tuple[ConsoleClient | None, str]:
    """The client `client_id` names, fetching its metadata document when it is one and is not
    kept (or kept longer than 5 minutes); else None and why."""
    row, stale = await db.read(clients.known, client_id)
    if stale:
        why = clients.failed_recently(client_id)
        if why is not None:
            return None, why
        try:
            fetch = clients.start_fetch(client_id, _address.get())
            # Shielded: the fetch may be shared with other requests, which one leaving must not end.
            document = await asyncio.shield(asyncio.wrap_future(fetch))
        except clients.Busy as exc:
            return None, exc.description
        except clients.ClientError as exc:
            clients.note_failure(client_id, exc.description)
            log.info("client metadata document %s refused: %s", client_id, exc.description)
            return None, exc.description
        row = await db.write(clients.keep_document, client_id, document)
    if row is None:
        return None, "unknown client"
    return _client_info(row), ""


class ConsoleCode(AuthorizationCode):
    row: Any = None  # the AppCode


class ConsoleRefresh(RefreshToken):
    row: Any = None  # the AppToken
    grace: bool = False


class ConsoleProvider:
    """The SDK's `OAuthAuthorizationServerProvider` on the console's rows (`oauth/`)."""

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        client, _why = await client_or_why(client_id)
        return client

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        metadata = client_info.model_dump(mode="json")
        try:
            row, secret = await db.write(
                clients.register, metadata, client_info.client_secret, _address.get()
            )
        except clients.ClientError as exc:
            if exc.error == "too_many_registrations":
                _refused.get()["too_many"] = True  # answered 429 by `_register`
                raise RegistrationError("invalid_client_metadata", exc.description) from None
            raise RegistrationError(exc.error, exc.description) from None  # type: ignore[arg-type]
        # An equal registration nobody allowed yet: the SDK answers with the one kept.
        client_info.client_id = row.client_id
        client_info.client_secret = secret
        client_info.client_name = row.name or None  # as kept: at most 200 characters
        client_info.client_id_issued_at = int(row.created_at.timestamp())

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        asked = params.resource
        path = "/mcp" if asked is None else await db.read(grants.endpoint_path, asked)
        if path is None:
            raise AuthorizeError("invalid_target", "resource must be one of the console's MCP endpoints")
        request = grants.sign_request(
            {
                "client_id": client.client_id,
                "redirect_uri": str(params.redirect_uri),
                "explicit": params.redirect_uri_provided_explicitly,
                "code_challenge": params.code_challenge,
                "state": params.state,
                "resource": path,
                "asked_resource": asked or "",
            }
        )
        return f"{issuer()}/apps/allow/?{urlencode({'request': request})}"

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        row = await db.write(grants.code_row, client.client_id or "", authorization_code)
        if row is None:
            return None
        return ConsoleCode(
            code=authorization_code,
            scopes=[SCOPE],
            expires_at=row.expires_at.timestamp(),
            client_id=client.client_id or "",
            code_challenge=row.code_challenge,
            redirect_uri=AnyUrl(row.redirect_uri),
            redirect_uri_provided_explicitly=row.redirect_uri_explicit,
            resource=row.resource or None,
            row=row,
        )

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        row = cast(ConsoleCode, authorization_code).row
        await _check_resource(row.grant.resource)
        issued = await db.write(grants.exchange_code, row)
        if issued is None:
            raise TokenError("invalid_grant", "authorization code was already used or has expired")
        return _answer(issued)

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        if _revoking.get():
            # POST /revoke: handed on as it came, so that the SDK's handler calls revoke_token,
            # which finds it among this client's own (reading it here as a token request does
            # would end the grant of a used one as a reuse).
            return RefreshToken(token=refresh_token, client_id=client.client_id or "", scopes=[SCOPE])
        row, grace, reused = await db.write(grants.refresh_row, client.client_id or "", refresh_token)
        if reused is not None:
            await _revoke_reused(reused)
        if row is None:
            return None
        return ConsoleRefresh(
            token=refresh_token,
            client_id=client.client_id or "",
            scopes=[SCOPE],
            expires_at=int(row.expires_at.timestamp()),
            resource=row.grant.resource,
            row=row,
            grace=grace,
        )

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        refresh = cast(ConsoleRefresh, refresh_token)
        await _check_resource(refresh.row.grant.resource)
        issued = await db.write(grants.rotate, refresh.row, refresh.grace)
        if issued is None:
            raise TokenError("invalid_grant", "refresh token was already used")
        return _answer(issued)

    async def load_access_token(self, token: str) -> AccessToken | None:
        row = await db.read(grants.access_row, token)
        if row is None:
            return None
        return AccessToken(
            token=token,
            client_id=row.grant.client.client_id,
            scopes=[SCOPE],
            expires_at=int(row.expires_at.timestamp()),
        )

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        await db.write(grants.revoke_token, token.client_id, token.token)


async def _revoke_reused(grant: AppGrant) -> None:
    """A refresh token used after it was replaced: the whole grant goes (SPEC 21.4), and its
    token's pending calls end as a revoked token's do (SPEC 12.2)."""
    _revoked, ended = await db.write(calls.app_grant_revoke, grant, reason="refresh token reused")
    for call_id in ended:
        await calls.announce(call_id)


async def _check_resource(resource: str) -> None:
    """A token request's `resource`, when given, must be the grant's (RFC 8707)."""
    asked = _resource.get()
    if asked is None:
        return
    path = await db.read(grants.endpoint_path, asked)
    if path != resource:
        raise TokenError("invalid_target", "resource is not the one this app was allowed")


def _answer(issued: tuple[str, str, int]) -> OAuthToken:
    access, refresh, seconds = issued
    return OAuthToken(
        access_token=access, token_type="Bearer", expires_in=seconds, refresh_token=refresh, scope=SCOPE
    )


# --- the routes ----------------------------------------------------------------------------------


class AuthServer:
    """The authorization server's ASGI app: `/.well-known/oauth-authorization-server`,
    `/.well-known/oauth-protected-resource[<path>]`, `/authorize`, `/token`, `/register`,
    `/revoke`. The SDK's routes are made on first use (the issuer is read from the settings)."""

    def __init__(self) -> None:
        self.provider = ConsoleProvider()
        self._routes: dict[str, Route] | None = None

    def routes(self) -> dict[str, Route]:
        if self._routes is None:
            made = create_auth_routes(
                self.provider,  # type: ignore[arg-type]
                AnyHttpUrl(issuer()),
                client_registration_options=ClientRegistrationOptions(
                    enabled=settings.AGENVOY_OAUTH_REGISTRATION, valid_scopes=[SCOPE], default_scopes=[SCOPE]
                ),
                revocation_options=RevocationOptions(enabled=True),
            )
            self._routes = {route.path: route for route in made}
        return self._routes

    def metadata(self) -> dict:
        """RFC 8414 metadata, exactly the fields of SPEC 21.1."""
        base = build_metadata(
            AnyHttpUrl(issuer()),
            None,
            ClientRegistrationOptions(enabled=True, valid_scopes=[SCOPE]),
            RevocationOptions(enabled=True),
        ).model_dump(mode="json", exclude_none=True)
        keep = (
            "issuer",
            "authorization_endpoint",
            "token_endpoint",
            *(("registration_endpoint",) if settings.AGENVOY_OAUTH_REGISTRATION else ()),
            "revocation_endpoint",
            "response_types_supported",
            "grant_types_supported",
            "code_challenge_methods_supported",
        )
        out = {k: base[k] for k in keep}
        out["issuer"] = issuer()
        out["token_endpoint_auth_methods_supported"] = list(clients.AUTH_METHODS)
        out["scopes_supported"] = [SCOPE]
        out["client_id_metadata_document_supported"] = True
        out["authorization_response_iss_parameter_supported"] = True
        return out

    async def __call__(self, scope, receive, send) -> None:
        reset = _address.set(audit.address_of(_as_request(scope)))
        try:
            await self._serve(scope, receive, send)
        finally:
            _address.reset(reset)

    async def _serve(self, scope, receive, send) -> None:
        path = scope["path"]
        try:
            routes = self.routes()
        except ValueError:
            # An issuer that is neither https nor loopback: no OAuth (RFC 8414 asks for https).
            log.warning("AGENVOY_PUBLIC_URL %s is not https: apps cannot sign in", issuer())
            await _not_found(scope, receive, send)
            return
        if path == WELL_KNOWN_AS:
            if scope["method"] not in ("GET", "HEAD", "OPTIONS"):
                await _not_found(scope, receive, send)
                return
            await JSONResponse(self.metadata(), headers={"Cache-Control": "public, max-age=3600", **CORS})(
                scope, receive, send
            )
        elif path == WELL_KNOWN_PR or path.startswith(WELL_KNOWN_PR + "/"):
            await self._resource_metadata(scope, receive, send)
        elif path == "/authorize":
            await self._authorize(routes[path], scope, receive, send)
        elif path == "/token":
            await self._token(routes[path], scope, receive, send)
        elif path == "/register":
            if not settings.AGENVOY_OAUTH_REGISTRATION:
                await _not_found(scope, receive, send)
                return
            await self._register(routes[path], scope, receive, send)
        else:
            await self._revoke(routes[path], scope, receive, send)

    async def _resource_metadata(self, scope, receive, send) -> None:
        path = scope["path"][len(WELL_KNOWN_PR) :] or "/mcp"
        endpoint = await db.read(grants.endpoint_path, issuer() + path) if "//" not in path else None
        if endpoint is None or endpoint != path or scope["method"] not in ("GET", "HEAD", "OPTIONS"):
            await _not_found(scope, receive, send)
            return
        # Strings, not AnyHttpUrl: the SDK's model keeps an empty path as written (no `/` added).
        (route,) = create_protected_resource_routes(
            cast(AnyHttpUrl, issuer() + path),
            [cast(AnyHttpUrl, issuer())],
            scopes_supported=[SCOPE],
            resource_name=RESOURCE_NAME,
        )
        await route.handle({**scope, "path": urlsplit(resource_metadata_url(path)).path}, receive, send)

    async def _authorize(self, route: Route, scope, receive, send) -> None:
        """An unknown client or a redirect URI it did not register: a 400 page, never a
        redirect (SPEC 21.3). Then the SDK's handler; `iss` added to its redirects, and its
        error redirects for a client no person has allowed yet made the 400 page as well: anyone
        may register a client (or serve a document) with a redirect URI of their choosing, and
        the console's address must not become a link to it."""
        body = await _body(receive) if scope["method"] == "POST" else b""
        source = (
            body.decode("utf-8", "replace") if scope["method"] == "POST" else scope["query_string"].decode()
        )
        params = dict(parse_qsl(source, keep_blank_values=True))
        client_id = params.get("client_id", "")
        client, why = await client_or_why(client_id) if client_id else (None, "client_id is missing")
        if client is None:
            await _failed(why if why != "unknown client" else f"unknown client {client_id}")(
                scope, receive, send
            )
            return
        try:
            client.validate_redirect_uri(AnyUrl(params["redirect_uri"]) if "redirect_uri" in params else None)
        except (InvalidRedirectUriError, ValueError) as exc:
            why = exc.message if isinstance(exc, InvalidRedirectUriError) else "redirect_uri is not a URL"
            await _failed(why)(scope, receive, send)
            return
        answer = _with_iss(send) if client.allowed else _errors_as_page(scope, receive, send)
        await route.handle(scope, _replay(body, receive), answer)

    async def _token(self, route: Route, scope, receive, send) -> None:
        body = await _body(receive)
        form = dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
        basic = _basic_client_id(Headers(scope=scope).get("authorization", ""))
        if basic and "client_id" not in form:
            # The SDK's client check reads client_id from the form only (python-sdk #3545).
            form["client_id"] = basic
            body = urlencode(form).encode()
        reset = _resource.set(form.get("resource") or None)
        try:
            await route.handle(_with_length(scope, body), _replay(body, receive), send)
        finally:
            _resource.reset(reset)

    async def _register(self, route: Route, scope, receive, send) -> None:
        """The SDK's handler; the address's limit is counted where the client is kept
        (`clients.register`), and its refusal answered 429 instead of the SDK's 400."""
        refused: dict = {}
        reset = _refused.set(refused)

        async def answer(message) -> None:
            if not refused:
                await send(message)
            elif message["type"] == "http.response.start":
                await JSONResponse({"error": "too_many_registrations"}, 429, headers=CORS)(
                    scope, receive, send
                )

        try:
            await route.handle(scope, receive, answer)
        finally:
            _refused.reset(reset)

    async def _revoke(self, route: Route, scope, receive, send) -> None:
        """RFC 7009 through the SDK's handler; the answer is 200 whatever it says (SPEC 21.4)."""
        if scope["method"] == "OPTIONS":
            await route.handle(scope, receive, send)
            return
        body = await _body(receive)
        form = dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
        basic = _basic_client_id(Headers(scope=scope).get("authorization", ""))
        if basic and "client_id" not in form:
            form["client_id"] = basic
        # The SDK's revocation request requires the field even for a public client.
        form.setdefault("client_secret", "")
        body = urlencode(form).encode()
        reset = _revoking.set(True)
        try:
            await route.handle(_with_length(scope, body), _replay(body, receive), _discard)
        finally:
            _revoking.reset(reset)
        await Response(status_code=200, headers={"Cache-Control": "no-store", "Pragma": "no-cache", **CORS})(
            scope, receive, send
        )


async def _discard(message) -> None:
    return None


def _failed(why: str) -> HTMLResponse:
    text = html.escape(f"authorization failed: {why}")
    page = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>Authorization failed</title></head><body><main><h1>{text}</h1></main></body></html>"
    )
    return HTMLResponse(
        page,
        400,
        headers={
            "Cache-Control": "no-store",
            "X-Frame-Options": "DENY",
            "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'",
        },
    )


async def _not_found(scope, receive, send) -> None:
    await JSONResponse({"error": "not found"}, 404)(scope, receive, send)


def _basic_client_id(header: str) -> str | None:
    """The client_id of an `Authorization: Basic` header (RFC 6749 2.3.1), or None."""
    if not header.lower().startswith("basic "):
        return None
    try:
        decoded = base64.b64decode(header[6:].strip()).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    client_id, sep, _secret = decoded.partition(":")
    return unquote(client_id) if sep and client_id else None


def _as_request(scope) -> HttpRequest:
    headers = Headers(scope=scope)
    client = scope.get("client") or ("", 0)
    meta = {"REMOTE_ADDR": client[0], "HTTP_X_FORWARDED_FOR": headers.get("x-forwarded-for", "")}
    return cast(HttpRequest, SimpleNamespace(META=meta))


async def _body(receive) -> bytes:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        if size > BODY_MOST or not message.get("more_body"):
            break
    return b"".join(chunks)[: BODY_MOST + 1]


def _replay(body: bytes, receive):
    sent = False

    async def inner():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return inner


def _with_length(scope, body: bytes):
    headers = [(k, v) for k, v in scope["headers"] if k.lower() != b"content-length"]
    headers.append((b"content-length", str(len(body)).encode()))
    return {**scope, "headers": headers}


def _with_iss(send):
    """`iss` (RFC 9207) on every redirect the SDK's authorize handler makes to a client."""

    async def inner(message) -> None:
        if message["type"] == "http.response.start" and message["status"] in (302, 303):
            headers = []
            for key, value in message.get("headers", []):
                if key.lower() == b"location":
                    value = add_iss(value.decode("latin-1")).encode("latin-1")
                headers.append((key, value))
            message = {**message, "headers": headers}
        await send(message)

    return inner


def _errors_as_page(scope, receive, send):
    """The SDK's authorize answers with each error redirect to the client replaced by the 400
    page saying the error (the redirect to the `Allow an app` page goes through)."""
    replaced = False

    async def inner(message) -> None:
        nonlocal replaced
        if replaced:
            return  # the body of the redirect that was replaced
        if message["type"] == "http.response.start" and message["status"] in (302, 303):
            location = dict(message.get("headers", [])).get(b"location", b"").decode("latin-1")
            if not location.startswith(issuer() + "/apps/allow/"):
                query = dict(parse_qsl(urlsplit(location).query, keep_blank_values=True))
                error, description = query.get("error", "invalid_request"), query.get("error_description")
                replaced = True
                await _failed(f"{error}: {description}" if description else error)(scope, receive, send)
                return
        await send(message)

    return inner


def add_iss(location: str) -> str:
    """A redirect back to a client with `iss` added (the console's own pages are left alone)."""
    parts = urlsplit(location)
    if location.startswith(issuer() + "/apps/allow/"):
        return location
    query = parse_qsl(parts.query, keep_blank_values=True)
    if any(k == "iss" for k, _ in query):
        return location
    return urlunsplit(parts._replace(query=urlencode([*query, ("iss", issuer())])))
