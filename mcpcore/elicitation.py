"""A server's question as a form, and a person's answer checked against it (SPEC 20.4).

A form-mode question carries a `requestedSchema`: an object whose properties are flat
primitive fields (MCP's elicitation schema). `fields(schema)` turns it into the form's fields,
one `Field` each: text (`string`, with `title`, `description`, `minLength`, `maxLength` and
`format` `email` / `uri` / `date` / `date-time`), `number` and `integer` (with `minimum` /
`maximum`), `boolean`, a single choice (`enum`, with `enumNames` as labels, or `oneOf` of
`{"const", "title"}`), and several choices (an `array` whose `items` are such a choice, with
`minItems` / `maxItems`); each with its default and whether it is required.

`check(schema, content)` returns the content to send upstream or raises `AnswerError` with the
first violation, whose message is the API's 400 text `invalid answer: <field>: <why>`. Fields
are checked in the schema's order, then fields the schema does not ask for. `from_form` reads a
submitted HTML form into content of the right types (the page's answers go through `check`
like an API's).

`url_refusal(url)` says why a URL question's address is refused where the server asks it:
an address whose host a person could misread (user info, a backslash, a control character,
whitespace, a percent-encoded host) is never shown or opened.

Pure: no Django, no `mcp`.
"""

import datetime
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

ACTIONS = ("accept", "decline", "cancel")

# The `<why>` of `invalid answer: <field>: <why>`; docs/decisions.md lists them.
REQUIRED = "is required"
NOT_ASKED = "is not asked for"
NOT_TEXT = "must be text"
TOO_SHORT = "must be at least {} characters"
TOO_LONG = "must be at most {} characters"
NOT_EMAIL = "must be an email address"
NOT_URI = "must be an absolute URI"
NOT_DATE = "must be a date (YYYY-MM-DD)"
NOT_DATE_TIME = "must be a date and time (RFC 3339, with a time zone)"
NOT_NUMBER = "must be a number"
NOT_INTEGER = "must be a whole number"
TOO_SMALL = "must be at least {}"
TOO_BIG = "must be at most {}"
NOT_BOOLEAN = "must be true or false"
NOT_ONE_OF = "must be one of: {}"
NOT_LIST = "must be a list of choices"
FEW_CHOICES = "must have at least {}"
MANY_CHOICES = "must have at most {}"
REPEATED = "must not repeat a choice"
NOT_OBJECT = "must be an object"
NOT_ACTION = "must be accept, decline or cancel"

# Why a URL question is refused (`url_refusal`): browsers parse URLs as the WHATWG standard
# does, Python's `urlsplit` does not, and these are where the two disagree on the host (a
# backslash is a slash to a browser, so `https://evil.example\@paypal.com` opens evil.example
# while `urlsplit` names paypal.com; tabs and newlines are dropped; the host is percent-decoded).
URL_USERINFO = "the URL has user info (user@host)"
URL_BACKSLASH = "the URL has a backslash"
URL_CONTROL = "the URL has a control character"
URL_SPACE = "the URL has whitespace"
URL_ENCODED_HOST = "the URL's host is percent-encoded"

TEXT, NUMBER, INTEGER, BOOLEAN, CHOICE, CHOICES = "text", "number", "integer", "boolean", "choice", "choices"
FORMATS = ("email", "uri", "date", "date-time")

# An address with one @, no spaces, and a dot in its domain: what a person means by one (the
# full RFC 5322 grammar would accept what no form should).
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s.]+")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?([Zz]|[+-]\d{2}:\d{2})")


class AnswerError(ValueError):
    """An answer that does not fit the question: `message` is the API's 400 text."""

    def __init__(self, name: str, why: str) -> None:
        self.name = name
        self.why = why
        self.message = f"invalid answer: {name}: {why}"
        super().__init__(self.message)


@dataclass(frozen=True)
class Field:
    """One field of a question's form, as the page shows it and `check` checks it."""

    name: str
    kind: str  # TEXT, NUMBER, INTEGER, BOOLEAN, CHOICE or CHOICES
    title: str
    description: str = ""
    required: bool = False
    default: Any = None
    min_length: int | None = None
    max_length: int | None = None
    format: str = ""  # of a TEXT field: one of FORMATS, or ""
    minimum: float | None = None
    maximum: float | None = None
    options: tuple[tuple[str, str], ...] = ()  # (value, label) of a CHOICE or CHOICES field
    min_items: int | None = None
    max_items: int | None = None

    @property
    def input_type(self) -> str:
        """The HTML input type of a TEXT, NUMBER or INTEGER field."""
        if self.kind in (NUMBER, INTEGER):
            return "number"
        # Dates are typed as text: Chromium's date inputs take a Tab stop per part (five for a
        # date and time), lose the focus ring to their parts, and widen a phone's page.
        return {"email": "email", "uri": "url"}.get(self.format, "text")

    @property
    def placeholder(self) -> str:
        """The shape a date or a date and time is typed in."""
        return {"date": "YYYY-MM-DD", "date-time": "YYYY-MM-DDThh:mm:ssZ"}.get(self.format, "")

    @property
    def step(self) -> str:
        return "1" if self.kind == INTEGER else "any"

    def chosen(self, value: str) -> bool:
        """Whether option `value` is preselected (the field's default)."""
        if self.kind == CHOICES:
            return isinstance(self.default, list) and value in [str(v) for v in self.default]
        return self.default is not None and str(self.default) == value


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _num(value: Any) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _options(spec: Mapping) -> tuple[tuple[str, str], ...] | None:
    """The (value, label) pairs of a single choice (`enum` [+ `enumNames`] or `oneOf`/`anyOf`
    of consts), None when `spec` is no choice."""
    if isinstance(spec.get("enum"), list):
        labels = spec.get("enumNames")
        values = [str(v) for v in spec["enum"]]
        if isinstance(labels, list) and len(labels) == len(values):
            return tuple((v, str(label)) for v, label in zip(values, labels, strict=True))
        return tuple((v, v) for v in values)
    for key in ("oneOf", "anyOf"):
        if isinstance(spec.get(key), list):
            return tuple(
                (str(o["const"]), str(o.get("title") or o["const"]))
                for o in spec[key]
                if isinstance(o, Mapping) and "const" in o
            )
    return None


def _field(name: str, spec: Mapping, required: bool) -> Field:
    title = str(spec.get("title") or name)
    common: dict[str, Any] = {
        "name": name,
        "title": title,
        "description": str(spec.get("description") or ""),
        "required": required,
        "default": spec.get("default"),
    }
    kind = spec.get("type")
    if kind == "array":
        items = spec.get("items")
        items = items if isinstance(items, Mapping) else {}
        return Field(
            kind=CHOICES,
            options=_options(items) or (),
            min_items=_int(spec.get("minItems")),
            max_items=_int(spec.get("maxItems")),
            **common,
        )
    options = _options(spec)
    if options is not None:
        return Field(kind=CHOICE, options=options, **common)
    if kind in ("number", "integer"):
        return Field(
            kind=NUMBER if kind == "number" else INTEGER,
            minimum=_num(spec.get("minimum")),
            maximum=_num(spec.get("maximum")),
            **common,
        )
    if kind == "boolean":
        return Field(kind=BOOLEAN, **common)
    fmt = spec.get("format")
    return Field(
        kind=TEXT,
        min_length=_int(spec.get("minLength")),
        max_length=_int(spec.get("maxLength")),
        format=fmt if fmt in FORMATS else "",
        **common,
    )


def fields(schema: Any) -> list[Field]:
    """The form's fields, in the schema's order (a schema without properties has none)."""
    if not isinstance(schema, Mapping) or not isinstance(schema.get("properties"), Mapping):
        return []
    required = schema.get("required")
    required = required if isinstance(required, list) else []
    return [
        _field(str(name), spec if isinstance(spec, Mapping) else {}, name in required)
        for name, spec in schema["properties"].items()
    ]


def url_refusal(url: str) -> str:
    """Why the address of a URL question is refused, "" when it is not: one whose host the
    console would show differently from the host a browser opens."""
    if "\\" in url:
        return URL_BACKSLASH
    if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in url):
        return URL_CONTROL
    if any(c.isspace() for c in url):
        return URL_SPACE
    netloc = urlsplit(url).netloc
    if "@" in netloc:
        return URL_USERINFO
    if "%" in netloc:
        return URL_ENCODED_HOST
    return ""


def _show(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else str(number)


def _check_text(f: Field, value: Any) -> str:
    if not isinstance(value, str):
        raise AnswerError(f.name, NOT_TEXT)
    if f.min_length is not None and len(value) < f.min_length:
        raise AnswerError(f.name, TOO_SHORT.format(f.min_length))
    if f.max_length is not None and len(value) > f.max_length:
        raise AnswerError(f.name, TOO_LONG.format(f.max_length))
    if f.format == "email" and not _EMAIL.fullmatch(value):
        raise AnswerError(f.name, NOT_EMAIL)
    if f.format == "uri":
        parts = urlsplit(value)
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", parts.scheme or "") or not (
            parts.netloc or parts.path
        ):
            raise AnswerError(f.name, NOT_URI)
        if any(c.isspace() for c in value):
            raise AnswerError(f.name, NOT_URI)
    if f.format == "date":
        try:
            if not _DATE.fullmatch(value):
                raise ValueError
            datetime.date.fromisoformat(value)
        except ValueError:
            raise AnswerError(f.name, NOT_DATE) from None
    if f.format == "date-time":
        try:
            if not _DATE_TIME.fullmatch(value):
                raise ValueError
            datetime.datetime.fromisoformat(value.replace("z", "Z").replace("t", "T"))
        except ValueError:
            raise AnswerError(f.name, NOT_DATE_TIME) from None
    return value


def _check_number(f: Field, value: Any) -> int | float:
    number = _num(value)
    if number is None or not math.isfinite(number):
        raise AnswerError(f.name, NOT_NUMBER)
    if f.kind == INTEGER:
        if not float(number).is_integer():
            raise AnswerError(f.name, NOT_INTEGER)
        number = int(number)
    if f.minimum is not None and number < f.minimum:
        raise AnswerError(f.name, TOO_SMALL.format(_show(f.minimum)))
    if f.maximum is not None and number > f.maximum:
        raise AnswerError(f.name, TOO_BIG.format(_show(f.maximum)))
    return number


def _one_of(f: Field) -> str:
    return NOT_ONE_OF.format(", ".join(value for value, _ in f.options))


def _choices(count: int) -> str:
    return "1 choice" if count == 1 else f"{count} choices"


def _check_choices(f: Field, value: Any) -> list:
    if not isinstance(value, list):
        raise AnswerError(f.name, NOT_LIST)
    allowed = {v for v, _ in f.options}
    for item in value:
        if not isinstance(item, str) or item not in allowed:
            raise AnswerError(f.name, _one_of(f))
    if len(set(value)) != len(value):
        raise AnswerError(f.name, REPEATED)
    if f.min_items is not None and len(value) < f.min_items:
        raise AnswerError(f.name, FEW_CHOICES.format(_choices(f.min_items)))
    if f.max_items is not None and len(value) > f.max_items:
        raise AnswerError(f.name, MANY_CHOICES.format(_choices(f.max_items)))
    return value


def check_field(f: Field, value: Any) -> Any:
    """`value` as it goes upstream, or AnswerError."""
    if f.kind == TEXT:
        return _check_text(f, value)
    if f.kind in (NUMBER, INTEGER):
        return _check_number(f, value)
    if f.kind == BOOLEAN:
        if not isinstance(value, bool):
            raise AnswerError(f.name, NOT_BOOLEAN)
        return value
    if f.kind == CHOICE:
        if not isinstance(value, str) or value not in {v for v, _ in f.options}:
            raise AnswerError(f.name, _one_of(f))
        return value
    return _check_choices(f, value)


def check(schema: Any, content: Any) -> dict:
    """The content of an `accept` checked against the question's schema: every required field
    present, every given one of its kind and within its bounds, none the schema does not ask
    for. Raises AnswerError with the first violation."""
    if content is None:
        content = {}
    if not isinstance(content, Mapping):
        raise AnswerError("content", NOT_OBJECT)
    out = {}
    asked = fields(schema)
    for f in asked:
        if f.name not in content or content[f.name] is None:
            if f.required:
                raise AnswerError(f.name, REQUIRED)
            continue
        out[f.name] = check_field(f, content[f.name])
    names = {f.name for f in asked}
    for name in content:
        if name not in names:
            raise AnswerError(str(name), NOT_ASKED)
    return out


def check_answer(schema: Any, body: Any, form: bool = True) -> dict:
    """A whole answer (`{"action", "content"?}`) as it goes upstream: the action checked, the
    content of a form's accept checked against `schema`; decline and cancel carry none."""
    if not isinstance(body, Mapping):
        raise AnswerError("body", NOT_OBJECT)
    action = body.get("action")
    if action not in ACTIONS:
        raise AnswerError("action", NOT_ACTION)
    if action == "accept" and form:
        return {"action": action, "content": check(schema, body.get("content"))}
    return {"action": action}


class FormData(Protocol):
    """What `from_form` reads: Django's QueryDict has it."""

    def get(self, key: str, default: Any = None) -> Any: ...

    def getlist(self, key: str) -> list: ...


def _form_value(f: Field, data: FormData) -> Any:
    if f.kind == CHOICES:
        # Nothing ticked is no answer (a required one is then "is required").
        return list(data.getlist(f.name)) or None
    if f.kind == BOOLEAN:
        # A checkbox is absent when unticked: false, not a missing answer.
        return data.get(f.name) not in (None, "", "false", "off")
    raw = data.get(f.name)
    if raw is None or raw == "":
        return None
    if f.kind in (NUMBER, INTEGER):
        try:
            number = float(raw)
        except ValueError:
            return raw  # `check` says what is wrong with it
        return int(number) if f.kind == INTEGER and number.is_integer() else number
    if (
        f.kind == TEXT
        and f.format == "date-time"
        and re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2})?", raw)
    ):
        # A browser's datetime-local has no zone; the person's answer is taken as UTC.
        return raw + ("Z" if raw.count(":") == 2 else ":00Z")
    return raw


def from_form(schema: Any, data: FormData) -> dict:
    """The content a submitted form means, typed as the schema asks (empty fields left out);
    check it with `check`."""
    content = {}
    for f in fields(schema):
        value = _form_value(f, data)
        if value is not None:
            content[f.name] = value
    return content
