"""Questions servers ask during a call (elicitation, SPEC 20.4), from asked to answered.

    q = await db.run(questions.ask, call_id, server, mode, message, schema)  # record, announce
    q = await questions.wait_answer(q, seconds)     # until answered, declined, cancelled, expired
    result = questions.result_for_server(q)         # what goes back upstream

A question of a call that came in on `/mcp` from a client that declared its mode is `asked`:
the MCP door holding the call relays it and hands the client's answer to `relayed`. Any other
is `pending`: an item of kind `question` in the inbox (`GET /v1/pending`, the Pending page)
until a person answers it (`answer`, checked against its schema by `elicitation`), it expires
(the server gets `cancel`), or its call ends (`cancel_for_call`). Whoever changes a question
tells the call's group (the runner waiting for the answer, the door holding the call) and,
for an inbox item, the `PENDING` group (open pages). The notifier finds new pending questions
in the database by `Question.notified` (`notify.enqueue`).

The sync functions do database work: from async code run them with `db.run` (never inside
`db.write`: they send their messages once their rows are committed).
"""

import asyncio
import datetime
import uuid

import anyio
from channels.layers import get_channel_layer
from django.conf import settings
from django.utils import timezone

from .. import control, db, elicitation
from ..choices import CALL_LIVE, QuestionMode, QuestionStatus, Via
from ..models import Question, ToolCall, iso
from . import routing
from .replies import EXTEND_LIMIT, GONE, NOT_FOUND, ReplyError, extended_expiry, refuse_routed

OPEN = (QuestionStatus.ASKED, QuestionStatus.PENDING)
# The longest a question in the inbox may wait, extensions included (SPEC 24.4).
EXTEND_SECONDS = EXTEND_LIMIT.total_seconds()
ENDED_BY = {
    "accept": QuestionStatus.ANSWERED,
    "decline": QuestionStatus.DECLINED,
    "cancel": QuestionStatus.CANCELLED,
}
CANCEL = {"action": "cancel"}


def _tell(call_id, question_id, event: str, inbox: bool) -> None:
    """Once the write is committed: the call's group hears `event` for the question, and when
    the inbox changed (`inbox`), the open pages re-read it."""
    message = {"type": event, "question_id": str(question_id), "call_id": str(call_id)}

    def send() -> None:
        control.send_group(control.call_group(str(call_id)), message)
        if inbox:
            control.send_group(control.PENDING, {"type": "pending.changed", "call_id": str(call_id)})

    db.on_commit(send)


def ask(
    call_id,
    server: str,
    mode: str,
    message: str,
    schema: dict | None = None,
    url: str = "",
    elicitation_id: str = "",
    sure: bool = True,
) -> Question:
    """Record a question a server asked during a running call: `asked` when the call came in
    on `/mcp` from a client that declared `mode` (the door relays it) and the call surely asked
    it (`sure`; else it is `guessed`), else `pending` in the inbox for AGENVOY_CONFIRM_TIMEOUT seconds. The
    call's group gets `call.question`."""
    call = ToolCall.objects.only("id", "via", "client_asks").get(id=call_id)
    relay = sure and call.via == Via.MCP and mode in call.client_asks.split(",")
    now = timezone.now()
    question = Question.objects.create(
        call_id=call.id,
        guessed=not sure,
        server_name=server,
        mode=mode,
        message=message,
        schema=schema if mode == QuestionMode.FORM else None,
        url=url,
        elicitation_id=elicitation_id,
        status=QuestionStatus.ASKED if relay else QuestionStatus.PENDING,
        created_at=now,
        expires_at=None if relay else now + datetime.timedelta(seconds=settings.AGENVOY_CONFIRM_TIMEOUT),
    )
    _tell(call.id, question.id, "call.question", inbox=not relay)
    return question


def get(question_id) -> Question | None:
    """The question with its call, None for an unknown or malformed id."""
    try:
        key = uuid.UUID(str(question_id))
    except ValueError:
        return None
    return Question.objects.select_related("call").filter(id=key).first()


def expire(question: Question) -> bool:
    """End a pending question past its expiry (`expired`, the server gets cancel); True when
    this call expired it."""
    now = timezone.now()
    changed = Question.objects.filter(
        id=question.id, status=QuestionStatus.PENDING, expires_at__lte=now
    ).update(status=QuestionStatus.EXPIRED, answer=CANCEL, answered_by="timeout", answered_at=now)
    if changed:
        _tell(question.call_id, question.id, "question.answered", inbox=True)
    return changed == 1


def extend(question_id, who: "str | routing.Replier", authorize=None) -> Question:
    """Extend a question in the inbox (SPEC 24.4), refused in the order of an answer (`answer`),
    400 past 24 hours; the call's group and the inbox are told (the runner waiting for the
    answer re-reads the row, and with it the new expiry)."""
    question = get(question_id)
    if question is None or question.status == QuestionStatus.ASKED:
        raise ReplyError(NOT_FOUND, 404)
    if authorize is not None:
        authorize(question)
    refuse_routed(question.call, who)
    now = timezone.now()
    if question.status == QuestionStatus.PENDING and question.expires_at and question.expires_at <= now:
        expire(question)
        raise ReplyError(GONE, 410)
    if question.status != QuestionStatus.PENDING:
        raise ReplyError(GONE, 410)
    until = extended_expiry(question.created_at, now)
    if not Question.objects.filter(id=question.id, status=QuestionStatus.PENDING, expires_at__gt=now).update(
        expires_at=until
    ):
        raise ReplyError(GONE, 410)
    question.expires_at = until
    _tell(question.call_id, question.id, "question.extended", inbox=True)
    return question


def _end(question: Question, answer: dict, who: str, from_status) -> Question | None:
    """Record `answer` on a question still in one of `from_status`: the updated row, None when
    it had ended."""
    now = timezone.now()
    status = ENDED_BY[answer["action"]]
    changed = Question.objects.filter(id=question.id, status__in=from_status).update(
        status=status, answer=answer, answered_by=who, answered_at=now
    )
    if not changed:
        return None
    question.status, question.answer, question.answered_by, question.answered_at = status, answer, who, now
    _tell(question.call_id, question.id, "question.answered", inbox=from_status != (QuestionStatus.ASKED,))
    return question


def answer(question_id, body: dict, who: "str | routing.Replier", authorize=None, by=None) -> Question:
    """A person's or an API token's answer to a question in the inbox, in SPEC 12.1's order:
    unknown → 404; `authorize(question)` raises to refuse the answerer; one not of its call's
    group (SPEC 24.1) → 403; ended or expired → 410;
    the answer checked against the schema (400 `invalid answer: <field>: <why>`, nothing
    stored); then the question ends and its call's group and the inbox are told. `by` is kept
    for the doors' symmetry with `calls.respond` (answers make no audit rows)."""
    question = get(question_id)
    # A question relayed to the calling client is no inbox item: nobody else may answer it.
    if question is None or question.status == QuestionStatus.ASKED:
        raise ReplyError(NOT_FOUND, 404)
    if authorize is not None:
        authorize(question)
    refuse_routed(question.call, who)  # its call's group decides it (SPEC 24.1)
    who = routing.name_of(who)
    if (
        question.status == QuestionStatus.PENDING
        and question.expires_at
        and question.expires_at <= timezone.now()
    ):
        expire(question)
        raise ReplyError(GONE, 410)
    if question.status != QuestionStatus.PENDING:
        raise ReplyError(GONE, 410)
    try:
        checked = elicitation.check_answer(question.schema, body, form=question.mode == QuestionMode.FORM)
    except elicitation.AnswerError as exc:
        raise ReplyError(exc.message, 400) from None
    ended = _end(question, checked, who, (QuestionStatus.PENDING,))
    if ended is None:
        raise ReplyError(GONE, 410)
    return ended


def relayed(question_id, answer: dict) -> Question:
    """The calling MCP client's own answer to a question relayed to it (no rights to check: the
    client of the call answered). An action it should not send counts as cancel; a question
    that has ended meanwhile is returned as it is."""
    question = Question.objects.get(id=question_id)
    action = answer.get("action") if isinstance(answer, dict) else None
    if action not in ENDED_BY:
        action = "cancel"
    kept: dict = {"action": action}
    content = answer.get("content") if isinstance(answer, dict) else None
    if action == "accept" and question.mode == QuestionMode.FORM:
        kept["content"] = content if isinstance(content, dict) else {}
    ended = _end(question, kept, "client", OPEN)
    if ended is None:
        question.refresh_from_db()
        return question
    return ended


def cancel_for_call(call_id) -> int:
    """End every open question of a call that ended or was abandoned (`cancelled`): it leaves
    the inbox at once. Returns how many."""
    now = timezone.now()
    open_ones = Question.objects.filter(call_id=call_id, status__in=OPEN)
    inbox = open_ones.filter(status=QuestionStatus.PENDING).exists()
    changed = open_ones.update(
        status=QuestionStatus.CANCELLED, answer=CANCEL, answered_by="", answered_at=now
    )
    if changed:
        _tell(call_id, "", "question.answered", inbox=inbox)
    return changed


def sweep() -> int:
    """End the questions nobody waits on any more: pending ones past their expiry (`expired`),
    and open ones whose call has ended (`cancelled`: a call interrupted by a restart leaves its
    question behind, with no runner to cancel it). The supervisor's tick runs it, as it runs
    `calls.expire_due`; returns how many ended."""
    now = timezone.now()
    due = Question.objects.filter(status=QuestionStatus.PENDING, expires_at__lte=now)
    ended = 0
    for question in due.only("id", "call_id"):
        ended += expire(question)
    orphans = Question.objects.filter(status__in=OPEN).exclude(call__status__in=CALL_LIVE)
    for call_id in set(orphans.values_list("call_id", flat=True)):
        ended += cancel_for_call(call_id)
    return ended


def pending_for(token_id=None) -> list[Question]:
    """The questions in the inbox a token sees (`GET /v1/pending`), oldest first, with their
    calls; `token_id`: only those of that token's calls (an agent's view, SPEC 12.1). None
    filed under a call by guess (`Question.guessed`): it may be another call's, so whether a
    token asked it can't be told, and only people answer it, on the pages."""
    rows = Question.objects.select_related("call").filter(status=QuestionStatus.PENDING, guessed=False)
    if token_id is not None:
        rows = rows.filter(call__token_id=token_id)
    return list(rows.order_by("created_at"))


def of_call(call_id, agent: bool = False) -> list[Question]:
    """A call's questions, in the order they were asked; for an `agent`, not those filed
    under it by guess (`Question.guessed`)."""
    rows = Question.objects.filter(call_id=call_id)
    if agent:
        rows = rows.filter(guessed=False)
    return list(rows.order_by("created_at"))


def of_calls(call_ids: list) -> dict:
    """The questions of many calls in one query (an export's page of calls): call id → their
    `to_dict()`s in the order they were asked; calls without questions are absent."""
    out: dict = {}
    for question in Question.objects.filter(call_id__in=call_ids).order_by("created_at"):
        out.setdefault(question.call_id, []).append(to_dict(question))
    return out


def to_pending(question: Question) -> dict:
    """The `GET /v1/pending` item of a question in the inbox."""
    call = question.call
    item = {
        "id": str(question.id),
        "kind": "question",
        "session_id": call.session_id,
        "tool_name": call.tool_name,
        "tool_args": call.arguments,
        "created_at": iso(question.created_at),
        "expires_at": iso(question.expires_at),
        "call_id": str(call.id),
        "server": question.server_name,
        "message": question.message,
        "for": call.for_group or None,
    }
    if question.mode == QuestionMode.URL:
        item["url"] = question.url
    else:
        item["schema"] = question.schema
    return item


def to_dict(question: Question) -> dict:
    """A question and its answer as the call's history carries it (`GET /v1/mcp/calls/<id>`)."""
    out = {
        "id": str(question.id),
        "server": question.server_name,
        "mode": question.mode,
        "message": question.message,
        "status": question.status,
        "answer": question.answer,
        "answered_by": question.answered_by,
        "created_at": iso(question.created_at),
        "answered_at": iso(question.answered_at),
    }
    if question.mode == QuestionMode.URL:
        out["url"] = question.url
    else:
        out["schema"] = question.schema
    return out


def result_for_server(question: Question) -> dict:
    """What goes back upstream: `{"action", "content"?}` (content only for the accept of a
    form); a question that has not ended, or ended without an answer, is a cancel."""
    answer = question.answer if isinstance(question.answer, dict) else CANCEL
    action = answer.get("action") if answer.get("action") in ENDED_BY else "cancel"
    if question.status == QuestionStatus.EXPIRED or question.status in OPEN:
        action = "cancel"
    if action == "accept" and question.mode == QuestionMode.FORM:
        return {"action": action, "content": answer.get("content") or {}}
    return {"action": action}


async def wait_answer(question: Question, seconds: float) -> Question:
    """The question once it has ended, or as it is after `seconds` (`inf`: until it ends). The
    row is re-read on every message to the call's group and at least every second, so a missed
    message costs at most a second; a pending question past its expiry is expired here."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    layer = get_channel_layer()
    group = control.call_group(str(question.call_id))
    channel = await layer.new_channel()
    await layer.group_add(group, channel)
    try:
        while True:
            fresh = await db.run(Question.objects.filter(id=question.id).first)
            if fresh is None:  # its call was deleted
                return question
            question = fresh
            if question.status not in OPEN:
                return question
            if question.expires_at and question.expires_at <= timezone.now():
                await db.run(expire, question)
                continue
            now = loop.time()
            if now >= deadline:
                return question
            try:
                await asyncio.wait_for(layer.receive(channel), timeout=min(1.0, deadline - now))
            except TimeoutError:
                pass
    finally:
        with anyio.CancelScope(shield=True):
            await layer.group_discard(group, channel)
