"""What the open pages show live, and the pushes that keep them current.

The browser's socket (`LiveConsumer`) says which page it is on (`/ws/live/?page=servers`,
`page=server:<name>`, `page=pending`, or nothing); `render_push` answers a supervisor or gate
event with htmx out-of-band fragments for that page only, from one query. The views render the
same fragments from the same functions, so a push and a reload show the same thing.
"""

import hashlib
import json
from urllib.parse import parse_qs, urlsplit

from allauth.usersessions.models import UserSession
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db.models import Count
from django.template.loader import render_to_string
from django.utils import timezone

from .. import control, elicitation
from ..calls import routing
from ..choices import CallKind, CallStatus, QuestionMode, QuestionStatus
from ..models import Question, Server, SessionAllowance, ToolCall
from ..oauth import upstream
from . import roles

ROLE = "person_role"  # the socket scope's key for the person's role
PENDING_SHOWN = 200  # the list and the badge stop counting here ("200+")


def session_group(session_key: str) -> str:
    """The group of one browser session's live sockets. The key is hashed: it is the session's
    credential, and group names travel through the channel layer (Redis in scale-out)."""
    return "mcp-session-" + hashlib.sha256(session_key.encode()).hexdigest()[:32]


def end_sockets(session_keys: list[str]) -> None:
    """Close the live sockets of sessions that ended (a sign-out, or `Sign out` of another
    session on the Account page), in every web process: a socket outlives the request that
    opened it and would otherwise keep pushing to a browser no longer signed in."""
    for key in session_keys:
        if key:
            control.send_group(session_group(key), {"type": "session.ended"})


def end_sockets_of(user) -> None:
    """Close every live socket of a person (their role changed: the browser's socket opens
    again at once and reads the new one)."""
    end_sockets(list(UserSession.objects.filter(user=user).values_list("session_key", flat=True)))


def ago(when) -> str:
    """A short "how long ago" for status tables."""
    if when is None:
        return ""
    seconds = (timezone.now() - when).total_seconds()
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{int(seconds // 60)} min ago"
    if seconds < 86400:
        return f"{int(seconds // 3600)} h ago"
    return when.strftime("%Y-%m-%d")


def _with_ago(server: Server) -> Server:
    server.refreshed_ago = ago(server.last_refresh)
    return server


def server_rows() -> list[Server]:
    """Every server with its tool count (one query)."""
    return [_with_ago(s) for s in Server.objects.annotate(n_tools=Count("tools")).order_by("name")]


def server_with_count(name: str) -> Server | None:
    """One server for its page, with its tool count and its OAuth standing (`oauth_info`)."""
    server = Server.objects.annotate(n_tools=Count("tools")).filter(name=name).first()
    if server is None:
        return None
    server.oauth_info = upstream.page_info(server)
    return _with_ago(server)


def pending_calls() -> list[ToolCall]:
    """The oldest pending confirmations first, one more than shown (to say "200+")."""
    return list(
        ToolCall.objects.filter(status=CallStatus.PENDING).order_by("created_at")[: PENDING_SHOWN + 1]
    )


def pending_questions() -> list[Question]:
    """Servers' questions waiting in the inbox (SPEC 20.4), oldest first, with their calls."""
    rows = Question.objects.select_related("call").filter(status=QuestionStatus.PENDING)
    return list(rows.order_by("created_at")[: PENDING_SHOWN + 1])


def allowances() -> list[SessionAllowance]:
    """Session allowances in force, newest first (the Pending page lists them)."""
    rows = SessionAllowance.objects.filter(revoked_at__isnull=True).select_related("token")
    return list(rows.order_by("-created_at")[:200])


def badge_text(count: int) -> str:
    if count <= 0:
        return ""
    return f"{PENDING_SHOWN}+" if count > PENDING_SHOWN else str(count)


def pending_count() -> int:
    calls = ToolCall.objects.filter(status=CallStatus.PENDING)[: PENDING_SHOWN + 1].count()
    return calls + Question.objects.filter(status=QuestionStatus.PENDING)[: PENDING_SHOWN + 1].count()


def _left(expires_at, now) -> dict:
    left = (expires_at - now).total_seconds() if expires_at else None
    return {
        "seconds_left": max(0, int(left)) if left is not None else None,
        "left_text": clock(left) if left is not None else "",
        "extend_by": clock(settings.AGENVOY_CONFIRM_TIMEOUT),  # what Extend gives (SPEC 24.4)
    }


def question_item(question: Question, now=None, groups: frozenset[str] | None = frozenset()) -> dict:
    """What a question's card shows: the form's fields (form mode) or the URL and its host;
    `decides`: whether one deciding `groups` may answer it (its call's group, SPEC 24.1)."""
    call = question.call
    item = {
        "question": question,
        "call": call,
        "decides": routing.decides(call, groups),
        "tool": call.tool or call.tool_name,
        "args": json.dumps(call.arguments, indent=2, ensure_ascii=False),
        **_left(question.expires_at, now or timezone.now()),
    }
    if question.mode == QuestionMode.URL:
        parts = urlsplit(question.url)
        item["host"] = parts.hostname or question.url
        # A question asked before the console refused such addresses (`url_refusal`) shows
        # why, and no host a person could trust.
        item["refused"] = elicitation.url_refusal(question.url)
        # Only a web address gets an Open link: a server's `javascript:` URL stays text.
        web = parts.scheme in ("http", "https") and parts.hostname and not item["refused"]
        item["open_url"] = question.url if web else ""
    else:
        item["fields"] = [
            form_field(question, i, f) for i, f in enumerate(elicitation.fields(question.schema))
        ]
    return item


def _shown_default(f: elicitation.Field) -> str:
    """A field's default as its input's value (none for a boolean or several choices)."""
    value = f.default
    if value is None or isinstance(value, (bool, list, dict)):
        return ""
    return str(value)


def form_field(question: Question, index: int, f: elicitation.Field) -> dict:
    """One field of a question's form as the page renders it: element ids unique on the page
    (a field's name may hold anything), the default as the input's value, and choices with
    theirs preselected. A single choice is a select, not radio buttons: a radio group is one
    Tab stop, the rest reached by arrow keys, which a person filling a form may not guess."""
    base = f"q-{question.id}-{index}"
    options = [
        {"value": value, "label": label, "id": f"{base}-{j}", "checked": f.chosen(value)}
        for j, (value, label) in enumerate(f.options)
    ]
    return {
        "f": f,
        "id": base,
        "value": _shown_default(f),
        "checked": f.default is True,
        "options": options,
        "has_choice": any(o["checked"] for o in options),
    }


def _same_call(call: ToolCall) -> tuple | None:
    """What makes pending tool calls one row of the inbox (SPEC 24.6): one token's (or one
    person's) calls of one tool with the same arguments; None for the other kinds."""
    if call.kind != CallKind.TOOL_CONFIRM:
        return None
    args = json.dumps(call.arguments, sort_keys=True, ensure_ascii=False)
    return call.token_id, call.requested_by, call.tool_name, args


def pending_context(
    rows: list[ToolCall], asked: list[Question] | None = None, groups: frozenset[str] | None = frozenset()
) -> dict:
    """The inbox's items; each says whether the person, deciding `groups` (`routing.deciding_groups`:
    None for all), may decide it (SPEC 24.1: else `For <group>` and no buttons)."""
    now = timezone.now()
    asked = asked or []
    items: list[dict] = []
    rows_of: dict[tuple, dict] = {}
    for call in rows[:PENDING_SHOWN]:
        key = _same_call(call)
        if key is not None and key in rows_of:
            rows_of[key]["group"].append(call)
            continue
        item = {
            "call": call,
            "group": [call],  # the calls this row decides: more than one shows as `×<n>`
            "decides": routing.decides(call, groups),
            "args": json.dumps(call.arguments, indent=2, ensure_ascii=False),
            **_left(call.expires_at, now),
        }
        items.append(item)
        if key is not None:
            rows_of[key] = item
    for item in items:
        item["ids"] = ",".join(str(c.confirm_id) for c in item["group"])
    # What the list shows, for the browser to skip swapping in an identical list (a swap in
    # the middle of a click would lose it). Time left is kept current by the page itself; an
    # extension (SPEC 24.4) changes the signature.
    shown = ",".join(f"{c.confirm_id}@{c.expires_at}" for c in rows[:PENDING_SHOWN])
    shown += ";" + ",".join(f"{q.id}@{q.expires_at}" for q in asked[:PENDING_SHOWN])
    return {
        "pending_sig": hashlib.sha1(shown.encode()).hexdigest()[:16],
        "pending_items": items,
        "question_items": [question_item(q, now, groups) for q in asked[:PENDING_SHOWN]],
        "pending_more": len(rows) > PENDING_SHOWN or len(asked) > PENDING_SHOWN,
        "pending_badge": badge_text(len(rows) + len(asked)),
    }


def clock(seconds: float) -> str:
    """Time left as `m:ss` (`h:mm:ss` past an hour); `0:00` once past."""
    total = max(0, int(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def page_of(scope: dict) -> tuple[str, dict]:
    """(page, query) the socket was opened for."""
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    return (query.get("page") or [""])[0], {k: v[0] for k, v in query.items()}


def _render_status(page: str, query: dict, server_name: str, role: str) -> str:
    if page not in ("servers", f"server:{server_name}"):
        return ""
    may = roles.may(role)
    if page == "servers":
        return render_to_string(
            "mcpcore/server_list.html#server-rows", {"servers": server_rows(), "oob": True, "may": may}
        )
    server = server_with_count(server_name)
    if server is None:
        return ""
    return render_to_string(
        "mcpcore/server_detail.html#server-status",
        {"server": server, "page_sig": query.get("sig", ""), "oob": True, "may": may},
    )


def _render_pending(page: str, role: str, user=None) -> str:
    if page == "pending":
        may = roles.may(role)  # a viewer's list has no buttons (SPEC 23.1)
        rows, asked = pending_calls(), pending_questions()
        # Nor another group's items (24.1): whose the person decides is asked only when an item
        # has a group (a push with none costs no more); without a person, none of them.
        routed = any(c.for_group for c in rows[:PENDING_SHOWN]) or any(q.call.for_group for q in asked)
        groups: frozenset[str] | None = None
        if routed:
            groups = (
                routing.deciding_groups(routing.Replier.person(user)) if user is not None else frozenset()
            )
        context = pending_context(rows, asked, groups)
        html: str = render_to_string(
            "mcpcore/pending_list.html#pending-list", {**context, "oob": True, "may": may}
        )
        # Allowances come and go with replies and revoked tokens: the same push keeps them current.
        html += render_to_string(
            "mcpcore/pending_list.html#allowances", {"allowances": allowances(), "oob": True, "may": may}
        )
        badge = context["pending_badge"]
    else:
        html, badge = "", badge_text(pending_count())
    return html + render_to_string("base.html#pending-badge", {"pending_badge": badge, "oob": True})


async def render_push(event: dict, scope: dict) -> str:
    """The htmx OOB HTML for one event, for the page the socket belongs to ("" for nothing)."""
    user = scope.get("user")
    if user is None or not user.is_authenticated:
        return ""
    page, query = page_of(scope)
    # The buttons as the person's role has them: read when the socket opened (`LiveConsumer`),
    # which a change of role closes (`end_sockets_of`); none without one.
    role = scope.get(ROLE, roles.VIEWER)
    kind = event.get("type")
    if kind == "status.changed" and isinstance(event.get("server"), str):
        return await sync_to_async(_render_status)(page, query, event["server"], role)
    if kind == "pending.changed":
        return await sync_to_async(_render_pending)(page, role, user)
    return ""
