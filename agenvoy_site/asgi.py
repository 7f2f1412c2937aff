"""ASGI entry point: `/v1` through a middleware-free Django handler, `/mcp` through the MCP
SDK's server side, pages through the full Django handler, WebSockets through Channels
routing, static files served directly."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agenvoy_site.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from mcpcore import db, routing  # noqa: E402
from mcpcore.api.handler import ApiHandler, ApiRouter  # noqa: E402
from mcpcore.mcpserver import McpRouter, endpoint  # noqa: E402
from mcpcore.staticserve import StaticFiles  # noqa: E402

db.use_dedicated_threads()

application = StaticFiles(
    ProtocolTypeRouter(
        {
            "http": McpRouter(endpoint, ApiRouter(ApiHandler(), django_asgi_app)),
            "websocket": AllowedHostsOriginValidator(
                AuthMiddlewareStack(URLRouter(routing.websocket_urlpatterns))
            ),
        }
    )
)
