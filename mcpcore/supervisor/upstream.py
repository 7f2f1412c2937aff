"""OAuth upstream, the SDK side (SPEC 16): the `TokenStorage` of the SDK's protocol over the
database rows of `mcpcore.oauth.upstream`, the providers (`OAuthClientProvider` for a person's account,
`ClientCredentialsOAuthProvider` for a machine account) and the authorization-code flow, which
runs in the worker that holds the server's session.

What the SDK leaves to its user (STACK.md) and is done here:
- it does not load the access token's expiry with the token: `_Kept._initialize` sets it from
  the absolute expiry stored beside the tokens, so an expired token is renewed, never sent;
- it records no reason when the authorization server refuses a token request: `_Kept` keeps
  the OAuth `error` code of the last refused one (`refused`);
- it waits for the person inside the request that got the 401: the flow's redirect handler
  records the authorization URL in the flow's row (and hands it to whoever asked), its
  callback handler waits (bounded by the flow's 10 minutes) for the code `/oauth/callback`
  writes into that row on any web process.
Outside a flow the redirect handler raises `NeedsAuthorization`: nobody is there to sign in.
"""

import asyncio
import contextlib
import datetime
import logging
import re
import time
import warnings
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import anyio
import httpx2
from mcp.client.auth import OAuthClientProvider
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.auth.oauth2 import OAuthContext
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from mcp.shared.exceptions import MCPDeprecationWarning

from .. import db
from ..choices import FlowStatus, GrantType
from ..models import Server
from ..oauth import upstream as oauth_upstream
from . import transport

log = logging.getLogger("mcpcore.supervisor")

CLIENT_NAME = "Agenvoy MCP console"
PROBE_PROTOCOL = "2025-11-25"
RENEW_AT = 0.8  # renew once 80 % of the access token's lifetime has passed (SPEC 16.4)
FLOW_POLL = 2.0  # the flow's row is read again this often even when no wake-up comes


class NeedsAuthorization(Exception):
    """No valid tokens and nobody to sign in: the server waits for a person (SPEC 16.1)."""

    def __init__(self, refused: str = "") -> None:
        super().__init__("needs authorization")
        self.refused = refused  # the OAuth error of a refused renewal, if that was why


class ClientRefused(Exception):
    """The authorization server refused a machine account (SPEC 16.3)."""

    def __init__(self, code: str) -> None:
        super().__init__(f"authorization server refused the client: {code}")


class FlowFailed(Exception):
    """A person's flow ended without tokens; the message is what the server page shows."""


_CODE = re.compile(r"^[A-Za-z0-9_.\-]{1,80}$")


async def _error_code(response: httpx2.Response) -> str:
    """The OAuth `error` of a refused token request (never its description, which may quote
    what was sent), else its HTTP status."""
    try:
        body = await response.aread()
        code = httpx2.Response(200, content=body).json().get("error", "")
    except Exception:
        code = ""
    return code if isinstance(code, str) and _CODE.match(code) else f"HTTP {response.status_code}"


def _why(exc: BaseException) -> str:
    """One line about a failed flow (the first leaf of a group)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, httpx2.ConnectError):
        return f"the authorization server can't be reached ({exc})"
    if str(exc).startswith("Invalid token response"):
        return "the authorization server answered with something that is not a token"
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


class DbTokenStorage:
    """The SDK's `TokenStorage` over `OAuthAccount` (encrypted rows). `fresh`: a new flow,
    which must not start from the stored tokens. `authorized_by`: who the next stored tokens
    are from (a person's name, "" for client credentials, None for a renewal)."""

    def __init__(self, name: str, url: str, fresh: bool = False, client: dict | None = None) -> None:
        self.name = name
        self.url = url
        self.fresh = fresh
        self.configured_client = client
        self.authorized_by: str | None = None
        self.authorized_from = ""  # the address of the person's browser (the audit's)
        self.expiry: float | None = None  # the stored access token's absolute expiry (epoch)
        self.had_tokens = False

    async def get_tokens(self) -> OAuthToken | None:
        if self.fresh:
            return None
        tokens, _client, expires_at = await db.run(oauth_upstream.load, self.name, self.url)
        self.expiry = expires_at.timestamp() if expires_at else None
        self.had_tokens = tokens is not None
        return OAuthToken.model_validate(tokens) if tokens else None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        data = tokens.model_dump(mode="json", exclude_none=True)
        await db.run(
            oauth_upstream.store_tokens, self.name, self.url, data, self.authorized_by, self.authorized_from
        )
        self.authorized_by = None  # what follows are renewals
        self.authorized_from = ""
        self.fresh = False

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        if self.configured_client is not None:
            return OAuthClientInformationFull.model_validate(self.configured_client)
        _tokens, client, _e = await db.run(oauth_upstream.load, self.name, self.url)
        return OAuthClientInformationFull.model_validate(client) if client else None

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        await db.run(
            oauth_upstream.store_client,
            self.name,
            self.url,
            client_info.model_dump(mode="json", exclude_none=True),
        )


class _Kept:
    """What the console adds to the SDK's providers (see the module docstring). It overrides
    three of their private methods, the only places the SDK loads tokens and reads a token
    response: the expiry not loaded is modelcontextprotocol/python-sdk#1318; for the refused
    request's OAuth error no SDK issue is filed yet (missing: the error on the provider)."""

    refused = ""
    scopes: str | None = None
    context: OAuthContext  # the providers' own, set by their __init__

    async def _initialize(self) -> None:
        await super()._initialize()  # type: ignore[misc]
        storage = self.context.storage
        if isinstance(storage, DbTokenStorage) and self.context.current_tokens is not None:
            self.context.token_expiry_time = storage.expiry

    async def _handle_refresh_response(self, response: httpx2.Response) -> bool:
        self.refused = "" if response.status_code == 200 else await _error_code(response)
        return await super()._handle_refresh_response(response)  # type: ignore[misc]

    async def _handle_token_response(self, response: httpx2.Response) -> None:
        self.refused = "" if response.status_code in (200, 201) else await _error_code(response)
        await super()._handle_token_response(response)  # type: ignore[misc]

    def expire_now(self) -> None:
        """Count the access token as expired: the next request renews it first."""
        self.context.token_expiry_time = time.time() - 1


class AuthCodeProvider(_Kept, OAuthClientProvider):
    """A person's account; configured scopes replace those the server asks for (SPEC 16.2)."""

    async def _perform_authorization_code_grant(self) -> tuple[str, str]:
        if self.scopes:
            self.context.client_metadata.scope = self.scopes
        return await super()._perform_authorization_code_grant()


class MachineProvider(_Kept, ClientCredentialsOAuthProvider):
    """A machine account (SPEC 16.3)."""


Provider = AuthCodeProvider | MachineProvider


def _settings(config: dict) -> dict:
    raw = config.get("oauth")
    return raw if isinstance(raw, dict) else {}


def _scopes(config: dict) -> str | None:
    scopes = _settings(config).get("scopes") or []
    return " ".join(str(s) for s in scopes) or None


def configured_client(config: dict) -> dict | None:
    """The configured `client_id`/`client_secret` as a registration (secret `$VAR`-expanded);
    None: dynamic registration."""
    settings_ = _settings(config)
    client_id = str(settings_.get("client_id") or "").strip()
    if not client_id:
        return None
    secret = transport.expand(str(settings_.get("client_secret") or "")) or None
    return {
        "client_id": client_id,
        "client_secret": secret,
        "redirect_uris": [oauth_upstream.redirect_uri()],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "client_secret_post" if secret else "none",
    }


async def _nobody_to_send(_url: str) -> None:
    raise NeedsAuthorization()


async def _nobody_to_wait_for() -> AuthorizationCodeResult:
    raise NeedsAuthorization()


def auth_code_provider(
    name: str,
    config: dict,
    storage: DbTokenStorage | None = None,
    redirect: Callable[[str], Awaitable[None]] | None = None,
    callback: Callable[[], Awaitable[AuthorizationCodeResult]] | None = None,
) -> AuthCodeProvider:
    url = oauth_upstream.server_url(config)
    client = configured_client(config)
    storage = storage or DbTokenStorage(name, url, client=client)
    metadata = OAuthClientMetadata(
        redirect_uris=[oauth_upstream.redirect_uri()],
        client_name=CLIENT_NAME,
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="client_secret_post" if client and client["client_secret"] else "none",
        scope=_scopes(config),
    )
    provider = AuthCodeProvider(
        url, metadata, storage, redirect or _nobody_to_send, callback or _nobody_to_wait_for
    )
    provider.scopes = _scopes(config)
    return provider


MACHINE_METHODS = ("client_secret_basic", "client_secret_post")


def machine_provider(name: str, config: dict, method: str = MACHINE_METHODS[0]) -> MachineProvider:
    """A machine account's provider, sending its secret by `method` (HTTP Basic, which every
    authorization server must take, or in the form)."""
    settings_ = _settings(config)
    url = oauth_upstream.server_url(config)
    storage = DbTokenStorage(name, url)
    storage.authorized_by = ""
    with warnings.catch_warnings():
        # The SDK asks for the issuer; the contract's `oauth` key has none: discovery says.
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        provider = MachineProvider(
            url,
            storage,
            client_id=str(settings_.get("client_id") or ""),
            client_secret=transport.expand(str(settings_.get("client_secret") or "")),
            token_endpoint_auth_method=method,  # type: ignore[arg-type]
            scope=_scopes(config),
        )
    return provider


async def _machine_ready(server: Server) -> MachineProvider:
    """Client credentials, by the way of sending the secret that worked last (kept with the
    account), else HTTP Basic first and the form second: an authorization server that
    registered the client for the other one answers `invalid_client` to the first."""
    url = oauth_upstream.server_url(server.config)
    _tokens, client, _e = await db.run(oauth_upstream.load, server.name, url)
    last = (client or {}).get("token_endpoint_auth_method")
    methods = sorted(MACHINE_METHODS, key=lambda m: m != last)
    refused = ""
    for method in methods:
        machine = machine_provider(server.name, server.config, method)
        try:
            await probe(machine, url, shielded=True)
        except Exception:
            if not machine.refused:
                raise
            refused = refused or machine.refused
            if machine.refused != "invalid_client":
                break
            continue
        if method != last:
            record = {"client_id": machine._fixed_client_info.client_id, "token_endpoint_auth_method": method}
            await db.run(oauth_upstream.store_client, server.name, url, record)
        return machine
    raise ClientRefused(refused)


SHIELD_SECONDS = 60.0  # the most a renewal may hold up the stop of its session


async def probe(provider: httpx2.Auth, url: str, shielded: bool = False) -> int:
    """One request to the server through `provider`: tokens are loaded, renewed or fetched on
    the way, and errors of the OAuth side come back here as exceptions rather than inside a
    session's transport. The answer's status (a protected server gives 401 without a token).
    `shielded` (renewals, not a person's flow): a stop waits for it (bounded), so a refresh
    token the authorization server has rotated is never lost between its answer and the row."""
    with anyio.CancelScope(shield=shielded):
        with anyio.fail_after(SHIELD_SECONDS) if shielded else contextlib.nullcontext():
            async with httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(30.0)) as http:
                response = await http.post(
                    url,
                    json={"jsonrpc": "2.0", "id": "agenvoy-oauth-probe", "method": "ping"},
                    headers={
                        "Accept": "application/json, text/event-stream",
                        "MCP-Protocol-Version": PROBE_PROTOCOL,
                    },
                )
    return response.status_code


async def asks_for_oauth(config: dict) -> bool:
    """Whether a server with no `oauth` key answers 401 + `WWW-Authenticate: Bearer` (16.1)."""
    try:
        async with httpx2.AsyncClient(timeout=httpx2.Timeout(10.0)) as http:
            response = await http.post(
                oauth_upstream.server_url(config),
                json={"jsonrpc": "2.0", "id": "agenvoy-oauth-probe", "method": "ping"},
                headers={
                    "Accept": "application/json, text/event-stream",
                    "MCP-Protocol-Version": PROBE_PROTOCOL,
                    **transport.expanded_headers(config),
                },
            )
    except httpx2.HTTPError:
        return False
    challenge = response.headers.get("www-authenticate", "")
    return response.status_code == 401 and challenge.lower().startswith("bearer")


async def ready(server: Server, grant: str) -> Provider:
    """A provider holding valid tokens for the server, renewed on the way if need be (and on
    a 401: the SDK would not try its refresh token then). Raises NeedsAuthorization (no
    tokens, or a refused renewal: `refused` says which) or ClientRefused."""
    if grant == GrantType.CLIENT_CREDENTIALS:
        return await _machine_ready(server)
    provider = auth_code_provider(server.name, server.config)
    storage = provider.context.storage
    assert isinstance(storage, DbTokenStorage)
    if (await storage.get_tokens()) is None:
        raise NeedsAuthorization()
    url = oauth_upstream.server_url(server.config)
    for attempt in range(2):
        try:
            await probe(provider, url, shielded=True)
            return provider
        except NeedsAuthorization:
            if provider.refused in oauth_upstream.REFUSALS:
                raise NeedsAuthorization(provider.refused) from None
            tokens = provider.context.current_tokens
            if attempt or tokens is None or not tokens.refresh_token:
                raise
            # A 401 for a token we took for valid: renew it once before giving up.
            provider.expire_now()
    raise NeedsAuthorization()


def renew_in(account_issued: datetime.datetime | None, expires: datetime.datetime | None) -> float | None:
    """Seconds until the renewal of a token issued and expiring then is due (80 % of its
    lifetime, SPEC 16.4); None: it does not expire."""
    if expires is None:
        return None
    issued = account_issued or expires
    due = issued + (expires - issued) * RENEW_AT
    return max(0.0, (due - datetime.datetime.now(datetime.UTC)).total_seconds())


async def renew(provider: Provider, url: str) -> None:
    """Renew the access token now (the lease holder's renewal loop). NeedsAuthorization when
    the authorization server refused the refresh token."""
    provider.expire_now()
    try:
        await probe(provider, url, shielded=True)
    except NeedsAuthorization:
        raise NeedsAuthorization(provider.refused) from None
    except Exception:
        if isinstance(provider, MachineProvider) and provider.refused:
            raise ClientRefused(provider.refused) from None
        raise
    if provider.refused in oauth_upstream.REFUSALS:
        raise NeedsAuthorization(provider.refused)


# --- a person's flow, in the holder ----------------------------------------------------------


def with_params(url: str, extra: dict) -> str:
    """`authorize_params` added to the authorization URL, never overriding what is there."""
    if not extra:
        return url
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    present = {k for k, _v in query}
    query += [(str(k), str(v)) for k, v in extra.items() if str(k) not in present]
    return urlunsplit(parts._replace(query=urlencode(query)))


class Flow:
    """One authorization-code flow run by the holder of the server: `url` resolves with the
    authorization URL (or the error that came first); `wake()` is called when the flow's row
    may have changed (`/oauth/callback` on any web process says so through the channel
    layer; the row is also read every FLOW_POLL seconds)."""

    def __init__(self, server: Server, flow_id: str) -> None:
        self.server = server
        self.flow_id = flow_id
        self.url: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._woken = asyncio.Event()
        self._state = ""
        self.storage = DbTokenStorage(
            server.name,
            oauth_upstream.server_url(server.config),
            fresh=True,
            client=configured_client(server.config),
        )

    def wake(self) -> None:
        self._woken.set()

    async def _redirect(self, authorization_url: str) -> None:
        full = with_params(authorization_url, _settings(self.server.config).get("authorize_params") or {})
        self._state = dict(parse_qsl(urlsplit(full).query)).get("state", "")
        if not await db.run(oauth_upstream.flow_waiting, self.flow_id, self._state, full):
            raise FlowFailed("authorization failed: the flow was replaced by a newer one")
        if not self.url.done():
            self.url.set_result(full)

    async def _callback(self) -> AuthorizationCodeResult:
        deadline = time.monotonic() + oauth_upstream.FLOW_SECONDS
        while time.monotonic() < deadline:
            self._woken.clear()  # before the read: a wake-up that comes during it is kept
            row = await db.run(oauth_upstream.flow_code, self.flow_id)
            if row is None:
                raise FlowFailed("authorization failed: the flow was replaced by a newer one")
            status, code, error, person = row
            if status == FlowStatus.CODE:
                self.storage.authorized_by = person
                self.storage.authorized_from = str(code.get("from") or "")
                return AuthorizationCodeResult(code=code["code"], state=self._state, iss=code.get("iss"))
            if status == FlowStatus.FAILED:
                raise FlowFailed(error)
            try:
                await asyncio.wait_for(
                    self._woken.wait(), min(FLOW_POLL, max(0.0, deadline - time.monotonic()))
                )
            except TimeoutError:
                pass
        raise FlowFailed("authorization failed: the flow expired")

    async def run(self) -> None:
        """Discovery, registration, PKCE and the redirect (the SDK's), then the wait for the
        person and the code exchange; the tokens are stored as they arrive. Raises FlowFailed
        with the page's message."""
        provider = auth_code_provider(
            self.server.name, self.server.config, self.storage, self._redirect, self._callback
        )
        url = oauth_upstream.server_url(self.server.config)
        secrets = transport.secret_values(self.server.config)
        try:
            status = await probe(provider, url)
        except FlowFailed as exc:
            await db.run(oauth_upstream.flow_ended, self.flow_id, str(exc))
            raise
        except Exception as exc:
            why = transport.redact(_why(exc), secrets)
            if provider.refused:
                why = f"the authorization server refused the code: {provider.refused}"
            message = f"authorization failed: {why}"
            await db.run(oauth_upstream.flow_ended, self.flow_id, message)
            raise FlowFailed(message) from None
        if status == 401:
            message = "authorization failed: the server refused the new token"
            await db.run(oauth_upstream.clear_tokens, self.server.name)
            await db.run(oauth_upstream.flow_ended, self.flow_id, message)
            raise FlowFailed(message)
        await db.run(oauth_upstream.flow_ended, self.flow_id)
