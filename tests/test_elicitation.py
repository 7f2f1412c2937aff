"""A server's question as a form and an answer checked against it (SPEC 20.4): every field kind
of an elicitation schema, and every violation with its exact text."""

import pytest
from django.http import QueryDict

from mcpcore import elicitation
from mcpcore.elicitation import AnswerError

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {
            "type": "string",
            "title": "Your name",
            "description": "as on the badge",
            "minLength": 2,
            "maxLength": 5,
        },
        "email": {"type": "string", "format": "email"},
        "site": {"type": "string", "format": "uri"},
        "day": {"type": "string", "format": "date"},
        "at": {"type": "string", "format": "date-time"},
        "ratio": {"type": "number", "minimum": 0.5, "maximum": 2.5},
        "count": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
        "ok": {"type": "boolean", "default": True},
        "size": {
            "type": "string",
            "enum": ["s", "m", "l"],
            "enumNames": ["Small", "Medium", "Large"],
            "default": "m",
        },
        "colour": {
            "type": "string",
            "oneOf": [{"const": "red", "title": "Red"}, {"const": "blue", "title": "Blue"}],
        },
        "tags": {
            "type": "array",
            "items": {"type": "string", "enum": ["a", "b", "c"]},
            "minItems": 1,
            "maxItems": 2,
            "default": ["a"],
        },
        "pets": {
            "type": "array",
            "items": {"anyOf": [{"const": "cat", "title": "Cat"}, {"const": "dog", "title": "Dog"}]},
        },
    },
    "required": ["name", "count"],
}


def field(name):
    return {f.name: f for f in elicitation.fields(SCHEMA)}[name]


def test_it_builds_a_field_of_every_kind_in_the_schemas_order():
    got = elicitation.fields(SCHEMA)
    assert [f.name for f in got] == list(SCHEMA["properties"])
    assert [f.kind for f in got] == [
        "text", "text", "text", "text", "text", "number", "integer", "boolean", "choice", "choice", "choices", "choices"
    ]  # fmt: skip
    name = field("name")
    assert (name.title, name.description, name.required, name.min_length, name.max_length) == (
        "Your name", "as on the badge", True, 2, 5
    )  # fmt: skip
    assert [field(n).format for n in ("email", "site", "day", "at")] == ["email", "uri", "date", "date-time"]
    assert [field(n).input_type for n in ("name", "email", "site", "day", "at", "ratio")] == [
        "text", "email", "url", "text", "text", "number"
    ]  # fmt: skip
    assert [field(n).placeholder for n in ("name", "day", "at")] == ["", "YYYY-MM-DD", "YYYY-MM-DDThh:mm:ssZ"]
    assert (field("ratio").minimum, field("ratio").maximum, field("ratio").step) == (0.5, 2.5, "any")
    assert (field("count").minimum, field("count").maximum, field("count").step) == (1, 10, "1")
    assert field("email").title == "email"  # no title: the field's name


def test_it_fills_in_defaults_and_marks_required_fields():
    assert field("count").default == 3 and field("count").required
    assert field("ok").default is True and not field("ok").required
    assert field("size").options == (("s", "Small"), ("m", "Medium"), ("l", "Large"))
    assert field("size").chosen("m") and not field("size").chosen("s")
    assert field("colour").options == (("red", "Red"), ("blue", "Blue"))
    assert field("tags").options == (("a", "a"), ("b", "b"), ("c", "c"))
    assert field("tags").chosen("a") and not field("tags").chosen("b")
    assert (field("tags").min_items, field("tags").max_items) == (1, 2)
    assert field("pets").options == (("cat", "Cat"), ("dog", "Dog"))


def test_it_accepts_a_full_answer_as_it_is():
    content = {
        "name": "Ann",
        "email": "ann@example.org",
        "site": "https://example.org/x",
        "day": "2026-12-04",
        "at": "2026-12-04T05:30:00Z",
        "ratio": 1.5,
        "count": 4,
        "ok": False,
        "size": "l",
        "colour": "blue",
        "tags": ["a", "c"],
        "pets": ["dog"],
    }
    assert elicitation.check(SCHEMA, content) == content
    assert elicitation.check(SCHEMA, {"name": "Bo", "count": 1}) == {"name": "Bo", "count": 1}
    assert elicitation.check(SCHEMA, {"name": "Bo", "count": 2.0}) == {"name": "Bo", "count": 2}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"name": None}, "invalid answer: name: is required"),
        ({"count": None}, "invalid answer: count: is required"),
        ({"extra": 1}, "invalid answer: extra: is not asked for"),
        ({"name": 12}, "invalid answer: name: must be text"),
        ({"name": "A"}, "invalid answer: name: must be at least 2 characters"),
        ({"name": "Annabel"}, "invalid answer: name: must be at most 5 characters"),
        ({"email": "ann.example.org"}, "invalid answer: email: must be an email address"),
        ({"email": "ann@localhost"}, "invalid answer: email: must be an email address"),
        ({"site": "example.org"}, "invalid answer: site: must be an absolute URI"),
        ({"site": "https://exa mple.org"}, "invalid answer: site: must be an absolute URI"),
        ({"day": "04/12/2026"}, "invalid answer: day: must be a date (YYYY-MM-DD)"),
        ({"day": "2026-02-30"}, "invalid answer: day: must be a date (YYYY-MM-DD)"),
        ({"at": "2026-12-04"}, "invalid answer: at: must be a date and time (RFC 3339, with a time zone)"),
        (
            {"at": "2026-12-04T05:30:00"},
            "invalid answer: at: must be a date and time (RFC 3339, with a time zone)",
        ),
        ({"ratio": "1.5"}, "invalid answer: ratio: must be a number"),
        ({"ratio": True}, "invalid answer: ratio: must be a number"),
        ({"ratio": 0.25}, "invalid answer: ratio: must be at least 0.5"),
        ({"ratio": 3}, "invalid answer: ratio: must be at most 2.5"),
        ({"count": 2.5}, "invalid answer: count: must be a whole number"),
        ({"count": 0}, "invalid answer: count: must be at least 1"),
        ({"count": 11}, "invalid answer: count: must be at most 10"),
        ({"ok": "yes"}, "invalid answer: ok: must be true or false"),
        ({"size": "xl"}, "invalid answer: size: must be one of: s, m, l"),
        ({"colour": "green"}, "invalid answer: colour: must be one of: red, blue"),
        ({"tags": "a"}, "invalid answer: tags: must be a list of choices"),
        ({"tags": ["a", "z"]}, "invalid answer: tags: must be one of: a, b, c"),
        ({"tags": ["a", "a"]}, "invalid answer: tags: must not repeat a choice"),
        ({"tags": []}, "invalid answer: tags: must have at least 1 choice"),
        ({"tags": ["a", "b", "c"]}, "invalid answer: tags: must have at most 2 choices"),
        ({"pets": ["fish"]}, "invalid answer: pets: must be one of: cat, dog"),
    ],
)
def test_it_refuses_each_violation_with_its_text(change, message):
    content = {"name": "Ann", "count": 3, **change}
    content = {k: v for k, v in content.items() if v is not None}
    with pytest.raises(AnswerError) as caught:
        elicitation.check(SCHEMA, content)
    assert caught.value.message == message


def test_it_reports_the_first_violation_in_the_schemas_order():
    with pytest.raises(AnswerError) as caught:
        elicitation.check(SCHEMA, {"count": 99, "name": "A", "zzz": 1})
    assert caught.value.message == "invalid answer: name: must be at least 2 characters"


def test_it_checks_the_action_and_the_content_of_an_accept_only():
    assert elicitation.check_answer(SCHEMA, {"action": "decline", "content": {"x": 1}}) == {
        "action": "decline"
    }
    assert elicitation.check_answer(SCHEMA, {"action": "cancel"}) == {"action": "cancel"}
    assert elicitation.check_answer(SCHEMA, {"action": "accept", "content": {"name": "Al", "count": 1}}) == {
        "action": "accept",
        "content": {"name": "Al", "count": 1},
    }
    assert elicitation.check_answer(None, {"action": "accept"}, form=False) == {"action": "accept"}
    for body, message in [
        ({"action": "approve"}, "invalid answer: action: must be accept, decline or cancel"),
        ({}, "invalid answer: action: must be accept, decline or cancel"),
        ([], "invalid answer: body: must be an object"),
        ({"action": "accept", "content": [1]}, "invalid answer: content: must be an object"),
        ({"action": "accept"}, "invalid answer: name: is required"),
    ]:
        with pytest.raises(AnswerError) as caught:
            elicitation.check_answer(SCHEMA, body)
        assert caught.value.message == message


def test_it_reads_a_submitted_form_into_typed_content():
    form = QueryDict(mutable=True)
    form.update(
        {
            "name": "Ann",
            "count": "4",
            "ratio": "1.5",
            "ok": "on",
            "size": "s",
            "at": "2026-12-04T05:30",
            "email": "",
        }
    )
    form.setlist("tags", ["a", "b"])
    content = elicitation.from_form(SCHEMA, form)
    assert content == {
        "name": "Ann",
        "at": "2026-12-04T05:30:00Z",
        "ratio": 1.5,
        "count": 4,
        "ok": True,
        "size": "s",
        "tags": ["a", "b"],
    }
    assert elicitation.check(SCHEMA, {**content, "pets": ["cat"]})["ok"] is True
    unticked = elicitation.from_form(SCHEMA, QueryDict("name=Ann&count=x"))
    assert unticked["ok"] is False
    with pytest.raises(AnswerError) as caught:
        elicitation.check(SCHEMA, unticked)
    assert caught.value.message == "invalid answer: count: must be a number"


def test_it_builds_no_fields_from_a_schema_without_properties():
    assert elicitation.fields(None) == [] and elicitation.fields({"type": "object"}) == []
    assert elicitation.check({"type": "object"}, {}) == {}


@pytest.mark.parametrize(
    "url, why",
    [
        ("https://evil.example\\@paypal.com/login", elicitation.URL_BACKSLASH),
        ("https://evil.example@paypal.com/login", elicitation.URL_USERINFO),
        ("https://paypal.com@evil.example/login", elicitation.URL_USERINFO),
        ("https://user:pw@paypal.com/", elicitation.URL_USERINFO),
        ("https://pay\tpal.com/", elicitation.URL_CONTROL),
        ("https://paypal.com/\nx", elicitation.URL_CONTROL),
        ("https://pay\x85pal.com/", elicitation.URL_CONTROL),
        ("https://paypal.com /x", elicitation.URL_SPACE),
        ("https://paypal.com\u3000/x", elicitation.URL_SPACE),
        ("https://%65vil.example/", elicitation.URL_ENCODED_HOST),
    ],
)
def test_it_refuses_a_url_whose_host_a_browser_reads_otherwise(url, why):
    assert elicitation.url_refusal(url) == why


@pytest.mark.parametrize(
    "url",
    [
        "https://login.example.com/device?code=1&next=%2Fhome",
        "https://login.example.com:8443/a@b",
        "https://login.example.com/?q=a@b#x@y",
        "javascript:alert(1)",
    ],
)
def test_it_lets_a_plain_url_through(url):
    assert elicitation.url_refusal(url) == ""
