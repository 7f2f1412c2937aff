"""Telling people about confirmations (SPEC 15), servers' questions (20.4) and servers that need
authorization (16.4): webhooks signed as Standard Webhooks do, and ntfy pushes.

Nothing here is on a call's path. The notifier loop (`run`, started beside every supervisor)
finds confirmations with news in the database every second, claims each event with a
conditional update of `ToolCall.notified` (so exactly one process writes its deliveries, also
in scale-out), writes one `Delivery` row per target, and sends the rows that are due, each
claimed the same way. A delivery that fails is retried on `RETRY_DELAYS`, then marked failed;
rows survive a restart, so an unsent one is sent by the next process that runs.

The payload, signing and ntfy helpers at the top are pure functions.
"""

import asyncio
import base64
import datetime
import hashlib
import hmac
import json
import logging
import secrets
import time
import uuid
from collections.abc import Iterable
from email.header import Header
from urllib.parse import urlsplit, urlunsplit

import httpx2
from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from .. import audit, db, metrics, onetap
from ..choices import AuditAction, CallKind, CallStatus, DeliveryStatus, QuestionStatus, TargetKind
from ..models import SECRET_MASK, Delivery, Group, NotificationTarget, Question, ToolCall, iso
from ..oauth import upstream
from . import questions, routing

log = logging.getLogger("mcpcore.notify")

RETRY_DELAYS = (5, 30, 120, 600, 3600)  # seconds after failed attempts 1..5; the 6th is final
ATTEMPT_TIMEOUT = 10.0  # seconds a target has to answer
CLAIM_SECONDS = 30  # an attempt not recorded by then (its process died) is made again
TICK = 1.0
IN_FLIGHT = 32  # deliveries one process sends at once
KEEP_DAYS = 30  # sent and failed deliveries are kept this long
PRUNE_EVERY = 3600.0  # seconds

PENDING, RESOLVED, TEST = "confirmation.pending", "confirmation.resolved", "test"
ESCALATED = "confirmation.escalated"  # a confirmation is now also for another group (SPEC 24.3)
QUESTION = "question.pending"  # a server's question waits in the inbox (SPEC 20.4)
NEEDS_AUTHORIZATION = "server.needs_authorization"
# ToolCall.notified
TOLD_NOTHING, TOLD_PENDING, TOLD_ALL = 0, 1, 2

# --- pure helpers -----------------------------------------------------------------------------


def new_secret() -> str:
    """A signing secret as Standard Webhooks write it: `whsec_` + base64 of random bytes."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def new_message_id() -> str:
    return "msg_" + uuid.uuid4().hex


def signature(secret: str, message_id: str, timestamp: int, body: str) -> str:
    """`v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">`, keyed by the base64-decoded part
    of the secret after `whsec_`."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{message_id}.{timestamp}.{body}".encode()
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def webhook_headers(secret: str, message_id: str, timestamp: int, body: str) -> dict[str, str]:
    return {
        "content-type": "application/json",
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(secret, message_id, timestamp, body),
    }


def confirmation_url(base: str, confirm_id: str) -> str:
    """The confirmation's own page, where every link the console sends points."""
    return f"{base}/pending/{confirm_id}/"


def event_data(
    pending: dict, server: str, url: str, ended: dict | None = None, actions: dict | None = None
) -> dict:
    """`data` of a confirmation event: the `GET /v1/pending` item, its server and page, for
    `confirmation.pending` the one-tap links (`approve_url`, `deny_url`: SPEC 17.2), and for
    `confirmation.resolved` how it ended (`status`, `decision`, `decided_by`)."""
    data = {**pending, "server": server, "url": url, **(actions or {})}
    if ended is not None:
        data.update(status=ended["status"], decision=ended["decision"], decided_by=ended["decided_by"])
    return data


def payload(event_type: str, when: datetime.datetime, data: dict) -> str:
    """The body every webhook target gets, exactly as stored and signed."""
    return json.dumps({"type": event_type, "timestamp": iso(when), "data": data}, ensure_ascii=False)


def short_tool(tool_name: str, server: str) -> str:
    """`echo` for `mcp__every__echo` on server `every`; other names as they are."""
    prefix = f"mcp__{server}__"
    return tool_name[len(prefix) :] if server and tool_name.startswith(prefix) else tool_name


def _header(text: str) -> str:
    """A header value ntfy reads: ASCII as it is, anything else RFC 2047 encoded."""
    text = " ".join(text.split())
    return text if text.isascii() else Header(text, "utf-8").encode()


def ntfy_request(event: dict) -> tuple[str, dict[str, str]]:
    """The text and headers of an ntfy push for an event body (see `payload`)."""
    data = event.get("data") or {}
    if event.get("type") == TEST:
        return data.get("message", "Test"), {
            "Title": "Agenvoy MCP console",
            "Click": data.get("url", ""),
            "Tags": "white_check_mark",
        }
    if event.get("type") == NEEDS_AUTHORIZATION:
        return f"{data['server']} needs authorization", {
            "Title": _header(f"Authorize {data['server']}"),
            "Click": data["url"],
            "Tags": "key",
        }
    if event.get("type") == QUESTION:
        # No one-tap buttons: an answer needs the form (or the URL) on the question's page.
        return f"{data['server']} asks: {data['message']}", {
            "Title": _header(f"Question from {data['server']}"),
            "Click": data["url"],
            "Tags": "question",
        }
    tool = short_tool(data.get("tool_name", ""), data.get("server", ""))
    server = data.get("server") or "the console"
    kind = data.get("kind")
    # A prompt or resource says what it asks, as the inbox does (SPEC 20.3); a URI is cut in
    # the title (a header) and the text, its page has it whole.
    if kind == CallKind.PROMPT:
        tool = f"Get prompt {tool}"
    elif kind == CallKind.RESOURCE:
        tool = f"Read {_cut(data.get('uri') or data.get('tool_name', ''), URI_TEXT)}"
    headers = {
        "Title": _header(f"Approval needed: {_cut(tool, TITLE_MAX)}"),
        "Click": data["url"],
        "Tags": "lock",
    }
    if data.get("approve_url") and data.get("deny_url"):
        headers["Actions"] = ntfy_actions(data["approve_url"], data["deny_url"])
    if kind == CallKind.PERMISSION_PROMPT:
        return f"{tool} is waiting for approval", headers
    why = [f"requested by {data['requested_by']}"] if data.get("requested_by") else []
    if event.get("type") == ESCALATED:
        why.append(f"escalated from {data.get('for')}")
    by = f" ({'; '.join(why)})" if why else ""
    return f"{tool} on {server} is waiting for approval{by}", headers


URI_TEXT = 1000  # characters of a URI in an ntfy text (ntfy keeps 4,096 bytes of a message)
TITLE_MAX = 200  # characters of the `Title` header after "Approval needed: "


def _cut(text: str, size: int) -> str:
    # ASCII "...": a non-ASCII title is RFC 2047 encoded, and a long one folded over lines.
    return text if len(text) <= size else f"{text[: size - 3]}..."


def ntfy_actions(approve_url: str, deny_url: str) -> str:
    """Two ntfy `http` action buttons (its simple header format): the phone POSTs the link."""
    return "; ".join(
        f"http, {label}, {link}, method=POST, clear=true"
        for label, link in (("Approve", approve_url), ("Deny", deny_url))
    )


def action_links(base: str, confirm_id, target_id: int) -> dict[str, str]:
    """`approve_url` and `deny_url` of one confirmation for one target (SPEC 17.2)."""
    key = settings.SECRET_KEY
    return {
        "approve_url": onetap.url(base, key, confirm_id, onetap.APPROVE, target_id),
        "deny_url": onetap.url(base, key, confirm_id, onetap.DENY, target_id),
    }


def retry_delay(attempts: int, scale: float = 1.0) -> float | None:
    """Seconds until the next try after `attempts` failed ones; None: give up."""
    if attempts > len(RETRY_DELAYS):
        return None
    return RETRY_DELAYS[attempts - 1] * scale


# --- targets ----------------------------------------------------------------------------------


def add_target(
    kind: str,
    url: str,
    created_by: str = "",
    by: audit.Actor | None = None,
    token: str = "",
    groups: Iterable[Group] = (),
    name: str = "",
) -> tuple[NotificationTarget, str]:
    """A new target, told only of these `groups`' confirmations when it names some (SPEC 24.7);
    returns it and its secret (webhooks), which is shown once (never in the audit row). An ntfy
    topic's access `token` is kept where a webhook's secret is, and is never shown again: the
    person typed it. Without a `name` it is called by its URL's host (SPEC 15)."""
    secret = new_secret() if kind == TargetKind.WEBHOOK else token
    with transaction.atomic():
        target = NotificationTarget.objects.create(
            name=name.strip(), kind=kind, url=url, secret=secret, created_by=created_by
        )
        target.groups.set(list(groups))
        audit.record(
            AuditAction.NOTIFY_ADD,
            target.name,
            actor=by or audit.Actor(created_by),
            after=target_state(target),
        )
    return target, secret if kind == TargetKind.WEBHOOK else ""


def remove_target(target: NotificationTarget, by: audit.Actor) -> None:
    """Remove a target (its deliveries go with it)."""
    with transaction.atomic():
        audit.record(AuditAction.NOTIFY_REMOVE, target.name, actor=by, before=target_state(target))
        target.delete()


def target_state(target: NotificationTarget) -> dict:
    """What the audit keeps of a target: its kind and URL without query or credentials (a
    webhook URL may carry a key there), and whether it signs, never the secret."""
    parts = urlsplit(target.url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    if parts.port:
        host = f"{host}:{parts.port}"
    url = urlunsplit((parts.scheme, host, parts.path, "", ""))
    # The groups it is told of (SPEC 24.7), when it names some: a row for a target of all
    # confirmations reads as before.
    names = sorted(target.group_names())
    groups = {"groups": names} if names else {}
    if target.kind == TargetKind.WEBHOOK:
        return {"kind": target.kind, "url": url, "signed": bool(target.secret), **groups}
    return {"kind": target.kind, "url": url, "access_token": SECRET_MASK if target.secret else "", **groups}


def queue_test(target: NotificationTarget) -> Delivery:
    """A test message for "Send a test", sent like any other delivery."""
    now = timezone.now()
    data = {
        "message": "A test from the Agenvoy MCP console: this target works.",
        "url": f"{settings.AGENVOY_PUBLIC_URL}/notifications/",
    }
    return Delivery.objects.create(
        target=target,
        event_type=TEST,
        message_id=new_message_id(),
        body=payload(TEST, now, data),
        created_at=now,
        next_attempt_at=now,
    )


def queue_needs_authorization(server: str) -> int:
    """A `server.needs_authorization` message (SPEC 16.4) to every target: the server's
    authorization server refused its renewal. Written by the one process that holds the
    server (so once); returns how many deliveries."""
    now = timezone.now()
    data = {"server": server, "url": upstream.server_page(server)}
    body = payload(NEEDS_AUTHORIZATION, now, data)
    return _deliver(None, now, ((t, NEEDS_AUTHORIZATION, body) for t in NotificationTarget.objects.all()))


# --- events -> deliveries (one process claims each) -------------------------------------------


def _events_for(
    call: ToolCall, base: str, now: datetime.datetime, target: NotificationTarget
) -> list[tuple[str, str]]:
    """(event type, body) of the news a call has beyond what was told, for one target (its
    one-tap links are its own)."""
    url = confirmation_url(base, str(call.confirm_id))
    out = []
    # Who asked (a token's name; an app's is `<client name> (app of <person>)`, SPEC 21.4).
    pending = {**call.to_pending(), "requested_by": call.requested_by}
    if call.notified == TOLD_NOTHING:
        links = action_links(base, call.confirm_id, target.pk)
        data = event_data(pending, call.server_name, url, actions=links)
        out.append((PENDING, payload(PENDING, now, data)))
    if call.status != CallStatus.PENDING:
        ended = {"status": call.status, "decision": call.decision, "decided_by": call.decided_by}
        data = event_data(pending, call.server_name, url, ended)
        out.append((RESOLVED, payload(RESOLVED, now, data)))
    return out


def enqueue_questions(limit: int = 200) -> int:
    """Write a `question.pending` delivery to every target told of its call's group (webhooks
    and ntfy alike, SPEC 24.7) for each
    server's question new in the inbox; returns how many were claimed. One that has left the
    inbox before it was seen is told to nobody (and a relayed one never waits in it)."""
    base, claimed = settings.AGENVOY_PUBLIC_URL, 0
    rows = list(
        Question.objects.select_related("call")
        .filter(status=QuestionStatus.PENDING, notified=TOLD_NOTHING)
        .order_by("created_at")[:limit]
    )
    if not rows:
        return 0
    targets = _targets()
    for question in rows:
        now = timezone.now()
        with transaction.atomic():
            if Question.objects.filter(id=question.id, notified=TOLD_NOTHING).update(notified=TOLD_ALL) != 1:
                continue  # another process told it
            claimed += 1
            url = confirmation_url(base, str(question.id))
            body = payload(
                QUESTION, now, event_data(questions.to_pending(question), question.server_name, url)
            )
            told = (t for t, groups in targets if routing.sent_to(question.call, groups))
            _deliver(question.call_id, now, ((t, QUESTION, body) for t in told))
    return claimed


def queue_escalated(call: ToolCall, now: datetime.datetime) -> int:
    """A `confirmation.escalated` message (SPEC 24.3) to the targets of the group it was
    escalated to and those of every group, each with its own one-tap links; called in the
    transaction that claimed the escalation (`routing.escalate_due`), so it is written once.
    ntfy targets get it too: it waits for people. Returns how many deliveries."""
    base = settings.AGENVOY_PUBLIC_URL
    url = confirmation_url(base, str(call.confirm_id))
    # The pending item as GET /v1/pending has it (SPEC 15), and the group it went on to (24.3).
    pending = {**call.to_pending(), "requested_by": call.requested_by, "escalated_to": call.escalated_to}

    def body(target: NotificationTarget) -> str:
        links = action_links(base, call.confirm_id, target.pk)
        return payload(ESCALATED, now, event_data(pending, call.server_name, url, actions=links))

    told = [t for t, groups in _targets() if not groups or call.escalated_to in groups]
    return _deliver(call.id, now, ((t, ESCALATED, body(t)) for t in told))


def _targets() -> list[tuple[NotificationTarget, frozenset[str]]]:
    """Every target with the groups it names (SPEC 24.7), in two queries."""
    return [(t, t.group_names()) for t in NotificationTarget.objects.prefetch_related("groups")]


def _deliver(call_id, now: datetime.datetime, events: Iterable[tuple[NotificationTarget, str, str]]) -> int:
    """One delivery, due at once, per (target, event type, body) of `events` (of the call
    `call_id`, None for a server's event); returns how many."""
    rows = Delivery.objects.bulk_create(
        Delivery(
            target=target,
            call_id=call_id,
            event_type=kind,
            message_id=new_message_id(),
            body=body,
            created_at=now,
            next_attempt_at=now,
        )
        for target, kind, body in events
    )
    return len(rows)


def enqueue(limit: int = 200) -> int:
    """Write deliveries for confirmations that are new or have ended since last told, and for
    servers' questions new in the inbox; returns how many events were claimed. A call that was
    pending and ended between two looks gets both events, in order."""
    return enqueue_questions(limit) + _enqueue_calls(limit)


def _enqueue_calls(limit: int) -> int:
    news = (
        ToolCall.objects.filter(confirm_id__isnull=False, notified__lt=TOLD_ALL)
        .filter(Q(notified=TOLD_NOTHING) | ~Q(status=CallStatus.PENDING))
        .order_by("created_at")[:limit]
    )
    rows = list(news)
    if not rows:
        return 0
    targets = _targets()
    base, claimed = settings.AGENVOY_PUBLIC_URL, 0
    for call in rows:
        now = timezone.now()
        told = TOLD_ALL if call.status != CallStatus.PENDING else TOLD_PENDING
        with transaction.atomic():
            if ToolCall.objects.filter(id=call.id, notified=call.notified).update(notified=told) != 1:
                continue  # another process told it
            claimed += 1
            _deliver(
                call.id,
                now,
                (
                    (t, kind, body)
                    for t, groups in targets
                    if routing.sent_to(call, groups)
                    for kind, body in _events_for(call, base, now, t)
                    # ntfy is for people: it hears of confirmations that wait, not of their end
                    # (nor of one that already ended).
                    if t.kind == TargetKind.WEBHOOK or (kind == PENDING and call.status == CallStatus.PENDING)
                ),
            )
    return claimed


def prune(days: int = KEEP_DAYS) -> int:
    """Forget sent and failed deliveries older than `days` (pending ones are still owed)."""
    cutoff = timezone.now() - datetime.timedelta(days=days)
    deleted, _ = Delivery.objects.filter(
        status__in=(DeliveryStatus.SENT, DeliveryStatus.FAILED), created_at__lt=cutoff
    ).delete()
    return deleted


# --- sending ----------------------------------------------------------------------------------


def claim_due(limit: int) -> list[Delivery]:
    """Claim up to `limit` due deliveries: each one moved out of reach for CLAIM_SECONDS by a
    conditional update, so exactly one process makes each attempt."""
    now = timezone.now()
    due = Delivery.objects.filter(status=DeliveryStatus.PENDING, next_attempt_at__lte=now).order_by(
        "next_attempt_at", "id"
    )
    claimed = [
        pk
        for pk, when in due.values_list("id", "next_attempt_at")[:limit]
        if Delivery.objects.filter(id=pk, status=DeliveryStatus.PENDING, next_attempt_at=when).update(
            next_attempt_at=now + datetime.timedelta(seconds=CLAIM_SECONDS), attempts=F("attempts") + 1
        )
        == 1
    ]
    return list(Delivery.objects.filter(id__in=claimed).select_related("target").order_by("id"))


def record(delivery: Delivery, code: int | None, error: str) -> str:
    """Write an attempt's outcome (only if the row is still ours); returns the new status."""
    now = timezone.now()
    fields: dict[str, object] = {"last_status_code": code, "last_error": error[:1000], "last_attempt_at": now}
    if code is not None and 200 <= code < 300:
        status = DeliveryStatus.SENT
        fields["last_error"] = ""
    else:
        delay = retry_delay(delivery.attempts, settings.AGENVOY_WEBHOOK_RETRY_SCALE)
        if delay is None:
            status = DeliveryStatus.FAILED
        else:
            status = DeliveryStatus.PENDING
            fields["next_attempt_at"] = now + datetime.timedelta(seconds=delay)
    Delivery.objects.filter(id=delivery.id, attempts=delivery.attempts, status=DeliveryStatus.PENDING).update(
        status=status, **fields
    )
    return status


async def attempt(http: httpx2.AsyncClient, delivery: Delivery) -> tuple[int | None, str]:
    """POST one delivery to its target; (status code or None, error text)."""
    target = delivery.target
    if target.kind == TargetKind.WEBHOOK:
        headers = webhook_headers(target.secret, delivery.message_id, int(time.time()), delivery.body)
        content = delivery.body.encode()
    else:
        text, headers = ntfy_request(json.loads(delivery.body))
        if target.secret:  # a topic that only its token's holders may read (SPEC 15)
            headers["Authorization"] = f"Bearer {target.secret}"
        content = text.encode()
    try:
        async with asyncio.timeout(ATTEMPT_TIMEOUT):
            answer = await http.post(target.url, content=content, headers=headers)
    except TimeoutError:
        return None, f"no answer within {ATTEMPT_TIMEOUT:.0f} s"
    except httpx2.HTTPError as exc:
        return None, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if 200 <= answer.status_code < 300:
        return answer.status_code, ""
    return answer.status_code, f"HTTP {answer.status_code} {answer.reason_phrase}".strip()


async def _send(http: httpx2.AsyncClient, batch: list[Delivery]) -> None:
    """One target's claimed deliveries, in order."""
    try:
        for delivery in batch:
            code, error = await attempt(http, delivery)
            status = await db.run(record, delivery, code, error)
            metrics.delivery_attempted(delivery.target.kind, status)
            if status != DeliveryStatus.SENT:
                log.info("delivery %s to target %s: %s (%s)", delivery.id, delivery.target_id, error, status)
    except Exception:
        log.exception("sending deliveries failed")  # the claims run out; they are tried again


async def run() -> None:
    """The notifier loop: every second, write deliveries for confirmation news and start
    sending the due ones (targets concurrently, each target's in order). Until cancelled."""
    sending: dict[asyncio.Task, int] = {}
    client = httpx2.AsyncClient(
        timeout=ATTEMPT_TIMEOUT, follow_redirects=False, headers={"user-agent": "agenvoy-console"}
    )
    loop = asyncio.get_running_loop()
    prune_at = loop.time() + 60
    try:
        while True:
            try:
                if loop.time() >= prune_at:
                    prune_at = loop.time() + PRUNE_EVERY
                    await db.run(prune)
                await db.run(enqueue)
                room = IN_FLIGHT - sum(sending.values())
                batch = await db.run(claim_due, room) if room > 0 else []
                by_target: dict[int, list[Delivery]] = {}
                for delivery in batch:
                    by_target.setdefault(delivery.target_id, []).append(delivery)
                for rows in by_target.values():
                    task = asyncio.ensure_future(_send(client, rows))
                    sending[task] = len(rows)
                    task.add_done_callback(lambda t: sending.pop(t, None))
            except Exception:
                log.exception("notifier tick failed")
            await asyncio.sleep(TICK)
    finally:
        for task in list(sending):
            task.cancel()
        await client.aclose()
