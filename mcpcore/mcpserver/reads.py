"""Prompts, resources, templates and completions on the MCP endpoints (SPEC 20.2, 20.3, 20.5).

Lists come from the audience's `catalog.Offer` (memory: `context.on_list`). A `prompts/get` or `resources/read`
goes to the server that owns the prompt or URI (`catalog.route`) as a call of its kind through
the one call path (`calls.create_read`: the rules may hold or deny it; it is in the history),
held like a tool call while a person decides (`holding.hold`), and answered with the server's
own result, or its own JSON-RPC error. A completion is asked of the server's holder directly
(`control.complete`): it is typing help, not a call. Subscriptions are kept by `changes`.
"""

from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND

from .. import calls, control, db, rules
from ..calls import traces
from ..choices import CallKind, CallStatus, Via
from ..db import cache
from ..models import ApiToken, ToolCall
from . import catalog
from .context import answers_refusals, caller, is_modern, local_of, offer_of, session_of
from .holding import hold

# JSON-RPC's code for "resource not found" on 2025 sessions; 2026-07-28 uses -32602.
RESOURCE_NOT_FOUND_2025 = -32002
# What a client gets for a read a person denied, that expired or was stopped (SPEC 20.3).
NOT_ALLOWED = -32001
REFUSED = {CallStatus.SKIPPED, CallStatus.EXPIRED, CallStatus.ABORTED, CallStatus.CANCELLED}


def not_found_code(ctx) -> int:
    return INVALID_PARAMS if is_modern(ctx) else RESOURCE_NOT_FOUND_2025


def unknown_resource(ctx, uri: str) -> MCPError:
    return MCPError(not_found_code(ctx), f"resource not found: {uri}")


def claimed_twice(ctx, uri: str, servers: tuple[str, ...]) -> MCPError:
    a, b = sorted(servers)[:2]
    return MCPError(
        not_found_code(ctx),
        f"resource {uri} is served by more than one server: read it on /mcp/{a} or /mcp/{b}",
    )


def routed(ctx, made: catalog.Offer, uri: str) -> str:
    """The server a read of `uri` goes to, or the error the client gets."""
    found = catalog.route(made, uri)
    if found.server is not None:
        return found.server
    if found.servers:
        raise claimed_twice(ctx, uri, found.servers)
    raise unknown_resource(ctx, uri)


# --- gets and reads -------------------------------------------------------------------------------


@answers_refusals
async def on_get_prompt(ctx, params) -> dict:
    made = await offer_of(ctx)
    found = made.prompt_of.get(params.name)
    if found is None:
        raise MCPError(INVALID_PARAMS, f"unknown prompt: {params.name}")
    server, name = found
    return await _through_the_gate(ctx, CallKind.PROMPT, server, name, dict(params.arguments or {}))


@answers_refusals
async def on_read_resource(ctx, params) -> dict:
    uri = str(params.uri)
    # Rules see URIs in normal form only (SPEC 20.3): another spelling of a denied file
    # (`%2e`, `file:////`, `file://localhost/`, `FILE:`) is refused before any rule or server,
    # whose own template match would decode it to the denied path.
    normal = rules.normal_uri(uri)
    if normal != uri:
        raise MCPError(INVALID_PARAMS, f"resource URI is not in normal form: {normal}")
    server = routed(ctx, await offer_of(ctx), uri)
    return await _through_the_gate(ctx, CallKind.RESOURCE, server, uri, {})


def _create(
    token: ApiToken,
    kind: str,
    server: str,
    name: str,
    arguments: dict,
    session_id: str,
    local,
    traceparent: str,
):
    row = cache.server(server)  # with a warm cache no ORM: the write stays on the loop's connection
    if row is None:
        return None
    return calls.create_read(
        token, kind, row, name, arguments, session_id, via=Via.MCP, local=local, traceparent=traceparent
    )


async def _through_the_gate(ctx, kind: str, server: str, name: str, arguments: dict) -> dict:
    token, _endpoint = caller(ctx)
    local = local_of(ctx)
    call = await db.write(
        _create, token, kind, server, name, arguments, session_of(ctx, token), local, traces.current()
    )
    if call is None:  # the server went away between the lookup and now
        if kind == CallKind.PROMPT:
            raise MCPError(INVALID_PARAMS, f"unknown prompt: {name}")
        raise unknown_resource(ctx, name)
    await calls.submit(call, local)
    traces.called(call)
    call = await hold(ctx, call)
    traces.ended(call)
    return answer(call)


def answer(call: ToolCall) -> dict:
    """What the client gets for an ended prompt get or resource read: the server's result as
    it came (or, cut to the cap, the history's text of it), or a JSON-RPC error: the server's
    own, -32001 with SPEC 13.3's text when a person or a rule said no, else -32603."""
    native = call.native_result if isinstance(call.native_result, dict) else None
    if call.status == CallStatus.DONE:
        if native is not None:
            return {"resultType": "complete", **native}
        if call.kind == CallKind.PROMPT:
            return {"messages": [{"role": "user", "content": {"type": "text", "text": call.result}}]}
        uri = call.arguments.get("uri", call.tool_name)
        return {"contents": [{"uri": uri, "mimeType": "text/plain", "text": call.result}]}
    if native is not None and isinstance(native.get("error"), dict):
        error = native["error"]
        raise MCPError(int(error.get("code", INTERNAL_ERROR)), str(error.get("message", call.result)))
    if call.status in REFUSED:
        raise MCPError(NOT_ALLOWED, call.result)
    raise MCPError(INTERNAL_ERROR, call.result)


# --- completions ----------------------------------------------------------------------------------

NO_COMPLETION = {"resultType": "complete", "completion": {"values": []}}


async def on_completion(ctx, params) -> dict:
    """A prompt's or template's argument completion, from its server (SPEC 20.2); none where
    the server has none, or the client may not see the prompt or template."""
    made = await offer_of(ctx)
    ref = params.ref.model_dump(mode="json", by_alias=True, exclude_none=True)
    if ref.get("type") == "ref/prompt":
        found = made.prompt_of.get(ref.get("name", ""))
        server = found[0] if found else None
        if found:
            ref["name"] = found[1]
    else:
        server = catalog.template_server(made, ref.get("uri", ""))
    if server is None:
        return NO_COMPLETION
    argument = params.argument.model_dump(mode="json", by_alias=True, exclude_none=True)
    context = (
        params.context.model_dump(mode="json", by_alias=True, exclude_none=True) if params.context else None
    )
    try:
        result = await control.complete(server, ref, argument, context)
    except control.Unanswered:
        return NO_COMPLETION
    except control.Refused as exc:
        if exc.code == METHOD_NOT_FOUND:  # declared completions, has no handler: still none
            return NO_COMPLETION
        raise MCPError(exc.code, exc.message) from None
    return {"resultType": "complete", **result}
