"""A server's question relayed to the MCP client whose call it is (SPEC 20.4).

The supervisor records each question a server asks during a call (`questions.ask`); one the
calling client declared it can answer (`ToolCall.client_asks`, recorded by the door at the
call's creation: `asks_of`) is `asked`, and the door holding that call's request relays it:

- to a 2025 client as `elicitation/create` on the request's own stream; its answer goes to
  `questions.relayed`, and the call is held on;
- to a 2026-07-28 client as an `InputRequiredResult` of the console's own: the request ends
  there, with a `requestState` the console signs (`sign`) and binds to the call, the question,
  the token and 10 minutes. The client's retry of the same `tools/call` carries its answer in
  `inputResponses` with that `requestState`; the door checks it (`verify`: a tampered, expired
  or foreign one is a JSON-RPC error and nothing goes upstream), gives the answer to
  `questions.relayed`, and holds the call again.

The signature is an HMAC-SHA256 keyed by a key derived from the console's secret key (as
`onetap` does), over `<call hex>.<question hex>.<token id>.<expiry>`:

    <call hex>.<question hex>.<token id>.<expiry, unix seconds>.<first 20 bytes of the HMAC, base64url>
"""

import base64
import hashlib
import hmac
import time
import uuid
from dataclasses import dataclass

from django.conf import settings

LIFETIME = 600  # seconds a `requestState` of the console is good for (SPEC 20.4)
MAC_BYTES = 20
_KEY_SALT = b"agenvoy requestState v1"


@dataclass(frozen=True)
class State:
    """What a valid `requestState` of the console says: the question of this call, asked of
    the client holding this token."""

    call_id: uuid.UUID
    question_id: uuid.UUID
    token_id: int


class StateError(Exception):
    """A `requestState` the console refuses; the message is the JSON-RPC error's."""


def _key() -> bytes:
    # A key of its own, so this MAC is never a valid signature of anything else signed with
    # the same secret (one-tap links, Django's own signing).
    return hmac.new(settings.SECRET_KEY.encode(), _KEY_SALT, hashlib.sha256).digest()


def _mac(body: str) -> str:
    mac = hmac.new(_key(), body.encode(), hashlib.sha256).digest()[:MAC_BYTES]
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def sign(call_id, question_id, token_id: int, now: float | None = None) -> str:
    """The `requestState` for one question of one call, asked of one token's client."""
    expires = int((time.time() if now is None else now) + LIFETIME)
    body = f"{uuid.UUID(str(call_id)).hex}.{uuid.UUID(str(question_id)).hex}.{int(token_id)}.{expires}"
    return f"{body}.{_mac(body)}"


def verify(state: str, token_id: int, now: float | None = None) -> State:
    """The state a `requestState` of the console carries for this token; StateError for one
    the console did not make (altered, cut short, made with another secret), one past its 10
    minutes, or one made for another token's client."""
    parts = state.split(".") if isinstance(state, str) and len(state) < 200 else []
    if len(parts) != 5:
        raise StateError("invalid requestState")
    call_hex, question_hex, token, expires, mac = parts
    body = ".".join(parts[:4])
    # Compared as text: decoding would let an altered spelling of the same bytes through.
    if not hmac.compare_digest(mac.encode(), _mac(body).encode()):
        raise StateError("invalid requestState")
    if not (token.isdigit() and expires.isdigit()):
        raise StateError("invalid requestState")
    if int(token) != int(token_id):
        raise StateError("this requestState was issued to another client")
    if int(expires) <= (time.time() if now is None else now):
        raise StateError("requestState expired: the question is no longer open to this request")
    try:
        return State(uuid.UUID(hex=call_hex), uuid.UUID(hex=question_hex), int(token))
    except ValueError:
        raise StateError("invalid requestState") from None


def asks_of(capabilities) -> str:
    """`ToolCall.client_asks` from the client's declared capabilities (2025: the session's;
    2026-07-28: the request's `_meta`): "form", "url", "form,url" or "". An `elicitation: {}`
    with neither mode named means form only (the 2025-06-18 shape Claude Code sends)."""
    elicitation = getattr(capabilities, "elicitation", None) if capabilities is not None else None
    if elicitation is None:
        return ""
    modes = []
    if elicitation.form is not None or elicitation.url is None:
        modes.append("form")
    if elicitation.url is not None:
        modes.append("url")
    return ",".join(modes)


def request_of(question) -> dict:
    """The `elicitation/create` params of a question, as the client gets them."""
    if question.mode == "url":
        return {"mode": "url", "message": question.message, "url": question.url}
    return {"mode": "form", "message": question.message, "requestedSchema": question.schema or {}}
