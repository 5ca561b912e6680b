"""`Dag` / `Task`: the resolved, ready-to-schedule view of a DAG spec.

Task defaults applied, times in UTC, tasks in topological order, and the spec's `version` (a hash of its
normalized JSON, which the database keeps).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
from collections.abc import Mapping
from typing import Any

import pendulum
from pydantic import ValidationError

from dagline.domain import names
from dagline.domain.callbacks import CallbackSpec
from dagline.domain.deadlines import DeadlineSpec
from dagline.domain.signal_rules import SignalRule
from dagline.domain.states import SignalAction
from dagline.errors import InvalidInput
from dagline.spec.checks import check_dag_spec, topological_order
from dagline.spec.fields import check_dag_id
from dagline.spec.models import ConnectServerSpec, DagDocument, DagSpec, EnvVar, SparkSpec, TaskDefaults, TaskSpec
from dagline.spec.problems import invalid_input
from dagline.times import parse_duration, parse_instant

# Fields added after specs were first stored: left out of the normalized form while unset (at their
# defaults), so a DAG that does not use them keeps the version (hash) it always had.
# In the DAG, its defaults and its tasks; [] too.
_OMITTED_WHEN_UNSET = {"deadline": None, "callbacks": None, "env": None}
_LATER_DAG_FIELDS = {"triggers": []}
_LATER_TASK_FIELDS = {"mode": "batch", "stopGracePeriod": None, "on": []}
_LATER_DEFAULTS_FIELDS = {"spark": {"connect": False}}
_LATER_SPARK_DEFAULTS_FIELDS = {"connectServer": None}
_LATER_SPARK_FIELDS = {"connect": None, "pod": None, "volumes": None}
_LATER_DRIVER_FIELDS = {"serviceAccount": None}


def _omit_unset(mapping: dict[str, Any], later: Mapping[str, Any] | None = None) -> None:
    for key, unset in _OMITTED_WHEN_UNSET.items():
        if key in mapping and mapping[key] in (unset, []):
            del mapping[key]
    for key, default in (later or {}).items():
        if key in mapping and mapping[key] == default:
            del mapping[key]


def normalized_spec(spec: DagSpec) -> dict[str, Any]:
    """The spec as JSON with every field present and defaults filled: what the database stores
    (fields added later appear only when set: `deadline`, `callbacks`, `triggers`, `defaults.spark` and its
    `connectServer`,
    and a task's `mode`, `stopGracePeriod`, `on`, `spark.connect`, `spark.pod`, `spark.volumes` and
    `spark.driver.serviceAccount`)."""
    data = spec.model_dump(mode="json", by_alias=True)
    _omit_unset(data, _LATER_DAG_FIELDS)
    if isinstance(data["defaults"].get("spark"), dict):
        _omit_unset(data["defaults"]["spark"], _LATER_SPARK_DEFAULTS_FIELDS)
    _omit_unset(data["defaults"], _LATER_DEFAULTS_FIELDS)
    for task in data.get("tasks", []):
        if "onSignal" in task:  # stored under its first name, so a DAG keeps its version across the rename
            task["on"] = task.pop("onSignal")
        _omit_unset(task, _LATER_TASK_FIELDS)
        _omit_unset(task["spark"], _LATER_SPARK_FIELDS)
        _omit_unset(task["spark"]["driver"], _LATER_DRIVER_FIELDS)
    return data


def deprecated_spellings(data: Any) -> list[str]:
    """Warnings for keys of a DAG document that are read under an old name: a task's `on:` (an unquoted
    `on:` reaches dagline as `true` from YAML 1.1 parsers and kubectl) is now `onSignal:`."""
    spec = data.get("spec") if isinstance(data, Mapping) else None
    tasks = spec.get("tasks") if isinstance(spec, Mapping) else None
    found = []
    for index, task in enumerate(tasks if isinstance(tasks, list) else []):
        if not isinstance(task, Mapping):
            continue
        for spelling in ("on", True, "true"):
            if spelling in task:
                shown = "on" if spelling == "on" else f"{spelling} (an unquoted `on:`)"
                found.append(f"spec.tasks[{index}].{shown}: renamed to onSignal, because YAML 1.1 parsers and "
                             "kubectl read an unquoted `on:` as true; read as onSignal for now")
    return found


def version_of(spec_json: Mapping[str, Any]) -> str:
    canonical = json.dumps(spec_json, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def spec_version(spec: DagSpec) -> str:
    """16 hex characters identifying the spec's content (not its formatting or key order)."""
    return version_of(normalized_spec(spec))


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
    mode: str = "batch"
    stop_grace_period: pendulum.Duration = dataclasses.field(default_factory=lambda: pendulum.duration(seconds=30))
    on: tuple[SignalRule, ...] = ()
    env: tuple[EnvVar, ...] = ()  # the defaults' env, then the task's own (which wins for the same name)

    connect: bool = False  # runs against the replica's Spark Connect server (`spark.connect`, ADR 0070)
    # Kubernetes: the size of the DAG's Spark Connect server (`defaults.spark.connectServer`, ADR 0086)
    connect_server: ConnectServerSpec | None = None

    @property
    def streaming(self) -> bool:
        return self.mode == "streaming"

    @property
    def waits_for_signal(self) -> bool:
        """A task with a `start` rule is not started by its upstream tasks alone."""
        return any(rule.action == SignalAction.START for rule in self.on)


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
        retry_delay=parse_duration(setting("retry_delay"), allow_zero=True),
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
        mode=task.mode,
        stop_grace_period=parse_duration(task.stop_grace_period or "PT30S"),
        on=tuple(task.on),
        env=tuple({var.name: var for var in [*defaults.env, *(task.env or ())]}.values()),

        connect=connects(task, defaults),
        connect_server=defaults.spark.connect_server,
    )


def connects(task: TaskSpec, defaults: TaskDefaults) -> bool:
    """Whether the task runs against a Spark Connect server: its `spark.connect`, else the DAG's default."""
    return defaults.spark.connect if task.spark.connect is None else task.spark.connect


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

    @property
    def namespace(self) -> str:
        """The namespace whose DAG this is (`dag_id` is its key in it: `dagline.domain.names`)."""
        return names.namespace_of(self.dag_id)

    @property
    def name(self) -> str:
        """The DAG's name within its namespace (`metadata.name`)."""
        return names.name_of(self.dag_id)

    @property
    def has_task_rules(self) -> bool:
        """Whether any task has signal rules (`on`): only then can a signal wait for one of its TIs."""
        return any(task.on for task in self.tasks.values())

    @classmethod
    def from_document(cls, document: DagDocument, namespace: str | None = None) -> Dag:
        """The resolved DAG of a parsed document (checked again across fields, which is cheap), in
        `namespace`, else the document's `metadata.namespace`, else `default`."""
        key = names.qualify(namespace or document.metadata.namespace or names.DEFAULT_NAMESPACE,
                            document.metadata.name)
        return cls._build(key, document.spec, source=key)

    @classmethod
    def from_spec_json(cls, dag_id: str, spec_json: Mapping[str, Any], *, version: str | None = None) -> Dag:
        """Rebuild a stored DAG from its normalized spec (gives the same version). With `version`, the
        version stored with it: `spec_json` is then taken as the normalized spec it was stored as, and
        not normalized and hashed again (a replica loading a hundred DAGs spends most of the load there)."""
        try:
            check_dag_id(names.name_of(dag_id))
        except ValueError as exc:
            raise InvalidInput(str(exc), field="metadata.name", source=dag_id) from None
        try:
            spec = DagSpec.model_validate(spec_json)
        except ValidationError as exc:
            raise invalid_input(exc, DagSpec, dag_id, prefix=("spec",)) from None
        stored = (dict(spec_json), version) if version is not None else None
        return cls._build(dag_id, spec, source=dag_id, stored=stored)

    @classmethod
    def _build(cls, dag_id: str, spec: DagSpec, *, source: str | None,
               stored: tuple[dict[str, Any], str] | None = None) -> Dag:
        check_dag_spec(spec, source, dag_id, spark_policy=None)  # the policy is checked where a spec is applied
        upstream = {task.id: task.upstream for task in spec.tasks}
        order, _ = topological_order([task.id for task in spec.tasks], upstream)
        by_id = {task.id: task for task in spec.tasks}
        tasks = {task_id: _resolve_task(by_id[task_id], spec.defaults, spec.timezone) for task_id in order}
        downstream: dict[str, list[str]] = {task_id: [] for task_id in order}
        for task in tasks.values():
            for up in task.upstream:
                downstream[up].append(task.task_id)
        spec_json, version = stored if stored is not None else (normalized_spec(spec), None)
        return cls(
            dag_id=dag_id,
            spec=spec,
            timezone=spec.timezone,
            start_date=parse_instant(spec.start_date, spec.timezone) if spec.start_date else None,
            end_date=parse_instant(spec.end_date, spec.timezone) if spec.end_date else None,
            tasks=tasks,
            downstream={task_id: tuple(down) for task_id, down in downstream.items()},
            leaves=tuple(task_id for task_id in order if not downstream[task_id]),
            version=version if version is not None else version_of(spec_json),
            spec_json=spec_json,
            roots=tuple(task_id for task_id, task in tasks.items() if not task.upstream),
        )
