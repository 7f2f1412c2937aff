"""CallToolResult conversion and the output cap (SPEC section 4); prompt and resource results
as the history shows them (SPEC 20.3)."""

import base64
import json
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from mcpcore.results import (
    RESULT_CAP,
    Converted,
    cap_text,
    convert,
    converted_full,
    prompt_text,
    resource_text,
)

PNG = base64.b64encode(b"\x89PNG fake").decode()
WAV = base64.b64encode(b"RIFF fake").decode()


def text(value: str) -> dict:
    return {"type": "text", "text": value}


def image(data: str = PNG, mime: str = "image/png") -> dict:
    return {"type": "image", "data": data, "mimeType": mime}


def audio(data: str = WAV, mime: str = "audio/wav") -> dict:
    return {"type": "audio", "data": data, "mimeType": mime}


def marker(total: int, kept: int) -> str:
    return f"\n\n[mcp output truncated: {total} bytes total, {kept} kept]"


def result(*content: dict, **extra) -> dict:
    return {"content": list(content), "isError": False, **extra}


# --- conversion ---------------------------------------------------------------


def test_it_returns_the_text_of_one_text_item():
    assert convert(result(text("hello"))) == Converted("hello", False, False, 5)


def test_it_joins_text_items_with_newlines():
    assert convert(result(text("a"), text("b"))).text == "a\nb"


def test_it_keeps_an_empty_text_item_as_empty_text():
    assert convert(result(text(""))).text == ""


def test_it_prefixes_error_text():
    out = convert({"content": [text("something went wrong")], "isError": True})
    assert out.text == "tool error: something went wrong"
    assert out.is_error


def test_it_says_tool_error_when_an_error_has_no_content():
    out = convert({"content": [], "isError": True})
    assert (out.text, out.is_error) == ("tool error", True)


def test_it_returns_the_whole_result_as_json_when_content_is_empty():
    # No text, no media and no structuredContent: the SPEC's "(or the whole result)".
    raw = {"content": [], "isError": False}
    assert json.loads(convert(raw).text) == raw


def test_it_returns_structured_content_when_there_is_no_text():
    out = convert(result(structuredContent={"sum": 3, "name": "é"}))
    assert json.loads(out.text) == {"sum": 3, "name": "é"}
    assert "é" in out.text  # not \u00e9: bytes counted as the agent gets them


def test_it_prefers_text_over_structured_content():
    assert convert(result(text("3"), structuredContent={"sum": 3})).text == "3"


def test_it_carries_an_image_as_a_data_url_in_json():
    out = convert(result(text("look"), image()))
    assert json.loads(out.text) == {
        "image_0": f"data:image/png;base64,{PNG}",
        "text": "look",
    }
    assert out.text.startswith('{"image_0": ')


def test_it_numbers_images_and_audio_in_content_order_per_kind():
    out = convert(result(image("AA"), text("x"), audio(), image("BB", "image/jpeg")))
    obj = json.loads(out.text)
    assert list(obj) == ["image_0", "audio_0", "image_1", "text"]
    assert obj["image_0"] == "data:image/png;base64,AA"
    assert obj["image_1"] == "data:image/jpeg;base64,BB"
    assert obj["audio_0"] == f"data:audio/wav;base64,{WAV}"
    assert obj["text"] == "x"


def test_it_gives_media_without_text_an_empty_text():
    assert json.loads(convert(result(audio())).text)["text"] == ""


def test_it_drops_images_from_error_results():
    out = convert({"content": [text("bad"), image()], "isError": True})
    assert out.text == "tool error: bad"
    out = convert({"content": [image()], "isError": True})
    assert out.text == "tool error"


def test_it_adds_embedded_text_resources_and_resource_link_uris_as_lines():
    out = convert(
        result(
            text("intro"),
            {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "body"}},
            {"type": "resource_link", "uri": "file:///b.txt", "name": "b"},
            {"type": "resource", "resource": {"uri": "file:///c.bin", "blob": "AAAA"}},
        )
    )
    assert out.text == "intro\nbody\nfile:///b.txt\nfile:///c.bin"


def test_it_returns_the_uncapped_string_for_history():
    raw = result(text("x" * 100), image())
    assert converted_full(raw) == convert(raw).text
    assert len(converted_full(result(text("x" * 100)))) == 100
    assert convert(result(text("x" * 100)), cap=50).truncated


# --- cap on plain text -----------------------------------------------------------


def test_it_leaves_a_result_of_exactly_the_cap_unchanged():
    out = convert(result(text("a" * RESULT_CAP)))
    assert out.text == "a" * RESULT_CAP
    assert (out.truncated, out.total_bytes) == (False, RESULT_CAP)


def test_it_cuts_one_byte_over_the_cap_and_appends_the_marker():
    out = convert(result(text("a" * (RESULT_CAP + 1))))
    assert out.text == "a" * RESULT_CAP + marker(1048577, 1048576)
    assert out.text.endswith("\n\n[mcp output truncated: 1048577 bytes total, 1048576 kept]")
    assert (out.truncated, out.total_bytes) == (True, RESULT_CAP + 1)


def test_it_does_not_split_a_multibyte_character_at_the_cap():
    # "€" is 3 bytes; it starts 1 byte before the cap, so it must go entirely.
    value = "a" * (RESULT_CAP - 1) + "€" + "b"
    out = convert(result(text(value)))
    total = RESULT_CAP - 1 + 3 + 1
    assert out.text == "a" * (RESULT_CAP - 1) + marker(total, RESULT_CAP - 1)


def test_it_caps_error_text_too():
    out = convert({"content": [text("x" * 100)], "isError": True}, cap=20)
    assert out.text == "tool error: " + "x" * 8 + marker(112, 20)


def test_it_caps_plain_text_with_small_caps():
    assert cap_text("héllo", 2) == ("h" + marker(6, 1), True)
    assert cap_text("héllo", 3) == ("hé" + marker(6, 3), True)
    assert cap_text("héllo", 6) == ("héllo", False)


def test_it_replaces_lone_surrogates_so_output_is_utf8():
    out = convert(result(text("a\ud800b")))
    assert out.text == "a?b"


# --- cap on media results -----------------------------------------------------------


def _assert_capped_media(out: Converted, cap: int) -> dict:
    obj = json.loads(out.text)
    tail = obj["text"][obj["text"].index("\n\n[mcp output truncated:") :]
    assert len(out.text.encode()) <= cap + len(tail)
    total, kept = (int(word) for word in tail.split() if word.rstrip("]").isdigit())
    assert total == out.total_bytes
    # kept = the object as delivered, without the marker.
    without = dict(obj, text=obj["text"][: -len(tail)])
    assert kept == len(json.dumps(without, ensure_ascii=False).encode())
    return obj


def test_it_keeps_an_oversized_image_result_valid_json_within_the_bound():
    big = "A" * 400_000
    raw = result(text("t" * 500_000), image(big), image(big), image(big))
    out = convert(raw)
    assert out.truncated
    assert out.total_bytes == len(converted_full(raw).encode())
    obj = _assert_capped_media(out, RESULT_CAP)
    # Two images fit whole; the third does not, and the text fills what is left.
    assert list(obj) == ["image_0", "image_1", "text"]
    assert obj["image_0"] == obj["image_1"] == f"data:image/png;base64,{big}"
    assert obj["text"].startswith("t" * 200_000)


def test_it_cuts_the_text_of_a_media_result_to_fill_the_room():
    raw = result(text("t" * 2_000_000), image())
    out = convert(raw)
    obj = _assert_capped_media(out, RESULT_CAP)
    assert obj["image_0"] == f"data:image/png;base64,{PNG}"
    assert obj["text"].startswith("t" * 1_000_000)
    # Filled to the byte: cap + marker (whose two newlines escape to 4 bytes).
    tail = obj["text"][obj["text"].index("\n\n[") :]
    assert len(out.text.encode()) == RESULT_CAP + len(tail)


def test_it_keeps_escaped_text_in_a_capped_media_result_under_the_bound():
    # Quotes, newlines and control characters double or sextuple in JSON.
    raw = result(text('"\n\\\x01é' * 400_000), image())
    out = convert(raw)
    obj = _assert_capped_media(out, RESULT_CAP)
    assert obj["text"].startswith('"\n\\\x01é')


def test_it_refuses_a_cap_too_small_for_any_json_object():
    try:
        convert(result(text("x")), cap=3)
    except ValueError as error:
        assert "cap" in str(error)
    else:
        raise AssertionError("expected ValueError")


# --- properties ----------------------------------------------------------------------

_text_items = st.builds(text, st.text(max_size=80))
_media_items = st.one_of(
    st.builds(image, st.text("ABCD+/=", max_size=60)),
    st.builds(audio, st.text("ABCD+/=", max_size=60)),
)
_other_items = st.one_of(
    st.builds(lambda u: {"type": "resource_link", "uri": u}, st.text(max_size=20)),
    st.builds(
        lambda t: {"type": "resource", "resource": {"uri": "x:", "text": t}},
        st.text(max_size=40),
    ),
)
_results = st.builds(
    lambda content, is_error: {"content": content, "isError": is_error},
    st.lists(st.one_of(_text_items, _media_items, _other_items), max_size=6),
    st.booleans(),
)
_caps = st.integers(min_value=16, max_value=300)


def _marker_len(out: Converted) -> int:
    # The raw marker: its two newlines plus the bracketed part (JSON may escape
    # the newlines in the output, but the bound counts the marker itself).
    found = re.search(r"\[mcp output truncated: \d+ bytes total, \d+ kept\]", out.text)
    assert found
    return len("\n\n") + len(found.group())


@settings(max_examples=300, deadline=None)
@given(_results, _caps)
def test_it_never_exceeds_the_cap_plus_the_marker(raw, cap):
    out = convert(raw, cap)
    size = len(out.text.encode())
    if out.truncated:
        assert size <= cap + _marker_len(out)
    else:
        assert size <= cap
        assert out.text == converted_full(raw)


@settings(max_examples=300, deadline=None)
@given(_results, _caps)
def test_it_always_returns_valid_utf8(raw, cap):
    out = convert(raw, cap)
    assert out.text.encode("utf-8").decode("utf-8") == out.text


@settings(max_examples=300, deadline=None)
@given(st.lists(_media_items, min_size=1, max_size=4), st.text(max_size=300), _caps)
def test_it_keeps_image_results_valid_json(media, body, cap):
    out = convert(result(text(body), *media), cap)
    obj = json.loads(out.text)
    assert set(obj) <= {"text"} | {f"{k}_{i}" for k in ("image", "audio") for i in range(4)}
    assert list(obj)[-1] == "text"
    kept = obj["text"].split("\n\n[mcp output truncated:")[0]
    assert body.startswith(kept)
    assert out.truncated or kept == body


@given(st.text(max_size=200), st.integers(min_value=0, max_value=300))
def test_it_cuts_plain_text_to_a_prefix_on_a_character_boundary(value, cap):
    capped, truncated = cap_text(value, cap)
    if truncated:
        kept = capped[: capped.rindex("\n\n[mcp output truncated:")]
        assert value.startswith(kept)
        assert len(kept.encode()) <= cap
    else:
        assert capped == value


# --- prompts and resources (SPEC 20.3) ---------------------------------------------------------


def test_it_writes_each_prompt_message_as_role_and_text():
    result = {
        "description": "d",
        "messages": [
            {"role": "user", "content": text("Hello Ann.")},
            {"role": "assistant", "content": text("Hi.\nHow are you?")},
        ],
    }
    assert prompt_text(result) == "user: Hello Ann.\nassistant: Hi.\nHow are you?"


def test_it_writes_a_placeholder_line_for_prompt_content_that_is_not_text():
    result = {
        "messages": [
            {"role": "user", "content": image()},
            {"role": "user", "content": audio()},
            {"role": "user", "content": {"type": "resource_link", "uri": "file:///a", "name": "a"}},
            {"role": "user", "content": {"type": "resource", "resource": {"uri": "x://t", "text": "inline"}}},
            {"role": "user", "content": {"type": "resource", "resource": {"uri": "x://b", "blob": PNG}}},
        ]
    }
    assert prompt_text(result).split("\n") == [
        "user: [image image/png]",
        "user: [audio audio/wav]",
        "user: [resource_link file:///a]",
        "user: inline",
        "user: [resource x://b]",
    ]


def test_it_gives_an_empty_text_for_a_prompt_without_messages():
    assert prompt_text({"messages": []}) == "" and prompt_text({}) == ""


def test_it_joins_text_contents_and_sizes_blobs():
    blob = base64.b64encode(bytes(range(10))).decode()
    result = {
        "contents": [
            {"uri": "x://a", "mimeType": "text/plain", "text": "first"},
            {"uri": "x://b", "mimeType": "image/png", "blob": blob},
            {"uri": "x://c", "text": ""},
            {"uri": "x://d", "blob": "AAAA"},
        ]
    }
    assert (
        resource_text(result)
        == "first\n[blob image/png, 10 bytes]\n\n[blob application/octet-stream, 3 bytes]"
    )


def test_it_replaces_lone_surrogates_in_prompt_and_resource_text():
    assert prompt_text({"messages": [{"role": "user", "content": text("a\ud800b")}]}) == "user: a?b"
    assert resource_text({"contents": [{"uri": "x://a", "text": "a\ud800b"}]}) == "a?b"
