"""What the pages show: values formatted for people (results, durations, diffs of a changed
definition, the client configuration to copy) and the rows and context each page renders, read
from the database. No request handling: that is `views.py`'s.
"""

import datetime
import difflib
import hashlib
import html
import json
import uuid
from typing import TYPE_CHECKING, TypedDict
from urllib.parse import quote

from allauth.mfa.models import Authenticator
from allauth.socialaccount.models import SocialAccount
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.validators import URLValidator
from django.db import connection
from django.db.models import Prefetch, Q
from django.utils import timezone
from django.utils.safestring import SafeString, mark_safe

from .. import allowlist, files, retention, serverconfig, toolviewstore
from ..choices import CallDecision, CallKind, CallStatus, PersonRole, QuestionStatus, TargetKind, stored_kind
from ..models import (
    ApiToken,
    NotificationTarget,
    PermissionGrant,
    Question,
    Server,
    Tool,
    ToolCall,
    ToolPin,
    View,
    transport_of,
)
from ..oauth import grants
from . import live
from .forms import (
    schema_fields,
)
from .signin import SECOND_FACTORS

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations


PAGE_SIZE = 50


RESULT_HEAD = 8000  # characters of a result the history list loads (enough for small images)


def file_problems() -> list[tuple[str, str]]:
    found = [(n, files.file_problem(n)) for n in (files.MCP_JSON, files.ALLOW_TOOL, files.RULES)]
    return [(n, p) for n, p in found if p]


def pretty(value) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)


def result_view(text: str, complete: bool = True) -> dict:
    """How to show a result string: its images, audio and text when it is the JSON object of
    SPEC 4, pretty JSON when it is other JSON, else the text as it is."""
    if complete and text[:1] in "{[":
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, dict) and any(_media_key(k) for k in data):
            media = sorted((k for k in data if _media_key(k)), key=_media_order)
            images = [data[k] for k in media if k.startswith("image_") and _data_url(data[k], "image/")]
            audio = [data[k] for k in media if k.startswith("audio_") and _data_url(data[k], "audio/")]
            body = data.get("text")
            return {"images": images, "audio": audio, "text": body if isinstance(body, str) else ""}
        if isinstance(data, (dict, list)):
            return {"text": pretty(data), "json": True}
    return {"text": text}


def _media_key(key: str) -> bool:
    kind, _, n = key.partition("_")
    return kind in ("image", "audio") and n.isdigit()


def _media_order(key: str) -> tuple[str, int]:
    kind, _, n = key.partition("_")
    return kind, int(n)


def _data_url(value: object, kind: str) -> bool:
    return isinstance(value, str) and value.startswith(f"data:{kind}")


def example_only(rows: list) -> bool:
    """The example server is the only server: the page says what to try with it."""
    if len(rows) != 1 or rows[0].name != serverconfig.EXAMPLE_NAME:
        return False
    return rows[0].config.get("command") == str(serverconfig.example_command())


def storage() -> dict:
    """The Servers page footer: what the history holds and how long it is kept (SPEC 18.1)."""
    return {
        **retention.storage(),
        "history_days": settings.AGENVOY_HISTORY_DAYS,
        "result_days": settings.AGENVOY_RESULT_DAYS,
    }


# What the server page shows of a tool. Rows rather than model objects: building a thousand Tool
# objects cost more than rendering their checkboxes.
_TOOL_SHOWN = (
    "tool_name", "registered_name", "title", "description", "input_schema", "annotations",
    "digest", "llm_safe", "position",
)  # fmt: skip


def uri_claims(server: Server) -> dict:
    """The server's resources and templates, each with `also`, and the apps its tools name
    that it does not list (`shared_apps`: `{"uri", "also"}`), where other servers claim the
    same URI (SPEC 20.2: `/mcp` then lists and reads it for none of them; the page warns). The
    supervisor records the claims (`Server.uri_claims`); a server removed since is left out."""
    names = set(Server.objects.values_list("name", flat=True))

    def still(others: list[str]) -> list[str]:
        return [name for name in others if name in names]

    uris, templates = server.uri_claims.get("uris", {}), server.uri_claims.get("templates", {})
    resources = list(server.resources.all())
    for row in resources:
        row.also = still(uris.get(row.uri, []))
    resource_templates = list(server.resource_templates.all())
    for template in resource_templates:
        template.also = still(templates.get(template.uri_template, []))
    own = {row.uri for row in resources}
    shared_apps = [
        {"uri": uri, "also": still(others)}
        for uri, others in uris.items()
        if uri not in own and still(others)
    ]
    return {"resources": resources, "resource_templates": resource_templates, "shared_apps": shared_apps}


# MCP's tool annotations a person weighs before trusting a tool, as the marks the page shows.
# Only hints the server set: MCP's defaults (destructive, open world) say nothing about a tool.
_MARKS = (
    ("readOnlyHint", "mark-readonly", "read-only"),
    ("destructiveHint", "mark-destructive", "destructive"),
    ("idempotentHint", "mark-idempotent", "idempotent"),
    ("openWorldHint", "mark-openworld", "open world"),
)


def tool_marks(annotations: dict | None) -> list[tuple[str, str]]:
    """(class, words) for each hint the server set true; read-only makes destructive moot."""
    got = annotations or {}
    marks = [(css, words) for key, css, words in _MARKS if got.get(key) is True]
    if got.get("readOnlyHint") is True:
        marks = [m for m in marks if m[0] != "mark-destructive"]
    return marks


def _summary(description: str) -> str:
    """A tool's description cut to its first line, for beside its checkbox."""
    first = (description or "").strip().split("\n", 1)[0]
    return first if len(first) <= 120 else first[:119] + "…"


def trust_context(server: Server) -> dict:
    entries = files.current_allow()
    match = allowlist.Matcher(entries)
    own = allowlist.entries_for(entries, server.prefix)
    tools = list(server.tools.order_by("position", "tool_name").values_list(*_TOOL_SHOWN, named=True))
    names = {t.registered_name for t in tools}
    trust = files.trust_states(tools, match)
    rows = [
        {
            "tool": t,
            "name": t.tool_name,
            "registered": t.registered_name,
            "allowed": match(t.registered_name),
            "changed": trust[t.registered_name] == "changed",
            "marks": tool_marks(t.annotations),
            "summary": _summary(t.description),
        }
        for t in tools
    ]
    return {
        "server": server,
        "trust_tools": rows,
        "changed_tools": [row for row in rows if row["changed"]],
        "all_allowed": f"{server.prefix}*" in own,
        "own_entries": own,
        "stale_entries": [e for e in own if e not in names and not e.endswith("*")],
    }


def _linebreaks(text: str) -> SafeString:
    """The `linebreaksbr` filter for a plain string, without the filter's lazy-string wrappers
    (they took about 17 µs a tool here, more than the rest of a card's strings)."""
    return mark_safe(html.escape(text.replace("\r\n", "\n").replace("\r", "\n")).replace("\n", "<br>"))


def tool_card(tool, change: dict | None, try_form_url: str, open_try: bool) -> dict:
    """What the page shows of one tool, as plain values: a server can have a thousand, and each
    lookup through a model object or filter in the template costs microseconds per tool."""
    quoted = quote(tool.tool_name)
    return {
        "tool": tool,
        "id": str(tool.position),
        "name": tool.tool_name,
        "title": tool.title if tool.title != tool.tool_name else "",
        "llm_safe": tool.llm_safe,
        "registered": tool.registered_name,
        "description": _linebreaks(tool.description),
        "schema": pretty(tool.input_schema),
        "annotations": pretty(tool.annotations) if tool.annotations else "",
        "marks": tool_marks(tool.annotations),
        "change": change,
        "open": open_try,
        "fields": schema_fields(tool.input_schema) if open_try else None,
        "try_get": f"{try_form_url}?tool={quoted}",
        "try_href": f"?try={quoted}#tool-{tool.position}",
    }


def trust_message(name: str, prefix: str, entries: list[str]) -> str:
    if entries == [f"{prefix}*"]:
        return f"Saved: every tool of {name} runs without asking."
    if not entries:
        return f"Saved: every tool of {name} waits for a person."
    n = len(entries)
    return f"Saved: {n} tool{'s' if n != 1 else ''} of {name} run{'s' if n == 1 else ''} without asking."


def reconnect_message(outcome: dict[str, str]) -> str:
    return (
        "Reconnect: " + "; ".join(f"{n}: {o}" for n, o in outcome.items())
        if outcome
        else "Reconnect: there are no servers."
    )


def preview_row(name: str, config: dict, exists: bool) -> dict:
    args = config.get("args") or []
    return {
        "name": name,
        "transport": transport_of(config) or "?",
        "target": config.get("url") or " ".join([config.get("command", ""), *args]),
        "env": sorted((config.get("env") or {}).keys()),
        "headers": sorted((config.get("headers") or {}).keys()),
        "disabled": bool(config.get("disabled")),
        "replaces": exists,
    }


def rule_examples(tool: Tool | None) -> list[str]:
    """Rules for the Rules page's examples, written with one of this console's own tools (a
    newcomer's console has no `fs` or `github` server); the generic ones when it has none."""
    if tool is None:
        return [
            "deny mcp__fs__write_file(path:/etc/*)",
            "ask mcp__github__*",
            "allow mcp__fs__read_file(path:/srv/*)",
        ]
    prefix = tool.registered_name[: -len(tool.tool_name)]
    props = list((tool.input_schema or {}).get("properties") or {})
    said = [f"ask {tool.registered_name}", f"allow {prefix}*"]
    if props:
        said.insert(0, f"deny {tool.registered_name}({props[0]}:*secret*)")
    return said


def reply_message(call: ToolCall) -> str:
    replies: dict[str, str] = {
        CallDecision.APPROVE: "Approved",
        CallDecision.REMEMBER: "Approved and remembered",
        CallDecision.SESSION: f"Approved for session {call.session_id}",
        CallDecision.GRANT: "Approved for 1 hour",
        CallDecision.DENY: "Denied",
    }
    said = "Approved with changed arguments" if call.edited_by else replies.get(call.decision, call.decision)
    return f"{said}: {call.tool_name}."


def page_cursor(raw: str | None, key=uuid.UUID) -> tuple[datetime.datetime, object] | None:
    """A page cursor `<time ISO>~<id>` (`key` reads the id: a call's UUID by default); anything
    else is no cursor."""
    if not raw:
        return None
    stamp, _, cid = raw.partition("~")
    try:
        when = datetime.datetime.fromisoformat(stamp)
        return (when if when.tzinfo else when.replace(tzinfo=datetime.UTC)), key(cid)
    except ValueError:
        return None


def _cursor_of(when: datetime.datetime, key: object) -> str:
    stamp = when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return f"{stamp}~{key}"


def history_page(rows, before, after, parts=None) -> dict:
    """Keyset pages of calls, newest first, over (created_at, id). `parts`, when given, are
    querysets whose rows together are the page's (see `tool_parts`): each is read up to a page
    and the pages merged."""
    page, older, newer = keyset_page(rows, "created_at", before, after, parts)
    return {"calls": [_history_row(c) for c in page], "older": older, "newer": newer}


def keyset_page(rows, field: str, before, after, parts=None) -> tuple[list, str | None, str | None]:
    """One page, newest first, over (`field`, id): cheap at any depth, no COUNT(*). Returns
    the page's rows and the cursors of the older and newer pages (None: there is none)."""
    querysets = parts if parts is not None else [rows]
    if after is not None:
        when, key = after
        found = _merged(
            [
                q.filter(**{f"{field}__gte": when}).filter(Q(**{f"{field}__gt": when}) | Q(id__gt=key))
                for q in querysets
            ],
            (field, "id"),
            rows,
        )
        newer = len(found) > PAGE_SIZE
        page = found[:PAGE_SIZE][::-1]
        older = True
    else:
        if before is not None:
            when, key = before
            querysets = [
                q.filter(**{f"{field}__lte": when}).filter(Q(**{f"{field}__lt": when}) | Q(id__lt=key))
                for q in querysets
            ]
        found = _merged(querysets, (f"-{field}", "-id"), rows)
        older = len(found) > PAGE_SIZE
        page = found[:PAGE_SIZE]
        newer = before is not None

    def cursor(row) -> str:
        return _cursor_of(getattr(row, field), row.id)

    return page, cursor(page[-1]) if older and page else None, cursor(page[0]) if newer and page else None


def _merged(querysets: list, order: tuple[str, str], rows) -> list:
    """The first PAGE_SIZE + 1 rows, in `order`, of the union of `querysets`. Of several, only
    the keys are read from each, then the rows of the merged page, once each, from `rows`."""
    if len(querysets) == 1:
        return list(querysets[0].order_by(*order)[: PAGE_SIZE + 1])
    newest_first = order[0].startswith("-")
    field = order[0].lstrip("-")
    keys = sorted(
        (key for q in querysets for key in q.order_by(*order).values_list(field, "id")[: PAGE_SIZE + 1]),
        reverse=newest_first,
    )[: PAGE_SIZE + 1]
    found = list(rows.filter(id__in=[cid for _, cid in keys])) if keys else []
    found.sort(key=lambda c: (getattr(c, field), c.id), reverse=newest_first)
    return found


def audit_rows(entries: list) -> list[dict]:
    """The Audit page's rows: each entry with its before and after as readable JSON."""
    return [
        {
            "entry": e,
            "before": None if e.before is None else pretty(e.before),
            "after": None if e.after is None else pretty(e.after),
        }
        for e in entries
    ]


# Above this many tool names matching a tool filter, the history is read in time order with
# the filter applied row by row (so many names match that matching rows are near).
TOOL_PARTS = 200


def kind_filter(rows, kind: str):
    """Calls of one history kind (`choices.HISTORY_KINDS`). Tool calls are nearly every row:
    their pages run down the time index testing each row. The other kinds have a partial index
    of their own (`mcpcore_call_kind_time`, rows that are not tool calls); the index's own
    condition is repeated so that SQLite's planner, which matches it literally, takes it."""
    stored = stored_kind(kind)
    if stored == CallKind.TOOL_CONFIRM:
        return rows.filter(kind=stored)
    return rows.filter(kind=stored).exclude(kind=CallKind.TOOL_CONFIRM)


def tool_parts(rows, text: str) -> list | None:
    """A tool filter (part of a registered name, any case) as one queryset per matching name,
    each served by the (tool_name, created_at) index; None for too many names (filter the
    time-ordered rows instead). The names are found by skipping through that index, one seek
    per distinct name, so a filter matching nothing costs no scan of the calls."""
    names = _tool_names(TOOL_PARTS * 50)
    if names is None:
        return None
    wanted = text.casefold()
    matching = [n for n in names if wanted in n.casefold()]
    if len(matching) > TOOL_PARTS:
        return None
    return [rows.filter(tool_name=n) for n in matching]


def _tool_names(limit: int) -> list[str] | None:
    """Every distinct tool name in the history, or None when there are more than `limit`."""
    table, column = ToolCall._meta.db_table, "tool_name"
    sql = (
        f"WITH RECURSIVE names(n) AS (SELECT MIN({column}) FROM {table} UNION ALL "
        f"SELECT (SELECT MIN({column}) FROM {table} WHERE {column} > names.n) FROM names "
        f"WHERE names.n IS NOT NULL) SELECT n FROM names WHERE n IS NOT NULL LIMIT %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [limit + 1])
        names = [row[0] for row in cursor.fetchall()]
    return names if len(names) <= limit else None


class _ResultHead(TypedDict):
    result_head: str | None  # the history query's annotation: the first RESULT_HEAD characters


def _history_row(call: "WithAnnotations[ToolCall, _ResultHead]") -> dict:
    head = call.result_head or ""
    complete = len(head) < RESULT_HEAD
    return {
        "call": call,
        "args": pretty(call.arguments),
        # Edit and approve (SPEC 24.5): the arguments as the agent asked them, beside those run.
        "requested": pretty(call.requested_arguments) if call.edited_by else "",
        "result": result_view(head, complete),
        "complete": complete,
        "took": took(call.duration),
    }


def took(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def result_context(call: ToolCall) -> dict:
    return {
        "call": call,
        "result": result_view(call.result) if call.ended else None,
        "took": took(call.duration),
    }


def token_rows() -> list[ApiToken]:
    """The API tokens; an app's own token is listed with its grant (`app_rows`) instead."""
    rows = list(ApiToken.objects.filter(app_grant__isnull=True).prefetch_related(_active_grants(), "views"))
    now = timezone.now()
    for row in rows:
        row.used_ago = live.ago(row.last_used_at) or "never"
        for grant in row.grants:
            # Time-boxed grants (SPEC 17.3) say how long they have left; the page counts down.
            left = (grant.expires_at - now).total_seconds() if grant.expires_at else None
            grant.left_text = live.clock(left) if left is not None else ""
    return rows


def app_rows() -> list[dict]:
    """The connected apps (SPEC 21.4) as the Tokens page lists them."""
    rows = []
    for grant in grants.live_grants():
        row = grants.to_dict(grant)
        row["used_ago"] = live.ago(grant.token.last_used_at) or "never"
        row["created"] = grant.created_at
        rows.append(row)
    return rows


def people_rows() -> list[dict]:
    """Everyone who may sign in, as the People page lists them (SPEC 23.1): a person with a
    provider identity (allauth's `SocialAccount`, once single sign-on is installed) signs in
    with `sso`."""
    User = get_user_model()
    users = User.objects.select_related("person").prefetch_related("console_groups").order_by("username")
    factors = set(Authenticator.objects.filter(type__in=SECOND_FACTORS).values_list("user_id", flat=True))
    sso = set(SocialAccount.objects.values_list("user_id", flat=True))
    rows = []
    for user in users:
        person = getattr(user, "person", None)
        rows.append(
            {
                "user": user,
                "role": person.role if person else PersonRole.ADMIN,
                "from_sso": bool(person and person.from_sso),
                "groups": [g.name for g in user.console_groups.all()],
                "signs_in": "sso" if user.pk in sso else "password",
                "second_factor": user.pk in factors,
            }
        )
    return rows


MCP_NAME = "agenvoy"  # the name clients give /mcp (Claude Code: tools `mcp__agenvoy__...`)


PERMISSION_NAME = "agenvoy-permission"  # the name clients give /mcp/_permission


def _active_grants() -> Prefetch:
    """A token's grants in force (remembered and time-boxed), as `token.grants`."""
    rows = PermissionGrant.in_force().order_by("tool_name", "expires_at")
    return Prefetch("permission_grants", queryset=rows, to_attr="grants")


def client_config(token: str, views: list[str] | None = None) -> dict:
    """Ready-to-paste configuration of MCP clients for a token (SPEC 13.4): shown once, with
    the token it was made for. For a token limited to views (SPEC 19) the snippets name its
    view's endpoint `/mcp/v/<view>` (its first, by name), and each of its views is offered;
    for any other token `/mcp`, with every view offered as a narrower endpoint."""
    base = settings.AGENVOY_PUBLIC_URL
    header = f"Authorization: Bearer {token}"
    offered = (
        sorted(views)
        if views is not None
        else list(View.objects.order_by("name").values_list("name", flat=True))
    )
    name, path = (f"{MCP_NAME}-{offered[0]}", f"/mcp/v/{offered[0]}") if views else (MCP_NAME, "/mcp")
    server = {"type": "http", "url": f"{base}{path}", "headers": {"Authorization": f"Bearer {token}"}}
    return {
        "url": f"{base}{path}",
        "claude_add": f'claude mcp add --transport http {name} {base}{path} --header "{header}"',
        "mcp_servers": json.dumps({"mcpServers": {name: server}}, indent=2),
        "vscode": json.dumps({"servers": {name: server}}, indent=2),
        "views": [
            {
                "name": v,
                "url": f"{base}/mcp/v/{v}",
                "claude_add": f'claude mcp add --transport http {MCP_NAME}-{v} {base}/mcp/v/{v} --header "{header}"',
            }
            for v in offered
        ],
        "permission_add": (
            f'claude mcp add --transport http {PERMISSION_NAME} {base}/mcp/_permission --header "{header}"'
        ),
        "permission_run": (
            f'claude -p --permission-prompt-tool mcp__{PERMISSION_NAME}__approval_prompt "..."'
        ),
        "hooks_settings": claude_code_settings(),
    }


HOOK_TIMEOUT = 60  # seconds Claude Code gives the hook: above the console's default wait of 55


def claude_code_settings() -> str:
    """The `.claude/settings.json` block that sends every permission dialog of Claude Code to the
    console (SPEC 17.1). The token comes from `$AGENVOY_TOKEN`, so the file holds no secret and
    can be committed for a whole team."""
    hook = {
        "type": "http",
        "url": f"{settings.AGENVOY_PUBLIC_URL}/v1/hooks/claude-code",
        "headers": {"Authorization": "Bearer $AGENVOY_TOKEN"},
        "allowedEnvVars": ["AGENVOY_TOKEN"],
        "timeout": HOOK_TIMEOUT,
    }
    return json.dumps({"hooks": {"PermissionRequest": [{"matcher": "*", "hooks": [hook]}]}}, indent=2)


def side_by_side(old: str, new: str) -> list[dict]:
    """Rows of a two-column line diff: `same` rows, and `changed` rows whose missing side is
    None (lines only in the trusted or only in the current text)."""
    a, b = old.splitlines(), new.splitlines()
    rows: list[dict] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            rows += [{"kind": "same", "old": x, "new": y} for x, y in zip(a[i1:i2], b[j1:j2], strict=True)]
            continue
        left, right = a[i1:i2], b[j1:j2]
        for k in range(max(len(left), len(right))):
            rows.append(
                {
                    "kind": "changed",
                    "old": left[k] if k < len(left) else None,
                    "new": right[k] if k < len(right) else None,
                }
            )
    return rows


def _sorted_json(value) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def definition_changes(tools: list) -> dict[str, dict]:
    """For each changed tool: its pin's time and the description and schema diffs."""
    pins = {
        p.registered_name: p
        for p in ToolPin.objects.filter(registered_name__in=[t.registered_name for t in tools])
    }
    out = {}
    for tool in tools:
        pin = pins.get(tool.registered_name)
        if pin is None:
            continue
        parts = [
            ("Description", side_by_side(pin.description, tool.description)),
            ("Input schema", side_by_side(_sorted_json(pin.input_schema), _sorted_json(tool.input_schema))),
        ]
        out[tool.registered_name] = {
            "pinned_at": pin.pinned_at,
            "parts": [{"title": t, "rows": r} for t, r in parts if any(x["kind"] == "changed" for x in r)],
            "unchanged": [t for t, r in parts if all(x["kind"] == "same" for x in r)],
        }
    return out


def rules_lines(text: str) -> list[str]:
    text = text.replace("\r\n", "\n").rstrip("\n")
    return text.split("\n") if text.strip() else []


def pattern_lines(text: str) -> list[str]:
    return [line.strip() for line in text.replace("\r\n", "\n").split("\n") if line.strip()]


def toolview_rows() -> list[dict]:
    """Every view as `GET /v1/views` lists it, plus the tokens limited to it."""
    tokens: dict[str, list[str]] = {}
    for view, token in ApiToken.views.through.objects.filter(apitoken__revoked_at__isnull=True).values_list(
        "view__name", "apitoken__name"
    ):
        tokens.setdefault(view, []).append(token)
    base = settings.AGENVOY_PUBLIC_URL
    return [
        {**row, "url": f"{base}/mcp/v/{row['name']}", "token_names": sorted(tokens.get(row["name"], []))}
        for row in toolviewstore.listing()
    ]


def _ending(call: ToolCall) -> str:
    """How a confirmation ended, in a sentence for its page."""
    when = call.decided_at or call.ended_at
    at = f" at {when.astimezone(datetime.UTC):%Y-%m-%d %H:%M:%S} UTC" if when else ""
    who = call.decided_by or "someone"
    endings: dict[str, str] = {
        CallDecision.APPROVE: f"Approved by {who}{at}.",
        CallDecision.REMEMBER: f"Approved and remembered by {who}{at}.",
        CallDecision.SESSION: f"Approved for session {call.session_id} by {who}{at}.",
        CallDecision.GRANT: f"Approved by {who}{at}, with later calls of {call.tool_name} allowed for a while.",
        CallDecision.DENY: f"Denied by {who}{at}." + (f" Reason: {call.reason}" if call.reason else ""),
        CallDecision.ABORT: f"Stopped by {who}{at}: the agent was told to stop.",
        CallDecision.EXPIRED: f"Expired{at}: nobody answered in time.",
    }
    said = endings.get(call.decision)
    if said is None:
        ended = f" at {call.ended_at.astimezone(datetime.UTC):%Y-%m-%d %H:%M:%S} UTC" if call.ended_at else ""
        said = (
            f"Ended ({call.status}){ended}."
            if call.ended
            else f"Decided ({call.decision or call.status}){at}."
        )
    return said


def confirmation_context(
    call: ToolCall, groups: frozenset[str] | None, typed: str | None = None, problem: str = ""
) -> dict:
    """A confirmation's own page, for one deciding `groups` (SPEC 24.1: `routing.deciding_groups`);
    a pending tool call's has the `Edit and approve` form (SPEC 24.5): the arguments
    pretty-printed (or as the person `typed` them, with the `problem` the reply found) and the
    tool's input schema."""
    pending = call.status == CallStatus.PENDING
    edit = None
    if pending and call.kind == CallKind.TOOL_CONFIRM:
        schema = Tool.objects.filter(registered_name=call.tool_name).values_list("input_schema", flat=True)
        found = schema.first()
        edit = {
            "text": pretty(call.arguments) if typed is None else typed,
            "schema": pretty(found) if found is not None else "",
            "problem": problem,
        }
    return {
        "call": call,
        "item": live.pending_context([call], groups=groups)["pending_items"][0] if pending else None,
        "ending": "" if pending else _ending(call),
        "result": result_view(call.result) if call.ended else None,
        "detail": True,
        "edit": edit,
    }


def extend_message(item_id: str, until: datetime.datetime | None) -> str:
    """The note after a person extended a pending confirmation or question (SPEC 24.4)."""
    call = ToolCall.objects.filter(confirm_id=item_id).only("tool_name").first()
    what = call.tool_name if call else "the question from " + Question.objects.get(id=item_id).server_name
    at = f" until {until.astimezone(datetime.UTC):%H:%M:%S} UTC" if until else ""
    return f"Extended: {what}{at}."


def decided_message(results: dict[str, str], approve: bool) -> str:
    """The note after many confirmations were decided at once (SPEC 24.6): how many, and why
    the others were not (each reason once, with how many it stopped)."""
    done = sum(1 for result in results.values() if result == "ok")
    said = f"{'Approved' if approve else 'Denied'} {done} of {len(results)}."
    refused: dict[str, int] = {}
    for result in results.values():
        if result != "ok":
            refused[result] = refused.get(result, 0) + 1
    for why, count in refused.items():
        said += f" Not applied to {count}: {why}."
    return said


def answer_message(server: str, action: str) -> str:
    """The note after a person answered a server's question."""
    said = {"accept": "Answer sent", "decline": "Declined", "cancel": "Cancelled"}.get(action, action)
    return f"{said}: {server}'s question."


def question_ending(question: Question) -> str:
    """How a server's question ended, in a sentence for its pages."""
    when = question.answered_at
    at = f" at {when.astimezone(datetime.UTC):%Y-%m-%d %H:%M:%S} UTC" if when else ""
    who = question.answered_by
    by = " by the calling client" if who == "client" else f" by {who}" if who and who != "timeout" else ""
    endings: dict[str, str] = {
        QuestionStatus.ANSWERED: f"Answered{by}{at}.",
        QuestionStatus.DECLINED: f"Declined{by}{at}.",
        QuestionStatus.CANCELLED: f"Cancelled{by}{at}." if who else f"Cancelled{at}: the call ended.",
        QuestionStatus.EXPIRED: f"Expired{at}: nobody answered in time; the server was told cancel.",
        QuestionStatus.ASKED: "Asked of the MCP client that made the call.",
    }
    return endings.get(question.status, str(question.status))


def question_rows(questions: list[Question]) -> list[dict]:
    """A call's questions for its page: each with its answer's content as shown."""
    rows = []
    for q in questions:
        content = (q.answer or {}).get("content") if isinstance(q.answer, dict) else None
        rows.append(
            {
                "question": q,
                "ending": question_ending(q),
                "content": json.dumps(content, indent=2, ensure_ascii=False) if content is not None else "",
                "schema": json.dumps(q.schema, indent=2, ensure_ascii=False) if q.schema else "",
            }
        )
    return rows


def question_context(question: Question, groups: frozenset[str] | None) -> dict:
    """A server's question's own page: its form while it waits (for one deciding `groups`), how
    it ended after."""
    pending = question.status == QuestionStatus.PENDING
    return {
        "question": question,
        "call": question.call,
        "q": live.question_item(question, groups=groups) if pending else None,
        "ending": "" if pending else question_ending(question),
        "detail": True,
    }


DELIVERIES_SHOWN = 20  # per target on the Notifications page


check_url = URLValidator(schemes=["http", "https"])


def target_token_error(kind: str, token: str) -> str:
    """What is wrong with a new target's access token (SPEC 15: ntfy only, sent as an HTTP
    header, kept in a 200-character column), or ""."""
    if not token:
        return ""
    if kind != TargetKind.NTFY:
        return "Only ntfy targets take an access token."
    if any(not ("!" <= ch <= "~") for ch in token):
        return "An access token has no spaces and only ASCII letters, digits and punctuation."
    if len(token) > 200:
        return "That access token is too long (at most 200 characters)."
    return ""


def _targets() -> list[NotificationTarget]:
    rows = list(NotificationTarget.objects.prefetch_related("groups"))
    for row in rows:
        row.recent = list(row.deliveries.order_by("-created_at", "-id")[:DELIVERIES_SHOWN])
    return rows


def targets_context() -> dict:
    targets = _targets()
    shown = ";".join(
        f"{t.pk}:" + ",".join(f"{d.pk}.{d.status}.{d.attempts}" for d in t.recent) for t in targets
    )
    return {"targets": targets, "targets_sig": hashlib.sha1(shown.encode()).hexdigest()[:16]}


_BROWSERS = (("Edg/", "Edge"), ("Firefox/", "Firefox"), ("Chrome/", "Chrome"), ("Safari/", "Safari"))
_SYSTEMS = (
    ("Android", "Android"),
    ("iPhone", "iOS"),
    ("iPad", "iPadOS"),
    ("Windows", "Windows"),
    ("Mac OS X", "macOS"),
    ("Linux", "Linux"),
)


def browser_of(user_agent: str) -> str:
    """A session's browser as a person names it ("Chrome on Linux"), else the raw agent."""
    browser = next((name for mark, name in _BROWSERS if mark in user_agent), "")
    system = next((name for mark, name in _SYSTEMS if mark in user_agent), "")
    if browser and system:
        return f"{browser} on {system}"
    return browser or system or (user_agent[:80] or "unknown browser")
