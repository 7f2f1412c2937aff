"""The input contract (issue 19 point 5): one model per body (`mcpcore.schemas`), whose first
error is SPEC 7's exact message, used by every door; and the OpenAPI description generated
from those models and from `auth.RIGHTS`."""

import json

import jsonschema
import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcpcore import calls, schemas
from mcpcore.api import auth, openapi
from mcpcore.mcpserver import catalog

BAD = schemas.InputError

# (model, body, the exact message), in the order the checks run when several rules break.
CASES = [
    (schemas.CallRequest, {}, "name is required"),
    (schemas.CallRequest, {"name": "  "}, "name is required"),
    (schemas.CallRequest, {"name": 7, "arguments": 1}, "name is required"),
    (schemas.CallRequest, {"name": "x", "arguments": [], "mode": "yolo"}, "arguments must be a JSON object"),
    (
        schemas.CallRequest,
        {"name": "x", "arguments": {"a": float("nan")}},
        "arguments must be JSON that can be sent as UTF-8 (no lone surrogates, NaN or Infinity)",
    ),
    (
        schemas.CallRequest,
        {"name": "x", "session_id": "s" * 201},
        "session_id must be a non-empty string of at most 200 characters",
    ),
    (schemas.CallRequest, {"name": "x", "mode": "yolo"}, "unknown mode: yolo"),
    (schemas.CallRequest, {"name": "x", "mode": {"a": 1}}, "unknown mode: {'a': 1}"),
    (schemas.CallRequest, {"name": "x", "mode": "\ud800"}, "unknown mode: \ud800"),
    (schemas.CallBody, {"wait": True}, "wait must be a number of seconds from 0 to 300"),
    (schemas.CallBody, {"wait": "301", "name": 7}, "wait must be a number of seconds from 0 to 300"),
    (schemas.Reply, {"approve": "yes", "remember": 1}, "approve must be true or false"),
    (schemas.Reply, {"abort": None}, "abort must be true or false"),
    (schemas.Reply, {"reason": 5}, "reason must be a string"),
    (schemas.PromptRequest, {"tool_name": "", "input": []}, "tool_name must be a non-empty string"),
    (schemas.PromptRequest, {"tool_name": "B" * 701}, "tool_name must be at most 700 characters"),
    (schemas.PromptRequest, {"tool_name": "Bash"}, "input must be a JSON object"),
    (
        schemas.PromptRequest,
        {"tool_name": "Bash", "input": {}, "tool_use_id": 1},
        "tool_use_id must be a string",
    ),
    (
        schemas.PromptRequest,
        {"tool_name": "Bash", "input": {}},
        "session_id must be a non-empty string of at most 200 characters",
    ),
    (schemas.ServerEdit, {"server": {}}, "name is required"),
    (schemas.ServerEdit, {"name": "a__b", "server": 1}, "invalid server name: must not contain '__'"),
    (schemas.ServerEdit, {"name": "a"}, "server.command or server.url is required"),
    (schemas.ServerEdit, {"name": "a", "server": {"args": 5}}, "server.command or server.url is required"),
    (
        schemas.ServerEdit,
        {"name": "a", "server": {"command": "c", "args": [1], "env": 5}},
        "server.args must be a list of strings",
    ),
    (
        schemas.ServerEdit,
        {"name": "a", "server": {"url": "u", "headers": {"a": 1}}},
        "server.headers must be an object of strings",
    ),
    (
        schemas.ServerEdit,
        {"name": "a", "server": {"url": "u", "type": "grpc"}},
        "server.type must be stdio, streamable-http or sse",
    ),
    (
        schemas.ServerEdit,
        {"name": "a", "server": {"url": "u", "disabled": 1}},
        "server.disabled must be true or false",
    ),
    (
        schemas.ServerEdit,
        {"name": "a", "server": {"url": "u", "timeout": True}},
        "server.timeout must be a number of seconds, at least 1",
    ),
    (schemas.ServerRef, {"name": None}, "name is required"),
    (schemas.ReconnectBody, {"name": " "}, "name must be a server name"),
    (schemas.AllowEdit, {}, "skill or tool is required"),
    (schemas.AllowEdit, {"skill": {"prefix": "x"}}, "skill allow-lists are not managed by this console"),
    (schemas.AllowEdit, {"tool": []}, "tool must be an object"),
    (schemas.AllowEdit, {"tool": {"entries": 5}}, "tool.prefix is required"),
    (
        schemas.AllowEdit,
        {"tool": {"prefix": "mcp__a__", "entries": "x"}},
        "tool.entries must be a list of strings",
    ),
    (
        schemas.AllowEdit,
        {"tool": {"prefix": "mcp__a__", "entries": ["mcp__b__x", "#bad"]}},
        "every entry must start with the prefix: mcp__b__x",
    ),
    (schemas.AllowEdit, {"tool": {"prefix": "#p"}}, "an entry can't start with '#': '#p'"),
    (schemas.RulesEdit, {"rules": "allow x"}, "rules must be a list of strings, one rule each"),
    (
        schemas.RulesEdit,
        {"rules": ["allow x", "deny y\nz"]},
        "invalid rule on line 2: one rule a line (no line breaks in an item)",
    ),
]


@pytest.mark.parametrize("model, body, message", CASES, ids=[f"{m.__name__}: {msg}" for m, _, msg in CASES])
def test_it_answers_the_first_broken_rule_with_its_exact_message(model, body, message):
    with pytest.raises(BAD) as exc:
        model.check(body)
    assert exc.value.message == message and str(exc.value) == message
    assert exc.value.status == 400


def test_it_gives_the_values_as_the_call_path_uses_them():
    call = schemas.CallBody.check(
        {"name": " t ", "arguments": None, "session_id": " s ", "mode": "always-allow"}
    )
    assert (call.name, call.arguments, call.session_id, call.mode, call.wait) == (
        " t ",
        {},
        "s",
        "auto",
        30.0,
    )
    assert (
        schemas.CallWait.check({"wait": "5"}).wait == 5.0 and schemas.WaitQuery.check({"wait": ""}).wait == 0
    )
    assert schemas.Reply.check({"reason": None, "approve": True}).reason == ""
    edit = schemas.AllowEdit.check({"tool": {"prefix": "mcp__a__", "entries": [" mcp__a__x ", " "]}}).tool
    assert (edit.prefix, edit.entries) == ("mcp__a__", ["mcp__a__x"])
    # A server's config is written as posted (unknown keys and number types kept), the
    # `http` alias read as streamable-http.
    posted = {"url": "https://h/mcp", "type": "http", "timeout": 5, "x-note": {"a": 1}}
    assert schemas.ServerEdit.check({"name": " a ", "server": posted}).server == {
        **posted,
        "type": "streamable-http",
    }


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
MODELS = [
    schemas.CallBody,
    schemas.Reply,
    schemas.PromptRequest,
    schemas.ServerEdit,
    schemas.ServerRef,
    schemas.ReconnectBody,
    schemas.AllowEdit,
    schemas.RulesEdit,
    schemas.WaitQuery,
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from(MODELS), data=st.data())
def test_it_refuses_any_bad_body_with_one_message_and_nothing_else(model, data):
    keys = st.sampled_from([*model.model_fields, "skill", "server", "tool", "x"])
    body = data.draw(st.dictionaries(keys, _json, max_size=4))
    try:
        model.check(body)
    except BAD as exc:
        assert exc.message and exc.status == 400
        assert ": Input should" not in exc.message, "every rule has a message of the contract"


# --- the doors use the same models ---------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "body",
    [{}, {"name": "x", "arguments": 5}, {"name": "x", "session_id": ""}, {"name": "x", "mode": "yolo"}],
)
def test_it_checks_a_call_alike_at_every_door(api, body):
    """/v1 answers what calls.create (the /mcp door, the pages' try-it) raises."""
    with pytest.raises(calls.CallError) as exc:
        calls.create(
            None, "op", body.get("name"), body.get("arguments"), body.get("session_id"), body.get("mode")
        )
    r = api.post("/v1/mcp/call", body)
    assert (r.status_code, r.json()) == (exc.value.status, {"error": exc.value.message})


@pytest.mark.django_db
def test_it_checks_the_rules_page_s_lines_like_post_v1_rules(client, api, agenvoy_home):
    from django.contrib.auth.models import User

    client.force_login(User.objects.create_user("op"))
    message = "invalid rule on line 2: one rule a line (no line breaks in an item)"
    page = client.post("/rules/", {"rules": "allow a\nallow b\rdeny c\n"})
    assert page.status_code == 400 and message in page.content.decode()
    r = api.post("/v1/rules", {"rules": ["allow a", "allow b\rdeny c"]})
    assert (r.status_code, r.json()) == (400, {"error": message})
    assert not (agenvoy_home / "rules").exists()


def test_it_publishes_approval_prompt_s_input_schema_from_its_model():
    schema = catalog.PERMISSION_SCHEMA
    assert schema["required"] == ["tool_name", "input"]
    assert {k: v["type"] for k, v in schema["properties"].items()} == {
        "tool_name": "string",
        "input": "object",
        "tool_use_id": "string",
    }
    jsonschema.Draft202012Validator.check_schema(schema)


# --- the OpenAPI description -----------------------------------------------------------------------


@pytest.fixture
def doc(db) -> dict:
    return Client().get("/v1/openapi.json").json()


def test_it_describes_every_v1_route_and_method_once(doc):
    assert openapi.undescribed() == set()
    described = sum(len(methods) for methods in doc["paths"].values())
    assert described == len(openapi.OPERATIONS)


def test_it_writes_each_operations_roles_from_the_rights_table(doc):
    for (name, method), _ in openapi.OPERATIONS.items():
        ops = [
            p[method.lower()]
            for p in doc["paths"].values()
            if p.get(method.lower(), {}).get("operationId") == f"{name}-{method.lower()}"
        ]
        assert len(ops) == 1, (name, method)
        roles, refusals = auth.describe(auth.RIGHTS[(name, method)])
        assert ops[0]["x-agenvoy-roles"] == roles
        for status, text in refusals.items():
            assert ops[0]["responses"][str(status)]["description"] == text
    confirm = doc["paths"]["/v1/session/{session_id}/confirm/{confirm_id}"]["post"]
    assert confirm["x-agenvoy-roles"]["agent"] == "no (403 `this token may not reply to confirmations`)"
    servers = doc["paths"]["/v1/mcp"]["post"]
    assert servers["x-agenvoy-roles"]["approver"] == "no (403 `this token may not change servers`)"


def test_it_generates_the_bodies_and_queries_from_the_models(doc):
    components = doc["components"]["schemas"]
    for op in openapi.OPERATIONS.values():
        for model in (op.body, op.query):
            if model is not None:
                own = schemas.json_schema(model)
                own.pop("$defs", None)
                own = json.loads(json.dumps(own).replace("#/$defs/", "#/components/schemas/"))
                assert components[model.__name__] == own, model
    call = components["CallBody"]
    assert list(call["properties"]) == ["wait", "name", "arguments", "session_id", "mode"]
    assert call["required"] == ["name"]
    assert call["properties"]["mode"]["enum"] == ["confirm", "single-confirm", "auto", "always-allow"]
    detail = doc["paths"]["/v1/mcp/calls/{call_id}"]["get"]
    assert [(p["name"], p["in"]) for p in detail["parameters"]] == [("call_id", "path"), ("wait", "query")]


def test_it_is_a_valid_openapi_3_1_document(doc):
    # The OpenAPI 3.1 schema schemathesis (pinned in requirements-dev.txt) checks documents with.
    from schemathesis.specs.openapi.definitions import OPENAPI_31

    assert doc["openapi"] == "3.1.0"
    jsonschema.Draft202012Validator(OPENAPI_31).validate(doc)
    for schema in doc["components"]["schemas"].values():
        jsonschema.Draft202012Validator.check_schema(schema)
    refs = {r.removeprefix("#/components/schemas/") for r in _refs(doc)}
    assert refs <= set(doc["components"]["schemas"]), refs - set(doc["components"]["schemas"])


def _refs(node) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if "$ref" in node else []
        return own + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []
