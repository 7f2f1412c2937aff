"""`/v1` views: thin wrappers over the modules that do the work (SPEC 7)."""

import asyncio

from django.http import HttpRequest, JsonResponse

from .. import allowlist, control, files, names, serverconfig
from ..models import Server, Tool, mask_config
from .auth import ApiError, api_view, json_body, reply_refusal, visible_calls


def _name_from(body: dict) -> str:
    name = body.get("name")
    if not isinstance(name, str) or name.strip() == "":
        raise ApiError("name is required")
    return name.strip()


def _file_error(exc: files.ConfigFileError) -> ApiError:
    return ApiError(f"{exc} (fix the file first; it was not changed)", 409)


@api_view(("GET", "POST"))
def mcp_servers(request: HttpRequest) -> JsonResponse:
    if request.method == "GET":
        listing = {s.name: mask_config(s.config) for s in Server.objects.all()}
        return JsonResponse({"servers": listing})
    body = json_body(request)
    name = _name_from(body)
    problem = names.server_name_problem(name)
    if problem:
        raise ApiError(f"invalid server name: {problem}")
    config = body.get("server")
    if not isinstance(config, dict):
        raise ApiError("server.command or server.url is required")
    try:
        serverconfig.save(name, serverconfig.clean_config(config))
    except serverconfig.ServerConfigError as exc:
        raise ApiError(str(exc)) from None
    except files.ConfigFileError as exc:
        raise _file_error(exc) from None
    return JsonResponse({"ok": True})


@api_view(("POST",))
def mcp_remove(request: HttpRequest) -> JsonResponse:
    name = _name_from(json_body(request))
    try:
        found = serverconfig.remove(name)
    except files.ConfigFileError as exc:
        raise _file_error(exc) from None
    if not found:
        raise ApiError("server not found", 404)
    return JsonResponse({"ok": True})


@api_view(("GET", "POST"))
def allowlist_view(request: HttpRequest) -> JsonResponse:
    if request.method == "GET":
        prefix = request.GET.get("prefix", "")
        entries = files.current_allow()
        return JsonResponse({"tool": {"entries": allowlist.entries_for(entries, prefix)}})
    body = json_body(request)
    block = body.get("tool")
    if block is None:
        if body.get("skill") is not None:
            raise ApiError("skill allow-lists are not managed by this console")
        raise ApiError("skill or tool is required")
    if not isinstance(block, dict):
        raise ApiError("tool must be an object")
    try:
        prefix, entries = allowlist.validate_edit(block.get("prefix"), block.get("entries"))
        now = files.replace_allow_prefix(prefix, entries)
    except allowlist.AllowListError as exc:
        raise ApiError(str(exc)) from None
    except files.ConfigFileError as exc:
        raise _file_error(exc) from None
    return JsonResponse({"ok": True, "tool": {"entries": now}})


@api_view(("GET",))
def mcp_tools(request: HttpRequest) -> JsonResponse:
    tools = list(Tool.objects.select_related("server").order_by("registered_name"))
    trust = files.trust_states(tools)
    return JsonResponse({"tools": [{**t.to_dict(), "trust": trust[t.registered_name]} for t in tools]})


@api_view(("GET", "POST", "PUT", "PATCH", "DELETE"))
def not_found(request: HttpRequest, rest: str = "") -> JsonResponse:
    raise ApiError("not found", 404)


# --- connections ------------------------------------------------------------------------------


@api_view(("GET",))
def mcp_status(request: HttpRequest) -> JsonResponse:
    from django.db.models import Count

    from .. import retention
    from ..models import iso

    rows = Server.objects.annotate(n=Count("tools")).order_by("name")
    storage = retention.storage()
    storage["oldest"] = iso(storage["oldest"])
    return JsonResponse({"servers": [s.to_status(s.n) for s in rows], "storage": storage})


@api_view(("GET",))
def mcp_instructions(request: HttpRequest) -> JsonResponse:
    from ..supervisor.registry import instructions_block

    pairs = list(Server.objects.filter(enabled=True).values_list("name", "instructions"))
    return JsonResponse({"text": instructions_block(pairs)})


@api_view(("POST",))
async def mcp_reconnect(request: HttpRequest) -> JsonResponse:
    body = json_body(request)
    name = body.get("name")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise ApiError("name must be a server name")
    outcome = await control.reconnect(name.strip() if name else None)
    if outcome is None:
        raise ApiError("server not found", 404)
    return JsonResponse({"ok": True, "servers": outcome})


# --- calls and the gate -----------------------------------------------------------------------


def _wait_seconds(raw: object, default: float) -> float:
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ApiError("wait must be a number of seconds from 0 to 300") from None
    if isinstance(raw, bool) or not 0 <= value <= 300:
        raise ApiError("wait must be a number of seconds from 0 to 300")
    return value


def _who(request: HttpRequest) -> str:
    token = getattr(request, "api_token", None)
    return f"token:{token.name}" if token is not None else ""


def _create_call(request: HttpRequest):
    """`calls.create` for `POST /v1/mcp/call`, in the same database trip as the auth."""
    from .. import calls

    body = json_body(request)
    request.wait_seconds = _wait_seconds(body.get("wait"), 30.0)
    try:
        return calls.create(
            request.api_token,
            "",
            body.get("name"),
            body.get("arguments"),
            body.get("session_id"),
            body.get("mode"),
        )
    except calls.CallError as exc:
        raise ApiError(exc.message, exc.status) from None


@api_view(("POST",), prepare=_create_call)
async def mcp_call(request: HttpRequest) -> JsonResponse:
    from .. import calls

    call, wait = request.prepared, request.wait_seconds
    await calls.submit(call)
    return _answer(await _until_gone(request, calls.wait(call, wait), wait))


def _answer(call, full: bool = False) -> JsonResponse:
    body = call.to_dict() if full else call.to_answer()
    return JsonResponse(body, status=200 if call.ended or full else 202)


async def _until_gone(request: HttpRequest, waiting, seconds: float):
    """What `calls.wait` gives, cut short when the client has disconnected: nobody is left to
    answer, and a long poll must not hold its channel for nothing (the call goes on)."""
    gone = getattr(request, "client_gone", None)  # set by the ASGI handler; not in test clients
    if gone is None or seconds <= 0:
        return await waiting
    task = asyncio.ensure_future(waiting)
    await asyncio.wait([task, gone], return_when="FIRST_COMPLETED")
    if task.done():
        return task.result()
    task.cancel()
    return None  # the answer goes nowhere


async def _call_answer(request: HttpRequest, call_id, wait: float, full: bool = False) -> JsonResponse:
    from .. import calls

    call = await calls.get(call_id)
    if call is None:
        raise ApiError("call not found", 404)
    call = await _until_gone(request, calls.wait(call, wait), wait)
    return _answer(call, full) if call is not None else JsonResponse({}, status=202)


def _uuid_or_404(value: str, message: str):
    import uuid

    try:
        return uuid.UUID(value)
    except ValueError:
        raise ApiError(message, 404) from None


@api_view(("GET",))
async def mcp_call_detail(request: HttpRequest, call_id: str) -> JsonResponse:
    cid = _uuid_or_404(call_id, "call not found")
    wait = _wait_seconds(request.GET.get("wait"), 0.0)
    return await _call_answer(request, cid, wait, full=True)


@api_view(("POST",))
async def mcp_call_cancel(request: HttpRequest, call_id: str) -> JsonResponse:
    from .. import calls

    cid = _uuid_or_404(call_id, "call not found")
    try:
        await calls.stop(cid)
    except calls.CallError as exc:
        raise ApiError(exc.message, exc.status) from None
    return JsonResponse({"ok": True})


@api_view(("GET",))
def pending(request: HttpRequest) -> JsonResponse:
    from ..models import ToolCall

    rows = visible_calls(request.api_token, ToolCall.objects.filter(status="pending")).order_by("created_at")
    return JsonResponse({"pending": [c.to_pending() for c in rows]})


@api_view(("POST",))
async def confirm(request: HttpRequest, session_id: str, confirm_id: str) -> JsonResponse:
    from .. import calls

    body = json_body(request)
    token = request.api_token
    try:
        await calls.respond(session_id, confirm_id, body, _who(request), lambda c: reply_refusal(token, c))
    except calls.CallError as exc:
        raise ApiError(exc.message, exc.status) from None
    return JsonResponse({"ok": True})


# --- argument rules (SPEC 14.2) ---------------------------------------------------------------


def _rules_body() -> dict:
    found, problem = files.current_rules()
    return {"rules": [r.to_dict() for r in found], "error": problem}


@api_view(("GET", "POST"))
def rules_view(request: HttpRequest) -> JsonResponse:
    from .. import rules

    if request.method == "GET":
        return JsonResponse(_rules_body())
    lines = json_body(request).get("rules")
    if not isinstance(lines, list) or not all(isinstance(x, str) for x in lines):
        raise ApiError("rules must be a list of strings, one rule each")
    for number, line in enumerate(lines, start=1):
        if "\n" in line or "\r" in line:
            raise ApiError(f"invalid rule on line {number}: one rule a line (no line breaks in an item)")
    try:
        files.write_rules(lines)
    except rules.RuleError as exc:
        raise ApiError(str(exc)) from None
    except files.ConfigFileError as exc:
        raise _file_error(exc) from None
    return JsonResponse({"ok": True, **_rules_body()})
