"""Which scheduled task instances may be queued now: the critical section's decision, as a pure function.

The scheduler's critical section (`dagline.scheduler.critical_section`) locks the pool rows, reads the
candidates (scheduled TIs in priority order) and what is already queued or running, and hands those
plain values to `admit`. `admit` walks the candidates in the order given and admits each one only if

* its pool exists and has `pool_slots` free,
* its DAG is under `maxActiveTasks` (TIs queued or running across all its runs),
* its task is under `maxActiveTisPerDag` (when the task sets one),
* and the executor still has a free slot (admission stops at `executor_slots`).

An admitted TI counts at once against every limit, so later candidates in the same round see it.
A candidate that does not fit is passed over, not a reason to stop: a smaller task further down the
list may still fit its pool. No database, no clock, no logging: the caller reports missing pools.

For each candidate it passes over it also says why, in the words `dagline tasks list` shows (`reason`):
`pool spark full (3/3 slots)`, `poolSlots 4 > pool spark size 3`, `DAG at maxActiveTasks (16)`... The
command calls this very function, so the critical section and the listing cannot disagree.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable, Mapping


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A scheduled task instance that asks to be queued, with what it would take and its task's
    `maxActiveTisPerDag` (from the DAG version of its run, which may differ between runs)."""

    ti_id: int
    dag_id: str
    task_id: str
    pool: str
    pool_slots: int
    max_active_tis_per_dag: int | None = None


@dataclasses.dataclass(frozen=True)
class Load:
    """What is taken already (TIs queued or running), as counted under the pool locks."""

    pool_used: Mapping[str, int] = dataclasses.field(default_factory=dict)  # pool -> slots taken
    dag_active: Mapping[str, int] = dataclasses.field(default_factory=dict)  # dag_id -> TIs
    task_active: Mapping[tuple[str, str], int] = dataclasses.field(default_factory=dict)  # (dag, task) -> TIs


@dataclasses.dataclass(frozen=True)
class Limits:
    """The limits that apply: pool sizes, each DAG's `maxActiveTasks` (its current version), the executor's
    free slots."""

    pool_slots: Mapping[str, int]  # pool -> slots; a pool missing here does not exist
    max_active_tasks: Mapping[str, int]  # dag_id -> maxActiveTasks
    executor_slots: int


@dataclasses.dataclass(frozen=True)
class Admission:
    admitted: tuple[Candidate, ...]
    missing_pools: frozenset[str]  # pools named by candidates that do not exist (they wait)
    waiting: Mapping[int, str] = dataclasses.field(default_factory=dict)  # ti id -> why it was passed over


def how_to_create(pool_key: str) -> str:
    """What makes a missing pool (a task instance names its pool by key: `name` for the platform's,
    `namespace/name` for a namespace's own, `dagline.store.pools`)."""
    namespace, sep, name = pool_key.rpartition("/")
    if not sep:
        return f"`dagline pools set {pool_key} N`"
    return (f"`dagline pools set {name} N` makes the platform's, or {namespace}'s own: a Pool object {name!r} in "
            f"namespace {namespace!r} or `dagline pools set {name} N --namespace {namespace}`")


def admit(candidates: Iterable[Candidate], load: Load, limits: Limits) -> Admission:
    """The candidates to queue, in the order given, within every limit (see the module docstring)."""
    pool_used = collections.Counter(load.pool_used)
    dag_active = collections.Counter(load.dag_active)
    task_active = collections.Counter(load.task_active)
    admitted: list[Candidate] = []
    missing: set[str] = set()
    waiting: dict[int, str] = {}
    for c in candidates:
        if len(admitted) >= limits.executor_slots:
            waiting[c.ti_id] = f"executor busy ({limits.executor_slots} free slots taken)" if admitted else \
                "executor busy (no free slot)"
            continue
        slots = limits.pool_slots.get(c.pool)
        if slots is None:
            missing.add(c.pool)
            waiting[c.ti_id] = f"pool {c.pool.rpartition('/')[2]} does not exist ({how_to_create(c.pool)})"
            continue
        if c.pool_slots > slots:
            waiting[c.ti_id] = f"poolSlots {c.pool_slots} > pool {c.pool} size {slots}: never runs until the pool grows"
            continue
        if pool_used[c.pool] + c.pool_slots > slots:
            waiting[c.ti_id] = f"pool {c.pool} full ({pool_used[c.pool]}/{slots} slots, needs {c.pool_slots})"
            continue
        if dag_active[c.dag_id] >= limits.max_active_tasks[c.dag_id]:
            waiting[c.ti_id] = f"DAG at maxActiveTasks ({limits.max_active_tasks[c.dag_id]} queued or running)"
            continue
        if c.max_active_tis_per_dag is not None and task_active[(c.dag_id, c.task_id)] >= c.max_active_tis_per_dag:
            waiting[c.ti_id] = f"task at maxActiveTisPerDag ({c.max_active_tis_per_dag} queued or running)"
            continue
        admitted.append(c)
        pool_used[c.pool] += c.pool_slots
        dag_active[c.dag_id] += 1
        task_active[(c.dag_id, c.task_id)] += 1
    return Admission(tuple(admitted), frozenset(missing), waiting)


def max_active_runs_reason(running: int, max_active_runs: int, *, of: str = "DAG") -> str | None:
    """Why a DAG's queued runs (`of` a backfill: that backfill's) cannot start now (None: there is room
    for one more)."""
    if running >= max_active_runs:
        return f"{of} at maxActiveRuns ({running}/{max_active_runs} running)"
    return None
