"""SPEC 2.2: the allow-list rules (pure) and `GET/POST /v1/allowlist` against the real file."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcpcore import allowlist
from mcpcore.models import AllowEntry

# --- parse ------------------------------------------------------------------------------------


def test_it_parses_one_entry_per_line_ignoring_blanks_and_comments():
    text = "# trusted tools\nmcp__a__x\n\n   \nmcp__b__*\n#mcp__c__y\n  # indented comment\nmcp__a__y"
    assert allowlist.parse(text) == ["mcp__a__x", "mcp__b__*", "mcp__a__y"]


def test_it_parses_an_empty_file_as_no_entries():
    assert allowlist.parse("") == []
    assert allowlist.parse("\n\n# only a comment\n") == []


def test_it_parses_crlf_lines_and_trims_surrounding_space():
    assert allowlist.parse("mcp__a__x\r\n  mcp__a__y  \r\n") == ["mcp__a__x", "mcp__a__y"]


# --- matching ---------------------------------------------------------------------------------


def test_it_matches_an_exact_entry():
    entries = ["mcp__a__x"]
    assert allowlist.matches(entries, "mcp__a__x")
    assert not allowlist.matches(entries, "mcp__a__xy")
    assert not allowlist.matches(entries, "mcp__a__")
    assert not allowlist.matches(entries, "mcp__b__x")


def test_it_matches_a_star_entry_by_the_text_before_the_star():
    entries = ["mcp__a__*"]
    assert allowlist.matches(entries, "mcp__a__x")
    assert allowlist.matches(entries, "mcp__a__anything__at_all")
    assert not allowlist.matches(entries, "mcp__ab__x")
    assert not allowlist.matches(entries, "mcp__b__x")


def test_it_keeps_the_whole_server_grant_of_a_away_from_server_a__b():
    # `a__b` can't be a server name, so `mcp__a__*` only ever covers tools of server `a`.
    assert allowlist.matches(["mcp__a__*"], "mcp__a__b__t")
    assert not allowlist.matches(["mcp__a-b__*"], "mcp__a__t")


def test_it_treats_a_star_inside_an_entry_literally():
    assert not allowlist.matches(["mcp__*__x"], "mcp__a__x")
    assert allowlist.matches(["mcp__*__x"], "mcp__*__x")


def test_it_matches_nothing_with_no_entries():
    assert not allowlist.matches([], "mcp__a__x")
    assert not allowlist.Matcher([])("mcp__a__x")


# One edge case a line: the entry, then the name it is tried on.
EDGE_CASES = """
mcp__a__*     mcp__a__x
mcp__a__*     mcp__a__
mcp__a__*     mcp__ab__x
mcp__a___*    mcp__a___x
mcp______*    mcp______x
mcp__a_*      mcp__a__x
mcp__*        mcp__z__q
*             anything
mcp__a__x     mcp__a__x
mcp__a__x*    mcp__a__xyz
mcp__a__b__*  mcp__a__b__c
mcp___a__*    mcp___a__t
"""


@pytest.mark.parametrize("entry, name", [line.split() for line in EDGE_CASES.strip().splitlines()])
def test_it_makes_the_matcher_agree_with_matches_on_edge_cases(entry, name):
    assert allowlist.Matcher([entry])(name) == allowlist.matches([entry], name)


_piece = st.text(alphabet="ab_-*", max_size=6)
_name = st.one_of(
    st.text(alphabet="mcpab_-*", max_size=14),
    st.builds(lambda s, t: f"mcp__{s}__{t}", _piece, _piece),
    st.builds(lambda s: f"mcp_{s}", _piece),
)
_entry = st.one_of(_name, st.builds(lambda n: n + "*", _name))


@settings(max_examples=600, deadline=None)
@given(entries=st.lists(_entry, max_size=6), names=st.lists(_name, min_size=1, max_size=6))
def test_it_makes_the_matcher_agree_with_matches_on_generated_names(entries, names):
    matcher = allowlist.Matcher(entries)
    for name in names + entries + [e[:-1] for e in entries if e.endswith("*")]:
        assert matcher(name) == allowlist.matches(entries, name), (entries, name)


# --- replace-by-prefix and render -------------------------------------------------------------


def test_it_replaces_the_prefix_entries_and_adds_the_new_ones():
    current = ["mcp__a__x", "mcp__a__y", "mcp__b__z"]
    out = allowlist.replace_prefix(current, "mcp__a__", ["mcp__a__w", "mcp__a__x"])
    assert out == ["mcp__a__w", "mcp__a__x", "mcp__b__z"]


def test_it_collapses_the_prefix_to_one_star_line():
    current = ["mcp__a__x", "mcp__a__y", "mcp__b__z"]
    out = allowlist.replace_prefix(current, "mcp__a__", ["mcp__a__x", "mcp__a__*", "mcp__a__q"])
    assert out == ["mcp__a__*", "mcp__b__z"]


def test_it_leaves_other_prefixes_untouched():
    current = ["mcp__b__*", "mcp__ab__x", "mcp__a-b__y", "zzz", "mcp__b__z"]
    out = allowlist.replace_prefix(current, "mcp__a__", ["mcp__a__new"])
    assert set(out) == set(current) | {"mcp__a__new"}


def test_it_clears_the_prefix_with_an_empty_list():
    current = ["mcp__a__x", "mcp__a__*", "mcp__b__z"]
    assert allowlist.replace_prefix(current, "mcp__a__", []) == ["mcp__b__z"]


def test_it_returns_the_replaced_list_sorted_by_byte_order():
    out = allowlist.replace_prefix(["mcp__b__z", "mcp__B__z"], "mcp__a__", ["mcp__a__Z", "mcp__a__a"])
    assert out == sorted(out, key=lambda e: e.encode())
    assert out == ["mcp__B__z", "mcp__a__Z", "mcp__a__a", "mcp__b__z"]


def test_it_renders_sorted_by_byte_order_one_entry_and_newline_per_line():
    text = allowlist.render(["mcp__b__y", "mcp__a__x", "mcp__A__x", "mcp__a__*", "mcp__a-b__q"])
    # Byte order: "*" (0x2a) < "-" (0x2d) < "A" (0x41) < "_" (0x5f) < "a" (0x61).
    assert text == "mcp__A__x\nmcp__a-b__q\nmcp__a__*\nmcp__a__x\nmcp__b__y\n"


def test_it_renders_nothing_for_no_entries_and_drops_duplicates():
    assert allowlist.render([]) == ""
    assert allowlist.render(["x", "x"]) == "x\n"


def test_it_renders_non_ascii_by_utf8_bytes_not_code_points():
    # U+FF21 (fullwidth A, bytes EF BC A1) sorts after U+00E9 (C3 A9) both ways, but
    # U+E000 (EE 80 80) vs U+10000 (F0 90 80 80): code point and byte order agree for UTF-8;
    # the check here is only that the sort key is the byte string.
    entries = ["mcp__a__\uff21", "mcp__a__\u00e9", "mcp__a__z"]
    assert allowlist.render(entries).splitlines() == sorted(entries, key=lambda e: e.encode())


def test_it_finds_the_entries_of_a_prefix():
    entries = ["mcp__b__z", "mcp__a__y", "mcp__ab__q", "mcp__a__*"]
    assert allowlist.entries_for(entries, "mcp__a__") == ["mcp__a__*", "mcp__a__y"]


# --- the API ----------------------------------------------------------------------------------

OTHERS = "# kept comment? no: the file is rewritten\nmcp__b__*\nmcp__ab__x\nmcp__c__y\n"


def _write_allow(home, text):
    (home / "allow_tool").write_text(text, encoding="utf-8")


def _read_allow(home):
    return (home / "allow_tool").read_bytes()


@pytest.mark.django_db
def test_it_answers_400_when_neither_skill_nor_tool_is_given(api, agenvoy_home):
    r = api.post("/v1/allowlist", {})
    assert r.status_code == 400
    assert r.json() == {"error": "skill or tool is required"}


@pytest.mark.django_db
@pytest.mark.parametrize(
    "block", [{}, {"prefix": ""}, {"prefix": "   "}, {"prefix": None}, {"entries": ["mcp__a__x"]}]
)
def test_it_answers_400_when_the_prefix_is_missing(api, agenvoy_home, block):
    r = api.post("/v1/allowlist", {"tool": block})
    assert r.status_code == 400
    assert r.json() == {"error": "tool.prefix is required"}


@pytest.mark.django_db
def test_it_answers_400_for_an_entry_outside_the_prefix_and_leaves_the_file_alone(api, agenvoy_home):
    _write_allow(agenvoy_home, "mcp__a__x\nmcp__b__y\n")
    before = _read_allow(agenvoy_home)
    r = api.post("/v1/allowlist", {"tool": {"prefix": "mcp__a__", "entries": ["mcp__a__z", "mcp__b__evil"]}})
    assert r.status_code == 400
    assert r.json() == {"error": "every entry must start with the prefix: mcp__b__evil"}
    assert _read_allow(agenvoy_home) == before


@pytest.mark.django_db
def test_it_leaves_the_file_unchanged_after_any_failed_edit(api, agenvoy_home):
    _write_allow(agenvoy_home, "zz\nmcp__a__x\n\n# c\n")
    before = _read_allow(agenvoy_home)
    for body in (
        {},
        {"tool": {}},
        {"tool": {"prefix": "mcp__a__", "entries": ["x"]}},
        {"tool": {"prefix": "mcp__a__", "entries": "mcp__a__y"}},
        {"tool": {"prefix": "mcp__a__", "entries": [1]}},
        {"tool": "mcp__a__"},
    ):
        r = api.post("/v1/allowlist", body)
        assert r.status_code == 400, body
        assert set(r.json()) == {"error"}
        assert _read_allow(agenvoy_home) == before
    assert not AllowEntry.objects.exists()


@pytest.mark.django_db
def test_it_replaces_a_prefix_and_writes_the_file_sorted(api, agenvoy_home):
    _write_allow(agenvoy_home, "mcp__c__y\nmcp__a__old\nmcp__b__*\n\n# note\nmcp__ab__x\n")
    r = api.post("/v1/allowlist", {"tool": {"prefix": "mcp__a__", "entries": ["mcp__a__z", "mcp__a__m"]}})
    assert r.status_code == 200
    assert r.json() == {"ok": True, "tool": {"entries": ["mcp__a__m", "mcp__a__z"]}}
    assert _read_allow(agenvoy_home) == (b"mcp__a__m\nmcp__a__z\nmcp__ab__x\nmcp__b__*\nmcp__c__y\n")
    assert list(AllowEntry.objects.values_list("entry", flat=True)) == [
        "mcp__a__m",
        "mcp__a__z",
        "mcp__ab__x",
        "mcp__b__*",
        "mcp__c__y",
    ]


@pytest.mark.django_db
def test_it_keeps_other_prefixes_lines_exactly(api, agenvoy_home):
    others = ["mcp__B__x", "mcp__a-b__y", "mcp__ab__*", "mcp__b__é", "mcp__c__*"]
    _write_allow(agenvoy_home, "".join(f"{e}\n" for e in others) + "mcp__a__gone\n")
    r = api.post("/v1/allowlist", {"tool": {"prefix": "mcp__a__", "entries": ["mcp__a__*"]}})
    assert r.status_code == 200
    lines = _read_allow(agenvoy_home).decode().splitlines()
    assert sorted(set(lines) - {"mcp__a__*"}) == sorted(others)
    assert lines == sorted(lines, key=lambda e: e.encode())


@pytest.mark.django_db
def test_it_collapses_to_the_star_line_through_the_api(api, agenvoy_home):
    _write_allow(agenvoy_home, "mcp__a__x\nmcp__a__y\n")
    r = api.post("/v1/allowlist", {"tool": {"prefix": "mcp__a__", "entries": ["mcp__a__q", "mcp__a__*"]}})
    assert r.json() == {"ok": True, "tool": {"entries": ["mcp__a__*"]}}
    assert _read_allow(agenvoy_home) == b"mcp__a__*\n"


@pytest.mark.django_db
def test_it_clears_a_prefix_with_an_empty_entries_list(api, agenvoy_home):
    _write_allow(agenvoy_home, "mcp__a__x\nmcp__b__y\n")
    r = api.post("/v1/allowlist", {"tool": {"prefix": "mcp__a__", "entries": []}})
    assert r.json() == {"ok": True, "tool": {"entries": []}}
    assert _read_allow(agenvoy_home) == b"mcp__b__y\n"


@pytest.mark.django_db
def test_it_creates_the_file_when_there_is_none(api, agenvoy_home):
    assert not (agenvoy_home / "allow_tool").exists()
    r = api.post("/v1/allowlist", {"tool": {"prefix": "mcp__s__", "entries": ["mcp__s__t"]}})
    assert r.status_code == 200
    assert _read_allow(agenvoy_home) == b"mcp__s__t\n"


@pytest.mark.django_db
def test_it_lists_the_entries_of_a_prefix(api, agenvoy_home):
    _write_allow(agenvoy_home, "mcp__b__z\nmcp__a__y\n# mcp__a__comment\nmcp__ab__q\nmcp__a__*\n")
    r = api.get("/v1/allowlist?prefix=mcp__a__")
    assert r.status_code == 200
    assert r.json() == {"tool": {"entries": ["mcp__a__*", "mcp__a__y"]}}
    r = api.get("/v1/allowlist?prefix=mcp__zz__")
    assert r.json() == {"tool": {"entries": []}}


@pytest.mark.django_db
def test_it_shows_an_edit_in_a_following_get(api, agenvoy_home):
    api.post("/v1/allowlist", {"tool": {"prefix": "mcp__k__", "entries": ["mcp__k__one"]}})
    assert api.get("/v1/allowlist?prefix=mcp__k__").json() == {"tool": {"entries": ["mcp__k__one"]}}
