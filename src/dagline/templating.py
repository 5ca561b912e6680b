"""Sandboxed Jinja templates in a task's Spark arguments and conf values.

Templates are checked when a DAG is loaded (`check_template`: it parses, and names only known
variables) and rendered when a task instance is launched (`build_context`, `render_spark`).
The environment is Jinja's immutable sandbox with `StrictUndefined`: a template cannot reach Python
internals, cannot mutate `params` or `conf`, and a missing attribute is an error rather than an
empty string that would quietly become a wrong Spark argument.

Dates follow the DAG's time zone: `ds` of a run at local midnight in Europe/Amsterdam is that
local day. (Airflow renders `ds` in UTC, which names the previous day for such a run.)
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import jinja2
import pendulum
from jinja2 import meta, nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

TEMPLATE_VARIABLES = frozenset({
    "ds", "ds_nodash", "logical_date", "data_interval_start", "data_interval_end",
    "run_id", "dag_id", "task_id", "try_number", "params", "conf",
})

_ENV = ImmutableSandboxedEnvironment(undefined=jinja2.StrictUndefined, autoescape=False)
# Jinja's own globals (range, dict, namespace, ...) are fine to use; find_undeclared_variables
# does not know about them.
_ALLOWED_NAMES = TEMPLATE_VARIABLES | frozenset(_ENV.globals)


@functools.lru_cache(maxsize=2048)
def _compile(text: str) -> jinja2.Template:
    return _ENV.from_string(text)


def _parse(text: str) -> nodes.Template:
    try:
        ast = _ENV.parse(text)
        _ENV.compile(ast)  # compiling also catches unknown filters and tests
    except jinja2.TemplateSyntaxError as exc:
        raise ValueError(f"template {text!r} does not parse: {exc.message} (line {exc.lineno})") from None
    return ast


def check_template(text: str) -> None:
    """Raise ValueError if `text` does not parse or names a variable outside `TEMPLATE_VARIABLES`."""
    ast = _parse(text)
    unknown = sorted(meta.find_undeclared_variables(ast) - _ALLOWED_NAMES)
    if unknown:
        raise ValueError(
            f"template {text!r} uses unknown variable{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} "
            f"(known: {', '.join(sorted(TEMPLATE_VARIABLES))})"
        )


def referenced_params(text: str) -> set[str]:
    """Names read from `params` with a constant key (`params.out`, `params['out']`) in a parsable template.

    Method calls such as `params.get('out', '/tmp')` are not reads of a param named `get`.
    """
    ast = _parse(text)
    called = {id(call.node) for call in ast.find_all(nodes.Call)}
    names = set()
    for node in ast.find_all((nodes.Getattr, nodes.Getitem)):
        if not (isinstance(node.node, nodes.Name) and node.node.name == "params") or id(node) in called:
            continue
        if isinstance(node, nodes.Getattr):
            names.add(node.attr)
        elif isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str):
            names.add(node.arg.value)
    return names


def _in_zone(value: dt.datetime, timezone: str) -> pendulum.DateTime:
    if value.tzinfo is None:  # dagline's naive times are UTC
        value = value.replace(tzinfo=dt.timezone.utc)
    return pendulum.instance(value).in_timezone(pendulum.timezone(timezone))


def build_context(
    *,
    dag_id: str,
    task_id: str,
    run_id: str,
    logical_date: dt.datetime,
    data_interval_start: dt.datetime,
    data_interval_end: dt.datetime,
    try_number: int,
    params: Mapping[str, Any],
    conf: Mapping[str, Any] | None,
    timezone: str = "UTC",
) -> dict[str, Any]:
    """The variables a task's templates see; times are pendulum DateTimes in the DAG's time zone."""
    local_logical_date = _in_zone(logical_date, timezone)
    return {
        "ds": local_logical_date.format("YYYY-MM-DD"),
        "ds_nodash": local_logical_date.format("YYYYMMDD"),
        "logical_date": local_logical_date,
        "data_interval_start": _in_zone(data_interval_start, timezone),
        "data_interval_end": _in_zone(data_interval_end, timezone),
        "run_id": run_id,
        "dag_id": dag_id,
        "task_id": task_id,
        "try_number": try_number,
        "params": dict(params),
        "conf": dict(conf or {}),
    }


def has_template(text: str) -> bool:
    """Whether `text` holds any Jinja markup (an expression, a statement or a comment)."""
    return "{{" in text or "{%" in text or "{#" in text


def render(text: str, context: Mapping[str, Any]) -> str:
    """Render one template; any failure (undefined name, sandbox violation, ...) is a ValueError."""
    try:
        return _compile(text).render(context)
    except jinja2.TemplateError as exc:
        raise ValueError(f"cannot render template {text!r}: {exc}") from None
    except Exception as exc:  # a template's own runtime error (1/0, bad method call): the user's to fix
        raise ValueError(f"cannot render template {text!r}: {type(exc).__name__}: {exc}") from None


class TemplatedSpark(Protocol):
    """What rendering needs of a task's Spark section (`dagline.spec.SparkSpec` is one): the spec layer
    builds on this module to check templates, so this module does not import the spec."""

    arguments: Sequence[str]
    conf: Mapping[str, str]


def render_spark(spark: TemplatedSpark, context: Mapping[str, Any]) -> tuple[list[str], dict[str, str]]:
    """A task's Spark arguments and conf with every template rendered."""
    arguments = [render(argument, context) for argument in spark.arguments]
    conf = {key: render(value, context) for key, value in spark.conf.items()}
    return arguments, conf
