"""Traces' cost (SPEC 27): `POST /v1/mcp/call` (auto, echo over stdio, one keep-alive raw-HTTP
client) on three consoles alive at once, called in alternating blocks so the machine's drift
hits all alike:

- `without`: a build without tracing (BENCH_TRACES_BASE, default `d8447e2`, the commit before
  it), checked out in a temporary `git worktree` that uses this tree's `.venv` (same
  requirements) and migrates its own database;
- `off`: this build with no `OTEL_EXPORTER_OTLP_*` endpoint (nothing set up);
- `on`: this build exporting every span (the default sampler) over OTLP/HTTP to a local
  receiver in this process that answers each export at once.

Figures: p50 of each, and the costs off - without (SPEC 27: < 0.05 ms) and on - off (issue 46:
< 0.3 ms), each the median over rounds of the difference between the two consoles' block p50s.
"""

import asyncio
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
from contextlib import AsyncExitStack, ExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from bench.common import Figure, console, echo_body, echo_servers, ms, percentile
from bench.overhead import console_calls
from bench.rawhttp import RawHttp
from tests.live import PYTHON, ROOT, Console, free_port, wait_until

NAME = "traces"
BASE = os.environ.get("BENCH_TRACES_BASE", "d8447e2")
CALLS = 2000
BLOCK = 25
WARMUP = 100
OFF_TARGET_MS = 0.05
ON_TARGET_MS = 0.3


class _Sink(BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver that takes each export and answers 200 with an empty response."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@contextmanager
def receiver():
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), _Sink)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class BaseConsole(Console):
    """A console of the build at `tree` (its own manage.py and migrations)."""

    def __init__(self, tree: Path, base: Path, servers: dict) -> None:
        self.tree = tree
        super().__init__(base, servers, {"AGENVOY_LOG_LEVEL": "WARNING"})

    def _fresh_database(self) -> None:
        self._manage("migrate", "--noinput", "-v0")

    def _manage(self, *args: str) -> None:
        subprocess.run([PYTHON, str(self.tree / "manage.py"), *args], env=self.env, cwd=self.tree, check=True)

    def start(self) -> "BaseConsole":
        self.log = open(self.base / f"serve-{self.port}.log", "ab")
        self.proc = subprocess.Popen(
            [PYTHON, str(self.tree / "manage.py"), "serve", "--port", str(self.port)],
            env=self.env,
            cwd=self.tree,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_until(self._answers, 60, what="base serve answering")
        return self


@contextmanager
def base_console(servers: dict):
    """A console of BASE, from a temporary worktree removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="agenvoy-bench-traces-"))
    tree = folder / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(tree), BASE], check=True)
    try:
        (tree / ".venv").symlink_to((ROOT / ".venv").resolve())
        con = BaseConsole(tree, folder / "console", servers)
        try:
            yield con.start()
        finally:
            con.close()
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
        shutil.rmtree(folder, ignore_errors=True)


async def measure(consoles: dict) -> dict[str, list[list[float]]]:
    """Seconds per call, per console, per round (one block of each console a round)."""
    runs: dict[str, list[list[float]]] = {name: [] for name in consoles}
    body = echo_body()
    async with AsyncExitStack() as stack:
        clients = {
            name: await stack.enter_async_context(RawHttp(con.url, con.token))
            for name, con in consoles.items()
        }
        for http in clients.values():
            await console_calls(http, WARMUP, body)
        names = list(clients)
        for block in range(CALLS // BLOCK):
            # Each block in a rotated order: none is always first after the others' calls.
            for name in names[block % len(names) :] + names[: block % len(names)]:
                runs[name].append(await console_calls(clients[name], BLOCK, body))
    return runs


def run() -> list[Figure]:
    with ExitStack() as stack:
        url = stack.enter_context(receiver())
        consoles = {
            "without": stack.enter_context(base_console(echo_servers())),
            "off": stack.enter_context(console(echo_servers())),
            "on": stack.enter_context(
                console(echo_servers(), {"OTEL_EXPORTER_OTLP_ENDPOINT": url, "OTEL_SERVICE_NAME": "bench"})
            ),
        }
        for con in consoles.values():
            con.wait_connected("echo")
        runs = asyncio.run(measure(consoles))
    p50 = {name: ms(percentile([t for block in rounds for t in block], 50)) for name, rounds in runs.items()}
    # Each cost is the median over rounds of the difference of the two blocks' p50s, taken
    # minutes apart at most: the machine's drift (it is shared) cancels within a round.
    block_p50 = {name: [ms(percentile(block, 50)) for block in rounds] for name, rounds in runs.items()}
    off = statistics.median(o - w for o, w in zip(block_p50["off"], block_p50["without"], strict=True))
    on = statistics.median(n - o for n, o in zip(block_p50["on"], block_p50["off"], strict=True))
    note = (
        f"median over {CALLS // BLOCK} rounds of the blocks' p50 difference ({BLOCK} calls a block, "
        f"rotating order); without = {BASE}"
    )
    return [
        Figure(
            NAME, "call p50, tracing off", p50["off"], "ms", p50["without"], f"p50 without tracing ({BASE})"
        ),
        Figure(NAME, "call p50, tracing on (local receiver)", p50["on"], "ms", p50["off"], "p50 tracing off"),
        Figure(
            NAME,
            "p50 cost of tracing off (off - without)",
            off,
            "ms",
            p50["without"],
            "p50 without tracing",
            f"< {OFF_TARGET_MS} ms",
            off < OFF_TARGET_MS,
            note,
        ),
        Figure(
            NAME,
            "p50 cost of tracing on (on - off)",
            on,
            "ms",
            p50["off"],
            "p50 tracing off",
            f"< {ON_TARGET_MS} ms",
            on < ON_TARGET_MS,
            note,
        ),
    ]
