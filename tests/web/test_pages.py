"""Every page and action of the browser door (SPEC 8): whole pages signed in, the htmx fragment alone, signed-out visitors sent to sign in, actions POST only and CSRF-checked.

No MCP server runs here: servers come from an mcp.json in a temporary $AGENVOY_HOME, and their
state, tools and calls are database rows written directly."""

import re
import uuid

import pytest

from mcpcore.models import ApiToken, SessionAllowance
from tests.rows import make_call

pytestmark = pytest.mark.django_db


PAGES = [
    # (url or callable, the fragment's element id)
    ("/", "server-rows"),
    ("/servers/every/", "server-status"),
    ("/pending/", "pending-list"),
    ("/history/", "call-table"),
    ("/tokens/", "token-list"),
    ("call", "call-result-"),
]


def _url(page: str) -> str:
    if page == "call":
        return f"/history/{make_call(status='done', result='ok').id}/"
    return page


@pytest.mark.parametrize("page,fragment", PAGES)
def test_it_renders_every_page_in_full_when_signed_in(signed_in, every, page, fragment):
    r = signed_in.get(_url(page))
    assert r.status_code == 200
    html = r.content.decode()
    assert "<html" in html and 'id="' + fragment in html
    for link in ("Servers", "Pending", "History", "Tokens"):
        assert f">{link}" in html
    assert 'id="pending-badge"' in html


@pytest.mark.parametrize("page,fragment", PAGES)
def test_it_answers_htmx_with_the_fragment_alone(signed_in, every, page, fragment):
    r = signed_in.get(_url(page), headers={"HX-Request": "true"})
    assert r.status_code == 200
    html = r.content.decode().strip()
    assert html.startswith("<") and 'id="' + fragment in html.split(">", 1)[0]
    assert "<html" not in html and "topbar" not in html and 'aria-label="Main"' not in html


@pytest.mark.parametrize(
    "page",
    [
        "/",
        "/servers/every/",
        "/pending/",
        "/history/",
        "/tokens/",
        "/add-server/",
        "/import-servers/",
        "/servers/every/edit/",
        "call",
    ],
)
def test_it_sends_signed_out_visitors_to_sign_in(client, every, page):
    url = _url(page)
    r = client.get(url)
    assert r.status_code == 302
    assert r["Location"].startswith("/login/?next=")


@pytest.mark.parametrize("page", ["/add-server/", "/import-servers/", "/servers/every/edit/"])
def test_it_renders_the_form_pages(signed_in, every, page):
    r = signed_in.get(page)
    assert r.status_code == 200 and b"<form" in r.content


def test_it_answers_404_for_an_unknown_server_or_call(signed_in, every):
    assert signed_in.get("/servers/nope/").status_code == 404
    assert signed_in.get(f"/history/{uuid.uuid4()}/").status_code == 404


def test_it_keeps_the_sign_in_button_and_form(client, db):
    r = client.get("/login/")
    assert r.status_code == 200 and b">Sign in</button>" in r.content


ACTIONS = [
    "/reconnect-all/",
    "/servers/every/reconnect/",
    "/add-example-server/",
    "/servers/every/enable/",
    "/servers/every/disable/",
    "/servers/every/remove/",
    "/servers/every/trust/",
    "/servers/every/try/",
    "/pending/{confirm}/reply/",
    "/pending/allowances/{allowance}/revoke/",
    "/tokens/create/",
    "/tokens/{token}/revoke/",
]


@pytest.fixture
def action_ids(every) -> dict:
    call = make_call()
    allowance = SessionAllowance.objects.create(session_id="s", granted_by="op")
    token, _ = ApiToken.issue("t")
    return {"confirm": call.confirm_id, "allowance": allowance.pk, "token": token.pk}


@pytest.mark.parametrize("action", ACTIONS)
def test_it_refuses_get_on_actions_with_405(signed_in, action_ids, action):
    assert signed_in.get(action.format(**action_ids)).status_code == 405


@pytest.mark.parametrize("action", ACTIONS)
def test_it_sends_signed_out_posts_to_sign_in(client, action_ids, action):
    r = client.post(action.format(**action_ids))
    assert r.status_code == 302 and r["Location"].startswith("/login/")


@pytest.mark.parametrize("action", ACTIONS + ["/add-server/", "/import-servers/", "/servers/every/edit/"])
def test_it_refuses_posts_without_a_csrf_token(csrf_client, action_ids, action):
    assert csrf_client.post(action.format(**action_ids)).status_code == 403


def test_it_accepts_a_post_with_the_csrf_header_htmx_sends(csrf_client, action_ids):
    page = csrf_client.get("/tokens/")
    token = re.search(r'"X-CSRFToken": "([^"]+)"', page.content.decode()).group(1)
    r = csrf_client.post(f"/tokens/{action_ids['token']}/revoke/", headers={"X-CSRFToken": token})
    assert r.status_code == 302


def test_it_names_the_pending_link_by_its_text_and_count_alone(signed_in, every):
    html = signed_in.get("/history/").content.decode()
    link = re.search(r'<a href="/pending/"[^>]*>(.*?)</a>', html, re.S).group(1)
    assert "title=" not in link and re.sub(r"<[^>]+>", "", link).strip() == "Pending"
    make_call()
    link = re.search(r'<a href="/pending/"[^>]*>(.*?)</a>', signed_in.get("/history/").content.decode(), re.S)
    assert re.sub(r"<[^>]+>", "", link.group(1)).split() == ["Pending", "1"]


def test_it_shows_the_pending_count_badge_on_every_page(signed_in, every):
    make_call()
    make_call(session_id="b")
    for page in ("/", "/history/", "/tokens/", "/servers/every/"):
        assert re.search(r'id="pending-badge"[^>]*>2</span>', signed_in.get(page).content.decode())
