"""Claude Code's hook payloads and the answer fields its hooks reference documents, kept as
fixtures under tests/fixtures/claude_code/ (see the README there), and the check that an answer
uses only those fields (tests/api/test_claude_hooks.py, tests/e2e/test_approvals_browser.py)."""

import copy
import json
import uuid
from pathlib import Path

from tests.live import wait_until

FIXTURES = Path(__file__).parent / "fixtures" / "claude_code"
PERMISSION_REQUEST = json.loads((FIXTURES / "permission_request.json").read_text())
PRE_TOOL_USE = json.loads((FIXTURES / "pre_tool_use.json").read_text())
FIELDS = json.loads((FIXTURES / "output_fields.json").read_text())


def payload(base: dict, **changes) -> dict:
    """A fixture with a session id of its own (each test's prompts are its own)."""
    body = copy.deepcopy(base)
    body["session_id"] = f"s-{uuid.uuid4().hex[:8]}"
    body.update(changes)
    return body


def check_shape(event: str, answer: dict) -> None:
    """The answer uses only the fields Claude Code's hooks reference documents for the event."""
    if answer == {}:
        return
    allowed_top = set(FIELDS["universal"]) | {"hookSpecificOutput"}
    assert set(answer) <= allowed_top, answer
    specific = answer["hookSpecificOutput"]
    assert specific["hookEventName"] == event
    assert set(specific) <= set(FIELDS[event]["hookSpecificOutput"]), specific
    if event == "PermissionRequest":
        decision = specific["decision"]
        assert set(decision) <= set(FIELDS[event]["decision"])
        assert decision["behavior"] in FIELDS[event]["behavior"]
        wrong = FIELDS[event]["deny_only" if decision["behavior"] == "allow" else "allow_only"]
        assert not set(decision) & set(wrong), decision
    else:
        assert specific["permissionDecision"] in FIELDS[event]["permissionDecision"]
        assert isinstance(specific["permissionDecisionReason"], str)


def pending_of(c, session: str, timeout: float = 15) -> dict:
    """The inbox item of Claude Code session `session` on console `c`, waited for."""

    def find():
        rows = [p for p in c.get("/v1/pending").json()["pending"] if p["session_id"] == f"cc:{session}"]
        return rows[0] if rows else None

    return wait_until(find, timeout, what=f"the prompt of {session} in the inbox")
