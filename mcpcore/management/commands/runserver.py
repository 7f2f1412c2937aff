# daphne.server installs Twisted's asyncio reactor on import: it must come first.
import daphne.server  # noqa: F401, I001  isort:skip

from daphne.management.commands.runserver import Command as DaphneRunserver

from .serve import EmbeddedServer


class Command(DaphneRunserver):
    """Development server: Daphne's runserver with the MCP supervisor in the same process."""

    server_cls = EmbeddedServer
