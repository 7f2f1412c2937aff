"""The audit trail (SPEC 22.2): one row for each change of what the console trusts or who may
use it, written by the module that makes the change, inside the change's own transaction (so
a change rolled back leaves no row, and a row never tells of a change that did not happen).

Who: an `Actor`, a name in the contract's vocabulary (a person's username, a token's name,
`file` for an edit on disk the console picked up, `system` for the operator's commands; SPEC
21's apps will be `app <client name>`) and the address the change came from. `by(request)`
makes one from a page request or a `/v1` request; the address is read by `address_of` alone.

What: `before` and `after` hold the state the change replaced and the one it made, masked as
SPEC 12.3 masks what the console shows: env and headers values, an OAuth `client_secret`, and
any value under a key that names a secret. The clear values never reach a row.
"""

import ipaddress
from collections import Counter
from typing import Any, NamedTuple

from allauth.account.authentication import get_authentication_records
from allauth.mfa import signals as mfa_signals
from axes.signals import user_locked_out
from django.conf import settings
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.http import HttpRequest

from .choices import AuditAction
from .models import SECRET_MASK, AuditEntry, mask_config

FILE = "file"  # an edit of mcp.json, allow_tool or rules made outside the console
SYSTEM = "system"  # the console's own commands (manage.py), run by its operator

# Keys whose values are secrets wherever they appear in a before or after.
SECRET_KEYS = frozenset(
    {"client_secret", "secret", "tokens", "access_token", "refresh_token", "password", "code_verifier"}
)
CHANGED = f"{SECRET_MASK} (changed)"  # a masked value that an edit replaced


class Actor(NamedTuple):
    """Who made a change, and from which address ("" when none: a file, a command)."""

    name: str
    address: str = ""


BY_FILE = Actor(FILE)
BY_SYSTEM = Actor(SYSTEM)


def address_of(request: HttpRequest) -> str:
    """The address a request came from, the one place that decides it (the sign-in and
    registration limits, the audit rows, the session list: SPEC 22.1). Read from the right of
    `X-Forwarded-For`, since each proxy appends its peer and only the leftmost entries are the
    client's own writing: while the address in hand (first the peer) is one of
    AGENVOY_TRUSTED_PROXIES, the next entry to its left; the first address not trusted is the
    client (all trusted: the leftmost). An entry that is no address ends the walk there."""
    address = str(request.META.get("REMOTE_ADDR") or "")
    hops = [h.strip() for h in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if h.strip()]
    while hops and _trusted(address):
        try:
            address = str(ipaddress.ip_address(hops.pop()))
        except ValueError:
            break
    return address


def _trusted(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in settings.AGENVOY_TRUSTED_PROXIES)


def by(request: HttpRequest) -> Actor:
    """Who a request is: the token's name on `/v1` (`api_auth` attached it), else the
    signed-in person's username."""
    token = getattr(request, "api_token", None)
    user = getattr(request, "user", None)
    name = token.name if token is not None else user.get_username() if user is not None else ""
    return Actor(name, address_of(request))


def masked(value: Any) -> Any:
    """A copy of `value` with every secret masked: a server config's env and headers values and
    its OAuth client_secret (`models.mask_config`), and the value of any key in SECRET_KEYS."""
    if isinstance(value, dict):
        out = mask_config(value)
        for key in ("env", "headers"):  # the mark of a changed secret stays (server_states)
            if isinstance(value.get(key), dict):
                out[key] = {k: CHANGED if v == CHANGED else out[key][k] for k, v in value[key].items()}
        if isinstance(value.get("oauth"), dict) and value["oauth"].get("client_secret") == CHANGED:
            out["oauth"] = {**out["oauth"], "client_secret": CHANGED}
        return {
            k: SECRET_MASK if k in SECRET_KEYS and v not in (None, "", CHANGED) else masked(v)
            for k, v in out.items()
        }
    if isinstance(value, (list, tuple)):
        return [masked(v) for v in value]
    return value


def server_states(old: dict | None, new: dict | None) -> tuple[dict | None, dict | None]:
    """(before, after) of a server config edit, masked; a secret value that changed shows as
    `******** (changed)` in after, so an edit of a secret alone is still told apart."""
    before, after = masked(old), masked(new)
    if old is None or new is None or after is None:
        return before, after
    for key in ("env", "headers"):
        was, now = old.get(key), new.get(key)
        if isinstance(was, dict) and isinstance(now, dict):
            for k in now:
                if k in was and was[k] != now[k]:
                    after[key][k] = CHANGED
    was_oauth, now_oauth = old.get("oauth"), new.get("oauth")
    if isinstance(was_oauth, dict) and isinstance(now_oauth, dict) and "client_secret" in now_oauth:
        if was_oauth.get("client_secret") != now_oauth["client_secret"]:
            after["oauth"]["client_secret"] = CHANGED
    return before, after


def record(
    action: str,
    object: str,
    *,
    actor: "str | Actor",
    address: str = "",
    before: Any = None,
    after: Any = None,
) -> AuditEntry:
    """Write one audit row, secrets masked. Call it inside the change's own transaction where
    there is one (or from `db.on_commit`). `actor` is a name or an `Actor` (whose address is
    used when `address` is not given)."""
    if action not in AuditAction.values:
        raise ValueError(f"unknown audit action: {action}")
    name = actor.name if isinstance(actor, Actor) else actor
    if isinstance(actor, Actor) and not address:
        address = actor.address
    return AuditEntry.objects.create(
        action=action,
        object=str(object)[:700],
        actor=str(name)[:200],
        address=address[:64],
        before=masked(before),
        after=masked(after),
    )


def added_removed(old: list[str], new: list[str]) -> tuple[list[str], list[str]]:
    """(lines of `new` not in `old`, lines of `old` not in `new`), each in its list's order; a
    line twice counts twice."""
    left, right = Counter(old), Counter(new)
    extra, gone = right - left, left - right
    return _take(new, extra), _take(old, gone)


def _take(lines: list[str], wanted: Counter) -> list[str]:
    out = []
    for line in lines:
        if wanted[line] > 0:
            wanted[line] -= 1
            out.append(line)
    return out


def record_lines(
    action: str, object: str, added: list[str], removed: list[str], by: Actor
) -> AuditEntry | None:
    """`trust.change` or `rules.change`: the lines removed (before) and added (after); nothing
    when none changed."""
    if not added and not removed:
        return None
    return record(action, object, actor=by, before=removed, after=added)


# --- the audit trail of signing in (SPEC 22.2) ------------------------------------------------


# allauth's session record of how a person signed in: through the identity provider (SPEC 23.2).
SSO_METHOD = "socialaccount"


def through_provider(request: HttpRequest, user) -> bool:
    """Whether `user`'s last sign-in in this session was through the identity provider."""
    records = get_authentication_records(request, user)
    return bool(records) and records[-1].get("method") == SSO_METHOD


def _signed_in(sender, request, user, **kwargs) -> None:
    if request is None:
        return
    sso = through_provider(request, user)
    if request.method != "POST" and not sso:
        return  # a session made in code (a test client's force_login), not a person signing in
    who = user.get_username()
    record(
        AuditAction.SIGNIN_OK,
        who,
        actor=who,
        address=address_of(request),
        after={"via": "sso"} if sso else None,
    )


def _failed(sender, credentials, request=None, **kwargs) -> None:
    who = str((credentials or {}).get("username") or (credentials or {}).get("login") or "")
    address = address_of(request) if request is not None else ""
    record(AuditAction.SIGNIN_FAILED, who, actor=who, address=address)


def _locked(sender, request, username, ip_address, **kwargs) -> None:
    after = {"minutes": settings.AGENVOY_SIGNIN_LOCK_MINUTES}
    record(AuditAction.SIGNIN_LOCKED, username or "", actor=username or "", address=ip_address, after=after)


def factor(authenticator) -> dict:
    """What an audit row says of a second factor: its kind, and a passkey's name."""
    kind = {"totp": "authenticator app", "webauthn": "passkey", "recovery_codes": "recovery codes"}
    out = {"kind": kind.get(authenticator.type, authenticator.type)}
    if authenticator.type == "webauthn":
        out["name"] = authenticator.wrap().name
    return out


def _factor_added(sender, request, user, authenticator, **kwargs) -> None:
    record(AuditAction.MFA_ADD, user.get_username(), actor=by(request), after=factor(authenticator))


def _factor_removed(sender, request, user, authenticator, **kwargs) -> None:
    record(AuditAction.MFA_REMOVE, user.get_username(), actor=by(request), before=factor(authenticator))


def connect_signin_signals() -> None:
    """Sign-ins and second factors, told by Django, axes and allauth (the app's `ready()`)."""
    user_logged_in.connect(_signed_in, dispatch_uid="agenvoy-audit-signin")
    user_login_failed.connect(_failed, dispatch_uid="agenvoy-audit-signin-failed")
    user_locked_out.connect(_locked, dispatch_uid="agenvoy-audit-signin-locked")
    mfa_signals.authenticator_added.connect(_factor_added, dispatch_uid="agenvoy-audit-mfa-add")
    mfa_signals.authenticator_removed.connect(_factor_removed, dispatch_uid="agenvoy-audit-mfa-remove")
