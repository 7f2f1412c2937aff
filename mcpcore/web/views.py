"""The browser door's request handling: one function view a page or action, in the order of
the navigation. What a page shows (formatting, the rows and context it renders) is in
`display.py`.

Pages and actions need a signed-in person, except the one-tap links (their token is the
credential, SPEC 17.2) and the `/.well-known/` answers MCP clients probe (17.4). Actions are
POST only and CSRF-checked. Writes go through the same module functions as `/v1` (files,
calls, control), never around them. A view asked by htmx answers with its fragment (plus
out-of-band messages and badge after an action); without JavaScript the same URLs answer with
whole pages and redirects.
"""

import functools
import json
import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.contrib.auth.tokens import default_token_generator
from django.contrib.auth.views import PasswordResetConfirmView
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models.functions import Substr
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.http.response import HttpResponseBase
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse, reverse_lazy
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.utils.encoding import force_bytes
from django.utils.http import url_has_allowed_host_and_scheme, urlsafe_base64_encode
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods, require_POST, require_safe
from django_htmx.http import HttpResponseClientRedirect
from django_htmx.middleware import HtmxDetails

from .. import (
    audit,
    bearer,
    calls,
    control,
    db,
    elicitation,
    files,
    onetap,
    rules,
    serverconfig,
    toolviewstore,
)
from ..calls import notify, people, questions, routing
from ..choices import CallDecision, CallStatus, PersonRole, QuestionMode, ServerState, TargetKind, TokenRole
from ..models import (
    ApiToken,
    AppClient,
    AppGrant,
    AuditEntry,
    Group,
    NotificationTarget,
    PermissionGrant,
    Question,
    Server,
    SessionAllowance,
    Tool,
    ToolCall,
    View,
    mask_config,
)
from ..oauth import clients, grants, upstream
from ..schemas import Decide, InputError, RulesEdit, ViewEdit
from . import display, live, signin
from .forms import (
    AuditFilter,
    HistoryFilter,
    ImportForm,
    ReplyForm,
    ServerForm,
    TokenForm,
    arguments_from,
    schema_fields,
    servers_from_json,
)

if TYPE_CHECKING:
    pass

from allauth.mfa.models import Authenticator
from allauth.usersessions.adapter import get_adapter
from allauth.usersessions.models import UserSession

from .display import (
    RESULT_HEAD,
    answer_message,
    audit_rows,
    check_url,
    claude_code_settings,
    client_config,
    confirmation_context,
    decided_message,
    definition_changes,
    example_only,
    extend_message,
    file_problems,
    history_page,
    keyset_page,
    kind_filter,
    page_cursor,
    pattern_lines,
    pretty,
    preview_row,
    question_context,
    question_rows,
    reconnect_message,
    reply_message,
    result_context,
    result_view,
    rule_examples,
    rules_lines,
    storage,
    target_token_error,
    targets_context,
    token_rows,
    tool_card,
    tool_parts,
    toolview_rows,
    trust_context,
    trust_message,
    uri_claims,
)

LINK_GONE = "this link is no longer valid"
TRY_WAIT = 10.0  # seconds the try-it form waits for a running call to end


# --- helpers --------------------------------------------------------------------------------------


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


def _go(request: HtmxRequest, url: str) -> HttpResponse:
    """Send the browser to `url`: a redirect, or for htmx (the buttons of rows and panels the
    live socket re-rendered, which carry the CSRF token in the body's headers) `HX-Redirect`,
    with no content (204) as there is nothing to swap."""
    if request.htmx:
        return HttpResponseClientRedirect(url, status=204)
    return redirect(url)


class _Refusal:
    """A refusal of the call path (`calls.CallError`) in a block, caught and kept for the page
    to say: the pages' one mapping of it, as `api_view` is `/v1`'s. True once one was caught;
    `message` is the call path's own text."""

    def __init__(self) -> None:
        self.caught = False
        self.message = ""
        self.status = 0

    def __bool__(self) -> bool:
        return self.caught

    def __enter__(self) -> "_Refusal":
        return self

    def __exit__(self, kind, exc, traceback) -> bool:
        if isinstance(exc, calls.CallError):
            self.caught, self.message, self.status = True, exc.message, exc.status
            return True
        return False


def _forbidden(request: HttpRequest, refused: _Refusal) -> HttpResponse | None:
    """A 403 of the call path (SPEC 24.1: `this confirmation is for <group>`) as the pages' 403
    page (23.1's), for the person who may not decide that item; None for any other refusal,
    which the page says in its note."""
    if refused.status != 403:
        return None
    context = {"message": refused.message}
    return HttpResponse(render_to_string("mcpcore/forbidden.html", context, request), status=403)


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


# --- servers (Servers: the list, a server's page, its trust, add, edit, import, try a tool, OAuth) ---


@login_required
@require_safe
@htmx_page
def servers(request: HtmxRequest) -> HttpResponse:
    context: dict[str, Any] = {"servers": live.server_rows()}
    if request.htmx:
        return render(request, "mcpcore/server_list.html#server-rows", context)
    context.update(
        problems=file_problems(),
        live_page="servers",
        storage=storage(),
        example_installed=serverconfig.example_installed(),
        example_name=serverconfig.EXAMPLE_NAME,
        example_only=example_only(context["servers"]),
        no_token=not ApiToken.objects.filter(revoked_at__isnull=True).exists(),
        connect_form=TokenForm(initial={"name": "my-agent"}),
    )
    return render(request, "mcpcore/server_list.html", context)


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
    context = trust_context(server)
    # A try-it form is built when opened (htmx), or for the one tool asked for without JS:
    # a thousand forms made the page slow to render.
    try_tool = request.GET.get("try")
    try_form_url = reverse("tool-try-form", args=[server.name])
    changes = definition_changes([row["tool"] for row in context["changed_tools"]])
    context.update(
        tools=[
            tool_card(t, changes.get(t.registered_name), try_form_url, t.tool_name == try_tool)
            for t in (row["tool"] for row in context["trust_tools"])
        ],
        server_rules=rules.RuleSet(files.current_rules()[0]).for_server(server.name),
        try_url=reverse("tool-try", args=[server.name]),
        config=mask_config(server.config),
        config_json=pretty(mask_config(server.config)),
        page_sig=server.signature,
        prompts=list(server.prompts.all()),
        **uri_claims(server),
        live_page=f"server:{server.name}",
        problems=file_problems(),
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
        now = files.replace_allow_prefix(server.prefix, entries, repin=True, by=audit.by(request))
    except files.ConfigFileError as exc:
        note, ok = f"{exc} (fix the file first; it was not changed)", False
    else:
        note, ok = trust_message(server.name, server.prefix, now), True
    if request.htmx:
        # Said beside the Save button: the page's message area may be scrolled out of sight.
        context = {**trust_context(server), "trust_note": note, "trust_ok": ok}
        return render(request, "mcpcore/server_detail.html#trust-editor", context)
    (messages.success if ok else messages.error)(request, note)
    return redirect("server-detail", server.name)


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def server_add(request: HtmxRequest) -> HttpResponse:
    form = ServerForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        name = form.cleaned_data["name"]
        try:
            serverconfig.save(name, form.config, creating=True, by=audit.by(request))
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
        serverconfig.add_example(audit.by(request))
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
            serverconfig.save(server.name, form.config, creating=False, by=audit.by(request))
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
        found = serverconfig.remove(server.name, audit.by(request))
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
        serverconfig.set_enabled(server.name, enabled, audit.by(request))
    except files.ConfigFileError as exc:
        messages.error(request, f"{exc} (fix the file first; it was not changed)")
    else:
        messages.success(request, f"{'Enabled' if enabled else 'Disabled'} {server.name}.")
    if request.htmx:
        return _fragment(request, "mcpcore/server_list.html#server-rows", {"servers": live.server_rows()})
    return _back(request, "servers")


@login_required
@require_POST
def server_reconnect(request: HtmxRequest, name: str | None = None) -> HttpResponse:
    """Reconnect one server, or all (waits for the outcome, bounded by the connect timeout)."""
    if name is not None:
        name = _get_server_or_404(name).name
    outcome = control.run_to_end(control.reconnect, name)
    if outcome is None:
        raise Http404("server not found")
    ok = all(o == ServerState.CONNECTED for o in outcome.values())
    (messages.success if ok else messages.warning)(request, reconnect_message(outcome))
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
            count = serverconfig.import_all(servers, audit.by(request))
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
            "rows": [preview_row(n, c, n in existing) for n, c in sorted(form.servers.items())],
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
    with _Refusal() as refused:
        try:
            args = arguments_from(tool.input_schema, request.POST)
            call = calls.create(
                None,
                request.user.get_username(),
                tool.registered_name,
                args,
                session_id,
                "confirm",
                local=local,
            )
        except ValueError as exc:
            error = str(exc)
    error = error or refused.message
    if call is not None:
        call = control.run_to_end(_submit_and_wait, call, local)
    # No call: `error` says why.
    if request.htmx:
        if call is None:
            return _fragment(
                request, "mcpcore/server_detail.html#try-error", {"error": error, "slot": tool.position}
            )
        return _fragment(request, "mcpcore/call_detail.html#call-result", result_context(call), badge=True)
    if call is None:
        messages.error(request, f"{tool.tool_name}: {error}")
        return redirect("server-detail", server.name)
    return redirect("call-detail", call.id)


async def _submit_and_wait(call: ToolCall, local: calls.LocalSupervisor | None) -> ToolCall:
    """The call path's last two steps for try-it: a running call is shown once it ended (or
    as it is after TRY_WAIT), a pending one at once."""
    await calls.submit(call, local)
    return await calls.wait(call, TRY_WAIT if call.status == CallStatus.RUNNING else 0, local=local)


@login_required
@require_POST
async def server_authorize(request: HtmxRequest, name: str) -> HttpResponse:
    """`Authorize`: start the server's authorization-code flow in the worker that holds it and
    send the browser to the authorization server (SPEC 16.2). An async view: the request waits
    for the holder's answer on the event loop, as `POST /v1/mcp/authorize` does, with no
    thread held for it and no hop through `async_to_sync`."""
    problem = await db.run(upstream.authorize_problem, name)
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


@login_required
@require_POST
def server_forget(request: HtmxRequest, name: str) -> HttpResponse:
    """`Forget authorization`: delete the stored tokens; the server disconnects and needs
    authorization again (SPEC 16.2)."""
    server = _get_server_or_404(name)
    upstream.forget(server.name, audit.by(request))
    control.run_to_end(control.reconnect, server.name)
    messages.success(request, f"Forgot the authorization of {server.name}.")
    return _go(request, reverse("server-detail", args=[server.name]))


@login_required
@require_safe
def oauth_callback(request: HtmxRequest) -> HttpResponse:
    """The redirect URI (`<AGENVOY_PUBLIC_URL>/oauth/callback`, SPEC 16.2), on any web process:
    the code (or the authorization server's error) goes into the flow's row and the worker
    holding the server is woken; the browser goes to the server page."""
    flow = upstream.callback(
        request.GET.get("state", ""),
        request.GET.get("code", ""),
        request.GET.get("error", ""),
        request.user.get_username(),
        request.GET.get("iss", ""),
        audit.address_of(request),
    )
    if flow is None:
        return render(request, "mcpcore/oauth_failed.html", {"message": upstream.UNKNOWN_STATE}, status=400)
    control.flow_callback(str(flow.id))
    if flow.error:
        messages.error(request, flow.error)
    return redirect("server-detail", flow.server_name)


# --- pending confirmations (Pending) --------------------------------------------------------------


@login_required
@require_safe
@htmx_page
def pending(request: HtmxRequest) -> HttpResponse:
    context = live.pending_context(live.pending_calls(), live.pending_questions(), _deciding(request))
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
        with _Refusal() as refused:
            call = control.run_to_end(
                calls.respond,
                form.cleaned_data["session_id"],
                confirm_id,
                body,
                routing.Replier.person(request.user),
                local=calls.local_supervisor(request),
                by=audit.by(request),
            )
        if forbidden := _forbidden(request, refused):
            return forbidden
        if refused:
            messages.error(request, f"Not applied: {refused.message}.")
        else:
            # A denial is not a success to flash in green (issue 47).
            said = messages.info if call.decision == CallDecision.DENY else messages.success
            said(request, reply_message(call))
    return _inbox_after(request)


@login_required
@require_POST
def pending_decide(request: HtmxRequest) -> HttpResponse:
    """`Approve selected` / `Deny selected`, and the buttons of a row standing for identical
    calls (SPEC 24.6): every id decided at once, each answered as its own reply would be. A
    checked row's box carries all its ids, comma-separated."""
    ids = [part for value in request.POST.getlist("ids") for part in value.split(",") if part]
    action = request.POST.get("action", "")
    if action not in ("approve", "deny"):
        messages.error(request, "That reply was not understood.")
        return _inbox_after(request)
    if not ids:
        messages.error(request, "Nothing was selected.")
        return _inbox_after(request)
    try:
        body = Decide.check(
            {"ids": ids, "approve": action == "approve", "reason": request.POST.get("reason")}
        )
    except InputError as exc:
        messages.error(request, f"Not applied: {exc.message}.")
        return _inbox_after(request)
    results = control.run_to_end(
        calls.decide,
        body.ids,
        body.approve,
        body.reason.strip(),
        routing.Replier.person(request.user),
        local=calls.local_supervisor(request),
        by=audit.by(request),
    )
    said = messages.success if body.approve else messages.info
    said(request, decided_message(results, body.approve))
    return _inbox_after(request)


@login_required
@require_POST
def pending_edit(request: HtmxRequest, confirm_id: uuid.UUID) -> HttpResponse:
    """Edit and approve (SPEC 24.5): run a pending tool call with the arguments typed on its
    page. What is wrong with them (not a JSON object, the tool's schema, a deny rule) is said
    in the form, which keeps them, and the call stays pending."""
    call = get_object_or_404(ToolCall, confirm_id=confirm_id)
    typed = request.POST.get("arguments", "")
    try:
        arguments = json.loads(typed)
    except (ValueError, RecursionError):
        arguments = typed  # not JSON: the reply's check says it is no JSON object
    with _Refusal() as refused:
        call = control.run_to_end(
            calls.respond,
            call.session_id,
            str(confirm_id),
            {"approve": True, "arguments": arguments},
            routing.Replier.person(request.user),
            local=calls.local_supervisor(request),
            by=audit.by(request),
        )
    if forbidden := _forbidden(request, refused):
        return forbidden
    if refused and refused.status == 400:
        context = confirmation_context(call, _deciding(request), typed, refused.message)
        return render(request, "mcpcore/pending_detail.html", context, status=400)
    if refused:
        messages.error(request, f"Not applied: {refused.message}.")
    else:
        messages.success(request, reply_message(call))
    return redirect("pending-detail", confirm_id)


def _deciding(request: HttpRequest) -> frozenset[str] | None:
    """The groups whose items the signed-in person decides (SPEC 24.1; None: all)."""
    return routing.deciding_groups(routing.Replier.person(request.user))


def _inbox_after(request: HtmxRequest) -> HttpResponse:
    """After a reply or an answer: the inbox's list (and its badge and allowances) for htmx,
    else back where the person came from."""
    if request.htmx:
        context = {
            **live.pending_context(live.pending_calls(), live.pending_questions(), _deciding(request)),
            "allowances": live.allowances(),
        }
        return _fragment(
            request,
            "mcpcore/pending_list.html#pending-list",
            context,
            oob=("base.html#pending-badge", "mcpcore/pending_list.html#allowances"),
        )
    return _back(request, "pending")


@login_required
@require_POST
def pending_extend(request: HtmxRequest, item_id: str) -> HttpResponse:
    """Extend a pending confirmation or a server's question (SPEC 24.4): the inbox's and the
    item's own page's `Extend`."""
    with _Refusal() as refused:
        until = control.run_to_end(calls.extend, item_id, routing.Replier.person(request.user))
    if forbidden := _forbidden(request, refused):
        return forbidden
    if refused:
        messages.error(request, f"Not extended: {refused.message}.")
    else:
        messages.success(request, extend_message(item_id, until))
    return _inbox_after(request)


@login_required
@require_POST
def allowance_revoke(request: HtmxRequest, pk: int) -> HttpResponse:
    row = get_object_or_404(SessionAllowance, pk=pk)
    if calls.revoke_allowance(row.pk, audit.by(request)):
        messages.success(request, f"Revoked the allowance of session {row.session_id}.")
    if request.htmx:
        return _fragment(request, "mcpcore/pending_list.html#allowances", {"allowances": live.allowances()})
    return redirect("pending")


@login_required
@require_safe
@htmx_page
def pending_detail(request: HtmxRequest, confirm_id: uuid.UUID) -> HttpResponse:
    """One confirmation's or server's question's own page: the inbox's buttons (or form) while
    it waits, how it ended after. Every link the console sends (webhooks, ntfy, browser
    notifications) points here."""
    call = ToolCall.objects.filter(confirm_id=confirm_id).first()
    if call is None:
        question = get_object_or_404(Question.objects.select_related("call"), id=confirm_id)
        context, fragment = question_context(question, _deciding(request)), "question-detail"
    else:
        context, fragment = confirmation_context(call, _deciding(request)), "pending-detail"
    if request.htmx:
        return render(request, f"mcpcore/pending_detail.html#{fragment}", context)
    return render(request, "mcpcore/pending_detail.html", context)


@login_required
@require_POST
def pending_answer(request: HtmxRequest, question_id: uuid.UUID) -> HttpResponse:
    """A person's answer to a server's question (SPEC 20.4): Submit (the form's fields, checked
    against the question's schema), Done (URL mode), Decline or Cancel."""
    question = get_object_or_404(Question, id=question_id)
    action = request.POST.get("action", "")
    body: dict = {"action": action}
    if action == "accept" and question.mode == QuestionMode.FORM:
        body["content"] = elicitation.from_form(question.schema, request.POST)
    with _Refusal() as refused:
        questions.answer(question.id, body, routing.Replier.person(request.user))
    if forbidden := _forbidden(request, refused):
        return forbidden
    if refused:
        messages.error(request, f"Not sent: {refused.message}.")
    else:
        messages.success(request, answer_message(question.server_name, action))
    return _inbox_after(request)


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
    items += [
        {
            "id": str(q.id),
            "tool": notify.short_tool(q.call.tool_name, q.server_name),
            "server": q.server_name,
            "title": f"Question from {q.server_name}",
            "body": f"{q.server_name} asks: {q.message}",
            "url": reverse("pending-detail", args=[q.id]),
        }
        for q in live.pending_questions()[: live.PENDING_SHOWN]
    ]
    return JsonResponse({"pending": items}, headers={"Cache-Control": "no-store"})


# --- history (History) ----------------------------------------------------------------------------


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
        if f["kind"]:
            rows = kind_filter(rows, f["kind"])
        if f["tool"].strip():
            parts = tool_parts(rows, f["tool"].strip())
            if parts is None:
                rows = rows.filter(tool_name__icontains=f["tool"].strip())
    context = history_page(
        rows, page_cursor(request.GET.get("before")), page_cursor(request.GET.get("after")), parts
    )
    context["filtered"] = any(request.GET.get(k) for k in ("server", "tool", "status", "session", "kind"))
    if request.htmx:
        return render(request, "mcpcore/call_list.html#call-table", context)
    context.update(form=form, server_names=list(Server.objects.values_list("name", flat=True)))
    return render(request, "mcpcore/call_list.html", context)


@login_required
@require_safe
@htmx_page
def call_detail(request: HtmxRequest, call_id: uuid.UUID) -> HttpResponse:
    call = get_object_or_404(ToolCall, id=call_id)
    context = result_context(call)
    if request.htmx:
        return render(request, "mcpcore/call_detail.html#call-result", context)
    raw = call.raw_result if call.raw_result and call.raw_result != call.result else ""
    context.update(
        questions=question_rows(questions.of_call(call.id)),
        args=pretty(call.arguments),
        requested=pretty(call.requested_arguments) if call.edited_by else "",
        raw=result_view(raw) if raw else None,
        raw_size=len(raw.encode()) if raw else 0,
    )
    return render(request, "mcpcore/call_detail.html", context)


# --- argument rules (Rules, SPEC 14.2) ------------------------------------------------------------


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def rules_page(request: HtmxRequest) -> HttpResponse:
    """The argument rules (SPEC 14.2): those in force, the file's problem, and an editor that
    replaces the file (a bad line is refused, nothing written)."""
    save_error, status = "", 200
    if request.method == "POST":
        text = request.POST.get("rules", "")
        try:
            saved = files.write_rules(RulesEdit.check({"rules": rules_lines(text)}).rules, audit.by(request))
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
    context = {
        "rules": in_force,
        "problem": problem,
        "text": text,
        "save_error": save_error,
        "examples": rule_examples(Tool.objects.order_by("registered_name").first()),
    }
    return render(request, "mcpcore/rules.html", context, status=status)


# --- views (Views, SPEC 19: `toolview` in code) ---------------------------------------------------


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def toolviews_page(request: HtmxRequest) -> HttpResponse:
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
                    "include": pattern_lines(form["include"]),
                    "exclude": pattern_lines(form["exclude"]),
                }
            )
        except InputError as exc:
            save_error, status = exc.message, 400
        else:
            toolviewstore.save(edit.name, edit.description, edit.include, edit.exclude, audit.by(request))
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
    context = {
        "views": toolview_rows(),
        "form": form,
        "save_error": save_error,
        "editing": bool(form["name"]),
        "tool_names": list(
            Tool.objects.order_by("registered_name").values_list("registered_name", flat=True)
        ),
    }
    return render(request, "mcpcore/toolviews.html", context, status=status)


@login_required
@require_POST
def toolview_remove(request: HtmxRequest, name: str) -> HttpResponse:
    if toolviewstore.remove(name, audit.by(request)):
        messages.success(request, f"Removed view {name}; the tokens limited to it no longer see its tools.")
    return redirect("views")


# --- API tokens and their grants (Tokens) ---------------------------------------------------------


@login_required
@require_safe
@htmx_page
def tokens(request: HtmxRequest) -> HttpResponse:
    if request.htmx:
        return render(request, "mcpcore/token_list.html#token-list", {"tokens": token_rows()})
    return _tokens_page(request, TokenForm(), None)


def _tokens_page(request: HtmxRequest, form: TokenForm, new: dict | None, status: int = 200) -> HttpResponse:
    context = {
        "tokens": token_rows(),
        "form": form,
        "new": new,
        "hooks_settings": claude_code_settings(),
        "apps": display.app_rows(),
    }
    response = render(request, "mcpcore/token_list.html", context, status=status)
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_POST
def token_create(request: HtmxRequest) -> HttpResponse:
    """The clear token is shown on this response only; the database keeps its hash."""
    form = TokenForm(request.POST)
    if not form.is_valid():
        return _tokens_page(request, form, None, status=400)
    data = form.cleaned_data
    views = list(data["views"]) or None
    row, token = bearer.issue(
        data["name"].strip(), data["may_auto"], data["role"] or TokenRole.AGENT, views, by=audit.by(request)
    )
    config = client_config(token, [v.name for v in views] if views else None)
    return _tokens_page(request, TokenForm(), {"row": row, "token": token, "config": config})


@login_required
@require_POST
def token_revoke(request: HtmxRequest, pk: int) -> HttpResponse:
    row = get_object_or_404(ApiToken, pk=pk)
    revoked, ended = calls.revoke_token(row.pk, audit.by(request))
    for call_id in ended:
        # Open Pending pages drop them live; anyone waiting on them wakes up.
        control.run_to_end(calls.announce, call_id)
    if revoked and not ended:
        # Its session allowances ended too: open Pending pages drop them.
        control.send_group(control.PENDING, {"type": "pending.changed", "call_id": ""})
    if revoked:
        extra = f" and cancelled its {len(ended)} pending call(s)" if ended else ""
        messages.success(request, f"Revoked token {row.name}{extra}.")
    if request.htmx:
        return _fragment(request, "mcpcore/token_list.html#token-list", {"tokens": token_rows()})
    return redirect("tokens")


@login_required
@require_POST
def permission_grant_revoke(request: HtmxRequest, pk: int) -> HttpResponse:
    """End a permission grant ("Approve and remember" of a permission prompt, or a time-boxed grant): the
    token's next call of that tool waits for a person again."""
    grant = get_object_or_404(PermissionGrant.objects.select_related("token"), pk=pk)
    if calls.permission_grant_revoke(grant.pk, audit.by(request)):
        messages.success(request, f"{grant.token.name} must ask again for {grant.tool_name}.")
    if request.htmx:
        return _fragment(request, "mcpcore/token_list.html#token-list", {"tokens": token_rows()})
    return redirect("tokens")


# --- apps that sign in (SPEC 21.3, 21.4) ---------------------------------------------------------


class _AppRedirect(HttpResponseRedirect):
    """A redirect back to an app: its redirect URI may use a private-use scheme
    (`cursor://...`), which Django's own redirect refuses; it was checked at registration."""

    def __init__(self, url: str) -> None:
        self.allowed_schemes = [urlsplit(url).scheme]
        super().__init__(url)
        self["Cache-Control"] = "no-store"


def _to_app(redirect_uri: str, **params: str | None) -> HttpResponse:
    parts = urlsplit(redirect_uri)
    query = parse_qsl(parts.query, keep_blank_values=True)
    query += [(k, v) for k, v in params.items() if v is not None]
    query.append(("iss", settings.AGENVOY_PUBLIC_URL))
    return _AppRedirect(urlunsplit(parts._replace(query=urlencode(query))))


@login_required
@require_http_methods(["GET", "POST"])
def app_allow(request: HttpRequest) -> HttpResponse:
    """The `Allow an app` page (SPEC 21.3), reached from `/authorize` after signing in: who the
    app is, where it returns, the endpoint and what it will be (an agent, with the views
    chosen); `Allow` gives it a code, `Deny` sends it `access_denied`."""
    fields = grants.read_request(request.GET.get("request") or request.POST.get("request") or "")
    client = AppClient.objects.filter(client_id=fields["client_id"]).first() if fields else None
    if fields is None or client is None:
        response = render(
            request,
            "mcpcore/app_allow.html",
            {"failed": "this request has expired or is not valid"},
            status=400,
        )
        response["Cache-Control"] = "no-store"
        return response
    all_views = list(View.objects.order_by("name"))
    if request.method == "POST":
        if request.POST.get("decision") != "allow":
            return _to_app(fields["redirect_uri"], error="access_denied", state=fields["state"])
        chosen = set(request.POST.getlist("views"))
        picked = [v for v in all_views if v.name in chosen]
        by = audit.by(request)
        # The grant this one replaces: its token's pending calls end as a revoked token's do.
        # One change with the new grant: if that fails, the earlier grant stays in force.
        with transaction.atomic():
            ended = [
                call_id
                for earlier in grants.earlier_grants(client, request.user)  # type: ignore[arg-type]
                for call_id in calls.revoke_token(earlier.token_id, by)[1]
            ]
            _grant, code = grants.allow(
                client,
                request.user,  # type: ignore[arg-type]
                fields["resource"],
                picked,
                redirect_uri=fields["redirect_uri"],
                redirect_uri_explicit=fields["explicit"],
                code_challenge=fields["code_challenge"],
                asked_resource=fields["asked_resource"],
                by=by,
            )
        for call_id in ended:
            control.run_to_end(calls.announce, call_id)
        return _to_app(fields["redirect_uri"], code=code, state=fields["state"])
    clients.note_use(client)
    return_host = urlsplit(fields["redirect_uri"]).hostname or urlsplit(fields["redirect_uri"]).scheme
    own_host = urlsplit(client.client_id).hostname if client.document else None
    preselected = fields["resource"][len("/mcp/v/") :] if fields["resource"].startswith("/mcp/v/") else None
    context = {
        "client": client,
        "request_value": request.GET.get("request"),
        "return_host": return_host,
        "foreign_host": own_host is not None and return_host != own_host,
        "resource": settings.AGENVOY_PUBLIC_URL + fields["resource"],
        "views": all_views,
        "preselected": preselected,
    }
    response = render(request, "mcpcore/app_allow.html", context)
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_POST
def app_grant_revoke(request: HtmxRequest, pk: int) -> HttpResponse:
    """Revoke a connected app's grant: its tokens stop working at once on every process; its
    pending calls end as a revoked token's do (SPEC 12.2)."""
    grant = get_object_or_404(AppGrant.objects.select_related("client", "token"), pk=pk)
    revoked, ended = calls.app_grant_revoke(grant, audit.by(request))
    if revoked:
        messages.success(request, f"Revoked {grant.token.name}.")
    for call_id in ended:
        control.run_to_end(calls.announce, call_id)
    return redirect("tokens")


# --- notifications (Notifications) ----------------------------------------------------------------


def _notifications_page(
    request: HtmxRequest, form: dict, new: dict | None, status: int = 200
) -> HttpResponse:
    context = {
        **targets_context(),
        "form": form,
        "new": new,
        "public_url": settings.AGENVOY_PUBLIC_URL,
        "target_kinds": list(TargetKind),
        "group_choices": list(Group.objects.values_list("name", flat=True)),
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
            return render(request, "mcpcore/notification_list.html#notification-targets", targets_context())
        blank = {"kind": TargetKind.WEBHOOK, "url": "", "name": "", "error": "", "groups": []}
        return _notifications_page(request, blank, None)
    kind = request.POST.get("kind", "")
    url = request.POST.get("url", "").strip()
    name = request.POST.get("name", "").strip()
    token = request.POST.get("token", "").strip()
    named = request.POST.getlist("groups")
    groups = list(Group.objects.filter(name__in=[n for n in named if "\x00" not in n]))
    # the token is never sent back
    form = {"kind": kind, "url": url, "name": name, "error": "", "groups": named}
    if kind not in TargetKind.values:
        form["error"] = "Choose a kind: webhook or ntfy."
    else:
        try:
            check_url(url)
        except ValidationError:
            form["error"] = "Enter an http:// or https:// URL."
        if len(url) > 2000:
            form["error"] = "That URL is too long (at most 2,000 characters)."
        if len(name) > 100:
            form["error"] = "That name is too long (at most 100 characters)."
        form["error"] = form["error"] or target_token_error(kind, token)
        unknown = sorted(set(named) - {g.name for g in groups})
        form["error"] = form["error"] or (f"Unknown group: {unknown[0]}." if unknown else "")
    if form["error"]:
        return _notifications_page(request, form, None, status=400)
    who = request.user.get_username()
    target, secret = notify.add_target(
        kind, url, who, audit.by(request), token=token, groups=groups, name=name
    )
    blank = {"kind": kind, "url": "", "name": "", "error": "", "groups": []}
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
    notify.remove_target(target, audit.by(request))
    messages.success(request, f"Removed {target.kind} target {target.url}.")
    return redirect("notifications")


# --- the audit trail (Audit, SPEC 22.2) -----------------------------------------------------------


@login_required
@require_safe
@htmx_page
def audit_page(request: HtmxRequest) -> HttpResponse:
    """Every change of what the console trusts or who may use it, newest first, in keyset
    pages, filtered by action, actor and time. Read only: no page changes or deletes a row."""
    form = AuditFilter(request.GET)
    rows = AuditEntry.objects.all()
    if form.is_valid():
        f = form.cleaned_data
        if f["action"]:
            rows = rows.filter(action=f["action"])
        if f["actor"].strip():
            rows = rows.filter(actor=f["actor"].strip())
        if f["since"]:
            rows = rows.filter(at__gte=f["since"])
        if f["until"]:
            rows = rows.filter(at__lt=f["until"])
    page, older, newer = keyset_page(
        rows, "at", page_cursor(request.GET.get("before"), int), page_cursor(request.GET.get("after"), int)
    )
    context: dict[str, Any] = {
        "entries": audit_rows(page),
        "older": older,
        "newer": newer,
        "filtered": any(request.GET.get(k) for k in ("action", "actor", "since", "until")),
    }
    if request.htmx:
        return render(request, "mcpcore/audit_list.html#audit-table", context)
    context.update(form=form, audit_days=settings.AGENVOY_AUDIT_DAYS)
    return render(request, "mcpcore/audit_list.html", context)


# --- people (People, SPEC 23.1 and 23.3: roles, groups, adding and deactivating people) ---------


def _people_page(
    request: HtmxRequest, *, new_link: str = "", error: str = "", status: int = 200
) -> HttpResponse:
    context = {
        "people": display.people_rows(),
        "groups": people.all_groups(),
        "roles": list(PersonRole),
        "new_link": new_link,
        "error": error,
    }
    response = render(request, "mcpcore/people.html", context, status=status)
    response["Cache-Control"] = "no-store"  # a new person's set-password link is on it once
    return response


def _names(text: str) -> list[str]:
    """Names typed one a line or separated by commas."""
    return [n.strip() for n in text.replace(",", "\n").splitlines() if n.strip()]


def _person_or_404(pk: int):
    return get_object_or_404(get_user_model(), pk=pk)


@login_required
@require_safe
def people_page(request: HtmxRequest) -> HttpResponse:
    return _people_page(request)


@login_required
@require_POST
def person_add(request: HtmxRequest) -> HttpResponse:
    """Add a person; the answer shows once the link where they set a password (Django's own
    password-reset token: valid PASSWORD_RESET_TIMEOUT, 24 hours, and spent once the password
    is set, since it signs the password's hash)."""
    username = request.POST.get("username", "").strip()
    email = request.POST.get("email", "").strip()
    if not username:
        return _people_page(request, error="Enter a username.", status=400)
    try:
        get_user_model().username_validator(username)
        user = people.add(
            username,
            email,
            request.POST.get("role", ""),
            _names(request.POST.get("groups", "")),
            audit.by(request),
        )
    except ValidationError as exc:
        return _people_page(request, error=" ".join(exc.messages), status=400)
    except people.PeopleError as exc:
        return _people_page(request, error=exc.message, status=400)
    uid = urlsafe_base64_encode(force_bytes(user.pk))
    link = request.build_absolute_uri(
        reverse("set-password", args=[uid, default_token_generator.make_token(user)])
    )
    messages.success(request, f"Added {username}. Give them this link: it is shown once.")
    return _people_page(request, new_link=link)


@login_required
@require_POST
def person_edit(request: HtmxRequest, pk: int) -> HttpResponse:
    user = _person_or_404(pk)
    try:
        people.change(
            user,
            audit.by(request),
            role=request.POST.get("role", ""),
            groups=_names(request.POST.get("groups", "")),
        )
    except people.PeopleError as exc:
        return _people_page(request, error=exc.message, status=400)
    live.end_sockets_of(user)  # their open pages' sockets reconnect with the new role
    messages.success(request, f"Saved {user.get_username()}.")
    return redirect("people")


@login_required
@require_POST
def person_active(request: HtmxRequest, pk: int) -> HttpResponse:
    """Deactivate (their sessions end at once, on every process, live sockets closed) or
    reactivate a person."""
    user = _person_or_404(pk)
    active = request.POST.get("active") == "1"
    try:
        people.change(user, audit.by(request), active=active)
    except people.PeopleError as exc:
        return _people_page(request, error=exc.message, status=400)
    if not active:
        signin.end_sessions_of(user)
    messages.success(request, f"{'Reactivated' if active else 'Deactivated'} {user.get_username()}.")
    return redirect("people")


def _group_fields(request: HtmxRequest, name: str) -> dict:
    """`save_group`'s arguments from a Groups form; `after` empty or a whole number from 1."""
    after = request.POST.get("escalate_after_minutes", "").strip()
    if after and (not after.isdigit() or int(after) < 1):
        raise people.PeopleError("escalate_after_minutes must be a whole number from 1")
    return {
        "name": name,
        "people": _names(request.POST.get("people", "")),
        "escalate_to": request.POST.get("escalate_to", "").strip() or None,
        "escalate_after_minutes": int(after) if after else None,
    }


@login_required
@require_POST
def group_save(request: HtmxRequest, name: str | None = None) -> HttpResponse:
    """Add a group (`name` from the form) or change one's members and escalation."""
    target = name if name is not None else request.POST.get("name", "").strip()
    if name is not None:
        get_object_or_404(Group, name=name)  # an edit changes a group that is there
    elif Group.objects.filter(name=target).exists():
        return _people_page(request, error=f"group {target} already exists", status=400)
    try:
        fields = _group_fields(request, target)
        people.save_group(fields.pop("name"), fields.pop("people"), audit.by(request), **fields)
    except people.PeopleError as exc:
        return _people_page(request, error=exc.message, status=400)
    messages.success(request, f"Saved group {target}.")
    return redirect("people")


@login_required
@require_POST
def group_remove(request: HtmxRequest, name: str) -> HttpResponse:
    try:
        people.remove_group(name, audit.by(request))
    except people.PeopleError as exc:
        return _people_page(request, error=exc.message, status=exc.status)
    messages.success(request, f"Removed group {name}.")
    return redirect("people")


class SetPassword(PasswordResetConfirmView):
    """Where a person added on the People page sets their password, from the one-time link.
    Django's own view and token: a link spent or past 24 hours answers 410."""

    template_name = "mcpcore/set_password.html"
    success_url = reverse_lazy("login")

    def dispatch(self, *args, **kwargs) -> HttpResponseBase:
        response = super().dispatch(*args, **kwargs)
        # A good link is first redirected to the form (its token moved into the session);
        # only the page of a bad one is the 410.
        if not self.validlink and response.status_code == 200:
            response.status_code = 410
        return response


# --- Account (SPEC 22.1): second factors, password, sessions ---------------------------------


@login_required
@require_safe
def account(request: HtmxRequest) -> HttpResponse:
    """The person's own page: their second factors (added and removed on allauth's pages), the
    password change, and their sessions with `Sign out` for each."""
    kinds = set(Authenticator.objects.filter(user=request.user).values_list("type", flat=True))
    sessions = sorted(
        UserSession.objects.purge_and_list(request.user),
        key=lambda s: (not s.is_current(), -s.last_seen_at.timestamp()),
    )
    context = {
        "has_totp": Authenticator.Type.TOTP in kinds,
        "passkeys": Authenticator.objects.filter(user=request.user, type=Authenticator.Type.WEBAUTHN).count(),
        "has_recovery_codes": Authenticator.Type.RECOVERY_CODES in kinds,
        "sessions": [(s, display.browser_of(s.user_agent)) for s in sessions],
        # Not asked of a person signed in through the identity provider (SPEC 23.2), who has no
        # password here to change either.
        "required": settings.AGENVOY_REQUIRE_2FA
        and not audit.through_provider(request, request.user)
        and not signin.has_second_factor(request.user),
        "password": request.user.is_authenticated and request.user.has_usable_password(),
    }
    return render(request, "mcpcore/account.html", context)


@login_required
@require_POST
def session_sign_out(request: HtmxRequest, pk: int) -> HttpResponse:
    """End one of the person's own sessions (another browser, say), through allauth's adapter
    (`signin.UserSessionsAdapter`, which closes that session's live sockets)."""
    found = get_object_or_404(UserSession, pk=pk, user=request.user)
    current = found.is_current()
    get_adapter().end_sessions([found])
    if current:
        return redirect("login")
    messages.success(request, "Signed out that session.")
    return redirect("account")


# --- outside the navigation: one tap on the phone (SPEC 17.2) and what MCP clients probe (17.4) ---


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
    who = routing.Replier.one_tap(target)
    with _Refusal() as refused:
        control.run_to_end(
            calls.respond,
            call.session_id,
            str(call.confirm_id),
            {"approve": approve},
            who,
            by=audit.Actor(who.name, audit.address_of(request)),
        )
    if refused and refused.status == 403:  # not sent to this target (SPEC 24.7)
        return _plain(refused.message, 403)
    if refused:
        return _plain(LINK_GONE, 410)
    return _plain("approved" if approve else "denied", 200)


@csrf_exempt
def well_known_not_found(request: HttpRequest) -> JsonResponse:
    """Anything under `/.well-known/` the console does not serve (OpenID discovery, the OAuth
    metadata of an unknown server or view, anything else): clients that probe (with any
    method) need JSON, not the sign-in page or Django's HTML 404."""
    return JsonResponse({"error": "not found"}, status=404)
