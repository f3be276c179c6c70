from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from rekall.kernel.errors import InvalidInput
from rekall.store import MAX_HANDOFF_BYTES, read_handoff_file, validate_handoff

from tests.jobkit import handoff


def _size(value: dict) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def _rejected(value, field: str) -> InvalidInput:
    with pytest.raises(InvalidInput) as caught:
        validate_handoff(value)
    assert caught.value.field == field, caught.value.message
    return caught.value


def test_a_valid_handoff_comes_back_normalised():
    assert validate_handoff(handoff()) == handoff()
    assert validate_handoff(handoff(resume=False))["nextStep"] == ""


@pytest.mark.parametrize(("value", "field"), [
    (None, "handoff"),
    (["summary"], "handoff"),
    ({**handoff(), "extra": 1}, "handoff.extra"),
    ({k: v for k, v in handoff().items() if k != "discard"}, "handoff.discard"),
    (handoff(summary="   "), "handoff.summary"),
    (handoff(summary=7), "handoff.summary"),
    (handoff(preserve="one string"), "handoff.preserve"),
    (handoff(preserve=["ok", " "]), "handoff.preserve"),
    (handoff(discard=[1]), "handoff.discard"),
    (handoff(resume="true"), "handoff.resume"),
    (handoff(resume=1), "handoff.resume"),
    (handoff(nextStep="  "), "handoff.nextStep"),
    (handoff(resume=False, nextStep=None), "handoff.nextStep"),
    (handoff(summary="bad \ud800 text"), "handoff.summary"),
])
def test_each_rule_names_the_field_it_rejects(value, field):
    _rejected(value, field)


def test_forty_list_items_pass_and_forty_one_do_not():
    validate_handoff(handoff(preserve=["x"] * 40))
    _rejected(handoff(preserve=["x"] * 41), "handoff.preserve")


def test_thirty_two_thousand_cyrillic_letters_are_too_many_bytes():
    error = _rejected(handoff(summary="я" * 32_000), "handoff")
    assert "32000" in error.message


def test_a_handoff_of_exactly_the_byte_limit_is_accepted_and_one_more_byte_is_not():
    base = handoff(summary="")
    exact = handoff(summary="x" * (MAX_HANDOFF_BYTES - _size(base)))
    assert _size(exact) == MAX_HANDOFF_BYTES
    validate_handoff(exact)
    _rejected(handoff(summary=exact["summary"] + "x"), "handoff")


def test_a_handoff_file_is_read_as_json(tmp_path: Path):
    path = tmp_path / "h.json"
    path.write_text(json.dumps(handoff()), encoding="utf-8-sig")  # a BOM from a Windows editor is fine
    assert read_handoff_file(path) == handoff()


@pytest.mark.parametrize(("content", "words"), [
    (b"\xff\xfe{}", "not UTF-8"),
    (b'{"summary": ', "not JSON"),
    (b"", "not JSON"),
])
def test_a_handoff_file_that_is_not_utf8_json_gets_a_clear_error(tmp_path: Path, content: bytes, words: str):
    path = tmp_path / "h.json"
    path.write_bytes(content)
    with pytest.raises(InvalidInput, match=words) as caught:
        read_handoff_file(path)
    assert caught.value.field == "--handoff" and caught.value.hint
    assert path.read_bytes() == content


def test_a_missing_handoff_file_is_named(tmp_path: Path):
    with pytest.raises(InvalidInput, match="cannot read the handoff file"):
        read_handoff_file(tmp_path / "nope.json")


@pytest.mark.parametrize(("content", "words"), [
    (b"null", "holds JSON null, not an object"),
    (b"[]", "holds JSON an array, not an object"),
    (b'"summary"', "holds JSON a string, not an object"),
    (b"[" * 1500 + b"]" * 1500, "nested deeper than 64 levels"),
    (b'{"summary": "a\x01b"}', "Invalid control character at line 1 column 15"),
])
def test_a_handoff_file_that_is_not_one_json_object_is_refused_naming_the_problem(tmp_path, content, words):
    path = tmp_path / "h.json"
    path.write_bytes(content)
    with pytest.raises(InvalidInput) as caught:
        read_handoff_file(path)
    assert words in caught.value.message and " at at " not in caught.value.message
    assert caught.value.field == "--handoff" and caught.value.hint


def test_a_handoff_file_that_reports_no_size_but_never_ends_is_refused_after_a_bounded_read():
    # /dev/zero reports a size of 0; only the bytes actually read can bound it.
    with pytest.raises(InvalidInput, match="larger than 1000000 bytes"):
        read_handoff_file("/dev/zero")


def test_a_fifo_nobody_writes_to_is_refused_once_the_wait_is_over(tmp_path: Path):
    fifo = tmp_path / "handoff.fifo"
    os.mkfifo(fifo)
    with pytest.raises(InvalidInput, match=r"did not arrive: nothing wrote it and closed it within 0.2 s") as caught:
        read_handoff_file(fifo, wait_s=0.2)
    assert caught.value.field == "--handoff" and "--handoff -" in str(caught.value.hint)


def test_a_fifo_that_is_written_and_closed_is_read_whole(tmp_path: Path):
    fifo = tmp_path / "handoff.fifo"
    os.mkfifo(fifo)
    text = json.dumps(handoff())
    writer = threading.Thread(target=fifo.write_text, args=(text,))
    writer.start()
    try:
        assert read_handoff_file(fifo, wait_s=30) == handoff()
    finally:
        writer.join(timeout=30)


def test_a_key_given_twice_in_a_handoff_file_is_refused_not_silently_the_last(tmp_path: Path):
    path = tmp_path / "handoff.json"
    path.write_text('{"summary": "first", "summary": "second", "preserve": [], "discard": [], '
                    '"nextStep": "", "resume": false}')
    with pytest.raises(InvalidInput, match="has the key summary twice in one object"):
        read_handoff_file(path)


def test_an_unknown_key_is_named_only_when_it_cannot_be_a_value_in_disguise():
    assert _rejected({**handoff(), "extra": 1}, "handoff.extra").message.startswith("unknown handoff field extra;")
    secret_key = "sk-proj-Zq9Xw8Vu7Ts6Rq5Po4Nm3Lk2"
    error = _rejected({**handoff(), secret_key: 1}, "handoff.<key>")
    assert secret_key not in str(error) and secret_key not in str(error.to_dict())


@pytest.mark.parametrize(("character", "kind"), [
    ("\x00", "a C0 control character"), ("\r", "a C0 control character"), ("\x07", "a C0 control character"),
    ("\x7f", "a C0 control character"), ("\x1b", "an escape character (ESC"), ("\x9b", "a C1 control character"),
    ("\x85", "a C1 control character"), ("\u202e", "a bidirectional control character"),
    ("\u2066", "a bidirectional control character"), ("\u200f", "a bidirectional control character"),
    ("\u200b", "a zero-width character"), ("\u200d", "a zero-width character"), ("\ufeff", "a zero-width character"),
    ("\u2060", "a zero-width character"),
])
@pytest.mark.parametrize("field", ["summary", "nextStep", "preserve", "discard"])
def test_a_handoff_with_a_control_bidi_or_zero_width_character_is_refused_naming_the_field_and_class(
        character, kind, field):
    text = f"Run the tests{character}[31m, then stop."
    value = handoff(**{field: [text] if field in ("preserve", "discard") else text})
    error = _rejected(value, f"handoff.{field}[0]" if field in ("preserve", "discard") else f"handoff.{field}")
    assert kind in error.message and f"U+{ord(character):04X} at character 14" in error.message
    assert character not in error.message and "[31m" not in error.message


def test_tabs_newlines_and_ordinary_unicode_are_kept():
    text = "Steps:\n\t1. run pytest\n\t2. fix naïve café → 完成 ✅ (العربية, עברית)"
    assert validate_handoff(handoff(summary=text))["summary"] == text
