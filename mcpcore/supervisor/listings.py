"""The listings part of a server's session (SPEC 20.1): every page of its tools, prompts,
resources and templates, registered when their signature changed. The session owns one
(`ServerSession.listings`) and registers at connect, on a list change and on the poll."""

import logging
from typing import Protocol

import anyio
from django.conf import settings
from mcp import Client

from .. import control, db
from . import registry
from .errors import is_session_lost, not_supported

log = logging.getLogger("mcpcore.supervisor")

PAGE_CAP = 100


# Each listing: the Client method and the result's field holding the items.
LISTINGS = {
    "tools/list": ("list_tools", "tools"),
    "prompts/list": ("list_prompts", "prompts"),
    "resources/list": ("list_resources", "resources"),
    "resources/templates/list": ("list_resource_templates", "resource_templates"),
}


class Owner(Protocol):
    """What this part needs of the session that owns it (`session.ServerSession`)."""

    name: str

    def describe(self, exc: BaseException) -> str: ...


class Listings:
    """Lists one server's tools, prompts and resources and registers what changed."""

    def __init__(self, session: Owner) -> None:
        self.session = session

    async def list_all(self, client: Client, method: str = "tools/list") -> list:
        """Every page of one listing, bypassing the client's cache, bounded; a repeated cursor
        or too many pages is an error."""
        fetch_name, field = LISTINGS[method]
        fetch = getattr(client, fetch_name)
        items: list = []
        cursor = None
        seen: set[str] = set()
        with anyio.fail_after(settings.AGENVOY_LIST_TIMEOUT):
            for _ in range(PAGE_CAP):
                page = await fetch(cursor=cursor, cache_mode="bypass")
                items.extend(getattr(page, field))
                cursor = page.next_cursor
                if not cursor:
                    return items
                if cursor in seen:
                    raise RuntimeError(f"{method} repeated the cursor {cursor!r}")
                seen.add(cursor)
        raise RuntimeError(f"{method} has more than {PAGE_CAP} pages")

    async def register(self, client: Client, connecting: bool = False) -> None:
        """List the tools, prompts and resources, and register each kind whose signature
        differs from the one recorded (`Server.signature`, `prompt_signature`,
        `resource_signature`, their only records). Tools are always rewritten on a new
        session: what a row holds beyond the signature (titles, annotations, output schemas,
        columns a newer console adds) is then brought up to date once per connect, and never
        rewritten by a poll unless their `_meta` changed. A failed tools/list fails the whole
        (the session is renewed); a failed prompt or resource listing keeps what was
        registered and becomes a warning on the server (SPEC 20.1)."""
        tools = await self.list_all(client)
        rows, warnings = registry.tool_dicts(self.session.name, tools)
        prompts, resources, failures = await self._listings(client)
        warnings = warnings + failures
        sig = registry.signature(rows)
        metas = {r["tool_name"]: r["meta"] for r in rows}
        changed = []
        if connecting or not await db.run(registry.is_registered, self.session.name, sig, metas):
            if await db.run(registry.replace_tools, self.session.name, rows, sig, warnings):
                changed.append(f"{len(rows)} tools")
        if prompts is not None:
            prompt_rows, prompt_warnings = registry.prompt_dicts(self.session.name, prompts)
            warnings += prompt_warnings
            if await db.run(
                registry.replace_prompts,
                self.session.name,
                prompt_rows,
                registry.listing_signature(prompt_rows),
            ):
                changed.append(f"{len(prompt_rows)} prompts")
        if resources is not None:
            resource_rows, template_rows = registry.resource_dicts(*resources)
            sig = registry.listing_signature(resource_rows, template_rows)
            if await db.run(registry.replace_resources, self.session.name, resource_rows, template_rows, sig):
                changed.append(f"{len(resource_rows)} resources, {len(template_rows)} templates")
        await db.run(registry.set_warnings, self.session.name, warnings)
        if changed:
            await db.run(registry.record_claims)
            log.info("server %s: registered %s", self.session.name, ", ".join(changed))
            await control.asend_group(control.STATUS, {"type": "status.changed", "server": self.session.name})

    async def _listings(self, client: Client) -> tuple[list | None, tuple[list, list] | None, list[str]]:
        """The prompts and the (resources, templates) the server declares (empty lists when it
        declares none), None for a kind whose listing failed, and the failures as warnings."""
        capabilities = client.server_capabilities
        failures: list[str] = []

        async def listed(method: str, declared: bool) -> list | None:
            if not declared:
                return []
            try:
                return await self.list_all(client, method)
            except Exception as exc:
                if is_session_lost(exc):
                    raise
                if method == "resources/templates/list" and not_supported(exc):
                    # The `resources` capability covers templates too, and many servers that
                    # have none leave the method out: no templates, not a failure.
                    return []
                failures.append(f"{method} failed: {self.session.describe(exc)}")
                log.warning("server %s: %s", self.session.name, failures[-1])
                return None

        prompts = await listed("prompts/list", capabilities.prompts is not None)
        declared = capabilities.resources is not None
        resources = await listed("resources/list", declared)
        templates = await listed("resources/templates/list", declared)
        both = (resources, templates) if resources is not None and templates is not None else None
        return prompts, both, failures
