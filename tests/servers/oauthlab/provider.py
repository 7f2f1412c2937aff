"""The lab's authorization server: an `OAuthAuthorizationServerProvider` (the SDK's protocol) over
in-memory dicts, saved to a JSON state file after every change when one is named, so a restarted
lab still knows its clients and tokens.

What it does that a test looks at:
- every token string it ever issued is kept (`issued`), for the "no token in clear" search;
- refresh tokens rotate: a used one is refused `invalid_grant` (and counted as reused);
- `stats` counts authorizations, code exchanges, refreshes, client-credentials grants,
  registrations, and refusals by their OAuth error code;
- `fail_refreshes` makes the next N refreshes fail `invalid_grant` (-1: until set to 0), and
  `token_garbage` makes the token endpoint answer an HTML page or a 500 (tests/servers/oauthlab/app.py).
Refusals at the token endpoint are counted there, from the answer the SDK's handler gave.
"""

import os
import secrets
import time
from pathlib import Path
from typing import Any

from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    AuthorizeError,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import BaseModel, Field

CODE_TTL = 300
SUBJECT = "lab-user"  # the one resource owner the consent page speaks for
STAT_NAMES = (
    "authorizations",
    "consents_approved",
    "code_exchanges",
    "refreshes",
    "client_credentials",
    "registrations",
    "mcp_unauthorized",
    "mcp_expired_token",
    "tool_calls",
    "refresh_reused",
    "refresh_failed_by_switch",
    "garbage_answers",
)


class Pending(BaseModel):
    """An authorization request waiting on the consent page."""

    client_id: str
    params: AuthorizationParams


class Snapshot(BaseModel):
    """Everything the lab knows that outlives a restart (the state file's content)."""

    clients: dict[str, OAuthClientInformationFull] = Field(default_factory=dict)
    pending: dict[str, Pending] = Field(default_factory=dict)
    codes: dict[str, AuthorizationCode] = Field(default_factory=dict)
    access: dict[str, AccessToken] = Field(default_factory=dict)
    refresh: dict[str, RefreshToken] = Field(default_factory=dict)
    used_refresh: list[str] = Field(default_factory=list)
    # refresh token -> the access token issued with it (both go on revocation)
    pairs: dict[str, str] = Field(default_factory=dict)
    issued: dict[str, list[str]] = Field(
        default_factory=lambda: {"access": [], "refresh": [], "client_secrets": [], "codes": []}
    )
    stats: dict[str, int] = Field(default_factory=lambda: dict.fromkeys(STAT_NAMES, 0))
    refusals: dict[str, int] = Field(default_factory=dict)
    events: list[dict[str, Any]] = Field(default_factory=list)


class LabProvider:
    """The SDK's `OAuthAuthorizationServerProvider` protocol, for one issuer and one resource."""

    def __init__(self, issuer: str, resource: str, access_ttl: int, state_file: Path | None) -> None:
        self.issuer = issuer
        self.resource = resource
        self.access_ttl = access_ttl
        self.state_file = state_file
        self.data = Snapshot()
        if state_file is not None and state_file.exists():
            self.data = Snapshot.model_validate_json(state_file.read_text())
        # Test switches live only as long as the process: a restart turns them off.
        self.fail_refreshes = 0
        self.token_garbage: str | None = None  # "html" or "500": what the token endpoint answers
        self.garbage_left = 0  # how many more such answers; -1 until switched off

    # --- bookkeeping ---------------------------------------------------------------------------

    def save(self) -> None:
        if self.state_file is None:
            return
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(self.data.model_dump_json())
        os.replace(tmp, self.state_file)

    def count(self, stat: str, **event: Any) -> None:
        self.data.stats[stat] = self.data.stats.get(stat, 0) + 1
        self.data.events.append({"kind": stat, "at": time.time(), **event})
        self.save()

    def refused(self, error: str, **event: Any) -> None:
        self.data.refusals[error] = self.data.refusals.get(error, 0) + 1
        self.data.events.append({"kind": "refused", "error": error, "at": time.time(), **event})
        self.save()

    def add_client(self, client: OAuthClientInformationFull) -> None:
        self.data.clients[client.client_id or ""] = client
        if client.client_secret and client.client_secret not in self.data.issued["client_secrets"]:
            self.data.issued["client_secrets"].append(client.client_secret)
        self.save()

    def _mint(self, kind: str, prefix: str) -> str:
        value = prefix + secrets.token_urlsafe(32)
        self.data.issued[kind].append(value)
        return value

    def issue(
        self, client_id: str, scopes: list[str], resource: str | None, subject: str | None, refresh: bool
    ) -> OAuthToken:
        """A new access token (and refresh token when `refresh`), stored and listed as issued."""
        now = int(time.time())
        access = self._mint("access", "lab_at_")
        self.data.access[access] = AccessToken(
            token=access,
            client_id=client_id,
            scopes=scopes,
            expires_at=now + self.access_ttl,
            resource=resource or self.resource,
            subject=subject,
        )
        refresh_token = None
        if refresh:
            refresh_token = self._mint("refresh", "lab_rt_")
            self.data.refresh[refresh_token] = RefreshToken(
                token=refresh_token,
                client_id=client_id,
                scopes=scopes,
                resource=resource or self.resource,
                subject=subject,
            )
            self.data.pairs[refresh_token] = access
        self.save()
        return OAuthToken(
            access_token=access,
            token_type="Bearer",
            expires_in=self.access_ttl,
            scope=" ".join(scopes) or None,
            refresh_token=refresh_token,
        )

    def check_resource(self, resource: str | None) -> None:
        """RFC 8707: a resource other than this lab's MCP endpoint is refused."""
        if resource is not None and resource.rstrip("/") != self.resource.rstrip("/"):
            raise TokenError("invalid_target", f"unknown resource {resource}")

    def granted_scopes(self, client: OAuthClientInformationFull, asked: list[str] | None) -> list[str]:
        if asked:
            return asked
        return client.scope.split() if client.scope else []

    # --- the consent page's decisions ----------------------------------------------------------

    def pending_request(self, request_id: str) -> Pending | None:
        return self.data.pending.get(request_id)

    def decide(self, request_id: str, approve: bool) -> str | None:
        """The redirect back to the client after the person's choice; None for an unknown request."""
        pending = self.data.pending.pop(request_id, None)
        if pending is None:
            return None
        params = pending.params
        if not approve:
            self.refused("access_denied", client_id=pending.client_id)
            return construct_redirect_uri(
                str(params.redirect_uri), error="access_denied", state=params.state, iss=self.issuer
            )
        code = self._mint("codes", "lab_code_")
        client = self.data.clients[pending.client_id]
        self.data.codes[code] = AuthorizationCode(
            code=code,
            scopes=self.granted_scopes(client, params.scopes),
            expires_at=time.time() + CODE_TTL,
            client_id=pending.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
            subject=SUBJECT,
        )
        self.count("consents_approved", client_id=pending.client_id)
        return construct_redirect_uri(
            str(params.redirect_uri), code=code, state=params.state, iss=self.issuer
        )

    # --- the SDK's provider protocol -----------------------------------------------------------

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.data.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        self.add_client(client_info)
        self.count("registrations", client_id=client_info.client_id)

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        if params.resource is None:
            # The MCP authorization spec: clients MUST send `resource`; a lab that let it slide
            # would hide a console that forgot it.
            self.refused("invalid_target", client_id=client.client_id)
            raise AuthorizeError("invalid_target", "the resource parameter is required")
        if params.resource.rstrip("/") != self.resource.rstrip("/"):
            self.refused("invalid_target", client_id=client.client_id)
            raise AuthorizeError("invalid_target", f"unknown resource {params.resource}")
        request_id = secrets.token_urlsafe(16)
        self.data.pending[request_id] = Pending(client_id=client.client_id or "", params=params)
        self.count("authorizations", client_id=client.client_id)
        return f"{self.issuer}/consent?request={request_id}"

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        return self.data.codes.get(authorization_code)

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        self.data.codes.pop(authorization_code.code, None)  # one use only
        self.check_resource(authorization_code.resource)
        tokens = self.issue(
            client.client_id or "",
            authorization_code.scopes,
            authorization_code.resource,
            authorization_code.subject,
            refresh=True,
        )
        self.count("code_exchanges", client_id=client.client_id)
        return tokens

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        token = self.data.refresh.get(refresh_token)
        if token is None and refresh_token in self.data.used_refresh:
            # Two holders of one rotating refresh token: the one that comes second lands here.
            self.count("refresh_reused", client_id=client.client_id)
        return token

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        # Rotation: the old refresh token is spent whatever happens next.
        self.data.refresh.pop(refresh_token.token, None)
        self.data.pairs.pop(refresh_token.token, None)
        self.data.used_refresh.append(refresh_token.token)
        if self.fail_refreshes:
            if self.fail_refreshes > 0:
                self.fail_refreshes -= 1
            self.count("refresh_failed_by_switch", client_id=client.client_id)
            raise TokenError("invalid_grant", "the grant was revoked (lab switch)")
        self.check_resource(refresh_token.resource)
        tokens = self.issue(
            client.client_id or "", scopes, refresh_token.resource, refresh_token.subject, refresh=True
        )
        self.count("refreshes", client_id=client.client_id)
        return tokens

    async def load_access_token(self, token: str) -> AccessToken | None:
        return self.data.access.get(token)

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        if isinstance(token, RefreshToken):
            self.data.access.pop(self.data.pairs.pop(token.token, ""), None)
            self.data.refresh.pop(token.token, None)
        else:
            self.data.access.pop(token.token, None)
            for refresh, access in list(self.data.pairs.items()):
                if access == token.token:
                    self.data.refresh.pop(refresh, None)
                    self.data.pairs.pop(refresh)
        self.save()

    # --- client credentials (RFC 6749 4.4; the SDK's token handler has no such grant) ----------

    def client_credentials(
        self, client: OAuthClientInformationFull, scope: str | None, resource: str | None
    ) -> OAuthToken:
        """An access token for a client acting on its own behalf; no refresh token (RFC 6749 4.4.3)."""
        if "client_credentials" not in client.grant_types:
            raise TokenError("unauthorized_client", "this client may not use client_credentials")
        self.check_resource(resource)
        scopes = scope.split() if scope else (client.scope.split() if client.scope else [])
        allowed = client.scope.split() if client.scope else []
        if any(s not in allowed for s in scopes):
            raise TokenError("invalid_scope", "a scope was not registered for this client")
        tokens = self.issue(client.client_id or "", scopes, resource, client.client_id, refresh=False)
        self.count("client_credentials", client_id=client.client_id)
        return tokens

    # --- what /_lab/ shows -----------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        return {**self.data.stats, "refusals": dict(self.data.refusals)}

    def expired(self, token: str) -> bool:
        known = self.data.access.get(token)
        return known is not None and known.expires_at is not None and known.expires_at < time.time()


def client_credentials_client(spec: str, scopes: list[str]) -> OAuthClientInformationFull:
    """`ID:SECRET[:basic|:post]` from the command line: a confidential client for the
    client-credentials grant, authenticating at the token endpoint with HTTP Basic (the default:
    RFC 6749 2.3.1 has every authorization server support it) or with the secret in the form.
    As at many real servers, the SDK's authenticator then accepts that method only."""
    client_id, _, secret = spec.partition(":")
    method = "basic"
    if secret.endswith((":basic", ":post")):
        secret, _, method = secret.rpartition(":")
    if not client_id or not secret:
        raise SystemExit(f"--client wants ID:SECRET[:basic|:post], not {spec!r}")
    return OAuthClientInformationFull(
        client_id=client_id,
        client_secret=secret,
        client_id_issued_at=int(time.time()),
        client_secret_expires_at=0,
        redirect_uris=None,
        grant_types=["client_credentials"],
        token_endpoint_auth_method="client_secret_post" if method == "post" else "client_secret_basic",
        scope=" ".join(scopes),
        client_name=f"{client_id} (client credentials)",
    )
