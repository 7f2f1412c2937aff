"""The console as an OAuth client of upstream servers, the database side (SPEC 16): the tokens
and client registration of each server kept encrypted in `OAuthAccount`, and the
authorization-code flows in `OAuthFlow`, the rows where the web process a browser comes back to
meets the worker holding the server.

Encryption: Fernet (AES-128-CBC + HMAC-SHA256, from `cryptography`) under a key derived from
the console's secret key by HKDF-SHA256, so nothing but the secret key opens the rows (`seal`,
also used for an app's client secret, `clients`). The SDK side (the `TokenStorage` protocol,
the providers) is `supervisor/upstream.py`; this module has no `mcp` import. Every function here is sync (run through `db.run` from async code).
"""

import base64
import datetime
import functools
import json
from typing import Any

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from .. import audit
from ..choices import AuditAction, FlowStatus, GrantType, ServerState, Transport
from ..models import OAuthAccount, OAuthFlow, Server, iso

FLOW_SECONDS = 600  # a flow lives 10 minutes (SPEC 16.2)
CALLBACK_PATH = "/oauth/callback"
UNKNOWN_STATE = "authorization failed: unknown or expired state"
REFUSALS = frozenset({"invalid_grant", "invalid_client", "unauthorized_client"})


# --- encryption -------------------------------------------------------------------------------


@functools.cache
def _fernet(secret_key: str) -> Fernet:
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"agenvoy oauth rows v1").derive(
        secret_key.encode()
    )
    return Fernet(base64.urlsafe_b64encode(key))


def seal(value: Any) -> str:
    """`value` as JSON, encrypted (empty for None)."""
    if value is None:
        return ""
    return _fernet(settings.SECRET_KEY).encrypt(json.dumps(value).encode()).decode()


def unseal(text: str) -> Any:
    """What `seal` sealed; None for nothing, or for a row sealed under another secret key
    (the tokens are then as good as gone: the server needs authorization again)."""
    if not text:
        return None
    try:
        return json.loads(_fernet(settings.SECRET_KEY).decrypt(text.encode()))
    except (InvalidToken, ValueError):
        return None


# --- which servers use OAuth ------------------------------------------------------------------


def redirect_uri() -> str:
    return settings.AGENVOY_PUBLIC_URL + CALLBACK_PATH


def server_page(name: str) -> str:
    """Where a person authorizes the server (its page; the `url` of SPEC 16's answers)."""
    return f"{settings.AGENVOY_PUBLIC_URL}/servers/{name}/"


def needs_authorization(name: str) -> str:
    """What a call to a tool of a server in `needs_authorization` is answered (SPEC 16.1)."""
    return f"server {name} needs authorization: {server_page(name)}"


def server_url(config: dict) -> str:
    return str(config.get("url") or "").strip()


def has_authorization_header(config: dict) -> bool:
    return any(k.lower() == "authorization" for k in (config.get("headers") or {}))


def grant_of(server: Server, account: OAuthAccount | None) -> str | None:
    """The grant a server is connected with (SPEC 16.1): its `oauth` key's, or
    `authorization_code` for a server that asked for OAuth itself; None: no OAuth."""
    if server.transport not in (Transport.STREAMABLE_HTTP, Transport.SSE):
        return None
    oauth = server.config.get("oauth")
    if isinstance(oauth, dict):
        return oauth.get("grant") or GrantType.AUTHORIZATION_CODE
    if server.state == ServerState.NEEDS_AUTHORIZATION:
        # Only a server that asked for OAuth gets here; its detection row may not be read yet.
        return GrantType.AUTHORIZATION_CODE
    if (
        account is not None
        and account.detected
        and account.url == server_url(server.config)
        and not has_authorization_header(server.config)
    ):
        return GrantType.AUTHORIZATION_CODE
    return None


def account_for(name: str) -> OAuthAccount | None:
    return OAuthAccount.objects.filter(server_name=name).first()


def status_item(server: Server, account: OAuthAccount | None) -> dict | None:
    """The `oauth` object of a `GET /v1/mcp/status` item (SPEC 16.1); None: no OAuth. Never a
    token."""
    grant = grant_of(server, account)
    if grant is None:
        return None
    valid = account is not None and account.url == server_url(server.config) and bool(account.tokens)
    if not valid or account is None:
        return {k: None for k in ("authorized_by", "authorized_at", "scopes", "expires_at")} | {
            "grant": grant,
            "authorized": False,
        }
    return {
        "grant": grant,
        "authorized": True,
        "authorized_by": account.authorized_by or None,
        "authorized_at": iso(account.authorized_at),
        "scopes": list(account.scopes or []),
        "expires_at": iso(account.expires_at),
    }


def authorize_problem(name: str) -> tuple[str, int] | None:
    """Why a person's flow can't start for `name` ((message, status), SPEC 16.2); None: it can."""
    server = Server.objects.filter(name=name).first()
    if server is None:
        return "server not found", 404
    if grant_of(server, account_for(name)) != GrantType.AUTHORIZATION_CODE:
        return f"server {name} does not use OAuth authorization", 400
    return None


def page_info(server: Server) -> dict | None:
    """What the server page shows of its OAuth standing (SPEC 16.1): `status_item` with the
    times as datetimes and the latest flow's failure; None: no OAuth. Never a token."""
    if server.transport not in (Transport.STREAMABLE_HTTP, Transport.SSE):
        return None  # no query for a stdio server's page
    account = account_for(server.name)
    item = status_item(server, account)
    if item is None:
        return None
    if item["authorized"] and account is not None:
        item.update(authorized_at=account.authorized_at, expires_at=account.expires_at)
    item["failure"] = last_failure(server.name)
    item["person_grant"] = item["grant"] == GrantType.AUTHORIZATION_CODE
    return item


def mark_detected(name: str, url: str) -> None:
    """The server answered 401 + `WWW-Authenticate: Bearer`: from now on it is an
    authorization-code server with automatic registration (SPEC 16.1)."""
    account, created = OAuthAccount.objects.get_or_create(server_name=name, defaults={"url": url})
    if created or not account.detected or account.url != url:
        _rebind(account, url)
        account.detected = True
        account.save()


def _rebind(account: OAuthAccount, url: str) -> None:
    """Tokens and registration made for another address are dropped, never offered to this one."""
    if account.url != url:
        account.url = url
        account.tokens = account.client_info = ""
        account.expires_at = account.issued_at = account.authorized_at = None
        account.scopes, account.authorized_by = [], ""


# --- tokens (the rows behind supervisor.upstream.DbTokenStorage) ---------------------------------


def load(name: str, url: str) -> tuple[dict | None, dict | None, datetime.datetime | None]:
    """(tokens, client registration, absolute expiry of the access token) stored for the
    server at `url`; nothing for another address."""
    account = account_for(name)
    if account is None or account.url != url:
        return None, None, None
    return unseal(account.tokens), unseal(account.client_info), account.expires_at


def store_client(name: str, url: str, client_info: dict) -> None:
    with transaction.atomic():
        account, _ = OAuthAccount.objects.select_for_update().get_or_create(
            server_name=name, defaults={"url": url}
        )
        _rebind(account, url)
        account.client_info = seal(client_info)
        account.save()


def store_tokens(
    name: str, url: str, tokens: dict, authorized_by: str | None = None, address: str = ""
) -> None:
    """New tokens, with their absolute expiry, in one write: a rotated refresh token is stored
    in the same step as the access token it came with (SPEC 16.4). `authorized_by` is set when
    a person's flow produced them (the empty string for client credentials); None: a renewal,
    which keeps who authorized and when. A person's flow is a `server.authorize` audit row of
    theirs (from `address`, where their browser came back from), in the same write."""
    now = timezone.now()
    expires_in = tokens.get("expires_in")
    with transaction.atomic():
        account, _ = OAuthAccount.objects.select_for_update().get_or_create(
            server_name=name, defaults={"url": url}
        )
        _rebind(account, url)
        renewal = authorized_by is None and bool(account.tokens)
        before = standing(account)
        account.tokens = seal(tokens)
        account.issued_at = now
        account.expires_at = now + datetime.timedelta(seconds=expires_in) if expires_in else None
        account.scopes = (tokens.get("scope") or "").split()
        if authorized_by is not None or not account.authorized_at:
            account.authorized_by = authorized_by or ""
            account.authorized_at = now
        if renewal:
            account.renewals += 1
        account.save()
        if authorized_by:
            audit.record(
                AuditAction.SERVER_AUTHORIZE,
                name,
                actor=authorized_by,
                address=address,
                before=before,
                after=standing(account),
            )


def standing(account: OAuthAccount) -> dict | None:
    """What the audit keeps of a server's authorization: who, when, the scopes, the URL it is
    bound to; never a token. None: no tokens held."""
    if not account.tokens:
        return None
    return {
        "authorized_by": account.authorized_by,
        "authorized_at": iso(account.authorized_at),
        "scopes": list(account.scopes or []),
        "url": account.url,
    }


def forget(name: str, by: audit.Actor = audit.BY_SYSTEM) -> bool:
    """Delete the stored tokens (the registration stays, SPEC 16.2); False: there were none."""
    with transaction.atomic():
        account = OAuthAccount.objects.select_for_update().filter(server_name=name).exclude(tokens="").first()
        if account is None:
            return False
        audit.record(AuditAction.SERVER_FORGET, name, actor=by, before=standing(account))
        OAuthAccount.objects.filter(pk=account.pk).update(
            tokens="", expires_at=None, issued_at=None, scopes=[], authorized_by="", authorized_at=None
        )
    return True


def clear_tokens(name: str) -> None:
    OAuthAccount.objects.filter(server_name=name).update(tokens="", expires_at=None, issued_at=None)


# --- flows ------------------------------------------------------------------------------------


def new_flow(name: str, person: str) -> OAuthFlow:
    """A flow asked for by `person`; it replaces every earlier flow of the server (their
    `state` is then unknown)."""
    now = timezone.now()
    with transaction.atomic():
        OAuthFlow.objects.filter(server_name=name).delete()
        return OAuthFlow.objects.create(
            server_name=name,
            requested_by=person,
            created_at=now,
            expires_at=now + datetime.timedelta(seconds=FLOW_SECONDS),
        )


def flow_waiting(flow_id: str, state: str, url: str) -> bool:
    """The holder's redirect handler: the authorization URL and its `state` are known."""
    return bool(
        OAuthFlow.objects.filter(id=flow_id, status=FlowStatus.REQUESTED).update(
            status=FlowStatus.WAITING, state=state, url=url
        )
    )


def callback(
    state: str, code: str, error: str, person: str, iss: str = "", address: str = ""
) -> OAuthFlow | None:
    """`/oauth/callback`: record the code (or the authorization server's `error`) on the live
    flow with this `state`, claimed once; None for an unknown, used or expired state (then
    nothing is written). `address`, where the person's browser came back from, is sealed with
    the code: the holder audits the authorization as theirs (`store_tokens`)."""
    if not state:
        return None
    now = timezone.now()
    flow = OAuthFlow.objects.filter(state=state, status=FlowStatus.WAITING, expires_at__gt=now).first()
    if flow is None:
        return None
    fields: dict[str, Any] = {"finished_by": person}
    if error:
        fields |= {"status": FlowStatus.FAILED, "error": f"authorization failed: {error[:200]}"}
    else:
        fields |= {
            "status": FlowStatus.CODE,
            "code": seal({"code": code, "iss": iss or None, "from": address}),
        }
    if OAuthFlow.objects.filter(id=flow.id, status=FlowStatus.WAITING).update(**fields) != 1:
        return None
    flow.refresh_from_db()
    return flow


def flow_code(flow_id: str) -> tuple[str, dict, str, str] | None:
    """(status, {"code", "iss"}, error, who finished it) of a flow; None when it is gone
    (replaced by a newer one)."""
    flow = OAuthFlow.objects.filter(id=flow_id).first()
    if flow is None:
        return None
    return flow.status, unseal(flow.code) or {}, flow.error, flow.finished_by


def flow_ended(flow_id: str, error: str = "") -> None:
    """The holder's word on how a flow ended; the code is dropped either way."""
    status = FlowStatus.FAILED if error else FlowStatus.DONE
    OAuthFlow.objects.filter(id=flow_id).update(status=status, error=error, code="")


def last_failure(name: str) -> str:
    """`authorization failed: <error>` of the server's latest flow, for its page ("" if none)."""
    flow = OAuthFlow.objects.filter(server_name=name).order_by("-created_at").first()
    return flow.error if flow is not None and flow.status == FlowStatus.FAILED else ""


def flow_live(flow_id: str) -> bool:
    return OAuthFlow.objects.filter(id=flow_id, expires_at__gt=timezone.now()).exists()
