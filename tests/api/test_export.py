"""SPEC 18.2 (issue 22): `GET /v1/calls/export`, JSONL and CSV, filters, results on request,
exact 400s; and 100,000 calls exported by a real `serve` in bounded memory."""

import csv
import datetime
import io
import json
import threading
import uuid

import httpx2
import psutil
import pytest
from asgiref.sync import async_to_sync
from django.test import Client
from django.utils import timezone

from mcpcore.choices import TokenRole
from mcpcore.models import ApiToken, Question, ToolCall
from tests.live import call_row, insert_call_rows

T0 = datetime.datetime(2026, 3, 1, 12, 0, tzinfo=datetime.UTC)
HEADER = "call_id,created_at,server,tool,status,decision,decided_by,token,session_id,duration_ms,arguments"


@pytest.fixture
def approver(db) -> str:
    return ApiToken.issue("auditor", role=TokenRole.APPROVER)[1]


@pytest.fixture
def history(db) -> list[ToolCall]:
    """Six calls, a minute apart, over two servers, made by the token `maker`."""
    maker, _ = ApiToken.issue("maker")
    made = []
    for i in range(6):
        server = "alpha" if i % 2 == 0 else "beta"
        made.append(
            ToolCall.objects.create(
                session_id=f"s-{i}",
                tool_name=f"mcp__{server}__echo",
                server_name=server,
                tool="echo",
                arguments={"text": f"hi {i}", "n": i},
                token=maker,
                status="error" if i == 3 else "done",
                decision="auto",
                created_at=T0 + datetime.timedelta(minutes=i),
                started_at=T0 + datetime.timedelta(minutes=i),
                ended_at=T0 + datetime.timedelta(minutes=i, milliseconds=250),
                result=f"result, {i}\nwith a second line",
            )
        )
    return made


def _drain(response) -> bytes:
    """The body of a streamed answer (an async iterator, as served under ASGI)."""

    async def collect() -> bytes:
        return b"".join([part async for part in response.streaming_content])

    return async_to_sync(collect)()


def export(token: str, query: str = "") -> tuple[int, str, str]:
    r = Client().get(f"/v1/calls/export{query}", HTTP_AUTHORIZATION=f"Bearer {token}")
    body = _drain(r).decode() if r.streaming else r.content.decode()
    return r.status_code, r["Content-Type"], body


def detail(token: str, call: ToolCall) -> dict:
    """The body of `GET /v1/mcp/calls/<id>`, which an export line is (SPEC 18.2)."""
    r = Client().get(f"/v1/mcp/calls/{call.id}", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert r.status_code == 200, r.content
    return r.json()


def test_it_exports_every_call_oldest_first_as_json_lines_without_results(approver, history):
    status, kind, body = export(approver)
    assert status == 200 and kind.startswith("application/jsonl")
    lines = [json.loads(line) for line in body.splitlines()]
    assert [x["call_id"] for x in lines] == [str(c.id) for c in history]
    first = lines[0]
    assert "result" not in first
    expected = detail(approver, history[0])
    expected.pop("result")
    assert first == expected


def test_it_exports_each_call_as_the_body_of_its_detail_with_its_questions(approver, history):
    asked = history[2]
    at = asked.created_at + datetime.timedelta(seconds=1)
    Question.objects.create(
        call=asked, server_name="alpha", message="Which colour?", status="answered",
        schema={"type": "object", "properties": {"colour": {"type": "string"}}},
        answer={"action": "accept", "content": {"colour": "red"}}, answered_by="ann",
        created_at=at, answered_at=at + datetime.timedelta(seconds=5),
    )  # fmt: skip
    Question.objects.create(
        call=asked, server_name="alpha", mode="url", url="https://example.com/sign-in", message="Sign in",
        status="declined", answer={"action": "decline"}, created_at=at + datetime.timedelta(seconds=9),
    )  # fmt: skip
    for query in ("", "?results=1"):
        _, _, body = export(approver, query)
        lines = [json.loads(line) for line in body.splitlines()]
        for line, call in zip(lines, history, strict=True):
            want = detail(approver, call)
            if not query:
                want.pop("result")
            assert line == want, query
        assert [q["message"] for q in lines[2]["questions"]] == ["Which colour?", "Sign in"]
        assert all(x["questions"] == [] for i, x in enumerate(lines) if i != 2)


def test_it_includes_results_when_asked(approver, history):
    _, _, body = export(approver, "?results=1")
    assert json.loads(body.splitlines()[2])["result"] == "result, 2\nwith a second line"
    _, _, body = export(approver, "?results=0")
    assert "result" not in json.loads(body.splitlines()[2])


def test_it_filters_by_time_server_tool_and_status(approver, history):
    def ids(query: str) -> list[str]:
        status, _, body = export(approver, query)
        assert status == 200, body
        return [json.loads(line)["call_id"] for line in body.splitlines()]

    since, until = (
        (T0 + datetime.timedelta(minutes=1)).isoformat(),
        (T0 + datetime.timedelta(minutes=4)).isoformat(),
    )
    assert ids(f"?since={since}&until={until}".replace("+", "%2B")) == [str(c.id) for c in history[1:4]]
    assert ids("?since=2026-03-01T12:05:00Z") == [str(history[5].id)]  # inclusive, Z accepted
    assert ids("?until=2026-03-01T12:01:00") == [str(history[0].id)]  # exclusive, naive is UTC
    assert ids("?server=beta") == [str(c.id) for c in history[1::2]]
    assert ids("?tool=mcp__alpha__echo&status=done") == [str(c.id) for c in history[0::2]]
    assert ids("?status=error") == [str(history[3].id)]
    assert ids("?server=nosuch") == [] and ids("?tool=mcp__x__y") == []


def test_it_exports_csv_with_the_columns_of_the_spec(approver, history):
    status, kind, body = export(approver, "?format=csv&server=alpha")
    assert status == 200 and kind.startswith("text/csv")
    table = list(csv.reader(io.StringIO(body)))
    assert ",".join(table[0]) == HEADER
    assert len(table) == 4
    row = dict(zip(table[0], table[1], strict=True))
    c = history[0]
    assert row == {
        "call_id": str(c.id),
        "created_at": "2026-03-01T12:00:00Z",
        "server": "alpha",
        "tool": "mcp__alpha__echo",
        "status": "done",
        "decision": "auto",
        "decided_by": "",
        "token": "maker",
        "session_id": "s-0",
        "duration_ms": "250.0",
        "arguments": '{"text":"hi 0","n":0}',
    }
    _, _, body = export(approver, "?format=csv&results=1&status=error")
    table = list(csv.reader(io.StringIO(body)))
    assert table[0][-1] == "result" and table[1][-1] == "result, 3\nwith a second line"


@pytest.mark.parametrize(
    "query, message",
    [
        ("?since=yesterday", "invalid since: yesterday"),
        ("?until=2026-13-01", "invalid until: 2026-13-01"),
        ("?status=finished", "invalid status: finished"),
        ("?format=xml", "invalid format: xml"),
        ("?results=yes", "invalid results: yes"),
        ("?kind=tool_confirm", "invalid kind: tool_confirm"),
        ("?kind=Prompt", "invalid kind: Prompt"),
    ],
)
def test_it_answers_400_naming_a_bad_parameter_and_its_value(approver, query, message):
    status, kind, body = export(approver, query)
    assert (status, json.loads(body)) == (400, {"error": message})
    assert kind.startswith("application/json")


# --- 100,000 calls through a real serve -----------------------------------------------------------

CALLS = 100_000


class Peak(threading.Thread):
    """Samples a process's RSS every 20 ms until stopped; `.peak` in bytes."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.proc, self.peak, self.done = psutil.Process(pid), 0, threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.02):
            self.peak = max(self.peak, self.proc.memory_info().rss)


URI = "file:///srv/" + "u" * 750


@pytest.fixture
def kinds(db, history) -> dict[str, ToolCall]:
    """Beside `history`'s six tool calls: a prompt get, a resource read (a URI longer than
    tool_name keeps) and a permission prompt, later than them."""
    at = T0 + datetime.timedelta(hours=1)
    common = dict(status="done", decision="auto", session_id="s-k")
    return {
        "prompt": ToolCall.objects.create(
            kind="prompt", tool_name="mcp__alpha__review", tool="review", server_name="alpha",
            arguments={"style": "terse"}, created_at=at, **common,
        ),
        "resource": ToolCall.objects.create(
            kind="resource", tool_name=URI[:700], tool="", server_name="alpha", arguments={"uri": URI},
            created_at=at + datetime.timedelta(seconds=1), **common,
        ),
        "permission_prompt": ToolCall.objects.create(
            kind="permission_prompt", tool_name="Bash", tool="Bash", server_name="",
            arguments={"command": "ls"}, created_at=at + datetime.timedelta(seconds=2), **common,
        ),
    }  # fmt: skip


def test_it_carries_and_filters_by_kind_in_json_lines(approver, kinds):
    _, _, body = export(approver)
    lines = [json.loads(line) for line in body.splitlines()]
    assert [x["kind"] for x in lines] == ["tool"] * 6 + ["prompt", "resource", "permission_prompt"]
    by_id = {x["call_id"]: x for x in lines}
    for call in kinds.values():
        expected = detail(approver, call)
        expected.pop("result")
        assert by_id[str(call.id)] == expected
    assert by_id[str(kinds["resource"].id)]["uri"] == URI
    for kind, count in (("tool", 6), ("prompt", 1), ("resource", 1), ("permission_prompt", 1)):
        _, _, body = export(approver, f"?kind={kind}")
        assert [json.loads(x)["kind"] for x in body.splitlines()] == [kind] * count


def test_it_keeps_the_csv_header_exact_and_filters_csv_by_kind(approver, kinds):
    _, _, body = export(approver, "?format=csv&kind=resource")
    table = list(csv.reader(io.StringIO(body)))
    assert ",".join(table[0]) == HEADER  # no kind column: SPEC 18.2's header is exact
    assert len(table) == 2 and table[1][3] == URI[:700] and json.loads(table[1][10]) == {"uri": URI}


@pytest.mark.live
def test_it_exports_100000_calls_from_serve_in_bounded_memory(console):
    con = console({}, start=False)
    start = timezone.now() - datetime.timedelta(days=1)
    result = "r" * 1000  # 1 kB each: the export (with results) is over 100 MB
    insert_call_rows(
        con.data / "db.sqlite3",
        (
            call_row(start + datetime.timedelta(milliseconds=i), arguments={"i": i}, result=result)
            for i in range(CALLS)
        ),
    )
    console.start(con)
    try:
        # Warm up the route (imports, connections) so the baseline is serve at work, not cold.
        con.http.get("/v1/calls/export?status=skipped").raise_for_status()
        before = psutil.Process(con.proc.pid).memory_info().rss
        peak = Peak(con.proc.pid)
        peak.start()
        size = count = 0
        last = None
        with httpx2.stream(
            "GET",
            f"{con.url}/v1/calls/export?results=1",
            headers={"Authorization": f"Bearer {con.token}"},
            timeout=300,
        ) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if line:
                    count += 1
                    size += len(line)
                    last = line
        peak.done.set()
        peak.join()
    finally:
        con.close()
    assert count == CALLS
    assert json.loads(last)["arguments"] == {"i": CALLS - 1}
    grew = max(peak.peak - before, 0)
    print(f"export of {size / 2**20:.0f} MB: serve RSS {before / 2**20:.0f} MB, peak +{grew / 2**20:.1f} MB")
    assert size > 100 * 2**20
    # Whole-table buffering would grow by more than the body; chunks of 500 calls cost a few MB.
    assert grew < 40 * 2**20, grew
    assert uuid.UUID(json.loads(last)["call_id"])
