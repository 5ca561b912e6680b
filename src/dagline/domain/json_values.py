"""Bounded JSON: the one reader of JSON text people and programs give dagline (`--conf`, `--conf-file`,
`--value`, the web UI's forms, the API's bodies) and the one checker of values that arrive parsed already
(a signal value, a run's conf, a spec's params).

The rules, each refused with an `InvalidJson` (an `InvalidInput`: exit 2, HTTP 422, or 413 when over its
size) whose message names the field, and the place inside the value (`a.b[0]`) where there is one:
- size: at most `max_bytes` bytes of UTF-8 (a text as given; a value as compact JSON);
- nesting: at most `max_depth` levels of arrays and objects (`[]` is one level, `{"a": [1]}` two), found
  on the text before it is parsed, so no depth ever makes the parser recurse;
- text: valid UTF-8; no lone surrogate (the escape `"\\ud800"` decodes to one), no NUL character
  (PostgreSQL text cannot hold it), in strings and in keys alike; strings of at most MAX_STRING_LENGTH
  characters;
- numbers: finite (no NaN, no Infinity, no `1e999`), integers within [MIN_JSON_INTEGER, MAX_JSON_INTEGER].
Pure: no I/O, no dagline import above `errors` and `limits`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from itertools import accumulate
from typing import Any

from dagline.errors import InvalidInput
from dagline.limits import MAX_JSON_INTEGER, MAX_NESTING_DEPTH, MAX_STRING_LENGTH, MIN_JSON_INTEGER

# A JSON string, its closing quote optional: an unterminated string runs to the end of the text (the parser
# stops there, so the brackets inside it never nest), and no quote is scanned twice.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_SURROGATE = re.compile("[\ud800-\udfff]")
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]{1,64}")
# An integer literal of 20 digits or more (not a float's digits): out of range whatever its digits.
_LONG_INTEGER = re.compile(r"(?<![\d.eE+-])-?\d{%d,}(?![\d.eE])" % (len(str(MAX_JSON_INTEGER)) + 1))
_KINDS = {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number",
          bool: "true or false", type(None): "null"}


class InvalidJson(InvalidInput):
    """JSON text, or a JSON-like value, that breaks a rule of this module. `field` names the input, `at`
    the place inside it (empty: the whole value); `http_status` is 413 when it is over its size, else 422."""

    def __init__(self, reason: str, *, field: str, at: str = "", too_large: bool = False):
        super().__init__(f"{at}: {reason}" if at else reason, field=field)
        self.at = at
        self.http_status = 413 if too_large else 422


def read_json(text: str | bytes, field: str, *, max_bytes: int, max_depth: int = MAX_NESTING_DEPTH) -> Any:
    """The value of a JSON text, every rule checked; else InvalidJson naming `field`."""
    value = parse_json(text, field, max_bytes=max_bytes, max_depth=max_depth)
    check_value(value, field, max_depth=max_depth)
    return value


def read_json_object(text: str | bytes, field: str, *, max_bytes: int,
                     max_depth: int = MAX_NESTING_DEPTH) -> dict[str, Any]:
    """`read_json` of a text that must hold an object (a conf)."""
    value = read_json(text, field, max_bytes=max_bytes, max_depth=max_depth)
    if not isinstance(value, dict):
        raise InvalidJson(f'must be a JSON object, e.g. {{"out": "/tmp/x"}}, not {_KINDS[type(value)]}', field=field)
    return value


def parse_json(text: str | bytes, field: str, *, max_bytes: int, max_depth: int = MAX_NESTING_DEPTH) -> Any:
    """The text's own rules only (size, UTF-8, nesting, syntax, NaN and infinities, the integer range): for a
    container whose parts the caller checks with `check_value` under their own names (the API's body)."""
    if isinstance(text, (bytes, bytearray)):
        if len(text) > max_bytes:
            raise _too_large(len(text), max_bytes, field)
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidJson(f"not valid UTF-8: {exc.reason} at byte {exc.start:,}", field=field) from None
    else:
        bad = _SURROGATE.search(text)  # undecodable bytes of a command line arrive as lone surrogates
        if bad:
            raise InvalidJson(f"not valid UTF-8: a lone surrogate ({_escape(bad.group())}) at character "
                              f"{bad.start():,}", field=field)
        size = len(text.encode("utf-8"))
        if size > max_bytes:
            raise _too_large(size, max_bytes, field)
    bare = _STRING.sub("", text)  # what the parser reads outside strings
    if _levels(bare) > max_depth:
        raise InvalidJson(_too_deep(max_depth), field=field)
    long = _LONG_INTEGER.search(bare)  # out of range before it is converted (Python converts up to 4,300 digits)
    if long:
        raise InvalidJson(_integer_out_of_range(long.group()), field=field)

    def refuse_constant(name: str):
        raise InvalidJson(f"not valid JSON: {name} is not a JSON number (NaN and infinities are refused)",
                          field=field)

    try:
        return json.loads(text, parse_constant=refuse_constant)
    except ValueError as exc:  # JSONDecodeError
        raise InvalidJson(f"not valid JSON: {exc}", field=field) from None


def nesting(text: str) -> int:
    """Levels of arrays and objects in a JSON text, counted on its brackets outside strings (no parsing)."""
    return _levels(_STRING.sub("", text))


def _levels(bare: str) -> int:
    return max(accumulate(map(_STEP.__getitem__, _NOT_BRACKET.sub("", bare))), default=0)


def check_value(value: Any, field: str, *, max_depth: int = MAX_NESTING_DEPTH, max_bytes: int | None = None) -> None:
    """A value that did not come as JSON text (or that is part of one), held to the same rules; with
    `max_bytes`, its compact UTF-8 JSON is bounded too. Else InvalidJson naming `field` and the place."""
    if max_bytes is not None:
        compact_text(value, field, max_bytes=max_bytes, max_depth=max_depth)
        return
    _check(value, field, max_depth=max_depth, max_bytes=None)


def compact_text(value: Any, field: str, *, max_bytes: int, max_depth: int = MAX_NESTING_DEPTH) -> str:
    """The value as compact JSON text (as stored), after `check_value`: at most `max_bytes` bytes of UTF-8."""
    _check(value, field, max_depth=max_depth, max_bytes=max_bytes)
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise _too_large(size, max_bytes, field)
    return text


def _check(value: Any, field: str, *, max_depth: int, max_bytes: int | None) -> None:
    problem = _first_problem(value, max_depth=max_depth, json_only=True, max_bytes=max_bytes)
    if problem is not None:
        reason, where, too_large = problem
        raise InvalidJson(reason, field=field, at=place(where), too_large=too_large)


def value_problem(value: Any, *, max_depth: int = MAX_NESTING_DEPTH, json_only: bool = True) -> str | None:
    """Why a value is refused (with its place), or None. `json_only=False` lets through what a YAML loader
    builds and the caller turns into JSON itself (dates, keys that are numbers)."""
    problem = _first_problem(value, max_depth=max_depth, json_only=json_only, max_bytes=None)
    if problem is None:
        return None
    reason, where, _ = problem
    at = place(where)
    return f"{at}: {reason}" if at else reason


def _first_problem(value: Any, *, max_depth: int, json_only: bool,
                   max_bytes: int | None) -> tuple[str, tuple, bool] | None:
    """(reason, where, over the size) of an item that breaks a rule, else None. Iterative: safe on any depth.
    `where` is a linked path, (parent's where, key or index), made readable by `place`. The common types
    are checked inline: this runs on every value the API receives."""
    # The compact size's lower bound, spent on strings as they are met: a huge value stops early.
    budget = math.inf if max_bytes is None else max_bytes
    too_large = f"more than {max_bytes:,} bytes of JSON (the limit is {max_bytes:,} bytes)" if max_bytes else ""
    pending: list[tuple[Any, int, tuple]] = [(value, 0, ())]  # (item, levels of the collections around it, where)
    while pending:
        item, level, where = pending.pop()
        if isinstance(item, (list, tuple)):
            pairs, is_object = enumerate(item), False
        elif isinstance(item, dict) or (not json_only and isinstance(item, Mapping)):
            pairs, is_object = item.items(), True
        else:
            if isinstance(item, str):
                budget -= len(item) + 2
                if budget < 0:
                    return too_large, (), True
            reason = _scalar_problem(item, json_only)
            if reason:
                return reason, where, False
            continue
        if level >= max_depth:
            return _too_deep(max_depth), where, False
        nested = []
        for key, child in pairs:
            if is_object:
                if type(key) is str:
                    budget -= len(key) + 3
                    if budget < 0:
                        return too_large, (), True
                    bad_key = len(key) > MAX_STRING_LENGTH or "\x00" in key or _SURROGATE.search(key)
                    reason = _string_problem(key, "a key") if bad_key else None
                elif json_only:
                    reason = f"an object's keys are strings, not {type(key).__name__}"
                else:  # a key YAML built (1, a date): the caller makes it a string
                    reason = _scalar_problem(key, json_only)
                    key = str(key)
                if reason:
                    return reason, where, False
            kind = type(child)
            if kind is str:
                budget -= len(child) + 2
                if budget < 0:
                    return too_large, (), True
                if len(child) > MAX_STRING_LENGTH or "\x00" in child or _SURROGATE.search(child):
                    return _string_problem(child, "a string"), (where, key), False
            elif kind is int:
                if child > MAX_JSON_INTEGER or child < MIN_JSON_INTEGER:
                    return _integer_out_of_range(str(child)), (where, key), False
            elif kind is float:
                if not math.isfinite(child):
                    return _not_finite(child), (where, key), False
            elif child is None or kind is bool:
                continue
            elif isinstance(child, (list, tuple, dict)) or (not json_only and isinstance(child, Mapping)):
                nested.append((child, level + 1, (where, key)))
            else:
                pending.append((child, level + 1, (where, key)))  # a subclass or another type: the slow path
        pending.extend(reversed(nested))
    return None


def _scalar_problem(item: Any, json_only: bool) -> str | None:
    if isinstance(item, str):
        return _string_problem(item, "a string")
    if item is None or isinstance(item, bool):
        return None
    if isinstance(item, int):
        return None if MIN_JSON_INTEGER <= item <= MAX_JSON_INTEGER else _integer_out_of_range(str(item))
    if isinstance(item, float):
        return None if math.isfinite(item) else _not_finite(item)
    return f"{type(item).__name__} is not a JSON type" if json_only else None


def string_problem(text: str, what: str = "the text", *, bounded: bool = True) -> str | None:
    """Why a string is refused (too long, a NUL character, a lone surrogate), or None: the text rules of
    every value dagline reads, JSON or not (`input_values.read_text`). `bounded=False` leaves the length to
    the caller (a `--conf` text is bounded by its bytes, not as one string)."""
    return _string_problem(text, what, bounded=bounded)


def _string_problem(text: str, what: str, *, bounded: bool = True) -> str | None:
    if bounded and len(text) > MAX_STRING_LENGTH:
        return (f"{what} of {len(text):,} characters (the limit is {MAX_STRING_LENGTH:,} characters per "
                "string)")
    if "\x00" in text:
        return f"a NUL character (\\u0000) in {what}: PostgreSQL text cannot hold it"
    bad = _SURROGATE.search(text)
    if bad:
        return (f"a lone surrogate ({_escape(bad.group())}) in {what}: it is not a Unicode character (a "
                "\\ud800-\\udbff escape must be followed by a \\udc00-\\udfff one)")
    return None


def place(where: tuple) -> str:
    """A linked path, (parent's where, key or index), as `path` names it."""
    steps = []
    while where:
        where, step = where
        steps.append(step)
    return path(*reversed(steps))


def path(*steps: str | int) -> str:
    """Keys and indexes as the API names fields: `value.a[0]`, `[3].key` (empty for the whole value). A key
    that is not plain is quoted with every odd character escaped: a name never carries what it refuses."""
    text = ""
    for step in steps:
        if isinstance(step, int):
            text += f"[{step}]"
        elif _PLAIN_KEY.fullmatch(step):
            text += f".{step}" if text else step
        else:
            text += f"[{json.dumps(step if len(step) <= 64 else step[:61] + '...')}]"
    return text


def _escape(character: str) -> str:
    return f"\\u{ord(character):04x}"


def _too_large(size: int, max_bytes: int, field: str) -> InvalidJson:
    return InvalidJson(f"{size:,} bytes of JSON (the limit is {max_bytes:,} bytes)", field=field, too_large=True)


def _too_deep(max_depth: int) -> str:
    return f"nested more than {max_depth} levels deep (the limit is {max_depth} levels)"


def _not_finite(number: float) -> str:
    return f"{number} is not a JSON number (NaN and infinities are refused)"


def _integer_out_of_range(literal: str) -> str:
    shown = literal if len(literal) <= 30 else f"{literal[:12]}... ({len(literal.lstrip('-')):,} digits)"
    return f"the integer {shown} is out of range (the limit is {MIN_JSON_INTEGER:,} to {MAX_JSON_INTEGER:,})"
