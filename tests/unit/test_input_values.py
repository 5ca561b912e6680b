"""`domain.input_values`: the one reader of texts and integers from outside JSON (URLs, forms, command
lines). What a person would notice: the number they meant, or a refusal naming the field that says why."""

from __future__ import annotations

import pytest

from dagline.domain.input_values import (
    MAX_INT64,
    MIN_INT64,
    first_text_problem,
    read_integer,
    read_text,
    text_problem,
)
from dagline.errors import InvalidInput


@pytest.mark.parametrize(("raw", "value"), [("0", 0), ("42", 42), ("-7", -7), ("007", 7),
                                            (str(MAX_INT64), MAX_INT64), (str(MIN_INT64), MIN_INT64), (5, 5)])
def test_integers_in_ascii_digits_within_a_bigint_are_read(raw, value):
    assert read_integer(raw, "n") == value


@pytest.mark.parametrize("raw", ["²", "٣", "１", "1_000", " 7", "7 ", "+7", "0x10", "1e3", "", "-", "1.0", "7\n"])
def test_anything_but_ascii_digits_is_refused_naming_the_field(raw):
    with pytest.raises(InvalidInput) as refused:
        read_integer(raw, "since")
    assert refused.value.field == "since" and "ASCII digits" in refused.value.reason


@pytest.mark.parametrize("raw", [str(MAX_INT64 + 1), str(MIN_INT64 - 1), "9" * 5000, MAX_INT64 + 1])
def test_integers_beyond_a_bigint_are_refused_without_converting_them(raw):
    with pytest.raises(InvalidInput) as refused:
        read_integer(raw, "seq")
    assert refused.value.field == "seq" and "9,223,372,036,854,775,807" in refused.value.reason


def test_the_caller_s_bounds_are_said_in_the_message():
    with pytest.raises(InvalidInput, match="must be from 1 to 10, got '11'"):
        read_integer("11", "limit", minimum=1, maximum=10)
    with pytest.raises(InvalidInput, match="must be at least 0"):
        read_integer("-1", "since", minimum=0)
    with pytest.raises(InvalidInput, match="not bool"):
        read_integer(True, "n")


@pytest.mark.parametrize(("raw", "words"), [("a\x00b", "NUL character"), ("a\ud800", "lone surrogate"),
                                            ("x\udcff", "not valid UTF-8: the byte 0xFF at character 1")])
def test_texts_with_nul_lone_surrogates_or_undecodable_bytes_are_refused(raw, words):
    with pytest.raises(InvalidInput) as refused:
        read_text(raw, "--id")
    assert refused.value.field == "--id" and words in refused.value.reason
    assert words.split(":")[0] in text_problem(raw, "the URL's path")


def test_texts_are_bounded_and_ordinary_unicode_passes():
    assert read_text("Zürich ² 東京 🚀", "name") == "Zürich ² 東京 🚀"
    with pytest.raises(InvalidInput, match="the limit is 5"):
        read_text("abcdef", "id", max_length=5)
    assert text_problem("fine") is None


def test_the_first_refused_string_of_a_document_is_found_with_its_place():
    document = {"spec": {"tasks": [{"id": "ok", "spark": {"arguments": ["--a", "x\x00y"]}},
                                   {"id": "b\ud800"}]}}
    where, reason = first_text_problem(document)
    assert where == "spec.tasks[0].spark.arguments[1]" and "NUL character" in reason
    assert first_text_problem({"spec": {"k\x00": 1}})[0] == "spec"
    assert first_text_problem({"spec": {"tasks": [{"id": "fine", "n": 3}]}}) is None
