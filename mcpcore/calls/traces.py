"""Traces (SPEC 27): OpenTelemetry spans of a call, exported over OTLP/HTTP when an endpoint is
configured, and nothing at all otherwise.

`setup()` (the process wiring, once) turns export on when `OTEL_EXPORTER_OTLP_ENDPOINT` or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set; everything else (headers, sampler, batch delays,
resource) the SDK reads from the standard `OTEL_*` variables itself. It installs the global
tracer provider, so the `mcp` SDK's own client spans (the upstream request, whose context it
puts in `_meta.traceparent`) are exported beside the console's.

What a call's trace holds, and who makes it:

    <door> server span           server_span(): POST /v1/mcp/call, tools/call, prompts/get,
      |                          resources/read, continuing the caller's traceparent;
      |                          attributes from the call (called), error status (ended)
      +- gate                    gate(): in calls.create / create_read, what the gate decided
      +- confirmation            confirmation(): in calls.respond, the time a person took
      +- MCP send tools/call     the SDK's, in the supervisor running the call, under the
                                 context the call's row carries (continued)

The door's context travels with the call as its row's `traceparent`, so the supervisor that
runs it (this process or a worker) and the process where a person decides continue the same
trace. Arguments, results and secrets are never attributes. With export off every function
here returns at its first line: a call pays a flag test or two.
"""

import contextlib
import datetime
import os
import time
from collections.abc import Iterator, Mapping

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.propagate import extract, inject
from opentelemetry.trace import Span, SpanKind, StatusCode

from ..choices import CallKind, CallStatus
from ..gate import Decision
from ..models import ToolCall

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
SERVICE_NAME = "agenvoy-console"
# A call that ends so is an error in its trace (SPEC 27).
FAILED = frozenset({CallStatus.ERROR, CallStatus.INTERRUPTED, CallStatus.SKIPPED})

# Whether this process exports traces; set once by `setup`, read by every function here.
ON = False
_provider = None
_tracer = trace.get_tracer("agenvoy-console")
_NOTHING = contextlib.nullcontext()


def setup() -> bool:
    """Export traces when an OTLP endpoint is configured (SPEC 27); whether they are. Called
    once per process by the process wiring; again, it changes nothing."""
    global ON, _provider
    if _provider is not None or not any(os.environ.get(name) for name in ENDPOINT_VARIABLES):
        return ON
    # Imported here: a console that does not trace never loads the SDK and its exporter.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        # The SDK's default when neither OTEL_SERVICE_NAME nor OTEL_RESOURCE_ATTRIBUTES names one.
        resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
    # The sampler (OTEL_TRACES_SAMPLER), the exporter's endpoint, headers and timeout, and the
    # batch's delays all come from their standard variables; the provider flushes at exit.
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _provider, ON = provider, True
    return ON


def shutdown() -> None:
    """Export what is still batched (the process is stopping)."""
    if _provider is not None:
        _provider.shutdown()


def _parent(carriers: tuple[Mapping | None, ...]) -> otel_context.Context | None:
    """The caller's context from the first carrier (`_meta`, HTTP headers) holding a valid
    W3C `traceparent`; None: the current context (a new trace when there is none)."""
    for carrier in carriers:
        if not carrier:
            continue
        try:
            found = extract(carrier)
        except (TypeError, ValueError):
            continue
        if trace.get_current_span(found).get_span_context().is_valid:
            return found
    return None


@contextlib.contextmanager
def _server_span(name: str, method: str, carriers: tuple[Mapping | None, ...]) -> Iterator[None]:
    with _tracer.start_as_current_span(
        name,
        context=_parent(carriers),
        kind=SpanKind.SERVER,
        attributes={"mcp.method.name": method},
        # An exception's text may quote the request: the status says error, nothing more.
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield
        except BaseException:
            span.set_status(StatusCode.ERROR)
            raise


def server_span(
    name: str, method: str, *carriers: Mapping | None
) -> "contextlib.AbstractContextManager[None]":
    """The door's span of one request (named `name`), current while the request is handled:
    it continues the trace of the first carrier with a valid `traceparent` (an MCP request's
    `_meta`, then the HTTP headers)."""
    if not ON:
        return _NOTHING
    return _server_span(name, method, carriers)


def current() -> str:
    """The W3C `traceparent` of the current span, for the call's row; "" when not tracing."""
    if not ON:
        return ""
    carrier: dict[str, str] = {}
    inject(carrier)
    return carrier.get("traceparent", "")


def called(call: ToolCall) -> None:
    """The current (door's) span learns which call it is (SPEC 27's attributes, never the
    call's arguments: a resource read's URI is one, so it has no `gen_ai.tool.name`)."""
    if not ON:
        return
    span = trace.get_current_span()
    if not span.is_recording():
        return
    attributes = {
        "agenvoy.server": call.server_name,
        "agenvoy.call_id": str(call.id),
        "agenvoy.token": call.requested_by,
    }
    if call.kind != CallKind.RESOURCE:
        attributes["gen_ai.tool.name"] = call.tool_name
    span.set_attributes(attributes)


def ended(call: ToolCall) -> None:
    """The current (door's) span is an error when its call ended `error`, `interrupted` or
    `skipped`."""
    if ON and call.status in FAILED:
        trace.get_current_span().set_status(StatusCode.ERROR, call.status)


def clock() -> int:
    """Now, as span times are given (ns since the epoch); 0 when not tracing."""
    return time.time_ns() if ON else 0


def _child(name: str, traceparent: str, start: int, attributes: dict) -> Span | None:
    parent = _parent(({"traceparent": traceparent},)) if ON and traceparent else None
    if parent is None:
        return None
    return _tracer.start_span(name, context=parent, start_time=start, attributes=attributes)


def gate(traceparent: str, started: int, decision: Decision) -> None:
    """The `gate` span under the door's (`traceparent`): from `started` (`clock()`) to now,
    what the gate decided before any person, in the call record's words, and the rule's line
    when a rule decided."""
    if not (ON and traceparent):
        return
    attributes = {"agenvoy.decision": decision.reason}
    if decision.rule:
        attributes["agenvoy.rule"] = decision.rule
    span = _child("gate", traceparent, started, attributes)
    if span is not None:
        span.end()


def _ns(moment: datetime.datetime) -> int:
    return int(moment.timestamp() * 1_000_000_000)


def confirmation(call: ToolCall) -> None:
    """The `confirmation` span of a call a person decided: from the call's creation to the
    decision, under the door's span in the call's row, in whichever process decided."""
    if not (ON and call.traceparent and call.decided_at):
        return
    attributes = {"agenvoy.decided_by": call.decided_by, "agenvoy.call_id": str(call.id)}
    span = _child("confirmation", call.traceparent, _ns(call.created_at), attributes)
    if span is not None:
        span.end(end_time=_ns(call.decided_at))


@contextlib.contextmanager
def _attached(traceparent: str) -> Iterator[None]:
    parent = _parent(({"traceparent": traceparent},))
    token = otel_context.attach(parent) if parent is not None else None
    try:
        yield
    finally:
        if token is not None:
            otel_context.detach(token)


def continued(traceparent: str) -> "contextlib.AbstractContextManager[None]":
    """The context of the call's door (its row's `traceparent`) made current, so the spans
    of running it (the SDK's client span) belong to the call's trace."""
    if not (ON and traceparent):
        return _NOTHING
    return _attached(traceparent)
