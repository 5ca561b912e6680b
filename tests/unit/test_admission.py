"""Tests for dagline.domain.admission: which scheduled task instances the critical section queues."""

from __future__ import annotations

import pytest

from dagline.domain.admission import Admission, Candidate, Limits, Load, admit


def ti(ti_id: int, dag: str = "d", task: str | None = None, pool: str = "default", slots: int = 1,
       per_dag: int | None = None) -> Candidate:
    return Candidate(ti_id, dag, task or f"t{ti_id}", pool, slots, per_dag)


def limits(pools=None, dags=None, executor_slots: int = 32) -> Limits:
    return Limits(pool_slots={"default": 128} if pools is None else pools,
                  max_active_tasks=dags or {"d": 16, "e": 16}, executor_slots=executor_slots)


def admitted_ids(decision: Admission) -> list[int]:
    return [c.ti_id for c in decision.admitted]


# fmt: off
ADMISSION_TABLE = [
    # candidates (in priority order)                 load                                        limits                                   admitted    case
    ([ti(1), ti(2)],                                 Load(),                                     limits(),                                [1, 2],     "room for all"),
    ([],                                             Load(),                                     limits(),                                [],         "nothing scheduled"),
    ([ti(1), ti(2), ti(3)],                          Load(),                                     limits(executor_slots=2),                [1, 2],     "executor slots stop the round"),
    ([ti(1)],                                        Load(),                                     limits(executor_slots=0),                [],         "executor full"),
    ([ti(1, slots=2), ti(2, slots=2)],               Load(),                                     limits(pools={"default": 3}),            [1],        "pool slots counted per TI's poolSlots"),
    ([ti(1, slots=3), ti(2, slots=1)],               Load(),                                     limits(pools={"default": 2}),            [2],        "a TI too big for its pool is passed over, a smaller one fits"),
    ([ti(1)],                                        Load(pool_used={"default": 2}),             limits(pools={"default": 2}),            [],         "pool already full of running TIs"),
    ([ti(1), ti(2, pool="spark")],                   Load(pool_used={"default": 2}),             limits(pools={"default": 2, "spark": 1}), [2],       "pools are separate"),
    ([ti(1, pool="nope"), ti(2)],                    Load(),                                     limits(),                                [2],        "a missing pool's TI waits, others go on"),
    ([ti(1), ti(2), ti(3)],                          Load(dag_active={"d": 1}),                  limits(dags={"d": 2}),                   [1],        "maxActiveTasks counts running TIs and admitted ones"),
    ([ti(1), ti(2, dag="e")],                        Load(dag_active={"d": 2}),                  limits(dags={"d": 2, "e": 1}),           [2],        "maxActiveTasks is per DAG"),
    ([ti(1, task="x", per_dag=1), ti(2, task="x", per_dag=1), ti(3, task="y", per_dag=1)],
                                                     Load(),                                     limits(),                                [1, 3],     "maxActiveTisPerDag: one x at a time across runs"),
    ([ti(1, task="x", per_dag=2)],                   Load(task_active={("d", "x"): 2}),          limits(),                                [],         "maxActiveTisPerDag reached by running TIs"),
    ([ti(1, task="x", per_dag=2)],                   Load(task_active={("e", "x"): 2}),          limits(),                                [1],        "maxActiveTisPerDag counts its own DAG only"),
    ([ti(1, task="x"), ti(2, task="x")],             Load(task_active={("d", "x"): 5}),          limits(),                                [1, 2],     "no maxActiveTisPerDag: no task limit"),
    ([ti(1, task="x", per_dag=2), ti(2, task="x", per_dag=1)],
                                                     Load(task_active={("d", "x"): 1}),          limits(),                                [1],        "each TI's own version's limit applies"),
    ([ti(1, pool="nope"), ti(2), ti(3)],             Load(),                                     limits(executor_slots=1),                [2],        "a waiting TI takes no executor slot"),
]
# fmt: on


@pytest.mark.parametrize("candidates, load, lim, expected, case", ADMISSION_TABLE, ids=[r[-1] for r in ADMISSION_TABLE])
def test_admission(candidates, load, lim, expected, case):
    assert admitted_ids(admit(candidates, load, lim)) == expected


def test_missing_pools_are_reported_for_the_caller_to_warn_about():
    decision = admit([ti(1, pool="nope"), ti(2, pool="gone"), ti(3)], Load(), limits())
    assert admitted_ids(decision) == [3]
    assert decision.missing_pools == {"nope", "gone"}


def test_admission_does_not_change_the_load_it_is_given():
    load = Load(pool_used={"default": 1}, dag_active={"d": 1}, task_active={("d", "t1"): 1})
    admit([ti(1), ti(2)], load, limits())
    assert load == Load(pool_used={"default": 1}, dag_active={"d": 1}, task_active={("d", "t1"): 1})
