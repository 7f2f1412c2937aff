"""SPEC 18.1 (issue 22): old calls are deleted with their deliveries, old results cut, pending
and running calls never touched; the storage figures; and a real `serve` whose clock runs 100
days ahead (libfaketime) pruning a history it was handed."""

import datetime
import shutil
import uuid
from pathlib import Path

import pytest
from django.utils import timezone

from mcpcore import retention
from mcpcore.calls import notify
from mcpcore.models import Delivery, NotificationTarget, Question, ToolCall
from tests.live import CALL_COLUMNS, call_row, insert_call_rows, wait_until

DAY = datetime.timedelta(days=1)
LONG = "".join(chr(0x61 + i % 26) for i in range(5000)) + "é" * 100  # > 1,024 characters
MARK30 = "\n[result removed after 30 days]"


def call(age: datetime.timedelta, status: str = "done", result: str = "ok", **fields) -> ToolCall:
    now = timezone.now()
    fields = {
        "session_id": "s",
        "tool_name": "mcp__srv__tool",
        "server_name": "srv",
        "tool": "tool",
        "status": status,
        "created_at": now - age,
        "result": result,
        **fields,
    }
    if status == "pending":
        fields.setdefault("confirm_id", uuid.uuid4())
    return ToolCall.objects.create(**fields)


def delivery(c: ToolCall, target: NotificationTarget) -> Delivery:
    return Delivery.objects.create(
        target=target, call_id=c.id, event_type=notify.PENDING, message_id=notify.new_message_id(), body="{}"
    )


def test_it_writes_raw_rows_with_the_models_columns():
    assert tuple(f.column for f in ToolCall._meta.concrete_fields) == CALL_COLUMNS


@pytest.mark.django_db
def test_it_deletes_ended_calls_past_the_history_limit_with_their_deliveries_and_nothing_live():
    target = NotificationTarget.objects.create(kind="webhook", url="http://127.0.0.1:9/hook")
    old = {s: call(100 * DAY, s) for s in ("done", "error", "skipped", "expired", "cancelled", "interrupted")}
    pending = call(100 * DAY, "pending")
    running = call(100 * DAY, "running")
    recent = call(89 * DAY)
    for c in (old["done"], pending, recent):
        delivery(c, target)
    test_message = notify.queue_test(target)

    done = retention.prune()

    assert done.calls == len(old) and done.deliveries == 1
    left = set(ToolCall.objects.values_list("id", flat=True))
    assert left == {pending.id, running.id, recent.id}
    assert set(Delivery.objects.values_list("call_id", flat=True)) == {pending.id, recent.id, None}
    assert Delivery.objects.filter(id=test_message.id).exists()


@pytest.mark.django_db
def test_it_deletes_the_questions_of_a_call_with_it_and_counts_calls_alone():
    """SPEC 20.4: a question and its answer are kept with the call, and go with it."""
    gone, kept = call(100 * DAY, "done"), call(100 * DAY, "running")
    for c in (gone, gone, kept):
        Question.objects.create(call=c, server_name="srv", message="Name?", schema={}, status="answered")

    done = retention.prune()

    assert (done.calls, done.questions) == (1, 2)
    assert list(Question.objects.values_list("call_id", flat=True)) == [kept.id]


@pytest.mark.django_db
def test_it_cuts_old_long_results_with_the_exact_marker_and_drops_their_copies():
    long_old = call(31 * DAY, result=LONG, raw_result=LONG + " raw", native_result={"content": []})
    short_old = call(31 * DAY, result="short", raw_result="short raw")
    long_new = call(29 * DAY, result=LONG, raw_result=LONG)
    long_pending = call(31 * DAY, "pending", result=LONG)

    assert retention.prune().results == 1

    long_old.refresh_from_db()
    assert long_old.result == LONG[:1024] + MARK30
    assert long_old.raw_result == "" and long_old.native_result is None and long_old.truncated
    short_old.refresh_from_db()
    assert short_old.result == "short" and short_old.raw_result == ""
    long_new.refresh_from_db()
    assert long_new.result == LONG and long_new.raw_result == LONG
    long_pending.refresh_from_db()
    assert long_pending.result == LONG
    assert retention.prune().results == 0  # a cut result is not cut again


@pytest.mark.django_db
def test_it_keeps_everything_when_the_days_are_0(settings):
    settings.AGENVOY_HISTORY_DAYS = settings.AGENVOY_RESULT_DAYS = 0
    ancient = call(3650 * DAY, result=LONG)
    assert retention.prune().calls == 0
    ancient.refresh_from_db()
    assert ancient.result == LONG


@pytest.mark.django_db
def test_it_deletes_at_most_1000_calls_per_transaction():
    created = timezone.now() - 100 * DAY
    ToolCall.objects.bulk_create(
        ToolCall(
            session_id="s", tool_name="t", server_name="srv", tool="t", status="done", created_at=created
        )
        for _ in range(2500)
    )
    cutoff, _ = retention.cutoffs(timezone.now())
    assert retention.BATCH <= 1000
    assert [retention.delete_batch(cutoff, 1000).calls for _ in range(4)] == [1000, 1000, 500, 0]
    assert retention.prune().calls == 0


@pytest.mark.django_db
def test_it_uses_the_days_it_is_configured_with_in_the_marker(settings):
    settings.AGENVOY_RESULT_DAYS = 7
    c = call(8 * DAY, result=LONG)
    retention.prune()
    c.refresh_from_db()
    assert c.result == LONG[:1024] + "\n[result removed after 7 days]"
    assert retention.cut(LONG, 7) == c.result and retention.cut("short", 7) == "short"


@pytest.mark.django_db
def test_it_reports_the_storage_figures_in_the_status(api):
    assert api.get("/v1/mcp/status").json()["storage"]["calls"] == 0
    assert api.get("/v1/mcp/status").json()["storage"]["oldest"] is None
    first = call(5 * DAY, "pending")
    call(1 * DAY)
    storage = api.get("/v1/mcp/status").json()["storage"]
    assert storage["calls"] == 2
    assert storage["oldest"] == first.created_at.isoformat().replace("+00:00", "Z")
    assert storage["database_bytes"] > 0


@pytest.mark.django_db
def test_it_shows_the_storage_figures_in_the_servers_page_footer(client, django_user_model):
    client.force_login(django_user_model.objects.create_user("op", password="pw-123456789"))
    call(3 * DAY)
    page = client.get("/").content.decode()
    assert 'id="storage"' in page and "1 call kept since" in page
    assert "Ended calls are kept 90 days, their full results 30 days." in page


# --- a real serve with its clock 100 days ahead ---------------------------------------------------

LIBFAKETIME = next(iter(sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))), Path("/nonexistent"))


@pytest.mark.live
@pytest.mark.skipif(not LIBFAKETIME.exists() or not shutil.which("faketime"), reason="needs libfaketime")
def test_it_prunes_a_history_100_days_old_on_a_serve_whose_clock_runs_ahead(console):
    """Rows are written as of the real clock; serve runs 100 days later (libfaketime moves its
    whole process clock: Python's time, datetime and the event loop's), so a call made now is
    100 days old there."""
    con = console({}, {"LD_PRELOAD": str(LIBFAKETIME), "FAKETIME": "+100d"}, start=False)
    now = datetime.datetime.now(datetime.UTC)
    old_done = call_row(now, status="done", result="old")  # 100 days old in serve's time
    old_pending = call_row(now, status="pending", result="")
    cut_me = call_row(now + 50 * DAY, status="done", result=LONG, raw_result=LONG)  # 50 days old
    fresh = call_row(now + 95 * DAY, status="error", result=LONG)  # 5 days old
    insert_call_rows(con.data / "db.sqlite3", [old_done, old_pending, cut_me, fresh])
    try:
        console.start(con)

        def passed():
            # The pass's own line, written once it has deleted and then cut (the deletes commit
            # first: the calls' count alone can be read before the cut is done).
            return next((x for x in con.log_text().splitlines() if "retention: deleted" in x), None)

        wait_until(passed, 30, 0.2, "the first pass (5 s after start-up)")
        storage = con.http.get("/v1/mcp/status").json()["storage"]
        assert storage["calls"] == 3
        assert storage["oldest"].startswith(now.date().isoformat())  # the pending call, kept
        call_of = lambda r: con.http.get(f"/v1/mcp/calls/{uuid.UUID(r[0])}")  # noqa: E731
        assert call_of(old_done).status_code == 404
        assert call_of(old_pending).json()["status"] == "pending"
        assert call_of(cut_me).json()["result"] == LONG[:1024] + MARK30
        assert call_of(fresh).json()["result"] == LONG
        # serve's log lines carry its own clock: 100 days on.
        line = next(x for x in con.log_text().splitlines() if "retention: deleted" in x)
        assert line.startswith((now + 100 * DAY).date().isoformat()), line
        assert "deleted 1 calls (0 deliveries), cut 1 results" in line
    finally:
        con.close()


@pytest.mark.django_db
def test_it_prunes_prompt_gets_and_resource_reads_like_every_call():
    """SPEC 18.1 for the kinds of 20.3: deleted past the history limit, results cut past the
    result limit (their wire result, kept for every one of them, dropped too), live ones kept."""
    uri = "file:///srv/readme.md"
    prompt = {
        "kind": "prompt",
        "tool_name": "mcp__srv__review",
        "tool": "review",
        "arguments": {"style": "x"},
    }
    resource = {"kind": "resource", "tool_name": uri, "tool": "", "arguments": {"uri": uri}}
    old = [call(100 * DAY, **prompt), call(100 * DAY, "error", **resource)]
    pending = [call(100 * DAY, "pending", **prompt), call(100 * DAY, "pending", **resource)]
    wire = {"contents": [{"uri": uri, "text": LONG}]}
    cut = call(31 * DAY, result=LONG, native_result=wire, **resource)
    kept = call(29 * DAY, result=LONG, native_result=wire, **prompt)

    done = retention.prune()

    assert (done.calls, done.results) == (len(old), 1)
    assert set(ToolCall.objects.values_list("id", flat=True)) == {c.id for c in (*pending, cut, kept)}
    cut.refresh_from_db()
    assert (cut.result, cut.native_result, cut.truncated) == (LONG[:1024] + MARK30, None, True)
    kept.refresh_from_db()
    assert (kept.result, kept.native_result) == (LONG, wire)
