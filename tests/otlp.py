"""A real OTLP/HTTP trace receiver for tests (SPEC 27): an HTTP server on a free loopback port
taking `POST /v1/traces` (`ExportTraceServiceRequest`, protobuf, decoded with
`opentelemetry-proto`), keeping every exported byte and every span it decoded.

    with Receiver() as otlp:
        console = consoles(servers, **otlp.env())       # the console exports here
        ...
        spans = otlp.trace_of(call_id)                  # every span of the call's trace
"""

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.live import free_port


@dataclass
class Span:
    """One received span, its ids as hex as W3C `traceparent` spells them."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: int
    attributes: dict
    status: int  # 0 unset, 1 ok, 2 error
    start: int
    end: int
    resource: dict = field(default_factory=dict)


def _value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


class Receiver:
    """The receiver, started on entering and stopped on leaving."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.bodies: list[bytes] = []
        self.spans: list[Span] = []
        self.changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                status = 200 if self.path == "/v1/traces" else 404
                if status == 200:
                    receiver._take(body, dict(self.headers))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args) -> None:
                pass

        self.headers_seen: list[dict] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "Receiver":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def env(self, **more: str) -> dict:
        """The standard variables that send a console's traces here, with a short batch delay so
        tests do not wait the default 5 s."""
        return {"OTEL_EXPORTER_OTLP_ENDPOINT": self.url, "OTEL_BSP_SCHEDULE_DELAY": "50", **more}

    def _take(self, body: bytes, headers: dict) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        got = []
        for rs in request.resource_spans:
            resource = {a.key: _value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    got.append(
                        Span(
                            name=s.name,
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_id=s.parent_span_id.hex(),
                            kind=s.kind,
                            attributes={a.key: _value(a.value) for a in s.attributes},
                            status=s.status.code,
                            start=s.start_time_unix_nano,
                            end=s.end_time_unix_nano,
                            resource=resource,
                        )
                    )
        with self.changed:
            self.bodies.append(body)
            self.headers_seen.append(headers)
            self.spans.extend(got)
            self.changed.notify_all()

    def wait_for(self, predicate, timeout: float = 15, what: str = "spans"):
        """The first truthy `predicate(spans)` as spans arrive, within `timeout` seconds."""
        with self.changed:
            found = self.changed.wait_for(lambda: predicate(list(self.spans)), timeout)
            assert found, f"{what} not received in {timeout}s; got {[s.name for s in self.spans]}"
            return found

    def trace_of(self, call_id: str, names: set[str], timeout: float = 15) -> dict[str, Span]:
        """Spans by name of the trace whose span carries `agenvoy.call_id` = `call_id`, once
        every name in `names` has arrived."""

        def complete(spans):
            door = [s for s in spans if s.attributes.get("agenvoy.call_id") == call_id]
            if not door:
                return None
            mine = {s.name: s for s in spans if s.trace_id == door[0].trace_id}
            return mine if names <= set(mine) else None

        return self.wait_for(complete, timeout, f"spans {sorted(names)} of call {call_id}")

    def everything(self) -> bytes:
        with self.changed:
            return b"".join(self.bodies)


def tree(spans: list[Span]) -> list[tuple[int, Span]]:
    """The spans of one trace as (depth, span), each parent before its children, in start order."""
    ids = {s.span_id for s in spans}
    children: dict[str, list[Span]] = {}
    for s in sorted(spans, key=lambda s: s.start):
        children.setdefault(s.parent_id if s.parent_id in ids else "", []).append(s)
    out: list[tuple[int, Span]] = []

    def walk(parent: str, depth: int) -> None:
        for s in children.get(parent, []):
            out.append((depth, s))
            walk(s.span_id, depth + 1)

    walk("", 0)
    return out


SHOWN = ("agenvoy.decision", "agenvoy.rule", "agenvoy.decided_by", "gen_ai.tool.name", "mcp.method.name")


def svg(spans: list[Span], title: str) -> str:
    """A waterfall picture of one trace as received (names, times and the console's
    attributes), the way a trace viewer shows it."""
    from html import escape

    rows = tree(spans)
    t0 = min(s.start for s in spans)
    total = max(s.end for s in spans) - t0 or 1
    label_w, bar_w, row_h, top = 390, 520, 34, 48
    height = top + row_h * len(rows) + 16
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + bar_w + 20}" height="{height}" '
        'font-family="sans-serif" font-size="12">',
        f'<rect width="100%" height="100%" fill="#fff"/><text x="10" y="22" font-size="14" '
        f'font-weight="bold">{escape(title)}</text>',
        f'<text x="10" y="40" fill="#555">trace {spans[0].trace_id} - {total / 1e6:.0f} ms</text>',
    ]
    colours = {0: "#4e79a7", 1: "#f28e2b", 2: "#59a14f"}
    for i, (depth, s) in enumerate(rows):
        y = top + i * row_h
        x = label_w + (s.start - t0) / total * bar_w
        w = max((s.end - s.start) / total * bar_w, 2)
        shown = ", ".join(f"{k}={s.attributes[k]}" for k in SHOWN if k in s.attributes)
        colour = "#e15759" if s.status == 2 else colours.get(depth, "#76b7b2")
        out += [
            f'<text x="{10 + depth * 16}" y="{y + 14}">{escape(s.name)}</text>',
            f'<text x="{10 + depth * 16}" y="{y + 27}" fill="#666" font-size="10">{escape(shown)}</text>',
            f'<rect x="{x:.1f}" y="{y + 4}" width="{w:.1f}" height="14" fill="{colour}"/>',
            f'<text x="{min(x + w + 4, label_w + bar_w - 60):.1f}" y="{y + 15}" fill="#333" font-size="10">'
            f"{(s.end - s.start) / 1e6:.1f} ms</text>",
        ]
    out.append("</svg>")
    return "\n".join(out) + "\n"
