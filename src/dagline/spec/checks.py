"""Checks that span fields of a parsed DAG spec: the task graph, start/end dates, `params` used by templates.

Every problem becomes a (YAML path, message) pair; `check_dag_spec` raises one `InvalidInput` listing all.
"""

from __future__ import annotations

import difflib
import heapq
from collections.abc import Iterable, Mapping, Sequence

from dagline.domain import names
from dagline.domain.callbacks import RUN_EVENTS, CallbackSpec
from dagline.domain.egress import EgressPolicy, literal_url_refusal
from dagline.domain.signal_rules import rule_problems
from dagline.domain.spark_policy import DEFAULT_POLICY, SparkPolicy
from dagline.domain.templating import referenced_params
from dagline.spec.connect import connect_problems
from dagline.spec.models import DagSpec
from dagline.spec.problems import format_path, problems_error
from dagline.times import parse_instant


def topological_order(order: Sequence[str], upstream: Mapping[str, Sequence[str]]) -> tuple[list[str], list[str]]:
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
    for index, callback in enumerate(spec.callbacks):
        for event in callback.events:
            if event not in RUN_EVENTS:
                problems.append((f"spec.callbacks[{index}].events",
                                 f"a run has no {event.value!r} event (runs are not retried; put it on a task or "
                                 "in spec.defaults.callbacks)"))

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
        _, cycle = topological_order(list(first_index), upstream)
        if cycle:
            problems.append((
                f"spec.tasks[{first_index[cycle[0]]}].upstream",
                f"cycle in the task graph: {' -> '.join([*cycle, cycle[0]])}",
            ))

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


def spark_policy_problems(spec: DagSpec, policy: SparkPolicy) -> list[tuple[str, str]]:
    """Every `spark.conf` key, volume and driver service account the Spark policy refuses
    (`dagline.domain.spark_policy`), with its path."""
    problems = [(format_path(["spec", "tasks", index, "spark", "conf", key]), f"{key!r}: {why}")
                for index, task in enumerate(spec.tasks) for key, why in policy.refusals(task.spark.conf)]
    for index, task in enumerate(spec.tasks):
        refused = policy.pod_refusals(task.spark.volumes or (), task.spark.driver.service_account)
        problems += [(format_path(["spec", "tasks", index, "spark", *where]), why) for where, why in refused]
    return problems


def check_dag_spec(spec: DagSpec, source: str | None = None, dag_id: str | None = None, *,
                   spark_policy: SparkPolicy | None = DEFAULT_POLICY) -> None:
    """Checks that span fields (task graph, dates, params in templates, signal rules, static confs of Spark
    Connect tasks) and the Spark policy (None: not checked, for a DAG rebuilt from its stored, already
    applied spec); raise InvalidInput listing all."""
    problems = _cross_field_problems(spec) + connect_problems(spec)
    if spark_policy is not None:
        problems += spark_policy_problems(spec, spark_policy)
    problems += rule_problems(names.name_of(dag_id or ""), [t.id for t in spec.tasks], spec.triggers,
                              [(i, t.id, t.on) for i, t in enumerate(spec.tasks) if t.on])
    if problems:
        raise problems_error(problems, source)


def refused_webhook_urls(spec: DagSpec, policy: EgressPolicy) -> list[tuple[str, str]]:
    """(YAML path, why) of every literal webhook `url` the egress policy would refuse at delivery
    (`dagline.domain.egress.literal_url_refusal`): `dags apply` warns of them, and applies the DAG."""
    places: list[tuple[list[str | int], list[CallbackSpec]]] = [
        (["spec", "callbacks"], spec.callbacks), (["spec", "defaults", "callbacks"], spec.defaults.callbacks)]
    places += [(["spec", "tasks", i, "callbacks"], task.callbacks or []) for i, task in enumerate(spec.tasks)]
    found = []
    for where, callbacks in places:
        for index, callback in enumerate(callbacks):
            url = callback.webhook.url if callback.webhook is not None else None
            why = literal_url_refusal(url, policy) if url else None
            if why is not None:
                found.append((format_path([*where, index, "webhook", "url"]), f"{url}: {why}"))
    return found
