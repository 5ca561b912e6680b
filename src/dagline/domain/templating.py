"""Sandboxed Jinja templates in a task's Spark arguments and conf values.

Templates are checked when a DAG is loaded (`check_template`: it parses, and names only known
variables) and rendered when a task instance is launched (`build_context`, `render_spark`).
The environment is Jinja's immutable sandbox with `StrictUndefined`: a template cannot reach Python
internals, cannot mutate `params` or `conf`, and a missing attribute is an error rather than an
empty string that would quietly become a wrong Spark argument. A value that is a function or a
method (`{{ params.items }}`, a forgotten `()`) is an error too, not its `repr`.

Bounds (a template is the user's, so it may be hostile or careless): Jinja folds constant
expressions when it compiles, so `{{ 'x' * 10**10 }}` would run out of memory while a spec is merely
*loaded*. Here every binary operator is intercepted (so never folded) and checked when it runs,
every filter is marked as needing the render context (so never folded), and at run time an operator,
filter or method call whose result would exceed `OUTPUT_BUDGET` (1 MiB), or a number of more than
`MAX_NUMBER_BITS` bits, is refused; the output itself is counted as it streams. Time cannot be bounded
inside a thread (`{% for i in range(99999) %}{% for j in range(99999) %}` never yields), so the
scheduler renders in a separate process it kills after `TIME_BUDGET_S` (`dagline.scheduler.renderer`).

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
from jinja2.compiler import CodeGenerator
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError
from jinja2.utils import _PassArg

from dagline.errors import DaglineError
from dagline.limits import TEMPLATE_MAX_NUMBER_BITS, TEMPLATE_OUTPUT_BUDGET, TEMPLATE_TIME_BUDGET_S

TEMPLATE_VARIABLES = frozenset({
    "ds", "ds_nodash", "logical_date", "data_interval_start", "data_interval_end",
    "run_id", "dag_id", "dag_namespace", "task_id", "try_number", "params", "conf", "signal",
})

TIME_BUDGET_S = TEMPLATE_TIME_BUDGET_S  # per template, enforced by the renderer process (a thread cannot be stopped)
OUTPUT_BUDGET = TEMPLATE_OUTPUT_BUDGET  # characters a template (or any value inside it) may produce: 1 MiB
MAX_NUMBER_BITS = TEMPLATE_MAX_NUMBER_BITS  # integers a template computes


class TemplateBudgetExceeded(SecurityError, DaglineError):
    """A template tried to produce more than a budget allows: the DAG's fault (exit 2, 422)."""

    exit_code = 2
    http_status = 422


class NotAValue(SecurityError, DaglineError):
    """A template output a function or method instead of a value: the DAG's fault (exit 2, 422)."""

    exit_code = 2
    http_status = 422


def _size(value: Any) -> int | None:
    return len(value) if isinstance(value, (str, bytes, list, tuple)) else None


def _check_result_size(value: Any, what: str) -> Any:
    size = _size(value)
    if size is not None and size > OUTPUT_BUDGET:
        raise TemplateBudgetExceeded(f"{what} would make {size:,} items, over the output budget of "
                                     f"{OUTPUT_BUDGET:,} characters")
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_NUMBER_BITS:
        raise TemplateBudgetExceeded(f"{what} makes a number of {value.bit_length():,} bits "
                                     f"(at most {MAX_NUMBER_BITS:,})")
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _refuse_large_arguments(what: str, args, kwargs) -> None:
    """An integer argument above the output budget (a width, a count) can only make a huge value."""
    for value in (*args, *kwargs.values()):
        if _is_int(value) and abs(value) > OUTPUT_BUDGET:
            raise TemplateBudgetExceeded(f"{what} called with {value:,}, over the output budget of "
                                         f"{OUTPUT_BUDGET:,} characters")


class _BoundedCodeGenerator(CodeGenerator):
    """Compiles `a ~ b` to a call that checks the size of the result before building it."""

    def visit_Concat(self, node: nodes.Concat, frame) -> None:
        self.write("environment.bounded_concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox, with every operator and filter run (and checked) at render time only."""

    intercepted_binops = frozenset({"+", "-", "*", "/", "//", "%", "**"})
    code_generator_class = _BoundedCodeGenerator

    @staticmethod
    def bounded_concat(values) -> str:
        texts = [str(value) for value in values]
        size = sum(map(len, texts))
        if size > OUTPUT_BUDGET:
            raise TemplateBudgetExceeded(f"'~' would make {size:,} characters, over the output budget of "
                                         f"{OUTPUT_BUDGET:,}")
        return "".join(texts)

    def __init__(self, **options: Any):
        super().__init__(**options)
        self.filters = {name: _guarded_filter(name, f) for name, f in self.filters.items()}

    def call_binop(self, context, operator: str, left: Any, right: Any) -> Any:
        what = f"'{operator}'"
        if operator == "**" and _is_int(left) and _is_int(right) and right > 0 and abs(left) > 1:
            if left.bit_length() * right > MAX_NUMBER_BITS:
                raise TemplateBudgetExceeded(f"{left} ** {right} is too large a number (more than "
                                             f"{MAX_NUMBER_BITS:,} bits)")
        if operator == "*":
            sizes = (_size(left), _size(right))
            counts = (right, left)
            for size, count in zip(sizes, counts, strict=True):
                if size is not None and _is_int(count) and size * count > OUTPUT_BUDGET:
                    raise TemplateBudgetExceeded(f"a sequence of {size:,} items times {count:,} is over the output "
                                                 f"budget of {OUTPUT_BUDGET:,} characters")
            if _is_int(left) and _is_int(right) and left.bit_length() + right.bit_length() > MAX_NUMBER_BITS:
                raise TemplateBudgetExceeded(f"a product of more than {MAX_NUMBER_BITS:,} bits")
        if operator == "%" and isinstance(left, str):
            _refuse_wide_formats(left)
        return _check_result_size(super().call_binop(context, operator, left, right), what)

    def call(__self, __context, __obj, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 - Jinja's spelling
        name = getattr(__obj, "__name__", "a function")
        bound_to = getattr(getattr(__obj, "__wrapped__", __obj), "__self__", None)  # the sandbox wraps str.format
        if isinstance(bound_to, str) and name in ("format", "format_map"):
            _refuse_wide_formats(bound_to)
        if name not in ("range", "safe_range"):  # the sandbox bounds range() itself (100,000 items)
            _refuse_large_arguments(f"{name}()", args, kwargs)
        return _check_result_size(super().call(__context, __obj, *args, **kwargs), f"{name}()")


def _refuse_wide_formats(fmt: str) -> None:
    """`'%1000000000s' % x` and `'{:>1000000000}'.format(x)` pad to huge widths."""
    import re

    for number in re.findall(r"\d{7,}", fmt):
        if int(number) > OUTPUT_BUDGET:
            raise TemplateBudgetExceeded(f"format {fmt[:40]!r} asks for a width of {int(number):,}, over the "
                                         f"output budget of {OUTPUT_BUDGET:,} characters")


def _guarded_filter(name: str, func):
    """The filter, taking the render context: Jinja never calls such a filter while compiling (so a
    constant argument cannot make `check_template` run it), and its arguments and result are checked."""
    pass_arg = _PassArg.from_obj(func)

    @jinja2.pass_context
    def guarded(context, *args: Any, **kwargs: Any) -> Any:
        _refuse_large_arguments(f"filter {name}", args[1:], kwargs)
        if pass_arg is _PassArg.context:
            args = (context, *args)
        elif pass_arg is _PassArg.eval_context:
            args = (context.eval_ctx, *args)
        elif pass_arg is _PassArg.environment:
            args = (context.environment, *args)
        return _check_result_size(func(*args, **kwargs), f"filter {name}")

    guarded.__name__ = getattr(func, "__name__", name)
    return guarded


def _refuse_callables(value: Any) -> Any:
    """`{{ params.items }}` is a method, not a value: an error, never its repr in a Spark argument."""
    if callable(value) and not isinstance(value, jinja2.Undefined):
        what = getattr(value, "__name__", type(value).__name__)
        raise NotAValue(f"it outputs the function or method {what!r}, not a value (call it with `()`; for a "
                        f"key of that name write ['{what}'] instead of .{what})")
    return value


_ENV = BoundedSandbox(undefined=jinja2.StrictUndefined, autoescape=False, finalize=_refuse_callables)
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
    signal: Mapping[str, Any] | None = None,
    dag_namespace: str = "default",
) -> dict[str, Any]:
    """The variables a task's templates see; times are pendulum DateTimes in the DAG's time zone.
    `dag_id` is the DAG's name and `dag_namespace` its namespace (not `namespace`: Jinja's own
    `namespace()` keeps its name). `signal` is the signal that started the
    try (`key`, `value`, `seq`, `source`), or None."""
    local_logical_date = _in_zone(logical_date, timezone)
    return {
        "ds": local_logical_date.format("YYYY-MM-DD"),
        "ds_nodash": local_logical_date.format("YYYYMMDD"),
        "logical_date": local_logical_date,
        "data_interval_start": _in_zone(data_interval_start, timezone),
        "data_interval_end": _in_zone(data_interval_end, timezone),
        "run_id": run_id,
        "dag_id": dag_id,
        "dag_namespace": dag_namespace,
        "task_id": task_id,
        "try_number": try_number,
        "params": dict(params),
        "conf": dict(conf or {}),
        "signal": dict(signal) if signal is not None else None,
    }


def has_template(text: str) -> bool:
    """Whether `text` holds any Jinja markup (an expression, a statement or a comment)."""
    return "{{" in text or "{%" in text or "{#" in text


def render(text: str, context: Mapping[str, Any]) -> str:
    """Render one template within the output budget; any failure (undefined name, sandbox violation,
    a budget, ...) is a ValueError. The time budget is the caller's (see the module docstring)."""
    try:
        parts, size = [], 0
        for chunk in _compile(text).generate(context):
            size += len(chunk)
            if size > OUTPUT_BUDGET:
                raise TemplateBudgetExceeded(f"output over the budget of {OUTPUT_BUDGET:,} characters")
            parts.append(chunk)
        return "".join(parts)
    except TemplateBudgetExceeded as exc:
        raise ValueError(f"template {_short(text)} exceeds a bound: {exc}") from None
    except jinja2.TemplateError as exc:
        raise ValueError(f"cannot render template {_short(text)}: {exc}") from None
    except MemoryError:
        raise ValueError(f"template {_short(text)} ran out of memory") from None
    except Exception as exc:  # a template's own runtime error (1/0, bad method call): the user's to fix
        raise ValueError(f"cannot render template {_short(text)}: {type(exc).__name__}: {exc}") from None


def _short(text: str, limit: int = 120) -> str:
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text):,} characters)"


class TemplatedSpark(Protocol):
    """What rendering needs of a task's Spark section (`dagline.spec.SparkSpec` is one): the spec layer
    builds on this module to check templates, so this module does not import the spec."""

    arguments: Sequence[str]
    conf: Mapping[str, str]


def spark_templates(spark: TemplatedSpark) -> list[tuple[str, str]]:
    """A task's templates with where they are, in YAML spelling: (`spark.arguments[1]`, text)."""
    found = [(f"spark.arguments[{i}]", text) for i, text in enumerate(spark.arguments)]
    return found + [(f"spark.conf[{key!r}]", text) for key, text in spark.conf.items()]


def render_spark(spark: TemplatedSpark, context: Mapping[str, Any]) -> tuple[list[str], dict[str, str]]:
    """A task's Spark arguments and conf with every template rendered."""
    arguments = [render(argument, context) for argument in spark.arguments]
    conf = {key: render(value, context) for key, value in spark.conf.items()}
    return arguments, conf
