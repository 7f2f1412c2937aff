"""Hardening found with issue 10: static paths, oversized server messages, long polls whose
client left, and running behind a TLS proxy."""

import asyncio
import os
import sys

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from mcpcore.supervisor import stdio
from mcpcore.web.staticserve import StaticFiles
from tests.live import SERVERS

# --- static files -------------------------------------------------------------------------------


async def _get(app, path: str) -> tuple[int, bytes]:
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    async def downstream(scope, receive, send):
        raise AssertionError("static paths must not reach Django")

    app.app = downstream
    await app({"type": "http", "method": "GET", "path": path, "headers": []}, receive, send)
    return sent[0]["status"], sent[1]["body"]


@pytest.mark.parametrize(
    "path",
    [
        "/static//etc/passwd",
        "/static/../../etc/passwd",
        "/static/mcpcore/../../../etc/passwd",
        "/static/%2e%2e/etc/passwd",
        "/static/\x00",
        "/static/a\\..\\..\\x",
        "/static/" + "x" * 5000,
        "/static/nope.css",
    ],
)
def test_it_answers_404_for_static_paths_outside_or_missing(path):
    app = StaticFiles(None)
    status, body = asyncio.run(_get(app, path))
    assert (status, body) == (404, b"not found")
    assert app._cache == {}  # misses are not remembered: no growth from random paths


def test_it_serves_and_caches_a_static_file_that_exists():
    app = StaticFiles(None)
    status, body = asyncio.run(_get(app, "/static/mcpcore/console.css"))
    assert status == 200 and body
    assert list(app._cache) == ["mcpcore/console.css"]


# --- an oversized stdio message -----------------------------------------------------------------


def test_it_ends_a_call_whose_answer_is_over_the_bound_and_keeps_the_session(monkeypatch):
    monkeypatch.setattr(stdio, "MAX_MESSAGE", 2**20)
    params = StdioServerParameters(
        command=sys.executable, args=[str(SERVERS / "huge.py")], env=dict(os.environ)
    )

    async def scenario():
        with open(os.devnull, "w") as errlog, anyio.fail_after(60):
            async with Client(stdio.stdio_transport(params, errlog), mode="auto") as client:
                with pytest.raises(MCPError) as caught:
                    await client.call_tool("text", {"n": 3 * 2**20})
                assert "over the 1 MiB limit and was dropped" in str(caught.value)
                assert caught.value.error.code == -32603
                # The session goes on: the next answer arrives as usual.
                result = await client.call_tool("echo", {"text": "still here"})
                assert result.content[0].text == "still here"

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "line, request_id",
    [
        (b'{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"' + b"x" * 5000 + b'"}]}}', 7),
        (b'{"result":{"text":"' + b"x" * 5000 + b'","id":1},"jsonrpc":"2.0","id":"abc"}', "abc"),
        (b'{"jsonrpc":"2.0","result":{"text":"\\"id\\": 9, ' + b"x" * 5000 + b'"}}', None),
        (
            b'{"jsonrpc":"2.0","id":3,"method":"sampling/createMessage","params":{"p":"'
            + b"x" * 5000
            + b'"}}',
            None,
        ),
        (
            b'{"jsonrpc":"2.0","method":"notifications/message","params":{"id":4,"p":"'
            + b"x" * 5000
            + b'"}}',
            None,
        ),
        (b'{"jsonrpc":"2.0","id":5,"error":{"code":1,"message":"' + b"x" * 5000 + b'"}}', 5),
    ],
)
def test_it_finds_the_id_of_a_dropped_line_only_where_the_message_carries_it(line, request_id):
    async def feed():
        parts = _Line(limit=1000)
        for i in range(0, len(line), 333):
            parts.add(line[i : i + 333])
        assert parts.parts == [] and len(parts.tail) <= 4096
        return await parts.take()

    _Line = stdio._Line
    message = asyncio.run(feed())
    if request_id is None:
        assert isinstance(message, ValueError)
    else:
        assert message.message.id == request_id
        assert "over the" in message.message.error.message


# --- long polls whose client has gone ---------------------------------------------------------


def _pending_call_and_token():
    from mcpcore.models import ApiToken
    from tests.rows import make_call

    token, secret = ApiToken.issue("poller", role="agent")
    call = make_call(tool="tool", server="srv", session_id="s", token=token, arguments={})
    return str(call.id), secret


async def _long_poll(
    path: str, query: str, secret: str, leave: anyio.Event | None, method: str = "GET", body: bytes = b""
):
    """Drive the /v1 ASGI handler as a server would; the client leaves when `leave` is set."""
    from mcpcore.api.app import ApiHandler

    sent = []
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive():
        if messages:
            return messages.pop(0)
        if leave is None:
            await anyio.sleep_forever()
        await leave.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [
            (b"authorization", f"Bearer {secret}".encode()),
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
        ],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8000),
    }
    await ApiHandler()(scope, receive, send)
    return sent


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_it_stops_a_long_poll_when_the_client_disconnects():
    from asgiref.sync import sync_to_async
    from channels.layers import get_channel_layer

    from mcpcore import control

    call_id, secret = await sync_to_async(_pending_call_and_token)()
    leave = anyio.Event()
    layer = get_channel_layer()
    group = control.call_group(call_id)
    with anyio.fail_after(20):  # the poll asks for 120 s
        async with anyio.create_task_group() as tg:
            result = {}

            async def poll():
                result["sent"] = await _long_poll(f"/v1/mcp/calls/{call_id}", "wait=120", secret, leave)

            tg.start_soon(poll)
            while not getattr(layer, "groups", {}).get(group):
                await anyio.sleep(0.01)  # the poll has subscribed to the call's wake-ups
            leave.set()
    assert result["sent"] == []  # nobody to answer
    assert not layer.groups.get(group)  # and it let go of its subscription


def _server_with_a_tool_and_token(home):
    from mcpcore.models import ApiToken
    from tests.rows import add_tools, write_servers

    write_servers(home, {"srv": {"command": "x"}})
    add_tools("srv", ["tool"])
    return ApiToken.issue("curl", role="agent")[1]


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_it_drops_the_answer_of_a_call_whose_client_hung_up_without_a_traceback(agenvoy_home, caplog):
    # Issue 47: a curl given up on made `mcp_call` hand the missing answer to `_answer`
    # (AttributeError: 'NoneType' object has no attribute 'to_answer').
    import json

    from asgiref.sync import sync_to_async

    from mcpcore.models import ToolCall

    secret = await sync_to_async(_server_with_a_tool_and_token)(agenvoy_home)
    body = json.dumps(
        {"name": "mcp__srv__tool", "arguments": {"message": "hi"}, "mode": "confirm", "wait": 120}
    )
    leave = anyio.Event()
    with anyio.fail_after(20):  # the call waits 120 s
        async with anyio.create_task_group() as tg:
            result = {}

            async def call():
                result["sent"] = await _long_poll("/v1/mcp/call", "", secret, leave, "POST", body.encode())

            tg.start_soon(call)
            while not await ToolCall.objects.filter(status="pending").aexists():
                await anyio.sleep(0.01)  # the call waits for a person
            leave.set()
    assert result["sent"] == []  # nobody to answer
    # Django turns a view's exception into a 500 nobody receives, and logs its traceback.
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == []
    assert await ToolCall.objects.filter(status="pending").aexists()  # the call goes on


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_it_looks_at_the_rules_file_once_for_a_call_a_limit_refuses(agenvoy_home, monkeypatch):
    # Issue 44: the gate asks every call for its deciding rule and for its limits, and each
    # looked at the rules file again (a stat through pathlib): twice per refused call of a loop.
    import json

    from asgiref.sync import sync_to_async

    from mcpcore import files

    secret = await sync_to_async(_server_with_a_tool_and_token)(agenvoy_home)
    (agenvoy_home / "rules").write_text("limit 1/h mcp__srv__tool\n")
    body = json.dumps({"name": "mcp__srv__tool", "arguments": {}, "mode": "confirm", "wait": 0}).encode()
    looked: list[str] = []
    stat_key = files.stat_key
    with anyio.fail_after(20):
        assert (await _long_poll("/v1/mcp/call", "", secret, None, "POST", body))[0]["status"] == 202
        monkeypatch.setattr(files, "stat_key", lambda name: looked.append(name) or stat_key(name))
        refused = await _long_poll("/v1/mcp/call", "", secret, None, "POST", body)
    assert refused[0]["status"] == 429
    assert looked.count(files.RULES) == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_it_tells_the_inbox_that_an_agent_stopped_waiting_until_one_waits_again(agenvoy_home):
    # Issue 47, point 2: a curl given up on left its call in the inbox looking like a live one.
    import json

    from asgiref.sync import sync_to_async
    from django.contrib.auth.models import User
    from django.test import Client

    from mcpcore.models import ApiToken, ToolCall

    secret = await sync_to_async(_server_with_a_tool_and_token)(agenvoy_home)
    body = json.dumps({"name": "mcp__srv__tool", "arguments": {}, "mode": "confirm", "wait": 120})
    leave = anyio.Event()
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(_long_poll, "/v1/mcp/call", "", secret, leave, "POST", body.encode())
            while not await ToolCall.objects.filter(status="pending").aexists():
                await anyio.sleep(0.01)  # the call waits for a person
            leave.set()
    call = await ToolCall.objects.aget(status="pending")
    assert call.agent_left_at is not None

    def inbox() -> str:
        client = Client()
        client.force_login(User.objects.get_or_create(username="ann", is_superuser=True, is_staff=True)[0])
        return client.get("/pending/").content.decode()

    page = await sync_to_async(inbox)()
    assert "The agent stopped waiting at" in page
    assert f"GET /v1/mcp/calls/{call.id}" in page

    dashboard = await sync_to_async(lambda: ApiToken.issue("dashboard", role="approver")[1])()
    with anyio.fail_after(20):  # an approver's dashboard polling the call is not its agent
        sent = await _long_poll(f"/v1/mcp/calls/{call.id}", "wait=0.2", dashboard, None)
    assert sent[0]["status"] == 200
    assert (await ToolCall.objects.aget(id=call.id)).agent_left_at is not None

    with anyio.fail_after(20):  # the agent comes back for its result
        sent = await _long_poll(f"/v1/mcp/calls/{call.id}", "wait=0.2", secret, None)
    assert sent[0]["status"] == 200
    assert (await ToolCall.objects.aget(id=call.id)).agent_left_at is None
    assert "The agent stopped waiting" not in await sync_to_async(inbox)()


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_it_answers_a_long_poll_whose_client_stays():
    import json

    from asgiref.sync import sync_to_async

    call_id, secret = await sync_to_async(_pending_call_and_token)()
    with anyio.fail_after(20):
        sent = await _long_poll(f"/v1/mcp/calls/{call_id}", "wait=0.5", secret, None)
    assert sent[0]["status"] == 200
    assert json.loads(sent[1]["body"])["status"] == "pending"


# --- behind a TLS proxy ---------------------------------------------------------------------------


@pytest.mark.live
def test_it_works_behind_a_tls_proxy_that_sets_the_forwarded_proto(console):
    import httpx2

    env = {
        "AGENVOY_PUBLIC_URL": "https://console.example/",
        "DJANGO_SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto",
        # Not the console's own origin: only the proxy header makes the request same-origin.
        "DJANGO_CSRF_TRUSTED_ORIGINS": "https://elsewhere.example",
    }
    c = console({}, env, start=False)
    c.manage(
        "shell",
        "-c",
        "from django.contrib.auth.models import User; User.objects.create_user('op', password='pw-12345678')",
    )
    console.start(c)

    def sign_in(proxied: bool) -> httpx2.Response:
        headers = {"Host": "console.example"} | ({"X-Forwarded-Proto": "https"} if proxied else {})
        with httpx2.Client(base_url=c.url, headers=headers, timeout=30) as web:
            first = web.get("/login/")
            assert first.status_code == 200
            token = first.cookies["csrftoken"]
            cookie = first.headers["set-cookie"]
            assert "; Secure" in cookie or "; secure" in cookie.lower()  # https public address
            return web.post(
                "/login/",
                data={"username": "op", "password": "pw-12345678", "csrfmiddlewaretoken": token},
                headers={
                    "Origin": "https://console.example",
                    "Referer": "https://console.example/login/",
                    "Cookie": f"csrftoken={token}",
                },
            )

    signed = sign_in(proxied=True)
    assert signed.status_code == 302, signed.text[:300]
    assert "; secure" in signed.headers["set-cookie"].lower()  # the session cookie too
    # The same request without the proxy's header is plain http from https://: refused.
    assert sign_in(proxied=False).status_code == 403


# --- an oversized HTTP message ------------------------------------------------------------------


def test_it_ends_a_call_whose_http_answer_is_over_the_bound_and_keeps_the_session(monkeypatch):
    import subprocess

    import httpx2

    from mcpcore.supervisor import transport
    from tests.live import free_port, wait_until

    monkeypatch.setattr(stdio, "MAX_MESSAGE", 2**20)
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, str(SERVERS / "huge.py")],
        env={**os.environ, "HUGE_PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def up():
        try:
            return httpx2.get(f"http://127.0.0.1:{port}/mcp", timeout=1) is not None
        except httpx2.HTTPError:
            return False

    async def scenario():
        target = transport.make_target({"url": f"http://127.0.0.1:{port}/mcp"}, "streamable-http", None)
        with anyio.fail_after(60):
            async with Client(target, mode="auto") as client:
                with pytest.raises(MCPError) as caught:
                    await client.call_tool("text", {"n": 3 * 2**20})
                assert "1048576" in str(caught.value) or "1 MiB" in str(caught.value), str(caught.value)
                result = await client.call_tool("echo", {"text": "still here"})
                assert result.content[0].text == "still here"

    try:
        wait_until(up, 30, what="huge.py over HTTP")
        asyncio.run(scenario())
    finally:
        server.kill()
        server.wait(10)


def test_it_refuses_a_json_answer_over_the_bound_as_it_streams_in():
    import httpx2

    from mcpcore.supervisor import transport

    sent = []

    def handler(request):
        async def body():
            for _ in range(100):
                sent.append(1)
                yield b"x" * 65536

        return httpx2.Response(200, headers={"content-type": "application/json"}, content=body())

    async def scenario():
        bounded = transport._Bounded(httpx2.MockTransport(handler))
        async with httpx2.AsyncClient(transport=bounded) as http:
            async with http.stream("POST", "http://srv/mcp") as response:
                with pytest.raises(transport.MessageTooLarge):
                    await response.aread()

    import unittest.mock

    with unittest.mock.patch.object(stdio, "MAX_MESSAGE", 2**20):
        asyncio.run(scenario())
    assert len(sent) <= 17  # stopped reading just past 1 MiB, not all 6.4 MB
