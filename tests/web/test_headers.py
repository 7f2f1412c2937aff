"""SPEC 22.3: every page carries a Content-Security-Policy that allows no inline script, can't
be framed, and has the other headers; with an `https` public URL, HSTS and secure cookies. The
templates hold nothing the policy would block (Chromium's own report of violations on every
page of the browser suites is in tests/e2e/a11y.py)."""

import re

import pytest
from django.test import Client, override_settings

from mcpcore.web.headers import StrictTransport
from tests.live import ROOT

TEMPLATES = sorted((ROOT / "templates").rglob("*.html"))

# What a Content-Security-Policy without 'unsafe-inline' and 'unsafe-eval' refuses.
BLOCKED = {
    "an inline script": re.compile(r"<script\b(?![^>]*\bsrc=)[^>]*>", re.I),
    "a style block": re.compile(r"<style\b", re.I),
    "an event-handler attribute": re.compile(r"""\son[a-z]+\s*=\s*["'{]""", re.I),
    "a style attribute": re.compile(r"""\sstyle\s*=\s*["'{]""", re.I),
    "a javascript: URL": re.compile(r"javascript:", re.I),
    "an htmx trigger filter (eval)": re.compile(r"""hx-trigger\s*=\s*"[^"]*\[""", re.I),
    "an hx-on attribute (eval)": re.compile(r"\shx-on", re.I),
}

PAGES = ["/", "/add-server/", "/import-servers/", "/servers/every/", "/pending/", "/history/", "/tokens/"]
PAGES += ["/rules/", "/views/", "/notifications/", "/audit/"]


def test_the_template_scan_finds_each_blocked_form():
    """The scan itself: each pattern catches what it is named for."""
    samples = {
        "an inline script": "<script>alert(1)</script>",
        "a style block": "<style>p{}</style>",
        "an event-handler attribute": '<form onsubmit="return confirm(1)">',
        "a style attribute": '<p style="color:red">',
        "a javascript: URL": '<a href="javascript:void(0)">',
        "an htmx trigger filter (eval)": '<div hx-trigger="every 3s [!window.agvLive]">',
        "an hx-on attribute (eval)": '<button hx-on:click="go()">',
    }
    for what, sample in samples.items():
        assert BLOCKED[what].search(sample), what
    assert not BLOCKED["an inline script"].search('<script src="/static/x.js" defer></script>')
    assert not BLOCKED["an event-handler attribute"].search('<button data-confirm="Remove it?" hx-post="/x">')


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: str(p.relative_to(ROOT / "templates")))
def test_no_template_holds_what_the_policy_refuses(template):
    text = template.read_text()
    found = [f"{what}: {m.group(0)!r}" for what, pattern in BLOCKED.items() for m in pattern.finditer(text)]
    assert found == [], f"{template.name}: move these to static/mcpcore/: {found}"


def _policy(response) -> dict[str, list[str]]:
    csp = response["Content-Security-Policy"]
    return {d.split()[0]: d.split()[1:] for d in csp.split(";") if d.strip()}


@pytest.mark.django_db
@pytest.mark.parametrize("path", PAGES)
def test_every_page_carries_the_policy_and_headers(signed_in, every, path):
    r = signed_in.get(path)
    assert r.status_code == 200, path
    policy = _policy(r)
    assert policy["default-src"] == ["'self'"]
    assert policy["frame-ancestors"] == ["'none'"]
    assert "'unsafe-inline'" not in r["Content-Security-Policy"]
    assert "'unsafe-eval'" not in r["Content-Security-Policy"]
    assert r["X-Content-Type-Options"] == "nosniff"
    assert r["Referrer-Policy"] == "same-origin"
    assert r["X-Frame-Options"] == "DENY"
    assert "Strict-Transport-Security" not in r  # the public URL is http here


@pytest.mark.django_db
def test_the_sign_in_page_carries_them_too(client):
    r = client.get("/login/")
    assert _policy(r)["frame-ancestors"] == ["'none'"] and r["X-Content-Type-Options"] == "nosniff"


@pytest.mark.django_db
def test_an_https_public_url_adds_hsts_even_when_the_proxy_does_not_say_https(user):
    with override_settings(SECURE_HSTS_SECONDS=31536000):
        c = Client()  # a request over plain http, as behind a proxy that sets no header
        c.force_login(user)
        r = c.get("/history/")
    assert r["Strict-Transport-Security"] == "max-age=31536000"


@pytest.mark.asyncio
async def test_the_hsts_middleware_marks_async_views_too():
    from django.http import HttpResponse

    async def view(request):
        return HttpResponse("ok")

    with override_settings(SECURE_HSTS_SECONDS=31536000):
        middleware = StrictTransport(view)
        response = await middleware(None)
    assert response["Strict-Transport-Security"] == "max-age=31536000"
