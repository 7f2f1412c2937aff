"""Database rows for tests that run no MCP server: servers from an mcp.json in the test's
$AGENVOY_HOME, their state and tools, and calls, written directly."""

import datetime
import json
import uuid

from django.utils import timezone

from mcpcore import files
from mcpcore.models import Server, Tool, ToolCall


def write_servers(home, servers: dict) -> None:
    """Write mcp.json into `home` and mirror it into the database, as the supervisor would."""
    (home / "mcp.json").write_text(json.dumps({"servers": servers}))
    files.sync_servers()


def add_tools(name: str, tools: list[str], state: str = "connected") -> Server:
    """Mark server `name` as `state` with these tools registered (each with a small schema)."""
    server = Server.objects.get(name=name)
    Server.objects.filter(pk=server.pk).update(
        state=state, protocol_version="2025-11-25", last_refresh=timezone.now()
    )
    for i, tool in enumerate(tools):
        Tool.objects.create(
            server=server,
            tool_name=tool,
            registered_name=f"mcp__{name}__{tool}",
            position=i,
            description=f"The {tool} tool.",
            input_schema={
                "type": "object",
                "properties": {
                    "message": {"type": "string", "description": "what to say"},
                    "count": {"type": "integer"},
                    "loud": {"type": "boolean"},
                },
                "required": ["message"],
            },
        )
    server.refresh_from_db()
    return server


def make_call(status="pending", tool="echo", server="every", **fields) -> ToolCall:
    """A recorded call of `mcp__<server>__<tool>`; a pending one has a confirmation due in 5 min."""
    now = timezone.now()
    defaults = dict(
        session_id="sess-1",
        tool_name=f"mcp__{server}__{tool}",
        server_name=server,
        tool=tool,
        arguments={"message": "hi"},
        status=status,
        created_at=now,
    )
    if status == "pending":
        defaults.update(confirm_id=uuid.uuid4(), expires_at=now + datetime.timedelta(minutes=5))
    defaults.update(fields)
    return ToolCall.objects.create(**defaults)


async def claimed_call(worker: str, server: str, tool: str, arguments: dict, **fields) -> ToolCall:
    """A running call of `mcp__<server>__<tool>` recorded as claimed by the supervisor named
    `worker` (as an approved call is, before that supervisor runs it); `fields` override."""
    from mcpcore import db

    values = dict(
        session_id="s",
        tool_name=f"mcp__{server}__{tool}",
        server_name=server,
        tool=tool,
        arguments=arguments,
        status="running",
        started_at=timezone.now(),
        worker=worker,
    )
    return await db.run(ToolCall.objects.create, **{**values, **fields})
