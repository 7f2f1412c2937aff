"""Tool, prompt and resource lists to registered rows: the signatures, and the database
writes (SPEC 3, 6, 20.1). Database functions here are synchronous; the supervisor runs them
through mcpcore.db."""

import hashlib
import json
import logging

from django.db import transaction
from django.utils import timezone
from mcp.shared.uri_template import UriTemplate

from .. import allowlist, files, names
from ..models import Prompt, Resource, ResourceTemplate, Server, Tool, ui_uri

log = logging.getLogger("mcpcore.supervisor")


def _registered(kind: str, server: str, name: str, seen: set[str], warnings: list[str]) -> str | None:
    """The registered name of a server's tool or prompt (SPEC 3), `name` already trimmed;
    None, with a warning, for one that is skipped: empty, unfit for `allow_tool` (it could not
    be written there and read back as itself, or an exact entry for it would be a prefix
    grant), or the same registered name as an earlier one."""
    if not name:
        warnings.append(f"a {kind} with an empty name was skipped")
        return None
    if "*" in name:
        warnings.append(
            f"{kind} {name!r} skipped: a * in its name (an allow_tool entry for it would grant more)"
        )
        return None
    if allowlist.entry_problem(name):
        warnings.append(f"{kind} {name!r} skipped: control characters or line separators in its name")
        return None
    reg = names.registered_name(server, name)
    if reg in seen:
        warnings.append(f"{kind} {name!r} maps to {reg}, already registered: rejected")
        return None
    seen.add(reg)
    return reg


def tool_dicts(server: str, tools: list) -> tuple[list[dict], list[str]]:
    """Registered tool rows from an SDK tool list, and the warnings for skipped tools."""
    rows: list[dict] = []
    warnings: list[str] = []
    seen: set[str] = set()
    for tool in tools:
        # The registered name is trimmed (SPEC 3); the server is always called by its own name.
        tool_name = (tool.name or "").strip()
        reg = _registered("tool", server, tool_name, seen, warnings)
        if reg is None:
            continue
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
                # Not in the signature (SPEC 6 names what it covers): a change of `_meta` alone
                # is noticed by `is_registered` comparing the stored values.
                "meta": _meta_of(tool),
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


def _meta_of(item) -> dict:
    meta = getattr(item, "meta", None)
    return meta if isinstance(meta, dict) else {}


def is_registered(server_name: str, sig: str, metas: dict[str, dict] | None = None) -> bool:
    """Whether the server's registered tools are the list of this signature already, with
    these `_meta` values (by tool name) when `metas` is given."""
    if not Server.objects.filter(name=server_name, signature=sig).exists():
        return False
    if metas is None:
        return True
    stored = dict(Tool.objects.filter(server__name=server_name).values_list("tool_name", "meta"))
    return stored == metas


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
                    meta=r.get("meta") or {},
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


# --- prompts, resources and templates (SPEC 20.1) ------------------------------------------------


def prompt_dicts(server: str, prompts: list) -> tuple[list[dict], list[str]]:
    """Registered prompt rows from an SDK prompt list, named as tools are (SPEC 3), and the
    warnings for the prompts skipped."""
    rows: list[dict] = []
    warnings: list[str] = []
    seen: set[str] = set()
    for prompt in prompts:
        wire = _wire(prompt)
        name = (wire.get("name") or "").strip()
        reg = _registered("prompt", server, name, seen, warnings)
        if reg is None:
            continue
        rows.append(
            {
                "name": wire["name"],
                "registered_name": reg,
                "title": wire.get("title") or "",
                "description": wire.get("description") or "",
                "arguments": _arguments(wire.get("arguments")),
                "meta": wire.get("_meta") or {},
            }
        )
    for w in warnings:
        log.warning("server %s: %s", server, w)
    return rows, warnings


def _arguments(given) -> list[dict] | None:
    """A prompt's arguments as its server gave them: no key stays no key, `[]` stays `[]`."""
    if not isinstance(given, list):
        return None
    return [a for a in given if isinstance(a, dict)]


def resource_dicts(resources: list, templates: list) -> tuple[list[dict], list[dict]]:
    """Resource and template rows from SDK lists; URIs are kept exactly as given (SPEC 20.2)."""
    rows = []
    for resource in resources:
        wire = _wire(resource)
        if not wire.get("uri"):
            continue
        rows.append({**_described(wire), "uri": wire["uri"], "size": wire.get("size")})
    template_rows = []
    for template in templates:
        wire = _wire(template)
        if not wire.get("uriTemplate"):
            continue
        template_rows.append({**_described(wire), "uri_template": wire["uriTemplate"]})
    return rows, template_rows


def _wire(item) -> dict:
    return item.model_dump(mode="json", by_alias=True, exclude_none=True)


def _described(wire: dict) -> dict:
    return {
        "name": wire.get("name") or "",
        "title": wire.get("title") or "",
        "description": wire.get("description") or "",
        "mime_type": wire.get("mimeType") or "",
        "annotations": wire.get("annotations") or {},
        "meta": wire.get("_meta") or {},
    }


def listing_signature(*parts: list[dict]) -> str:
    """SHA-256 over the rows as compact, key-sorted JSON: any change of a prompt, resource or
    template (its `_meta` included) is a new signature. Unlike a tool's (SPEC 6) nothing is
    pinned or trusted on these, so there is nothing a cosmetic change would disturb."""
    data = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(data.encode("utf-8", "replace")).hexdigest()


def replace_prompts(server_name: str, rows: list[dict], sig: str) -> bool:
    """Replace a server's prompts in one transaction unless `Server.prompt_signature` is `sig`
    already; True when they were written."""
    with transaction.atomic():
        server = Server.objects.select_for_update().filter(name=server_name).first()
        if server is None or server.prompt_signature == sig:
            return False
        Prompt.objects.filter(server=server).delete()
        Prompt.objects.bulk_create([Prompt(server=server, position=i, **r) for i, r in enumerate(rows)])
        Server.objects.filter(pk=server.pk).update(prompt_signature=sig)
    return True


def replace_resources(server_name: str, rows: list[dict], templates: list[dict], sig: str) -> bool:
    """Replace a server's resources and templates in one transaction unless
    `Server.resource_signature` is `sig` already; True when they were written."""
    with transaction.atomic():
        server = Server.objects.select_for_update().filter(name=server_name).first()
        if server is None or server.resource_signature == sig:
            return False
        Resource.objects.filter(server=server).delete()
        ResourceTemplate.objects.filter(server=server).delete()
        Resource.objects.bulk_create([Resource(server=server, position=i, **r) for i, r in enumerate(rows)])
        ResourceTemplate.objects.bulk_create(
            [ResourceTemplate(server=server, position=i, **r) for i, r in enumerate(templates)]
        )
        Server.objects.filter(pk=server.pk).update(resource_signature=sig)
    return True


def set_warnings(server_name: str, warnings: list[str]) -> bool:
    """Write the server's warnings when they differ from the stored ones; True when written."""
    stored = Server.objects.filter(name=server_name).values_list("warnings", flat=True).first()
    if stored is None or stored == warnings:
        return False
    return Server.objects.filter(name=server_name).update(warnings=warnings) == 1


def _template_matcher(text: str):
    """Whether a URI matches a template as the SDK matches it (RFC 6570); one that does not
    parse matches nothing."""
    try:
        parsed = UriTemplate.parse(text)
    except Exception:
        return lambda uri: False

    head = text.split("{", 1)[0]  # the literal part before the first expression

    def matches(uri: str) -> bool:
        if not uri.startswith(head):  # most URIs fail here, without the template's regex
            return False
        try:
            return parsed.match(uri) is not None
        except Exception:
            return False

    return matches


def record_claims() -> None:
    """Record on every server (`Server.uri_claims`) its URIs and templates that another
    server claims too, for its page's `URI also served by <other>` (SPEC 20.2). A server claims
    a URI by listing it, by a template matching it, or by a tool naming it as its app; each
    known URI (listed or an app) with two claimants or more is recorded under each: as the URI
    where it lists it or names it, under its template where one matches. Done by whoever
    registered a change, over every server's rows: the claims are between servers."""
    listed: dict[str, set[str]] = {}
    for uri, name in Resource.objects.values_list("uri", "server__name"):
        listed.setdefault(uri, set()).add(name)
    for name, meta in Tool.objects.exclude(meta={}).values_list("server__name", "meta"):
        ui = ui_uri(meta)
        if ui is not None:
            listed.setdefault(ui, set()).add(name)
    templates = [
        (name, text, _template_matcher(text))
        for name, text in ResourceTemplate.objects.values_list("server__name", "uri_template")
    ]
    claims: dict[str, dict[str, dict[str, set[str]]]] = {}
    for uri, named_by in listed.items():
        matched = [(name, text) for name, text, matches in templates if matches(uri)]
        by = named_by | {name for name, _text in matched}
        if len(by) < 2:
            continue
        for name in named_by:
            claims.setdefault(name, {}).setdefault("uris", {}).setdefault(uri, set()).update(by - {name})
        for name, text in matched:
            claims.setdefault(name, {}).setdefault("templates", {}).setdefault(text, set()).update(
                by - {name}
            )
    for name, stored in Server.objects.values_list("name", "uri_claims"):
        value = {
            kind: {key: sorted(others) for key, others in sorted(entries.items())}
            for kind, entries in sorted(claims.get(name, {}).items())
        }
        if value != stored:
            Server.objects.filter(name=name).update(uri_claims=value)
