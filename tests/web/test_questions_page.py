"""Servers' questions on the Pending page and their own page (SPEC 20.4): the form built from
the schema (every field kind, defaults, required marks), Submit / Decline / Cancel, URL mode
with its host shown plainly, the live list, and the call page's history of questions.

No MCP server runs: the call and its questions are rows (`questions.ask` on a running call)."""

import datetime
import re

import pytest
from django.utils import timezone

from mcpcore.calls import questions
from mcpcore.models import Question
from mcpcore.web import live
from tests.rows import make_call

pytestmark = pytest.mark.django_db

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {
            "type": "string",
            "title": "Your name",
            "description": "as on the badge",
            "minLength": 2,
            "maxLength": 20,
        },
        "email": {"type": "string", "format": "email"},
        "site": {"type": "string", "format": "uri"},
        "day": {"type": "string", "format": "date", "default": "2026-12-24"},
        "at": {"type": "string", "format": "date-time", "default": "2026-12-24T18:30:00Z"},
        "ratio": {"type": "number", "minimum": 0.5, "maximum": 2.5},
        "count": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
        "ok": {"type": "boolean", "title": "Proceed", "default": True},
        "size": {
            "type": "string",
            "enum": ["s", "m", "l"],
            "enumNames": ["Small", "Medium", "Large"],
            "default": "m",
        },
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}, "default": ["b"]},
    },
    "required": ["name", "count"],
}


def ask(mode="form", url="https://login.example.com/device?code=1", **call_fields):
    call = make_call("running", started_at=timezone.now(), arguments={"repo": "x"}, **call_fields)
    if mode == "url":
        return questions.ask(call.id, "every", "url", "Sign in to continue", url=url)
    return questions.ask(call.id, "every", "form", "Who are you?", SCHEMA)


def card(html: str, question: Question) -> str:
    found = re.search(
        rf'<article class="card pending question" id="pending-{question.id}".*?</article>', html, re.S
    )
    assert found, html
    return found.group(0)


def test_it_shows_a_questions_form_with_every_field_kind_defaults_and_required_marks(signed_in, every):
    q = ask()
    html = signed_in.get("/pending/").content.decode()
    item = card(html, q)
    assert "every asks" in item and "Who are you?" in item and "mcp__every__echo" in item
    assert "&quot;repo&quot;: &quot;x&quot;" in item  # the call's arguments
    assert re.search(r'data-expires="[^"]+"[^>]*>4:5\d</time> left', item)
    base = f"q-{q.id}"
    assert re.search(rf'<label for="{base}-0">Your name <span class="req">\(required\)</span></label>', item)
    assert re.search(
        rf'<input type="text" id="{base}-0" name="name" value="" required minlength="2" maxlength="20" aria-describedby="{base}-0-hint"',
        item,
    )
    assert f'<span class="hint" id="{base}-0-hint">as on the badge</span>' in item
    assert f'<input type="email" id="{base}-1" name="email"' in item
    assert f'<input type="url" id="{base}-2" name="site"' in item
    assert f'<input type="text" id="{base}-3" name="day" value="2026-12-24" placeholder="YYYY-MM-DD"' in item
    assert (
        f'<input type="text" id="{base}-4" name="at" value="2026-12-24T18:30:00Z" placeholder="YYYY-MM-DDThh:mm:ssZ"'
        in item
    )
    assert re.search(
        rf'<input type="number" id="{base}-5" name="ratio" value="" min="0.5" max="2.5" step="any"', item
    )
    assert re.search(
        rf'<input type="number" id="{base}-6" name="count" value="3" required min="1" max="10" step="1"', item
    )
    assert re.search(rf'<input type="checkbox" id="{base}-7" name="ok" value="on" checked', item)
    assert f'<label for="{base}-8">size</label>' in item
    size = re.search(rf'<select id="{base}-8" name="size" hx-preserve>.*?</select>', item, re.S).group(0)
    assert re.findall(r'<option value="(\w*)"( selected)?>(\w+)', size) == [
        ("", "", "No"),
        ("s", "", "Small"),
        ("m", " selected", "Medium"),
        ("l", "", "Large"),
    ]
    assert re.search(r"<legend>tags</legend>", item)
    assert re.search(rf'<input type="checkbox" id="{base}-9-1" name="tags" value="b" checked', item)
    assert re.search(rf'<input type="checkbox" id="{base}-9-0" name="tags" value="a" hx-preserve>', item)
    for button in (
        'value="accept">Submit',
        'value="decline" class="secondary" formnovalidate>Decline',
        'value="cancel" class="danger" formnovalidate>Cancel',
    ):
        assert button in item
    assert re.search(r'id="pending-badge"[^>]*>1</span>', html)


def test_it_shows_a_url_question_with_its_host_plainly_open_done_and_decline(signed_in, every):
    q = ask("url")
    item = card(signed_in.get("/pending/").content.decode(), q)
    assert '<strong class="host break">login.example.com</strong>' in item
    assert "https://login.example.com/device?code=1" in item
    assert (
        '<a class="button" href="https://login.example.com/device?code=1" target="_blank" rel="noopener noreferrer">Open</a>'
        in item
    )
    assert (
        'value="accept" class="secondary">Done</button>' in item
        and 'value="decline" class="danger">Decline' in item
    )
    assert "Submit" not in item


def test_it_gives_no_open_link_to_a_url_that_is_no_web_address(signed_in, every):
    q = ask("url", url="javascript:alert(1)")
    item = card(signed_in.get("/pending/").content.decode(), q)
    assert 'href="javascript' not in item and ">Open</a>" not in item
    assert "javascript:alert(1)" in item  # shown as text


def test_it_shows_no_misleading_host_and_no_open_link_for_a_url_with_user_info_or_backslash(signed_in, every):
    # A question recorded before receipt refused such addresses: `urlsplit` names paypal.com,
    # a browser opens evil.example.
    q = ask("url", url="https://evil.example\\@paypal.com/login")
    item = card(signed_in.get("/pending/").content.decode(), q)
    assert ">paypal.com<" not in item and ">Open</a>" not in item and 'href="https://evil' not in item
    assert "It asks you to open an address the console will not open: " in item
    assert '<span class="refused">the URL has a backslash</span>' in item


def test_it_says_when_the_server_did_not_say_which_call_asks(signed_in, every):
    q = ask()
    item = card(signed_in.get("/pending/").content.decode(), q)
    assert "did not say which of the calls" not in item
    Question.objects.filter(id=q.id).update(guessed=True)
    item = card(signed_in.get("/pending/").content.decode(), q)
    assert "The server did not say which of the calls running on it asks" in item


def test_it_submits_a_filled_form_as_the_typed_content(signed_in, every):
    q = ask()
    r = signed_in.post(
        f"/pending/{q.id}/answer/",
        {
            "action": "accept",
            "name": "Ann",
            "email": "",
            "count": "4",
            "ratio": "1.5",
            "ok": "on",
            "size": "l",
            "tags": ["a", "c"],
            "at": "2026-12-24T18:30",
            "day": "2026-12-24",
        },
    )
    assert r.status_code == 302 and r["Location"] == "/pending/"
    q.refresh_from_db()
    assert (q.status, q.answered_by) == ("answered", "op")
    assert q.answer == {
        "action": "accept",
        "content": {
            "name": "Ann",
            "day": "2026-12-24",
            "at": "2026-12-24T18:30:00Z",
            "ratio": 1.5,
            "count": 4,
            "ok": True,
            "size": "l",
            "tags": ["a", "c"],
        },
    }


@pytest.mark.parametrize(("action", "status"), [("decline", "declined"), ("cancel", "cancelled")])
def test_it_declines_or_cancels_without_looking_at_the_fields(signed_in, every, action, status):
    q = ask()
    r = signed_in.post(
        f"/pending/{q.id}/answer/", {"action": action, "name": "x", "count": "nope"}, follow=True
    )
    q.refresh_from_db()
    assert q.status == status and q.answer == {"action": action}
    assert (
        "Declined" if action == "decline" else "Cancelled"
    ) + ": every&#x27;s question." in r.content.decode()


def test_it_says_what_is_wrong_with_an_answer_and_stores_nothing(signed_in, every):
    q = ask()
    r = signed_in.post(
        f"/pending/{q.id}/answer/", {"action": "accept", "name": "A", "count": "2"}, follow=True
    )
    assert "Not sent: invalid answer: name: must be at least 2 characters." in r.content.decode()
    q.refresh_from_db()
    assert q.status == "pending" and q.answer is None


def test_it_says_so_when_a_question_has_ended_or_expired(signed_in, every):
    q = ask()
    questions.answer(q.id, {"action": "decline"}, "someone")
    r = signed_in.post(
        f"/pending/{q.id}/answer/", {"action": "accept", "name": "Ann", "count": "2"}, follow=True
    )
    assert "Not sent: confirmation already resolved or expired." in r.content.decode()
    late = ask()
    Question.objects.filter(id=late.id).update(expires_at=timezone.now() - datetime.timedelta(seconds=1))
    r = signed_in.post(f"/pending/{late.id}/answer/", {"action": "decline"}, follow=True)
    assert "already resolved or expired" in r.content.decode()
    assert Question.objects.get(id=late.id).status == "expired"


def test_it_answers_an_htmx_answer_with_the_list_badge_and_message(signed_in, every):
    first, second = ask(), ask("url")
    confirmation = make_call(session_id="sess-2")
    r = signed_in.post(f"/pending/{first.id}/answer/", {"action": "cancel"}, headers={"HX-Request": "true"})
    html = r.content.decode()
    assert html.lstrip().startswith('<div id="pending-list"')
    assert f"pending-{second.id}" in html and f"pending-{first.id}" not in html
    assert f"pending-{confirmation.confirm_id}" in html
    assert re.search(r'id="pending-badge"[^>]*hx-swap-oob="true">2</span>', html)
    assert "Cancelled: every&#x27;s question." in html


def test_it_shows_a_questions_own_page_with_its_form_then_how_it_ended(signed_in, every):
    q = ask()
    html = signed_in.get(f"/pending/{q.id}/").content.decode()
    assert "A question from every" in html
    item = card(html, q)
    assert f'<input type="hidden" name="next" value="/pending/{q.id}/">' in item
    assert "hx-post" not in item  # its own page posts plainly and comes back here
    r = signed_in.post(f"/pending/{q.id}/answer/", {"action": "decline", "next": f"/pending/{q.id}/"})
    assert r["Location"] == f"/pending/{q.id}/"
    html = signed_in.get(f"/pending/{q.id}/").content.decode()
    assert "Declined by op at" in html and "Submit" not in html
    fragment = signed_in.get(f"/pending/{q.id}/", headers={"HX-Request": "true"}).content.decode()
    assert fragment.lstrip().startswith('<div id="pending-detail" data-sig="declined"')


def test_it_keeps_the_list_the_same_for_the_browser_until_the_set_of_questions_changes(every):
    q = ask()
    before = live.pending_context(live.pending_calls(), live.pending_questions())
    again = live.pending_context(live.pending_calls(), live.pending_questions())
    assert before["pending_sig"] == again["pending_sig"] and before["pending_badge"] == "1"
    questions.answer(q.id, {"action": "cancel"}, "op")
    after = live.pending_context(live.pending_calls(), live.pending_questions())
    assert after["pending_sig"] != before["pending_sig"] and after["question_items"] == []
    assert live.pending_count() == 0


def test_it_pushes_a_new_question_to_an_open_pending_page(every, user):
    from asgiref.sync import async_to_sync

    q = ask()
    scope = {"user": user, "query_string": b"page=pending"}
    html = async_to_sync(live.render_push)({"type": "pending.changed", "call_id": str(q.call_id)}, scope)
    assert f'id="pending-{q.id}"' in html and 'hx-swap-oob="true"' in html


def test_it_shows_a_calls_questions_and_answers_on_its_page(signed_in, every):
    q = ask()
    questions.answer(q.id, {"action": "accept", "content": {"name": "Ann", "count": 2}}, "op")
    later = questions.ask(q.call_id, "every", "url", "Sign in", url="https://login.example.com/x")
    html = signed_in.get(f"/history/{q.call_id}/").content.decode()
    section = re.search(r'<section class="card" id="questions">.*?</section>', html, re.S).group(0)
    assert "Questions from every" in section and "Who are you?" in section and "Sign in" in section
    assert "Answered by op at" in section and "&quot;name&quot;: &quot;Ann&quot;" in section
    assert f'href="/pending/{later.id}/">Answer it</a>' in section


def test_it_words_a_question_for_the_browsers_notification(signed_in, every):
    q = ask()
    items = signed_in.get("/pending/feed/").json()["pending"]
    assert items == [
        {
            "id": str(q.id),
            "tool": "echo",
            "server": "every",
            "title": "Question from every",
            "body": "every asks: Who are you?",
            "url": f"/pending/{q.id}/",
        }
    ]


def test_it_extends_a_question_from_the_inbox(signed_in, every, settings):
    settings.AGENVOY_CONFIRM_TIMEOUT = 1200
    question = ask()
    item = card(signed_in.get("/pending/").content.decode(), question)
    assert f'action="/pending/{question.id}/extend/"' in item and ">Extend</button>" in item
    r = signed_in.post(f"/pending/{question.id}/extend/", follow=True)
    question.refresh_from_db()
    assert 1195 < (question.expires_at - timezone.now()).total_seconds() <= 1200
    assert "Extended: the question from every" in r.content.decode()
