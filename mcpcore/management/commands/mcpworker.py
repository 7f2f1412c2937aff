import asyncio
import signal

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from ...runtime import Runtime
from ...supervisor import Supervisor
from .serve import tune_gil


class Command(BaseCommand):
    help = "Run an MCP supervisor worker for scale-out (needs REDIS_URL)."

    def add_arguments(self, parser):
        parser.add_argument("--name", default=None, help="worker name (default: host-pid-random)")

    def handle(self, name, **options):
        if not settings.REDIS_URL:
            raise CommandError("mcpworker needs REDIS_URL: workers reach web processes through Redis")

        tune_gil()
        supervisor = Supervisor(exclusive=False, name=name)
        asyncio.run(self._main(Runtime(supervisor), supervisor))

    async def _main(self, runtime: Runtime, supervisor: Supervisor) -> None:
        await runtime.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        self.stdout.write(f"mcpworker {supervisor.name} started\n")
        self.stdout.flush()
        await stop.wait()
        # A graceful stop hands every server back at once, so others take them over.
        await runtime.stop(timeout=10)
