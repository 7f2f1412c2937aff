"""Registered tool names and server-name rules (SPEC 3). Pure: no Django, no mcp."""

import hashlib
import re

PREFIX = "mcp__"
SEP = "__"
# fullmatch, not `^...$`: `$` also matches before a trailing newline ("a\n" is not a name).
_SERVER_CHARS = re.compile(r"[A-Za-z0-9_-]+")
_LLM_SAFE = re.compile(r"[A-Za-z0-9_-]{1,64}")


def server_name_problem(name: object) -> str | None:
    """Why `name` can't be a server name, or None when it can.

    The rules keep `mcp__<server>__` prefixes unambiguous: with no `__` inside and no `_` at
    either end, the prefix of server `a` can never be the start of server `a__b`'s prefix.
    """
    if not isinstance(name, str) or name == "":
        return "must not be empty"
    if len(name) > 64:
        return "must be at most 64 characters"
    if not _SERVER_CHARS.fullmatch(name):
        return "only ASCII letters, digits, '-' and '_' are allowed"
    if "__" in name:
        return "must not contain '__'"
    if name.startswith("_") or name.endswith("_"):
        return "must not start or end with '_'"
    return None


def is_valid_server_name(name: object) -> bool:
    return server_name_problem(name) is None


def server_prefix(server: str) -> str:
    return f"{PREFIX}{server}{SEP}"


def registered_name(server: str, tool: str) -> str:
    """`mcp__<server>__<tool>`; the tool name is trimmed (an empty one is the caller's to skip)."""
    return f"{server_prefix(server)}{tool.strip()}"


def split_registered(name: str) -> tuple[str, str] | None:
    """(server, tool) of a registered name, or None when it isn't one.

    Server names never contain `__`, so the first `__` after the prefix ends the server.
    """
    if not name.startswith(PREFIX):
        return None
    rest = name[len(PREFIX) :]
    server, sep, tool = rest.partition(SEP)
    if not sep or not tool or not is_valid_server_name(server):
        return None
    return server, tool


def is_llm_safe(name: str) -> bool:
    """Whether most LLM APIs accept `name` as a function name ([A-Za-z0-9_-], 1-64 chars)."""
    return bool(_LLM_SAFE.fullmatch(name))


def default_description(server: str, tool: str) -> str:
    return f'MCP tool "{tool}" from server "{server}".'


EMPTY_SCHEMA: dict = {"type": "object", "properties": {}}


def normalize_schema(schema: object) -> dict:
    """The tool's input schema, or an empty object schema when it is missing or invalid."""
    if isinstance(schema, dict) and schema.get("type", "object") == "object":
        return schema
    return dict(EMPTY_SCHEMA, properties={})


EXPOSED_MAX = 64
_EXPOSED_BAD = re.compile(r"[^A-Za-z0-9_-]")
_SHORTENED = re.compile(r"[A-Za-z0-9_-]{0,55}_[0-9a-f]{8}")


def exposed_name(server: str, tool: str) -> str:
    """The name a tool has on `/mcp` (SPEC 13.2): `<server>__<tool>`, or, when that is not
    `[A-Za-z0-9_-]{1,64}`, every other character as `_`, cut to 55 characters, then `_` and
    the first 8 hex digits of the SHA-256 of the registered name (the hash keeps names that
    clean up alike apart). Clients add their own `mcp__<name>__` prefix, so ours would double.
    """
    name = f"{server}{SEP}{tool.strip()}"
    if _LLM_SAFE.fullmatch(name):
        return name
    digest = hashlib.sha256(registered_name(server, tool).encode("utf-8")).hexdigest()[:8]
    return f"{_EXPOSED_BAD.sub('_', name)[:55]}_{digest}"


def may_be_shortened(name: str) -> bool:
    """Whether `name` has the shape `exposed_name` gives a name it had to shorten: only then
    can a lookup by the whole list find a tool the name itself does not spell out."""
    return bool(_SHORTENED.fullmatch(name))
