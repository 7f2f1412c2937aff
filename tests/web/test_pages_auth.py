"""Every page and page action needs a signed-in person (SPEC 8, 12: people in the browser have
an admin's rights, nobody else has any). A walk of the URL resolver, so a page added later
without `login_required` fails here."""

import re

import pytest
from django.urls import URLPattern, get_resolver

import mcpcore.web.urls

_SAMPLES = {"str": "every", "int": "1", "uuid": "6f1d2b1c-0000-4000-8000-000000000001"}


def _page_paths() -> list[str]:
    out = []
    for p in mcpcore.web.urls.urlpatterns:
        assert isinstance(p, URLPattern)
        route = re.sub(r"<(?:(\w+):)?\w+>", lambda m: _SAMPLES[m.group(1) or "str"], str(p.pattern))
        out.append("/" + route)
    return out


PAGES = _page_paths()


def test_it_walks_every_page_of_the_console():
    assert "/" in PAGES and "/rules/" in PAGES and "/notifications/" in PAGES
    assert "/pending/6f1d2b1c-0000-4000-8000-000000000001/" in PAGES
    assert len(PAGES) == len(mcpcore.web.urls.urlpatterns)
    # Everything under the site root that is not /v1, /login or /logout is one of these, but for
    # three routes without a session: one-tap links (the action token is the credential, SPEC
    # 17.2) and the JSON 404s MCP clients probe for (17.4), both checked below, and `/metrics`
    # (an admin token or an allowed address, 18.3: tests/test_metrics.py), and `/favicon.ico`
    # (a redirect to the static icon: tests/e2e/test_first_hour_browser.py), and `set-password`
    # (a one-time link's token is its credential, SPEC 23.1: tests/web/test_people_page.py).
    names = {p.name for p in get_resolver().url_patterns if isinstance(p, URLPattern)}
    assert names == {
        "login",
        "logout",
        "one-tap",
        "well-known-not-found",
        "metrics",
        "favicon",
        "set-password",
    }


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["get", "post"])
def test_it_shows_and_decides_nothing_without_a_session_but_for_a_valid_action_token(client, method):
    for path in ("/a/every", "/a/6f1d2b1c000040008000000000000001a1.AAAAAAAAAAAAAAAAAAAAAAAAAAA"):
        r = getattr(client, method)(path)
        assert (r.status_code, r.content) == (410, b"this link is no longer valid"), path
    r = getattr(client, method)("/.well-known/openid-configuration")
    assert (r.status_code, r.json()) == (404, {"error": "not found"})


@pytest.mark.django_db
@pytest.mark.parametrize("path", PAGES)
@pytest.mark.parametrize("method", ["get", "post"])
def test_it_sends_a_signed_out_visitor_to_sign_in(client, path, method):
    r = getattr(client, method)(path)
    assert r.status_code == 302, (method, path, r.status_code)
    assert r["Location"].startswith("/login/?next="), r["Location"]
