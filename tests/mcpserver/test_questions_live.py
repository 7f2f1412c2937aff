"""Servers' questions through a live console (SPEC 20.4), with real clients on `/mcp`: the
SDK's `Client` with an elicitation callback in both eras, against `tests/servers/asking.py` in
both eras (`ask26` speaks 2026-07-28, `ask25` only 2025-11-25), every combination: a 2025
client is asked with `elicitation/create`, a 2026-07-28 client with an `InputRequiredResult`
whose `requestState` the console signs; a client that declared no elicitation, and a `/v1`
call, get the question in the inbox, answered through `POST /v1/pending/<id>/answer`."""

import contextlib
import json
import time
import uuid

import anyio
import httpx2
import mcp_types
import pytest
from django.test import override_settings
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcpcore.mcpserver import relay
from tests.live import await_until, db_rows, our_server, signed_in, token_id, wait_until
from tests.mcpclients import TsClient, in_thread

pytestmark = pytest.mark.live

SERVERS = ["ask26", "ask25"]
CLIENTS = ["auto", "legacy"]  # a 2026-07-28 client, a 2025-11-25 one
ACCEPT = {"name": "Ada"}


@pytest.fixture(scope="module")
def c(module_console):
    servers = {
        "ask26": our_server("asking.py"),
        "ask25": our_server("asking.py", env={"ASKING_LEGACY": "1"}),
    }
    env = {"AGENVOY_CALL_TIMEOUT": "20", "AGENVOY_CONFIRM_TIMEOUT": "30"}
    console = module_console(servers, env, allow=["mcp__ask26__*", "mcp__ask25__*"])
    console.wait_connected(*SERVERS)
    eras = dict(db_rows(console, "select name, protocol_version from mcpcore_server"))
    assert eras == {"ask26": "2026-07-28", "ask25": "2025-11-25"}
    return console


class Person:
    """An elicitation callback answering as a person would, recording what it was asked."""

    def __init__(self, *answers: dict) -> None:
        self.answers = list(answers)
        self.asked: list = []

    async def __call__(self, ctx, params):
        self.asked.append(params)
        return mcp_types.ElicitResult.model_validate(self.answers[len(self.asked) - 1])


@contextlib.asynccontextmanager
async def client_of(c, mode: str, on_elicit=None, token: str | None = None):
    """The SDK's `Client` on the console's `/mcp` in `mode`, declaring elicitation (form and
    URL, as the SDK does) when it has a callback."""
    headers = {"Authorization": f"Bearer {token or c.token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120)) as http:
        transport = streamable_http_client(c.url + "/mcp", http_client=http)
        async with Client(transport, mode=mode, elicitation_callback=on_elicit) as client:
            assert (client.protocol_version in MODERN_PROTOCOL_VERSIONS) == (mode != "legacy")
            yield client


def answers_in(result) -> list:
    assert not result.is_error, result
    return json.loads(result.content[0].text)["answers"]


def questions_of(c, tool_name: str) -> list[tuple]:
    """(status, mode, answered_by, answer) of the questions of the last call of `tool_name`."""
    return [
        (status, mode, by, json.loads(answer) if answer else None)
        for status, mode, by, answer in db_rows(
            c,
            "select q.status, q.mode, q.answered_by, q.answer from mcpcore_question q "
            "where q.call_id = (select id from mcpcore_toolcall where tool_name = ? "
            "order by created_at desc limit 1) order by q.created_at",
            tool_name,
        )
    ]


@pytest.mark.asyncio
@pytest.mark.parametrize("server", SERVERS)
@pytest.mark.parametrize("mode", CLIENTS)
async def test_it_relays_a_form_question_to_the_calling_client_in_every_era_combination(c, server, mode):
    person = Person({"action": "accept", "content": ACCEPT})
    async with client_of(c, mode, person) as client:
        with anyio.fail_after(60):
            result = await client.call_tool(f"{server}__ask_form", {"message": "Which name?"})
    assert answers_in(result) == [{"action": "accept", "content": ACCEPT}]
    (asked,) = person.asked
    assert asked.message == "Which name?" and asked.requested_schema["required"] == ["name"]
    assert questions_of(c, f"mcp__{server}__ask_form") == [
        ("answered", "form", "client", {"action": "accept", "content": ACCEPT})
    ]


@pytest.mark.asyncio
@pytest.mark.parametrize("server", SERVERS)
@pytest.mark.parametrize("mode", CLIENTS)
async def test_it_relays_a_url_question_and_two_questions_in_order(c, server, mode):
    person = Person(
        {"action": "accept"}, {"action": "decline"}, {"action": "accept", "content": {"sure": True}}
    )
    async with client_of(c, mode, person) as client:
        with anyio.fail_after(60):
            url = await client.call_tool(f"{server}__ask_url", {"url": "https://login.example.com/go"})
            twice = await client.call_tool(f"{server}__ask_twice", {})
    assert answers_in(url) == [{"action": "accept"}]
    assert answers_in(twice) == [{"action": "decline"}, {"action": "accept", "content": {"sure": True}}]
    assert [(p.mode, p.message) for p in person.asked] == [
        ("url", "Sign in to continue"),
        ("form", "first"),
        ("form", "second"),
    ]
    assert person.asked[0].url == "https://login.example.com/go"


@pytest.mark.asyncio
@pytest.mark.parametrize("server", SERVERS)
@pytest.mark.parametrize("mode", CLIENTS)
async def test_it_puts_the_question_of_a_client_without_elicitation_in_the_inbox(c, server, mode):
    tool = f"mcp__{server}__ask_form"

    async def answer_it() -> None:
        item = await await_until(lambda: _question_item(c, tool), 30, what="the question in the inbox")
        assert (item["message"], item["server"]) == ("Who?", server)
        r = await in_thread(
            lambda: c.approver.post(
                f"/v1/pending/{item['id']}/answer", json={"action": "accept", "content": {"name": "Inbox"}}
            )
        )
        assert r.status_code == 200, r.text

    messages: list[str | None] = []

    async def on_progress(progress, total, message) -> None:
        messages.append(message)

    async with client_of(c, mode) as client, anyio.create_task_group() as tg:
        tg.start_soon(answer_it)
        with anyio.fail_after(60):
            result = await client.call_tool(
                f"{server}__ask_form", {"message": "Who?"}, progress_callback=on_progress
            )
    assert answers_in(result) == [{"action": "accept", "content": {"name": "Inbox"}}]
    # While the person was asked, the waiting call said so (SPEC 20.4).
    assert f"waiting for an answer to {server}'s question" in messages


def _question_item(c, tool_name: str) -> dict | None:
    items = c.get("/v1/pending").json()["pending"]
    return next((i for i in items if i.get("kind") == "question" and i["tool_name"] == tool_name), None)


@pytest.mark.asyncio
@pytest.mark.parametrize("server", SERVERS)
async def test_it_asks_the_inbox_for_a_v1_call_and_answers_the_server(c, server):
    tool = f"mcp__{server}__ask_form"
    r = c.call(tool, {"message": "From the API?"}, mode="auto", wait=0)
    assert r.status_code == 202, r.text
    call_id = r.json()["call_id"]
    item = wait_until(lambda: _question_item(c, tool), 30, what="the question in the inbox")
    assert item["call_id"] == call_id and item["schema"]["required"] == ["name"]
    # The token whose call it is may not answer it (SPEC 12.1).
    assert c.post(f"/v1/pending/{item['id']}/answer", {"action": "decline"}).status_code == 403
    r = c.approver.post(
        f"/v1/pending/{item['id']}/answer", json={"action": "accept", "content": {"name": "Api"}}
    )
    assert r.status_code == 200, r.text
    done = wait_until(
        lambda: (row := c.get(f"/v1/mcp/calls/{call_id}").json())["status"] == "done" and row, 30, what="done"
    )
    assert json.loads(done["result"])["answers"] == [{"action": "accept", "content": {"name": "Api"}}]


@pytest.mark.parametrize("server", SERVERS)
def test_it_refuses_a_url_question_whose_host_a_browser_reads_otherwise_and_asks_no_one(c, server):
    tool = f"mcp__{server}__ask_url"
    r = c.call(tool, {"url": "https://evil.example\\@paypal.com/login"}, mode="auto", wait=0)
    assert r.status_code == 202, r.text
    call_id = r.json()["call_id"]
    done = wait_until(
        lambda: (row := c.get(f"/v1/mcp/calls/{call_id}").json())["status"] in ("done", "error") and row,
        30,
        what="the call ended",
    )
    assert "URL question refused: the URL has a backslash" in json.dumps(done)
    assert questions_of(c, tool) == []


@pytest.mark.asyncio
async def test_it_asks_no_agent_a_2025_question_it_cannot_tell_whose_call_asked(c):
    # Token A's call is in flight on the 2025 server when token B's asks: `elicitation/create`
    # does not say which call asked, so neither client is asked; people answer in the inbox.
    first, second = c._insert_token("asker-a", "agent"), c._insert_token("asker-b", "agent")
    a_person, b_person = Person({"action": "decline"}), Person({"action": "decline"})
    a_id = token_id(c, "asker-a")

    def a_running():
        return db_rows(
            c,
            "select id from mcpcore_toolcall where tool_name = 'mcp__ask25__hold' and token_id = ? "
            "and status = 'running'",
            a_id,
        )

    async def answer_it() -> None:
        # Filed by guess: which token asked can't be told, so no token sees or answers it on
        # /v1 (not even an approver's); a person answers it on the pages.
        rows = await await_until(
            lambda: db_rows(
                c, "select id from mcpcore_question where status = 'pending' and message = 'Whose?'"
            ),
            30,
            what="the question in the inbox",
        )
        question_id = str(uuid.UUID(rows[0][0]))
        for token in (first, second, c.approver_token):
            r = await in_thread(
                lambda token=token: httpx2.get(
                    c.url + "/v1/pending", headers={"Authorization": f"Bearer {token}"}
                )
            )
            assert all(i["id"] != question_id for i in r.json()["pending"]), r.text
        r = await in_thread(
            lambda: c.approver.post(
                f"/v1/pending/{question_id}/answer", json={"action": "accept", "content": {"name": "Token"}}
            )
        )
        assert r.status_code == 404, r.text
        web = await in_thread(lambda: signed_in(c, "asked-person"))
        try:
            r = await in_thread(
                lambda: web.post(
                    f"/pending/{question_id}/answer/",
                    data={
                        "action": "accept",
                        "name": "Inbox",
                        "csrfmiddlewaretoken": web.cookies["csrftoken"],
                    },
                    headers={"Referer": c.url + "/pending/"},
                )
            )
            assert r.status_code in (200, 302), r.text
        finally:
            web.close()

    async with (
        client_of(c, "legacy", a_person, token=first) as a,
        client_of(c, "legacy", b_person, token=second) as b,
        anyio.create_task_group() as tg,
    ):
        held: list = []

        async def hold() -> None:
            held.append(await a.call_tool("ask25__hold", {"seconds": 30}))

        tg.start_soon(hold)
        await await_until(a_running, 30, what="A's call running")
        tg.start_soon(answer_it)
        with anyio.fail_after(60):
            result = await b.call_tool("ask25__ask_form", {"message": "Whose?"})
        tg.cancel_scope.cancel()
    assert answers_in(result) == [{"action": "accept", "content": {"name": "Inbox"}}]
    assert a_person.asked == [] and b_person.asked == []


@pytest.mark.asyncio
async def test_it_refuses_a_tampered_expired_or_foreign_request_state_and_sends_nothing_upstream(c):
    person = Person()
    async with client_of(c, "auto", person) as client:
        first = await client.session.call_tool(
            "ask25__ask_form", {"message": "Signed?"}, allow_input_required=True
        )
        assert isinstance(first, mcp_types.InputRequiredResult), first
        (key,) = first.input_requests
        state = first.request_state
        request = first.input_requests[key]
        assert request.params.message == "Signed?"
        answer = {key: mcp_types.ElicitResult(action="accept", content={"name": "Signed"})}

        call_id, question_id = state.split(".")[:2]
        with override_settings(SECRET_KEY="live-test"):
            token_id = int(state.split(".")[2])
            expired = relay.sign(call_id, question_id, token_id, now=time.time() - relay.LIFETIME - 1)
        tampered = state[:-1] + ("A" if state[-1] != "A" else "B")
        for bad, why in ((tampered, "invalid requestState"), (expired, "requestState expired")):
            with pytest.raises(MCPError) as refused:
                await client.session.call_tool(
                    "ask25__ask_form",
                    {"message": "Signed?"},
                    input_responses=answer,
                    request_state=bad,
                    allow_input_required=True,
                )
            assert refused.value.error.code == -32602 and why in refused.value.error.message
        other = c._insert_token("someone-else")
        async with client_of(c, "auto", Person(), token=other) as stranger:
            with pytest.raises(MCPError) as refused:
                await stranger.session.call_tool(
                    "ask25__ask_form",
                    {"message": "Signed?"},
                    input_responses=answer,
                    request_state=state,
                    allow_input_required=True,
                )
            assert "another client" in refused.value.error.message
        # Nothing went upstream: the question is still open, and the right answer still works.
        assert [q[0] for q in questions_of(c, "mcp__ask25__ask_form")] == ["asked"]
        with anyio.fail_after(60):
            done = await client.session.call_tool(
                "ask25__ask_form",
                {"message": "Signed?"},
                input_responses=answer,
                request_state=state,
                allow_input_required=True,
            )
    assert answers_in(done) == [{"action": "accept", "content": {"name": "Signed"}}]


@pytest.mark.asyncio
async def test_it_cancels_the_question_when_a_2025_client_goes_away(c):
    asked = anyio.Event()

    async def never(ctx, params):
        asked.set()
        await anyio.sleep_forever()

    async with client_of(c, "legacy", never) as client:
        with anyio.move_on_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(client.call_tool, "ask26__ask_form", {"message": "Still there?"})
                await asked.wait()
                tg.cancel_scope.cancel()  # the SDK sends notifications/cancelled
    tool = "mcp__ask26__ask_form"
    wait_until(lambda: [q[0] for q in questions_of(c, tool)] == ["cancelled"], 20, what="question cancelled")
    wait_until(
        lambda: (
            db_rows(
                c, "select status from mcpcore_toolcall where tool_name = ? order by created_at desc", tool
            )[0][0]
            == "cancelled"
        ),
        20,
        what="call cancelled",
    )


def test_it_relays_form_questions_to_a_typescript_client_that_declares_form_only(c):
    """The TypeScript SDK's client declaring `elicitation: {}` (form only, as Claude Code
    does): a form question is relayed to it; a URL question goes to the inbox."""
    ts = TsClient(c, capabilities={"elicitation": {}})
    try:
        ts.answer(ts.send("answers", answers=[{"action": "accept", "content": {"name": "Ts"}}]), 10)
        got = ts.answer(ts.send("call", name="ask25__ask_form", arguments={"message": "TS?"}), 60)
        assert "result" in got, got
        assert json.loads(got["result"]["content"][0]["text"])["answers"] == [
            {"action": "accept", "content": {"name": "Ts"}}
        ]
        elicit = ts.wait(lambda e: e.get("event") == "elicit", 5)
        assert elicit["params"]["message"] == "TS?"
        assert questions_of(c, "mcp__ask25__ask_form")[0][:3] == ("answered", "form", "client")

        asked = ts.send("call", name="ask26__ask_url", arguments={"url": "https://pay.example.com/x"})
        item = wait_until(
            lambda: _question_item(c, "mcp__ask26__ask_url"), 30, what="the URL question in the inbox"
        )
        assert item["url"] == "https://pay.example.com/x" and "schema" not in item
        r = c.approver.post(f"/v1/pending/{item['id']}/answer", json={"action": "accept"})
        assert r.status_code == 200, r.text
        got = ts.answer(asked, 60)
        assert json.loads(got["result"]["content"][0]["text"])["answers"] == [{"action": "accept"}]
        assert [e for e in ts.seen if e.get("event") == "elicit"] == [elicit]  # nothing more relayed
    finally:
        ts.close()


@pytest.mark.asyncio
@pytest.mark.parametrize("mode", CLIENTS)
async def test_it_takes_the_question_out_of_the_inbox_when_its_client_goes_away(c, mode):
    tool = "mcp__ask25__ask_url"
    async with client_of(c, mode) as client:
        with anyio.move_on_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(client.call_tool, "ask25__ask_url", {"url": "https://gone.example.com/"})
                await await_until(lambda: _question_item(c, tool), 30, what="the question in the inbox")
                tg.cancel_scope.cancel()  # 2025: notifications/cancelled; 2026: the stream closed
    await await_until(lambda: _question_item(c, tool) is None, 20, what="the question gone from the inbox")
    assert [q[0] for q in questions_of(c, tool)] == ["cancelled"]


@pytest.mark.asyncio
async def test_it_tells_a_2025_client_when_its_servers_url_question_is_done(c):
    """`notifications/elicitation/complete` of a 2025 server reaches the 2025 client the URL
    question was relayed to, with the id it was asked with."""
    person = Person({"action": "accept"})
    completed: list[str] = []

    async def on_message(message) -> None:
        if isinstance(message, mcp_types.ElicitCompleteNotification):
            completed.append(message.params.elicitation_id)

    headers = {"Authorization": f"Bearer {c.token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120)) as http:
        transport = streamable_http_client(c.url + "/mcp", http_client=http)
        async with Client(
            transport, mode="legacy", elicitation_callback=person, message_handler=on_message
        ) as client:
            with anyio.fail_after(60):
                result = await client.call_tool(
                    "ask25__ask_url", {"url": "https://sso.example.com/", "work": 1}
                )
    assert answers_in(result) == [{"action": "accept"}]
    (asked,) = person.asked
    assert completed == [asked.elicitation_id]
