"""SPEC 18.3 (issue 22): `GET /metrics` from prometheus-client, exactly the series of the spec,
who may read it, and counters that agree with the history, read by prometheus-client's own
parser and by a real Prometheus server scraping a real `serve`."""

import datetime
import ipaddress
import json
import shutil
import subprocess
from collections import Counter

import httpx2
import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from mcpcore import calls, metrics
from mcpcore.models import ApiToken, ToolCall
from tests.live import Console, free_port, our_server, wait_until
from tests.rows import make_call

ECHO = "mcp__echo__echo"
FAMILIES = {
    "agenvoy_tool_calls": ("counter", {"server", "status", "decision"}),
    "agenvoy_tool_call_seconds": ("histogram", {"server"}),
    "agenvoy_confirmation_wait_seconds": ("histogram", set()),
    "agenvoy_confirmations": ("counter", {"outcome"}),
    "agenvoy_pending_confirmations": ("gauge", set()),
    "agenvoy_server_up": ("gauge", {"server"}),
    "agenvoy_mcp_sessions": ("gauge", set()),
    "agenvoy_notification_deliveries": ("counter", {"kind", "outcome"}),
    # SPEC 25: calls a limit refused, calls held as a repeat.
    "agenvoy_rate_limited": ("counter", {"server", "tool"}),
    "agenvoy_repeats_held": ("counter", {"server", "tool"}),
}


def families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples(text: str, name: str) -> dict:
    """{labels as a sorted tuple: value} of one sample name."""
    return {
        tuple(sorted(s.labels.items())): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == name
    }


# --- in process ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_it_exposes_exactly_the_series_of_the_spec(settings):
    settings.AGENVOY_METRICS_ALLOW = (ipaddress.ip_network("127.0.0.0/8"),)
    metrics.delivery_attempted("webhook", "sent")  # so that every family has a sample
    metrics.call_ended("srv", "done", "auto")
    r = Client().get("/metrics")
    assert r.status_code == 200 and r["Content-Type"].startswith("text/plain")
    found = families(r.content.decode())
    assert set(found) == set(FAMILIES)
    for name, (kind, labels) in FAMILIES.items():
        assert found[name].type == kind, name
        for s in found[name].samples:
            assert set(s.labels) - {"le"} == labels, (name, s)
    names = {s.name for f in found.values() for s in f.samples}
    assert not [n for n in names if n.endswith("_created")]
    assert {"agenvoy_tool_calls_total", "agenvoy_confirmations_total"} <= names


@pytest.mark.django_db
@pytest.mark.parametrize(
    "allow, address, status",
    [
        ("127.0.0.1/32", "127.0.0.1", 200),
        ("10.0.0.0/8, 192.168.1.0/24", "192.168.1.20", 200),
        ("10.0.0.0/8", "127.0.0.1", 401),
        ("", "127.0.0.1", 401),
        ("::1/128", "::1", 200),
    ],
)
def test_it_lets_addresses_inside_the_allowed_networks_read_without_a_token(settings, allow, address, status):
    settings.AGENVOY_METRICS_ALLOW = tuple(
        ipaddress.ip_network(p.strip(), strict=False) for p in allow.split(",") if p.strip()
    )
    r = Client(REMOTE_ADDR=address).get("/metrics")
    assert r.status_code == status
    if status == 401:
        assert r.json() == {"error": "authentication required"}


@pytest.mark.django_db
def test_it_counts_a_person_decision_and_its_wait_once_committed(django_capture_on_commit_callbacks):
    before = metrics.confirmation_wait._sum.get(), metrics.confirmations.labels("denied")._value.get()
    token, _ = ApiToken.issue("asker")
    created = timezone.now() - datetime.timedelta(seconds=7)
    call = make_call(tool="tool", server="srv", session_id="s", token=token, arguments={}, created_at=created)
    with django_capture_on_commit_callbacks() as committed:
        calls.reply("s", str(call.confirm_id), {"approve": False}, "person")
        assert metrics.confirmations.labels("denied")._value.get() == before[1]  # not yet
    assert len(committed) == 2  # the confirmation, and the call it ended
    for callback in committed:
        callback()
    assert metrics.confirmations.labels("denied")._value.get() == before[1] + 1
    assert metrics.confirmation_wait._sum.get() - before[0] >= 7
    assert metrics.tool_calls.labels("srv", "skipped", "deny")._value.get() >= 1


@pytest.mark.django_db
def test_it_counts_prompt_gets_and_resource_reads_as_calls_of_their_server(
    django_capture_on_commit_callbacks,
):
    """SPEC 20.3 adds no series and no label (18.3): a prompt get or a resource read is a call
    of its server in agenvoy_tool_calls_total and agenvoy_tool_call_seconds, its confirmation
    one of agenvoy_confirmations_total, and a pending one is in agenvoy_pending_confirmations."""
    counted = lambda status, decision: metrics.tool_calls.labels("docs", status, decision)._value.get()  # noqa: E731
    before = counted("done", "approve"), counted("skipped", "deny"), counted("expired", "expired")
    seconds = metrics.tool_call_seconds.labels("docs")._sum.get()
    uri = "file:///srv/readme.md"
    prompt = make_call(kind="prompt", tool="review", server="docs", session_id="s", arguments={"style": "x"})
    resource = make_call(
        kind="resource", tool="", tool_name=uri, server="docs", session_id="s", arguments={"uri": uri}
    )
    late = make_call(
        kind="resource", tool="", tool_name=uri, server="docs", session_id="s", arguments={"uri": uri}
    )
    assert metrics.database_gauges()["pending"] == 3
    with django_capture_on_commit_callbacks(execute=True):
        calls.reply("s", str(prompt.confirm_id), {"approve": True}, "person")
        start = timezone.now()
        ToolCall.objects.filter(id=prompt.id).update(started_at=start)
        calls.finish(prompt.id, "done", "user: hi", ended_at=start + datetime.timedelta(seconds=2))
        calls.reply("s", str(resource.confirm_id), {"approve": False}, "person")
        ToolCall.objects.filter(id=late.id).update(expires_at=timezone.now())
        calls.expire_due()
    after = counted("done", "approve"), counted("skipped", "deny"), counted("expired", "expired")
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 1, 1]
    assert metrics.tool_call_seconds.labels("docs")._sum.get() - seconds == pytest.approx(2)
    assert metrics.database_gauges()["pending"] == 0


# --- a real serve, its history, and a real Prometheus ----------------------------------------------


@pytest.fixture(scope="module")
def console(module_console):
    con = module_console({"echo": our_server("echo.py")}, {"AGENVOY_CONFIRM_TIMEOUT": "4"})
    con.wait_connected("echo")
    return con


def scrape(con: Console) -> str:
    r = con.http.get("/metrics")
    assert r.status_code == 200, r.text
    return r.text


def history_counts(con: Console) -> Counter:
    lines = con.approver.get("/v1/calls/export").text.splitlines()
    return Counter((json.loads(x)["status"], json.loads(x)["decision"]) for x in lines)


@pytest.mark.live
def test_it_counts_every_call_once_as_the_history_records_it(console):
    for i in range(3):
        assert console.call(ECHO, {"text": f"auto {i}"}, mode="auto").json()["status"] == "done"

    def asked(text: str) -> dict:
        answer = console.call(ECHO, {"text": text}, mode="confirm", wait=0)
        assert answer.status_code == 202, answer.text
        return answer.json()

    held = asked("gauge")
    gauges = samples(scrape(console), "agenvoy_pending_confirmations")
    assert gauges == {(): 1.0}
    assert console.post(f"/v1/mcp/calls/{held['call_id']}/cancel").json() == {"ok": True}

    approved, denied, expired = asked("yes"), asked("no"), asked("late")
    assert console.reply(approved["session_id"], approved["confirm_id"], {"approve": True}).status_code == 200
    assert console.reply(denied["session_id"], denied["confirm_id"], {"approve": False}).status_code == 200
    ran = console.get(f"/v1/mcp/calls/{approved['call_id']}", wait=30).json()
    assert ran["status"] == "done"
    late = console.get(f"/v1/mcp/calls/{expired['call_id']}", wait=30).json()
    assert late["status"] == "expired"
    assert console.call("mcp__echo__nope", {}).status_code == 404  # no call: not counted

    text = scrape(console)
    counted = {
        (dict(k)["status"], dict(k)["decision"]): v
        for k, v in samples(text, "agenvoy_tool_calls_total").items()
    }
    assert counted == dict(history_counts(console))
    assert counted[("done", "approve")] == 1 and counted[("skipped", "deny")] == 1
    assert sum(counted.values()) == 7
    outcomes = {dict(k)["outcome"]: v for k, v in samples(text, "agenvoy_confirmations_total").items()}
    assert outcomes == {"approved": 1, "denied": 1, "expired": 1, "cancelled": 1}
    assert samples(text, "agenvoy_confirmation_wait_seconds_count") == {(): 2.0}  # people only
    # Calls that ran: 3 auto and the approved one, each observed once.
    assert samples(text, "agenvoy_tool_call_seconds_count") == {(("server", "echo"),): 4.0}
    assert samples(text, "agenvoy_server_up") == {(("server", "echo"),): 1.0}
    assert samples(text, "agenvoy_pending_confirmations") == {(): 0.0}


@pytest.mark.live
def test_it_counts_open_mcp_sessions(console):
    import anyio
    from mcp import Client as McpClient
    from mcp.client.streamable_http import streamable_http_client

    async def main() -> float:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {console.token}"}, timeout=30)
        async with (
            http,
            McpClient(streamable_http_client(f"{console.url}/mcp", http_client=http), mode="legacy"),
        ):
            return await anyio.to_thread.run_sync(lambda: samples(scrape(console), "agenvoy_mcp_sessions"))

    assert anyio.run(main) == {(): 1.0}  # a 2025 session, open while it is scraped


PROMETHEUS = shutil.which("prometheus")


@pytest.mark.live
@pytest.mark.skipif(PROMETHEUS is None, reason="Debian's prometheus package is not installed")
def test_it_is_scraped_by_a_real_prometheus(console, tmp_path):
    console.call(ECHO, {"text": "for prometheus"}, mode="auto")
    expected = sum(samples(scrape(console), "agenvoy_tool_calls_total").values())
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n"
        "scrape_configs:\n"
        "  - job_name: agenvoy\n"
        "    authorization:\n"
        f"      credentials: {console.token}\n"
        "    static_configs:\n"
        f"      - targets: ['127.0.0.1:{console.port}']\n"
    )
    config.chmod(0o600)
    log = open(tmp_path / "prometheus.log", "wb")
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        api = f"http://127.0.0.1:{port}/api/v1"

        def scraped():
            try:
                r = httpx2.get(f"{api}/query", params={"query": "sum(agenvoy_tool_calls_total)"}, timeout=2)
            except httpx2.HTTPError:
                return None
            if r.status_code != 200:  # 503 while Prometheus starts
                return None
            result = r.json().get("data", {}).get("result", [])
            return float(result[0]["value"][1]) if result else None

        assert wait_until(scraped, 60, 0.5, "Prometheus holding a scrape") == expected
        targets = httpx2.get(f"{api}/targets", timeout=5).json()["data"]["activeTargets"]
        assert [t["health"] for t in targets] == ["up"]
        up = httpx2.get(f"{api}/query", params={"query": "agenvoy_server_up"}, timeout=5).json()
        assert [(r["metric"]["server"], r["value"][1]) for r in up["data"]["result"]] == [("echo", "1")]
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()
