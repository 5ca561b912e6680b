"""Bounded scalars: the one reader of the texts and numbers people and programs give dagline outside JSON
(a URL's path segments and query parameters, a form's fields, a header, a command's arguments), with the
same rules and messages as `json_values` (the reader of JSON values), whichever database is behind.

The rules, each refused with an `InvalidInput` (exit 2, HTTP 422) that names the field:
- a text is valid Unicode (no lone surrogate: undecodable bytes of a command line, `%ED%A0%80` or the
  escape `\\ud800`, arrive as one), holds no NUL character (PostgreSQL text cannot hold it) and has at most
  MAX_STRING_LENGTH characters (less where the caller says);
- an integer is written in ASCII digits (`0`-`9`, an optional `-`): `²` or `٣` pass `str.isdigit()` and
  some pass `int()`, and `1_000` or ` 7` pass `int()`; none of them is a number here. It lies within the
  caller's bounds, by default a signed 64-bit integer's (what a BIGINT column holds), so SQLite and
  PostgreSQL never see a number they would answer differently.
Pure: no I/O, no dagline import above `errors`, `limits` and `json_values`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from dagline.domain.json_values import place, string_problem
from dagline.errors import InvalidInput
from dagline.limits import MAX_JSON_INTEGER, MAX_STRING_LENGTH, MIN_JSON_INTEGER

MIN_INT64 = MIN_JSON_INTEGER
MAX_INT64 = MAX_JSON_INTEGER
_INTEGER = re.compile(r"-?[0-9]+")
_MAX_DIGITS = len(str(MAX_INT64))
_UNDECODABLE = re.compile("[\udc80-\udcff]")


def read_integer(raw: str | int, field: str, *, minimum: int = MIN_INT64, maximum: int = MAX_INT64) -> int:
    """The integer `raw` stands for (a text of ASCII digits, or an int), within [minimum, maximum]; else
    InvalidInput naming `field`."""
    if isinstance(raw, bool) or not isinstance(raw, (str, int)):
        raise InvalidInput(f"must be an integer, not {type(raw).__name__}", field=field)
    if isinstance(raw, str):
        if not _INTEGER.fullmatch(raw):
            raise InvalidInput(f"must be an integer written in ASCII digits (0-9), got {_shown(raw)}", field=field)
        if len(raw.lstrip("-").lstrip("0")) > _MAX_DIGITS:  # out of range whatever its digits: never converted
            raise InvalidInput(f"{_range(minimum, maximum)}, got an integer of {len(raw.lstrip('-')):,} digits",
                               field=field)
        value = int(raw)
    else:
        value = raw
    if not minimum <= value <= maximum:
        raise InvalidInput(f"{_range(minimum, maximum)}, got {_shown(str(value))}", field=field)
    return value


def read_text(raw: str, field: str, *, max_length: int | None = MAX_STRING_LENGTH) -> str:
    """`raw` if it is a text dagline may store and show (see the module's rules); else InvalidInput naming
    `field`. `max_length=None`: the caller bounds it otherwise (a JSON text by its bytes)."""
    if not isinstance(raw, str):
        raise InvalidInput(f"must be a text, not {type(raw).__name__}", field=field)
    if max_length is not None and len(raw) > max_length:
        raise InvalidInput(f"a text of {len(raw):,} characters (the limit is {max_length:,})", field=field)
    problem = text_problem(raw)
    if problem:
        raise InvalidInput(problem, field=field)
    return raw


def text_problem(raw: str, what: str = "the text") -> str | None:
    """Why `raw` would be refused by `read_text` (its length aside: the caller bounds it), or None, saying
    `what` it is: for a check that names the field itself (the API's URL check). Bytes that were not UTF-8, read as the
    surrogates U+DC80-U+DCFF (Python's command line, `surrogateescape`), are said to be that."""
    bad = _UNDECODABLE.search(raw)
    if bad:
        return f"{what} is not valid UTF-8: the byte 0x{ord(bad.group()) - 0xDC00:02X} at character {bad.start():,}"
    return string_problem(raw, what, bounded=False)


def first_text_problem(document: Any) -> tuple[str, str] | None:
    """(place, reason) of the first string or key in a parsed document (a spec, a resource's body) that
    `read_text` would refuse, its length aside (bounded where it is parsed), else None. Iterative: safe on
    any depth. The place is written as `json_values.path` writes it (`spec.tasks[0].spark.arguments[1]`)."""
    pending: list[tuple[Any, tuple]] = [(document, ())]
    while pending:
        item, where = pending.pop()
        if isinstance(item, str):
            problem = text_problem(item, "a string")
            if problem:
                return place(where), problem
        elif isinstance(item, Mapping):
            children = []
            for key, child in item.items():
                if isinstance(key, str):
                    problem = text_problem(key, "a key")
                    if problem:
                        return place(where), problem
                children.append((child, (where, str(key))))
            pending.extend(reversed(children))  # in the document's order
        elif isinstance(item, (list, tuple)):
            pending.extend(reversed([(child, (where, index)) for index, child in enumerate(item)]))
    return None


def _range(minimum: int, maximum: int) -> str:
    if maximum == MAX_INT64 and minimum != MIN_INT64:
        return f"must be at least {minimum:,} (and at most {maximum:,})"
    return f"must be from {minimum:,} to {maximum:,}"


def _shown(text: str) -> str:
    """The text as a message may quote it: short, every odd character escaped (the message never carries
    the NUL or the lone surrogate it refuses)."""
    short = text if len(text) <= 30 else text[:27] + "..."
    return repr(short)  # repr escapes NUL, lone surrogates and other unprintable characters
