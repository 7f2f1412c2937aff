"""Forms of the browser console: server add/edit, import, tokens, replies, history filters, and
the "try it" arguments built from a tool's input schema. A server's name and config are checked
by the API's own contract (`mcpcore.schemas`), so the UI and `/v1` accept exactly the same servers."""

import json
from typing import Any

from django import forms

from .. import files, schemas, serverconfig
from ..choices import HISTORY_KINDS, AuditAction, CallDecision, CallStatus, TokenRole, Transport
from ..models import SECRET_MASK, View, transport_of

TRANSPORT_CHOICES = [
    (Transport.STDIO, "stdio (a command)"),
    (Transport.STREAMABLE_HTTP, "HTTP (streamable)"),
    (Transport.SSE, "SSE (legacy HTTP)"),
]


def parse_pairs(text: str, sep: str, what: str) -> dict[str, str]:
    """`KEY<sep>VALUE` lines into a dict; blank lines are skipped. An empty value means "keep
    the stored one" (the secret mask), which on a new server is simply empty."""
    pairs: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        key, found, value = line.partition(sep)
        key = key.strip()
        if not found or not key:
            raise forms.ValidationError(f"line {number}: expected {what}")
        value = value.strip()
        pairs[key] = value if value else SECRET_MASK
    return pairs


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


SANDBOX_CHOICES = [
    ("", "as the console says (AGENVOY_SANDBOX)"),
    ("on", "on"),
    ("off", "off"),
]


def _sandbox_walls(data: dict) -> dict:
    """The sandbox object of a stdio server's form: only what was given."""
    walls: dict = {}
    for key in ("read", "write"):
        paths = _lines(data.get(f"sandbox_{key}") or "")
        if paths:
            walls[key] = paths
    if data.get("sandbox_network"):
        walls["network"] = True
    return walls


class ServerForm(forms.Form):
    """One server of mcp.json. Secret values (env, headers) are write-only: the edit form shows
    the keys with empty values, and an empty value keeps what is stored."""

    name = forms.CharField(max_length=64, help_text="Letters, digits, - and _ (no __).")
    transport = forms.ChoiceField(choices=TRANSPORT_CHOICES, initial=Transport.STDIO)
    command = forms.CharField(required=False)
    args = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "wrap": "off"}),
        help_text="One argument per line.",
    )
    env = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "wrap": "off"}),
        help_text="KEY=VALUE, one per line.",
    )
    url = forms.CharField(required=False, label="URL")
    headers = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "wrap": "off"}),
        help_text="Name: value, one per line.",
    )
    timeout = forms.FloatField(
        required=False, min_value=1, label="Call timeout (seconds)", help_text="Empty: the console's default."
    )
    disabled = forms.BooleanField(required=False, help_text="Kept in mcp.json but not connected.")
    # SPEC 26: left out, the console's AGENVOY_SANDBOX decides; on or off is written down.
    sandbox = forms.ChoiceField(
        choices=SANDBOX_CHOICES,
        required=False,
        help_text="Runs the server under bubblewrap: it reads the system and its own files, nothing else.",
    )
    sandbox_read = forms.CharField(
        required=False,
        label="Sandbox: may read",
        widget=forms.Textarea(attrs={"rows": 2, "wrap": "off"}),
        help_text="Absolute paths, one per line.",
    )
    sandbox_write = forms.CharField(
        required=False,
        label="Sandbox: may write",
        widget=forms.Textarea(attrs={"rows": 2, "wrap": "off"}),
        help_text="Absolute paths, one per line.",
    )
    sandbox_network = forms.BooleanField(
        required=False, label="Sandbox: network", help_text="Without it the server reaches no network at all."
    )

    def __init__(self, *args, editing: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.editing = editing
        if editing:
            self.fields["name"].disabled = True
            for key in ("env", "headers"):
                self.fields[key].help_text += " Values are not shown: leave one empty to keep it."

    def clean_name(self) -> str:
        try:
            return schemas.server_name(self.cleaned_data["name"])
        except schemas.InputError as exc:
            raise forms.ValidationError(exc.message) from None

    def clean_env(self) -> dict[str, str]:
        return parse_pairs(self.cleaned_data["env"], "=", "KEY=VALUE")

    def clean_headers(self) -> dict[str, str]:
        return parse_pairs(self.cleaned_data["headers"], ":", "Name: value")

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        transport = data.get("transport")
        if transport == Transport.STDIO and not (data.get("command") or "").strip():
            self.add_error("command", "A stdio server needs a command.")
        elif transport == Transport.STDIO and data.get("sandbox") != "on" and _sandbox_walls(data):
            self.add_error("sandbox", "Paths to read and write and the network apply when the sandbox is on.")
        elif transport in (Transport.STREAMABLE_HTTP, Transport.SSE) and not (data.get("url") or "").strip():
            self.add_error("url", "An HTTP server needs a URL.")
        if not self.errors:
            try:
                self.config = serverconfig.clean_config(self._config(data))
            except serverconfig.ServerConfigError as exc:
                raise forms.ValidationError(str(exc)) from None
        return data

    @staticmethod
    def _config(data: dict) -> dict:
        transport = data["transport"]
        config: dict = {"type": transport}
        if transport == Transport.STDIO:
            config["command"] = data["command"].strip()
            args = _lines(data.get("args") or "")
            if args:
                config["args"] = args
            if data.get("env"):
                config["env"] = data["env"]
            if data.get("sandbox") == "on":
                config["sandbox"] = _sandbox_walls(data) or True
            elif data.get("sandbox") == "off":
                config["sandbox"] = False
        else:
            config["url"] = data["url"].strip()
            if data.get("headers"):
                config["headers"] = data["headers"]
        if data.get("timeout"):
            timeout = data["timeout"]
            config["timeout"] = int(timeout) if timeout == int(timeout) else timeout
        if data.get("disabled"):
            config["disabled"] = True
        return config

    @staticmethod
    def initial_from(name: str, config: dict) -> dict:
        """Initial values for editing: secret values never leave the server."""
        env, headers, args = config.get("env"), config.get("headers"), config.get("args")
        env = env if isinstance(env, dict) else {}
        headers = headers if isinstance(headers, dict) else {}
        args = args if isinstance(args, list) else []

        sandbox = config.get("sandbox")
        walls = sandbox if isinstance(sandbox, dict) else {}
        return {
            "name": name,
            "transport": transport_of(config) or Transport.STDIO,
            "command": config.get("command") or "",
            "args": "\n".join(str(a) for a in args),
            "env": "".join(f"{k}=\n" for k in env),
            "url": config.get("url") or "",
            "headers": "".join(f"{k}: \n" for k in headers),
            "timeout": config.get("timeout"),
            "disabled": bool(config.get("disabled")),
            "sandbox": "" if sandbox is None else "off" if sandbox is False else "on",
            "sandbox_read": "\n".join(str(p) for p in walls.get("read") or []),
            "sandbox_write": "\n".join(str(p) for p in walls.get("write") or []),
            "sandbox_network": walls.get("network") is True,
        }


class ImportForm(forms.Form):
    """An `mcpServers` / `servers` JSON document, uploaded or pasted."""

    file = forms.FileField(required=False, label="JSON file")
    text = forms.CharField(
        required=False, label="…or paste the JSON", widget=forms.Textarea(attrs={"rows": 8})
    )

    MAX_BYTES = 1_048_576

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        upload = data.get("file")
        if upload is not None:
            if upload.size > self.MAX_BYTES:
                raise forms.ValidationError("the file is larger than 1 MiB")
            raw = upload.read()
        else:
            raw = (data.get("text") or "").encode()
        if not raw.strip():
            raise forms.ValidationError("choose a file or paste the JSON")
        self.servers = servers_from_json(raw)
        return data


def servers_from_json(raw: bytes | str) -> dict[str, dict]:
    """The servers of an import document, each checked like a server posted to the API."""
    try:
        document = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise forms.ValidationError(f"not valid JSON: {exc}") from None
    try:
        found = files.import_shape(document)
    except files.ConfigFileError as exc:
        raise forms.ValidationError(str(exc)) from None
    out = {}
    for name, config in found.items():
        try:
            out[name] = serverconfig.clean_config(config)
        except serverconfig.ServerConfigError as exc:
            raise forms.ValidationError(f"server {name}: {exc}") from None
    return out


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100)
    # Left out (an old form, a script), a new token gets the least rights: agent.
    role = forms.ChoiceField(choices=TokenRole.choices, initial=TokenRole.AGENT, required=False, label="Role")
    # Unticked (SPEC 12.2): a token made with the defaults keeps every untrusted call waiting.
    may_auto = forms.BooleanField(required=False, initial=False, label="May use auto mode")
    # None chosen: the token sees every tool; some: only theirs (SPEC 19), for its whole life.
    views = forms.ModelMultipleChoiceField(
        queryset=View.objects.order_by("name"), to_field_name="name", required=False, label="Views"
    )


# A page's reply buttons, named after the decision each records, as the body `calls.reply` takes.
REPLIES: dict[str, dict[str, object]] = {
    CallDecision.APPROVE: {"approve": True},
    CallDecision.REMEMBER: {"approve": True, "remember": True},
    CallDecision.SESSION: {"approve": True, "allow_turn": True},
    "hour": {"approve": True, "remember_for": 3600},  # SPEC 17.3
    CallDecision.DENY: {"approve": False},
}


class ReplyForm(forms.Form):
    """A person's answer to a pending confirmation, as the body `calls.reply` takes."""

    session_id = forms.CharField(max_length=200)
    action = forms.ChoiceField(choices=[(k, k) for k in REPLIES])
    reason = forms.CharField(required=False, max_length=2000)

    def body(self) -> dict:
        body = dict(REPLIES[self.cleaned_data["action"]])
        if self.cleaned_data["action"] == CallDecision.DENY and self.cleaned_data["reason"].strip():
            body["reason"] = self.cleaned_data["reason"].strip()
        return body


# The History page's names for the kinds of `choices.HISTORY_KINDS` (SPEC 20.3).
KIND_LABELS = {
    "tool": "Tool",
    "prompt": "Prompt",
    "resource": "Resource",
    "permission_prompt": "Permission prompt",
}


class HistoryFilter(forms.Form):
    server = forms.CharField(required=False)
    tool = forms.CharField(required=False)
    status = forms.ChoiceField(required=False, choices=[("", "any status"), *CallStatus.choices])
    session = forms.CharField(required=False, max_length=200)
    kind = forms.ChoiceField(
        required=False,
        choices=[("", "any kind"), *((k, KIND_LABELS[k]) for k in HISTORY_KINDS)],
    )


class AuditFilter(forms.Form):
    """The Audit page's filters (SPEC 22.2): an action, an actor (exact), and a time window
    (`since` inclusive, `until` exclusive; a time without a zone is UTC)."""

    action = forms.ChoiceField(required=False, choices=[("", "any action"), *AuditAction.choices])
    actor = forms.CharField(required=False, max_length=200)
    # Plain text fields for ISO times: a datetime-local input's segments each take a Tab stop
    # and keep the focus ring off the field, and its width does not shrink to a phone's.
    since = forms.DateTimeField(
        required=False, widget=forms.TextInput(attrs={"placeholder": "2026-12-01T00:00"})
    )
    until = forms.DateTimeField(
        required=False, widget=forms.TextInput(attrs={"placeholder": "2026-12-02T00:00"})
    )


# --- "try it": arguments from a tool's input schema ---------------------------------------------

SIMPLE_TYPES = ("string", "number", "integer", "boolean")


def schema_fields(schema: dict) -> list[dict]:
    """One input per top-level property: simple ones get a typed input, the rest a JSON box."""
    props = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(props, dict):
        return []
    required = set(schema.get("required") or [])
    fields = []
    for key, spec in props.items():
        spec = spec if isinstance(spec, dict) else {}
        kind = spec.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), None)
        enum = spec.get("enum") if isinstance(spec.get("enum"), list) else None
        fields.append(
            {
                "key": key,
                "input": f"arg:{key}",
                "kind": kind if kind in SIMPLE_TYPES else "json",
                "enum": [str(v) for v in enum] if enum and kind == "string" else None,
                "required": key in required,
                "description": spec.get("description") or "",
                "default": spec.get("default"),
            }
        )
    return fields


def arguments_from(schema: dict, post) -> dict:
    """The call's arguments from the try-it form; the raw JSON box wins when filled in.
    Raises ValueError with a message for the person."""
    raw = (post.get("raw_json") or "").strip()
    if raw:
        try:
            value = json.loads(raw)
        except ValueError as exc:
            raise ValueError(f"arguments are not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise ValueError("arguments must be a JSON object")
        return value
    args: dict = {}
    for field in schema_fields(schema):
        text = post.get(field["input"], "")
        if text == "":
            continue
        args[field["key"]] = _convert(field, text)
    return args


def _convert(field: dict, text: str):
    kind, key = field["kind"], field["key"]
    if kind == "string":
        return text
    if kind == "boolean":
        return text == "true"
    if kind == "integer":
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{key} must be a whole number") from None
    if kind == "number":
        try:
            number = float(text)
        except ValueError:
            raise ValueError(f"{key} must be a number") from None
        return int(number) if number.is_integer() and "." not in text else number
    try:
        return json.loads(text)
    except ValueError:
        raise ValueError(f"{key} must be JSON") from None
