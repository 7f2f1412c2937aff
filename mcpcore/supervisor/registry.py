"""Tool lists to registered tools: the signature, and the database writes (SPEC 3, 6).
Database functions here are synchronous; the supervisor runs them through mcpcore.db."""

import hashlib
import json
import logging

from django.db import transaction
from django.utils import timezone

from .. import allowlist, files, names
from ..models import Server, Tool

log = logging.getLogger("mcpcore.supervisor")


def tool_dicts(server: str, tools: list) -> tuple[list[dict], list[str]]:
    """Registered tool rows from an SDK tool list, and the warnings for skipped tools."""
    rows: list[dict] = []
    warnings: list[str] = []
    seen: set[str] = set()
    for tool in tools:
        # The registered name is trimmed (SPEC 3); the server is always called by its own name.
        tool_name = (tool.name or "").strip()
        if not tool_name:
            warnings.append("a tool with an empty name was skipped")
            continue
        if allowlist.entry_problem(tool_name):
            # Such a name could not be written to allow_tool and read back as itself.
            warnings.append(f"tool {tool_name!r} skipped: control characters or line separators in its name")
            continue
        reg = names.registered_name(server, tool_name)
        if reg in seen:
            warnings.append(f"tool {tool_name!r} maps to {reg}, already registered: rejected")
            continue
        seen.add(reg)
        schema = tool.input_schema if isinstance(tool.input_schema, dict) else None
        annotations = (
            tool.annotations.model_dump(mode="json", by_alias=True, exclude_none=True)
            if tool.annotations
            else {}
        )
        output_schema = getattr(tool, "output_schema", None)
        rows.append(
            {
                "tool_name": tool.name,
                "registered_name": reg,
                "title": getattr(tool, "title", None) or "",
                "description": (tool.description or "").strip()
                or names.default_description(server, tool_name),
                "raw_description": tool.description or "",
                "input_schema": names.normalize_schema(schema),
                "raw_schema": tool.input_schema,
                "annotations": annotations,
                "output_schema": output_schema if isinstance(output_schema, dict) else None,
                "llm_safe": names.is_llm_safe(reg),
                "digest": definition_digest(tool_name, tool.description or "", tool.input_schema),
            }
        )
    for w in warnings:
        log.warning("server %s: %s", server, w)
    return rows, warnings


def signature(rows: list[dict]) -> str:
    """SHA-256 over the tools sorted by name: name NUL description NUL schema-JSON NUL."""
    h = hashlib.sha256()
    for row in sorted(rows, key=lambda r: r["tool_name"]):
        h.update(row["tool_name"].encode())
        h.update(b"\0")
        h.update(row["raw_description"].encode())
        h.update(b"\0")
        h.update(json.dumps(row["raw_schema"], sort_keys=True, separators=(",", ":")).encode())
        h.update(b"\0")
    return h.hexdigest()


def definition_digest(name: str, description: str, schema: object) -> str:
    """SPEC 14.1: SHA-256 over name NUL description NUL input schema (compact JSON, sorted
    keys), from what the server gave."""
    h = hashlib.sha256()
    h.update(name.encode())
    h.update(b"\0")
    h.update(description.encode())
    h.update(b"\0")
    h.update(json.dumps(schema, sort_keys=True, separators=(",", ":")).encode())
    return h.hexdigest()


def is_registered(server_name: str, sig: str) -> bool:
    """Whether the server's registered tools are the list of this signature already."""
    return Server.objects.filter(name=server_name, signature=sig).exists()


def replace_tools(server_name: str, rows: list[dict], sig: str, warnings: list[str]) -> bool:
    """Replace all of a server's tools in one transaction; False when the server is gone.
    Trusted tools seen for the first time (under a whole-server grant) are pinned here."""
    with transaction.atomic():
        server = Server.objects.select_for_update().filter(name=server_name).first()
        if server is None:
            return False
        Tool.objects.filter(server=server).delete()
        Tool.objects.bulk_create(
            [
                Tool(
                    server=server,
                    tool_name=r["tool_name"],
                    registered_name=r["registered_name"],
                    title=r["title"],
                    description=r["description"],
                    input_schema=r["input_schema"],
                    annotations=r["annotations"],
                    output_schema=r["output_schema"],
                    llm_safe=r["llm_safe"],
                    digest=r.get("digest", ""),
                    position=i,
                )
                for i, r in enumerate(rows)
            ]
        )
        Server.objects.filter(pk=server.pk).update(
            signature=sig, last_refresh=timezone.now(), warnings=warnings
        )
        files.sync_pins(files.current_allow(), prefix=server.prefix)
    return True
