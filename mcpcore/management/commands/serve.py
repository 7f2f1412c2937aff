# daphne.server installs Twisted's asyncio reactor on import: it must come first.
import daphne.server  # noqa: I001  isort:skip

import asyncio
import sys

import daphne.http_protocol
from django.conf import settings
from django.core.asgi import get_asgi_application
from django.core.management.base import BaseCommand
from twisted.internet import defer, reactor

from ...runtime import Runtime
from ...supervisor import Supervisor


class EmbeddedServer(daphne.server.Server):
    """Daphne plus the MCP supervisor on the same event loop (Daphne has no ASGI lifespan).

    The process's Runtime starts when the reactor runs, so pages answer while servers
    connect; on shutdown (SIGTERM, Ctrl-C) it is stopped first, closing every MCP client's
    stream, then every MCP session and process.
    """

    def __init__(self, runtime: Runtime, **kwargs) -> None:
        super().__init__(**kwargs)
        self.runtime = runtime

    def run(self):
        reactor.callWhenRunning(lambda: asyncio.ensure_future(self.runtime.start()))
        # Twisted's zope interface methods have no `self`: mypy shifts the arguments by one.
        reactor.addSystemEventTrigger("before", "shutdown", self._stop_runtime)  # type: ignore[arg-type]
        super().run()

    def _stop_runtime(self):
        return defer.Deferred.fromFuture(asyncio.ensure_future(self.runtime.stop(timeout=4)))


class WebRequest(daphne.http_protocol.WebRequest):
    """Daphne's request without Twisted's own parsing of POSTed forms: Daphne hands the body to
    the application as it is (Django parses forms), and on every POST Twisted ran the
    standard library's email parser over the Content-Type header to decide whether to parse
    it, about a tenth of a millisecond per call."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, parsePOSTFormSubmission=False, **kwargs)


# Daphne's HTTPFactory names the class it builds each request with through this module global.
daphne.http_protocol.WebRequest = WebRequest


def run_embedded(host_addr: str, port: int, stdout=None) -> None:
    # Alone on the in-memory layer it owns every server; beside other workers (Redis) it
    # is one worker among them.
    runtime = Runtime(Supervisor(exclusive=not settings.REDIS_URL))
    server = EmbeddedServer(
        runtime,
        application=runtime.application(get_asgi_application()),
        endpoints=[f"tcp:port={port}:interface={host_addr}"],
        signal_handlers=True,
        action_logger=None,
        http_timeout=None,
        websocket_timeout=86400,
    )
    if stdout is not None:
        stdout.write(f"Agenvoy MCP console on http://{host_addr}:{port}/ (Ctrl-C to stop)\n")
        stdout.flush()
    server.run()


def tune_gil() -> None:
    """The event loop and the database threads pass the GIL back and forth on every call; at
    the default 5 ms switch interval each hand-over can cost milliseconds of latency."""
    sys.setswitchinterval(0.0005)


class Command(BaseCommand):
    help = "Run the console in one process: Daphne (HTTP, WebSocket) and the MCP supervisor."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)

    def handle(self, host, port, **options):
        tune_gil()
        run_embedded(host, port, self.stdout)
