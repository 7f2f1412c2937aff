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


# --- argument rules and pins (SPEC 14) -------------------------------------------------------


def yes():
    return True


def test_it_denies_by_rule_before_anything_else():
    d = gate.decide("auto", never, never, rule=lambda: ("deny", "deny mcp__a__b"), changed=never)
    assert d == gate.Decision(False, "deny", "deny mcp__a__b")
    assert gate.denied_text(d.rule) == "Denied by rule: deny mcp__a__b"


def test_it_asks_by_rule_whatever_the_mode_allow_list_or_session():
    d = gate.decide("auto", yes, yes, rule=lambda: ("ask", "ask mcp__a__*"), changed=never)
    assert d == gate.Decision(False, "ask", "ask mcp__a__*")


def test_it_asks_for_a_changed_trusted_tool_in_auto_mode():
    assert gate.decide("auto", yes, yes, changed=yes) == gate.Decision(False, "ask")
    d = gate.decide("auto", yes, yes, rule=lambda: ("allow", "allow mcp__a__b"), changed=yes)
    assert d == gate.Decision(False, "ask")


def test_it_runs_an_allow_rule_as_decision_rule():
    d = gate.decide("confirm", never, never, rule=lambda: ("allow", "allow mcp__a__b"))
    assert d == gate.Decision(True, "rule", "allow mcp__a__b")


def test_it_falls_back_to_section_5_without_a_rule():
    assert gate.decide("confirm", yes, never, rule=lambda: None, changed=lambda: False).reason == "allowlist"
