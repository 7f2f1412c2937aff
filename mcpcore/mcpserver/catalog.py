"""What one audience of the MCP endpoints sees (SPEC 13.2, 19, 20.2, 20.5): its tools, prompts,
resources and templates as the lists it gets, and how a prompt name, a URI or a bare tool name
it sends finds its server.

An audience is an endpoint (`/mcp`, `/mcp/<server>`, `/mcp/v/<view>`) with the token's views
when it is limited to them. Its `Offer` is built from the rows of the connected servers and
kept in memory by `db.cache.listing` until any of those rows, the servers' states, the views or
the tokens change (the cache generation), so a listing or a lookup costs no query of its own.

Prompts and resources are the servers' whole: a client sees a server's prompts and resources
when its endpoint and its token's views hold the server whole (`toolviews.Selection.
holds_server`). A URI that two servers it sees claim is listed for neither, and reading it is
refused (`Route.servers` holds both): it must be read on one server's own endpoint.
"""

from collections.abc import Callable
from dataclasses import dataclass, field

from mcp.shared.uri_template import UriTemplate
from mcp_types import methods

from .. import names, toolviewstore
from ..choices import ServerState
from ..db import cache
from ..instructions import instructions_block
from ..models import ApiToken, Prompt, Resource, ResourceTemplate, Server, Tool, ui_uri
from ..schemas import PromptArguments, json_schema

ALL = ""
PERMISSION = "_permission"
VIEW = "v/"  # `v/<view>`: no server name holds a `/`
PERMISSION_TOOL = "approval_prompt"
# The input contract's model of the tool's arguments, less its docstring (written for us).
PERMISSION_SCHEMA = {k: v for k, v in json_schema(PromptArguments).items() if k != "description"}


def toolview_name(endpoint: str) -> str | None:
    """The view of a `v/<view>` endpoint, else None."""
    return endpoint[len(VIEW) :] if endpoint.startswith(VIEW) else None


def server_of(endpoint: str) -> str | None:
    """The server of a `/mcp/<server>` endpoint, else None."""
    return None if endpoint in (ALL, PERMISSION) or endpoint.startswith(VIEW) else endpoint


# --- what a client sees (SPEC 13.2, 19) ----------------------------------------------------------


def within(endpoint: str) -> Callable[[str], bool] | None:
    """The endpoint's own narrowing: its view's selection on `v/<view>` (nothing in it when the
    view is gone), else None."""
    view = toolview_name(endpoint)
    if view is None:
        return None
    return toolviewstore.selection_of(view) or (lambda registered: False)


def visible_for(endpoint: str, token: ApiToken | None) -> Callable[[str], bool] | None:
    """Which registered names a client of `endpoint` with `token` sees; None: every one."""
    scope, own = cache.scope(token), within(endpoint)
    if scope is None or own is None:
        return own if scope is None else scope
    return lambda registered: own(registered) and scope(registered)


def endpoint_tools(endpoint: str, token: ApiToken | None, connected_only: bool = True) -> list[Tool]:
    rows = Tool.objects.select_related("server")
    server = server_of(endpoint)
    if server is not None:
        rows = rows.filter(server__name=server)
    if connected_only:
        rows = rows.filter(server__enabled=True, server__state=ServerState.CONNECTED)
    view = toolview_name(endpoint)
    # A view's tools are read by its patterns, not picked out of every tool.
    rows = toolviewstore.prefilter(
        rows, cache.scope(token), toolviewstore.selection_of(view) if view else None
    )
    return toolviewstore.narrow(
        rows.order_by("server__name", "position", "tool_name"), visible_for(endpoint, token)
    )


def exposed(tool: Tool, endpoint: str) -> str:
    if server_of(endpoint) is not None:
        return tool.tool_name
    return names.exposed_name(tool.server.name, tool.tool_name)


def tool_entry(tool: Tool, endpoint: str) -> dict:
    entry = {
        "name": exposed(tool, endpoint),
        "description": tool.description,
        "inputSchema": tool.input_schema,
    }
    if tool.title:
        entry["title"] = tool.title
    if tool.annotations:
        entry["annotations"] = tool.annotations
    if tool.output_schema:
        entry["outputSchema"] = tool.output_schema
    if tool.meta:
        entry["_meta"] = tool.meta  # MCP Apps' `ui.resourceUri` and `ui.visibility` (SPEC 20.5)
    return entry


def tool_list(endpoint: str, token: ApiToken | None) -> list[dict]:
    """The tools a client of `endpoint` with `token` sees (also what list_changed compares)."""
    if endpoint == PERMISSION:
        return [
            {
                "name": PERMISSION_TOOL,
                "description": "Ask a person in the Agenvoy console to approve or deny a tool call "
                "of yours; answers {behavior: allow, updatedInput} or {behavior: deny, message}.",
                "inputSchema": PERMISSION_SCHEMA,
            }
        ]
    return [tool_entry(t, endpoint) for t in endpoint_tools(endpoint, token)]


def find_tool(endpoint: str, name: str, token: ApiToken | None) -> Tool | None:
    """The registered tool behind an exposed name, among those the client sees; tools of
    servers that are down count too (a call to one gets the server's 503 message, not
    "unknown tool"). A name the client does not see is looked up no further than one it
    could see, so a hidden tool and a missing one take the same steps."""
    visible = visible_for(endpoint, token)
    rows = Tool.objects.select_related("server")
    server = server_of(endpoint)
    if server is not None:
        registered = names.registered_name(server, name)
        if not toolviewstore.holds(visible, registered):
            return None
        return rows.filter(server__name=server, tool_name=name).first()
    first, sep, tool = name.partition(names.SEP)
    if (
        sep
        and names.is_valid_server_name(first)
        and toolviewstore.holds(visible, names.registered_name(first, tool))
    ):
        hit = rows.filter(server__name=first, tool_name=tool).first()
        if hit is not None and exposed(hit, ALL) == name:
            return hit
    # A shortened name: only the shortening itself can say which tool it stands for.
    if not names.may_be_shortened(name):
        return None
    seen = endpoint_tools(endpoint, token, connected_only=False)
    return next((t for t in seen if exposed(t, ALL) == name), None)


def admits(endpoint: str | None, token: ApiToken) -> bool:
    """Whether `endpoint` is one this token may open: `/mcp/<server>` of a configured server
    (for a token limited to views, one with a tool in its views), `/mcp/v/<view>` of a view
    (of its own views, for a limited token). Anything else answers HTTP 404."""
    if endpoint is None:
        return False
    if endpoint in (ALL, PERMISSION):
        return True
    scope = cache.scope(token)
    view = toolview_name(endpoint)
    if view is not None:
        return cache.toolview(view) is not None and (scope is None or view in scope.views)
    if not cache.server_exists(endpoint):
        return False
    if scope is None:
        return True
    tools = Tool.objects.filter(server__name=endpoint).values_list("registered_name", flat=True)
    return any(scope(registered) for registered in tools)


def instructions_for(endpoint: str, token: ApiToken | None) -> str:
    """SPEC 13.1: the block of SPEC 6 for the servers the client sees; a server's own text on
    its path; on `/mcp/v/<view>` the view's description first (SPEC 19). For a token limited to
    views, and on a view's endpoint, only servers with a tool the client sees count."""
    if endpoint == PERMISSION:
        return ""
    server = server_of(endpoint)
    if server is not None:
        return Server.objects.filter(name=server).values_list("instructions", flat=True).first() or ""
    pairs = list(Server.objects.filter(enabled=True).values_list("name", "instructions"))
    visible = visible_for(endpoint, token)
    if visible is not None:
        rows = Tool.objects.filter(server__enabled=True).values_list("server__name", "registered_name")
        servers = {server for server, registered in rows if visible(registered)}
        pairs = [(n, t) for n, t in pairs if n in servers]
    block = instructions_block(pairs)
    view = cache.toolview(toolview_name(endpoint) or "") if endpoint.startswith(VIEW) else None
    description = view.description.strip() if view is not None else ""
    return "\n\n".join(part for part in (description, block) if part)


# --- prompts, resources and the audience's lookups (SPEC 20.2, 20.5) ----------------------------


@dataclass
class Offer:
    """One audience's lists and lookups at one cache generation."""

    tools: list[dict] = field(default_factory=list)
    prompts: list[dict] = field(default_factory=list)
    resources: list[dict] = field(default_factory=list)
    templates: list[dict] = field(default_factory=list)
    # exposed prompt name -> (server, the prompt's own name)
    prompt_of: dict[str, tuple[str, str]] = field(default_factory=dict)
    # URI -> the servers that list it / whose tools name it as their UI resource
    # (`_meta.ui.resourceUri`, SPEC 20.5)
    listed: dict[str, list[str]] = field(default_factory=dict)
    ui: dict[str, list[str]] = field(default_factory=dict)
    # (server, template string, parsed template), in listing order
    patterns: list[tuple[str, str, UriTemplate]] = field(default_factory=list)
    # a tool's own name -> the registered names of the tools of that name (SPEC 20.5)
    own_tools: dict[str, list[str]] = field(default_factory=dict)
    # (method, protocol version) -> the list result as the SDK shapes it for that era
    _wire: dict[tuple[str, str], dict] = field(default_factory=dict)

    def result(self, method: str) -> dict:
        """A list method's result, before the SDK shapes it for the era."""
        key, attr = LISTS[method]
        return {**LISTED, key: getattr(self, attr)}

    def wire(self, method: str, version: str) -> dict:
        """The list result exactly as the SDK's own result check would shape it for `version`
        (`methods.serialize_server_result`), done once per Offer and era: a list of 10,000
        entries took the SDK longer to check again than everything else a request costs."""
        key = (method, version)
        if key not in self._wire:
            self._wire[key] = methods.serialize_server_result(method, version, self.result(method))
        return self._wire[key]


# The fields 2026-07-28 requires of a list result (never cached by the client: lists change);
# the SDK drops them for 2025 sessions.
LISTED = {"resultType": "complete", "ttlMs": 0, "cacheScope": "private"}
# list method -> (the result's key, the Offer's attribute)
LISTS = {
    "tools/list": ("tools", "tools"),
    "prompts/list": ("prompts", "prompts"),
    "resources/list": ("resources", "resources"),
    "resources/templates/list": ("resourceTemplates", "templates"),
}


def servers_seen(endpoint: str, token: ApiToken | None) -> Callable[[str], bool]:
    """Whether the audience sees a server's prompts and resources (SPEC 20.2)."""
    only = server_of(endpoint)
    view = toolview_name(endpoint)
    selection = toolviewstore.selection_of(view) if view is not None else None
    scope = cache.scope(token)

    def seen(server: str) -> bool:
        if endpoint == PERMISSION or (only is not None and server != only):
            return False
        if view is not None and (selection is None or not selection.holds_server(server)):
            return False
        return scope is None or scope.holds_server(server)

    return seen


def offer(endpoint: str, token: ApiToken | None) -> Offer:
    """The audience's Offer, from memory while nothing it is built from has changed."""
    limited = token.pk if token is not None and token.view_limited else ""
    return cache.listing(f"{endpoint}\0{limited}", lambda: build(endpoint, token))


def _exposed(endpoint: str, server: str, name: str) -> str:
    return name if server_of(endpoint) is not None else names.exposed_name(server, name)


def _labelled(endpoint: str, server: str, name: str) -> str:
    """A resource's or template's `name`: prefixed `<server>__` on aggregated endpoints."""
    return name if server_of(endpoint) is not None else f"{server}{names.SEP}{name}"


def _common(row, endpoint: str, server: str) -> dict:
    entry = {"name": _labelled(endpoint, server, row.name or "")}
    for key, value in (("title", row.title), ("description", row.description), ("mimeType", row.mime_type)):
        if value:
            entry[key] = value
    if row.annotations:
        entry["annotations"] = row.annotations
    if row.meta:
        entry["_meta"] = row.meta
    return entry


def build(endpoint: str, token: ApiToken | None) -> Offer:
    """Read the rows of the connected servers the audience sees into its Offer."""
    made = Offer(tools=tool_list(endpoint, token))
    if endpoint == PERMISSION:
        return made
    seen = servers_seen(endpoint, token)
    live = Server.objects.filter(enabled=True, state=ServerState.CONNECTED)
    servers = [s for s in live.values_list("name", flat=True) if seen(s)]
    for tool in endpoint_tools(endpoint, token):
        made.own_tools.setdefault(tool.tool_name, []).append(tool.registered_name)
        uri = ui_uri(tool.meta)
        if uri is not None and tool.server.name not in made.ui.setdefault(uri, []):
            made.ui[uri].append(tool.server.name)
    if not servers:
        return made
    for prompt in Prompt.objects.filter(server__name__in=servers).select_related("server"):
        server = prompt.server.name
        exposed = _exposed(endpoint, server, prompt.name)
        made.prompt_of[exposed] = (server, prompt.name)
        entry: dict = {"name": exposed}
        for key, value in (("title", prompt.title), ("description", prompt.description)):
            if value:
                entry[key] = value
        if prompt.arguments is not None:  # `[]` as given (SPEC 20.2)
            entry["arguments"] = prompt.arguments
        if prompt.meta:
            entry["_meta"] = prompt.meta
        made.prompts.append(entry)
    for template in ResourceTemplate.objects.filter(server__name__in=servers).select_related("server"):
        server = template.server.name
        made.templates.append({"uriTemplate": template.uri_template, **_common(template, endpoint, server)})
        try:
            parsed = UriTemplate.parse(template.uri_template)
        except Exception:
            continue  # listed as the server gave it; no read can be routed by it
        made.patterns.append((server, template.uri_template, parsed))
    rows = list(Resource.objects.filter(server__name__in=servers).select_related("server"))
    for resource in rows:
        owners = made.listed.setdefault(resource.uri, [])
        if resource.server.name not in owners:
            owners.append(resource.server.name)
    for resource in rows:
        if len(claimants(made, resource.uri)) > 1:
            continue  # claimed by two servers: listed for neither (SPEC 20.2)
        entry = {"uri": resource.uri, **_common(resource, endpoint, resource.server.name)}
        if resource.size is not None:
            entry["size"] = resource.size
        made.resources.append(entry)
    return made


@dataclass(frozen=True)
class Route:
    """Where a URI is read: the one server, or every server that claims it (none: unknown)."""

    servers: tuple[str, ...]

    @property
    def server(self) -> str | None:
        return self.servers[0] if len(self.servers) == 1 else None


def claimants(made: Offer, uri: str) -> tuple[str, ...]:
    """The servers that claim `uri` (SPEC 20.2), sorted: those that list it, those with a
    template that matches it, those with a tool whose app it is. No way of claiming outranks
    another: a server listing another's app or a URI of its template would take its reads."""
    found = set(made.listed.get(uri, ())) | set(made.ui.get(uri, ()))
    # A template's literal head before its first expression is a prefix of every URI it
    # matches: checked first, so a build over many resources and templates stays cheap.
    found |= {
        server
        for server, text, parsed in made.patterns
        if uri.startswith(text.split("{", 1)[0]) and _matches(parsed, uri)
    }
    return tuple(sorted(found))


def _matches(parsed: UriTemplate, uri: str) -> bool:
    try:
        return parsed.match(uri) is not None
    except Exception:
        return False


def route(made: Offer, uri: str) -> Route:
    """Where a read of `uri` goes (SPEC 20.2): the one server that claims it; several, a
    collision; none, an unknown URI."""
    return Route(claimants(made, uri))


def template_server(made: Offer, template: str) -> str | None:
    """The server of a template reference (completions), when exactly one lists it."""
    servers = {server for server, text, _parsed in made.patterns if text == template}
    return servers.pop() if len(servers) == 1 else None
