"""Exposed names on `/mcp` (SPEC 13.2): `<server>__<tool>`, shortened by the exact rule."""

import hashlib
import re

from hypothesis import given
from hypothesis import strategies as st

from mcpcore import names

SAFE = re.compile(r"[A-Za-z0-9_-]{1,64}")
server_names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9-]{0,20}(_[A-Za-z0-9-]{1,20})?", fullmatch=True)
tool_names = st.text(min_size=1, max_size=120).filter(lambda t: t.strip())


def test_it_keeps_a_name_that_llm_apis_accept():
    assert names.exposed_name("github", "create_issue") == "github__create_issue"
    assert names.exposed_name("every", "get-tiny-image") == "every__get-tiny-image"


def test_it_shortens_a_name_by_the_exact_rule():
    tool = "a.b c/" + "x" * 80
    reg = f"mcp__srv__{tool}"
    cleaned = ("srv__" + tool).replace(".", "_").replace(" ", "_").replace("/", "_")
    expected = cleaned[:55] + "_" + hashlib.sha256(reg.encode()).hexdigest()[:8]
    assert names.exposed_name("srv", tool) == expected
    assert len(expected) == 64


def test_it_replaces_each_non_ascii_character_with_one_underscore():
    digest = hashlib.sha256("mcp__fs__lire_fichier_é".encode()).hexdigest()[:8]
    assert names.exposed_name("fs", "lire_fichier_é") == f"fs__lire_fichier___{digest}"


@given(server_names, tool_names)
def test_it_always_gives_a_name_llm_apis_accept(server, tool):
    assert SAFE.fullmatch(names.exposed_name(server, tool))


@given(server_names, tool_names)
def test_it_changes_only_names_that_need_it(server, tool):
    plain = f"{server}__{tool.strip()}"
    exposed = names.exposed_name(server, tool)
    if SAFE.fullmatch(plain):
        assert exposed == plain
    else:
        reg = names.registered_name(server, tool)
        assert (
            exposed
            == re.sub(r"[^A-Za-z0-9_-]", "_", plain)[:55] + "_" + hashlib.sha256(reg.encode()).hexdigest()[:8]
        )


@given(server_names, tool_names, tool_names)
def test_it_keeps_two_shortened_names_apart(server, one, other):
    a, b = names.exposed_name(server, one), names.exposed_name(server, other)
    shortened = not SAFE.fullmatch(f"{server}__{one.strip()}") and not SAFE.fullmatch(
        f"{server}__{other.strip()}"
    )
    if shortened and one.strip() != other.strip():
        assert a != b  # the hash of the registered name tells them apart


@given(server_names, tool_names)
def test_it_knows_every_shortened_name_by_its_shape(server, tool):
    # The MCP endpoint looks a name up in the whole list only when it may be a shortened one.
    name = names.exposed_name(server, tool)
    if name != f"{server}__{tool.strip()}":
        assert names.may_be_shortened(name)
