"""CallToolResult -> the one string an agent receives (SPEC section 4); GetPromptResult and
ReadResourceResult -> the text a person reads in the history (SPEC 20.3).

Pure functions over the MCP wire format: a CallToolResult as a JSON-style dict
(``content``, ``isError``, ``structuredContent``), e.g. what
``result.model_dump(mode="json", by_alias=True, exclude_none=True)`` gives. No
Django and no ``mcp`` imports, so it is tested without a server.

Decisions the SPEC leaves open:

- Presence of a text-contributing item counts as "text", even if it is ``""``:
  a tool that printed nothing gets ``""``, not its raw result as JSON.
- Empty content and no ``structuredContent`` returns the whole result as JSON
  (e.g. ``{"content": [], "isError": false}``), as the SPEC says.
- An embedded *blob* resource contributes a line with its URI, like a link:
  the agent learns it exists without receiving base64 it cannot use.
- In an image/audio object, keys follow content order (``image_0``,
  ``audio_0``, ``image_1`` ...), numbered per kind; ``text`` is always present
  and always last, so the truncation marker always has a home.
- Items of an unknown type are skipped.
"""

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

RESULT_CAP = 1_048_576

_MEDIA_KINDS = ("image", "audio")
# An object with no media and empty text must fit, or no valid JSON can.
_MIN_CAP = 16


@dataclass(frozen=True)
class Converted:
    """What an agent receives: ``text`` is final (capped), ``total_bytes`` uncapped."""

    text: str
    is_error: bool
    truncated: bool
    total_bytes: int


@dataclass(frozen=True)
class _Parts:
    text: str
    has_text: bool
    media: list[tuple[str, str]]  # (key such as "image_0", data URL), content order


def convert(result: dict, cap: int = RESULT_CAP) -> Converted:
    """Convert a CallToolResult dict and apply the byte cap.

    Results with media are capped inside their JSON object; everything else
    (text, error text, structured JSON) is cut as plain text.
    """
    if cap < _MIN_CAP:
        raise ValueError(f"cap must be at least {_MIN_CAP} bytes, got {cap}")
    is_error = bool(result.get("isError"))
    parts = _collect(result)
    if parts.media and not is_error:
        full = _dumps(_media_object(parts.media, parts.text))
        total = _byte_len(full)
        if total <= cap:
            return Converted(full, False, False, total)
        return Converted(_cap_media(parts, cap, total), False, True, total)
    full = _plain(result, parts, is_error)
    text, truncated = cap_text(full, cap)
    return Converted(text, is_error, truncated, _byte_len(full))


def converted_full(result: dict) -> str:
    """The uncapped converted string, as kept in the call history."""
    parts = _collect(result)
    is_error = bool(result.get("isError"))
    if parts.media and not is_error:
        return _dumps(_media_object(parts.media, parts.text))
    return _plain(result, parts, is_error)


def cap_text(text: str, cap: int = RESULT_CAP) -> tuple[str, bool]:
    """Keep at most ``cap`` UTF-8 bytes, cut on a character boundary, then the marker.

    Returns ``(text, truncated)``. Lone surrogates (possible after decoding JSON
    with ``\\ud800`` escapes) become ``?`` so the result is always valid UTF-8.
    """
    data = text.encode("utf-8", "replace")
    if len(data) <= cap:
        return data.decode("utf-8"), False
    end = cap
    # data[end] is the first byte dropped; if it continues a character, that
    # character started inside the kept part: back off to its first byte.
    while end > 0 and data[end] & 0xC0 == 0x80:
        end -= 1
    return data[:end].decode("utf-8") + _marker(len(data), end), True


def _collect(result: dict) -> _Parts:
    """Split content into joined text and media data URLs, in content order."""
    lines: list[str] = []
    media: list[tuple[str, str]] = []
    counts = dict.fromkeys(_MEDIA_KINDS, 0)
    for item in result.get("content") or []:
        kind = item.get("type")
        if kind in _MEDIA_KINDS:
            mime = item.get("mimeType") or "application/octet-stream"
            url = _clean(f"data:{mime};base64,{item.get('data', '')}")
            media.append((f"{kind}_{counts[kind]}", url))
            counts[kind] += 1
        elif (line := _text_of(item)) is not None:
            lines.append(_clean(line))
    return _Parts("\n".join(lines), bool(lines), media)


def _text_of(item: dict) -> str | None:
    """The text an item contributes, or None if it contributes no text."""
    kind = item.get("type")
    if kind == "text":
        return str(item.get("text", ""))
    if kind == "resource_link":
        return str(item.get("uri", ""))
    if kind == "resource":
        resource = item.get("resource") or {}
        if "text" in resource:
            return str(resource["text"])
        return str(resource.get("uri", ""))
    return None


def _plain(result: dict, parts: _Parts, is_error: bool) -> str:
    """The uncapped string for a result without (kept) media."""
    if is_error:
        return f"tool error: {parts.text}" if parts.text else "tool error"
    if parts.has_text:
        return parts.text
    if result.get("structuredContent") is not None:
        return _clean(_dumps(result["structuredContent"]))
    return _clean(_dumps(result))


def _cap_media(parts: _Parts, cap: int, total: int) -> str:
    """Cap a media object without breaking its JSON.

    The marker goes at the end of ``text``, where JSON escapes its two
    newlines: the object without the marker may use ``cap`` minus that extra,
    so the final string is at most ``cap + len(marker)`` bytes. ``kept`` in the
    marker is the byte length of that object without the marker, so it
    compares directly with ``total``.
    """
    budget = cap - _marker_escape_overhead()
    media = _fitting_media(parts.media, budget)
    room = budget - _byte_len(_dumps(_media_object(media, "")))
    text = _fitting_prefix(parts.text, room)
    kept = _byte_len(_dumps(_media_object(media, text)))
    return _dumps(_media_object(media, text + _marker(total, kept)))


def _fitting_media(media: list[tuple[str, str]], budget: int) -> list[tuple[str, str]]:
    """The longest prefix of media whose object (with empty text) fits the budget."""
    # Each entry adds `"key": "value", ` to the object; measured from a
    # one-entry object so the escaping is exactly json.dumps's.
    size = _byte_len(_dumps(_media_object([], "")))
    for count, (key, url) in enumerate(media):
        size += _byte_len(_dumps({key: url})) - len("{}") + len(_SEPARATORS[0])
        if size > budget:
            return media[:count]
    return media


def _fitting_prefix(text: str, room: int) -> str:
    """The longest prefix of text whose JSON-escaped form is at most room bytes."""
    # Escaped size grows with the prefix length, so binary search applies.
    low, high = 0, len(text)
    while low < high:
        mid = (low + high + 1) // 2
        if _escaped_len(text[:mid]) <= room:
            low = mid
        else:
            high = mid - 1
    return text[:low]


def _media_object(media: list[tuple[str, str]], text: str) -> dict[str, str]:
    return {**dict(media), "text": text}


def _marker(total: int, kept: int) -> str:
    return f"\n\n[mcp output truncated: {total} bytes total, {kept} kept]"


def _marker_escape_overhead() -> int:
    # The marker's numbers and words are ASCII, so only its newlines grow.
    marker = _marker(0, 0)
    return _escaped_len(marker) - len(marker)


# One fixed style for every JSON string, so byte budgets computed on pieces
# match the final string: json.dumps's default separators (as in the SPEC's
# example) and ensure_ascii=False, so non-ASCII text costs its UTF-8 bytes
# rather than six-byte \uXXXX escapes.
_SEPARATORS = (", ", ": ")


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=_SEPARATORS, default=str)


def _escaped_len(text: str) -> int:
    return _byte_len(_dumps(text)) - len('""')


def _byte_len(text: str) -> int:
    return len(text.encode("utf-8"))


def _clean(text: str) -> str:
    # Lone surrogates cannot be encoded as UTF-8; replace them with "?".
    return text.encode("utf-8", "replace").decode("utf-8")


# --- prompts and resources (SPEC 20.3): the history's text ---------------------------------------


def prompt_text(result: dict) -> str:
    """A GetPromptResult dict as the history shows it: each message as `<role>: <text>`,
    joined by newlines; content that is not text is a one-line placeholder."""
    lines = []
    for message in result.get("messages") or []:
        content = message.get("content")
        items = content if isinstance(content, list) else [content or {}]
        text = "\n".join(_placeholder(item) for item in items if isinstance(item, dict))
        lines.append(f"{message.get('role', '')}: {text}")
    return _clean("\n".join(lines))


def resource_text(result: dict) -> str:
    """A ReadResourceResult dict as the history shows it: the text contents joined by
    newlines, a blob as `[blob <mimeType>, <n> bytes]`."""
    lines = []
    for item in result.get("contents") or []:
        if "text" in item:
            lines.append(str(item["text"]))
        elif "blob" in item:
            lines.append(
                f"[blob {item.get('mimeType') or 'application/octet-stream'}, {_blob_size(item['blob'])} bytes]"
            )
    return _clean("\n".join(lines))


def _placeholder(item: dict) -> str:
    """A content item's text, or a one-line stand-in for what is not text."""
    kind = item.get("type")
    if kind == "text":
        return str(item.get("text", ""))
    if kind in _MEDIA_KINDS:
        return f"[{kind} {item.get('mimeType') or 'application/octet-stream'}]"
    if kind == "resource_link":
        return f"[resource_link {item.get('uri', '')}]"
    if kind == "resource":
        resource = item.get("resource") or {}
        if "text" in resource:
            return str(resource["text"])
        return f"[resource {resource.get('uri', '')}]"
    return f"[{kind}]"


def _blob_size(blob: object) -> int:
    """The decoded size of a base64 blob (a malformed one counts its characters)."""
    try:
        return len(base64.b64decode(str(blob), validate=False))
    except (binascii.Error, ValueError):
        return len(str(blob))
