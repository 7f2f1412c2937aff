"""Test server whose tools ask the person mid-call (elicitation, SPEC 20.4) and answer what
they got, as JSON, in both protocol eras:

    python tests/servers/asking.py            (stdio; 2026-07-28 when the client offers it)
    ASKING_LEGACY=1 ...                         speaks only the 2025-11-25 protocol

On a 2025 session each question is an `elicitation/create` sent on the call's own request;
on 2026-07-28 the tool answers an `InputRequiredResult` and reads the answers from the retry
(`input_responses`, with the answers so far carried in `request_state`).

Tools:
- `ask_form(message)`: one form question (`name` string, required; `count` integer 1..10);
- `ask_url(url)`: one URL-mode question (the URL to open);
- `ask_twice()`: two form questions one after the other (`first`, then `second`);
- `ask_both()`: the same two, on 2026-07-28 in one `InputRequiredResult` (both at once);
- `sample()`: asks the client to sample (`sampling/createMessage`), answers what came back;
- `roots()`: asks for the client's roots, answers what came back.
- `hold(seconds)`: asks nothing, answers `held` after `seconds` (a call in flight beside
  another's questions).
Each answers `{"answers": [<the client's result per question>]}` or `{"error": "..."}`.
"""

import json
import os
import uuid

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CallToolResult,
    CreateMessageRequest,
    CreateMessageRequestParams,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitRequestURLParams,
    InputRequiredResult,
    ListRootsRequest,
    SamplingMessage,
    TextContent,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

mcp = MCPServer("asking", log_level="WARNING")

FORM = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Name", "minLength": 1},
        "count": {"type": "integer", "minimum": 1, "maximum": 10, "default": 2},
    },
    "required": ["name"],
}
SECOND = {
    "type": "object",
    "properties": {"sure": {"type": "boolean", "title": "Sure?"}},
    "required": ["sure"],
}


def modern(ctx: Context) -> bool:
    return (ctx.protocol_version or "") in MODERN_PROTOCOL_VERSIONS


def answered(answers: list) -> CallToolResult:
    text = json.dumps({"answers": answers}, sort_keys=True)
    return CallToolResult(content=[TextContent(type="text", text=text)])


async def ask(ctx: Context, questions: list, together: bool = False) -> CallToolResult | InputRequiredResult:
    """Ask `questions` (ElicitRequest params) one after the other (2026-07-28 and `together`:
    all in one round) and answer what came back."""
    if not modern(ctx):
        answers = []
        for params in questions:
            try:
                if isinstance(params, ElicitRequestURLParams):
                    assert params.elicitation_id is not None
                    result = await ctx.request_context.session.elicit_url(
                        params.message, params.url, params.elicitation_id, related_request_id=ctx.request_id
                    )
                else:
                    result = await ctx.request_context.session.elicit_form(
                        params.message, params.requested_schema, related_request_id=ctx.request_id
                    )
            except MCPError as exc:
                return answered([*answers, {"error": exc.error.message, "code": exc.error.code}])
            answers.append(result.model_dump(mode="json", exclude_none=True))
        return answered(answers)
    if together:
        got = ctx.input_responses or {}
        if len(got) == len(questions):
            return answered(
                [got[f"q{i}"].model_dump(mode="json", exclude_none=True) for i in range(len(questions))]
            )
        return InputRequiredResult(
            input_requests={f"q{i}": ElicitRequest(params=p) for i, p in enumerate(questions)},
            request_state="[]",
        )
    # 2026-07-28: one question per round; the answers so far ride `request_state`.
    so_far = json.loads(ctx.request_state) if ctx.request_state else []
    got = (ctx.input_responses or {}).get(f"q{len(so_far)}")
    if got is not None:
        so_far.append(got.model_dump(mode="json", exclude_none=True))
    if len(so_far) == len(questions):
        return answered(so_far)
    params = questions[len(so_far)]
    if isinstance(params, ElicitRequestURLParams):
        params = params.model_copy(update={"elicitation_id": None})
    return InputRequiredResult(
        input_requests={f"q{len(so_far)}": ElicitRequest(params=params)}, request_state=json.dumps(so_far)
    )


@mcp.tool()
async def ask_form(message: str, ctx: Context) -> CallToolResult | InputRequiredResult:
    """Ask one form question and answer what came back."""
    return await ask(ctx, [ElicitRequestFormParams(message=message, requested_schema=FORM)])


@mcp.tool()
async def ask_url(url: str, ctx: Context, work: float = 0) -> CallToolResult | InputRequiredResult:
    """Ask the person to open `url` and answer what came back. On 2025 sessions with `work`,
    the flow at the URL is then done: `notifications/elicitation/complete`, and `work`
    seconds more of the tool's own work."""
    params = ElicitRequestURLParams(message="Sign in to continue", url=url, elicitation_id=uuid.uuid4().hex)
    result = await ask(ctx, [params])
    if work and not modern(ctx):
        assert params.elicitation_id is not None
        await ctx.request_context.session.send_elicit_complete(
            params.elicitation_id, related_request_id=ctx.request_id
        )
        await anyio.sleep(work)
    return result


@mcp.tool()
async def ask_twice(ctx: Context) -> CallToolResult | InputRequiredResult:
    """Ask two form questions in order and answer both."""
    return await ask(
        ctx,
        [
            ElicitRequestFormParams(message="first", requested_schema=FORM),
            ElicitRequestFormParams(message="second", requested_schema=SECOND),
        ],
    )


@mcp.tool()
async def ask_both(ctx: Context) -> CallToolResult | InputRequiredResult:
    """Ask the same two questions as `ask_twice`, on 2026-07-28 both in one round."""
    return await ask(
        ctx,
        [
            ElicitRequestFormParams(message="first", requested_schema=FORM),
            ElicitRequestFormParams(message="second", requested_schema=SECOND),
        ],
        together=True,
    )


@mcp.tool()
async def sample(ctx: Context) -> CallToolResult | InputRequiredResult:
    """Ask the client to sample its model; answer the error it gave."""
    request = CreateMessageRequest(
        params=CreateMessageRequestParams(
            messages=[SamplingMessage(role="user", content=TextContent(type="text", text="hi"))], max_tokens=5
        )
    )
    return await _other(ctx, request)


@mcp.tool()
async def roots(ctx: Context) -> CallToolResult | InputRequiredResult:
    """Ask the client for its roots; answer the error it gave."""
    return await _other(ctx, ListRootsRequest())


@mcp.tool()
async def hold(seconds: float) -> str:
    """Ask nothing; answer `held` after `seconds`."""
    await anyio.sleep(seconds)
    return "held"


async def _other(ctx: Context, request) -> CallToolResult | InputRequiredResult:
    if not modern(ctx):
        try:
            result = await ctx.request_context.session.send_request(request, dict)  # type: ignore[arg-type]
        except MCPError as exc:
            return answered([{"error": exc.error.message, "code": exc.error.code}])
        return answered([result])
    got = (ctx.input_responses or {}).get("other")
    if got is not None:
        return answered([got.model_dump(mode="json", exclude_none=True)])
    return InputRequiredResult(input_requests={"other": request}, request_state="[]")


async def main() -> None:
    from mcp.server.stdio import stdio_server

    low = mcp._lowlevel_server
    options = low.create_initialization_options()
    async with stdio_server() as (read, write):
        if os.environ.get("ASKING_LEGACY"):
            # Like servers built on older SDKs: a client's 2026 probe is refused and it falls
            # back to `initialize`.
            from mcp.server.runner import _serve_legacy_stream

            async with low.lifespan(low) as state:
                await _serve_legacy_stream(
                    low,
                    read,
                    write,
                    lifespan_state=state,
                    session_id=None,
                    init_options=options,
                    raise_exceptions=False,
                )
        else:
            await low.run(read, write, options)


if __name__ == "__main__":
    anyio.run(main)
