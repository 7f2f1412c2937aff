"""Argument rules (SPEC 14.2): the pure parser and matcher, property-tested against a naive
reference, then the `rules` file, its mirror and `/v1/rules` on the database."""

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcpcore import rules
from mcpcore.rules import RuleError, RuleSet, parse


def decide(text: str, name: str, args: dict) -> str | None:
    rule = RuleSet(parse(text)).check(name, args)
    return rule.text if rule else None


# --- parsing ----------------------------------------------------------------------------------


def test_it_parses_each_decision_and_ignores_blank_and_comment_lines():
    found = parse(
        "# a comment\n\nallow mcp__fs__read_file\n  ask mcp__github__*  \ndeny mcp__fs__x(path:/etc/*)\n"
    )
    assert [(r.line, r.decision, r.pattern) for r in found] == [
        (3, "allow", "mcp__fs__read_file"),
        (4, "ask", "mcp__github__*"),
        (5, "deny", "mcp__fs__x(path:/etc/*)"),
    ]
    assert found[1].prefix and found[1].name == "mcp__github__"
    assert found[2].to_dict() == {"line": 5, "decision": "deny", "pattern": "mcp__fs__x(path:/etc/*)"}


@pytest.mark.parametrize(
    "line, why",
    [
        ("alow mcp__a__b", 'unknown decision "alow"'),
        ("deny", '"deny" needs a pattern'),
        ("deny mcp__a*__b", '"*" may only end the name'),
        ("deny mcp__a__b(path:/x", 'must end with ")"'),
        ("deny mcp__a__b()", "empty argument list"),
        ("deny mcp__a__b(path)", 'expected <arg>:<glob>, got "path"'),
        ("deny (path:x)", "needs a tool name"),
    ],
)
def test_it_names_the_line_and_why_for_a_bad_line(line, why):
    with pytest.raises(RuleError) as exc:
        parse(f"allow mcp__a__ok\n# two\n{line}\n")
    assert str(exc.value).startswith("invalid rule on line 3: ")
    assert why in str(exc.value)
    assert exc.value.line == 3


def test_it_reports_the_example_message_exactly():
    with pytest.raises(RuleError, match=r'^invalid rule on line 1: unknown decision "alow"'):
        parse("alow mcp__fs__read_file")


def test_it_splits_arguments_at_commas_before_a_name_only():
    (rule,) = parse("deny mcp__a__b(q:a,b*, path:/x/*)")
    assert [(k, g.text) for k, g in rule.args] == [("q", "a,b*"), ("path", "/x/*")]


# --- deciding ---------------------------------------------------------------------------------

RULES = """\
allow mcp__fs__read_file(path:/srv/docs/*)
ask mcp__fs__write_file
deny mcp__fs__write_file(path:/etc/*)
allow mcp__fs__*
ask mcp__github__*
"""


def test_it_prefers_deny_over_ask_over_allow_whatever_the_line_order():
    assert (
        decide(RULES, "mcp__fs__write_file", {"path": "/etc/passwd"})
        == "deny mcp__fs__write_file(path:/etc/*)"
    )
    assert decide(RULES, "mcp__fs__write_file", {"path": "/tmp/x"}) == "ask mcp__fs__write_file"
    assert (
        decide(RULES, "mcp__fs__read_file", {"path": "/srv/docs/a"})
        == "allow mcp__fs__read_file(path:/srv/docs/*)"
    )
    assert decide(RULES, "mcp__fs__list", {}) == "allow mcp__fs__*"
    assert decide(RULES, "mcp__github__issue", {}) == "ask mcp__github__*"
    assert decide(RULES, "mcp__other__x", {"path": "/etc/x"}) is None


def test_it_takes_the_first_line_among_equal_decisions():
    text = "deny mcp__a__*\ndeny mcp__a__b\n"
    assert decide(text, "mcp__a__b", {}) == "deny mcp__a__*"


def test_it_reads_spaces_and_tabs_as_layout_between_decision_pattern_and_glob():
    for text in (
        "deny\tmcp__a__b(path:/my docs/*)",
        "deny  mcp__a__b(path: /my docs/*)",
        "deny \t mcp__a__b( path:/my docs/* )",
    ):
        (rule,) = parse(text)
        assert (rule.decision, rule.name) == ("deny", "mcp__a__b"), text
        assert decide(text, "mcp__a__b", {"path": "/my docs/x"}), text
        assert not decide(text, "mcp__a__b", {"path": " /my docs/x"}), text


def test_it_matches_globs_on_the_whole_value():
    text = "deny mcp__a__b(path:/etc/*)\ndeny mcp__a__c(code:A?C)\n"
    assert decide(text, "mcp__a__b", {"path": "/etc/"})
    assert decide(text, "mcp__a__b", {"path": "/etc/x/y"})
    assert not decide(text, "mcp__a__b", {"path": "/tmp/etc/x"})  # not a substring search
    assert decide(text, "mcp__a__c", {"code": "ABC"})
    assert not decide(text, "mcp__a__c", {"code": "ABCD"})
    assert not decide(text, "mcp__a__c", {"code": "AC"})


def test_it_matches_other_values_as_compact_json_with_sorted_keys():
    text = (
        'deny mcp__a__b(flag:true)\ndeny mcp__a__c(level:4?)\ndeny mcp__a__d(opts:{"a":1,"b":*})\n'
        'deny mcp__a__e(tags:["x",*])\ndeny mcp__a__f(v:null)\n'
    )
    assert decide(text, "mcp__a__b", {"flag": True})
    assert not decide(text, "mcp__a__b", {"flag": "True"})
    assert decide(text, "mcp__a__c", {"level": 42})
    assert not decide(text, "mcp__a__c", {"level": 4})
    assert decide(text, "mcp__a__d", {"opts": {"b": [1, 2], "a": 1}})  # keys sorted
    assert decide(text, "mcp__a__e", {"tags": ["x", "y"]})
    assert decide(text, "mcp__a__f", {"v": None})  # present, null: not absent


def test_it_never_matches_an_absent_argument():
    text = "deny mcp__a__b(path:*)\n"
    assert not decide(text, "mcp__a__b", {})
    assert not decide(text, "mcp__a__b", {"other": "/etc"})
    assert decide(text, "mcp__a__b", {"path": ""})


def test_it_needs_every_listed_argument_to_match():
    text = "deny mcp__a__b(path:/etc/*, mode:w*)\n"
    assert decide(text, "mcp__a__b", {"path": "/etc/x", "mode": "write"})
    assert not decide(text, "mcp__a__b", {"path": "/etc/x", "mode": "read"})
    assert not decide(text, "mcp__a__b", {"path": "/etc/x"})


def test_it_lists_the_rules_that_can_apply_to_a_server():
    text = "deny mcp__fs__w(path:*)\nask mcp__fs__*\nallow mcp__*\nallow mcp__fsx__a\nask mcp__f*\n"
    found = RuleSet(parse(text)).for_prefix("mcp__fs__")
    assert [r.line for r in found] == [1, 2, 3, 5]


def test_it_stays_linear_on_a_pattern_that_backtracks_in_a_regex():
    import time

    glob = rules.Glob("*a*a*a*a*a*b")
    started = time.perf_counter()
    assert not glob("a" * 200_000)
    assert time.perf_counter() - started < 1.0


# --- properties against a naive reference -----------------------------------------------------


def ref_glob(pattern: str, value: str) -> bool:
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, re.DOTALL) is not None


def ref_value(v) -> str:
    return (
        v if isinstance(v, str) else json.dumps(v, separators=(",", ":"), ensure_ascii=False, sort_keys=True)
    )


def ref_decide(rule_list: list[tuple[str, str, bool, dict]], name: str, args: dict) -> int | None:
    """Scan every rule; of the matching ones, the best decision, then the first line."""
    best = None
    for i, (decision, rname, prefix, globs) in enumerate(rule_list):
        if not (name.startswith(rname) if prefix else name == rname):
            continue
        if not all(k in args and ref_glob(g, ref_value(args[k])) for k, g in globs.items()):
            continue
        key = (("deny", "ask", "allow").index(decision), i)
        best = key if best is None or key < best else best
    return None if best is None else best[1]


patterns = st.text(alphabet="ab/*?.", max_size=8)
values = st.text(alphabet="ab/.\n", max_size=12)


@given(patterns, values)
@settings(max_examples=600)
def test_it_matches_globs_like_the_reference(pattern, value):
    assert rules.Glob(pattern)(value) == ref_glob(pattern, value)


names = st.sampled_from(["mcp__a__x", "mcp__a__y", "mcp__ab__x", "mcp__b__x", "mcp__a__xy"])
rule_names = st.sampled_from(["mcp__a__x", "mcp__a__", "mcp__a", "mcp__", "mcp__b__x", "mcp__a__xy", ""])
arg_values = st.one_of(
    values, st.integers(-5, 50), st.booleans(), st.none(), st.lists(st.integers(0, 3), max_size=2)
)
rule_specs = st.lists(
    st.tuples(
        st.sampled_from(["allow", "ask", "deny"]),
        rule_names,
        st.booleans(),
        st.dictionaries(st.sampled_from(["p", "q"]), st.text(alphabet="ab/*?1[]", max_size=5), max_size=2),
    ),
    max_size=8,
)


@given(rule_specs, names, st.dictionaries(st.sampled_from(["p", "q", "r"]), arg_values, max_size=3))
@settings(max_examples=400)
def test_it_decides_like_a_scan_of_every_rule(specs, name, args):
    specs = [(d, n, p or not n, g) for d, n, p, g in specs]  # an empty name needs its *
    lines = []
    for decision, rname, prefix, globs in specs:
        inner = ", ".join(f"{k}:{g}" for k, g in globs.items())
        lines.append(f"{decision} {rname}{'*' if prefix else ''}{f'({inner})' if globs else ''}")
    found = RuleSet(parse("\n".join(lines))).check(name, args)
    expected = ref_decide(specs, name, args)
    assert (found.line - 1 if found else None) == expected


# --- the rules file, its mirror, /v1/rules ----------------------------------------------------


@pytest.mark.django_db
def test_it_writes_the_rules_file_and_keeps_the_last_good_rules_when_a_line_is_bad(agenvoy_home):
    from mcpcore import calls, files

    files.write_rules(["# mine", "deny mcp__a__b(path:/etc/*)", "ask mcp__a__*"])
    assert (agenvoy_home / "rules").read_text() == "# mine\ndeny mcp__a__b(path:/etc/*)\nask mcp__a__*\n"
    assert calls.rule_for("mcp__a__b", {"path": "/etc/x"}) == ("deny", "deny mcp__a__b(path:/etc/*)")
    (agenvoy_home / "rules").write_text("ask mcp__a__*\nallow\n")  # an edit by someone else
    assert files.sync_rules() is False
    found, problem = files.current_rules()
    assert problem == 'invalid rule on line 2: "allow" needs a pattern: a tool name or <prefix>*'
    assert [r.text for r in found] == ["deny mcp__a__b(path:/etc/*)", "ask mcp__a__*"]
    assert files.file_problem(files.RULES) == problem
    # The gate keeps the last good rules, too.
    assert calls.rule_for("mcp__a__b", {"path": "/etc/x"}) == ("deny", "deny mcp__a__b(path:/etc/*)")
    (agenvoy_home / "rules").write_text("allow mcp__a__b\n")
    assert files.sync_rules() is True and files.file_problem(files.RULES) == ""
    assert calls.rule_for("mcp__a__b", {"path": "/etc/x"}) == ("allow", "allow mcp__a__b")


@pytest.mark.django_db
def test_it_refuses_a_bad_line_without_writing_anything(agenvoy_home):
    from mcpcore import files

    files.write_rules(["ask mcp__a__*"])
    with pytest.raises(RuleError, match="line 2"):
        files.write_rules(["deny mcp__a__b", "alow mcp__a__c"])
    assert (agenvoy_home / "rules").read_text() == "ask mcp__a__*\n"


@pytest.mark.django_db
def test_it_serves_and_replaces_rules_over_the_api(api, agenvoy_home):
    assert api.get("/v1/rules").json() == {"rules": [], "error": ""}
    r = api.post("/v1/rules", {"rules": ["deny mcp__fs__write_file(path:/etc/*)", "", "ask mcp__github__*"]})
    assert r.status_code == 200, r.content
    body = api.get("/v1/rules").json()
    assert body == {
        "rules": [
            {"line": 1, "decision": "deny", "pattern": "mcp__fs__write_file(path:/etc/*)"},
            {"line": 3, "decision": "ask", "pattern": "mcp__github__*"},
        ],
        "error": "",
    }
    bad = api.post("/v1/rules", {"rules": ["ask mcp__a__*", "alow mcp__b__c"]})
    assert bad.status_code == 400
    assert bad.json()["error"].startswith('invalid rule on line 2: unknown decision "alow"')
    assert api.get("/v1/rules").json() == body
    for wrong in ({}, {"rules": "deny x"}, {"rules": [1]}, {"rules": ["deny a\ndeny b"]}):
        r = api.post("/v1/rules", wrong)
        assert r.status_code == 400 and "error" in r.json()
    (agenvoy_home / "rules").write_text("deny\n")
    assert api.get("/v1/rules").json()["error"].startswith("invalid rule on line 1")
