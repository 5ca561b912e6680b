"""The one bounded JSON reader (`dagline.domain.json_values`): every rule at its bound and one beyond it,
for JSON text and for values that arrive parsed already, each refusal an `InvalidJson` (exit 2) naming the
field and the place inside the value, and a hostile input refused quickly without a RecursionError."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from dagline import limits
from dagline.domain.json_values import (
    InvalidJson,
    check_value,
    compact_text,
    nesting,
    parse_json,
    path,
    read_json,
    read_json_object,
    value_problem,
)
from dagline.errors import DaglineError, InvalidInput

pytestmark = pytest.mark.timeout(30)

DEPTH = limits.MAX_NESTING_DEPTH
BIG = limits.MAX_JSON_INTEGER
SMALL = limits.MIN_JSON_INTEGER


def refused(text, field="--conf", **bounds) -> InvalidJson:
    with pytest.raises(InvalidJson) as caught:
        read_json(text, field, max_bytes=bounds.pop("max_bytes", limits.MAX_JSON_BYTES), **bounds)
    error = caught.value
    assert error.field == field and str(error).startswith(f"{field}: ")
    return error


def refused_value(value, field="value", **bounds) -> InvalidJson:
    with pytest.raises(InvalidJson) as caught:
        check_value(value, field, **bounds)
    assert caught.value.field == field and str(caught.value).startswith(f"{field}: ")
    return caught.value


def nested(levels: int, inner: str = "1") -> str:
    return "[" * levels + inner + "]" * levels


def test_an_invalid_json_is_invalid_input_exit_2_and_422():
    error = refused("{nope")
    assert isinstance(error, InvalidInput) and isinstance(error, DaglineError)
    assert (error.exit_code, error.http_status) == (2, 422)
    assert error.reason.startswith("not valid JSON") and str(error) == f"--conf: {error.reason}"


# --- size -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("as_bytes", [False, True])
def test_the_size_is_counted_in_bytes_of_utf8(as_bytes):
    text = '"' + "é" * 4 + '"'  # 10 bytes, 6 characters
    given = text.encode() if as_bytes else text
    assert read_json(given, "--value", max_bytes=10) == "é" * 4
    error = refused(given, "--value", max_bytes=9)
    assert error.http_status == 413 and "10 bytes of JSON (the limit is 9 bytes)" in error.reason


def test_a_value_is_measured_as_compact_json_up_to_its_bound():
    at_bound = "x" * (limits.MAX_SIGNAL_VALUE_BYTES - 2)  # with its quotes: exactly the bound
    assert compact_text(at_bound, "value", max_bytes=limits.MAX_SIGNAL_VALUE_BYTES) == json.dumps(at_bound)
    error = refused_value(at_bound + "x", max_bytes=limits.MAX_SIGNAL_VALUE_BYTES)
    assert error.http_status == 413 and f"the limit is {limits.MAX_SIGNAL_VALUE_BYTES:,} bytes" in error.reason
    multibyte = {"k": "é" * 100}  # 208 bytes compact: 100 characters of 2 bytes
    assert compact_text(multibyte, "value", max_bytes=208) == '{"k":"' + "é" * 100 + '"}'
    assert "208 bytes of JSON" in refused_value(multibyte, max_bytes=207).reason


def test_a_huge_value_is_refused_before_it_is_encoded():
    error = refused_value(["x" * 1000] * 100_000, max_bytes=limits.MAX_SIGNAL_VALUE_BYTES)
    assert error.http_status == 413 and error.reason.startswith("more than 65,536 bytes")


# --- nesting ----------------------------------------------------------------------------------------------


def test_nesting_up_to_the_bound_is_read_and_one_more_level_is_refused():
    assert read_json(nested(DEPTH), "--conf", max_bytes=limits.MAX_JSON_BYTES) == json.loads(nested(DEPTH))
    assert f"nested more than {DEPTH} levels deep (the limit is {DEPTH} levels)" in refused(nested(DEPTH + 1)).reason
    objects = '{"a": ' * DEPTH + "1" + "}" * DEPTH
    assert read_json(objects, "--conf", max_bytes=limits.MAX_JSON_BYTES)["a"]["a"]
    assert "nested more than" in refused('{"a": ' * (DEPTH + 1) + "1" + "}" * (DEPTH + 1)).reason


@pytest.mark.parametrize("text", [
    "[" * 100_000,  # unclosed
    nested(100_000),
    '{"a":' * 100_000,
    '"x", ' + "[" * 100_000,
])
def test_deep_nesting_is_refused_before_the_parser_runs(text):
    """No RecursionError whatever the depth: the brackets are counted on the text first."""
    error = refused(text)
    assert "nested more than" in error.reason and error.at == ""


def test_brackets_inside_strings_do_not_nest():
    text = json.dumps(["[" * 1000, "{" * 1000, '\\"[[[', "]]]"])
    assert nesting(text) == 1
    assert read_json(text, "--conf", max_bytes=limits.MAX_JSON_BYTES)[0] == "[" * 1000
    assert nesting('["unterminated [[[[[[') == 1  # the parser stops at the open string


def test_a_text_of_escaped_quotes_is_scanned_in_linear_time():
    text = '"' + '\\"' * 500_000  # an unterminated string: every quote in it is escaped
    assert nesting(text) == 0
    assert "not valid JSON" in refused(text, max_bytes=2 * limits.MAX_JSON_BYTES).reason


def test_a_parsed_value_nested_too_deep_is_refused_without_recursion():
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    error = refused_value(deep)
    assert "nested more than" in error.reason
    assert check_value(json.loads(nested(DEPTH)), "value") is None


# --- text: UTF-8, lone surrogates, NUL, string length -------------------------------------------------------


@pytest.mark.parametrize("body", [b'"\xff"', b'"\xed\xa0\x80"', b'"\xc3"'])
def test_bytes_that_are_not_utf8_are_refused(body):
    assert "not valid UTF-8" in refused(body, "body").reason


def test_a_command_line_that_is_not_utf8_is_refused():
    """Python hands undecodable bytes of argv over as lone surrogates (surrogateescape)."""
    assert "not valid UTF-8: a lone surrogate (\\udcff) at character 1" in refused('"\udcff"').reason


@pytest.mark.parametrize("text, at, what", [
    ('"\\ud800"', "", "a string"),
    ('"\\udc00x"', "", "a string"),
    ('{"a": ["ok", "\\udbff"]}', "a[1]", "a string"),
    ('{"a": {"\\ud800": 1}}', "a", "a key"),
    ('{"\\udfff": 1}', "", "a key"),
])
def test_a_lone_surrogate_is_refused_in_strings_and_keys(text, at, what):
    error = refused(text)
    assert "a lone surrogate (\\u" in error.reason and f"in {what}" in error.reason
    assert error.at == at and (not at or str(error).startswith(f"--conf: {at}: "))
    str(error).encode("utf-8")  # the message carries an escape, never the character: it can be printed


def test_a_surrogate_pair_is_one_character_and_is_read():
    assert read_json('"\\ud83d\\ude00"', "--value", max_bytes=100) == "\U0001f600"


@pytest.mark.parametrize("text, at", [
    ('"\\u0000"', ""),
    ('{"a": "x\\u0000y"}', "a"),
    ('{"a\\u0000": 1}', ""),
    ('[[1, {"b": ["\\u0000"]}]]', "[0][1].b[0]"),
])
def test_a_nul_character_is_refused_anywhere(text, at):
    error = refused(text)
    assert "a NUL character (\\u0000)" in error.reason and "PostgreSQL" in error.reason and error.at == at


def test_a_string_up_to_the_bound_is_read_and_one_character_more_is_refused():
    at_bound = "y" * limits.MAX_STRING_LENGTH
    assert read_json(json.dumps({"s": at_bound}), "--conf", max_bytes=limits.MAX_JSON_BYTES)["s"] == at_bound
    error = refused(json.dumps({"s": at_bound + "y"}))
    assert f"a string of {limits.MAX_STRING_LENGTH + 1:,} characters" in error.reason and error.at == "s"
    assert "a key of" in refused(json.dumps({at_bound + "y": 1})).reason


# --- numbers ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, says", [
    ("NaN", "NaN is not a JSON number"),
    ("[Infinity]", "Infinity is not a JSON number"),
    ('{"a": -Infinity}', "-Infinity is not a JSON number"),
])
def test_nan_and_infinities_are_not_json(text, says):
    assert says in refused(text).reason


@pytest.mark.parametrize("text", ["1e999", "[-1e999]", '{"a": 1E400}'])
def test_a_number_too_large_for_a_float_is_refused(text):
    assert "inf is not a JSON number" in refused(text).reason


def test_integers_at_the_bounds_are_read_and_one_beyond_is_refused():
    assert read_json(f"[{BIG}, {SMALL}]", "--conf", max_bytes=100) == [BIG, SMALL]
    for beyond in (BIG + 1, SMALL - 1):
        error = refused(f'{{"n": {beyond}}}')
        assert f"the integer {beyond} is out of range" in error.reason and error.at == "n"
        assert f"{SMALL:,} to {BIG:,}" in error.reason


def test_an_integer_of_thousands_of_digits_is_refused_without_being_converted():
    error = refused("[" + "9" * 100_000 + "]")
    assert "(100,000 digits) is out of range" in error.reason
    assert "out of range" in refused("-" + "1" * 20).reason


def test_floats_with_many_digits_are_not_integers():
    text = "[1.00000000000000000000000001, 1e-0000000000000000000001, 123456789012345678901234.5]"
    assert read_json(text, "--conf", max_bytes=100)[0] == 1.0


def test_a_parsed_value_is_held_to_the_same_number_rules():
    assert "nan is not a JSON number" in refused_value({"a": float("nan")}).reason
    assert refused_value([1, float("-inf")]).at == "[1]"
    assert "out of range" in refused_value({"n": BIG + 1}).reason
    assert check_value([BIG, SMALL, True, None, 1.5], "value") is None


# --- types, objects, places -------------------------------------------------------------------------------


def test_a_parsed_value_must_be_made_of_json_types():
    assert "set is not a JSON type" in refused_value({"a": {1, 2}}).reason
    assert "keys are strings, not int" in refused_value({1: "a"}).reason
    assert check_value(("a", ["b"]), "value") is None  # a tuple is an array


def test_a_conf_must_be_an_object():
    assert read_json_object('{"a": 1}', "--conf", max_bytes=100) == {"a": 1}
    error = pytest.raises(InvalidJson, read_json_object, "[1]", "--conf", max_bytes=100).value
    assert "must be a JSON object" in error.reason and "not an array" in error.reason


def test_places_are_named_as_the_api_names_fields():
    assert path(3, "key") == "[3].key"
    assert path("value", "a", 0) == "value.a[0]"
    assert path("odd key") == '["odd key"]'
    assert path("\ud800") == '["\\ud800"]'  # escaped: a name never carries what it refuses


def test_parse_json_keeps_the_text_rules_and_leaves_the_values_to_their_checker():
    assert parse_json('{"value": "\\u0000"}', "body", max_bytes=100) == {"value": "\x00"}
    for text in ("{nope", "[NaN]", nested(DEPTH + 1), "[" + "9" * 30 + "]"):
        with pytest.raises(InvalidJson):
            parse_json(text, "body", max_bytes=1000, max_depth=DEPTH)


def test_yaml_values_pass_the_lenient_check_but_keep_its_rules():
    """`spec.params` comes from YAML: dates and numeric keys become JSON later; the rest holds."""
    assert value_problem({1: {"d": dt.date(2026, 1, 1)}}, json_only=False) is None
    assert value_problem({1: {"d": "\x00"}}, json_only=False) == ("1.d: a NUL character (\\u0000) in a string: "
                                                                  "PostgreSQL text cannot hold it")
    assert "nested more than" in value_problem(json.loads(nested(DEPTH + 1)), json_only=False)
