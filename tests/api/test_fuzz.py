"""Fuzzing (issue 7, "Fuzzing").

1. schemathesis against `/v1/openapi.json` of a live console, with a valid token and with none:
   no 5xx, and every error answer is exactly `{"error": "<string>"}`.
2. Bodies no schema describes (invalid JSON, lone surrogates, NaN, deep nesting, oversized, any
   method on any path), fixed cases plus a hypothesis fuzzer: the same two rules.
3. Pure hypothesis properties (no server): the allow-list, names and the result cap.

Safety: the fuzzer may add servers with arbitrary commands to the live console. Its PATH points
at an empty folder, so no command but an absolute path can start (our echo server is started
by absolute path).
"""

import json
import re
import time
from urllib.parse import quote

import httpx2
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from mcpcore import allowlist, names, schemas
from mcpcore.results import cap_text, convert, converted_full
from tests.live import our_server

# --- a live console ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def live(module_console):
    empty_path = module_console.base / "no-commands"
    empty_path.mkdir(parents=True)
    c = module_console(
        {"echo": our_server("echo.py")},
        {
            "PATH": str(empty_path),
            "AGENVOY_CONNECT_TIMEOUT": "5",
            "AGENVOY_CALL_TIMEOUT": "5",
            "AGENVOY_CONFIRM_TIMEOUT": "60",
        },
    )
    c.wait_connected("echo", timeout=60)
    return c


def check_answer(status: int, content_type: str, text: str, what: str) -> None:
    """The two rules: no 5xx; an error answer is exactly {"error": "<string>"}."""
    assert status < 500, f"{what} -> {status}: {text[:500]}"
    if status >= 400:
        assert content_type.split(";")[0].strip() == "application/json", (
            f"{what} -> {status} {content_type}: {text[:300]}"
        )
        body = json.loads(text)
        assert isinstance(body, dict) and set(body) == {"error"}, f"{what} -> {status}: {text[:300]}"
        assert isinstance(body["error"], str) and body["error"], f"{what} -> {status}: {text[:300]}"


# --- 1. schemathesis ---------------------------------------------------------------------
# schemathesis 4.32's pytest integration (`schemathesis.pytest.from_fixture(...).parametrize()`)
# reads `request.node._nodeid`, which pytest 9 no longer has. So this drives schemathesis
# through its Python API instead: each operation's own hypothesis strategy
# (`APIOperation.as_strategy`), positive and negative data, under our own `@given`.

MAX_EXAMPLES = 30


@pytest.fixture(scope="module")
def api_schema(live):
    return schemathesis.openapi.from_url(f"{live.url}/v1/openapi.json", timeout=30)


def _send(case, live, token: str | None):
    headers = dict(case.headers or {})
    for key in [k for k in headers if k.lower() == "authorization"]:
        del headers[key]
    if token:
        headers["Authorization"] = f"Bearer {token}"
    case.headers = headers
    if case.path.endswith("/hooks/claude-code"):
        # A hook's prompt waits for a person up to `wait` (default 55 s): a second is enough
        # to see its answer, and a wait that is no number is left for the 400 it gets.
        wait = (case.query or {}).get("wait")
        try:
            slow = wait is None or float(wait) > 1
        except (TypeError, ValueError):
            slow = False
        if slow:
            case.query = {**(case.query or {}), "wait": 1}
    response = case.call(base_url=live.url, timeout=60)
    what = f"{case.method} {case.formatted_path} query={case.query!r} body={str(case.body)[:200]!r}"
    return response, what


def _fuzz_every_operation(api_schema, live, token: str | None, extra_check=None) -> dict:
    """Run every operation of the schema with positive and negative data; returns the number
    of operations and cases run, raises with every failing operation listed."""
    failures: dict[str, str] = {}
    ran = {"operations": 0, "cases": 0}
    timings: dict[str, float] = {}
    for result in api_schema.get_all_operations():
        operation = result.ok()
        ran["operations"] += 1
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @settings(
                max_examples=MAX_EXAMPLES,
                deadline=None,
                derandomize=True,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            @given(case=operation.as_strategy(generation_mode=mode))
            def run(case):
                ran["cases"] += 1
                response, what = _send(case, live, token)
                content_type = (response.headers.get("content-type") or [""])[0]
                check_answer(response.status_code, content_type, response.text, what)
                if extra_check:
                    extra_check(response, what)

            label = f"{operation.method.upper()} {operation.path} [{mode.value}]"
            started = time.monotonic()
            try:
                run()
            except Unsatisfiable:
                continue  # no negative data exists for an operation with nothing to get wrong
            except Exception as exc:  # noqa: BLE001 - collect every operation's failure
                failures[label] = str(exc).strip().splitlines()[0][:600]
            finally:
                timings[label] = round(time.monotonic() - started, 1)
    slowest = sorted(timings.items(), key=lambda kv: -kv[1])[:3]
    print(f"\n{ran}; slowest: {slowest}")
    spec = httpx2.get(f"{live.url}/v1/openapi.json", timeout=30).json()
    assert ran["operations"] == sum(len(methods) for methods in spec["paths"].values()), ran
    assert not failures, "\n".join(f"{k}: {v}" for k, v in failures.items())
    return ran


@pytest.mark.live
def test_schemathesis_with_a_token_gets_no_5xx_and_json_errors(api_schema, live):
    _fuzz_every_operation(api_schema, live, live.token)


@pytest.mark.live
def test_schemathesis_without_a_token_gets_401_json_everywhere(api_schema, live):
    def only_401(response, what):
        assert response.status_code == 401, what
        assert response.json() == {"error": "authentication required"}, what

    _fuzz_every_operation(api_schema, live, None, only_401)


# --- 2. bodies no schema describes -------------------------------------------------------

ROUTES = [
    ("POST", "/v1/mcp"),
    ("POST", "/v1/mcp/remove"),
    ("POST", "/v1/mcp/reconnect"),
    ("POST", "/v1/allowlist"),
    ("POST", "/v1/mcp/call"),
    ("POST", "/v1/session/s/confirm/00000000-0000-0000-0000-000000000000"),
    ("POST", "/v1/mcp/calls/00000000-0000-0000-0000-000000000000/cancel"),
]

NASTY_BODIES = {
    "not json": b"{nope",
    "invalid utf-8": b'{"name": "\xff\xfe"}',
    "a json array": b"[1, 2]",
    "deeply nested": b"[" * 100_000 + b"]" * 100_000,
    "deeply nested value": b'{"name": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "over 2.5 MB": b'{"name": "' + b"x" * 3_000_000 + b'"}',
    "NaN": b'{"name": "mcp__echo__echo", "arguments": {"n": NaN}, "wait": 0}',
    "Infinity": b'{"name": "mcp__echo__echo", "arguments": {"n": Infinity}, "wait": 0}',
    "lone surrogate name": b'{"name": "\\ud800", "server": {"command": "x"}}',
    "lone surrogate in strings": (
        b'{"name": "mcp__echo__echo", "session_id": "\\udfff", "wait": 0,'
        b' "server": {"command": "\\ud800"}, "tool": {"prefix": "\\ud800"}}'
    ),
    "NUL in strings": b'{"name": "mcp__echo__echo\\u0000", "session_id": "a\\u0000b", "wait": 0}',
    "huge number": b'{"name": "mcp__echo__echo", "wait": 1e999}',
    "huge integer": b'{"name": "mcp__echo__echo", "wait": ' + b"9" * 5000 + b"}",
}


@pytest.mark.live
@pytest.mark.parametrize("label", sorted(NASTY_BODIES))
def test_nasty_bodies_get_no_5xx_and_json_errors(live, label):
    body = NASTY_BODIES[label]
    failures = []
    with httpx2.Client(
        base_url=live.url,
        timeout=60,
        headers={"Authorization": f"Bearer {live.token}", "Content-Type": "application/json"},
    ) as http:
        for method, path in ROUTES:
            r = http.request(method, path, content=body)
            try:
                check_answer(r.status_code, r.headers.get("Content-Type", ""), r.text, f"{method} {path}")
            except AssertionError as exc:
                failures.append(str(exc).splitlines()[0])
    assert not failures, f"{label}:\n" + "\n".join(failures)


ODD_PATHS = [
    "/v1/",
    "/v1/%0A",
    "/v1/mcp%0A",
    "/v1/nope/%0A",
    "/v1/%00",
    "/v1/mcp/calls/%0A",
    "/v1/mcp/calls/a%2Fb/cancel",
    "/v1/session/%0A/confirm/%0A",
]


@pytest.mark.live
@pytest.mark.parametrize("path", ODD_PATHS)
def test_odd_paths_under_v1_get_json_errors(live, path):
    for method in ("GET", "POST"):
        r = httpx2.request(method, live.url + path, headers={"Authorization": f"Bearer {live.token}"})
        check_answer(r.status_code, r.headers.get("Content-Type", ""), r.text, f"{method} {path}")
        assert r.status_code >= 400
        r = httpx2.request(method, live.url + path)
        check_answer(r.status_code, r.headers.get("Content-Type", ""), r.text, f"{method} {path} (no token)")
        assert r.json() == {"error": "authentication required"}, f"{method} {path} (no token)"


_segment = (
    st.text(st.characters(codec="utf-8"), min_size=1, max_size=12)
    .filter(lambda s: s not in (".", ".."))
    .map(lambda s: quote(s, safe=""))
)


def _containers(inner):
    return st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=30)
    | st.sampled_from(["mcp__echo__echo", "mcp__echo__", "mcp__echo__*", "echo", "auto", "confirm"]),
    _containers,
    max_leaves=12,
)
_known_keys = st.sampled_from(
    [
        "name",
        "arguments",
        "session_id",
        "mode",
        "wait",
        "server",
        "tool",
        "prefix",
        "entries",
        "approve",
        "remember",
        "allow_turn",
        "abort",
        "reason",
        "command",
        "url",
        "skill",
    ]
)
_bodies = st.one_of(
    st.binary(max_size=200),
    _json_values.map(lambda v: json.dumps(v).encode()),
    st.dictionaries(_known_keys, _json_values, max_size=6).map(lambda v: json.dumps(v).encode()),
)
_paths = st.one_of(
    st.sampled_from(
        [p for _m, p in ROUTES]
        + [
            "/v1/mcp",
            "/v1/mcp/status",
            "/v1/mcp/tools",
            "/v1/pending",
            "/v1/mcp/instructions",
            "/v1/allowlist",
        ]
    ),
    st.lists(_segment, min_size=1, max_size=4).map(lambda parts: "/v1/" + "/".join(parts)),
)


@pytest.mark.live
@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(
    method=st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]),
    path=_paths,
    body=_bodies,
    token=st.booleans(),
)
def test_random_requests_get_no_5xx_and_json_errors(live, method, path, body, token):
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {live.token}"
    # Never let the fuzzer start a real call that could wait its full default (30 s).
    if method == "POST" and path == "/v1/mcp/call":
        try:
            data = json.loads(body)
            if isinstance(data, dict):
                data["wait"] = 0
                body = json.dumps(data).encode()
        except ValueError:
            pass
    r = httpx2.request(method, live.url + path, content=body, headers=headers, timeout=60)
    check_answer(r.status_code, r.headers.get("Content-Type", ""), r.text, f"{method} {path} {body[:100]!r}")
    if not token and path.startswith("/v1/") and path != "/v1/openapi.json":
        assert r.status_code == 401, f"{method} {path} -> {r.status_code}"


# --- 3a. allow-list properties -------------------------------------------------------------

_servers = st.sampled_from(["a", "ab", "a-b", "b", "a_b", "github", "x1"])
_tool_names = st.text(st.characters(codec="utf-8", exclude_characters="\n\r"), min_size=1, max_size=12)
_entries_of = lambda server: st.one_of(  # noqa: E731
    _tool_names.map(lambda t: names.registered_name(server, t)),
    st.just(names.server_prefix(server) + "*"),
)
_current = st.lists(_servers.flatmap(_entries_of), max_size=12)


def _cleaned(entries: list[str], prefix: str) -> list[str] | None:
    """What the API would write (the contract's ToolAllow), or None when it refuses the edit."""
    try:
        return schemas.ToolAllow.check({"prefix": prefix, "entries": entries}).entries
    except schemas.InputError:
        return None


@settings(max_examples=400, deadline=None)
@given(current=_current, server=_servers, data=st.data())
def test_allowlist_replace_then_read_back(current, server, data):
    """Replace-by-prefix, render to the file, parse the file back: the prefix holds exactly the
    new entries (or the collapsed `*`), every other entry is untouched, the file is sorted with
    one entry per line, and parse(render(x)) round-trips."""
    # The file as it is: what a previous write produced.
    current = allowlist.parse(allowlist.render(current))
    prefix = names.server_prefix(server)
    new = _cleaned(data.draw(st.lists(_entries_of(server), max_size=6)), prefix)
    if new is None:
        return
    updated = allowlist.replace_prefix(current, prefix, new)
    text = allowlist.render(updated)
    back = allowlist.parse(text)
    assert back == updated, "parse(render(x)) must give x back"
    want = [prefix + "*"] if prefix + "*" in new else sorted(set(new), key=str.encode)
    assert allowlist.entries_for(back, prefix) == want
    others = sorted({e for e in current if not e.startswith(prefix)}, key=str.encode)
    assert [e for e in back if not e.startswith(prefix)] == others
    lines = text.split("\n")
    assert lines[-1] == "" and all(lines[:-1]), "one entry and \\n per line"
    assert lines[:-1] == sorted(set(lines[:-1]), key=str.encode), "sorted by byte order, unique"


@settings(max_examples=400, deadline=None)
@given(
    prefix=st.text(min_size=1, max_size=8),
    tails=st.lists(st.text(max_size=8), max_size=5),
    others=st.lists(st.text(min_size=1, max_size=12), max_size=6),
)
def test_allowlist_edits_the_api_accepts_round_trip_through_the_file(prefix, tails, others):
    """Any edit ToolAllow accepts (any prefix, any text) must survive being written to the
    file and read back, and leave other prefixes' lines as they were."""
    current = allowlist.parse(allowlist.render(others))
    new = _cleaned([prefix + t for t in tails], prefix)
    if new is None:
        return
    updated = allowlist.replace_prefix(current, prefix, new)
    back = allowlist.parse(allowlist.render(updated))
    assert back == updated, (prefix, new)
    assert allowlist.entries_for(back, prefix) == allowlist.entries_for(updated, prefix)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=15), max_size=10))
def test_allowlist_render_is_sorted_unique_and_parse_is_idempotent(entries):
    once = allowlist.parse(allowlist.render(allowlist.parse(allowlist.render(entries))))
    assert allowlist.parse(allowlist.render(once)) == once
    assert once == sorted(set(once), key=str.encode)


# --- 3b. name properties ------------------------------------------------------------------

_name_chunk = st.text("abcXYZ019-", min_size=1, max_size=8)
_valid_servers = (
    st.lists(_name_chunk, min_size=1, max_size=5)
    .map("_".join)
    .map(lambda s: s[:64])
    .filter(names.is_valid_server_name)
)
_RULE = re.compile(r"(?!_)(?!.*__)(?!.*_$)[A-Za-z0-9_-]{1,64}")


@settings(max_examples=400, deadline=None)
@given(server=_valid_servers, tool=st.text(min_size=1, max_size=30).filter(lambda t: t.strip()))
def test_registered_names_split_back_to_server_and_tool(server, tool):
    reg = names.registered_name(server, tool)
    assert names.split_registered(reg) == (server, tool.strip())
    assert reg.startswith(names.server_prefix(server))


@settings(max_examples=400, deadline=None)
@given(a=_valid_servers, b=_valid_servers, tool=st.text(min_size=1, max_size=10).filter(lambda t: t.strip()))
def test_no_valid_server_prefix_is_a_prefix_of_another(a, b, tool):
    if a == b:
        return
    assert not names.server_prefix(b).startswith(names.server_prefix(a))
    # So removing or granting `mcp__a__*` never touches a tool of b.
    assert not names.registered_name(b, tool).startswith(names.server_prefix(a))


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(max_size=70), st.text("ab_-", max_size=8), _valid_servers))
def test_server_name_rules_match_an_independent_statement_of_them(name):
    assert names.is_valid_server_name(name) == bool(_RULE.fullmatch(name)), name


# --- 3c. result-cap properties (what tests/test_results.py doesn't already cover) ----------

# Any code point, lone surrogates included (a JSON string can carry them as \ud800 escapes).
_any_text = st.text(st.characters() | st.characters(categories=["Cs"]), max_size=120)
_caps = st.integers(min_value=16, max_value=400)
_MARK = re.compile(r"\n\n\[mcp output truncated: (\d+) bytes total, (\d+) kept\]$")


def _text(t):
    return {"type": "text", "text": t}


def _image(data, kind="image"):
    return {"type": kind, "data": data, "mimeType": f"{kind}/png"}


@settings(max_examples=400, deadline=None)
@given(st.lists(_any_text, max_size=4), st.booleans(), _caps)
def test_capped_text_is_valid_utf8_within_cap_and_its_marker_counts_right(texts, is_error, cap):
    raw = {"content": [_text(t) for t in texts], "isError": is_error}
    out = convert(raw, cap)
    encoded = out.text.encode("utf-8")  # raises on a lone surrogate
    full = converted_full(raw).encode("utf-8", "replace")
    assert out.total_bytes == len(full)
    found = _MARK.search(out.text)
    if out.truncated:
        assert found, out.text[-80:]
        total, kept = int(found.group(1)), int(found.group(2))
        assert total == len(full) and kept <= cap
        assert len(out.text[: found.start()].encode()) == kept
        assert len(encoded) <= cap + len(found.group())
        assert full.startswith(out.text[: found.start()].encode())
    else:
        assert len(encoded) <= cap


@settings(max_examples=300, deadline=None)
@given(_json_values.filter(lambda v: v is not None), _caps)
def test_structured_only_results_are_capped_json(structured, cap):
    out = convert({"content": [], "structuredContent": structured}, cap)
    out.text.encode("utf-8")
    if out.truncated:
        found = _MARK.search(out.text)
        assert found and len(out.text.encode()) <= cap + len(found.group())
    else:
        assert json.loads(out.text) == structured


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.builds(_image, st.text("ABCD+/=", max_size=80)),
            st.builds(lambda d: _image(d, "audio"), st.text("ABCD+/=", max_size=80)),
            st.builds(_text, _any_text),
        ),
        min_size=1,
        max_size=6,
    ).filter(lambda items: any(i["type"] != "text" for i in items)),
    _caps,
)
def test_image_results_keep_whole_media_in_order_as_valid_json(items, cap):
    out = convert({"content": items}, cap)
    obj = json.loads(out.text)  # always valid JSON
    out.text.encode("utf-8")
    full = json.loads(converted_full({"content": items}))
    media_keys = [k for k in full if k != "text"]
    kept = [k for k in obj if k != "text"]
    assert kept == media_keys[: len(kept)], "media kept in content order, a prefix of them"
    for key in kept:
        assert obj[key] == full[key], "an image is kept whole or not at all"
    assert list(obj)[-1] == "text"
    if out.truncated:
        found = _MARK.search(obj["text"])
        assert found and len(out.text.encode()) <= cap + len(found.group())
    else:
        assert obj == full and len(out.text.encode()) <= cap


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.builds(_image, st.text("ABCD", min_size=1, max_size=40)), min_size=1, max_size=3),
    _any_text,
    _caps,
)
def test_error_results_drop_images_and_stay_plain_text(images, body, cap):
    out = convert({"content": [*images, _text(body)], "isError": True}, cap)
    assert out.is_error and out.text.startswith("tool error")
    assert "data:image" not in out.text


@settings(max_examples=300, deadline=None)
@given(_any_text, st.integers(min_value=0, max_value=200))
def test_cap_text_handles_surrogates_and_never_splits_a_character(value, cap):
    capped, truncated = cap_text(value, cap)
    data = capped.encode("utf-8")
    if truncated:
        found = _MARK.search(capped)
        assert found and len(data) <= cap + len(found.group())
