"""ASGI entry point for a web process under any ASGI server (`daphne agenvoy_site.asgi:application`
beside `mcpworker`s): the application `mcpcore.runtime` builds, hosting no supervisor. `serve`
builds its own, with the supervisor it hosts."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agenvoy_site.settings")
django_asgi_app = get_asgi_application()

from mcpcore.runtime import Runtime  # noqa: E402  (needs the apps loaded above)

application = Runtime().application(django_asgi_app)
