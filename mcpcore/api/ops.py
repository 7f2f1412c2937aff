"""Running the console for months (SPEC 18): `GET /v1/calls/export`, `GET /v1/audit` (22.2,
streamed as the export is) and `GET /metrics`."""

import csv
import io
import ipaddress
import json

from django.conf import settings
from django.db.models import Q
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse

from .. import db, metrics
from ..bearer import authenticate
from ..calls import questions
from ..choices import CALL_ENDED, CallKind, TokenRole, history_kind, stored_kind
from ..models import AuditEntry, ToolCall, iso
from ..schemas import AuditQuery, Contract, ExportQuery, InputError
from .auth import ApiError, api_view, error

# --- export (SPEC 18.2) ------------------------------------------------------------------------

CHUNK = 500  # calls read per trip to the database: what the export holds in memory at once
CSV_COLUMNS = (
    "call_id", "created_at", "server", "tool", "status", "decision", "decided_by", "token",
    "session_id", "duration_ms", "arguments",
)  # fmt: skip
FORMATS = {"jsonl": "application/jsonl; charset=utf-8", "csv": "text/csv; charset=utf-8"}


def _query[M: Contract](model: type[M], params) -> M:
    """A streamed listing's query string; a bad value raises 400 `invalid <parameter>: <value>`."""
    try:
        return model.check({name: params.get(name) for name in params})
    except InputError as exc:
        raise ApiError(exc.message) from None


def _window(field: str, since, until) -> Q:
    where = Q()
    if since is not None:
        where &= Q(**{f"{field}__gte": since})
    if until is not None:
        where &= Q(**{f"{field}__lt": until})
    return where


def _equal(**fields) -> Q:
    """Each field equal to its value, those given (not None or empty) only."""
    return Q(**{name: value for name, value in fields.items() if value})


def _after(rows, field: str, after: tuple | None):
    """The rows after the keyset position `after` ((time, id)), in (time, id) order."""
    if after is not None:
        when, key = after
        # One index range, not an OR of two (which sorts the whole rest of the table).
        rows = rows.filter(**{f"{field}__gte": when}).filter(Q(**{f"{field}__gt": when}) | Q(id__gt=key))
    return rows.order_by(field, "id")


def export_filters(params) -> tuple[Q, str, bool]:
    """The query string of an export (`schemas.ExportQuery`) as (filter, format, with results);
    a bad value raises 400 `invalid <parameter>: <value>`."""
    query = _query(ExportQuery, params)
    where = _window("created_at", query.since, query.until)
    where &= _equal(
        server_name=query.server,
        tool_name=query.tool,
        status=query.status,
        kind=stored_kind(query.kind) if query.kind else None,
    )
    if query.kind and stored_kind(query.kind) != CallKind.TOOL_CONFIRM:
        # The partial index of the kinds other than tool calls, its condition as written there.
        where &= ~Q(kind=CallKind.TOOL_CONFIRM)
    return where, query.format or "jsonl", query.results == "1"


# What a line needs, read as plain values: building model objects cost most of an export.
_COLUMNS = (
    "id", "session_id", "status", "is_error", "confirm_id", "tool_name", "arguments", "mode",
    "decision", "decided_by", "reason", "created_at", "decided_at", "started_at", "ended_at",
    "expires_at", "truncated", "rule", "via", "server_name", "token__name", "kind",
    "requested_arguments", "edited_by", "for_group", "approvals",
)  # fmt: skip
_ENDED = CALL_ENDED


def export_chunk(where: Q, after: tuple | None, fmt: str, results: bool, limit: int = CHUNK) -> tuple:
    """The next `limit` calls matching `where`, oldest first, after the keyset position
    `after` ((created_at, id)), as export text: (bytes, the last call's position, or None
    when this was the last chunk). Sync."""
    rows = _after(ToolCall.objects.filter(where), "created_at", after)
    columns = (*_COLUMNS, "result") if results else _COLUMNS
    chunk = list(rows.values_list(*columns, named=True)[:limit])
    if fmt == "csv":
        text = _csv_text([csv_row(c, results) for c in chunk])
    else:
        asked = questions.of_calls([c.id for c in chunk])  # one query a chunk, not one a call
        text = "".join(jsonl_line(c, results, asked.get(c.id, [])) for c in chunk)
    last = (chunk[-1].created_at, chunk[-1].id) if len(chunk) == limit else None
    return text.encode(), last


def _duration(c) -> float | None:
    if c.started_at and c.ended_at:
        return (c.ended_at - c.started_at).total_seconds()
    return None


def line_body(c, results: bool, asked: list[dict]) -> dict:
    """The body of `GET /v1/mcp/calls/<id>` (`ToolCall.to_dict()` and the call's questions,
    `asked`) of one row of `_COLUMNS` (tests hold the two equal), `result` only when asked."""
    body = {"call_id": str(c.id), "session_id": c.session_id, "status": c.status}
    if c.status in _ENDED:
        if results:
            body["result"] = c.result
        body["is_error"] = c.is_error
        if c.status == "aborted":
            body["abort"] = True
    confirm_id = str(c.confirm_id) if c.confirm_id else None
    body.update(
        {
            "confirm_id": confirm_id,
            "tool": c.tool_name,
            "arguments": c.arguments,
            "mode": c.mode,
            "decision": c.decision,
            "decided_by": c.decided_by,
            "reason": c.reason,
            "created_at": iso(c.created_at),
            "decided_at": iso(c.decided_at),
            "started_at": iso(c.started_at),
            "ended_at": iso(c.ended_at),
            "expires_at": iso(c.expires_at),
            "duration": _duration(c),
            "truncated": c.truncated,
            "rule": c.rule,
            "via": c.via,
            "kind": history_kind(c.kind),
            "requested_arguments": c.requested_arguments,
            "edited_by": c.edited_by,
            "for": c.for_group or None,
            "approvals": c.approvals,
        }
    )
    if c.kind == CallKind.RESOURCE:
        # As `ToolCall.uri`: the whole URI (tool_name holds it cut to 700 characters).
        uri = c.arguments.get("uri") if isinstance(c.arguments, dict) else None
        body["uri"] = uri if isinstance(uri, str) else c.tool_name
    body["questions"] = asked
    return body


def jsonl_line(c, results: bool, asked: list[dict]) -> str:
    return json.dumps(line_body(c, results, asked), ensure_ascii=False, separators=(",", ":")) + "\n"


def csv_row(c, results: bool) -> list:
    duration = _duration(c)
    row = [
        str(c.id),
        iso(c.created_at),
        c.server_name,
        c.tool_name,
        c.status,
        c.decision,
        c.decided_by,
        c.token__name or "",
        c.session_id,
        "" if duration is None else round(duration * 1000, 3),
        json.dumps(c.arguments, ensure_ascii=False, separators=(",", ":")),
    ]
    if results:
        row.append(c.result if c.status in _ENDED else "")
    return row


def _csv_text(rows: list[list]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\r\n").writerows(rows)
    return out.getvalue()


async def _stream(header: list[str] | None, chunk, *args):
    """A streamed listing, chunk by chunk: `header` (CSV's first row), then `chunk(*args,
    after)` (sync: (bytes, the next keyset position or None)), one database trip per chunk,
    nothing kept."""
    if header is not None:
        yield _csv_text([header]).encode()
    after = None
    while True:
        text, after = await db.run(chunk, *args, after)
        if text:
            yield text
        if after is None:
            return


def _streamed(body, fmt: str, name: str) -> StreamingHttpResponse:
    response = StreamingHttpResponse(body, content_type=FORMATS[fmt])
    response["Content-Disposition"] = f'attachment; filename="agenvoy-{name}.{fmt}"'
    response["Cache-Control"] = "no-store"
    return response


@api_view(("GET",))
async def calls_export(request: HttpRequest) -> StreamingHttpResponse:
    where, fmt, results = export_filters(request.GET)
    header = [*CSV_COLUMNS, *(["result"] if results else [])] if fmt == "csv" else None
    chunk = lambda after: export_chunk(where, after, fmt, results)  # noqa: E731
    return _streamed(_stream(header, chunk), fmt, "calls")


# --- the audit trail (SPEC 22.2) -------------------------------------------------------------------

AUDIT_COLUMNS = ("id", "at", "actor", "address", "action", "object", "before", "after")


def audit_filters(params) -> tuple[Q, str]:
    """The query string of `GET /v1/audit` (`schemas.AuditQuery`) as (filter, format)."""
    query = _query(AuditQuery, params)
    where = _window("at", query.since, query.until) & _equal(action=query.action, actor=query.actor)
    return where, query.format or "jsonl"


def _compact(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def audit_csv_row(e: AuditEntry) -> list:
    return [e.pk, iso(e.at), e.actor, e.address, e.action, e.object, _compact(e.before), _compact(e.after)]


def audit_chunk(where: Q, fmt: str, after: tuple | None, limit: int = CHUNK) -> tuple:
    """The next `limit` audit rows matching `where`, oldest first, after `after` ((at, id)),
    as text: (bytes, the last row's position, or None when this was the last chunk). Sync."""
    chunk = list(_after(AuditEntry.objects.filter(where), "at", after)[:limit])
    if fmt == "csv":
        text = _csv_text([audit_csv_row(e) for e in chunk])
    else:
        text = "".join(_compact(e.to_dict()) + "\n" for e in chunk)
    last = (chunk[-1].at, chunk[-1].id) if len(chunk) == limit else None
    return text.encode(), last


@api_view(("GET",))
async def audit_export(request: HttpRequest) -> StreamingHttpResponse:
    where, fmt = audit_filters(request.GET)
    header = list(AUDIT_COLUMNS) if fmt == "csv" else None
    return _streamed(_stream(header, audit_chunk, where, fmt), fmt, "audit")


# --- metrics (SPEC 18.3) -----------------------------------------------------------------------


def address_allowed(address: str | None, networks=None) -> bool:
    """Whether a client address lies inside AGENVOY_METRICS_ALLOW."""
    networks = settings.AGENVOY_METRICS_ALLOW if networks is None else networks
    if not address or not networks:
        return False
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip.version == n.version and ip in n for n in networks)


def metrics_view(request: HttpRequest) -> HttpResponse:
    """`GET /metrics`: for an admin token, or any client inside AGENVOY_METRICS_ALLOW; else
    401/403 as `/v1` answers them."""
    if request.method not in ("GET", "HEAD"):
        refused = error("method not allowed", 405)
        refused["Allow"] = "GET, HEAD"
        return refused
    if not address_allowed(request.META.get("REMOTE_ADDR")):
        token = authenticate(request.headers.get("Authorization", ""))
        if token is None:
            return error("authentication required", 401)
        if token.role != TokenRole.ADMIN:
            return error("this token may not read metrics", 403)
    response = HttpResponse(metrics.render(), content_type=metrics.CONTENT_TYPE)
    response["Cache-Control"] = "no-store"
    return response
