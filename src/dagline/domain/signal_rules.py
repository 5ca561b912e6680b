"""The signal parts of a DAG spec: DAG-level `triggers`, task-level `onSignal` rules, and their checks.

Pydantic models (the CRD schemas are generated from them, through `dagline.spec`) plus the checks
that span fields: a rule's key must be a valid key (`dagline.task.<dag>.<task>.<state>` for
dagline's own), a key names at most one rule per task, a rule on this DAG's own task keys must
name a task that exists, and a task may not start or restart itself on its own state changes
(that would loop forever). Problems come back as (field, message) pairs in YAML spelling.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from dagline.domain.signal_keys import parse_task_state_key, validate_rule_key
from dagline.domain.states import SignalAction
from dagline.errors import InvalidInput

ACTIONS = (SignalAction.START, SignalAction.RESTART, SignalAction.STOP)  # a task rule's (`trigger` is the DAG's)


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class SignalTrigger(_Model):
    """A DAG-level trigger: every matching signal creates a run (type `signal`, conf = its value)."""

    signal: str = Field(description="the signal key, e.g. features.ready; another namespace's exported key as "
                                    "namespace/key")


class SignalRule(_Model):
    """A task-level rule, acting inside the running runs of its DAG."""

    signal: str = Field(description="the signal key, e.g. model.published; another namespace's exported key as "
                                    "namespace/key")
    action: Literal["start", "restart", "stop"] = Field(
        description="start: each matching signal starts one try (the task waits for it); restart: stop the "
                    "running try and start one with the new signal; stop: stop the running try")
    handling: Literal["each", "latest"] = Field(
        "each", description="signals arriving while the task runs: each = one try per signal, in order; "
                            "latest = only the newest waits")
    scope: Literal["dag", "run"] = Field(
        "dag", description="dag = signals from anyone; run = only signals sent by a try of the same run")


def rule_problems(dag_name: str, task_ids: Sequence[str], triggers: Sequence[SignalTrigger],
                  rules: Sequence[tuple[int, str, Sequence[SignalRule]]]) -> list[tuple[str, str]]:
    """Problems of a DAG's signal rules; `rules` is (task index, task id, its `on` rules). `dag_name` is the
    DAG's name in its namespace: a key without a namespace is of the DAG's own namespace."""
    problems: list[tuple[str, str]] = []
    known = set(task_ids)

    def check_key(key: str, field: str) -> tuple[str, str, str] | None:
        try:
            namespace, key = validate_rule_key(key, field=field)
        except InvalidInput as exc:
            problems.append((field, exc.reason))
            return None
        target = parse_task_state_key(key) if namespace is None else None  # another namespace's DAG
        if target and target[0] == dag_name and target[1] not in known:
            problems.append((field, f"{key!r} names task {target[1]!r}, which this DAG does not have "
                                    f"(tasks are: {', '.join(task_ids)})"))
        return target

    seen_triggers: dict[str, int] = {}
    for j, trigger in enumerate(triggers):
        field = f"spec.triggers[{j}].signal"
        check_key(trigger.signal, field)
        if trigger.signal in seen_triggers:
            first = seen_triggers[trigger.signal]
            problems.append((field, f"{trigger.signal!r} is already a trigger (spec.triggers[{first}])"))
        seen_triggers.setdefault(trigger.signal, j)
    for index, task_id, task_rules in rules:
        seen: dict[str, int] = {}
        for j, rule in enumerate(task_rules):
            field = f"spec.tasks[{index}].onSignal[{j}].signal"
            target = check_key(rule.signal, field)
            if rule.signal in seen:
                first = f"onSignal[{seen[rule.signal]}]"
                problems.append((field, f"{rule.signal!r} already has a rule in this task ({first}); "
                                        "one rule per key and task"))
            seen.setdefault(rule.signal, j)
            if target and target[0] == dag_name and target[1] == task_id and rule.action != SignalAction.STOP:
                problems.append((field, f"task {task_id!r} would {rule.action} itself on its own state change "
                                        f"{rule.signal!r}, for ever"))
    return problems


def rule_name(task_id: str | None, index: int) -> str:
    """How a rule is named in `signal_action.rule` and `signals show`."""
    return f"spec.triggers[{index}]" if task_id is None else f"spec.tasks[{task_id}].on[{index}]"
