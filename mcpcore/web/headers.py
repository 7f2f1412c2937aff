"""`Strict-Transport-Security` on every page when the console's public address is `https`
(SPEC 22.3). Django's SecurityMiddleware sends it only for a request it sees as secure, which
behind a TLS proxy needs `DJANGO_SECURE_PROXY_SSL_HEADER`; the public URL already says how
people reach the console, so it decides here. The other headers are Django's (settings) and
django-csp's."""

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings

HEADER = "Strict-Transport-Security"


class StrictTransport:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response) -> None:
        self.get_response = get_response
        self.value = f"max-age={settings.SECURE_HSTS_SECONDS}" if settings.SECURE_HSTS_SECONDS else ""
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request):
        if iscoroutinefunction(self):
            return self._acall(request)
        return self._mark(self.get_response(request))

    async def _acall(self, request):
        return self._mark(await self.get_response(request))

    def _mark(self, response):
        if self.value and HEADER not in response:
            response[HEADER] = self.value
        return response
