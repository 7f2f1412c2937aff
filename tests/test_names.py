"""SPEC 3: registered names and server-name rules (pure functions of mcpcore.names)."""

import pytest

from mcpcore import names

EMPTY = "must not be empty"
TOO_LONG = "must be at most 64 characters"
BAD_CHARS = "only ASCII letters, digits, '-' and '_' are allowed"
DOUBLE = "must not contain '__'"
EDGE = "must not start or end with '_'"


@pytest.mark.parametrize(
    "name",
    ["a", "A", "0", "-", "github", "my-server", "my_server", "a_b-c_d", "x" * 64, "9lives", "a-"],
)
def test_it_accepts_valid_server_names(name):
    assert names.server_name_problem(name) is None
    assert names.is_valid_server_name(name)


@pytest.mark.parametrize(
    "name, why",
    [
        ("", EMPTY),
        (None, EMPTY),
        (42, EMPTY),
        ("x" * 65, TOO_LONG),
        ("a b", BAD_CHARS),
        ("a.b", BAD_CHARS),
        ("a/b", BAD_CHARS),
        ("ü", BAD_CHARS),
        ("a*", BAD_CHARS),
        ("a\n", BAD_CHARS),
        ("a__b", DOUBLE),
        ("a___b", DOUBLE),
        ("_a", EDGE),
        ("a_", EDGE),
        ("_", EDGE),
    ],
)
def test_it_rejects_invalid_server_names_with_the_exact_why(name, why):
    assert names.server_name_problem(name) == why
    assert not names.is_valid_server_name(name)


def test_it_allows_one_and_sixty_four_characters_but_not_sixty_five():
    assert names.server_name_problem("a") is None
    assert names.server_name_problem("a" * 64) is None
    assert names.server_name_problem("a" * 65) == TOO_LONG


def test_it_keeps_server_prefixes_unambiguous_so_a_and_a__b_cannot_both_exist():
    assert names.is_valid_server_name("a")
    assert not names.is_valid_server_name("a__b")
    # The prefix of `a` would otherwise swallow every tool of `a__b`.
    assert names.registered_name("a__b", "t").startswith(names.server_prefix("a"))


def test_it_rejects_a_leading_or_trailing_underscore_but_allows_one_inside():
    assert names.server_name_problem("_abc") == EDGE
    assert names.server_name_problem("abc_") == EDGE
    assert names.server_name_problem("a_bc") is None


def test_it_builds_the_server_prefix():
    assert names.server_prefix("github") == "mcp__github__"


def test_it_builds_registered_names_and_trims_the_tool_name():
    assert names.registered_name("github", "search") == "mcp__github__search"
    assert names.registered_name("github", "  search \t\n") == "mcp__github__search"
    assert names.registered_name("s", "a b") == "mcp__s__a b"


def test_it_splits_registered_names():
    assert names.split_registered("mcp__github__search") == ("github", "search")
    # The first `__` after the prefix ends the server: the tool may hold `__` itself.
    assert names.split_registered("mcp__s__a__b") == ("s", "a__b")
    assert names.split_registered("mcp__my-srv__do.it") == ("my-srv", "do.it")


@pytest.mark.parametrize(
    "name",
    [
        "github__search",
        "mcp_github__search",
        "mcp__github",
        "mcp__github__",
        "mcp____tool",
        "mcp___a__t",
        "",
        "MCP__a__t",
    ],
)
def test_it_does_not_split_what_is_not_a_registered_name(name):
    assert names.split_registered(name) is None


def test_it_round_trips_registered_names():
    for server, tool in [("a", "b"), ("x-y", "z__w"), ("s1", "t.t")]:
        assert names.split_registered(names.registered_name(server, tool)) == (server, tool)


@pytest.mark.parametrize("name", ["mcp__a__b", "mcp__my-server__tool_1", "A-Z_a-z_0-9", "x" * 64])
def test_it_calls_llm_safe_names_safe(name):
    assert names.is_llm_safe(name)


@pytest.mark.parametrize(
    "name",
    [
        "mcp__a__do.it",
        "mcp__a__do it",
        "mcp__a__tööl",
        "mcp__a__x/y",
        "mcp__a__x:y",
        "x" * 65,
        "",
        "mcp__a__b\n",
    ],
)
def test_it_flags_names_llm_apis_would_reject(name):
    assert not names.is_llm_safe(name)


def test_it_flags_registered_names_over_sixty_four_characters():
    ok = names.registered_name("s", "t" * (64 - len("mcp__s__")))
    assert len(ok) == 64 and names.is_llm_safe(ok)
    assert not names.is_llm_safe(ok + "t")


def test_it_writes_the_default_description_exactly():
    assert names.default_description("github", "search") == ('MCP tool "search" from server "github".')


@pytest.mark.parametrize(
    "schema", [None, "string", 3, [], ["type", "object"], {"type": "string"}, {"type": "array"}]
)
def test_it_falls_back_to_an_empty_object_schema_for_missing_or_invalid_ones(schema):
    assert names.normalize_schema(schema) == {"type": "object", "properties": {}}


def test_it_returns_a_fresh_fallback_schema_each_time():
    first = names.normalize_schema(None)
    first["properties"]["x"] = {"type": "string"}
    assert names.normalize_schema(None) == {"type": "object", "properties": {}}
    assert names.EMPTY_SCHEMA == {"type": "object", "properties": {}}


def test_it_keeps_a_valid_object_schema():
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    assert names.normalize_schema(schema) == schema
