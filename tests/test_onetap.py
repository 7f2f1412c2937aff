"""SPEC 17.2 / issue 21 point 2: one tap on the phone.

A real `manage.py serve` pushes to a real HTTP receiver standing in for the ntfy server (and to
one for a webhook target); the test reads the `Actions` header the way ntfy's documented simple
format is read (actions split at `;`, fields at `,`: action, label, URL, then `key=value`
options) and posts the button's URL the way the ntfy app does: a bare POST, no session, no
CSRF token. The action tokens themselves are checked as pure functions below.
"""

import re
import uuid

import httpx2
import pytest

from mcpcore import onetap
from tests.live import our_server, wait_until
from tests.webhooks import Receiver

GONE = "this link is no longer valid"


def ntfy_actions(header: str) -> list[dict]:
    """ntfy's simple `Actions` format: `<action>, <label>, <url>[, key=value ...]; ...`."""
    actions = []
    for part in header.split(";"):
        fields = [f.strip() for f in part.split(",")]
        action = {"action": fields[0], "label": fields[1], "url": fields[2]}
        for option in fields[3:]:
            key, _, value = option.partition("=")
            action[key.strip()] = value.strip()
        actions.append(action)
    return actions


# --- against a real console and receivers -------------------------------------------------------


@pytest.fixture(scope="module")
def receivers():
    ntfy, webhook = Receiver(), Receiver()
    yield ntfy, webhook
    ntfy.close()
    webhook.close()


@pytest.fixture(scope="module")
def c(receivers, module_console):
    ntfy, webhook = receivers
    console = module_console({"echo": our_server("echo.py")}, start=False)
    console.env["AGENVOY_PUBLIC_URL"] = console.url
    # With DEBUG on, Django's request logger writes the path of every 4xx: the links must not be.
    console.env["DJANGO_DEBUG"] = "1"
    console.manage(
        "shell",
        "-c",
        "from mcpcore.calls import notify; "
        f"notify.add_target('ntfy', {ntfy.url!r}); notify.add_target('webhook', {webhook.url!r})",
    )
    module_console.start(console)
    console.wait_connected("echo")
    return console


@pytest.fixture
def phone():
    """The ntfy app: no cookies, no CSRF token, nothing but the URL."""
    with httpx2.Client(timeout=30, follow_redirects=False) as client:
        yield client


def push_for(receiver: Receiver, confirm_id: str, what: str = "the push") -> dict:
    def find():
        return next((r for r in receiver.requests if confirm_id in r["headers"].get("click", "")), None)

    return wait_until(find, 20, what=what)


def webhook_for(receiver: Receiver, confirm_id: str) -> dict:
    import json

    def find():
        for r in receiver.requests:
            body = json.loads(r["body"])
            if body["type"] == "confirmation.pending" and body["data"]["id"] == confirm_id:
                return body["data"]
        return None

    return wait_until(find, 20, what="the webhook")


def pending_call(c, text: str) -> dict:
    r = c.call("mcp__echo__echo", {"text": text}, wait=0)
    assert r.status_code == 202, r.text
    return r.json()


@pytest.mark.live
def test_it_approves_from_the_phones_button_and_then_the_other_button_is_gone(c, receivers, phone):
    ntfy, webhook = receivers
    call = pending_call(c, "deploy")
    push = push_for(ntfy, call["confirm_id"])
    buttons = ntfy_actions(push["headers"]["actions"])
    assert [(b["action"], b["label"], b["method"], b["clear"]) for b in buttons] == [
        ("http", "Approve", "POST", "true"),
        ("http", "Deny", "POST", "true"),
    ]
    approve, deny = buttons[0]["url"], buttons[1]["url"]
    assert approve.startswith(f"{c.url}/a/") and deny.startswith(f"{c.url}/a/") and approve != deny
    data = webhook_for(webhook, call["confirm_id"])
    assert data["approve_url"].startswith(f"{c.url}/a/") and data["deny_url"].startswith(f"{c.url}/a/")
    assert data["approve_url"] != approve  # each link is bound to its own target

    # A link preview GETs the link: a page with the call and one button, and nothing decided.
    page = phone.get(approve)
    assert page.status_code == 200 and page.headers["cache-control"] == "no-store"
    assert "mcp__echo__echo" in page.text and "deploy" in page.text
    forms = re.findall(r"<form[^>]*>.*?</form>", page.text, re.S)
    assert len(forms) == 1 and 'method="post"' in forms[0] and 'action=""' in forms[0]
    assert re.findall(r"<button[^>]*>([^<]*)</button>", forms[0]) == ["Approve"]
    assert c.get(f"/v1/mcp/calls/{call['call_id']}").json()["status"] == "pending"

    r = phone.post(approve)
    assert (r.status_code, r.text) == (200, "approved")
    assert r.headers["content-type"].startswith("text/plain")
    done = c.get(f"/v1/mcp/calls/{call['call_id']}", wait=10).json()
    assert (done["status"], done["decision"], done["decided_by"]) == (
        "done",
        "approve",
        "127.0.0.1 (one-tap)",
    )
    for link in (deny, approve, data["deny_url"]):
        for method in ("POST", "GET"):
            r = phone.request(method, link)
            assert (r.status_code, r.text) == (410, GONE), (method, link)


@pytest.mark.live
def test_it_denies_from_the_deny_button(c, receivers, phone):
    ntfy, _ = receivers
    call = pending_call(c, "drop the table")
    deny = ntfy_actions(push_for(ntfy, call["confirm_id"])["headers"]["actions"])[1]["url"]
    r = phone.post(deny)
    assert (r.status_code, r.text) == (200, "denied")
    ended = c.get(f"/v1/mcp/calls/{call['call_id']}").json()
    assert (ended["status"], ended["result"], ended["decided_by"]) == (
        "skipped",
        "Skipped by user",
        "127.0.0.1 (one-tap)",
    )


@pytest.mark.live
def test_it_answers_410_to_guessed_and_altered_tokens_and_decides_nothing(c, receivers, phone):
    ntfy, _ = receivers
    call = pending_call(c, "rotate keys")
    approve = ntfy_actions(push_for(ntfy, call["confirm_id"])["headers"]["actions"])[0]["url"]
    token = approve.rsplit("/", 1)[1]
    body, mac = token.split(".")
    flipped = mac[:-1] + ("A" if mac[-1] != "A" else "B")
    other_target = body[:33] + str(int(body[33:]) + 100)
    tries = [
        flipped,  # an altered MAC
        f"{body[:32]}d{body[33:]}.{mac}",  # the approve MAC on a deny
        f"{other_target}.{mac}",  # another target
        f"{uuid.uuid4().hex}a1.{mac}",  # another confirmation
        f"{body}.{mac}x",
        f"{body}",
        "0" * 40,
        onetap.make("not the console's key", call["confirm_id"], "approve", int(body[33:])),
    ]
    for guess in tries:
        for method in ("POST", "GET"):
            r = phone.request(method, f"{c.url}/a/{guess}")
            assert (r.status_code, r.text) == (410, GONE), guess
    assert c.get(f"/v1/mcp/calls/{call['call_id']}").json()["status"] == "pending"
    assert phone.post(approve).text == "approved"


@pytest.mark.live
def test_it_words_a_permission_prompts_push_by_its_tool_name(c, receivers):
    ntfy, _ = receivers
    with c.client_for("agent") as agent, httpx2.Client(timeout=30) as raw:
        import concurrent.futures

        body = {
            "hook_event_name": "PermissionRequest",
            "session_id": "p1",
            "tool_name": "Bash",
            "tool_input": {},
        }
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            answer = pool.submit(agent.post, "/v1/hooks/claude-code", json=body, params={"wait": 20})
            item = wait_until(
                lambda: next(
                    (p for p in c.get("/v1/pending").json()["pending"] if p["session_id"] == "cc:p1"), None
                ),
                15,
            )
            push = push_for(ntfy, item["id"])
            assert push["body"].decode() == "Bash is waiting for approval"
            approve = ntfy_actions(push["headers"]["actions"])[0]["url"]
            assert raw.post(approve).text == "approved"
            assert answer.result(30).json()["hookSpecificOutput"]["decision"] == {"behavior": "allow"}


@pytest.mark.live
def test_it_never_logs_an_action_token(c, receivers):
    ntfy, webhook = receivers
    wait_until(lambda: ntfy.requests, 10)
    tokens = set()
    for r in ntfy.requests:
        for button in ntfy_actions(r["headers"]["actions"]):
            tokens.add(button["url"].rsplit("/", 1)[1])
    assert tokens
    log = c.log_text()
    assert not [t for t in tokens if t in log]
    assert "/a/" not in log


# --- the tokens ---------------------------------------------------------------------------------


def test_it_reads_back_exactly_what_it_made():
    cid = uuid.uuid4()
    for decision in (onetap.APPROVE, onetap.DENY):
        token = onetap.make("k", cid, decision, 7)
        assert re.fullmatch(r"[0-9a-f]{32}[ad]7\.[A-Za-z0-9_-]{27}", token)
        assert onetap.read("k", token) == onetap.Action(cid, decision, 7)
    assert onetap.MAC_BYTES * 8 >= 128


def test_it_refuses_every_token_it_did_not_make():
    cid = uuid.uuid4()
    token = onetap.make("k", cid, onetap.APPROVE, 7)
    body, mac = token.split(".")
    assert onetap.read("other key", token) is None
    for i in range(len(token)):
        for c in "0aZ_-.":
            changed = token[:i] + c + token[i + 1 :]
            if changed != token:
                assert onetap.read("k", changed) is None, changed
    for bad in ("", ".", body, f"{body}.", f"{body}.{mac}=", f"{body.upper()}.{mac}", "x" * 300):
        assert onetap.read("k", bad) is None
