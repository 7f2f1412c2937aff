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


# --- prompts and resources (SPEC 20.3) ------------------------------------------------------------


def test_it_parses_the_prompt_and_resource_forms():
    found = parse(
        "ask prompt:mcp__github__*\n"
        "deny prompt:mcp__fs__summarise(style:long*)\n"
        "deny resource:fs(uri:file:///home/*/.ssh/*)\n"
        "allow resource:*(uri:https://*)\n"
    )
    assert [(r.form, r.name, r.prefix) for r in found] == [
        ("prompt", "prompt:mcp__github__", True),
        ("prompt", "prompt:mcp__fs__summarise", False),
        ("resource", "resource:fs", False),
        ("resource", "resource:", True),
    ]
    assert found[2].to_dict() == {
        "line": 3,
        "decision": "deny",
        "pattern": "resource:fs(uri:file:///home/*/.ssh/*)",
    }


@pytest.mark.parametrize(
    "line, why",
    [
        ("ask prompt:summarise", "a prompt rule names a registered prompt"),
        ("ask prompt:mcp__fs__", "a prompt rule names a registered prompt"),
        ("ask prompt:github*", "a prompt rule names a registered prompt"),
        ("deny resource:fs", "a resource rule takes exactly one argument, uri"),
        ("deny resource:fs(path:/x)", "a resource rule takes exactly one argument, uri"),
        ("deny resource:fs(uri:a, uri:b)", "a resource rule takes exactly one argument, uri"),
        ("deny resource:f*(uri:x)", 'a resource rule names one server or "*", not a prefix'),
        ("deny resource:a__b(uri:x)", "must not contain '__'"),
        ("deny resource:(uri:x)", 'a resource rule names a server or "*"'),
    ],
)
def test_it_names_the_line_and_why_for_a_bad_prompt_or_resource_rule(line, why):
    with pytest.raises(RuleError) as exc:
        parse(f"allow mcp__a__ok\n{line}\n")
    assert str(exc.value).startswith("invalid rule on line 2: ")
    assert why in str(exc.value)


def test_it_keeps_plain_rules_off_prompts_and_resources_and_the_forms_off_tools():
    text = "deny *\ndeny mcp__*\nask prompt:mcp__gh__*\nallow resource:*(uri:*)\n"
    ruleset = RuleSet(parse(text))
    # a `deny *` denies every tool and permission prompt, never a prompt get or a resource read
    assert ruleset.check("mcp__gh__x", {}).line == 1
    assert ruleset.check("Bash", {}).line == 1
    assert ruleset.check(rules.prompt_subject("mcp__gh__review"), {}).line == 3
    assert ruleset.check(rules.prompt_subject("mcp__fs__review"), {}) is None
    assert ruleset.check(rules.resource_subject("fs"), {"uri": "file:///x"}).line == 4
    # only plain rules for a name its caller says is plain, whatever it looks like
    assert ruleset.check("prompt:mcp__gh__review", {}, form=rules.PLAIN).line == 1
    assert RuleSet(parse("deny *\n")).check(rules.resource_subject("fs"), {"uri": "x"}) is None


def test_it_matches_resource_rules_on_the_server_and_the_whole_uri():
    text = "deny resource:fs(uri:file:///home/*/.ssh/*)\nask resource:*(uri:file://*)\nallow resource:web(uri:*)\n"
    ruleset = RuleSet(parse(text))

    def line(server, uri):
        rule = ruleset.check(rules.resource_subject(server), {"uri": uri})
        return rule.line if rule else None

    assert line("fs", "file:///home/ann/.ssh/id_rsa") == 1
    assert line("other", "file:///home/ann/.ssh/id_rsa") == 2
    assert line("fs", "file:///etc/hosts") == 2
    assert line("web", "https://example.com/") == 3
    assert line("fsx", "https://example.com/") is None
    assert ruleset.check(rules.resource_subject("fs"), {}) is None  # no uri never matches


def test_it_matches_prompt_rules_on_the_registered_name_and_arguments():
    text = "deny prompt:mcp__fs__summarise(style:long*)\nask prompt:*\n"
    ruleset = RuleSet(parse(text))
    subject = rules.prompt_subject("mcp__fs__summarise")
    assert ruleset.check(subject, {"style": "longest"}).line == 1
    assert ruleset.check(subject, {"style": "short"}).line == 2
    assert ruleset.check(rules.prompt_subject("mcp__x__y"), {}).line == 2
    assert ruleset.check("mcp__fs__summarise", {"style": "longest"}) is None  # a tool of that name


def test_it_lists_every_rule_that_can_apply_to_a_server_with_its_prompts_and_resources():
    text = (
        "deny mcp__fs__w(path:*)\n"  # 1 its tool
        "ask prompt:mcp__fs__*\n"  # 2 its prompts
        "ask prompt:mcp__*\n"  # 3 every prompt
        "deny prompt:mcp__fsx__a\n"  # 4 another server's prompt
        "deny resource:fs(uri:*)\n"  # 5 its resources
        "deny resource:*(uri:x*)\n"  # 6 every server's
        "deny resource:fsx(uri:*)\n"  # 7 another server's
        "allow mcp__fsx__a\n"  # 8 another server's tool
        "ask *\n"  # 9 every tool
    )
    ruleset = RuleSet(parse(text))
    assert [r.line for r in ruleset.for_server("fs")] == [1, 2, 3, 5, 6, 9]
    assert [r.line for r in ruleset.for_prefix("mcp__fs__")] == [1, 9]


form_names = st.sampled_from(
    ["mcp__a__x", "prompt:mcp__a__x", "prompt:mcp__b__x", "resource:a", "resource:b", "Bash"]
)
form_rules = st.sampled_from(
    [
        "*",
        "mcp__a__*",
        "prompt:*",
        "prompt:mcp__a__*",
        "prompt:mcp__a__x",
        "resource:*(uri:*)",
        "resource:a(uri:*)",
        "resource:a(uri:f*)",
    ]
)


@given(st.lists(st.tuples(st.sampled_from(["allow", "ask", "deny"]), form_rules), max_size=6), form_names)
@settings(max_examples=300)
def test_it_decides_a_call_only_by_rules_of_its_own_form(specs, name):
    lines = [f"{d} {p}" for d, p in specs]
    found = RuleSet(parse("\n".join(lines))).check(name, {"uri": "file:///x"})
    if found is not None:
        assert rules.form_of(found.pattern) == rules.form_of(name)
        assert name.startswith(found.name)


@pytest.mark.django_db
def test_it_takes_and_serves_prompt_and_resource_rules_over_the_api(api, agenvoy_home):
    from mcpcore import calls

    lines = ["ask prompt:mcp__github__*", "deny resource:fs(uri:file:///home/*/.ssh/*)"]
    assert api.post("/v1/rules", {"rules": lines}).status_code == 200
    assert [r["pattern"] for r in api.get("/v1/rules").json()["rules"]] == [
        "prompt:mcp__github__*",
        "resource:fs(uri:file:///home/*/.ssh/*)",
    ]
    assert calls.rule_for("resource:fs", {"uri": "file:///home/a/.ssh/k"}) == ("deny", lines[1])
    bad = api.post("/v1/rules", {"rules": ["deny resource:fs"]})
    assert bad.status_code == 400
    assert bad.json()["error"].startswith(
        "invalid rule on line 1: a resource rule takes exactly one argument"
    )


# --- normal form of a read's URI (SPEC 20.3) -----------------------------------------------------

DENY_SSH = "deny resource:fs(uri:file:///home/*/.ssh/*)"


@pytest.mark.parametrize(
    "spelled",
    [
        "file:///home/u/%2essh/id_rsa",
        "file:///home/u/%2Essh/id_%72sa",
        "file:////home/u/.ssh/id_rsa",
        "file://localhost/home/u/.ssh/id_rsa",
        "file://LocalHost/home/u/.ssh/id_rsa",
        "FILE:///home/u/.ssh/id_rsa",
        "file:///home/u/./.ssh//id_rsa",
        "file:///home/x/../u/.ssh/id_rsa",
        "file:/home/u/.ssh/id_rsa",
    ],
)
def test_it_spells_every_way_round_a_file_rule_in_its_normal_form(spelled):
    normal = rules.normal_uri(spelled)
    assert normal == "file:///home/u/.ssh/id_rsa"
    assert RuleSet(parse(DENY_SSH)).check(rules.resource_subject("fs"), {"uri": normal}) is not None


@pytest.mark.parametrize(
    "spelled",
    ["file:///home/x/..%2Fu%2F.ssh/id_rsa", "file:///home/u%2F.ssh%2Fid_rsa", "file:///home/u/.ssh%2fid_rsa"],
)
def test_it_checks_an_encoded_slash_as_the_servers_template_decodes_it(spelled):
    # Normal form keeps %2F (RFC 3986), but a URI template's match decodes it into the path.
    assert rules.normal_uri(spelled) == spelled.replace("%2f", "%2F")
    rule_set = RuleSet(parse(f"allow resource:fs(uri:file:///home/*)\n{DENY_SSH}"))
    assert rule_set.check(rules.resource_subject("fs"), {"uri": rules.normal_uri(spelled)}).decision == "deny"
    assert (
        rule_set.check(rules.resource_subject("fs"), {"uri": "file:///home/u/notes%2Etxt"}).decision
        == "allow"
    )


@pytest.mark.parametrize(
    "uri",
    [
        "file:///home/u/notes.txt",
        "ui://a/app.html",
        "test://shared",
        "https://example.com/a?b=%2F#c",
        "urn:a:../b",
    ],
)
def test_it_leaves_a_uri_in_normal_form_as_it_is(uri):
    assert rules.normal_uri(uri) == uri


def test_it_lowers_scheme_and_host_and_keeps_user_info_and_the_path_as_they_are():
    assert rules.normal_uri("HTTP://Me@Ex%41mple.COM/A/%7eB?%7e#%7E") == "http://Me@example.com/A/~B?~#~"


_UNRESERVED = "abcxyzABCXYZ0129-._~"
_segment = st.text(alphabet=_UNRESERVED + "%/:@!$&'()*+,;=", min_size=0, max_size=8)
_uri = st.builds(
    lambda scheme, host, segments, query: f"{scheme}://{host}/{'/'.join(segments)}{query}",
    st.sampled_from(["file", "FILE", "Test", "ui", "https"]),
    st.sampled_from(["", "localhost", "LocalHost", "Host.Example", "u@h"]),
    st.lists(st.one_of(_segment, st.sampled_from([".", "..", "%2e", "%2E%2e", ""])), max_size=6),
    st.sampled_from(["", "?a=%7e", "#frag"]),
)


@settings(max_examples=400)
@given(_uri)
def test_it_is_idempotent_and_leaves_nothing_to_normalise(uri):
    normal = rules.normal_uri(uri)
    assert rules.normal_uri(normal) == normal
    path = normal.split("?")[0].split("#")[0]
    for c in _UNRESERVED:
        assert f"%{ord(c):02X}" not in normal and f"%{ord(c):02x}" not in normal
    assert "/./" not in path + "/" and "/../" not in path + "/"
    if normal.startswith("file:"):
        assert normal.startswith("file:///") or not normal.startswith("file://localhost")
        assert "//" not in path[len("file://") :]


@settings(max_examples=400)
@given(
    st.lists(
        st.text(alphabet="abcxyz._-~", min_size=1, max_size=6).filter(lambda s: s not in (".", "..")),
        min_size=1,
        max_size=5,
    ),
    st.data(),
)
def test_it_brings_any_spelling_of_a_file_path_back_to_one(segments, data):
    canonical = "file:///" + "/".join(segments)
    scheme = data.draw(st.sampled_from(["file", "FILE", "File"]))
    head = data.draw(st.sampled_from(["///", "//localhost/", "////", "//LOCALHOST//", "/"]))
    # `file:/` then an empty segment would be `file://<authority>`: another URI.
    extras = [".", "zz/.."] if head == "/" else [".", "", "zz/.."]
    spelled_segments = []
    for segment in segments:
        # Before a segment (after the last one `.` or `` would add a final `/`).
        if data.draw(st.booleans()):
            spelled_segments.append(data.draw(st.sampled_from(extras)))
        if data.draw(st.booleans()):
            spelled_segments.append("%" + format(ord(segment[0]), "02x") + segment[1:])
        else:
            spelled_segments.append(segment)
    spelled = f"{scheme}:{head}" + "/".join(spelled_segments)
    assert rules.normal_uri(spelled) == canonical


# --- who decides an ask (SPEC 24.1, 24.2: parsed here; routing is elsewhere) -----------------------


def test_it_keeps_the_group_and_the_approvals_an_ask_names():
    found = parse("ask[ops] mcp__a__*\nask[ops:2] mcp__b__x\nask[:5] mcp__c__*\nask mcp__d__*", {"ops"})
    assert [(r.decision, r.group, r.approvals) for r in found] == [
        ("ask", "ops", 1),
        ("ask", "ops", 2),
        ("ask", None, 5),
        ("ask", None, 1),
    ]
    assert found[1].text == "ask[ops:2] mcp__b__x" and found[1].name == "mcp__b__x"
    assert RuleSet(found).check("mcp__b__x", {}) is not None


# --- limit lines (SPEC 25.1) ------------------------------------------------------------------


def test_it_parses_limit_lines_and_lists_them_with_their_rate():
    found = parse("limit 30/m mcp__fs__write_file(path:/srv/*)\nlimit 5/s *\nlimit 2/h prompt:mcp__gh__*\n")
    assert [r.to_dict() for r in found] == [
        {"line": 1, "decision": "limit", "pattern": "mcp__fs__write_file(path:/srv/*)", "limit": "30/m"},
        {"line": 2, "decision": "limit", "pattern": "*", "limit": "5/s"},
        {"line": 3, "decision": "limit", "pattern": "prompt:mcp__gh__*", "limit": "2/h"},
    ]
    assert found[0].text == "limit 30/m mcp__fs__write_file(path:/srv/*)"


@pytest.mark.parametrize(
    "line, why",
    [
        ("ask[ghosts] mcp__a__*", "unknown group: ghosts"),
        ("ask[ops:1] mcp__a__*", "the number of approvals is from 2 to 5, got '1'"),
        ("ask[:6] mcp__a__*", "the number of approvals is from 2 to 5, got '6'"),
        ("ask[ops:] mcp__a__*", "the number of approvals is from 2 to 5, got ''"),
        ("ask[] mcp__a__*", "ask[] names a group, a number of approvals, or both: ask[<group>:<n>]"),
        ("ask[Ops] mcp__a__*", "invalid group name: Ops"),
        ("deny[ops] mcp__a__*", 'unknown decision "deny[ops]" (use allow, ask or deny)'),
    ],
)
def test_it_reports_a_bad_ask_naming_who_decides(line, why):
    with pytest.raises(RuleError) as exc:
        parse(f"allow mcp__z__*\n{line}", {"ops"})
    assert str(exc.value) == f"invalid rule on line 2: {why}"


def test_it_finds_the_groups_a_rules_text_names_bad_lines_too():
    assert rules.groups_named("ask[ops] a\n  ask[oncall:2] b\nask[:3] c\n# ask[x] d\nask[ghosts] e") == {
        "ops",
        "oncall",
        "ghosts",
    }


@pytest.mark.parametrize(
    "line, why",
    [
        ("limit 0/m mcp__a__b", 'got "0/m"'),
        ("limit 10/5m mcp__a__b", 'got "10/5m"'),
        ("limit 10/w mcp__a__b", 'got "10/w"'),
        ("limit ten/m mcp__a__b", 'got "ten/m"'),
        ("limit 10/m", '"limit" needs a pattern'),
        ("limit mcp__a__b", "a limit reads limit <n>/<unit> <pattern>"),
        ("limit 3/m resource:a", "exactly one argument, uri"),
    ],
)
def test_it_names_the_line_and_why_for_a_bad_limit_line(line, why):
    with pytest.raises(RuleError) as exc:
        parse(f"allow mcp__a__ok\n{line}\n")
    assert str(exc.value).startswith("invalid rule on line 2: ") and why in str(exc.value)


def test_it_never_decides_a_call_by_a_limit_line_and_matches_limits_by_form_and_arguments():
    rs = RuleSet(
        parse(
            "limit 3/m mcp__fs__*\n"
            "limit 1/s mcp__fs__write(path:/etc/*)\n"
            "limit 9/d prompt:mcp__fs__*\n"
            "limit 4/h resource:fs(uri:file:///srv/*)\n"
            "allow mcp__fs__read\n"
        )
    )
    assert rs.check("mcp__fs__write", {"path": "/etc/x"}) is None
    assert rs.check("mcp__fs__read", {}).decision == "allow"
    lines = lambda name, args, form=None: [r.line for r in rs.limits(name, args, form)]  # noqa: E731
    assert lines("mcp__fs__write", {"path": "/etc/x"}) == [1, 2]
    assert lines("mcp__fs__write", {"path": "/srv/x"}) == [1]
    assert lines("mcp__gh__x", {}) == []
    assert lines("prompt:mcp__fs__hi", {}) == [3]
    assert lines("resource:fs", {"uri": "file:///srv/a"}) == [4]
    # A permission prompt's name is the agent's: never read as a form.
    assert lines("prompt:mcp__fs__hi", {}, rules.PLAIN) == []


def test_it_counts_every_form_under_a_star_limit_and_shows_it_on_every_server():
    rs = RuleSet(parse("limit 2/m mcp__fs__*\nlimit 5/s *\n"))
    for name, args in [
        ("mcp__fs__x", {}),
        ("Bash", {}),
        ("prompt:mcp__gh__p", {}),
        ("resource:gh", {"uri": "x:y"}),
    ]:
        assert rs.limits(name, args)[-1].text == "limit 5/s *"
    assert [r.line for r in rs.limits("mcp__fs__x", {})] == [1, 2]
    assert [r.text for r in rs.for_server("gh")] == ["limit 5/s *"]
    assert [r.text for r in rs.for_server("fs")] == ["limit 2/m mcp__fs__*", "limit 5/s *"]


def test_it_keeps_a_limit_check_cheap_among_a_thousand_lines():
    text = "".join(f"limit {i + 1}/m mcp__s{i}__*\n" for i in range(1000))
    rs = RuleSet(parse(text))
    assert [r.line for r in rs.limits("mcp__s7__tool", {})] == [8]
    # Indexed like the deciding rules: a name's candidates come from its prefix, once.
    assert rs.limits("mcp__none__tool", {}) == []


@pytest.mark.parametrize(
    "text, expected",
    [
        ("10/5m", (10, 5, "m")),
        ("1/s", (1, 1, "s")),
        ("3/1d", (3, 1, "d")),
        ("0/m", None),
        ("10/0m", None),
        ("x", None),
    ],
)
def test_it_reads_a_rate_with_a_window_of_several_units(text, expected):
    assert rules.rate(text, multiples=True) == expected
