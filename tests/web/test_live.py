"""Live pushes (web/live.py) and the browser socket (web/consumers.py): the same fragments as a reload, in one query, to signed-in sockets only.

No MCP server runs here: servers come from an mcp.json in a temporary $AGENVOY_HOME, and their
state, tools and calls are database rows written directly."""

import re

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import AnonymousUser, User

from mcpcore.models import Server, ToolCall
from mcpcore.web import live
from tests.rows import make_call

pytestmark = pytest.mark.django_db


def _scope(user, page: str = "", sig: str = "") -> dict:
    query = f"page={page}" + (f"&sig={sig}" if sig else "")
    return {"user": user, "query_string": query.encode()}


def push(event: dict, scope: dict) -> str:
    return async_to_sync(live.render_push)(event, scope)


def test_it_pushes_the_server_rows_to_the_servers_page_in_one_query(every, user, django_assert_num_queries):
    Server.objects.filter(name="every").update(state="error", last_error="gone")
    with django_assert_num_queries(1):
        html = push({"type": "status.changed", "server": "every"}, _scope(user, "servers"))
    assert html.lstrip().startswith('<tbody id="server-rows" hx-swap-oob="true"')
    assert 'data-state="error"' in html and "gone" in html


def test_it_pushes_the_status_panel_to_that_servers_page(every, user, django_assert_num_queries):
    with django_assert_num_queries(1):
        html = push({"type": "status.changed", "server": "every"}, _scope(user, "server:every", "old"))
    assert '<section id="server-status"' in html and 'hx-swap-oob="true"' in html
    assert "The tool list has changed" in html
    assert push({"type": "status.changed", "server": "every"}, _scope(user, "server:other")) == ""
    assert push({"type": "status.changed", "server": "every"}, _scope(user, "pending")) == ""


def test_it_pushes_the_pending_list_and_badge(every, user, django_assert_num_queries):
    call = make_call()
    # The list (its confirmations, and servers' questions: SPEC 20.4), and on the Pending page
    # its session allowances (revoked tokens drop theirs).
    with django_assert_num_queries(3):
        html = push({"type": "pending.changed", "call_id": str(call.id)}, _scope(user, "pending"))
    assert '<div id="allowances" hx-swap-oob="true">' in html
    assert re.search(r'<div id="pending-list" class="pending-list" data-sig="\w+" hx-swap-oob="true"', html)
    assert f"pending-{call.confirm_id}" in html
    assert re.search(r'<span id="pending-badge"[^>]*hx-swap-oob="true">1</span>', html)
    with django_assert_num_queries(2):  # the badge counts confirmations and questions
        other = push({"type": "pending.changed", "call_id": str(call.id)}, _scope(user, "servers"))
    assert "pending-list" not in other and re.search(r'id="pending-badge"[^>]*>1</span>', other)


def test_it_pushes_nothing_to_a_signed_out_socket(every):
    assert push({"type": "pending.changed", "call_id": "x"}, _scope(AnonymousUser(), "pending")) == ""


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_it_delivers_a_push_over_the_live_socket(agenvoy_home):
    from asgiref.sync import sync_to_async
    from channels.testing import WebsocketCommunicator

    from mcpcore import control
    from mcpcore.web.consumers import LiveConsumer

    op = await sync_to_async(User.objects.create_user)("ws-op")
    app = LiveConsumer.as_asgi()
    anon = WebsocketCommunicator(app, "/ws/live/?page=pending")
    anon.scope["user"] = AnonymousUser()
    connected, _ = await anon.connect()
    assert not connected
    comm = WebsocketCommunicator(app, "/ws/live/?page=pending")
    comm.scope["user"] = op
    connected, _ = await comm.connect()
    assert connected
    await control.asend_group(control.PENDING, {"type": "pending.changed", "call_id": "x"})
    html = await comm.receive_from(timeout=5)
    assert 'id="pending-list"' in html and 'id="pending-badge"' in html
    await comm.disconnect()


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_it_drops_a_push_to_a_page_that_went_away_while_it_was_rendered(agenvoy_home):
    # Daphne raises on a send to a socket the browser closed before its disconnect reached the
    # consumer (a new page while a push was rendered): a cold CI run logged that traceback.
    from asgiref.sync import sync_to_async
    from autobahn.exception import Disconnected

    from mcpcore.web.consumers import LiveConsumer

    op = await sync_to_async(User.objects.create_user)("ws-gone")
    consumer = LiveConsumer()
    consumer.scope = _scope(op, "pending")
    sent: list[dict] = []

    async def closed(message: dict) -> None:
        sent.append(message)
        raise Disconnected("Attempt to send on a closed protocol")

    consumer.base_send = closed
    await consumer.pending_changed({"type": "pending.changed", "call_id": "x"})
    assert sent and 'id="pending-list"' in sent[0]["text"]


def test_it_signs_the_pending_list_by_what_it_shows(signed_in, every):
    def sig():
        html = signed_in.get("/pending/", headers={"HX-Request": "true"}).content.decode()
        return re.search(r'data-sig="(\w+)"', html).group(1)

    empty = sig()
    call = make_call()
    one = sig()
    assert one != empty and sig() == one
    ToolCall.objects.filter(pk=call.pk).update(status="skipped")
    assert sig() == empty


# --- who may hold the socket (issue 41.10) --------------------------------------------------------


async def _socket_of(client):
    """The live socket a signed-in browser opens: through the session and auth middleware, with
    the browser's session cookie."""
    from channels.auth import AuthMiddlewareStack
    from channels.routing import URLRouter
    from channels.testing import WebsocketCommunicator

    from mcpcore.web import routing

    app = AuthMiddlewareStack(URLRouter(routing.websocket_urlpatterns))
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    comm = WebsocketCommunicator(app, "/ws/live/?page=pending", headers=[(b"cookie", cookie)])
    connected, _ = await comm.connect()
    return comm, connected


async def _signed_in_browser(username: str):
    from asgiref.sync import sync_to_async
    from django.test import Client

    def sign_in():
        if not User.objects.filter(username=username).exists():
            User.objects.create_user(username, password="live-pw-4110")
        c = Client()
        assert c.post("/login/", {"username": username, "password": "live-pw-4110"}).status_code == 302
        return c

    return await sync_to_async(sign_in)()


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_it_refuses_the_socket_to_a_person_held_on_the_account_page(agenvoy_home, settings):
    settings.AGENVOY_REQUIRE_2FA = True
    browser = await _signed_in_browser("ws-no-factor")
    comm, connected = await _socket_of(browser)
    assert not connected
    await comm.wait()


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_it_closes_the_socket_when_its_session_signs_out(agenvoy_home):
    from asgiref.sync import sync_to_async

    browser = await _signed_in_browser("ws-out")
    comm, connected = await _socket_of(browser)
    assert connected
    assert (await sync_to_async(browser.post)("/logout/")).status_code == 302
    assert (await comm.receive_output(timeout=5))["type"] == "websocket.close"
    await comm.wait()


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_it_closes_the_socket_of_a_session_signed_out_from_the_account_page(agenvoy_home):
    from allauth.usersessions.models import UserSession
    from asgiref.sync import sync_to_async

    from mcpcore import control

    here = await _signed_in_browser("ws-two")
    there = await _signed_in_browser("ws-two")
    comm, connected = await _socket_of(there)
    kept, kept_connected = await _socket_of(here)
    assert connected and kept_connected
    other = await UserSession.objects.aget(session_key=there.cookies["sessionid"].value)
    r = await sync_to_async(here.post)(f"/account/sessions/{other.pk}/sign-out/")
    assert r.status_code == 302 and r["Location"] == "/account/"
    assert (await comm.receive_output(timeout=5))["type"] == "websocket.close"
    await comm.wait()
    # This browser's own socket stays open and still gets its pushes.
    await control.asend_group(control.PENDING, {"type": "pending.changed", "call_id": "x"})
    assert 'id="pending-badge"' in await kept.receive_from(timeout=5)
    await kept.disconnect()
