"""Claude Code's HTTP hooks (SPEC 17.1): what the console answers for `PermissionRequest` and
`PreToolUse`, from how the permission prompt ended (the ended call's fields only: no HTTP,
no query).

The shapes are those of Claude Code's hooks reference ("PermissionRequest decision control",
"PreToolUse decision control", "JSON output"); `{}` (or `ask`) hands the question back to the
terminal when nobody decided in the console in time.
"""

from ..choices import CallStatus
from ..models import ToolCall
from ..schemas import HOOK_EVENTS, PERMISSION_REQUEST, PRE_TOOL_USE

EVENTS = HOOK_EVENTS
ABORTED = "user stopped"
WAIT_DEFAULT, WAIT_MIN, WAIT_MAX = 55.0, 1.0, 600.0
WAIT_ERROR = "wait must be between 1 and 600 seconds"


def timed_out_text(wait: float) -> str:
    return f"no decision in the console within {wait:g} s"


def wait_seconds(raw: str | None) -> float:
    """`?wait=`: seconds to hold the request (default 55); raises ValueError(WAIT_ERROR)."""
    if raw is None or raw == "":
        return WAIT_DEFAULT
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(WAIT_ERROR) from None
    if not WAIT_MIN <= value <= WAIT_MAX:  # NaN fails this too
        raise ValueError(WAIT_ERROR)
    return value


def answer(event: str, call: "ToolCall", wait: float, timed_out: bool) -> dict:
    """The hook's JSON answer for a prompt that ended (or that `timed_out`: nobody decided
    within `wait` seconds and the console cancelled it)."""
    if event == PERMISSION_REQUEST:
        return _permission_request(call, timed_out)
    return _pre_tool_use(call, wait, timed_out)


def _denial(call: "ToolCall") -> str:
    # skipped, expired and a rule's deny carry SPEC 5's and 14.2's texts in the result.
    return call.result or f"not allowed: {call.status}"


def _permission_request(call: "ToolCall", timed_out: bool) -> dict:
    if timed_out:
        return {}
    if call.status == CallStatus.DONE:
        decision: dict[str, object] = {"behavior": "allow"}
    elif call.status == CallStatus.ABORTED:
        decision = {"behavior": "deny", "message": ABORTED, "interrupt": True}
    else:
        decision = {"behavior": "deny", "message": _denial(call)}
    return {"hookSpecificOutput": {"hookEventName": PERMISSION_REQUEST, "decision": decision}}


def _pre_tool_use(call: "ToolCall", wait: float, timed_out: bool) -> dict:
    out: dict = {}
    if timed_out:
        decision, reason = "ask", timed_out_text(wait)
    elif call.status == CallStatus.DONE:
        decision, reason = "allow", f"Approved in the console by {call.decided_by or 'the console'}"
    elif call.status == CallStatus.ABORTED:
        decision, reason = "deny", ABORTED
        out = {"continue": False, "stopReason": ABORTED}
    else:
        decision, reason = "deny", _denial(call)
    specific = {
        "hookEventName": PRE_TOOL_USE,
        "permissionDecision": decision,
        "permissionDecisionReason": reason,
    }
    return {**out, "hookSpecificOutput": specific}
