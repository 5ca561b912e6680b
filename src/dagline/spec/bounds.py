"""Size bounds of untrusted input, checked before the expensive work: on the YAML parser's event stream
(before any Python object is built) and by the iterative walk of JSON-like values in `domain.json_values`.

Neither check recurses, so a document nested 100,000 levels deep is refused in the time it takes to read
its first 49 levels instead of crashing the interpreter. Aliases are counted and their expansion is
measured without expanding them, so an alias bomb (a "billion laughs") is refused from a few kilobytes.
Every error names the bound (its value in `dagline.limits`) and what was found.
"""

from __future__ import annotations

from typing import Any

import yaml

from dagline.domain.json_values import value_problem
from dagline.errors import InvalidInput
from dagline.limits import (
    MAX_NESTING_DEPTH,
    MAX_STRING_LENGTH,
    MAX_TASKS_PER_DAG,
    MAX_YAML_ALIASES,
    MAX_YAML_DEPTH,
    MAX_YAML_NODES,
)
from dagline.spec.problems import dag_label

_Parser = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _where(event: yaml.Event) -> str:
    mark = event.start_mark
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


class _Open:
    """A collection being read: what the bounds need to know about it."""

    __slots__ = ("anchor", "start", "tallest", "is_map", "expect_key", "key", "path", "items")

    def __init__(self, anchor: str | None, start: int, is_map: bool, path: tuple | None):
        self.anchor, self.start, self.tallest = anchor, start, 0  # tallest: height of its tallest child
        self.is_map, self.expect_key, self.key = is_map, True, None
        self.path, self.items = path, 0  # path: keys from the document's root (None inside a list or key)


_TASKS_PATH = ("spec", "tasks")
_NAME_PATH = ("metadata", "name")


def check_yaml_bounds(text: str, source: str) -> None:
    """Refuse a YAML text that nests deeper than MAX_YAML_DEPTH, holds a scalar longer than
    MAX_STRING_LENGTH, uses more than MAX_YAML_ALIASES aliases, expands to more than MAX_YAML_NODES
    nodes, or lists more than MAX_TASKS_PER_DAG items under `spec.tasks` (counted here, before the
    tasks are built: building 20,000 of them takes seconds). Syntax errors are left to the loader, which
    reports them with their position."""
    depth = 0
    aliases = 0
    nodes = 0  # of the current document, each alias counted as the nodes it stands for
    # Height and depth count collections: a scalar has height 0, `[1]` height 1.
    stack: list[_Open] = []
    anchored: dict[str, tuple[int, int]] = {}  # anchor -> (nodes, height) of the node it names

    name = None  # metadata.name of the current document, to name the DAG in an error

    def place(event: yaml.Event) -> tuple | None:
        """Account for a node in its parent; return the node's path from the root if it is a mapping value."""
        nonlocal name
        if not stack:
            return ()
        parent = stack[-1]
        if parent.is_map:
            if parent.expect_key:
                parent.expect_key = False
                parent.key = event.value if isinstance(event, yaml.ScalarEvent) else None
                return None
            parent.expect_key = True
            path = parent.path + (parent.key,) if parent.path is not None and parent.key is not None else None
            if path == _NAME_PATH and isinstance(event, yaml.ScalarEvent):
                name = event.value
            return path
        parent.items += 1
        if parent.path == _TASKS_PATH and parent.items > MAX_TASKS_PER_DAG:
            raise InvalidInput(f"more than {MAX_TASKS_PER_DAG:,} tasks{_where(event)}: a DAG has at most "
                               f"{MAX_TASKS_PER_DAG:,} tasks", field="spec.tasks", source=dag_label(name, source))
        return None

    def close(anchor: str | None, size: int, height: int) -> None:
        if anchor is not None:
            anchored[anchor] = (size, height)
        if stack:
            stack[-1].tallest = max(stack[-1].tallest, height)

    try:
        for event in yaml.parse(text, Loader=_Parser):
            if isinstance(event, yaml.DocumentStartEvent):
                nodes, anchored, name = 0, {}, None
            elif isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                path = place(event)
                depth += 1
                nodes += 1
                if depth > MAX_YAML_DEPTH:
                    raise InvalidInput(
                        f"the YAML nests more than {MAX_YAML_DEPTH} levels deep{_where(event)} "
                        f"(the limit is {MAX_YAML_DEPTH} levels)", source=source)
                stack.append(_Open(event.anchor, nodes, isinstance(event, yaml.MappingStartEvent), path))
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
                done = stack.pop()
                close(done.anchor, nodes - done.start + 1, done.tallest + 1)
            elif isinstance(event, yaml.ScalarEvent):
                place(event)
                nodes += 1
                if len(event.value) > MAX_STRING_LENGTH:
                    raise InvalidInput(
                        f"a string of {len(event.value):,} characters{_where(event)} (the limit is "
                        f"{MAX_STRING_LENGTH:,} characters per string)", source=source)
                close(event.anchor, 1, 0)
            elif isinstance(event, yaml.AliasEvent):
                place(event)
                aliases += 1
                if aliases > MAX_YAML_ALIASES:
                    raise InvalidInput(
                        f"more than {MAX_YAML_ALIASES} YAML aliases (*name){_where(event)} (the limit is "
                        f"{MAX_YAML_ALIASES} per file)", source=source)
                size, height = anchored.get(event.anchor, (1, 0))  # unknown: the loader reports it
                if depth + height > MAX_YAML_DEPTH:
                    raise InvalidInput(
                        f"the alias *{event.anchor}{_where(event)} nests the YAML more than {MAX_YAML_DEPTH} "
                        f"levels deep (the limit is {MAX_YAML_DEPTH} levels)", source=source)
                nodes += size
                close(None, size, height)
            else:
                continue
            if nodes > MAX_YAML_NODES:
                raise InvalidInput(
                    f"the YAML expands to more than {MAX_YAML_NODES:,} values{_where(event)} once its aliases are "
                    f"expanded (the limit is {MAX_YAML_NODES:,} per document)", source=source)
    except yaml.YAMLError:
        return  # the loader reads the text again and reports the error with its position


def json_value_problem(value: Any, *, max_depth: int = MAX_NESTING_DEPTH) -> str | None:
    """Why a JSON-like value (params, a DagRun's conf) is refused, or None: the rules of
    `dagline.domain.json_values` (nesting, string length, NUL and lone surrogates, finite numbers, the
    integer range), letting through what YAML builds and the spec turns into JSON (dates, keys that are
    numbers). Iterative: safe on any depth."""
    return value_problem(value, max_depth=max_depth, json_only=False)
