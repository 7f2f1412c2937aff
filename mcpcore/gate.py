"""The confirmation gate's decisions (SPEC 5). Pure: no HTTP, no queries, no mcp; its words are
`choices`' (modes, the decisions it records, a rule's verdicts)."""

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from .choices import CallDecision, Mode, RuleDecision

MODES = {
    "confirm": Mode.CONFIRM,
    "single-confirm": Mode.CONFIRM,
    "auto": Mode.AUTO,
    "always-allow": Mode.AUTO,
}


def normalize_mode(mode: object) -> str | None:
    """`confirm` when absent; Agenvoy's names are aliases; None for an unknown mode."""
    if mode is None or mode == "":
        return Mode.CONFIRM
    return MODES.get(mode) if isinstance(mode, str) else None


class Found(NamedTuple):
    """The argument rule that decides a call (SPEC 14.2): its verdict and line, and for an
    `ask`, who decides (24.1: the group, "" for every approver; 24.2: the approvals needed)."""

    decision: str
    line: str
    group: str = ""
    approvals: int = 1


@dataclass(frozen=True)
class Decision:
    run: bool
    reason: (
        str  # CallDecision auto, allowlist, session, grant, rule (run); RuleDecision ask, deny (never run)
    )
    rule: str = ""  # the line of the rule that decided, if one did
    retry_after: int = 0  # a limit's refusal (SPEC 25.1): whole seconds until one more call fits
    repeated: int = 0  # held as a repeat (SPEC 25.2): the times it was already made
    group: str = ""  # an `ask[<group>]` line held it: that group decides (SPEC 24.1)
    approvals: int = 1  # distinct approvals it needs (24.2)


def decide(
    mode: str,
    allowed: Callable[[], bool],
    session_allowed: Callable[[], bool],
    rule: Callable[[], Found | tuple[str, str] | None] = lambda: None,
    changed: Callable[[], bool] = lambda: False,
    granted: Callable[[], bool] = lambda: False,
    reads: bool = False,
    limited: Callable[[], tuple[str, int] | None] = lambda: None,
    repeated: Callable[[], int] = lambda: 0,
) -> Decision:
    """Argument rules first (SPEC 14.2: deny, then ask), then a trusted tool whose definition
    changed since it was pinned (14.1: it waits for a person whatever else would let it run),
    then an allow rule, then SPEC 5 (first match wins: auto mode, the allow-list, the session's
    allowance), then a time-boxed grant of the tool to the token (17.3), else ask. A prompt get
    or a resource read (`reads`) runs when no rule holds it (SPEC 20.3: most are the person's
    own picks).

    Guard rails (SPEC 25) come right after a deny rule, which still wins: a call over a limit
    ends at once (`limited`: (line, seconds until one more fits) or None; asked for every call,
    since every call a limit matches counts, whatever happens to it); else a call repeated past
    AGENVOY_REPEAT_LIMIT (`repeated`: how many times it was already made, or 0) waits for a
    person whatever would let it run.

    The checks are callables, asked only when reached: each may cost a lookup. `rule` gives
    the deciding rule (a `Found`, or its first two fields: decision, line) or None.
    """
    found = rule()
    over = limited()
    if found is not None and found[0] == RuleDecision.DENY:
        return Decision(False, RuleDecision.DENY, found[1])
    if over is not None:
        return Decision(False, RuleDecision.LIMIT, over[0], retry_after=over[1])
    times = repeated()
    if found is not None and found[0] == RuleDecision.ASK:
        asked = found if isinstance(found, Found) else Found(*found)
        return Decision(
            False, RuleDecision.ASK, asked.line, repeated=times, group=asked.group, approvals=asked.approvals
        )
    if times:
        return Decision(False, RuleDecision.ASK, repeated=times)
    if changed():
        return Decision(False, RuleDecision.ASK)
    if found is not None and found[0] == RuleDecision.ALLOW:
        return Decision(True, CallDecision.RULE, found[1])
    if reads:
        return Decision(True, CallDecision.DEFAULT)
    if mode == Mode.AUTO:
        return Decision(True, CallDecision.AUTO)
    if allowed():
        return Decision(True, CallDecision.ALLOWLIST)
    if session_allowed():
        return Decision(True, CallDecision.SESSION)
    if granted():
        return Decision(True, CallDecision.GRANT)
    return Decision(False, RuleDecision.ASK)


def denied_text(rule_line: str) -> str:
    return f"Denied by rule: {rule_line}"


def edited_text(who: str, arguments: dict) -> str:
    """The first line of a call's result when a person changed its arguments (SPEC 24.5): the
    arguments as run, as compact JSON (the export's form)."""
    compact = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
    return f"Approved with changed arguments by {who}: {compact}"


def waiting_text(page: str, group: str = "", escalated_to: str = "", note: str = "") -> str:
    """A held MCP call's progress message (SPEC 13.3): `waiting for approval`, by whom when a
    group decides it (24.1) and to whom it was escalated (24.3), then its page's address and
    why it was held when that is news to the agent (a repeat, 25.2)."""
    by = f" by {group}" if group else ""
    if group and escalated_to:
        by += f"; escalated to {escalated_to}"
    return f"waiting for approval{by}: {page}" + (f" ({note})" if note else "")


def limited_text(rule_line: str, retry_after: int) -> str:
    """A rate-limited call's result (SPEC 25.1)."""
    return f"Rate limited by rule: {rule_line}; retry in {retry_after} s"


def limited_error(rule_line: str) -> str:
    """`POST /v1/mcp/call`'s 429 error for a rate-limited call (SPEC 25.1)."""
    return f"rate limited by rule: {rule_line}"


def repeat_text(times: int, window: str) -> str:
    """What the inbox and a held call's progress say of a call held as a repeat (SPEC 25.2)."""
    return f"Repeated {times} times in {window}"


SKIPPED = "Skipped by user"
ABORTED = "user stopped"


def skipped_text(reason: str = "") -> str:
    reason = reason.strip()
    return f"{SKIPPED}. Reason: {reason}" if reason else SKIPPED


def timeout_text(name: str, seconds: float) -> str:
    return f'tool "{name}" timed out after {seconds:g}s'
