"""What the console answers as an MCP server about tools (SPEC 13, 19, 20.5): calls through the
one call path of the console (gate, inbox, history), held while a person decides
(`holding`), and `approval_prompt` for agents that delegate their own prompts. The tool list
is `context.on_list`'s, as every list."""

import json
import logging

from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from .. import calls, db, names
from ..calls import questions, traces
from ..choices import CallStatus, Mode, Via
from ..models import ApiToken, Tool, ToolCall
from . import catalog, relay
from .context import AMBIGUOUS, answers_refusals, caller, client_asks, local_of, session_of, text_result
from .holding import hold, hold_or_ask

log = logging.getLogger("mcpcore.mcpserver")


@answers_refusals
async def on_call_tool(ctx, params) -> dict:
    """The result as a plain dict: the SDK validates and shapes it for the request's era itself
    (typing it here first made it build and dump the model twice). `resultType`, which 2026
    requires and 2025 drops, is the typed model's default unless the upstream result has one."""
    return {"resultType": "complete", **await _call_tool(ctx, params)}


async def _call_tool(ctx, params) -> dict:
    token, endpoint = caller(ctx)
    if endpoint == catalog.PERMISSION:
        return await _permission_prompt(ctx, params, token)
    local = local_of(ctx)
    if params.request_state is not None:
        # The retry of a call whose server asked this client a question (SPEC 20.4).
        call = await _answered(ctx, params, token)
    else:
        call = await db.write(
            _create,
            token,
            endpoint,
            params.name,
            params.arguments or {},
            session_of(ctx, token),
            local,
            client_asks=client_asks(ctx),
            traceparent=traces.current(),
        )
        await calls.submit(call, local)
    traces.called(call)
    held = await hold_or_ask(ctx, call, token, retry=params.request_state is not None)
    if isinstance(held, dict):
        return held
    traces.ended(held)
    return await call_result(held)


async def _answered(ctx, params, token: ApiToken) -> ToolCall:
    """A 2026-07-28 client's retry with `requestState` and `inputResponses`: the state is
    checked (nothing goes upstream for a bad one), the answer goes to the question, and the
    call it is bound to is the one held again."""
    try:
        state = relay.verify(params.request_state, token.pk)
    except relay.StateError as exc:
        raise MCPError(INVALID_PARAMS, str(exc)) from None
    call = await calls.get(state.call_id)
    if call is None:
        raise MCPError(INVALID_PARAMS, "invalid requestState")
    answer = (params.input_responses or {}).get(state.question_id.hex)
    if answer is not None:
        body = answer.model_dump(mode="json", by_alias=True, exclude_none=True)
        try:
            await db.run(questions.relayed, state.question_id, body)
        except calls.CallError as exc:
            # Ended meanwhile (the call ended, the question was cancelled): the call says how.
            log.info("call %s: answer to question %s not taken: %s", call.id, state.question_id, exc.message)
    return call


def registered_of(endpoint: str, name: str) -> str | None:
    """The registered name behind an exposed one, read off the name itself when it was not
    shortened (no query: `calls.create` looks the tool up anyway); None when it may have been."""
    if name != name.strip() or not name:
        return None
    server = catalog.server_of(endpoint)
    if server is not None:
        return names.registered_name(server, name)
    first, sep, tool = name.partition(names.SEP)
    if sep and tool and names.is_valid_server_name(first) and names.exposed_name(first, tool) == name:
        return names.registered_name(first, tool)
    return None


def _create(
    token,
    endpoint: str,
    name: str,
    arguments: dict,
    session_id: str,
    local=None,
    client_asks: str = "",
    traceparent: str = "",
) -> ToolCall:
    """The call of the tool behind the exposed name, through the gate (one database hop). The
    endpoint's view narrows it as the token's views do (`calls.create(within=...)`)."""
    own = catalog.within(endpoint)

    def create(registered: str) -> ToolCall:
        return calls.create(
            token,
            "",
            registered,
            arguments,
            session_id,
            Mode.CONFIRM,
            via=Via.MCP,
            local=local,
            within=own,
            client_asks=client_asks,
            traceparent=traceparent,
        )

    registered = registered_of(endpoint, name)
    if registered is not None:
        try:
            return create(registered)
        except calls.CallError as exc:
            if exc.status != 404:
                raise
            # A shortened name looks like a plain one: only the shortening can tell.
    tool = catalog.find_tool(endpoint, name, token)
    if tool is not None and tool.registered_name != registered:
        return create(tool.registered_name)
    return create(_own_tool(endpoint, token, name))


def _own_tool(endpoint: str, token, name: str) -> str:
    """An app calls its server's tools by their own names (SPEC 20.5): on `/mcp` and views, a
    name that is no exposed name but the own name of exactly one tool the client sees is that
    tool; of several, ambiguous; else unknown."""
    found = (
        []
        if catalog.server_of(endpoint) is not None
        else catalog.offer(endpoint, token).own_tools.get(name, [])
    )
    if len(found) == 1:
        return found[0]
    if found:
        servers = sorted(split[0] for n in found if (split := names.split_registered(n)))
        listed = ", ".join(f"{s}{names.SEP}{name}" for s in servers)
        raise calls.CallError(f"tool {name} is ambiguous: {listed}", AMBIGUOUS)
    raise calls.CallError(f"unknown tool: {name}", 404)


def _declares_output(registered: str) -> bool:
    return bool(
        Tool.objects.filter(registered_name=registered).values_list("output_schema", flat=True).first()
    )


async def call_result(call: ToolCall) -> dict:
    """The upstream result as it was when it fit under the cap; else the converted string."""
    if call.status in (CallStatus.DONE, CallStatus.ERROR) and call.native_result is not None:
        return call.native_result
    if call.status == CallStatus.DONE:
        # Cut to the cap: a tool with an outputSchema can no longer satisfy it, and clients
        # validate structured content unless the result is an error.
        return text_result(call.result, call.is_error or await db.run(_declares_output, call.tool_name))
    return text_result(call.result, True)


# --- approval_prompt (SPEC 13.5) ----------------------------------------------------------------


async def _permission_prompt(ctx, params, token: ApiToken) -> dict:
    if params.name != catalog.PERMISSION_TOOL:
        raise MCPError(INVALID_PARAMS, f"unknown tool: {params.name}")
    args = params.arguments or {}
    call = await db.write(
        calls.create_permission_prompt,
        token,
        args.get("tool_name"),
        args.get("input"),
        session_of(ctx, token),
        args.get("tool_use_id"),
    )
    await calls.submit(call, local_of(ctx))
    # A reply ends a permission prompt at once (nothing runs): the answer is how it ended.
    call = await hold(ctx, call)
    return text_result(json.dumps(calls.permission_answer(call)), False)
