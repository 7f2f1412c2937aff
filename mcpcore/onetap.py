"""One-tap action tokens (SPEC 17.2): the `/a/<token>` links on a phone's notification that
approve or deny one confirmation. Pure functions: no database, no HTTP.

A token names one confirmation, one decision and one notification target, and carries an
HMAC-SHA256 over the three, keyed by a key derived from the console's secret key:

    <confirm id, 32 hex digits><a|d><target id>.<first 20 bytes of the HMAC, base64url>

So only the console can make one, nothing needs storing, and a link for one confirmation,
decision or target is no good for another. Whether it still decides anything (the confirmation
is pending, the target still there) is the caller's question, asked of the database.
"""

import base64
import hashlib
import hmac
import uuid
from dataclasses import dataclass

APPROVE, DENY = "approve", "deny"
_CODE = {APPROVE: "a", DENY: "d"}
_DECISION = {v: k for k, v in _CODE.items()}
MAC_BYTES = 20  # 160 bits of the HMAC: SPEC 17.2 asks for at least 128
_KEY_SALT = b"agenvoy one-tap action token v1"


@dataclass(frozen=True)
class Action:
    """What a valid token says: approve or deny this confirmation, on behalf of this target."""

    confirm_id: uuid.UUID
    decision: str
    target_id: int


def _key(secret_key: str) -> bytes:
    # A key of its own, so a one-tap MAC is never a valid signature of anything else Django
    # signs with the same secret.
    return hmac.new(secret_key.encode(), _KEY_SALT, hashlib.sha256).digest()


def _mac(secret_key: str, body: str) -> bytes:
    return hmac.new(_key(secret_key), body.encode(), hashlib.sha256).digest()[:MAC_BYTES]


def _encode(mac: bytes) -> bytes:
    return base64.urlsafe_b64encode(mac).rstrip(b"=")


def make(secret_key: str, confirm_id: uuid.UUID | str, decision: str, target_id: int) -> str:
    """The action token for one confirmation, decision and target."""
    body = f"{uuid.UUID(str(confirm_id)).hex}{_CODE[decision]}{int(target_id)}"
    return f"{body}.{_encode(_mac(secret_key, body)).decode()}"


def read(secret_key: str, token: str) -> Action | None:
    """The action a token carries, or None for any token the console did not make (altered,
    guessed, cut short, made with another secret)."""
    body, dot, mac = token.partition(".")
    if not dot or len(body) < 34 or len(body) > 60 or len(mac) > 40:
        return None
    hex_id, code, target = body[:32], body[32], body[33:]
    if code not in _DECISION or not target.isdigit() or not target.isascii():
        return None
    try:
        confirm_id = uuid.UUID(hex=hex_id)
    except ValueError:
        return None
    # Compared as text: decoding would let an altered spelling of the same bytes through.
    if confirm_id.hex != hex_id or not hmac.compare_digest(mac.encode(), _encode(_mac(secret_key, body))):
        return None
    return Action(confirm_id, _DECISION[code], int(target))


def url(base: str, secret_key: str, confirm_id, decision: str, target_id: int) -> str:
    """`<AGENVOY_PUBLIC_URL>/a/<action token>`."""
    return f"{base}/a/{make(secret_key, confirm_id, decision, target_id)}"
