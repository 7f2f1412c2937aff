"""The confirmation gate's decisions (SPEC 5). Pure: no HTTP, no database, no mcp."""

from collections.abc import Callable
from dataclasses import dataclass

MODES = {
    "confirm": "confirm",
    "single-confirm": "confirm",
    "auto": "auto",
    "always-allow": "auto",
}


def normalize_mode(mode: object) -> str | None:
    """`confirm` when absent; Agenvoy's names are aliases; None for an unknown mode."""
    if mode is None or mode == "":
        return "confirm"
    return MODES.get(mode) if isinstance(mode, str) else None


@dataclass(frozen=True)
class Decision:
    run: bool
    reason: str  # auto, allowlist, session, or ask


def decide(mode: str, allowed: Callable[[], bool], session_allowed: Callable[[], bool]) -> Decision:
    """First match wins: auto mode, the allow-list, the session's allowance, else ask.

    The checks are callables, asked only when reached: each may cost a lookup.
    """
    if mode == "auto":
        return Decision(True, "auto")
    if allowed():
        return Decision(True, "allowlist")
    if session_allowed():
        return Decision(True, "session")
    return Decision(False, "ask")


SKIPPED = "Skipped by user"
ABORTED = "user stopped"


def skipped_text(reason: str = "") -> str:
    reason = reason.strip()
    return f"{SKIPPED}. Reason: {reason}" if reason else SKIPPED


def timeout_text(name: str, seconds: float) -> str:
    return f'tool "{name}" timed out after {seconds:g}s'
