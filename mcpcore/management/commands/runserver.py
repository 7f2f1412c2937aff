# daphne.server installs Twisted's asyncio reactor on import: it must come first.
import daphne.server  # noqa: F401, I001  isort:skip

from daphne.management.commands.runserver import Command as DaphneRunserver
from django.conf import settings
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application

from ...runtime import Runtime
from ...supervisor import Supervisor
from .serve import EmbeddedServer


class Command(DaphneRunserver):
    """Development server: Daphne's runserver with the MCP supervisor in the same process,
    wired like `serve` (a Runtime hosting the supervisor, and its application)."""

    def get_application(self, options):
        self.runtime = Runtime(Supervisor(exclusive=not settings.REDIS_URL))
        app = self.runtime.application(get_asgi_application())
        # As Daphne's own runserver does with the default application.
        if options.get("use_static_handler", True) and (settings.DEBUG or options.get("insecure_serving")):
            # django-stubs types the wrapped application as an ASGIHandler; any ASGI app works.
            return ASGIStaticFilesHandler(app)  # type: ignore[arg-type]
        return app

    def server_cls(self, **kwargs) -> EmbeddedServer:
        return EmbeddedServer(self.runtime, **kwargs)
