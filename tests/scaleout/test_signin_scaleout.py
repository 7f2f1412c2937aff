"""SPEC 22.1 across processes: an authenticator app's code signs in once, whichever web process
it is typed on (issue 41.15: allauth remembered a used code in the memory of the process that
took it, so the same code signed in again on the other one)."""

import re
import time
from contextlib import closing

import httpx2
import pytest

from tests.live import wait_until
from tests.web.test_signin import totp

pytestmark = pytest.mark.scaleout

USER, PASSWORD = "totp-op", "totp-pass-4115"


def post(b: httpx2.Client, path: str, data: dict) -> httpx2.Response:
    """A form posted as the page's browser does (the CSRF cookie's token in the form)."""
    return b.post(path, data={**data, "csrfmiddlewaretoken": b.cookies["csrftoken"]})


def password_step(base: str) -> httpx2.Client:
    b = httpx2.Client(base_url=base, timeout=30)
    b.get("/login/")
    r = post(b, "/login/", {"username": USER, "password": PASSWORD})
    assert r.status_code == 302, r.text[:500]
    return b


def test_it_takes_an_authenticator_code_once_across_web_processes(cluster):
    web1, web2 = cluster.webs
    cluster.manage(
        "shell",
        "-c",
        f"from django.contrib.auth.models import User; User.objects.create_user({USER!r}, password={PASSWORD!r})",
    )
    with closing(password_step(web1)) as b:  # no factor yet: signed in with the password
        assert post(b, "/accounts/reauthenticate/", {"password": PASSWORD}).status_code == 302
        secret = re.search(
            r'id="authenticator_secret"[^>]*value="([A-Z2-7]+)"', b.get("/accounts/2fa/totp/activate/").text
        )
        assert secret, "no secret shown"
        assert post(b, "/accounts/2fa/totp/activate/", {"code": totp(secret.group(1))}).status_code == 302

    # Both tries in one half-minute, so that the second is refused for the reuse alone.
    wait_until(lambda: 30 - time.time() % 30 > 10, 25, 0.2, what="10 s left in the code's half-minute")
    code = totp(secret.group(1))
    with closing(password_step(web1)) as first, closing(password_step(web2)) as second:
        r = post(first, "/accounts/2fa/authenticate/", {"code": code})
        assert r.status_code == 302 and first.get("/history/").status_code == 200
        r = post(second, "/accounts/2fa/authenticate/", {"code": code})
        assert r.status_code == 200 and "Incorrect code." in r.text
        assert second.get("/history/").status_code == 302  # not signed in
