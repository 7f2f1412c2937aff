"""SPEC 7: every `/v1` route needs a bearer token (but the OpenAPI description), and every error
is a JSON `{"error": ...}` with a 4xx status, never a 500 for bad input."""

import json
import re
import uuid

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone

from mcpcore.models import ApiToken

AUTH_REQUIRED = {"error": "authentication required"}
PUBLIC = {"/v1/openapi.json"}

_SAMPLES = {
    "str": "sample",
    "slug": "sample-slug",
    "int": "7",
    "path": "some/where",
    "uuid": "6f1d2b1c-0000-4000-8000-000000000001",
}


def _concrete(route: str) -> str:
    """A path for a route pattern, its converters filled with sample values."""

    def fill(m: re.Match) -> str:
        converter = m.group(1) or "str"
        return _SAMPLES.get(converter, "sample")

    return re.sub(r"<(?:(\w+):)?\w+>", fill, route)


def _walk(patterns, prefix: str = "") -> list[str]:
    out = []
    for p in patterns:
        route = str(p.pattern)
        if route.startswith("^"):  # a regex pattern: none are expected under /v1
            route = route.lstrip("^").rstrip("$").replace("\\Z", "")
        if isinstance(p, URLResolver):
            out += _walk(p.url_patterns, prefix + route)
        elif isinstance(p, URLPattern):
            out.append("/" + _concrete(prefix + route))
    return out


def _v1_paths() -> list[str]:
    return sorted({p for p in _walk(get_resolver().url_patterns) if p.startswith("/v1/")})


V1_PATHS = _v1_paths()
PROTECTED = [p for p in V1_PATHS if p not in PUBLIC]


def test_it_finds_every_v1_route_in_the_resolver():
    # A sanity check of the walk itself: the routes of SPEC 7 are all there.
    for path in [
        "/v1/mcp",
        "/v1/mcp/remove",
        "/v1/mcp/status",
        "/v1/mcp/reconnect",
        "/v1/mcp/tools",
        "/v1/allowlist",
        "/v1/mcp/call",
        "/v1/mcp/calls/sample",
        "/v1/mcp/calls/sample/cancel",
        "/v1/pending",
        "/v1/mcp/instructions",
        "/v1/session/sample/confirm/sample",
        "/v1/openapi.json",
        "/v1/some/where",
    ]:
        assert path in V1_PATHS
    assert not any("<" in p for p in V1_PATHS)


@pytest.mark.django_db
@pytest.mark.parametrize("path", PROTECTED)
@pytest.mark.parametrize("method", ["get", "post"])
def test_it_answers_401_without_a_token_on_every_route(path, method):
    # CSRF checks on, like a real client without a browser session would meet them.
    client = Client(enforce_csrf_checks=True)
    if method == "get":
        r = client.get(path)
    else:
        r = client.post(path, data="{}", content_type="application/json")
    assert r.status_code == 401, (method, path, r.status_code)
    assert r["Content-Type"].startswith("application/json")
    assert r.json() == AUTH_REQUIRED


@pytest.mark.django_db
@pytest.mark.parametrize("path", PROTECTED)
def test_it_answers_401_for_other_methods_without_a_token(path):
    client = Client(enforce_csrf_checks=True)
    for method in ("put", "delete", "patch"):
        r = getattr(client, method)(path)
        assert r.status_code == 401, (method, path, r.status_code)
        assert r.json() == AUTH_REQUIRED


@pytest.mark.django_db
def test_it_serves_the_openapi_description_without_a_token():
    r = Client().get("/v1/openapi.json")
    assert r.status_code == 200
    assert r["Content-Type"].startswith("application/json")
    doc = r.json()
    assert doc["openapi"].startswith("3.")
    assert "/v1/mcp" in json.dumps(doc["paths"]) or "/mcp" in doc["paths"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "header",
    [
        "Token {t}",
        "Basic {t}",
        "{t}",
        "Bearer",
        "Bearer ",
        "Bearer  ",
        "Bearer wrong-{t}",
        "Bearer {t}x",
        "Bearer agv_nonexistent",
    ],
)
def test_it_answers_401_for_a_wrong_scheme_or_an_unknown_token(api_token, header):
    r = Client().get("/v1/mcp", HTTP_AUTHORIZATION=header.format(t=api_token))
    assert r.status_code == 401
    assert r.json() == AUTH_REQUIRED


@pytest.mark.django_db
def test_it_accepts_a_valid_token(api_token):
    r = Client().get("/v1/mcp", HTTP_AUTHORIZATION=f"Bearer {api_token}")
    assert r.status_code == 200
    assert r.json() == {"servers": {}}


@pytest.mark.django_db
def test_it_answers_401_for_a_revoked_token(api_token):
    client = Client()
    assert client.get("/v1/mcp", HTTP_AUTHORIZATION=f"Bearer {api_token}").status_code == 200
    ApiToken.objects.filter(token_hash=ApiToken.hash(api_token)).update(revoked_at=timezone.now())
    for method in ("get", "post"):
        r = getattr(client, method)("/v1/mcp", HTTP_AUTHORIZATION=f"Bearer {api_token}")
        assert r.status_code == 401
        assert r.json() == AUTH_REQUIRED


@pytest.mark.django_db
def test_it_does_not_accept_the_stored_hash_as_a_token(api_token):
    token_hash = ApiToken.hash(api_token)
    r = Client().get("/v1/mcp", HTTP_AUTHORIZATION=f"Bearer {token_hash}")
    assert r.status_code == 401


@pytest.mark.django_db
def test_it_does_not_let_a_browser_session_stand_in_for_a_token(django_user_model):
    user = django_user_model.objects.create_user("op", password="pw-123456789")
    client = Client()
    client.force_login(user)
    r = client.get("/v1/mcp")
    assert r.status_code == 401
    assert r.json() == AUTH_REQUIRED


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/v1/whatever", "/v1/mcp/nope", "/v1/mcp/", "/v1/a/b/c"])
def test_it_answers_404_json_for_an_unknown_route(api, path):
    for r in (api.get(path), api.post(path, {})):
        assert r.status_code == 404
        assert r["Content-Type"].startswith("application/json")
        assert set(r.json()) == {"error"}


@pytest.mark.django_db
@pytest.mark.parametrize(
    "method, path",
    [
        ("get", "/v1/mcp/remove"),
        ("get", "/v1/mcp/reconnect"),
        ("get", "/v1/mcp/call"),
        ("post", "/v1/mcp/status"),
        ("post", "/v1/mcp/tools"),
        ("post", "/v1/pending"),
        ("post", "/v1/mcp/instructions"),
        ("get", "/v1/session/s/confirm/c"),
        ("post", f"/v1/mcp/calls/{uuid.uuid4()}"),
        ("get", f"/v1/mcp/calls/{uuid.uuid4()}/cancel"),
        ("put", "/v1/mcp"),
        ("delete", "/v1/mcp"),
        ("patch", "/v1/allowlist"),
    ],
)
def test_it_answers_405_json_for_a_wrong_method(client, api_token, method, path):
    r = getattr(client, method)(path, HTTP_AUTHORIZATION=f"Bearer {api_token}")
    assert r.status_code == 405
    assert r["Content-Type"].startswith("application/json")
    body = r.json()
    assert set(body) == {"error"} and isinstance(body["error"], str) and body["error"]


BODY_ROUTES = [
    "/v1/mcp",
    "/v1/mcp/remove",
    "/v1/allowlist",
    "/v1/mcp/call",
    "/v1/mcp/reconnect",
    f"/v1/session/s1/confirm/{uuid.uuid4()}",
]


@pytest.mark.django_db
@pytest.mark.parametrize("path", BODY_ROUTES)
@pytest.mark.parametrize("raw", ["{", "not json", '{"name": }', "\xff\xfe", "[1, 2]", '"text"', "null", "42"])
def test_it_answers_400_json_for_a_malformed_body(api, agenvoy_home, path, raw):
    r = api.post(path, raw=raw)
    assert r.status_code == 400, (path, raw, r.status_code, r.content)
    assert r["Content-Type"].startswith("application/json")
    assert set(r.json()) == {"error"}


@pytest.mark.django_db
def test_it_answers_400_for_a_body_that_is_not_utf8(client, api_token, agenvoy_home):
    r = client.post(
        "/v1/mcp",
        data=b'{"name": "\xff"}',
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {api_token}",
    )
    assert r.status_code == 400
    assert set(r.json()) == {"error"}


@pytest.mark.django_db
@pytest.mark.parametrize("path", PROTECTED)
def test_it_never_answers_500_to_bad_input_on_any_route(api, agenvoy_home, path):
    for r in (
        api.get(path),
        api.get(path + "?wait=abc&prefix=%00"),
        api.post(path, raw="{"),
        api.post(path, {"name": 1, "server": [], "tool": 3, "wait": "x", "arguments": 5}),
    ):
        assert r.status_code < 500, (path, r.status_code, r.content)
        assert r["Content-Type"].startswith("application/json")
        if r.status_code >= 400:
            assert set(r.json()) == {"error"}
