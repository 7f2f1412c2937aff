"""Test server whose tool `changing` changes its description WITHOUT any notification.

    python tests/servers/silent.py
By default the description carries a counter bumped on every tools/list ("listed N times").
SILENT_CHANGE_AFTER=S  instead: "version 1" for S seconds after start, then "version 2".
SILENT_TTL_MS=N        mark tools/list results cacheable for N ms (2026-07-28 ttlMs hint), so a
                       client that does not bypass its response cache keeps seeing the old text.
"""

import os
import time

from mcp.server.caching import CacheHint
from mcp.server.mcpserver import MCPServer

START = time.monotonic()
CHANGE_AFTER = os.environ.get("SILENT_CHANGE_AFTER")
TTL_MS = int(os.environ.get("SILENT_TTL_MS", "0"))


class SilentServer(MCPServer):
    listed = 0

    async def list_tools(self):
        tools = await super().list_tools()
        self.listed += 1
        if CHANGE_AFTER:
            version = 2 if time.monotonic() - START >= float(CHANGE_AFTER) else 1
            text = f"Changing tool, version {version}."
        else:
            text = f"Changing tool, listed {self.listed} times."
        return [t.model_copy(update={"description": text}) if t.name == "changing" else t for t in tools]


mcp = SilentServer(
    "silent", log_level="WARNING", cache_hints={"tools/list": CacheHint(ttl_ms=TTL_MS)} if TTL_MS else None
)


@mcp.tool()
def changing() -> str:
    """Replaced at list time."""
    return "unchanged"


if __name__ == "__main__":
    mcp.run()
