"""The DAG spec: pydantic models of the YAML documents, their validation, and the resolved `Dag`.

Three layers, each built from the one before:

* Models (`DagDocument`, `DagSpec`, `TaskSpec`, `SparkSpec`, ..., plus `BackfillSpec`, `DagRunSpec`, `PoolSpec`)
  mirror the YAML exactly: camelCase keys, unknown keys refused. They are plain and structural because
  the Kubernetes CRD schemas are generated from them (`model_json_schema(by_alias=True)`).
* Checks that span fields (task graph, start/end dates, `params` used by templates) run on a parsed
  spec; every problem becomes an `InvalidInput` naming the DAG and the field in YAML spelling.
* `Dag` / `Task` are the resolved, ready-to-schedule view: task defaults applied, times in UTC, tasks in
  topological order, and the spec's `version` (a hash of its normalized JSON, which the database keeps).

Loading (`load_dag_paths`, `load_dag_file`, `parse_dag_yaml`) validates everything before returning
anything, so callers can write to the database knowing the whole batch is valid.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import difflib
import hashlib
import heapq
import json
import os
import re
import types
import typing
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Annotated, Any, Literal, NamedTuple

import pendulum
import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import to_jsonable_python

from dagline.callbacks import RUN_EVENTS, CallbackSpec
from dagline.deadlines import DeadlineSpec
from dagline.deps import TriggerRule
from dagline.errors import InvalidInput
from dagline.templating import check_template, referenced_params
from dagline.times import parse_duration, parse_instant, validate_timezone

API_VERSION = "dagline.io/v1alpha1"  # for the Kubernetes code; `DagDocument.api_version` spells it out

_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_TASK_ID_RE = re.compile(r"^[a-zA-Z0-9_.-]+$")
_SPARK_MEMORY_RE = re.compile(r"^[0-9]+([kmgtp]b?|b)?$", re.IGNORECASE)


# --- field types ------------------------------------------------------------------------------


def _check_dag_id(value: str) -> str:
    if len(value) > 63 or not _DNS_LABEL_RE.match(value):
        raise ValueError(
            f"dag id {value!r} is not a lowercase DNS-1123 label (at most 63 characters of a-z, 0-9 "
            f"and '-', starting and ending with a letter or digit)"
        )
    return value


def _check_task_id(value: str) -> str:
    if not _TASK_ID_RE.match(value):
        raise ValueError(f"task id {value!r} may only contain letters, digits, '_', '.' and '-'")
    return value


def _check_duration(value: str) -> str:
    parse_duration(value)
    return value


def _check_memory(value: str) -> str:
    if not _SPARK_MEMORY_RE.match(value):
        raise ValueError(f"{value!r} is not a Spark memory size (examples: '512m', '1g', '4g')")
    return value


def _scalar_to_str(value: Any) -> Any:
    """YAML reads `4` and `true` as numbers and booleans; Spark wants their text (`true`, not `True`)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return value


def _check_templated(value: str) -> str:
    check_template(value)
    return value


def _check_instant(value: str) -> str:
    parse_instant(value)
    return value


def _date_to_str(value: Any) -> Any:
    return value.isoformat() if isinstance(value, dt.date) else value


DagId = Annotated[str, AfterValidator(_check_dag_id)]
TaskId = Annotated[str, AfterValidator(_check_task_id)]
IsoDuration = Annotated[str, AfterValidator(_check_duration)]
SparkMemory = Annotated[str, AfterValidator(_check_memory)]
TemplatedStr = Annotated[str, BeforeValidator(_scalar_to_str), AfterValidator(_check_templated)]
InstantStr = Annotated[str, BeforeValidator(_date_to_str), AfterValidator(_check_instant)]


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


# --- models -----------------------------------------------------------------------------------


class DriverSpec(_Model):
    """Resources of the Spark driver (unset: Spark's defaults)."""

    cores: int | None = Field(None, ge=1)
    memory: SparkMemory | None = Field(None, description="Spark memory size, e.g. 512m or 1g")


class ExecutorSpec(DriverSpec):
    """Resources of the Spark executors."""

    instances: int | None = Field(None, ge=1)


class SparkSpec(_Model):
    """The Spark job a task runs. Arguments and conf values are Jinja templates."""

    main_application_file: str = Field(
        min_length=1,
        description="path relative to the DAG file (local), or a URI such as local:///... or s3a://... (k8s)",
    )
    arguments: list[TemplatedStr] = []
    conf: dict[str, TemplatedStr] = {}
    image: str | None = Field(None, description="container image (Kubernetes only)")
    driver: DriverSpec = Field(default_factory=DriverSpec)
    executor: ExecutorSpec = Field(default_factory=ExecutorSpec)


class TaskDefaults(_Model):
    """Task settings that apply to every task of the DAG unless the task sets its own."""

    retries: int = Field(0, ge=0)
    retry_delay: IsoDuration = Field("PT5M", description="ISO-8601 duration")
    retry_exponential_backoff: bool = False
    depends_on_past: bool = False
    pool: str = Field("default", min_length=1)
    pool_slots: int = Field(1, ge=1)
    priority_weight: int = 1
    max_active_tis_per_dag: int | None = Field(None, ge=1)
    execution_timeout: IsoDuration | None = Field(None, description="ISO-8601 duration")
    callbacks: list[CallbackSpec] = Field(
        default_factory=list, description="callbacks of every task that sets none of its own")


class TaskSpec(_Model):
    """One task: a Spark job, its upstream tasks, and optional overrides of the DAG's task defaults."""

    id: TaskId
    upstream: list[str] = []
    trigger_rule: TriggerRule = TriggerRule.ALL_SUCCESS
    start_date: dt.datetime | None = Field(None, description="naive = in the DAG's time zone")
    retries: int | None = Field(None, ge=0)
    retry_delay: IsoDuration | None = None
    retry_exponential_backoff: bool | None = None
    depends_on_past: bool | None = None
    pool: str | None = Field(None, min_length=1)
    pool_slots: int | None = Field(None, ge=1)
    priority_weight: int | None = None
    max_active_tis_per_dag: int | None = Field(None, ge=1)
    execution_timeout: IsoDuration | None = None
    deadline: DeadlineSpec | None = Field(None, description="the task must be done within `within` of the run's `of`")
    callbacks: list[CallbackSpec] | None = Field(None, description="on success, failure, retry, deadline_miss")
    spark: SparkSpec


class DagSpec(_Model):
    """A DAG: its schedule, limits, task defaults and tasks (the `spec` of a DAG document)."""

    schedule: str | None = Field(
        None, description="cron, a preset (@daily...), an ISO-8601 duration, or null (triggered runs only)"
    )
    timezone: str = Field("UTC", description="IANA time zone; cron fields and naive dates are read in it")
    start_date: dt.datetime | None = Field(None, description="required with a schedule; naive = in `timezone`")
    end_date: dt.datetime | None = None
    catchup: bool = True
    paused: bool = False
    max_active_runs: int = Field(16, ge=1)
    max_active_tasks: int = Field(16, ge=1)
    params: dict[str, Any] = {}
    defaults: TaskDefaults = Field(default_factory=TaskDefaults)
    deadline: DeadlineSpec | None = Field(None, description="each run must be done within `within` of its `of`")
    callbacks: list[CallbackSpec] = Field(default_factory=list, description="on a run's success, failure, deadline_miss")
    tasks: list[TaskSpec] = Field(min_length=1)

    @field_validator("schedule")
    @classmethod
    def _valid_schedule(cls, value: str | None) -> str | None:
        from dagline.timetable import (
            validate_schedule,  # local: timetable may come to use this module's types
        )

        validate_schedule(value)
        return value

    @field_validator("timezone")
    @classmethod
    def _valid_timezone(cls, value: str) -> str:
        return validate_timezone(value)

    @field_validator("params")
    @classmethod
    def _json_params(cls, value: dict[str, Any]) -> dict[str, Any]:
        # Stored as JSON: keep the same values a DAG rebuilt from the database would see.
        return to_jsonable_python(value)


class DagMetadata(BaseModel):
    """Kubernetes object metadata: dagline reads `name` (the dag_id) and ignores the rest."""

    model_config = ConfigDict(extra="ignore")

    name: DagId


class DagDocument(_Model):
    """A whole DAG document: the file `dagline dags apply` reads, and the DAG custom resource."""

    api_version: Literal["dagline.io/v1alpha1"]
    kind: Literal["DAG"]
    metadata: DagMetadata
    spec: DagSpec


class BackfillSpec(_Model):
    """A request to (re)process a DAG's logical dates in `[start, end]`."""

    dag: DagId
    start: InstantStr = Field(description="date or date-time; naive = in the DAG's time zone")
    end: InstantStr = Field(description="date or date-time; naive = in the DAG's time zone")
    reprocess: Literal["none", "failed", "completed"] = "none"
    max_active_runs: int | None = Field(None, ge=1)
    run_backwards: bool = False
    dry_run: bool = False
    paused: bool = False


class DagRunSpec(_Model):
    """A DagRun resource: made by a user, a manual trigger of `dag`; made by dagline, the mirror of an
    existing run (then `runId` names it and the rest is informative)."""

    dag: DagId
    logical_date: InstantStr | None = Field(None, description="date or date-time; naive = in the DAG's time zone")
    conf: dict[str, Any] = Field(default_factory=dict, description="overrides `params` in this run's templates")
    run_id: str | None = Field(None, description="set by dagline on the runs it mirrors; leave empty to trigger")


class PoolSpec(_Model):
    """A pool: a named number of slots shared by the tasks that name it."""

    slots: int = Field(ge=0)
    description: str | None = None


# --- validation errors ------------------------------------------------------------------------

_IDENTIFIER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def format_path(loc: Iterable[str | int]) -> str:
    """A pydantic location as YAML readers write it: ``spec.tasks[0].spark.conf["spark.x"]``."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif _IDENTIFIER_RE.match(part):
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
        return f"{error['msg']} (got {value!r})"
    return error["msg"]


def _invalid_input(
    exc: ValidationError, model: type[BaseModel], source: str | None, prefix: Sequence[str] = ()
) -> InvalidInput:
    """All of pydantic's errors in one InvalidInput: the first one's path is `field`.

    Unknown fields come first: a misspelt key is usually also the cause of a "missing" error.
    """
    errors = sorted(exc.errors(), key=lambda error: error["type"] != "extra_forbidden")
    problems = [(format_path([*prefix, *error["loc"]]), _describe(error, model)) for error in errors]
    return _problems_error(problems, source)


def _problems_error(problems: Sequence[tuple[str, str]], source: str | None) -> InvalidInput:
    """One error for several problems: the first names its field, each further line its own."""
    (field, message), rest = problems[0], problems[1:]
    lines = [message] + [f"{path}: {text}" if path else text for path, text in rest]
    return InvalidInput("\n".join(lines), field=field or None, source=source)


def _label(dag_id: Any, source: str | None) -> str | None:
    """How errors name a DAG: ``sales-daily (examples/sales/dag.yaml)``."""
    if isinstance(dag_id, str) and dag_id:
        return f"{dag_id} ({source})" if source else dag_id
    return source


# --- checks across fields ---------------------------------------------------------------------


def _topological_order(order: Sequence[str], upstream: Mapping[str, Sequence[str]]) -> tuple[list[str], list[str]]:
    """Kahn's algorithm, taking ready tasks in spec order. Returns (order, a cycle or [])."""
    position = {task_id: index for index, task_id in enumerate(order)}
    pending = {task_id: {u for u in upstream[task_id] if u in position} for task_id in order}
    downstream: dict[str, list[str]] = {task_id: [] for task_id in order}
    for task_id in order:
        for up in pending[task_id]:
            downstream[up].append(task_id)
    ready = [position[task_id] for task_id in order if not pending[task_id]]
    heapq.heapify(ready)
    result = []
    while ready:
        task_id = order[heapq.heappop(ready)]
        result.append(task_id)
        for down in downstream[task_id]:
            pending[down].discard(task_id)
            if not pending[down]:
                heapq.heappush(ready, position[down])
    if len(result) == len(order):
        return result, []
    # Every task left has an upstream that is also left: walking upstream must come back round.
    left = [task_id for task_id in order if pending[task_id]]
    walk = [left[0]]
    while True:
        step = next(u for u in upstream[walk[-1]] if u in pending[walk[-1]])  # upstream order: deterministic
        if step in walk:
            cycle = walk[walk.index(step):][::-1]  # upstream -> downstream
            first = min(range(len(cycle)), key=lambda i: position[cycle[i]])
            return result, cycle[first:] + cycle[:first]
        walk.append(step)


def _hint(name: str, task_ids: Iterable[str]) -> str:
    """The task ids to choose from; for a large DAG, the closest ones."""
    task_ids = list(task_ids)
    if len(task_ids) <= 20:
        return f"tasks are: {', '.join(task_ids)}"
    close = difflib.get_close_matches(name, task_ids, n=3)
    return f"did you mean {' or '.join(map(repr, close))}?" if close else f"none of the DAG's {len(task_ids)} tasks"


def _cross_field_problems(spec: DagSpec) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []

    start = parse_instant(spec.start_date, spec.timezone) if spec.start_date else None
    end = parse_instant(spec.end_date, spec.timezone) if spec.end_date else None
    if spec.schedule is not None and start is None:
        problems.append(("spec.startDate", f"required when a schedule is set (schedule is {spec.schedule!r})"))
    if start and end and end < start:
        problems.append((
            "spec.endDate", f"endDate {spec.end_date.isoformat()} is before startDate {spec.start_date.isoformat()}"
        ))

    first_index: dict[str, int] = {}
    for index, task in enumerate(spec.tasks):
        if task.id in first_index:
            problems.append((
                f"spec.tasks[{index}].id", f"duplicate task id {task.id!r} (also spec.tasks[{first_index[task.id]}])"
            ))
        else:
            first_index[task.id] = index

    for index, task in enumerate(spec.tasks):
        for name in task.upstream:
            if name not in first_index:
                hint = _hint(name, first_index)
                problems.append((f"spec.tasks[{index}].upstream", f"unknown task {name!r} ({hint})"))

    if len(first_index) == len(spec.tasks):
        upstream = {task.id: task.upstream for task in spec.tasks}
        _, cycle = _topological_order(list(first_index), upstream)
        if cycle:
            problems.append((
                f"spec.tasks[{first_index[cycle[0]]}].upstream",
                f"cycle in the task graph: {' -> '.join([*cycle, cycle[0]])}",
            ))

    for index, callback in enumerate(spec.callbacks):
        for event in callback.events:
            if event not in RUN_EVENTS:
                problems.append((f"spec.callbacks[{index}].events",
                                 f"a run has no {event.value!r} event (runs are not retried; put it on a task or "
                                 "in spec.defaults.callbacks)"))

    for index, task in enumerate(spec.tasks):
        templates = [(("arguments", i), text) for i, text in enumerate(task.spark.arguments)]
        templates += [(("conf", key), text) for key, text in task.spark.conf.items()]
        for where, text in templates:
            missing = sorted(referenced_params(text) - spec.params.keys())
            if missing:
                defined = ", ".join(spec.params) or "none"
                problems.append((
                    format_path(["spec", "tasks", index, "spark", *where]),
                    f"template {text!r} uses unknown param {', '.join(missing)} (params are: {defined})",
                ))
    return problems


def check_dag_spec(spec: DagSpec, source: str | None = None) -> None:
    """Checks that span fields (task graph, dates, params in templates); raise InvalidInput listing all."""
    problems = _cross_field_problems(spec)
    if problems:
        raise _problems_error(problems, source)


# --- normalized form and version --------------------------------------------------------------


# Fields added after specs were first stored: left out of the normalized form while unset, so a DAG
# that does not use them keeps the version (hash) it always had.
_OMITTED_WHEN_UNSET = {"deadline": None, "callbacks": None}


def _omit_unset(mapping: dict[str, Any]) -> None:
    for key, unset in _OMITTED_WHEN_UNSET.items():
        if key in mapping and mapping[key] in (unset, []):
            del mapping[key]


def normalized_spec(spec: DagSpec) -> dict[str, Any]:
    """The spec as JSON with every field present and defaults filled (but for `deadline` and
    `callbacks`, which appear only when set): what the database stores."""
    data = spec.model_dump(mode="json", by_alias=True)
    _omit_unset(data)
    _omit_unset(data["defaults"])
    for task in data["tasks"]:
        _omit_unset(task)
    return data


def _version_of(spec_json: Mapping[str, Any]) -> str:
    canonical = json.dumps(spec_json, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def spec_version(spec: DagSpec) -> str:
    """16 hex characters identifying the spec's content (not its formatting or key order)."""
    return _version_of(normalized_spec(spec))


# --- the resolved view ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Task:
    """A task with the DAG's defaults applied; times are aware UTC."""

    task_id: str
    upstream: tuple[str, ...]
    trigger_rule: str
    retries: int
    retry_delay: pendulum.Duration
    retry_exponential_backoff: bool
    depends_on_past: bool
    pool: str
    pool_slots: int
    priority_weight: int
    max_active_tis_per_dag: int | None
    start_date: dt.datetime | None  # None: from the DAG's start
    execution_timeout: pendulum.Duration | None
    spark: SparkSpec
    deadline: DeadlineSpec | None = None
    callbacks: tuple[CallbackSpec, ...] = ()


def _resolve_task(task: TaskSpec, defaults: TaskDefaults, timezone: str) -> Task:
    def setting(name: str) -> Any:
        value = getattr(task, name)
        return getattr(defaults, name) if value is None else value

    timeout = setting("execution_timeout")
    return Task(
        task_id=task.id,
        upstream=tuple(dict.fromkeys(task.upstream)),
        trigger_rule=task.trigger_rule.value,
        retries=setting("retries"),
        retry_delay=parse_duration(setting("retry_delay")),
        retry_exponential_backoff=setting("retry_exponential_backoff"),
        depends_on_past=setting("depends_on_past"),
        pool=setting("pool"),
        pool_slots=setting("pool_slots"),
        priority_weight=setting("priority_weight"),
        max_active_tis_per_dag=setting("max_active_tis_per_dag"),
        start_date=parse_instant(task.start_date, timezone) if task.start_date else None,
        execution_timeout=parse_duration(timeout) if timeout else None,
        spark=task.spark,
        deadline=task.deadline,
        callbacks=tuple(setting("callbacks")),
    )


@dataclasses.dataclass(frozen=True)
class Dag:
    """A validated DAG, ready to schedule: tasks in topological order, times in UTC, its version."""

    dag_id: str
    spec: DagSpec
    timezone: str
    start_date: dt.datetime | None
    end_date: dt.datetime | None
    tasks: dict[str, Task]  # topological order; ties keep the spec's order
    downstream: dict[str, tuple[str, ...]]
    leaves: tuple[str, ...]  # tasks without downstream
    version: str
    spec_json: dict[str, Any]
    roots: tuple[str, ...]  # tasks without upstream

    @classmethod
    def from_document(cls, document: DagDocument) -> Dag:
        """The resolved DAG of a parsed document (checked again across fields, which is cheap)."""
        return cls._build(document.metadata.name, document.spec, source=document.metadata.name)

    @classmethod
    def from_spec_json(cls, dag_id: str, spec_json: Mapping[str, Any]) -> Dag:
        """Rebuild a stored DAG from its normalized spec (gives the same version)."""
        try:
            _check_dag_id(dag_id)
        except ValueError as exc:
            raise InvalidInput(str(exc), field="metadata.name", source=dag_id) from None
        try:
            spec = DagSpec.model_validate(spec_json)
        except ValidationError as exc:
            raise _invalid_input(exc, DagSpec, dag_id, prefix=("spec",)) from None
        return cls._build(dag_id, spec, source=dag_id)

    @classmethod
    def _build(cls, dag_id: str, spec: DagSpec, *, source: str | None) -> Dag:
        check_dag_spec(spec, source)
        upstream = {task.id: task.upstream for task in spec.tasks}
        order, _ = _topological_order([task.id for task in spec.tasks], upstream)
        by_id = {task.id: task for task in spec.tasks}
        tasks = {task_id: _resolve_task(by_id[task_id], spec.defaults, spec.timezone) for task_id in order}
        downstream: dict[str, list[str]] = {task_id: [] for task_id in order}
        for task in tasks.values():
            for up in task.upstream:
                downstream[up].append(task.task_id)
        spec_json = normalized_spec(spec)
        return cls(
            dag_id=dag_id,
            spec=spec,
            timezone=spec.timezone,
            start_date=parse_instant(spec.start_date, spec.timezone) if spec.start_date else None,
            end_date=parse_instant(spec.end_date, spec.timezone) if spec.end_date else None,
            tasks=tasks,
            downstream={task_id: tuple(down) for task_id, down in downstream.items()},
            leaves=tuple(task_id for task_id in order if not downstream[task_id]),
            version=_version_of(spec_json),
            spec_json=spec_json,
            roots=tuple(task_id for task_id, task in tasks.items() if not task.upstream),
        )


# --- reading YAML -----------------------------------------------------------------------------


class _StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """Safe YAML that refuses a key given twice in one mapping (PyYAML silently keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *anchor` keys may be overridden: that is what they are for
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, Hashable):
                continue  # the base class reports it
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first at line {seen[key].start_mark.line + 1})",
                    key_node.start_mark,
                )
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


def _yaml_documents(text: str, source: str) -> list[Any]:
    try:
        return list(yaml.load_all(text, Loader=_StrictLoader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise InvalidInput(f"invalid YAML{where}: {exc.problem}", source=source) from None
    except yaml.YAMLError as exc:
        raise InvalidInput(f"invalid YAML: {exc}", source=source) from None


def parse_dag_document(data: Any, source: str | None = None) -> DagDocument:
    """Validate one document (a parsed YAML mapping or a resource body) completely."""
    if not isinstance(data, Mapping):
        raise InvalidInput(
            f"expected a mapping with apiVersion, kind, metadata and spec, got {type(data).__name__}", source=source
        )
    metadata = data.get("metadata")
    label = _label(metadata.get("name") if isinstance(metadata, Mapping) else None, source)
    try:
        document = DagDocument.model_validate(data)
    except ValidationError as exc:
        raise _invalid_input(exc, DagDocument, label) from None
    check_dag_spec(document.spec, label)
    return document


def parse_dag_yaml(text: str, source: str = "<string>") -> list[DagDocument]:
    """The DAG documents in a YAML text (several may be separated by `---`); other kinds are skipped."""
    documents = [data for data in _yaml_documents(text, source) if data is not None]
    if not documents:
        raise InvalidInput("empty file: no YAML document", source=source)
    result = []
    for data in documents:
        if isinstance(data, Mapping) and isinstance(data.get("kind"), str) and data["kind"] != "DAG":
            continue  # Backfill, Pool, DagRun... manifests may share the folder
        result.append(parse_dag_document(data, source))
    return result


class LoadedDag(NamedTuple):
    """A DAG and the file it came from."""

    dag: Dag
    source_path: str  # absolute


def _load_file(path: str) -> list[LoadedDag]:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InvalidInput(f"cannot read the file: {reason}", source=path) from None
    absolute = os.path.abspath(path)
    return [LoadedDag(Dag.from_document(document), absolute) for document in parse_dag_yaml(text, path)]


def _yaml_files(path: str) -> list[str]:
    """A file as given, or a folder's *.yaml / *.yml files (recursively, sorted, hidden ones skipped)."""
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        raise InvalidInput("no such file or directory", source=path)
    found = []
    for folder, subfolders, files in os.walk(path):
        subfolders[:] = [name for name in subfolders if not name.startswith(".")]
        found += [
            os.path.join(folder, name) for name in files
            if name.endswith((".yaml", ".yml")) and not name.startswith(".")
        ]
    return sorted(found)


def _refuse_duplicates(loaded: Sequence[LoadedDag]) -> None:
    first: dict[str, LoadedDag] = {}
    for item in loaded:
        dag_id = item.dag.dag_id
        if dag_id in first:
            other = first[dag_id].source_path
            where = f"{other} and {item.source_path}" if other != item.source_path else f"{other}, twice"
            raise InvalidInput(
                f"DAG {dag_id!r} is defined more than once: {where}", field="metadata.name", source=dag_id
            )
        first[dag_id] = item


def load_dag_file(path: str | os.PathLike[str]) -> list[LoadedDag]:
    """The DAGs of one YAML file, all validated; a file without a DAG document is an error."""
    path = os.fspath(path)
    loaded = _load_file(path)
    if not loaded:
        raise InvalidInput("no DAG document in this file (kind: DAG)", source=path)
    _refuse_duplicates(loaded)
    return loaded


def load_dag_paths(paths: Iterable[str | os.PathLike[str]]) -> list[LoadedDag]:
    """The DAGs of files and folders, all validated before any is returned; dag ids must be unique."""
    paths = [os.fspath(path) for path in paths]
    files: dict[str, str] = {}  # absolute -> as given: a file named twice is read once
    for path in paths:
        for file in _yaml_files(path):
            files.setdefault(os.path.abspath(file), file)
    loaded = [item for file in files.values() for item in _load_file(file)]
    if not loaded:
        raise InvalidInput(f"no DAG found in {', '.join(paths) or 'no paths'}")
    _refuse_duplicates(loaded)
    return loaded
