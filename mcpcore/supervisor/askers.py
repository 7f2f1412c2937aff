"""The questions part of a server's session (SPEC 20.4): the calls running on it that may ask
questions, and which of them a question the server asks belongs to. The session owns one
(`ServerSession.askers`); the runner files a call here for as long as it runs
(`ServerSession.running`)."""

import contextvars
from typing import Any, Protocol

from mcp_types import INVALID_REQUEST, ErrorData

from .. import control


class Asker(Protocol):
    """What the session needs of a running call to ask its questions (`runner.Asking`): its
    call's id, who made it (token and client session), whether it is asking now, the
    elicitation ids of its URL questions. `elicit(params, sure=False)` asks a question the
    call may not have asked: in the inbox only, never of its client."""

    call_id: str
    caller: tuple
    elicitation_ids: set[str]

    @property
    def busy(self) -> bool: ...

    async def elicit(self, params: Any, sure: bool = True) -> Any: ...


# The call a task runs, for questions asked from inside its own task: the SDK's 2026-07-28
# driver of a prompt get or resource read asks from there (a tool call's rounds are the
# runner's own); 2025 questions come from the session's receiving task (`_asker_for`).
ASKING: contextvars.ContextVar["Asker | None"] = contextvars.ContextVar("agenvoy_asking", default=None)


class Askers:
    """The calls running on one session that may ask questions, by call id, oldest first."""

    def __init__(self) -> None:
        self.running: dict[str, Asker] = {}

    def filed(self, asker: Asker) -> "Filed":
        """`asker` is a running call of this session until the block ends, and the call the
        questions asked from inside its own task belong to (`ASKING`)."""
        return Filed(self.running, asker)

    async def on_elicit(self, ctx, params):
        """A server's question (2025: `elicitation/create`; 2026-07-28: an elicitation inside
        an `InputRequiredResult` the SDK drives): asked by the call it belongs to."""
        asker = ASKING.get()
        if asker is not None:
            return await asker.elicit(params)
        found = self._asker_for()
        if found is None:
            return ErrorData(code=INVALID_REQUEST, message="no call of this client is running on this server")
        return await found[0].elicit(params, sure=found[1])

    async def completed(self, elicitation_id) -> None:
        """A 2025 server's URL question done out of band: whoever holds the call's MCP request
        tells its client (SPEC 20.4)."""
        asker = next((a for a in self.running.values() if elicitation_id in a.elicitation_ids), None)
        if asker is not None:
            await control.asend_group(
                control.call_group(asker.call_id),
                {"type": "question.complete", "elicitation_id": elicitation_id},
            )

    def _asker_for(self) -> "tuple[Asker, bool] | None":
        """The call a 2025 `elicitation/create` is filed under, and whether it surely asked.
        The server sends it on the call's own request (`related_request_id`: its POST's
        response stream), but the client side of the SDK does not say which one: with one
        call in flight it is that one; with several, the oldest not already waiting for an
        answer (a call asks one question at a time), else the oldest. That guess is sure
        only when every call in flight was made by the same token on the same client session:
        else the question may be another caller's, and goes to the inbox alone (SPEC 20.4)."""
        running = list(self.running.values())
        if not running:
            return None
        asker = next((a for a in running if not a.busy), running[0])
        return asker, len({a.caller for a in running}) == 1


class Filed:
    """`Askers.filed`'s block. A class rather than `@contextlib.contextmanager`: every call
    enters one, and a generator's manager costs the call path five more Python calls a block
    (branch perf-house)."""

    __slots__ = ("running", "asker", "token")

    def __init__(self, running: dict[str, Asker], asker: Asker) -> None:
        self.running, self.asker = running, asker

    def __enter__(self) -> None:
        self.running[self.asker.call_id] = self.asker
        self.token = ASKING.set(self.asker)

    def __exit__(self, *exc: object) -> None:
        ASKING.reset(self.token)
        self.running.pop(self.asker.call_id, None)
