"""The system-prompt block of SPEC 6 built from the servers' own instructions. Pure: no
Django request and no `mcp` imports; `/v1/mcp/instructions` and the MCP endpoint both serve it."""


def instructions_block(servers: list[tuple[str, str]]) -> str:
    """The system-prompt block of SPEC 6 from (server, instructions) pairs."""
    items = sorted(((n, t.strip()) for n, t in servers if t and t.strip()), key=lambda x: x[0].encode())
    if not items:
        return ""
    head = (
        "## MCP Server Instructions\n\nEach block below is the operating contract of one MCP "
        "server: follow it when you use that server's tools.\n"
    )
    return head + "".join(f"\n### {name}\n\n{text}\n" for name, text in items)
