"""What the console answers as an MCP server about tools (SPEC 13, 19, 20.5): the tool list,
calls through the one call path of the console (gate, inbox, history), held with progress
heartbeats while a person decides (`hold`, which prompt gets and resource reads share:
`reads.py`), and `approval_prompt` for agents that delegate their own prompts.

The endpoint of a request is `""` (`/mcp`: every connected server, names `<server>__<tool>`),
a server name (`/mcp/<server>`: its own names), `v/<view>` (`/mcp/v/<view>`: the tools of
one view, named as on `/mcp`) or `_permission`; the ASGI app puts it and the caller's token
into the HTTP scope, where handlers read them back through `ctx.request`. What a client sees
is `catalog`'s to say.
"""

import json
import logging
import math

import anyio
from channels.layers import get_channel_layer
from django.conf import settings
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, INVALID_REQUEST, SERVER_INFO_META_KEY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .. import calls, control, db, names
from ..calls import questions
from ..choices import CallStatus, Mode, QuestionStatus, Via
from ..models import ApiToken, Question, Tool, ToolCall
from . import catalog, relay

log = logging.getLogger("mcpcore.mcpserver")

SESSION_META = "io.agenvoy/session"
ENDPOINT_KEY = "agenvoy.endpoint"
TOKEN_KEY = "agenvoy.token"


def caller(ctx) -> tuple[ApiToken, str]:
    """The token and the endpoint of the HTTP request this MCP request came in."""
    scope = ctx.request.scope
    return scope[TOKEN_KEY], scope[ENDPOINT_KEY]


def local_of(ctx) -> calls.LocalSupervisor | None:
    """The supervisor of this process, as the HTTP request this MCP request came in carries it."""
    return calls.local_supervisor(ctx.request)


def is_modern(ctx) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def text_result(text: str, is_error: bool) -> dict:
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


async def offer_of(ctx) -> catalog.Offer:
    token, endpoint = caller(ctx)
    return await db.read(catalog.offer, endpoint, token)


async def on_list(ctx, params) -> dict:
    """`tools/list`, `prompts/list`, `resources/list`, `resources/templates/list`, from memory
    (`catalog.offer`). Registered so the SDK declares each capability; on the endpoints
    `ConsoleMiddleware` answers them first with the result already shaped for the era."""
    return (await offer_of(ctx)).result(ctx.method)


# --- calls (SPEC 13.3) --------------------------------------------------------------------------


def session_of(ctx, token: ApiToken) -> str:
    """`mcp:<own id>` from `_meta`, else `mcp:<Mcp-Session-Id>` (2025) or `mcp:<token name>`."""
    meta = (ctx.params or {}).get("_meta")
    own = meta.get(SESSION_META) if isinstance(meta, dict) else None
    if isinstance(own, str) and own.strip():
        return f"mcp:{own.strip()}"
    sid = None if is_modern(ctx) else ctx.request.headers.get("mcp-session-id")
    return f"mcp:{sid}" if sid else f"mcp:{token.name}"


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
        try:
            call = await db.write(
                _create,
                token,
                endpoint,
                params.name,
                params.arguments or {},
                session_of(ctx, token),
                local,
                client_asks=client_asks(ctx),
            )
        except calls.CallError as exc:
            if exc.status == 404:
                raise MCPError(INVALID_PARAMS, f"unknown tool: {params.name}") from None
            if exc.status == AMBIGUOUS:
                raise MCPError(INVALID_PARAMS, exc.message) from None
            return text_result(exc.message, True)
        await calls.submit(call, local)
    held = await hold_or_ask(ctx, call, token, retry=params.request_state is not None)
    if isinstance(held, dict):
        return held
    return await call_result(held)


def client_asks(ctx) -> str:
    """The elicitation modes this request's client can answer (`relay.asks_of`); none when a
    2025 request has no stream for the console's own requests."""
    if not is_modern(ctx) and not ctx.session.can_send_request:
        return ""
    return relay.asks_of(ctx.session.client_capabilities)


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
    token, endpoint: str, name: str, arguments: dict, session_id: str, local=None, client_asks: str = ""
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


AMBIGUOUS = 409  # the CallError status of a bare name two servers' tools share (SPEC 20.5)


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


class Inflight:
    """Calls held for 2025 sessions, by (Mcp-Session-Id, JSON-RPC id): the ASGI app cancels
    one when the client closes the POST it came in (the SDK only acts on
    `notifications/cancelled`, and some clients just drop the connection)."""

    def __init__(self) -> None:
        self._scopes: dict[tuple[str, str], anyio.CancelScope] = {}

    @staticmethod
    def key(session_id: str, request_id) -> tuple[str, str]:
        return session_id, json.dumps(request_id)

    def add(self, key: tuple[str, str], scope: anyio.CancelScope) -> None:
        self._scopes[key] = scope

    def discard(self, key: tuple[str, str]) -> None:
        self._scopes.pop(key, None)

    def cancel(self, key: tuple[str, str]) -> None:
        scope = self._scopes.get(key)
        if scope is not None:
            scope.cancel()


INFLIGHT = Inflight()


async def hold(ctx, call: ToolCall) -> ToolCall:
    """Wait (`calls.wait`) until the call has ended, sending heartbeats while it is pending
    and passing on upstream progress while it runs, when the request asked for progress. The
    client going away (its request cancelled) cancels the call: out of the inbox at once if
    pending, cancelled upstream if running (SPEC 13.3)."""
    held = await hold_or_ask(ctx, call, None)
    assert isinstance(held, ToolCall)  # nothing is relayed without a token
    return held


async def hold_or_ask(ctx, call: ToolCall, token: ApiToken | None, retry: bool = False) -> ToolCall | dict:
    """`hold`, relaying the call's `asked` questions to this client meanwhile (SPEC 20.4,
    `relay`): a 2025 client is asked on this request's stream and the call held on; for a
    2026-07-28 client the request ends with an `InputRequiredResult` (returned here as its
    dict), the call still running until the client's retry holds it again."""
    meta = (ctx.params or {}).get("_meta")
    wants_progress = isinstance(meta, dict) and meta.get("progressToken") is not None
    # The confirmation's own page, on the Pending page's address (SPEC 13.3, 15).
    waiting = f"waiting for approval: {settings.AGENVOY_PUBLIC_URL}/pending/{call.confirm_id}/"
    beats = 0

    async def heartbeat() -> None:
        nonlocal beats
        beats += 1
        await ctx.session.report_progress(beats, None, waiting)

    async def progress(value, total, message) -> None:
        # Progress of one request must increase: after n heartbeats the server's own
        # progress (and total) is passed on n higher; with none, exactly as it came.
        await ctx.session.report_progress(value + beats, None if total is None else total + beats, message)

    key = None
    sid = None if is_modern(ctx) else ctx.request.headers.get("mcp-session-id")
    local = local_of(ctx)
    done = False
    asking: dict | None = None

    async def wait() -> None:
        nonlocal call
        call = await calls.wait(
            call,
            math.inf,
            on_progress=progress if wants_progress else None,
            on_heartbeat=heartbeat if wants_progress else None,
            local=local,
        )

    try:
        with anyio.CancelScope() as scope:
            if sid and ctx.request_id is not None:
                key = Inflight.key(sid, ctx.request_id)
                INFLIGHT.add(key, scope)
            if token is None or not call.client_asks or call.ended:
                await wait()
            else:
                async with anyio.create_task_group() as tg:

                    async def relaying() -> None:
                        nonlocal asking
                        asking = await _relay(ctx, call, token, retry)
                        tg.cancel_scope.cancel()  # a 2026 question ends this request

                    tg.start_soon(relaying)
                    await wait()
                    tg.cancel_scope.cancel()
            done = True
        if not done:
            log.info("call %s: the MCP client went away", call.id)
    finally:
        if key is not None:
            INFLIGHT.discard(key)
        if not done:
            with anyio.CancelScope(shield=True):
                await _abandon(call, local)
                call = await calls.get(call.id) or call
    return asking if asking is not None and not call.ended else call


async def _relay(ctx, call: ToolCall, token: ApiToken, look_first: bool) -> dict:
    """Relay the call's `asked` questions to this client as they come, one at a time, until
    the call ends (this task is then cancelled). A 2025 client is asked on this request's
    stream and its answer given to the question; for a 2026-07-28 client the answer is the
    `InputRequiredResult` this request ends with. The database is looked at when told of a
    question (`call.question` on the call's group, not its progress), every RELAY_POLL
    seconds in case a message went missing, and first when `look_first` (a retry: the next
    question may have come before this request)."""
    layer = get_channel_layer()
    channel = await layer.new_channel()
    group = control.call_group(str(call.id))
    await layer.group_add(group, channel)
    look = look_first
    try:
        while True:
            question = await db.run(_asked_of, call.id) if look else None
            if question is not None:
                if is_modern(ctx):
                    return _input_required(question, call, token)
                await _ask_2025(ctx, question)
                continue
            look = True
            with anyio.move_on_after(RELAY_POLL):
                event = await layer.receive(channel)
                look = event.get("type") == "call.question"
                if event.get("type") == "question.complete" and not is_modern(ctx):
                    # The server's URL question was done out of band: the client is told
                    # too (2025 only: 2026-07-28 has no such notification).
                    await ctx.session.send_elicit_complete(
                        event["elicitation_id"], related_request_id=ctx.request_id
                    )
    finally:
        with anyio.CancelScope(shield=True):
            await layer.group_discard(group, channel)


RELAY_POLL = 5.0  # seconds between looks for a question nobody told the door of


def _asked_of(call_id) -> Question | None:
    return (
        Question.objects.filter(call_id=call_id, status=QuestionStatus.ASKED).order_by("created_at").first()
    )


async def _ask_2025(ctx, question: Question) -> None:
    """`elicitation/create` on this request's stream; whatever the client answers (or a
    refusal: cancel) goes to the question."""
    try:
        if question.mode == "url":
            result = await ctx.session.elicit_url(
                question.message,
                question.url,
                question.elicitation_id or question.id.hex,
                related_request_id=ctx.request_id,
            )
        else:
            result = await ctx.session.elicit_form(
                question.message, question.schema or {}, related_request_id=ctx.request_id
            )
        answer = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    except MCPError as exc:
        log.info("question %s: the client refused it: %s", question.id, exc.error.message)
        answer = {"action": "cancel"}
    try:
        await db.run(questions.relayed, question.id, answer)
    except calls.CallError as exc:
        log.info("question %s: answer not taken: %s", question.id, exc.message)


def _input_required(question: Question, call: ToolCall, token: ApiToken) -> dict:
    """The `InputRequiredResult` asking a 2026-07-28 client the question, keyed by its id."""
    return {
        "resultType": "input_required",
        "inputRequests": {
            question.id.hex: {"method": "elicitation/create", "params": relay.request_of(question)}
        },
        "requestState": relay.sign(call.id, question.id, token.pk),
    }


async def _abandon(call: ToolCall, local: calls.LocalSupervisor | None) -> None:
    """Nobody waits for this call any more: cancel it (SPEC 13.3)."""
    try:
        # Its questions leave the inbox (or the client's hands) at once (SPEC 20.4).
        await db.run(questions.cancel_for_call, call.id)
    except Exception:
        log.exception("could not cancel the questions of abandoned call %s", call.id)
    try:
        await calls.stop(call.id, local)
    except calls.CallError:
        return  # it ended meanwhile
    except Exception:
        log.exception("could not cancel abandoned call %s", call.id)


# --- approval_prompt (SPEC 13.5) ----------------------------------------------------------------


async def _permission_prompt(ctx, params, token: ApiToken) -> dict:
    if params.name != catalog.PERMISSION_TOOL:
        raise MCPError(INVALID_PARAMS, f"unknown tool: {params.name}")
    args = params.arguments or {}
    try:
        call = await db.write(
            calls.create_permission_prompt,
            token,
            args.get("tool_name"),
            args.get("input"),
            session_of(ctx, token),
            args.get("tool_use_id"),
        )
    except calls.CallError as exc:
        return text_result(exc.message, True)
    await calls.submit(call, local_of(ctx))
    # A reply ends a permission prompt at once (nothing runs): the answer is how it ended.
    call = await hold(ctx, call)
    return text_result(json.dumps(calls.permission_answer(call)), False)


# --- the handshake ------------------------------------------------------------------------------


class ConsoleMiddleware:
    """Per-endpoint instructions on `initialize` and `server/discover`; a 2025 session stays
    on the endpoint it was opened on, and is tracked for list_changed."""

    def __init__(self, changes, server) -> None:
        self.changes = changes
        self.server = server

    async def __call__(self, ctx, call_next):
        if ctx.request is None or ENDPOINT_KEY not in ctx.request.scope:
            return await call_next(ctx)
        token, endpoint = caller(ctx)
        connection = getattr(ctx.session, "_connection", None)
        if ctx.method in ("initialize", "server/discover"):
            result = dict(await call_next(ctx))
            text = await db.run(catalog.instructions_for, endpoint, token)
            if text:
                result["instructions"] = text
            else:
                result.pop("instructions", None)
            if ctx.method == "initialize" and connection is not None:
                connection.state[ENDPOINT_KEY] = endpoint
                self.changes.track(connection, endpoint, token)
            return result
        if connection is not None and connection.state.get(ENDPOINT_KEY, endpoint) != endpoint:
            raise MCPError(INVALID_REQUEST, "this session was opened on another MCP endpoint")
        if ctx.method in catalog.LISTS:
            return self._listed(await offer_of(ctx), ctx.method, ctx.protocol_version)
        return await call_next(ctx)

    def _listed(self, made: catalog.Offer, method: str, version: str) -> dict:
        """A list answered without `call_next`, which the SDK trusts as its wire result: shaped
        once per list and era (`Offer.wire`) instead of checked again on every request, with
        the `serverInfo` stamp the SDK puts on every 2026-07-28 result."""
        wire = made.wire(method, version)
        if version not in MODERN_PROTOCOL_VERSIONS:
            return wire
        return {**wire, "_meta": {SERVER_INFO_META_KEY: self.server.server_info_stamp}}
