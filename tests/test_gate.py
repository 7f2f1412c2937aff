"""The gate's pure decisions (SPEC 5), without a server or a database."""

import pytest

from mcpcore import gate


def never():
    raise AssertionError("this check must not be asked")


@pytest.mark.parametrize(
    "mode, expected",
    [
        (None, "confirm"),
        ("", "confirm"),
        ("confirm", "confirm"),
        ("single-confirm", "confirm"),
        ("auto", "auto"),
        ("always-allow", "auto"),
        ("yolo", None),
        (3, None),
        ("AUTO", None),
    ],
)
def test_it_normalizes_modes_with_agenvoy_aliases(mode, expected):
    assert gate.normalize_mode(mode) == expected


def test_it_runs_auto_without_asking_anything_else():
    assert gate.decide("auto", never, never) == gate.Decision(True, "auto")


def test_it_runs_an_allow_listed_tool_before_looking_at_the_session():
    assert gate.decide("confirm", lambda: True, never) == gate.Decision(True, "allowlist")


def test_it_runs_a_tool_of_a_session_allowed_for_the_session():
    assert gate.decide("confirm", lambda: False, lambda: True) == gate.Decision(True, "session")


def test_it_asks_otherwise_failing_closed():
    decision = gate.decide("confirm", lambda: False, lambda: False)
    assert decision == gate.Decision(False, "ask") and not decision.run


def test_it_words_skips_and_timeouts_exactly():
    assert gate.skipped_text() == "Skipped by user"
    assert gate.skipped_text("  ") == "Skipped by user"
    assert gate.skipped_text("not now") == "Skipped by user. Reason: not now"
    assert gate.skipped_text("confirmation expired") == "Skipped by user. Reason: confirmation expired"
    assert gate.timeout_text("mcp__a__b", 60.0) == 'tool "mcp__a__b" timed out after 60s'
    assert gate.timeout_text("mcp__a__b", 2.5) == 'tool "mcp__a__b" timed out after 2.5s'
    assert gate.ABORTED == "user stopped"
