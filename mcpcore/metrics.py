"""Prometheus metrics (SPEC 18.3): what this process did, and gauges read from the database.

Counters and histograms live in a registry of this module's own (not prometheus-client's
global one), so a test or a second console in one interpreter starts from what it sees. They
count what this process did: a call is counted once, when it ends, by the process whose write
ended it, and only once that write is committed (`db.on_commit`: a write job may run twice).
The gauges are read from the database at each scrape (`render`), so every process answers the
same; `agenvoy_mcp_sessions` is the exception: MCP sessions live in the web process that holds
them, so it is this process's count (sum it over processes).
"""

import datetime
import logging
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import GaugeMetricFamily

from .choices import CallStatus, ServerState
from .models import Server, ToolCall

log = logging.getLogger("mcpcore.metrics")
# The series are exactly those of SPEC 18.3: no `_created` companions.
disable_created_metrics()

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OUTCOMES = ("approved", "denied", "expired", "cancelled")
# Upstream calls take milliseconds to minutes (AGENVOY_CALL_MAX_SECONDS 600); people, seconds
# to the confirm timeout (300 by default).
CALL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
WAIT_BUCKETS = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600)

registry = CollectorRegistry(auto_describe=True)
tool_calls = Counter(
    "agenvoy_tool_calls",
    "Tool calls that ended, by server, final status and decision.",
    ("server", "status", "decision"),
    registry=registry,
)
tool_call_seconds = Histogram(
    "agenvoy_tool_call_seconds",
    "Upstream time of the calls that ran, by server.",
    ("server",),
    buckets=CALL_BUCKETS,
    registry=registry,
)
confirmation_wait = Histogram(
    "agenvoy_confirmation_wait_seconds",
    "From pending to decided, for confirmations a person decided.",
    buckets=WAIT_BUCKETS,
    registry=registry,
)
confirmations = Counter(
    "agenvoy_confirmations",
    "Confirmations that ended, by outcome.",
    ("outcome",),
    registry=registry,
)
deliveries = Counter(
    "agenvoy_notification_deliveries",
    "Notification delivery attempts, by target kind and outcome.",
    ("kind", "outcome"),
    registry=registry,
)
# Guard rails (SPEC 25): calls a limit line refused, calls held as a repeat.
rate_limited = Counter(
    "agenvoy_rate_limited",
    "Calls refused by a limit line of the rules, by server and tool.",
    ("server", "tool"),
    registry=registry,
)
repeats_held = Counter(
    "agenvoy_repeats_held",
    "Identical calls held for a person past AGENVOY_REPEAT_LIMIT, by server and tool.",
    ("server", "tool"),
    registry=registry,
)
for _outcome in OUTCOMES:
    confirmations.labels(_outcome)  # every outcome is a series from the start, at 0


def _when(value) -> datetime.datetime | None:
    """A datetime from the ORM, or the text a raw SQLite cursor gives for one (UTC)."""
    if value is None or isinstance(value, datetime.datetime):
        return value
    parsed = datetime.datetime.fromisoformat(str(value))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)


def _seconds(start, end) -> float | None:
    start, end = _when(start), _when(end)
    if start is None or end is None:
        return None
    return max((end - start).total_seconds(), 0.0)


def call_ended(server: str, status: str, decision: str, started_at=None, ended_at=None) -> None:
    """One call ended (count it once). Its upstream time is observed when it ran."""
    tool_calls.labels(server, status, decision).inc()
    took = _seconds(started_at, ended_at)
    if took is not None:
        tool_call_seconds.labels(server).observe(took)


def confirmation_ended(outcome: str, created_at=None, decided_at=None) -> None:
    """A confirmation ended: `approved` and `denied` (a person's or a one-tap decision) also
    observe how long it waited; `expired` and `cancelled` do not."""
    confirmations.labels(outcome).inc()
    if outcome in ("approved", "denied"):
        waited = _seconds(created_at, decided_at)
        if waited is not None:
            confirmation_wait.observe(waited)


def delivery_attempted(kind: str, status: str) -> None:
    """A delivery attempt's outcome from the row's new status: `sent`, `retried`, `failed`."""
    outcome = {"sent": "sent", "failed": "failed"}.get(status, "retried")
    deliveries.labels(kind, outcome).inc()


# --- the scrape --------------------------------------------------------------------------------


class _Gauges:
    """The gauges, read at scrape time by `read()` (sync database work)."""

    def __init__(self, read: Callable[[], dict], sessions: Callable[[], int]) -> None:
        self._read = read
        self._sessions = sessions

    def describe(self):
        return []  # collected only at scrape time: nothing to read at registration

    def collect(self):
        values = self._read()
        yield GaugeMetricFamily(
            "agenvoy_pending_confirmations", "Confirmations waiting for a person.", value=values["pending"]
        )
        up = GaugeMetricFamily(
            "agenvoy_server_up", "1 when the server is connected, else 0.", labels=["server"]
        )
        for name, connected in values["servers"]:
            up.add_metric([name], 1 if connected else 0)
        yield up
        yield GaugeMetricFamily(
            "agenvoy_mcp_sessions",
            "Open sessions on the MCP endpoints (this process).",
            value=self._sessions(),
        )


def database_gauges() -> dict:
    """What the gauges show, from the database. Sync."""
    return {
        "pending": ToolCall.objects.filter(status=CallStatus.PENDING).count(),
        "servers": [
            (n, s == ServerState.CONNECTED)
            for n, s in Server.objects.order_by("name").values_list("name", "state")
        ],
    }


_sessions: list[Callable[[], int]] = [lambda: 0]


def count_sessions_with(count: Callable[[], int]) -> None:
    """Called by the process wiring (`runtime`) with its MCP endpoint's count of open sessions,
    the one gauge the database can't answer."""
    _sessions[0] = count


def render() -> bytes:
    """The exposition text: this process's counters and the gauges as of now. Sync."""
    scrape = CollectorRegistry(auto_describe=False)
    scrape.register(_Registry(registry))
    scrape.register(_Gauges(database_gauges, _sessions[0]))
    return generate_latest(scrape)


class _Registry:
    """The module's registry as one collector of a scrape's registry."""

    def __init__(self, inner: CollectorRegistry) -> None:
        self._inner = inner

    def collect(self):
        return self._inner.collect()
