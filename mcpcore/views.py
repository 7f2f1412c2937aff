"""Pages of the console (function views; htmx fragments via `page.html#fragment`).

Every page and action needs a signed-in user; actions are POST only and CSRF-checked. Writes go
through the same module functions as `/v1` (files, calls, control), never around them. A view
asked by htmx answers with its fragment (plus out-of-band messages and badge after an action);
without JavaScript the same URLs answer with whole pages and redirects.
"""

import datetime
import difflib
import functools
import hashlib
import html
import json
import uuid
from typing import TYPE_CHECKING, Any, TypedDict
from urllib.parse import quote

from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db.models import Prefetch, Q
from django.db.models.functions import Substr
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods, require_POST, require_safe
from django_htmx.middleware import HtmxDetails

from . import (
    allowlist,
    calls,
    control,
    db,
    files,
    live,
    notify,
    oauth,
    onetap,
    retention,
    rules,
    serverconfig,
    viewstore,
)
from .choices import CallDecision, CallStatus, ServerState, TargetKind, TokenRole
from .forms import (
    HistoryFilter,
    ImportForm,
    ReplyForm,
    ServerForm,
    TokenForm,
    arguments_from,
    schema_fields,
    servers_from_json,
)
from .models import (
    ApiToken,
    NotificationTarget,
    PermissionGrant,
    Server,
    SessionAllowance,
    Tool,
    ToolCall,
    View,
    mask_config,
    transport_of,
)
from .schemas import InputError, RulesEdit, ViewEdit

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations

PAGE_SIZE = 50
RESULT_HEAD = 8000  # characters of a result the history list loads (enough for small images)
TRY_WAIT = 10.0  # seconds the try-it form waits for a running call to end

# --- helpers ----------------------------------------------------------------------------------


def _get_server_or_404(name: str) -> Server:
    server = live.server_with_count(name)
    if server is None:
        raise Http404("server not found")
    return server


class HtmxRequest(HttpRequest):
    """A page request as django-htmx's middleware leaves it (django-htmx's documented type)."""

    htmx: HtmxDetails


class _WholePage(HtmxDetails):
    """`request.htmx` for a history-restore request: falsy, so the view renders the page."""

    def __bool__(self) -> bool:
        return False


def htmx_page(view):
    """For views that answer htmx with a fragment and everyone else with the page. htmx asks
    again for a page it has no copy of when going back (`HX-History-Restore-Request`): that
    gets the whole page. Every answer varies on `HX-Request`, so no cache hands a fragment to
    a full load."""

    @functools.wraps(view)
    def wrapped(request: HtmxRequest, *args, **kwargs) -> HttpResponse:
        if request.htmx and request.htmx.history_restore_request:
            request.htmx = _WholePage(request)
        response = view(request, *args, **kwargs)
        patch_vary_headers(response, ("HX-Request",))
        return response

    return wrapped


def _fragment(
    request: HtmxRequest,
    template: str,
    context: dict,
    *,
    oob: tuple[str, ...] = (),
    badge: bool = False,
    notes: bool = True,
) -> HttpResponse:
    """An htmx answer: the fragment, then out-of-band extras (other fragments, the badge, the
    messages of the action)."""
    html = render_to_string(template, context, request)
    for name in oob:
        html += render_to_string(name, {**context, "oob": True}, request)
    if badge:
        html += render_to_string("base.html#pending-badge", {"oob": True}, request)
    if notes:
        html += render_to_string("base.html#messages", {"oob": True}, request)
    response = HttpResponse(html)
    patch_vary_headers(response, ("HX-Request",))
    return response


def _back(request: HtmxRequest, default: str, *args) -> HttpResponse:
    """Redirect to the form's `next` when it is one of ours, else to `default`."""
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(target, {request.get_host()}, request.is_secure()):
        return redirect(target)
    return redirect(default, *args)


def _file_problems() -> list[tuple[str, str]]:
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


# --- servers ----------------------------------------------------------------------------------


@login_required
@require_safe
@htmx_page
def servers(request: HtmxRequest) -> HttpResponse:
    context: dict[str, Any] = {"servers": live.server_rows()}
    if request.htmx:
        return render(request, "mcpcore/server_list.html#server-rows", context)
    context.update(
        problems=_file_problems(),
        live_page="servers",
        storage=_storage(),
        example_installed=serverconfig.example_installed(),
        example_name=serverconfig.EXAMPLE_NAME,
        example_only=_example_only(context["servers"]),
        no_token=not ApiToken.objects.filter(revoked_at__isnull=True).exists(),
        connect_form=TokenForm(initial={"name": "my-agent"}),
    )
    return render(request, "mcpcore/server_list.html", context)


def _example_only(rows: list) -> bool:
    """The example server is the only server: the page says what to try with it."""
    if len(rows) != 1 or rows[0].name != serverconfig.EXAMPLE_NAME:
        return False
    return rows[0].config.get("command") == str(serverconfig.example_command())


def _storage() -> dict:
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


def _trust_context(server: Server) -> dict:
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


def _tool_card(tool, change: dict | None, try_form_url: str, open_try: bool) -> dict:
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
        "change": change,
        "open": open_try,
        "fields": schema_fields(tool.input_schema) if open_try else None,
        "try_get": f"{try_form_url}?tool={quoted}",
        "try_href": f"?try={quoted}#tool-{tool.position}",
    }


@login_required
@require_safe
@htmx_page
def server_detail(request: HtmxRequest, name: str) -> HttpResponse:
    server = _get_server_or_404(name)
    if request.htmx:
        return render(
            request,
            "mcpcore/server_detail.html#server-status",
            {"server": server, "page_sig": request.GET.get("sig", "")},
        )
    context = _trust_context(server)
    # A try-it form is built when opened (htmx), or for the one tool asked for without JS:
    # a thousand forms made the page slow to render.
    try_tool = request.GET.get("try")
    try_form_url = reverse("tool-try-form", args=[server.name])
    changes = _definition_changes([row["tool"] for row in context["changed_tools"]])
    context.update(
        tools=[
            _tool_card(t, changes.get(t.registered_name), try_form_url, t.tool_name == try_tool)
            for t in (row["tool"] for row in context["trust_tools"])
        ],
        server_rules=rules.RuleSet(files.current_rules()[0]).for_prefix(server.prefix),
        try_url=reverse("tool-try", args=[server.name]),
        config=mask_config(server.config),
        config_json=pretty(mask_config(server.config)),
        page_sig=server.signature,
        live_page=f"server:{server.name}",
        problems=_file_problems(),
    )
    return render(request, "mcpcore/server_detail.html", context)


@login_required
@require_POST
def server_trust(request: HtmxRequest, name: str) -> HttpResponse:
    """Save the trust editor: replace-by-prefix of the server's lines in allow_tool (SPEC 2.2)."""
    server = _get_server_or_404(name)
    if request.POST.get("all"):
        entries = [f"{server.prefix}*"]
    else:
        known = set(server.tools.values_list("registered_name", flat=True))
        entries = sorted({n for n in request.POST.getlist("tools") if n in known})
    try:
        # Save is a person trusting what the page shows: changed definitions are pinned again.
        now = files.replace_allow_prefix(server.prefix, entries, repin=True)
    except files.ConfigFileError as exc:
        note, ok = f"{exc} (fix the file first; it was not changed)", False
    else:
        note, ok = _trust_message(server.name, server.prefix, now), True
    if request.htmx:
        # Said beside the Save button: the page's message area may be scrolled out of sight.
        context = {**_trust_context(server), "trust_note": note, "trust_ok": ok}
        return render(request, "mcpcore/server_detail.html#trust-editor", context)
    (messages.success if ok else messages.error)(request, note)
    return redirect("server-detail", server.name)


def _trust_message(name: str, prefix: str, entries: list[str]) -> str:
    if entries == [f"{prefix}*"]:
        return f"Saved: every tool of {name} runs without asking."
    if not entries:
        return f"Saved: every tool of {name} waits for a person."
    n = len(entries)
    return f"Saved: {n} tool{'s' if n != 1 else ''} of {name} run{'s' if n == 1 else ''} without asking."


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def server_add(request: HtmxRequest) -> HttpResponse:
    form = ServerForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        name = form.cleaned_data["name"]
        try:
            serverconfig.save(name, form.config, creating=True)
        except (files.ConfigFileError, serverconfig.ServerConfigError) as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"Added {name}; it is connecting.")
            return redirect("servers")
    return render(
        request,
        "mcpcore/server_form.html",
        {"form": form, "creating": True},
        status=400 if form.errors else 200,
    )


@login_required
@require_POST
def server_example(request: HttpRequest) -> HttpResponse:
    """One click on an empty Servers page: the example server, installed with the console."""
    if not serverconfig.example_installed():
        messages.error(
            request,
            f"The example server is not installed ({serverconfig.example_command()} is missing): "
            "run make setup, which installs requirements.txt.",
        )
        return redirect("servers")
    try:
        serverconfig.add_example()
    except files.ConfigFileError as exc:
        messages.error(request, f"{exc}.")
    else:
        messages.success(request, f"Added the example server {serverconfig.EXAMPLE_NAME}.")
    return redirect("servers")


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def server_edit(request: HtmxRequest, name: str) -> HttpResponse:
    server = _get_server_or_404(name)
    initial = ServerForm.initial_from(server.name, server.config)
    form = ServerForm(request.POST if request.method == "POST" else None, initial=initial, editing=True)
    if request.method == "POST" and form.is_valid():
        try:
            serverconfig.save(server.name, form.config, creating=False)
        except (files.ConfigFileError, serverconfig.ServerConfigError) as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"Saved {server.name}.")
            return redirect("server-detail", server.name)
    return render(
        request,
        "mcpcore/server_form.html",
        {"form": form, "server": server, "creating": False},
        status=400 if form.errors else 200,
    )


@login_required
@require_POST
def server_remove(request: HtmxRequest, name: str) -> HttpResponse:
    server = _get_server_or_404(name)
    try:
        found = serverconfig.remove(server.name)
    except files.ConfigFileError as exc:
        messages.error(request, f"{exc} (fix the file first; it was not changed)")
        return redirect("server-detail", server.name)
    if found:
        messages.success(request, f"Removed {server.name}.")
    return redirect("servers")


@login_required
@require_POST
def server_enable(request: HtmxRequest, name: str, enabled: bool) -> HttpResponse:
    server = _get_server_or_404(name)

    try:
        serverconfig.set_enabled(server.name, enabled)
    except files.ConfigFileError as exc:
        messages.error(request, f"{exc} (fix the file first; it was not changed)")
    else:
        messages.success(request, f"{'Enabled' if enabled else 'Disabled'} {server.name}.")
    if request.htmx:
        return _fragment(request, "mcpcore/server_list.html#server-rows", {"servers": live.server_rows()})
    return _back(request, "servers")


def _reconnect_message(outcome: dict[str, str]) -> str:
    return (
        "Reconnect: " + "; ".join(f"{n}: {o}" for n, o in outcome.items())
        if outcome
        else "Reconnect: there are no servers."
    )


@login_required
@require_POST
def server_reconnect(request: HtmxRequest, name: str | None = None) -> HttpResponse:
    """Reconnect one server, or all (waits for the outcome, bounded by the connect timeout)."""
    if name is not None:
        name = _get_server_or_404(name).name
    outcome = async_to_sync(control.reconnect)(name)
    if outcome is None:
        raise Http404("server not found")
    ok = all(o == ServerState.CONNECTED for o in outcome.values())
    (messages.success if ok else messages.warning)(request, _reconnect_message(outcome))
    if request.htmx:
        return _fragment(request, "mcpcore/server_list.html#server-rows", {"servers": live.server_rows()})
    return _back(request, "servers")


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def server_import(request: HtmxRequest) -> HttpResponse:
    """Upload or paste, see what will be added, then confirm (the preview carries the JSON)."""
    if request.method == "POST" and request.POST.get("confirm"):
        try:
            servers = servers_from_json(request.POST.get("payload", ""))
            count = serverconfig.import_all(servers)
        except files.ConfigFileError as exc:
            messages.error(request, f"{exc} (fix the file first; it was not changed)")
        except ValidationError as exc:  # a payload edited between preview and confirm
            messages.error(request, "; ".join(exc.messages))
        else:
            messages.success(request, f"Imported {count} server{'s' if count != 1 else ''}.")
            return redirect("servers")
        return redirect("server-import")
    form = ImportForm(request.POST if request.method == "POST" else None, request.FILES or None)
    preview = None
    if request.method == "POST" and form.is_valid():
        existing = set(Server.objects.values_list("name", flat=True))
        preview = {
            "rows": [_preview_row(n, c, n in existing) for n, c in sorted(form.servers.items())],
            "payload": json.dumps({"servers": form.servers}),
        }
    response = render(
        request,
        "mcpcore/server_import.html",
        {"form": form, "preview": preview},
        status=400 if form.errors else 200,
    )
    response["Cache-Control"] = "no-store"  # the preview carries the file's secrets
    return response


def _preview_row(name: str, config: dict, exists: bool) -> dict:
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


# --- try a tool -------------------------------------------------------------------------------


@login_required
@require_safe
@htmx_page
def tool_try_form(request: HtmxRequest, name: str) -> HttpResponse:
    """A tool's try-it form (htmx, when its section is opened), or the server page with that
    form open."""
    server = _get_server_or_404(name)
    tool = get_object_or_404(Tool, server=server, tool_name=request.GET.get("tool", ""))
    if not request.htmx:
        return redirect(f"{reverse('server-detail', args=[server.name])}?try={quote(tool.tool_name)}")
    row = {"tool": tool, "fields": schema_fields(tool.input_schema)}
    return render(
        request,
        "mcpcore/server_detail.html#try-form",
        {"server": server, "tool": tool, "row": row, "try_url": reverse("tool-try", args=[server.name])},
    )


@login_required
@require_POST
def tool_try(request: HtmxRequest, name: str) -> HttpResponse:
    """Run a tool through the gate like any agent's call (mode `confirm`), and show the result,
    or the pending confirmation it became."""
    server = _get_server_or_404(name)
    tool = get_object_or_404(Tool, server=server, tool_name=request.POST.get("tool", ""))
    session_id = f"console-{request.user.get_username()}"[:200]
    error, call, local = "", None, calls.local_supervisor(request)
    try:
        args = arguments_from(tool.input_schema, request.POST)
        call = calls.create(
            None, request.user.get_username(), tool.registered_name, args, session_id, "confirm", local=local
        )
    except ValueError as exc:
        error = str(exc)
    except calls.CallError as exc:
        error = exc.message
    if call is not None:
        call = async_to_sync(_submit_and_wait)(call, local)
    # No call: `error` says why.
    if request.htmx:
        if call is None:
            return _fragment(
                request, "mcpcore/server_detail.html#try-error", {"error": error, "slot": tool.position}
            )
        return _fragment(request, "mcpcore/call_detail.html#call-result", _result_context(call), badge=True)
    if call is None:
        messages.error(request, f"{tool.tool_name}: {error}")
        return redirect("server-detail", server.name)
    return redirect("call-detail", call.id)


async def _submit_and_wait(call: ToolCall, local: calls.LocalSupervisor | None) -> ToolCall:
    """The call path's last two steps for try-it: a running call is shown once it ended (or
    as it is after TRY_WAIT), a pending one at once."""
    await calls.submit(call, local)
    return await calls.wait(call, TRY_WAIT if call.status == CallStatus.RUNNING else 0, local=local)


# --- pending confirmations --------------------------------------------------------------------


@login_required
@require_safe
@htmx_page
def pending(request: HtmxRequest) -> HttpResponse:
    context = live.pending_context(live.pending_calls())
    if request.htmx:
        return _fragment(
            request,
            "mcpcore/pending_list.html#pending-list",
            context,
            notes=False,
            oob=("base.html#pending-badge",),
        )
    context.update(allowances=live.allowances(), live_page="pending")
    return render(request, "mcpcore/pending_list.html", context)


@login_required
@require_POST
def pending_reply(request: HtmxRequest, confirm_id: str) -> HttpResponse:
    """Approve (once, remember, for the session) or deny a pending confirmation (SPEC 5)."""
    form = ReplyForm(request.POST)
    if not form.is_valid():
        messages.error(request, "That reply was not understood.")
    else:
        body = form.body()
        try:
            call = async_to_sync(calls.respond)(
                form.cleaned_data["session_id"],
                confirm_id,
                body,
                request.user.get_username(),
                local=calls.local_supervisor(request),
            )
        except calls.CallError as exc:
            messages.error(request, f"Not applied: {exc.message}.")
        else:
            messages.success(request, _reply_message(call))
    if request.htmx:
        context = {**live.pending_context(live.pending_calls()), "allowances": live.allowances()}
        return _fragment(
            request,
            "mcpcore/pending_list.html#pending-list",
            context,
            oob=("base.html#pending-badge", "mcpcore/pending_list.html#allowances"),
        )
    return _back(request, "pending")


def _reply_message(call: ToolCall) -> str:
    replies: dict[str, str] = {
        CallDecision.APPROVE: "Approved",
        CallDecision.REMEMBER: "Approved and remembered",
        CallDecision.SESSION: f"Approved for session {call.session_id}",
        CallDecision.GRANT: "Approved for 1 hour",
        CallDecision.DENY: "Denied",
    }
    return f"{replies.get(call.decision, call.decision)}: {call.tool_name}."


@login_required
@require_POST
def allowance_revoke(request: HtmxRequest, pk: int) -> HttpResponse:
    row = get_object_or_404(SessionAllowance, pk=pk)
    if SessionAllowance.objects.filter(pk=row.pk, revoked_at__isnull=True).update(revoked_at=timezone.now()):
        messages.success(request, f"Revoked the allowance of session {row.session_id}.")
    if request.htmx:
        return _fragment(request, "mcpcore/pending_list.html#allowances", {"allowances": live.allowances()})
    return redirect("pending")


# --- history ----------------------------------------------------------------------------------


def _cursor(raw: str | None) -> tuple[datetime.datetime, uuid.UUID] | None:
    """A page cursor `<created_at ISO>~<call id>`; anything else is no cursor."""
    if not raw:
        return None
    stamp, _, cid = raw.partition("~")
    try:
        when = datetime.datetime.fromisoformat(stamp)
        return (when if when.tzinfo else when.replace(tzinfo=datetime.UTC)), uuid.UUID(cid)
    except ValueError:
        return None


def _cursor_of(call: ToolCall) -> str:
    stamp = call.created_at.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return f"{stamp}~{call.id}"


def _history_page(rows, before, after, parts=None) -> dict:
    """Keyset pages, newest first, over (created_at, id): cheap at any depth, no COUNT(*).
    `parts`, when given, are querysets whose rows together are the page's (see `_tool_parts`):
    each is read up to a page and the pages merged."""
    querysets = parts if parts is not None else [rows]
    if after is not None:
        when, cid = after
        found = _merged(
            [
                q.filter(created_at__gte=when).filter(Q(created_at__gt=when) | Q(id__gt=cid))
                for q in querysets
            ],
            ("created_at", "id"),
            rows,
        )
        newer = len(found) > PAGE_SIZE
        page = found[:PAGE_SIZE][::-1]
        older = True
    else:
        if before is not None:
            when, cid = before
            querysets = [
                q.filter(created_at__lte=when).filter(Q(created_at__lt=when) | Q(id__lt=cid))
                for q in querysets
            ]
        found = _merged(querysets, ("-created_at", "-id"), rows)
        older = len(found) > PAGE_SIZE
        page = found[:PAGE_SIZE]
        newer = before is not None
    return {
        "calls": [_history_row(c) for c in page],
        "older": _cursor_of(page[-1]) if older and page else None,
        "newer": _cursor_of(page[0]) if newer and page else None,
    }


def _merged(querysets: list, order: tuple[str, str], rows) -> list:
    """The first PAGE_SIZE + 1 rows, in `order`, of the union of `querysets`. Of several, only
    the keys are read from each, then the rows of the merged page, once each, from `rows`."""
    if len(querysets) == 1:
        return list(querysets[0].order_by(*order)[: PAGE_SIZE + 1])
    newest_first = order[0].startswith("-")
    keys = sorted(
        (
            key
            for q in querysets
            for key in q.order_by(*order).values_list("created_at", "id")[: PAGE_SIZE + 1]
        ),
        reverse=newest_first,
    )[: PAGE_SIZE + 1]
    found = list(rows.filter(id__in=[cid for _, cid in keys])) if keys else []
    found.sort(key=lambda c: (c.created_at, c.id), reverse=newest_first)
    return found


# Above this many tool names matching a tool filter, the history is read in time order with
# the filter applied row by row (so many names match that matching rows are near).
TOOL_PARTS = 200


def _tool_parts(rows, text: str) -> list | None:
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
    from django.db import connection

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
        "result": result_view(head, complete),
        "complete": complete,
        "took": took(call.duration),
    }


def took(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


@login_required
@require_safe
@htmx_page
def history(request: HtmxRequest) -> HttpResponse:
    form = HistoryFilter(request.GET)
    parts = None
    rows = ToolCall.objects.defer("result", "raw_result").annotate(
        result_head=Substr("result", 1, RESULT_HEAD)
    )
    if form.is_valid():
        f = form.cleaned_data
        if f["server"]:
            rows = rows.filter(server_name=f["server"])
        if f["status"]:
            rows = rows.filter(status=f["status"])
        if f["session"]:
            rows = rows.filter(session_id=f["session"].strip())
        if f["tool"].strip():
            parts = _tool_parts(rows, f["tool"].strip())
            if parts is None:
                rows = rows.filter(tool_name__icontains=f["tool"].strip())
    context = _history_page(
        rows, _cursor(request.GET.get("before")), _cursor(request.GET.get("after")), parts
    )
    context["filtered"] = any(request.GET.get(k) for k in ("server", "tool", "status", "session"))
    if request.htmx:
        return render(request, "mcpcore/call_list.html#call-table", context)
    context.update(form=form, server_names=list(Server.objects.values_list("name", flat=True)))
    return render(request, "mcpcore/call_list.html", context)


def _result_context(call: ToolCall) -> dict:
    return {
        "call": call,
        "result": result_view(call.result) if call.ended else None,
        "took": took(call.duration),
    }


@login_required
@require_safe
@htmx_page
def call_detail(request: HtmxRequest, call_id: uuid.UUID) -> HttpResponse:
    call = get_object_or_404(ToolCall, id=call_id)
    context = _result_context(call)
    if request.htmx:
        return render(request, "mcpcore/call_detail.html#call-result", context)
    raw = call.raw_result if call.raw_result and call.raw_result != call.result else ""
    context.update(
        args=pretty(call.arguments),
        raw=result_view(raw) if raw else None,
        raw_size=len(raw.encode()) if raw else 0,
    )
    return render(request, "mcpcore/call_detail.html", context)


# --- API tokens -------------------------------------------------------------------------------


def _token_rows() -> list[ApiToken]:
    rows = list(ApiToken.objects.prefetch_related(_active_grants(), "views"))
    now = timezone.now()
    for row in rows:
        row.used_ago = live.ago(row.last_used_at) or "never"
        for grant in row.grants:
            # Time-boxed grants (SPEC 17.3) say how long they have left; the page counts down.
            left = (grant.expires_at - now).total_seconds() if grant.expires_at else None
            grant.left_text = live.clock(left) if left is not None else ""
    return rows


def _tokens_page(request: HtmxRequest, form: TokenForm, new: dict | None, status: int = 200) -> HttpResponse:
    context = {"tokens": _token_rows(), "form": form, "new": new, "hooks_settings": claude_code_settings()}
    response = render(request, "mcpcore/token_list.html", context, status=status)
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_safe
@htmx_page
def tokens(request: HtmxRequest) -> HttpResponse:
    if request.htmx:
        return render(request, "mcpcore/token_list.html#token-list", {"tokens": _token_rows()})
    return _tokens_page(request, TokenForm(), None)


@login_required
@require_POST
def token_create(request: HtmxRequest) -> HttpResponse:
    """The clear token is shown on this response only; the database keeps its hash."""
    form = TokenForm(request.POST)
    if not form.is_valid():
        return _tokens_page(request, form, None, status=400)
    data = form.cleaned_data
    views = list(data["views"]) or None
    row, token = ApiToken.issue(
        data["name"].strip(), data["may_auto"], data["role"] or TokenRole.AGENT, views
    )
    config = client_config(token, [v.name for v in views] if views else None)
    return _tokens_page(request, TokenForm(), {"row": row, "token": token, "config": config})


@login_required
@require_POST
def token_revoke(request: HtmxRequest, pk: int) -> HttpResponse:
    row = get_object_or_404(ApiToken, pk=pk)
    revoked, ended = calls.revoke_token(row.pk)
    for call_id in ended:
        # Open Pending pages drop them live; anyone waiting on them wakes up.
        async_to_sync(calls.announce)(call_id)
    if revoked and not ended:
        # Its session allowances ended too: open Pending pages drop them.
        control.send_group(control.PENDING, {"type": "pending.changed", "call_id": ""})
    if revoked:
        extra = f" and cancelled its {len(ended)} pending call(s)" if ended else ""
        messages.success(request, f"Revoked token {row.name}{extra}.")
    if request.htmx:
        return _fragment(request, "mcpcore/token_list.html#token-list", {"tokens": _token_rows()})
    return redirect("tokens")


# --- permission grants and client configuration (SPEC 13.4, 13.5) ------------------------------

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


@login_required
@require_POST
def grant_revoke(request: HtmxRequest, pk: int) -> HttpResponse:
    """End a grant ("Approve and remember" of a permission prompt, or a time-boxed grant): the
    token's next call of that tool waits for a person again."""
    grant = get_object_or_404(PermissionGrant.objects.select_related("token"), pk=pk)
    if calls.revoke_permission(grant.pk):
        messages.success(request, f"{grant.token.name} must ask again for {grant.tool_name}.")
    if request.htmx:
        return _fragment(request, "mcpcore/token_list.html#token-list", {"tokens": _token_rows()})
    return redirect("tokens")


# --- trust that follows the tool (SPEC 14) ----------------------------------------------------


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


def _definition_changes(tools: list) -> dict[str, dict]:
    """For each changed tool: its pin's time and the description and schema diffs."""
    from .models import ToolPin

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


def _rules_lines(text: str) -> list[str]:
    text = text.replace("\r\n", "\n").rstrip("\n")
    return text.split("\n") if text.strip() else []


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def rules_page(request: HtmxRequest) -> HttpResponse:
    """The argument rules (SPEC 14.2): those in force, the file's problem, and an editor that
    replaces the file (a bad line is refused, nothing written)."""
    save_error, status = "", 200
    if request.method == "POST":
        text = request.POST.get("rules", "")
        try:
            saved = files.write_rules(RulesEdit.check({"rules": _rules_lines(text)}).rules)
        except (rules.RuleError, files.ConfigFileError, InputError) as exc:
            save_error, status = str(exc), 400
        else:
            messages.success(request, f"Saved {len(saved)} rule{'s' if len(saved) != 1 else ''}.")
            return redirect("rules")
    else:
        try:
            text = files.read_rules_text()
        except files.ConfigFileError:
            text = ""
    in_force, problem = files.current_rules()
    context = {"rules": in_force, "problem": problem, "text": text, "save_error": save_error}
    return render(request, "mcpcore/rules.html", context, status=status)


# --- views (SPEC 19) ----------------------------------------------------------------------------


def _pattern_lines(text: str) -> list[str]:
    return [line.strip() for line in text.replace("\r\n", "\n").split("\n") if line.strip()]


def _view_rows() -> list[dict]:
    """Every view as `GET /v1/views` lists it, plus the tokens limited to it."""
    tokens: dict[str, list[str]] = {}
    for view, token in ApiToken.views.through.objects.filter(apitoken__revoked_at__isnull=True).values_list(
        "view__name", "apitoken__name"
    ):
        tokens.setdefault(view, []).append(token)
    base = settings.AGENVOY_PUBLIC_URL
    return [
        {**row, "url": f"{base}/mcp/v/{row['name']}", "token_names": sorted(tokens.get(row["name"], []))}
        for row in viewstore.listing()
    ]


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def views_page(request: HtmxRequest) -> HttpResponse:
    """Views (SPEC 19): each with its patterns and the tools in it now; a form that creates
    or replaces one (`?edit=<name>` fills it with that view). A bad name or pattern is
    refused with the API's message, nothing saved."""
    save_error, status = "", 200
    if request.method == "POST":
        form = {k: request.POST.get(k, "") for k in ("name", "description", "include", "exclude")}
        try:
            edit = ViewEdit.check(
                {
                    "name": form["name"],
                    "description": form["description"],
                    "include": _pattern_lines(form["include"]),
                    "exclude": _pattern_lines(form["exclude"]),
                }
            )
        except InputError as exc:
            save_error, status = exc.message, 400
        else:
            viewstore.save(edit.name, edit.description, edit.include, edit.exclude)
            messages.success(request, f"Saved view {edit.name}.")
            return redirect(f"{reverse('views')}#view-{edit.name}")
    else:
        editing = View.objects.filter(name=request.GET.get("edit", "")).first()
        form = {
            "name": editing.name if editing else "",
            "description": editing.description if editing else "",
            "include": "\n".join(editing.include) if editing else "",
            "exclude": "\n".join(editing.exclude) if editing else "",
        }
    context = {"views": _view_rows(), "form": form, "save_error": save_error, "editing": bool(form["name"])}
    return render(request, "mcpcore/views.html", context, status=status)


@login_required
@require_POST
def view_remove(request: HtmxRequest, name: str) -> HttpResponse:
    if viewstore.remove(name):
        messages.success(request, f"Removed view {name}; the tokens limited to it no longer see its tools.")
    return redirect("views")


# --- approve from anywhere (SPEC 15) ----------------------------------------------------------


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


def _confirmation_context(call: ToolCall) -> dict:
    pending = call.status == CallStatus.PENDING
    return {
        "call": call,
        "item": live.pending_context([call])["pending_items"][0] if pending else None,
        "ending": "" if pending else _ending(call),
        "detail": True,
    }


@login_required
@require_safe
@htmx_page
def pending_detail(request: HtmxRequest, confirm_id: uuid.UUID) -> HttpResponse:
    """One confirmation's own page: the inbox's buttons while it waits, how it ended after.
    Every link the console sends (webhooks, ntfy, browser notifications) points here."""
    call = get_object_or_404(ToolCall, confirm_id=confirm_id)
    context = _confirmation_context(call)
    if request.htmx:
        return render(request, "mcpcore/pending_detail.html#pending-detail", context)
    return render(request, "mcpcore/pending_detail.html", context)


@login_required
@require_safe
def pending_feed(request: HtmxRequest) -> JsonResponse:
    """What the page's script needs to raise browser notifications for new confirmations."""
    items = [
        {
            "id": str(c.confirm_id),
            "tool": notify.short_tool(c.tool_name, c.server_name),
            "server": c.server_name,
            "url": reverse("pending-detail", args=[c.confirm_id]),
        }
        for c in live.pending_calls()[: live.PENDING_SHOWN]
    ]
    response = JsonResponse({"pending": items})
    response["Cache-Control"] = "no-store"
    return response


DELIVERIES_SHOWN = 20  # per target on the Notifications page
_check_url = URLValidator(schemes=["http", "https"])


def _targets() -> list[NotificationTarget]:
    rows = list(NotificationTarget.objects.all())
    for row in rows:
        row.recent = list(row.deliveries.order_by("-created_at", "-id")[:DELIVERIES_SHOWN])
    return rows


def _targets_context() -> dict:
    targets = _targets()
    shown = ";".join(
        f"{t.pk}:" + ",".join(f"{d.pk}.{d.status}.{d.attempts}" for d in t.recent) for t in targets
    )
    return {"targets": targets, "targets_sig": hashlib.sha1(shown.encode()).hexdigest()[:16]}


def _notifications_page(
    request: HtmxRequest, form: dict, new: dict | None, status: int = 200
) -> HttpResponse:
    context = {
        **_targets_context(),
        "form": form,
        "new": new,
        "public_url": settings.AGENVOY_PUBLIC_URL,
        "target_kinds": list(TargetKind),
    }
    response = render(request, "mcpcore/notification_list.html", context, status=status)
    response["Cache-Control"] = "no-store"  # a new target's secret is on it once
    return response


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
@htmx_page
def notifications(request: HtmxRequest) -> HttpResponse:
    """Notification targets: add one (a webhook's secret is shown on this answer only), list
    them with their recent deliveries."""
    if request.method != "POST":
        if request.htmx:
            return render(request, "mcpcore/notification_list.html#notification-targets", _targets_context())
        return _notifications_page(request, {"kind": TargetKind.WEBHOOK, "url": "", "error": ""}, None)
    kind = request.POST.get("kind", "")
    url = request.POST.get("url", "").strip()
    form = {"kind": kind, "url": url, "error": ""}
    if kind not in TargetKind.values:
        form["error"] = "Choose a kind: webhook or ntfy."
    else:
        try:
            _check_url(url)
        except ValidationError:
            form["error"] = "Enter an http:// or https:// URL."
        if len(url) > 2000:
            form["error"] = "That URL is too long (at most 2,000 characters)."
    if form["error"]:
        return _notifications_page(request, form, None, status=400)
    target, secret = notify.add_target(kind, url, request.user.get_username())
    blank = {"kind": kind, "url": "", "error": ""}
    return _notifications_page(request, blank, {"target": target, "secret": secret})


@login_required
@require_POST
def notification_test(request: HtmxRequest, pk: int) -> HttpResponse:
    target = get_object_or_404(NotificationTarget, pk=pk)
    notify.queue_test(target)
    messages.success(request, f"Test queued for {target.url}: its delivery appears below once sent.")
    return redirect("notifications")


@login_required
@require_POST
def notification_remove(request: HtmxRequest, pk: int) -> HttpResponse:
    target = get_object_or_404(NotificationTarget, pk=pk)
    target.delete()
    messages.success(request, f"Removed {target.kind} target {target.url}.")
    return redirect("notifications")


# --- one tap on the phone (SPEC 17.2) and what MCP clients probe (17.4) -------------------------

LINK_GONE = "this link is no longer valid"


def _plain(text: str, status: int) -> HttpResponse:
    """A text/plain answer for a one-tap link. Marked as logged, so Django's request logger never
    writes the path (which holds the action token) for a 4xx."""
    response = HttpResponse(text, status=status, content_type="text/plain; charset=utf-8")
    response._has_been_logged = True  # type: ignore[attr-defined]  # Django's own flag, not in its stubs
    return _private(response)


def _private(response: HttpResponse) -> HttpResponse:
    # The token is the credential: no cache keeps the page, no Referer carries the link on.
    response["Cache-Control"] = "no-store"
    response["Referrer-Policy"] = "no-referrer"
    response["X-Robots-Tag"] = "noindex"
    return response


def _one_tap_call(token: str) -> tuple["onetap.Action", ToolCall, NotificationTarget] | None:
    """The pending confirmation and live target a valid token names, or None (410)."""
    action = onetap.read(settings.SECRET_KEY, token)
    if action is None:
        return None
    call = ToolCall.objects.filter(confirm_id=action.confirm_id, status=CallStatus.PENDING).first()
    target = NotificationTarget.objects.filter(pk=action.target_id).first()
    if call is None or target is None or (call.expires_at and call.expires_at <= timezone.now()):
        return None
    return action, call, target


@csrf_exempt
@require_http_methods(["GET", "HEAD", "POST"])
def one_tap(request: HttpRequest, token: str) -> HttpResponse:
    """`/a/<action token>`: POST decides (no session, no CSRF: the token is the credential) and
    answers `approved` or `denied`; GET shows the call and one button that posts here, and
    decides nothing (link previews fetch links). 410 once the confirmation has ended, and for
    any token the console did not make."""
    found = _one_tap_call(token)
    if found is None:
        return _plain(LINK_GONE, 410)
    action, call, target = found
    approve = action.decision == onetap.APPROVE
    if request.method != "POST":
        context = {"call": call, "approve": approve, "args": pretty(call.arguments), "target": target}
        response = render(request, "mcpcore/one_tap.html", context)
        response._has_been_logged = True  # type: ignore[attr-defined]  # as in _plain
        return _private(response)
    who = f"{target.name} (one-tap)"
    try:
        async_to_sync(calls.respond)(call.session_id, str(call.confirm_id), {"approve": approve}, who)
    except calls.CallError:
        return _plain(LINK_GONE, 410)
    return _plain("approved" if approve else "denied", 200)


@csrf_exempt
def well_known_not_found(request: HttpRequest) -> JsonResponse:
    """OAuth and OpenID discovery documents: the console has none (its MCP endpoints take API
    tokens), and clients that probe (with any method) need JSON, not the sign-in page."""
    return JsonResponse({"error": "not found"}, status=404)


# --- OAuth upstream (SPEC 16) -----------------------------------------------------------------


@login_required
@require_POST
async def server_authorize(request: HtmxRequest, name: str) -> HttpResponse:
    """`Authorize`: start the server's authorization-code flow in the worker that holds it and
    send the browser to the authorization server (SPEC 16.2). An async view: the request waits
    for the holder's answer on the event loop, as `POST /v1/mcp/authorize` does, with no
    thread held for it and no hop through `async_to_sync`."""
    problem = await db.run(oauth.authorize_problem, name)
    if problem is not None and problem[1] == 404:
        raise Http404("server not found")
    url = ""
    if problem is not None:
        messages.error(request, problem[0])
    else:
        user = await request.auser()
        try:
            url = await control.authorize(name, user.get_username())
        except control.AuthorizeRefused as exc:
            messages.error(request, str(exc))
    return _go(request, url or reverse("server-detail", args=[name]))


def _go(request: HtmxRequest, url: str) -> HttpResponse:
    """Send the browser to `url`: a redirect, or for htmx (the buttons of rows and panels the
    live socket re-rendered, which carry the CSRF token in the body's headers) `HX-Redirect`."""
    if request.htmx:
        response = HttpResponse(status=204)
        response["HX-Redirect"] = url
        return response
    return redirect(url)


@login_required
@require_POST
def server_forget(request: HtmxRequest, name: str) -> HttpResponse:
    """`Forget authorization`: delete the stored tokens; the server disconnects and needs
    authorization again (SPEC 16.2)."""
    server = _get_server_or_404(name)
    oauth.forget(server.name)
    async_to_sync(control.reconnect)(server.name)
    messages.success(request, f"Forgot the authorization of {server.name}.")
    return _go(request, reverse("server-detail", args=[server.name]))


@login_required
@require_safe
def oauth_callback(request: HtmxRequest) -> HttpResponse:
    """The redirect URI (`<AGENVOY_PUBLIC_URL>/oauth/callback`, SPEC 16.2), on any web process:
    the code (or the authorization server's error) goes into the flow's row and the worker
    holding the server is woken; the browser goes to the server page."""
    flow = oauth.callback(
        request.GET.get("state", ""),
        request.GET.get("code", ""),
        request.GET.get("error", ""),
        request.user.get_username(),
        request.GET.get("iss", ""),
    )
    if flow is None:
        return render(request, "mcpcore/oauth_failed.html", {"message": oauth.UNKNOWN_STATE}, status=400)
    control.flow_callback(str(flow.id))
    if flow.error:
        messages.error(request, flow.error)
    return redirect("server-detail", flow.server_name)
