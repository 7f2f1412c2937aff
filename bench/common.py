"""What every benchmark shares: the Figure record, percentiles, a live console, a direct SDK
client to the same server script, and an in-process Django for the page and allow-list runs."""

import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.live import PYTHON, SERVERS, Console, our_server, wait_until  # noqa: E402

BENCH = ROOT / "bench"
MANY = BENCH / "servers" / "many.py"
ECHO = SERVERS / "echo.py"
ECHO_TOOL = "mcp__echo__echo"
ECHO_ARGS = {"text": "hello"}

__all__ = ["Console", "our_server", "wait_until", "PYTHON", "ROOT"]


@dataclass
class Figure:
    """One measured figure, its baseline from the same run, and its target (if it has one)."""

    bench: str
    name: str
    value: float | None
    unit: str
    baseline: float | None = None
    baseline_name: str = ""
    target: str = ""
    ok: bool | None = None  # None: no target, shown for context
    note: str = ""
    extra: dict = field(default_factory=dict)
    valid: bool = True  # False: a precondition failed, the value is not what the figure means

    @property
    def status(self) -> str:
        if self.value is None:
            return "ERROR"
        if not self.valid:
            return "N/A"
        if self.ok is None:
            return "-"
        return "PASS" if self.ok else "MISS"

    def as_dict(self) -> dict:
        return {**asdict(self), "status": self.status}


def below(value: float, limit: float) -> bool:
    return value < limit


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(p / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def ms(seconds: float) -> float:
    return seconds * 1000.0


# --- a live console ---------------------------------------------------------------------------


@contextlib.contextmanager
def console(servers: dict | None, env: dict | None = None, start: bool = True):
    """A `manage.py serve` of its own (tests.live.Console) in a temporary folder."""
    base = Path(tempfile.mkdtemp(prefix="agenvoy-bench-"))
    # The benchmarks repeat one call thousands of times on purpose: no loop guard (SPEC 25.2)
    # unless a benchmark asks for one.
    env = {"AGENVOY_LOG_LEVEL": "WARNING", "AGENVOY_REPEAT_LIMIT": "0", **(env or {})}
    pg = None
    if os.environ.get("BENCH_DATABASE") == "postgres":
        # The scale-out layout's database: a PostgreSQL server of its own for this console.
        from tests.services import Postgres

        pg = Postgres(base)
        env["DATABASE_URL"] = pg.url
    try:
        con = Console(base, servers, env)
        try:
            if start:
                con.start()
            yield con
        finally:
            con.close()
    finally:
        if pg is not None:
            pg.stop()
        if os.environ.get("BENCH_KEEP") == "1":
            print(f"   (kept {base})", flush=True)
        else:
            shutil.rmtree(base, ignore_errors=True)


async def for_seconds(seconds: float, tasks: int, once) -> tuple[int, int, float]:
    """`tasks` loops, each awaiting `once()` until `seconds` are up: a true answer is one done, a
    false one or an exception one error; (done, errors, elapsed)."""
    stop = time.perf_counter() + seconds
    done = errors = 0

    async def worker() -> None:
        nonlocal done, errors
        while time.perf_counter() < stop:
            try:
                ok = bool(await once())
            except Exception:
                ok = False
            done += ok
            errors += not ok

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(tasks)))
    return done, errors, time.perf_counter() - started


def echo_servers() -> dict:
    return {"echo": our_server("echo.py")}


def many_server(name: str, tools: int) -> dict:
    return {"command": PYTHON, "args": [str(MANY), "--name", name], "env": {"MANY_TOOLS": str(tools)}}


# --- a direct SDK client to the same server script -------------------------------------------


@contextlib.asynccontextmanager
async def direct_client(script: Path = ECHO, *args: str, env: dict | None = None):
    """An `mcp` SDK Client over stdio to a server script, as the console itself connects."""
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=PYTHON, args=[str(script), *args], env=env)
    with open(os.devnull, "w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode="auto") as client:
            yield client


def async_http(con: Console, connections: int = 4, token: str | None = None):
    """A keep-alive async HTTP client (httpx2) with the console's (admin) token, or `token`."""
    import httpx2

    limits = httpx2.Limits(max_connections=connections, max_keepalive_connections=connections)
    return httpx2.AsyncClient(
        base_url=con.url,
        limits=limits,
        timeout=120,
        headers={"Authorization": f"Bearer {token or con.token}"},
    )


def echo_body(mode: str = "auto", **extra) -> dict:
    return {"name": ECHO_TOOL, "arguments": ECHO_ARGS, "mode": mode, **extra}


# --- an in-process Django (pages, allow-list) --------------------------------------------------

_django_dir: Path | None = None


def django_setup() -> Path:
    """Django with a temporary data folder and $AGENVOY_HOME, migrated; returns the folder."""
    global _django_dir
    if _django_dir is not None:
        return _django_dir
    _django_dir = Path(tempfile.mkdtemp(prefix="agenvoy-bench-django-"))
    os.environ["AGENVOY_DATA_DIR"] = str(_django_dir / "data")
    os.environ["AGENVOY_HOME"] = str(_django_dir / "home")
    os.environ["DJANGO_SECRET_KEY"] = "bench"
    os.environ["DJANGO_DEBUG"] = "0"
    os.environ.setdefault("AGENVOY_REPEAT_LIMIT", "0")  # as `console`: repeats on purpose
    os.environ["DJANGO_ALLOWED_HOSTS"] = "testserver,127.0.0.1,localhost"
    os.environ.pop("DATABASE_URL", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agenvoy_site.settings")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0, interactive=False)
    return _django_dir


def django_teardown() -> None:
    global _django_dir
    if _django_dir is not None:
        from django.db import connections

        connections.close_all()
        shutil.rmtree(_django_dir, ignore_errors=True)
        _django_dir = None


# --- processes ---------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of one process, its children excluded."""
    import psutil

    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def rss_mb(pid: int) -> float:
    import psutil

    return psutil.Process(pid).memory_info().rss / 2**20


def children_cpu_seconds(pid: int) -> float:
    """CPU time of the live child processes of `pid` (the MCP servers of a serve)."""
    import psutil

    total = 0.0
    for child in psutil.Process(pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            t = child.cpu_times()
            total += t.user + t.system
    return total


class Stopwatch:
    def __init__(self) -> None:
        self.start = time.perf_counter()

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start
