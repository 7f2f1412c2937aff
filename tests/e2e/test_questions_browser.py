"""SPEC 20.4 in a real Chromium against a real `manage.py serve`: a server's question waiting on
the Pending page, its form (built from the schema, defaults filled in, required fields marked)
filled in and submitted by a person at 1280 and at 390 px, under axe-core and the Tab walk; and
a URL-mode question's card. Run on its own: `pytest -m e2e tests/e2e/test_questions_browser.py`.

The questions and their running calls are rows written into the live console's database through
a management shell (`questions.ask`, as the supervisor records one), made before the page is
opened: the shell's process has no share of the console's channel layer to push them.

Screenshots at 390 and 1280 px go to artifacts/questions/ (not committed).
"""

import json

import pytest
from playwright.sync_api import expect

from tests.e2e import a11y
from tests.e2e.browser import DESKTOP, PHONE, console_with_user, shoot_into, sign_in
from tests.live import ROOT

pytestmark = pytest.mark.e2e

SHOTS = ROOT / "artifacts" / "questions"
USER, PASSWORD = "lead", "e2e-password-34"
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {
            "type": "string",
            "title": "Your name",
            "description": "as the release notes print it",
            "minLength": 2,
        },
        "email": {"type": "string", "title": "Email", "format": "email"},
        "day": {"type": "string", "title": "Release day", "format": "date", "default": "2026-12-24"},
        "at": {
            "type": "string",
            "title": "Start at",
            "format": "date-time",
            "default": "2026-12-24T09:30:00Z",
        },
        "count": {"type": "integer", "title": "Replicas", "minimum": 1, "maximum": 5, "default": 2},
        "notify": {"type": "boolean", "title": "Tell the team", "default": True},
        "env": {
            "type": "string",
            "title": "Environment",
            "oneOf": [{"const": "staging", "title": "Staging"}, {"const": "prod", "title": "Production"}],
        },
        "regions": {
            "type": "array",
            "title": "Regions",
            "items": {"type": "string", "enum": ["eu", "us", "ap"]},
            "default": ["eu"],
        },
    },
    "required": ["name", "env"],
}

ASK = """
import json
from django.utils import timezone
from mcpcore.calls import questions
from mcpcore.models import ToolCall, Worker
worker = Worker.objects.values_list("name", flat=True).first() or ""
call = ToolCall.objects.create(
    session_id="e2e-34", tool_name="mcp__deployer__deploy", server_name="deployer", tool="deploy",
    arguments={"service": "web"}, status="running", started_at=timezone.now(), worker=worker,
)
spec = json.loads(%r)
q = questions.ask(call.id, "deployer", spec["mode"], spec["message"], spec.get("schema"), url=spec.get("url", ""))
print("QUESTION", q.id)
"""

READ = """
import json
from mcpcore.models import Question
q = Question.objects.get(id=%r)
print("ANSWER", json.dumps([q.status, q.answer, q.answered_by]))
"""


def ask(console, **spec) -> str:
    out = console.manage("shell", "-c", ASK % json.dumps(spec))
    return next(line.split()[1] for line in out.splitlines() if line.startswith("QUESTION "))


def answer_of(console, question_id: str) -> list:
    out = console.manage("shell", "-c", READ % question_id)
    return json.loads(next(line[len("ANSWER ") :] for line in out.splitlines() if line.startswith("ANSWER ")))


@pytest.fixture(scope="module")
def console(module_console):
    c = console_with_user(module_console, None, USER, PASSWORD)
    module_console.start(c)
    return c


def test_it_signs_in(page):
    page.goto("/login/")
    sign_in(page, USER, PASSWORD)


def fill(card, name: str) -> None:
    """What a person does with the form: type, pick, tick and untick."""
    card.get_by_label("Your name").fill(name)
    card.get_by_label("Email", exact=True).fill("ann@example.org")
    card.get_by_label("Replicas").fill("3")
    card.get_by_label("Environment").select_option("prod")
    card.get_by_label("Tell the team").uncheck()
    card.get_by_label("us", exact=True).check()


def test_it_fills_and_submits_a_questions_form_on_the_pending_page_at_desktop_width(page, console):
    qid = ask(console, mode="form", message="Who signs off this release?", schema=SCHEMA)
    url_qid = ask(
        console, mode="url", message="Sign in to the registry", url="https://login.example.com/device?c=7"
    )
    page.set_viewport_size(DESKTOP)
    page.goto("/pending/")
    card = page.locator(f"#pending-{qid}")
    expect(card).to_be_visible()
    expect(card.get_by_role("heading", name="deployer asks")).to_be_visible()
    expect(card).to_contain_text("Who signs off this release?")
    # Defaults filled in, required fields marked.
    expect(card.get_by_label("Release day")).to_have_value("2026-12-24")
    expect(card.get_by_label("Start at")).to_have_value("2026-12-24T09:30:00Z")
    expect(card.get_by_label("Replicas")).to_have_value("2")
    expect(card.get_by_label("Tell the team")).to_be_checked()
    expect(card.get_by_label("eu", exact=True)).to_be_checked()
    expect(card.get_by_text("(required)")).to_have_count(2)
    url_card = page.locator(f"#pending-{url_qid}")
    expect(url_card.locator("strong.host")).to_have_text("login.example.com")
    expect(url_card.get_by_role("link", name="Open")).to_have_attribute(
        "href", "https://login.example.com/device?c=7"
    )
    assert a11y.check(page, "pending (questions) /pending/") == []
    shoot_into(page, SHOTS, "pending-questions")

    # The browser holds a required field back before anything is sent.
    card.get_by_role("button", name="Submit").click()
    expect(card).to_be_visible()
    assert answer_of(console, qid)[0] == "pending"
    fill(card, "Ann")
    card.get_by_role("button", name="Submit").click()
    expect(page.get_by_text("Answer sent: deployer's question.")).to_be_visible()
    expect(card).to_have_count(0)
    status, answer, by = answer_of(console, qid)
    assert (status, by) == ("answered", USER)
    assert answer == {
        "action": "accept",
        "content": {
            "name": "Ann",
            "email": "ann@example.org",
            "day": "2026-12-24",
            "at": "2026-12-24T09:30:00Z",
            "count": 3,
            "notify": False,
            "env": "prod",
            "regions": ["eu", "us"],
        },
    }
    url_card.get_by_role("button", name="Decline").click()
    expect(page.get_by_text("Declined: deployer's question.")).to_be_visible()
    assert answer_of(console, url_qid)[:2] == ["declined", {"action": "decline"}]


def test_it_fills_and_submits_a_questions_form_on_its_own_page_at_phone_width(page, console):
    qid = ask(console, mode="form", message="Who signs off the hotfix?", schema=SCHEMA)
    page.set_viewport_size(PHONE)
    page.goto(f"/pending/{qid}/")
    expect(page.get_by_role("heading", name="A question from deployer")).to_be_visible()
    assert a11y.check(page, "pending-detail (question) /pending/<id>/") == []
    page.set_viewport_size(PHONE)  # the check ends at desktop width
    card = page.locator(f"#pending-{qid}")
    fill(card, "Bo")
    shoot_into(page, SHOTS, "question-detail-filled")
    page.set_viewport_size(PHONE)  # the screenshots end at desktop width
    # Keyboard only: from the last field to Submit, and Enter.
    card.get_by_role("button", name="Submit").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_text("Answered by lead at")).to_be_visible()
    status, answer, _ = answer_of(console, qid)
    assert status == "answered" and answer["content"]["name"] == "Bo"
    page.set_viewport_size(DESKTOP)
