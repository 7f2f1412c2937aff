"""The layers of docs/architecture.md, checked: every module under mcpcore/ and agenvoy_site/
(migrations aside) has a layer, imports only from its own layer and the layers below it that
it may import, and no import cycle runs between modules. Imports are read with `ast`, all of them (inside functions and
`TYPE_CHECKING` blocks too): an import deferred to a function is still a dependency."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("mcpcore", "agenvoy_site")

# Bottom to top: (layer, its modules, the layers below it that it may import). A module may
# always import its own layer. A name ending in ".*" stands for a package and everything in
# it. The web doors and the supervisor sit side by side: the doors reach the supervisor only
# through the database, the channel layer and `calls.LocalSupervisor`; only the process wiring
# (runtime) and the entry points import both. Keep in step with docs/architecture.md.
LAYERS: list[tuple[str, set[str], set[str]]] = [
    (
        "pure",
        {
            "mcpcore",
            "mcpcore.names",
            "mcpcore.allowlist",
            "mcpcore.results",
            "mcpcore.gate",
            "mcpcore.rules",
            "mcpcore.instructions",
            "mcpcore.toolviews",
            "mcpcore.choices",
            "mcpcore.onetap",
            "mcpcore.schemas",
        },
        set(),
    ),
    (
        "data",
        {
            "mcpcore.models",
            "mcpcore.db",
            "mcpcore.db.cache",
            "mcpcore.db.callsql",
            "mcpcore.files",
            "mcpcore.control",
            "mcpcore.serverconfig",
            "mcpcore.apps",
            "mcpcore.channellayer",
            "mcpcore.metrics",
            "mcpcore.retention",
            "mcpcore.toolviewstore",
            "mcpcore.oauth",
        },
        {"pure"},
    ),
    ("calls", {"mcpcore.calls", "mcpcore.notify", "mcpcore.api.claude_hooks"}, {"pure", "data"}),
    ("supervisor", {"mcpcore.supervisor.*"}, {"pure", "data", "calls"}),
    (
        "doors",
        {
            "mcpcore.web.views",
            "mcpcore.web.forms",
            "mcpcore.web.live",
            "mcpcore.web.urls",
            "mcpcore.web.consumers",
            "mcpcore.web.routing",
            "mcpcore.web.context_processors",
            "mcpcore.web.staticserve",
            "mcpcore.api.*",
            "mcpcore.mcpserver.*",
        },
        {"pure", "data", "calls"},
    ),
    ("runtime", {"mcpcore.runtime"}, {"pure", "data", "calls", "supervisor", "doors"}),
    (
        "entry points",
        {"mcpcore.management.*", "agenvoy_site.*"},
        {"pure", "data", "calls", "supervisor", "doors", "runtime"},
    ),
]

# Pure modules: no Django request or response, no Channels, no MCP (STYLE, habit 4).
PURE_MAY_NOT_IMPORT = (
    "django.http",
    "django.shortcuts",
    "django.views",
    "channels",
    "mcp",
    "mcp_types",
    "starlette",
)
# Only the MCP client side (supervisor) and the server side (mcpserver) import the SDK.
MCP = ("mcp", "mcp_types")
MAY_IMPORT_MCP = ("mcpcore.supervisor.*", "mcpcore.mcpserver.*")


def modules(root: Path = ROOT) -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imported(name: str, path: Path) -> list[tuple[str, int]]:
    """Every module name `path` imports (absolute, relative ones resolved), with its line."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            # `from pkg import mod` imports the module pkg.mod when there is one.
            out += [(f"{prefix}.{alias.name}", node.lineno) for alias in node.names]
            out.append((prefix, node.lineno))
    return out


def graph(found: dict[str, Path]) -> dict[str, dict[str, int]]:
    """Module -> {project module it imports: line}."""
    edges: dict[str, dict[str, int]] = {}
    for name, path in found.items():
        edges[name] = {}
        for target, line in imported(name, path):
            while target not in found and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in found and target != name and not _is_parent(target, name):
                edges[name].setdefault(target, line)
    return edges


def _is_parent(package: str, name: str) -> bool:
    # `from . import x` inside a package names its __init__ only on the way to x.
    return name.startswith(package + ".")


def matches(name: str, pattern: str) -> bool:
    if pattern.endswith(".*"):
        return name == pattern[:-2] or name.startswith(pattern[:-1])
    return name == pattern


def layer_of(name: str) -> int | None:
    for index, (_title, members, _below) in enumerate(LAYERS):
        if any(matches(name, m) for m in members):
            return index
    return None


def forbidden_layers(
    edges: dict[str, dict[str, int]], found: dict[str, Path], root: Path = ROOT
) -> list[str]:
    problems = []
    for name, targets in sorted(edges.items()):
        for target, line in sorted(targets.items()):
            mine, theirs = layer_of(name), layer_of(target)
            if mine is None or theirs is None or mine == theirs:
                continue
            if LAYERS[theirs][0] not in LAYERS[mine][2]:
                problems.append(
                    f"{found[name].relative_to(root)}:{line}: {name} ({LAYERS[mine][0]}) imports "
                    f"{target} ({LAYERS[theirs][0]}), which its layer may not"
                )
    return problems


def cycles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, {}):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def forbidden_imports(found: dict[str, Path], root: Path = ROOT) -> list[str]:
    problems = []
    for name, path in sorted(found.items()):
        pure = layer_of(name) == 0
        mcp_allowed = any(matches(name, m) for m in MAY_IMPORT_MCP)
        for target, line in imported(name, path):
            where = f"{path.relative_to(root)}:{line}: {name} imports {target}"
            if pure and any(matches(target, f"{p}.*") for p in PURE_MAY_NOT_IMPORT):
                problems.append(f"{where}, which a pure module may not")
            elif not mcp_allowed and any(matches(target, f"{p}.*") for p in MCP):
                problems.append(f"{where}: only supervisor/ and mcpserver/ import the MCP SDK")
    return sorted(set(problems))


def test_it_places_every_module_in_a_layer():
    missing = [name for name in modules() if layer_of(name) is None]
    assert missing == [], f"give these a layer in tests/test_layers.py and docs/architecture.md: {missing}"


def test_it_finds_no_module_importing_a_layer_it_may_not():
    found = modules()
    problems = forbidden_layers(graph(found), found)
    assert problems == [], "\n".join(problems)


def test_it_finds_no_import_cycle_between_modules():
    assert cycles(graph(modules())) == []


def test_it_keeps_pure_modules_and_the_mcp_sdk_where_they_belong():
    problems = forbidden_imports(modules())
    assert problems == [], "\n".join(problems)


def test_it_reports_a_broken_rule(tmp_path):
    """The checks above can fail: two stand-in modules, a pure one importing a door and a
    door importing the MCP SDK, in a cycle, are caught by each check."""
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "mcpcore" / "names.py").write_text("from . import views\n")
    (tmp_path / "mcpcore" / "views.py").write_text("from mcpcore import names\nimport mcp_types\n")
    found = modules(tmp_path)
    edges = graph(found)
    assert edges["mcpcore.names"] == {"mcpcore.web.views": 1}
    assert forbidden_layers(edges, found, tmp_path) == [
        "mcpcore/names.py:1: mcpcore.names (pure) imports mcpcore.views (doors), which its layer may not"
    ]
    assert cycles(edges) == [["mcpcore.names", "mcpcore.web.views"]]
    assert forbidden_imports(found, tmp_path) == [
        "mcpcore/views.py:2: mcpcore.views imports mcp_types: only supervisor/ and mcpserver/ import the MCP SDK"
    ]
