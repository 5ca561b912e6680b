"""Validation problems as users read them: YAML paths (`spec.tasks[0].id`) and one `InvalidInput` for all."""

from __future__ import annotations

import difflib
import json
import re
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any

from pydantic import BaseModel, ValidationError

from dagline.errors import InvalidInput

_IDENTIFIER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # fullmatch


def format_path(loc: Iterable[str | int]) -> str:
    """A pydantic location as YAML readers write it: ``spec.tasks[0].spark.conf["spark.x"]``."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif _IDENTIFIER_RE.fullmatch(part):
            path += f".{part}" if path else part
        else:
            path += f"[{json.dumps(part)}]"
    return path


def _unwrap(annotation: Any) -> Any:
    """`X | None` and `Annotated[X, ...]` -> X."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
            if len(args) != 1:
                return annotation
            annotation = args[0]
        else:
            return annotation


def _field_names_at(model: type[BaseModel], loc: Sequence[str | int]) -> list[str]:
    """The YAML keys allowed at `loc` inside `model` (empty if `loc` does not lead to a model)."""
    current: Any = model
    for part in loc:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = next((f for n, f in current.model_fields.items() if part in (n, f.alias)), None)
            if field is None:
                return []
            current = field.annotation
        elif typing.get_origin(current) in (list, dict):
            current = typing.get_args(current)[-1]
        else:
            return []
    current = _unwrap(current)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [field.alias or name for name, field in current.model_fields.items()]
    return []


def _describe(error: Mapping[str, Any], model: type[BaseModel]) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        known = _field_names_at(model, error["loc"][:-1])
        close = difflib.get_close_matches(str(error["loc"][-1]), known, n=1)
        if close:
            return f"unknown field (did you mean {close[0]!r}?)"
        return f"unknown field (expected one of: {', '.join(known)})" if known else "unknown field"
    if kind == "missing":
        return "required field is missing"
    if kind in ("value_error", "assertion_error") and "error" in error.get("ctx", {}):
        return str(error["ctx"]["error"])
    value = error.get("input")
    if isinstance(value, (str, int, float, bool)) or value is None:
        return f"{error['msg']} (got {shorten(value)})"
    return error["msg"]


def invalid_input(
    exc: ValidationError, model: type[BaseModel], source: str | None, prefix: Sequence[str] = ()
) -> InvalidInput:
    """All of pydantic's errors in one InvalidInput: the first one's path is `field`.

    Unknown fields come first: a misspelt key is usually also the cause of a "missing" error.
    """
    errors = sorted(exc.errors(), key=lambda error: error["type"] != "extra_forbidden")
    problems = [(format_path([*prefix, *error["loc"]]), _describe(error, model)) for error in errors]
    return problems_error(problems, source)


def problems_error(problems: Sequence[tuple[str, str]], source: str | None) -> InvalidInput:
    """One error for several problems: the first names its field, each further line its own."""
    (field, message), rest = problems[0], problems[1:]
    lines = [message] + [f"{path}: {text}" if path else text for path, text in rest]
    return InvalidInput("\n".join(lines), field=field or None, source=source)


def dag_label(dag_id: Any, source: str | None) -> str | None:
    """How errors name a DAG: ``sales-daily (examples/sales/dag.yaml)``."""
    if isinstance(dag_id, str) and dag_id:
        if not dag_id.isprintable() or len(dag_id) > _SHOWN:
            dag_id = shorten(dag_id)  # a hostile name: quoted, so a newline cannot break the message
        return f"{dag_id} ({source})" if source else dag_id
    return source


_SHOWN = 80  # characters of a value shown in a message


def shorten(value: Any) -> str:
    """`repr(value)`, cut to about 80 characters: a 5,000-character id is not repeated whole in its error."""
    text = repr(value)
    if len(text) <= _SHOWN:
        return text
    if isinstance(value, str):
        return f"{text[:_SHOWN - 20]}...{text[-12:]} ({len(value):,} characters)"
    return f"{text[:_SHOWN - 3]}..."
