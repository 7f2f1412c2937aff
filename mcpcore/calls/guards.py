"""Guard rails (SPEC 25): the rules file's `limit` lines, counted per token and line (25.1), and
an identical call repeated past AGENVOY_REPEAT_LIMIT, held for a person (25.2).

Both are counted by PyPI `limits` with its moving-window strategy, never by a counter of our
own: in Redis when REDIS_URL is set (so every process shares the counts), else in this process.
A count is keyed by the token's hash (not its row id: ids come back after a database is
emptied, a Redis count would not) and by a digest of the limit's line, or of the call's tool
and canonical arguments for a repeat. A call refused by the limiter is not counted by it (the
library's semantics): a token held back can use the window again once it slides.
"""

import functools
import hashlib
import json
import math
import threading
import time

from django.conf import settings
from limits import RateLimitItem, RateLimitItemPerDay, RateLimitItemPerHour, RateLimitItemPerMinute
from limits import RateLimitItemPerSecond as PerSecond
from limits.storage import MemoryStorage, RedisStorage
from limits.strategies import MovingWindowRateLimiter

from .. import rules
from ..models import ApiToken, ToolCall

_ITEMS: dict[str, type[RateLimitItem]] = {
    "s": PerSecond,
    "m": RateLimitItemPerMinute,
    "h": RateLimitItemPerHour,
    "d": RateLimitItemPerDay,
}
_REPEAT = "repeat"
_state: dict = {"limiter": None}
# `limits`' own expiry pass of its memory storage (the one private name used here; tests/test_guards.py
# checks it is there, so an upgrade that renames it fails a test instead of leaking). Why private:
# `limits` 5.8 has no public way to sweep expired entries without its thread-per-idle-period
# timer (no issue filed in alisaifee/limits yet; the missing API is a storage option for the
# expiry interval, or a public `expire()`).
_EXPIRE = "_MemoryStorage__expire_events"
SWEEP_SECONDS = 1.0


class _MemoryStorage(MemoryStorage):
    """`limits`' memory storage with one long-lived thread running its expiry pass every second.
    The library starts a new 10 ms timer thread from the first hit after the last one ended,
    and a thread start on the database thread waits for the GIL: with calls a few ms apart
    that was nearly every call, ~1.5 ms of serve's p50 (bench/guards.py). Its scheduler only
    asks whether `timer` is alive, so a live sweeper there means no thread per call."""

    def __init__(self) -> None:
        super().__init__()
        self.timer.cancel()
        self.timer = threading.Thread(target=self._sweep, name="limits-expiry", daemon=True)  # type: ignore[assignment]
        self.timer.start()

    def _sweep(self) -> None:
        expire = getattr(self, _EXPIRE)
        while True:
            time.sleep(SWEEP_SECONDS)
            expire()


def limiter() -> MovingWindowRateLimiter:
    """This process's limiter, made on first use."""
    made = _state["limiter"]
    if made is None:
        storage = RedisStorage(settings.REDIS_URL) if settings.REDIS_URL else _MemoryStorage()
        made = _state["limiter"] = MovingWindowRateLimiter(storage)
    return made


@functools.lru_cache(maxsize=1024)
def _item(text: str) -> RateLimitItem:
    """The `limits` item of a rate `<n>/<unit>` or `<n>/<k><unit>` (already checked)."""
    n, k, unit = rules.rate(text, multiples=True)  # type: ignore[misc]
    return _ITEMS[unit](n, k)


@functools.lru_cache(maxsize=4096)
def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _who(token: ApiToken) -> str:
    return token.token_hash[:32]


def limited(token: ApiToken | None, lines: list[rules.Rule]) -> tuple[str, int] | None:
    """Count a call of `token` under every limit line that matches it (`lines`, from
    `RuleSet.limits`); the first line it goes over, with whole seconds until one more call
    fits (rounded up), or None. The console's own calls (no token) have no count."""
    if token is None or not lines:
        return None
    strategy, who = limiter(), _who(token)
    over = None
    for rule in lines:
        item, key = _item(rule.limit), _digest(rule.text)
        if not strategy.hit(item, who, key) and over is None:
            over = (rule.text, _retry_after(strategy, item, who, key))
    return over


def _retry_after(strategy: MovingWindowRateLimiter, item: RateLimitItem, *ids: str) -> int:
    """Whole seconds until the oldest call in the window leaves it, at least 1."""
    reset_at = strategy.get_window_stats(item, *ids).reset_time
    return max(1, math.ceil(reset_at - time.time()))


def _call_key(tool_name: str, arguments: dict) -> str:
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return _digest(f"{tool_name}\n{canonical}")


def repeated(token: ApiToken | None, tool_name: str, arguments: dict) -> int:
    """Count an identical call (same tool and arguments) of `token`; `n` when it already made
    it `n` times within AGENVOY_REPEAT_LIMIT's window (this one is then held), else 0."""
    if token is None or not settings.AGENVOY_REPEAT_LIMIT:
        return 0
    item = _item(settings.AGENVOY_REPEAT_LIMIT)
    if limiter().hit(item, _REPEAT, _who(token), _call_key(tool_name, arguments)):
        return 0
    return item.amount


def forget_repeats(call: ToolCall) -> None:
    """A person approved a call held as a repeat: that call's count starts again (SPEC 25.2)."""
    token = call.token
    if token is None or not settings.AGENVOY_REPEAT_LIMIT:
        return
    item = _item(settings.AGENVOY_REPEAT_LIMIT)
    limiter().clear(item, _REPEAT, _who(token), _call_key(call.tool_name, call.arguments))
