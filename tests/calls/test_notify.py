"""SPEC 15 / issue 14: webhooks and ntfy pushes for confirmations, sent by the notifier loop to a
real HTTP receiver on loopback; and the pure signing and payload helpers.

The signature is checked the way the Standard Webhooks reference libraries verify one: drop
`whsec_`, base64-decode the rest as the HMAC key, HMAC-SHA256 over `<id>.<timestamp>.<body>`,
base64, compare in constant time with each `v1,` entry of `webhook-signature`.
"""

import asyncio
import base64
import datetime
import json
import time
import uuid

import pytest
import pytest_asyncio
from asgiref.sync import sync_to_async
from django.utils import timezone

from mcpcore import onetap
from mcpcore.calls import notify
from mcpcore.models import Delivery, NotificationTarget, ToolCall
from tests.live import await_until
from tests.webhooks import Receiver, verify


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def pending_call(tool="echo", server="every", **fields) -> ToolCall:
    now = timezone.now()
    return ToolCall.objects.create(
        session_id="sess-1",
        tool_name=f"mcp__{server}__{tool}",
        server_name=server,
        tool=tool,
        arguments={"message": "hi"},
        status="pending",
        confirm_id=uuid.uuid4(),
        created_at=now,
        expires_at=now + datetime.timedelta(minutes=5),
        requested_by="agent-1",
        **fields,
    )


@pytest_asyncio.fixture
async def notifier():
    """The notifier loop, as a supervisor starts it."""
    task = asyncio.ensure_future(notify.run())
    yield task
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


# --- pure helpers -----------------------------------------------------------------------------


def test_it_signs_the_standard_webhooks_test_vector():
    # The example of the Standard Webhooks specification and its reference libraries' tests.
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    sig = notify.signature(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, '{"test": 2432232314}')
    assert sig == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_it_makes_secrets_of_at_least_24_random_bytes():
    one, two = notify.new_secret(), notify.new_secret()
    assert one.startswith("whsec_") and one != two
    assert len(base64.b64decode(one.removeprefix("whsec_"))) >= 24


def test_it_builds_the_pending_and_resolved_payloads():
    pending = {"id": "c1", "kind": "tool_confirm", "tool_name": "mcp__s__t"}
    when = datetime.datetime(2026, 12, 1, 9, 0, tzinfo=datetime.UTC)
    url = notify.confirmation_url("https://console.example", "c1")
    assert url == "https://console.example/pending/c1/"
    body = json.loads(notify.payload(notify.PENDING, when, notify.event_data(pending, "s", url)))
    assert body == {
        "type": "confirmation.pending",
        "timestamp": "2026-12-01T09:00:00Z",
        "data": {**pending, "server": "s", "url": url},
    }
    ended = {"status": "skipped", "decision": "deny", "decided_by": "op", "other": "x"}
    data = notify.event_data(pending, "s", url, ended)
    assert data == {
        **pending,
        "server": "s",
        "url": url,
        "status": "skipped",
        "decision": "deny",
        "decided_by": "op",
    }


def test_it_words_an_ntfy_push_and_encodes_a_title_that_is_not_ascii():
    data = {"tool_name": "mcp__every__echo", "server": "every", "url": "https://c/pending/1/"}
    text, headers = notify.ntfy_request({"type": notify.PENDING, "data": data})
    assert text == "echo on every is waiting for approval"
    assert headers == {"Title": "Approval needed: echo", "Click": "https://c/pending/1/", "Tags": "lock"}
    data["requested_by"] = "Pocket agent (app of alice)"  # an app's call names the app (SPEC 21.4)
    text, _ = notify.ntfy_request({"type": notify.PENDING, "data": data})
    assert text == "echo on every is waiting for approval (requested by Pocket agent (app of alice))"
    data["tool_name"] = "mcp__every__größe"
    _, headers = notify.ntfy_request({"type": notify.PENDING, "data": data})
    assert headers["Title"].startswith("=?utf-8?") and headers["Title"].isascii()


def test_it_retries_on_the_stated_schedule_then_gives_up():
    assert [notify.retry_delay(n) for n in range(1, 7)] == [5, 30, 120, 600, 3600, None]
    assert notify.retry_delay(2, 0.01) == pytest.approx(0.3)


# --- deliveries to a real receiver ------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_it_posts_signed_pending_and_resolved_events(receiver, notifier, settings):
    settings.AGENVOY_PUBLIC_URL = "https://approve.example"
    target, secret = await sync_to_async(notify.add_target)("webhook", receiver.url)
    call = await sync_to_async(pending_call)()
    await await_until(lambda: len(receiver.requests) >= 1, 15, what="the pending event")
    got = receiver.requests[0]
    assert got["path"] == "/hook"
    assert got["headers"]["content-type"] == "application/json"
    assert got["headers"]["webhook-id"].startswith("msg_")
    assert abs(int(got["headers"]["webhook-timestamp"]) - time.time()) < 30
    assert verify(secret, got["headers"], got["body"])
    assert not verify(notify.new_secret(), got["headers"], got["body"])
    body = json.loads(got["body"])
    assert body["type"] == "confirmation.pending"
    assert datetime.datetime.fromisoformat(body["timestamp"]).tzinfo is not None
    url = f"https://approve.example/pending/{call.confirm_id}/"
    links = {
        "approve_url": body["data"]["approve_url"],
        "deny_url": body["data"]["deny_url"],
    }
    assert body["data"] == {
        **call.to_pending(),
        "requested_by": "agent-1",
        "server": "every",
        "url": url,
        **links,
    }
    for decision, link in (("approve", links["approve_url"]), ("deny", links["deny_url"])):
        assert link.startswith("https://approve.example/a/")
        action = onetap.read(settings.SECRET_KEY, link.rsplit("/", 1)[1])
        assert (action.confirm_id, action.decision, action.target_id) == (
            call.confirm_id,
            decision,
            target.pk,
        )

    await sync_to_async(ToolCall.objects.filter(id=call.id).update)(
        status="skipped", decision="deny", decided_by="op", ended_at=timezone.now()
    )
    await await_until(lambda: len(receiver.requests) >= 2, 15, what="the resolved event")
    got = receiver.requests[1]
    assert verify(secret, got["headers"], got["body"])
    assert got["headers"]["webhook-id"] != receiver.requests[0]["headers"]["webhook-id"]
    body = json.loads(got["body"])
    assert body["type"] == "confirmation.resolved"
    assert body["data"] == {
        **call.to_pending(),
        "requested_by": "agent-1",
        "server": "every",
        "url": url,
        "status": "skipped",
        "decision": "deny",
        "decided_by": "op",
    }
    rows = await sync_to_async(lambda: list(Delivery.objects.filter(target=target).order_by("id")))()
    assert [(d.event_type, d.status, d.last_status_code, d.attempts) for d in rows] == [
        ("confirmation.pending", "sent", 200, 1),
        ("confirmation.resolved", "sent", 200, 1),
    ]


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_it_retries_after_a_500_with_the_same_webhook_id(notifier):
    with Receiver(answers=[500]) as receiver:
        target, secret = await sync_to_async(notify.add_target)("webhook", receiver.url)
        await sync_to_async(pending_call)()
        row = await await_until(
            lambda: Delivery.objects.filter(
                target=target, attempts=1, last_status_code=500, status="pending"
            ).first(),
            15,
            what="the first attempt failing",
        )
        assert row.last_error == "HTTP 500 Internal Server Error"
        wait = (row.next_attempt_at - row.last_attempt_at).total_seconds()
        assert wait == pytest.approx(5, abs=0.5)  # the first retry is due 5 s later
        # Move the retry forward instead of waiting 5 s.
        await sync_to_async(Delivery.objects.filter(id=row.id).update)(next_attempt_at=timezone.now())
        await await_until(lambda: len(receiver.requests) >= 2, 15, what="the retry")
        first, again = receiver.requests[:2]
        assert first["headers"]["webhook-id"] == again["headers"]["webhook-id"]
        assert first["body"] == again["body"]
        assert verify(secret, again["headers"], again["body"])
        row = await await_until(
            lambda: Delivery.objects.filter(id=row.id, status="sent").first(), 15, what="sent"
        )
        assert (row.attempts, row.last_status_code, row.last_error) == (2, 200, "")


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_it_marks_a_delivery_failed_after_the_last_retry(notifier):
    with Receiver(answers=[503]) as receiver:
        target, _ = await sync_to_async(notify.add_target)("webhook", receiver.url)
        row = await sync_to_async(notify.queue_test)(target)
        # As if five attempts had failed already: this one is the last.
        await sync_to_async(Delivery.objects.filter(id=row.id).update)(attempts=5)
        row = await await_until(
            lambda: Delivery.objects.filter(id=row.id, status="failed").first(), 15, what="failed"
        )
        assert (row.attempts, row.last_status_code) == (6, 503)


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_it_counts_no_answer_in_10_s_as_a_failure(notifier):
    with Receiver(hang=True) as receiver:
        target, _ = await sync_to_async(notify.add_target)("webhook", receiver.url)
        row = await sync_to_async(notify.queue_test)(target)
        started = time.monotonic()
        row = await await_until(
            lambda: Delivery.objects.filter(
                id=row.id, attempts=1, last_error__startswith="no answer"
            ).first(),
            20,
            what="the attempt timing out",
        )
        assert 9.5 <= time.monotonic() - started < 15
        assert row.status == "pending" and row.last_status_code is None


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_it_pushes_to_ntfy_with_title_click_and_tags(receiver, notifier, settings):
    settings.AGENVOY_PUBLIC_URL = "https://approve.example"
    target, secret = await sync_to_async(notify.add_target)("ntfy", receiver.url)
    assert secret == ""
    call = await sync_to_async(pending_call)(tool="get-sum")
    await await_until(lambda: receiver.requests, 15, what="the ntfy push")
    got = receiver.requests[0]
    assert got["body"].decode() == "get-sum on every is waiting for approval (requested by agent-1)"
    assert got["headers"]["title"] == "Approval needed: get-sum"
    assert got["headers"]["click"] == f"https://approve.example/pending/{call.confirm_id}/"
    assert got["headers"]["tags"] == "lock"
    assert "webhook-signature" not in got["headers"]
    # ntfy hears of confirmations that wait, not of their end.
    await sync_to_async(ToolCall.objects.filter(id=call.id).update)(status="expired", decision="expired")
    await await_until(
        lambda: ToolCall.objects.filter(id=call.id, notified=notify.TOLD_ALL).exists(), 15, what="told"
    )
    assert await sync_to_async(Delivery.objects.filter(target=target).count)() == 1


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_it_sends_an_ntfy_topics_access_token_as_a_bearer_header(notifier):
    with Receiver() as guarded, Receiver() as open_topic:
        target, shown = await sync_to_async(notify.add_target)("ntfy", guarded.url, token="tk_7f3a9c")
        assert shown == ""  # the person typed it: nothing to show once
        await sync_to_async(notify.add_target)("ntfy", open_topic.url)
        await sync_to_async(pending_call)(tool="get-sum")
        await await_until(lambda: guarded.requests and open_topic.requests, 15, what="both ntfy pushes")
        assert guarded.requests[0]["headers"]["authorization"] == "Bearer tk_7f3a9c"
        assert "authorization" not in open_topic.requests[0]["headers"]
        # "Send a test" goes the same way.
        await sync_to_async(notify.queue_test)(target)
        await await_until(lambda: len(guarded.requests) == 2, 15, what="the test push")
        assert guarded.requests[1]["headers"]["authorization"] == "Bearer tk_7f3a9c"


@pytest.mark.django_db
def test_it_tells_each_event_once_and_both_for_a_call_that_ended_between_looks():
    hook, _ = notify.add_target("webhook", "http://127.0.0.1:9/a")
    notify.add_target("ntfy", "http://127.0.0.1:9/b")
    quick = pending_call()
    ToolCall.objects.filter(id=quick.id).update(status="running", decision="approve", decided_by="op")
    waiting = pending_call(tool="add")
    assert notify.enqueue() == 2
    assert notify.enqueue() == 0  # nothing new: nothing written twice
    kinds = list(Delivery.objects.filter(target=hook).order_by("id").values_list("event_type", flat=True))
    assert kinds == ["confirmation.pending", "confirmation.resolved", "confirmation.pending"]
    # ntfy (for people) is not told to approve what was already decided.
    ntfy = Delivery.objects.filter(target__kind="ntfy")
    assert [json.loads(d.body)["data"]["id"] for d in ntfy] == [str(waiting.confirm_id)]
    assert {c.id: c.notified for c in ToolCall.objects.all()} == {quick.id: 2, waiting.id: 1}


@pytest.mark.django_db
def test_it_claims_each_due_delivery_once():
    target, _ = notify.add_target("webhook", "http://127.0.0.1:9/a")
    rows = [notify.queue_test(target) for _ in range(3)]
    first = notify.claim_due(10)
    assert [d.id for d in first] == [r.id for r in rows]
    assert notify.claim_due(10) == []  # claimed: out of reach until recorded or the claim runs out
    assert {d.attempts for d in first} == {1}
    assert notify.record(first[0], 204, "") == "sent"
    assert notify.record(first[1], 500, "HTTP 500") == "pending"
    # An outcome of an attempt that is no longer ours is not written.
    stale = first[2]
    Delivery.objects.filter(id=stale.id).update(attempts=2)
    notify.record(stale, 204, "")
    assert Delivery.objects.get(id=stale.id).status == "pending"


@pytest.mark.django_db
def test_it_does_not_notify_about_calls_that_ran_at_once_or_with_no_target():
    ToolCall.objects.create(
        session_id="s", tool_name="mcp__every__echo", server_name="every", tool="echo", status="done"
    )
    call = pending_call()
    assert notify.enqueue() == 1  # the flag moves even with no target, so none floods in later
    assert Delivery.objects.count() == 0
    assert ToolCall.objects.get(id=call.id).notified == 1
    assert NotificationTarget.objects.count() == 0


@pytest.mark.django_db
def test_it_forgets_old_sent_and_failed_deliveries_but_not_owed_ones():
    target, _ = notify.add_target("webhook", "http://127.0.0.1:9/a")
    old = timezone.now() - datetime.timedelta(days=31)
    rows = {status: notify.queue_test(target) for status in ("sent", "failed", "pending")}
    for status, row in rows.items():
        Delivery.objects.filter(id=row.id).update(status=status, created_at=old)
    recent = notify.queue_test(target)
    Delivery.objects.filter(id=recent.id).update(status="sent")
    assert notify.prune() == 2
    assert set(Delivery.objects.values_list("id", flat=True)) == {rows["pending"].id, recent.id}


# --- prompts and resources (SPEC 20.3) ------------------------------------------------------------

URI = "file:///srv/docs/" + "r" * 1200 + ".md"


def test_it_words_an_ntfy_push_for_a_prompt_or_a_resource():
    base = {"server": "every", "url": "https://c/pending/1/"}
    data = {**base, "kind": "prompt", "tool_name": "mcp__every__review"}
    text, headers = notify.ntfy_request({"type": notify.PENDING, "data": data})
    assert text == "Get prompt review on every is waiting for approval"
    assert headers["Title"] == "Approval needed: Get prompt review"
    data = {**base, "kind": "resource", "tool_name": "file:///etc/hosts", "uri": "file:///etc/hosts"}
    text, headers = notify.ntfy_request({"type": notify.PENDING, "data": data})
    assert text == "Read file:///etc/hosts on every is waiting for approval"
    assert headers["Title"] == "Approval needed: Read file:///etc/hosts"
    data = {**base, "kind": "resource", "tool_name": URI[:700], "uri": URI}
    text, headers = notify.ntfy_request({"type": notify.PENDING, "data": data})
    assert text.startswith(f"Read {URI[:997]}... on every") and len(text.encode()) < 4096
    assert headers["Title"].isascii() and len(headers["Title"]) == len("Approval needed: ") + notify.TITLE_MAX


@pytest.mark.django_db
def test_it_tells_webhooks_about_a_pending_prompt_or_resource_with_its_kind_and_uri():
    hook, _ = notify.add_target("webhook", "http://127.0.0.1:9/a")
    prompt = pending_call(tool="review", kind="prompt")
    resource = pending_call(kind="resource", tool="")
    ToolCall.objects.filter(id=resource.id).update(tool_name=URI[:700], arguments={"uri": URI})
    assert notify.enqueue() == 2
    bodies = {
        json.loads(d.body)["data"]["call_id"]: json.loads(d.body)
        for d in Delivery.objects.filter(target=hook)
    }
    data = bodies[str(prompt.id)]["data"]
    assert bodies[str(prompt.id)]["type"] == "confirmation.pending"
    assert (data["kind"], data["tool_name"], data["server"]) == ("prompt", "mcp__every__review", "every")
    assert "uri" not in data and data["approve_url"] and data["deny_url"]
    data = bodies[str(resource.id)]["data"]
    assert (data["kind"], data["uri"], data["tool_args"]) == ("resource", URI, {"uri": URI})


# --- servers' questions (SPEC 20.4) -----------------------------------------------------------


def pending_question(message="Which branch?"):
    from mcpcore.calls import questions

    call = pending_call(tool="deploy")
    ToolCall.objects.filter(id=call.id).update(status="running", confirm_id=None, notified=notify.TOLD_ALL)
    return questions.ask(call.id, "every", "form", message, {"type": "object", "properties": {}})


def test_it_words_a_questions_ntfy_push_without_buttons():
    data = {"server": "every", "message": "Which branch?", "url": "https://c.example/pending/q/"}
    text, headers = notify.ntfy_request({"type": "question.pending", "data": data})
    assert text == "every asks: Which branch?"
    assert headers == {
        "Title": "Question from every",
        "Click": "https://c.example/pending/q/",
        "Tags": "question",
    }


@pytest.mark.django_db
def test_it_tells_every_target_once_of_a_question_in_the_inbox(settings):
    from mcpcore.calls import questions

    settings.AGENVOY_PUBLIC_URL = "https://c.example"
    hook, _ = notify.add_target("webhook", "http://127.0.0.1:9/a")
    notify.add_target("ntfy", "http://127.0.0.1:9/b")
    q = pending_question()
    relayed_call = pending_call(tool="x", via="mcp", client_asks="form")
    ToolCall.objects.filter(id=relayed_call.id).update(status="running", confirm_id=None, notified=2)
    questions.ask(relayed_call.id, "every", "form", "Relayed?", {})  # the client answers it: no one is told
    assert notify.enqueue() == 1
    assert notify.enqueue() == 0
    rows = list(Delivery.objects.order_by("id"))
    assert [d.event_type for d in rows] == ["question.pending", "question.pending"]
    assert {d.call_id for d in rows} == {q.call_id}  # retention deletes them with the call
    event = json.loads(rows[0].body)
    assert event["type"] == "question.pending"
    data = event["data"]
    assert data["kind"] == "question" and data["id"] == str(q.id) and data["message"] == "Which branch?"
    assert data["server"] == "every" and data["url"] == f"https://c.example/pending/{q.id}/"
    assert "approve_url" not in data and "deny_url" not in data
    assert data["tool_name"] == "mcp__every__deploy" and data["schema"] == {
        "type": "object",
        "properties": {},
    }
    text, headers = notify.ntfy_request(event)
    assert text == "every asks: Which branch?" and "Actions" not in headers
    assert rows[0].target_id == hook.id


@pytest.mark.django_db
def test_it_tells_nobody_of_a_question_answered_before_the_notifier_looked():
    from mcpcore.calls import questions

    notify.add_target("webhook", "http://127.0.0.1:9/a")
    q = pending_question()
    questions.answer(q.id, {"action": "cancel"}, "ann")
    assert notify.enqueue() == 0 and Delivery.objects.count() == 0
