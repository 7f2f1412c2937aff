"""The layers of docs/architecture.md, checked. Every module under mcpcore/ and agenvoy_site/
(migrations aside) has a layer and a tier in it; it imports only its own layer's tiers at or
below its own, and the layers below it that it may import; the three doors (web/, api/,
mcpserver/) never import each other; no import cycle runs between modules; mcpcore/'s top
level holds at most 24 modules, all below the doors but the process wiring. tests/ may import
anything that exists; bench/ only what a user of the product could (below).

Imports are read with `ast`, all of them (inside functions and `TYPE_CHECKING` blocks too): an
import deferred to a function is still a dependency."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("mcpcore", "agenvoy_site")

# Bottom to top: (layer, its tiers bottom to top, the layers below it that it may import). A
# pattern ending in ".*" stands for a package and everything in it. Inside a layer a module
# imports its own tier and the tiers below it, never one above. The doors and the supervisor
# sit side by side: the doors reach the supervisor only through the database, the channel
# layer and `calls.LocalSupervisor`; only the process wiring (runtime) and the entry points
# import both. Keep in step with docs/architecture.md.
LAYERS: list[tuple[str, list[set[str]], set[str]]] = [
    (
        "pure",
        [
            {
                "mcpcore",
                "mcpcore.names",
                "mcpcore.allowlist",
                "mcpcore.results",
                "mcpcore.instructions",
                "mcpcore.choices",
                "mcpcore.onetap",
                "mcpcore.elicitation",
            },
            {"mcpcore.gate", "mcpcore.rules", "mcpcore.toolviews"},
            {"mcpcore.schemas"},
        ],
        set(),
    ),
    (
        "data",
        [
            {"mcpcore.models", "mcpcore.channellayer"},  # the rows, the one-process channel layer
            {"mcpcore.db.*"},  # database threads, the kept rows, the call rows' SQL
            {
                "mcpcore.apps",
                "mcpcore.audit",
                "mcpcore.bearer",
                "mcpcore.files",
                "mcpcore.metrics",
                "mcpcore.oauth.*",  # both OAuth sides: upstream servers (16), apps that sign in (21)
                "mcpcore.retention",
            },
            {"mcpcore.control"},  # the channel-layer messages (they read rows)
            {"mcpcore.serverconfig", "mcpcore.toolviewstore"},  # changes that tell the others
        ],
        {"pure"},
    ),
    # The call layer (calls/): the path, recording and ending calls, approvals, replies,
    # questions, notifications.
    ("calls", [{"mcpcore.calls.*"}], {"pure", "data"}),
    ("supervisor", [{"mcpcore.supervisor.*"}], {"pure", "data", "calls"}),
    ("web", [{"mcpcore.web.*"}], {"pure", "data", "calls"}),
    ("api", [{"mcpcore.api.*"}], {"pure", "data", "calls"}),
    ("mcpserver", [{"mcpcore.mcpserver.*"}], {"pure", "data", "calls"}),
    ("runtime", [{"mcpcore.runtime"}], {"pure", "data", "calls", "supervisor", "web", "api", "mcpserver"}),
    (
        "entry points",
        [{"mcpcore.management.*", "agenvoy_site.*"}],
        {"pure", "data", "calls", "supervisor", "web", "api", "mcpserver", "runtime"},
    ),
]
DOORS = ("web", "api", "mcpserver")
TOP_LEVEL_MOST = 24  # modules directly in mcpcore/ (its __init__ counted)
WIRING = {"mcpcore.runtime"}  # the one top-level module above the doors

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
# A benchmark uses the product as a user could: through its doors (HTTP, MCP, commands, files),
# or, for a measure of one function, the product's public modules below the doors (what
# `manage.py shell` gives an operator); of the tests, only the harness that runs a live console
# and its Redis and PostgreSQL.
BENCH_LAYERS = {"pure", "data"}
BENCH_TESTS = ("tests", "tests.live", "tests.services")


def modules(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if "migrations" in path.parts or "node_modules" in path.parts:
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


def graph(found: dict[str, Path], targets: dict[str, Path] | None = None) -> dict[str, dict[str, int]]:
    """Module -> {project module it imports: line}; `targets`: the modules an import may name
    (default: `found`)."""
    targets = found if targets is None else targets
    edges: dict[str, dict[str, int]] = {}
    for name, path in found.items():
        edges[name] = {}
        for target, line in imported(name, path):
            while target not in targets and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in targets and target != name and not _is_parent(target, name):
                edges[name].setdefault(target, line)
    return edges


def _is_parent(package: str, name: str) -> bool:
    # `from . import x` inside a package names its __init__ only on the way to x.
    return name.startswith(package + ".")


def matches(name: str, pattern: str) -> bool:
    if pattern.endswith(".*"):
        return name == pattern[:-2] or name.startswith(pattern[:-1])
    return name == pattern


def place_of(name: str) -> tuple[int, int] | None:
    """(layer, tier) of a module; None when it has none."""
    for index, (_title, tiers, _below) in enumerate(LAYERS):
        for tier, members in enumerate(tiers):
            if any(matches(name, m) for m in members):
                return index, tier
    return None


def layer_of(name: str) -> int | None:
    place = place_of(name)
    return None if place is None else place[0]


def forbidden_layers(
    edges: dict[str, dict[str, int]], found: dict[str, Path], root: Path = ROOT
) -> list[str]:
    problems = []
    for name, targets in sorted(edges.items()):
        for target, line in sorted(targets.items()):
            mine, theirs = place_of(name), place_of(target)
            if mine is None or theirs is None:
                continue
            where = f"{found[name].relative_to(root)}:{line}: {name}"
            title, their_title = LAYERS[mine[0]][0], LAYERS[theirs[0]][0]
            if mine[0] == theirs[0]:
                if theirs[1] > mine[1]:
                    problems.append(
                        f"{where} ({title}, tier {mine[1]}) imports {target} (tier {theirs[1]}), "
                        "a tier above its own"
                    )
            elif their_title not in LAYERS[mine[0]][2]:
                if title in DOORS and their_title in DOORS:
                    problems.append(
                        f"{where} ({title}) imports {target} ({their_title}): doors never import each other"
                    )
                else:
                    problems.append(
                        f"{where} ({title}) imports {target} ({their_title}), which its layer may not"
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


def top_level_problems(found: dict[str, Path]) -> list[str]:
    top = [n for n, p in found.items() if n == "mcpcore" or (n.count(".") == 1 and p.name != "__init__.py")]
    top = [n for n in top if n.startswith("mcpcore")]
    problems = []
    if len(top) > TOP_LEVEL_MOST:
        problems.append(f"mcpcore/ holds {len(top)} modules at its top level, more than {TOP_LEVEL_MOST}")
    doors = min(i for i, (title, _t, _b) in enumerate(LAYERS) if title in DOORS)
    for name in sorted(top):
        layer = layer_of(name)
        if name not in WIRING and layer is not None and layer >= doors:
            problems.append(
                f"{name} ({LAYERS[layer][0]}) sits at mcpcore/'s top level: it belongs in its door's folder"
            )
    return problems


def defined(path: Path) -> set[str]:
    """The names a module defines at its top level (functions, classes, assignments, imports)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.If, ast.Try)):
            names |= {
                n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
            }
    return names


def unresolved(found: dict[str, Path], product: dict[str, Path], root: Path = ROOT) -> list[str]:
    """Imports of `mcpcore`, `agenvoy_site` or `tests` modules that do not exist (a stale path
    after a move)."""
    paths = {**product, **found}
    known = set(paths)
    problems = []
    for name, path in sorted(found.items()):
        for target, line in imported(name, path):
            if not target.startswith(("mcpcore.", "agenvoy_site.", "tests.")) or target in known:
                continue
            parent, _, last = target.rpartition(".")
            if parent in known and last in defined(paths[parent]):  # a name from a module
                continue
            problems.append(f"{path.relative_to(root)}:{line}: {name} imports {target}, which does not exist")
    return sorted(set(problems))


def bench_problems(root: Path = ROOT) -> list[str]:
    product = modules(root)
    tests = modules(root, ("tests",))
    bench = modules(root, ("bench",))
    problems = []
    for name, targets in sorted(graph(bench, {**product, **tests, **bench}).items()):
        for target, line in sorted(targets.items()):
            where = f"{bench[name].relative_to(root)}:{line}: {name} imports {target}"
            if target in bench:
                continue
            if target in tests:
                if target not in BENCH_TESTS:
                    problems.append(
                        f"{where}: of the tests, a benchmark uses only {', '.join(BENCH_TESTS[1:])}"
                    )
                continue
            layer = layer_of(target)
            private = any(part.startswith("_") for part in target.split("."))
            if layer is None or LAYERS[layer][0] not in BENCH_LAYERS or private:
                problems.append(f"{where}: not what a user of the product could use")
    return problems


def test_it_places_every_module_in_a_layer():
    missing = [name for name in modules() if place_of(name) is None]
    assert missing == [], f"give these a layer in tests/test_layers.py and docs/architecture.md: {missing}"


def test_it_finds_no_module_importing_a_layer_or_tier_it_may_not():
    found = modules()
    problems = forbidden_layers(graph(found), found)
    assert problems == [], "\n".join(problems)


def test_it_finds_no_import_cycle_between_modules():
    assert cycles(graph(modules())) == []


def test_it_keeps_pure_modules_and_the_mcp_sdk_where_they_belong():
    problems = forbidden_imports(modules())
    assert problems == [], "\n".join(problems)


def test_it_keeps_mcpcores_top_level_short_and_below_the_doors():
    assert top_level_problems(modules()) == []


def test_it_finds_every_import_of_the_tests_and_benchmarks_in_the_tree():
    product = modules()
    found = {**modules(ROOT, ("tests",)), **modules(ROOT, ("bench",))}
    problems = unresolved(found, product)
    assert problems == [], "\n".join(problems)


def test_it_lets_a_benchmark_use_only_what_a_user_of_the_product_could():
    problems = bench_problems()
    assert problems == [], "\n".join(problems)


def test_it_reports_a_broken_rule(tmp_path):
    """The checks above can fail: stand-in modules that break each rule are caught by it: a pure
    module importing a door, a door importing the MCP SDK, a cycle, a tier importing the one
    above it, a door importing another door, a lower layer importing the call layer, a door at
    the top level, and a benchmark reaching into a private module and a test helper."""
    for package in (*PACKAGES, "mcpcore/web", "mcpcore/api", "mcpcore/db", "mcpcore/calls", "tests", "bench"):
        (tmp_path / package).mkdir(parents=True, exist_ok=True)
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "mcpcore" / "names.py").write_text("from .web.views import page\n")
    (tmp_path / "mcpcore" / "web" / "views.py").write_text("from mcpcore import names\nimport mcp_types\n")
    (tmp_path / "mcpcore" / "models.py").write_text("from . import control\n")
    (tmp_path / "mcpcore" / "control.py").write_text("")
    (tmp_path / "mcpcore" / "api" / "views.py").write_text("from ..web.views import page\n")
    (tmp_path / "mcpcore" / "db" / "_lane.py").write_text("")
    (tmp_path / "mcpcore" / "db" / "cache.py").write_text("from ..calls.approvals import grant\n")
    (tmp_path / "mcpcore" / "calls" / "approvals.py").write_text("")
    (tmp_path / "tests" / "rows.py").write_text("")
    (tmp_path / "bench" / "b.py").write_text("from mcpcore.db import _lane\nfrom tests import rows\n")
    found = modules(tmp_path)
    edges = graph(found)
    assert edges["mcpcore.names"] == {"mcpcore.web.views": 1}
    assert forbidden_layers(edges, found, tmp_path) == [
        "mcpcore/api/views.py:1: mcpcore.api.views (api) imports mcpcore.web.views (web): "
        "doors never import each other",
        "mcpcore/db/cache.py:1: mcpcore.db.cache (data) imports mcpcore.calls.approvals (calls), "
        "which its layer may not",
        "mcpcore/models.py:1: mcpcore.models (data, tier 0) imports mcpcore.control (tier 3), "
        "a tier above its own",
        "mcpcore/names.py:1: mcpcore.names (pure) imports mcpcore.web.views (web), which its layer may not",
    ]
    assert cycles(edges) == [["mcpcore.names", "mcpcore.web.views"]]
    assert forbidden_imports(found, tmp_path) == [
        "mcpcore/web/views.py:2: mcpcore.web.views imports mcp_types: only supervisor/ and mcpserver/ "
        "import the MCP SDK"
    ]
    for i in range(TOP_LEVEL_MOST):
        (tmp_path / "mcpcore" / f"extra{i}.py").write_text("")
    assert top_level_problems(modules(tmp_path)) == [
        f"mcpcore/ holds {TOP_LEVEL_MOST + 4} modules at its top level, more than {TOP_LEVEL_MOST}"
    ]
    assert bench_problems(tmp_path) == [
        "bench/b.py:1: bench.b imports mcpcore.db._lane: not what a user of the product could use",
        "bench/b.py:2: bench.b imports tests.rows: of the tests, a benchmark uses only tests.live, tests.services",
    ]
    (tmp_path / "tests" / "t.py").write_text("from mcpcore import store\n")
    assert unresolved(modules(tmp_path, ("tests",)), found, tmp_path) == [
        "tests/t.py:1: tests.t imports mcpcore.store, which does not exist"
    ]
