"""Servers' questions across processes (SPEC 20.4): the worker holding the server records
the question; it is answered through the other web process than the one the call came in on,
and the server receives the answer. For a `/v1` call the inbox is answered through web 2; for a
2026-07-28 MCP client asked through web 1, its retry with the console's signed `requestState`
goes to web 2."""

import json

import anyio
import httpx2
import mcp_types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.live import our_server, wait_until
from tests.scaleout.cluster import Cluster, all_connected

pytestmark = pytest.mark.scaleout

SERVERS = ["ask26", "ask25"]


@pytest.fixture(scope="module")
def cluster():
    servers = {"ask26": our_server("asking.py"), "ask25": our_server("asking.py", env={"ASKING_LEGACY": "1"})}
    c = Cluster(servers, allow=["mcp__ask26__*", "mcp__ask25__*"])
    c.approver = c.manage("create_token", "approver", "--role", "approver").strip()
    yield c
    c.close()


def question_item(api: httpx2.Client, tool_name: str) -> dict | None:
    items = api.get("/v1/pending").json()["pending"]
    return next((i for i in items if i.get("kind") == "question" and i["tool_name"] == tool_name), None)


@pytest.mark.parametrize("server", SERVERS)
def test_it_answers_through_web_2_the_question_of_a_call_made_through_web_1(cluster, server):
    wait_until(lambda: all_connected(cluster, SERVERS), 40, 0.2, what="both asking servers connected")
    tool = f"mcp__{server}__ask_form"
    with cluster.api(0) as web1, cluster.api(1) as web2:
        r = web1.post("/v1/mcp/call", json={"name": tool, "arguments": {"message": "Across?"}, "wait": 0})
        assert r.status_code == 202, r.text
        call_id = r.json()["call_id"]
        item = wait_until(lambda: question_item(web2, tool), 30, 0.2, what="the question on web 2")
        assert item["call_id"] == call_id
        web2.headers["Authorization"] = f"Bearer {cluster.approver}"
        r = web2.post(
            f"/v1/pending/{item['id']}/answer", json={"action": "accept", "content": {"name": "Two"}}
        )
        assert r.status_code == 200, r.text
        done = wait_until(
            lambda: (row := web1.get(f"/v1/mcp/calls/{call_id}").json())["status"] == "done" and row,
            30,
            0.2,
            what="the call done",
        )
    assert json.loads(done["result"])["answers"] == [{"action": "accept", "content": {"name": "Two"}}]


@pytest.mark.parametrize("server", SERVERS)
def test_it_takes_a_2026_clients_answer_through_web_2_to_a_question_asked_through_web_1(cluster, server):
    wait_until(lambda: all_connected(cluster, SERVERS), 40, 0.2, what="both asking servers connected")

    async def declined(ctx, params):
        return mcp_types.ElicitResult(action="decline")

    async def main():
        headers = {"Authorization": f"Bearer {cluster.token}"}
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120)) as http:
            one = Client(
                streamable_http_client(cluster.webs[0] + "/mcp", http_client=http),
                elicitation_callback=declined,
            )
            two = Client(
                streamable_http_client(cluster.webs[1] + "/mcp", http_client=http),
                elicitation_callback=declined,
            )
            async with one, two:
                with anyio.fail_after(60):
                    first = await one.session.call_tool(
                        f"{server}__ask_form", {"message": "Split?"}, allow_input_required=True
                    )
                    assert isinstance(first, mcp_types.InputRequiredResult), first
                    (key,) = first.input_requests
                    return await two.session.call_tool(
                        f"{server}__ask_form",
                        {"message": "Split?"},
                        input_responses={
                            key: mcp_types.ElicitResult(action="accept", content={"name": "Web2"})
                        },
                        request_state=first.request_state,
                        allow_input_required=True,
                    )

    result = anyio.run(main)
    assert json.loads(result.content[0].text)["answers"] == [
        {"action": "accept", "content": {"name": "Web2"}}
    ]
