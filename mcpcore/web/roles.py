"""People's roles in the browser (SPEC 23.1): what each page and action needs, in one table,
and the check every request and the live socket go through.

A person's role is their `Person` row's (`admin` without one: SPEC 23.1's people from before
roles, `createsuperuser`, `make run`'s first admin). It is read again at every request, from the
database every process shares, so a role changed on one web process holds on the others at the
next request. `role_of` and `may` are what other code (the live socket, single sign-on) asks.
"""

import logging
from dataclasses import dataclass

from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string

from ..calls.people import role_of
from ..choices import PersonRole

log = logging.getLogger("mcpcore.web")

ADMIN, APPROVER, VIEWER = PersonRole.ADMIN, PersonRole.APPROVER, PersonRole.VIEWER
EVERYONE = frozenset({ADMIN, APPROVER, VIEWER})
DECIDERS = frozenset({ADMIN, APPROVER})
ADMINS = frozenset({ADMIN})
READS = ("GET", "HEAD", "OPTIONS")

# The `<what>` of pages 12.1 has no route for (SPEC 23.1), and of the console's own words for
# actions no token has (decisions.md, people).
TOKENS = "manage tokens"
NOTIFICATIONS = "manage notifications"
PEOPLE = "manage people"
REPLY = "reply to confirmations"


@dataclass(frozen=True)
class Need:
    """Who may use one page or action: `read` for GET and HEAD, `write` for every other method.
    Anyone else gets 403 `Your role (<role>) may not <what>.`"""

    read: frozenset = EVERYONE
    write: frozenset = ADMINS
    what: str = ""


def admin_only(what: str) -> Need:
    return Need(ADMINS, ADMINS, what)


def read_only(what: str) -> Need:
    """A page everyone may read and only an admin may post to."""
    return Need(EVERYONE, ADMINS, what)


OPEN = Need(EVERYONE, EVERYONE)  # every signed-in person (their own account), or no session at all
DECIDE = Need(EVERYONE, DECIDERS, REPLY)

# The one table of who may do what in the browser, keyed by URL name, as `api.auth.RIGHTS` is
# for tokens. A route outside `/v1` (its own table) and `accounts/` (allauth's pages of the
# person's own account: `ACCOUNT_PAGES`) without an entry answers 403 to everyone, and fails
# tests/web/test_roles.py: add its rule here.
PAGES: dict[str, Need] = {
    # Servers: read by everyone; changed, reconnected, authorized and tried by admins.
    "servers": OPEN,
    "server-detail": OPEN,
    "server-add": admin_only("change servers"),
    "server-example": admin_only("change servers"),
    "server-import": admin_only("change servers"),
    "server-edit": admin_only("change servers"),
    "server-remove": admin_only("change servers"),
    "server-enable": admin_only("change servers"),
    "server-disable": admin_only("change servers"),
    "server-authorize": admin_only("change servers"),
    "server-forget": admin_only("change servers"),
    "oauth-callback": admin_only("change servers"),
    "server-reconnect": admin_only("reconnect servers"),
    "server-reconnect-all": admin_only("reconnect servers"),
    "server-trust": admin_only("change the allow-list"),
    "tool-try": admin_only("call tools"),
    "tool-try-form": admin_only("call tools"),
    # Pending: seen by everyone, decided by approvers and admins.
    "pending": OPEN,
    "pending-feed": OPEN,
    "pending-detail": OPEN,
    "pending-reply": DECIDE,
    "pending-answer": DECIDE,
    "pending-extend": DECIDE,
    "pending-edit": DECIDE,
    "pending-decide": DECIDE,
    "allowance-revoke": DECIDE,
    "history": OPEN,
    "call-detail": OPEN,
    "rules": read_only("change rules"),
    "views": read_only("change views"),
    "view-remove": admin_only("change views"),
    "tokens": admin_only(TOKENS),
    "token-create": admin_only(TOKENS),
    "token-revoke": admin_only(TOKENS),
    "grant-revoke": admin_only(TOKENS),
    "app-revoke": admin_only("manage apps"),
    "app-allow": admin_only("manage apps"),
    "notifications": admin_only(NOTIFICATIONS),
    "notification-test": admin_only(NOTIFICATIONS),
    "notification-remove": admin_only(NOTIFICATIONS),
    "audit": admin_only("read the audit trail"),
    "people": admin_only(PEOPLE),
    "person-add": admin_only(PEOPLE),
    "person-edit": admin_only(PEOPLE),
    "person-active": admin_only(PEOPLE),
    "group-add": admin_only(PEOPLE),
    "group-edit": admin_only(PEOPLE),
    "group-remove": admin_only(PEOPLE),
    "account": OPEN,
    "session-sign-out": OPEN,
    # Their own credential or none: signing in and out, setting one's password from a one-time
    # link, one-tap links (SPEC 17.2), what MCP clients probe (17.4), the icon, `/metrics` (18.3).
    "login": OPEN,
    "logout": OPEN,
    "set-password": OPEN,
    "one-tap": OPEN,
    "well-known-not-found": OPEN,
    "favicon": OPEN,
    "metrics": OPEN,
}
ACCOUNT_PAGES = "accounts/"  # allauth's: the person's own factors, password, sessions, sign-in
OWN_TABLE = "v1/"  # /v1 checks its tokens' rights itself (api.auth.RIGHTS)


def need_of(url_name: str | None, route: str) -> Need | None:
    """The rule for a resolved route; None for a route the table forgot (refused)."""
    if route.startswith(ACCOUNT_PAGES):
        return OPEN
    return PAGES.get(url_name or "")


def may(role: str) -> dict[str, object]:
    """What the pages offer a role, for templates (`may.admin`, `may.reply`, `may.role`)."""
    return {"admin": role == ADMIN, "reply": role in DECIDERS, "role": role}


def refused(request: HttpRequest, role: str, what: str) -> HttpResponse:
    """SPEC 23.1's 403 page."""
    context = {"message": f"Your role ({role}) may not {what}.", "may": may(role)}
    return HttpResponse(render_to_string("mcpcore/forbidden.html", context, request), status=403)


class RoleCheck:
    """Every page and action of a signed-in person against `PAGES`, before its view runs (so a
    refused one changes nothing). Signed-out visitors are left to the views' `login_required`."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest):
        return self.get_response(request)

    def process_view(self, request: HttpRequest, view, args, kwargs) -> HttpResponse | None:
        match = request.resolver_match
        route = match.route if match else ""
        if route.startswith(OWN_TABLE):
            return None
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return None
        role = role_of(user)
        request.person_role = role  # type: ignore[attr-defined]  # read by the context processor
        need = need_of(match.url_name if match else None, route)
        if need is None:
            log.error("no rule in roles.PAGES for %s", match.url_name if match else request.path)
            return refused(request, role, "use this page")
        if role not in (need.read if request.method in READS else need.write):
            return refused(request, role, need.what)
        return None
