"""The invariant checks of `dagline.testing.audit`, each against hand-made histories on PostgreSQL: a planted
violation is found and named, and a clean history of the same shape passes.

Histories are written straight into the tables (runs, task instances, `event` rows), the way a buggy
scheduler could have left them; the DAGs themselves are applied with the real `apply_dags`."""

from __future__ import annotations

import datetime as dt
import itertools

import pytest
from sqlalchemy import insert, select, text

from dagline.db.models import backfill_t, dag_run_t, dag_t, event_t, ti_t
from dagline.spec import load_dag_paths
from dagline.store.dags import apply_dags, set_paused
from dagline.store.pools import set_pool
from dagline.testing import audit

pytestmark = pytest.mark.postgres

T0 = dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc)
DAG = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {{name: d}}
spec:
  paused: false
  catchup: true
  schedule: null
  maxActiveRuns: {runs}
  maxActiveTasks: {tasks}
  tasks:
    - {{id: a, maxActiveTisPerDag: 1, spark: {{mainApplicationFile: a.py}}}}
    - {{id: b, upstream: [a], spark: {{mainApplicationFile: b.py}}}}
    - {{id: c, upstream: [a], pool: p, spark: {{mainApplicationFile: c.py}}}}
    - {{id: late, startDate: "2026-06-01", spark: {{mainApplicationFile: l.py}}}}
"""


class History:
    """Writes a DAG's runs, task instances and events by hand; every event gets the next id."""

    def __init__(self, db, tmp_path):
        self.db = db
        self.tmp_path = tmp_path
        self._tick = itertools.count(1)
        set_pool(db, "p", 2, now=T0)

    def apply(self, *, runs: int = 1, tasks: int = 2) -> int:
        path = self.tmp_path / f"d-{runs}-{tasks}.yaml"
        path.write_text(DAG.format(runs=runs, tasks=tasks))
        apply_dags(self.db, load_dag_paths([str(path)]), now=T0)
        with self.db.begin() as conn:
            return conn.execute(select(dag_t.c.current_version_id).where(dag_t.c.dag_id == "d")).scalar_one()

    def run(self, version: int, day: int, *, state: str = "running", previous: int | None = None,
            backfill: int | None = None, tasks=("a", "b", "c"), ti_state: str = "none") -> tuple[int, dict]:
        when = T0 + dt.timedelta(days=day)
        with self.db.begin() as conn:
            run_id = conn.execute(insert(dag_run_t).values(
                dag_id="d", run_id=f"manual__{day}", logical_date=when, data_interval_start=when,
                data_interval_end=when, run_after=when, run_type="backfill" if backfill else "manual", state=state,
                previous_run_id=previous, dag_version_id=version, backfill_id=backfill, created_at=when,
            ).returning(dag_run_t.c.id)).scalar_one()
            tis = {task: conn.execute(insert(ti_t).values(
                dag_run_id=run_id, dag_id="d", task_id=task, state=ti_state, max_tries=2,
                pool="p" if task == "c" else "default").returning(ti_t.c.id)).scalar_one() for task in tasks}
        return run_id, tis

    def backfill(self, max_active_runs: int) -> int:
        with self.db.begin() as conn:
            return conn.execute(insert(backfill_t).values(
                dag_id="d", from_date=T0, to_date=T0, max_active_runs=max_active_runs, created_at=T0,
            ).returning(backfill_t.c.id)).scalar_one()

    def ti(self, ti_id: int, *moves: str, try_number: int = 1, final: bool = True) -> None:
        """Log `ti_id` moving through `moves` (e.g. "scheduled", "queued", "running", "success") on one
        try, and leave its row in the last state (unless `final` is False)."""
        with self.db.begin() as conn:
            for before, after in itertools.pairwise(moves):
                self._event(conn, entity="task_instance", ti_id=ti_id, try_number=try_number,
                            from_state=before, to_state=after)
            if final:
                conn.execute(ti_t.update().where(ti_t.c.id == ti_id).values(state=moves[-1], try_number=try_number))

    def set_ti(self, ti_id: int, **values) -> None:
        with self.db.begin() as conn:
            conn.execute(ti_t.update().where(ti_t.c.id == ti_id).values(**values))

    def run_moves(self, run_id: int, *moves: str) -> None:
        with self.db.begin() as conn:
            for before, after in itertools.pairwise(moves):
                self._event(conn, entity="dag_run", dag_run_id=run_id, from_state=before, to_state=after)
            conn.execute(dag_run_t.update().where(dag_run_t.c.id == run_id).values(state=moves[-1]))

    def _event(self, conn, **values) -> None:
        conn.execute(insert(event_t).values(at=T0 + dt.timedelta(seconds=next(self._tick)), who="test",
                                            dag_id="d", **values))

    def check(self, name: str, *args):
        with self.db.begin() as conn:
            return getattr(audit, name)(conn, *args)


@pytest.fixture
def h(pg_db, tmp_path):
    return History(pg_db, tmp_path)


LAUNCH = ("none", "scheduled", "queued", "running")
DONE = (*LAUNCH, "success")


# -- duplicate runs, duplicate launches -----------------------------------------------------------


def test_duplicate_runs_finds_two_live_runs_at_one_logical_date(h):
    v = h.apply()
    h.run(v, 1, state="success")
    assert h.check("duplicate_runs") == []
    with h.db.begin() as conn:  # the unique index is what normally stops this: lift it to plant one
        conn.execute(text("DROP INDEX uq_dag_run_live_logical_date"))
        conn.execute(dag_run_t.update().values(run_id="other"))
    h.run(v, 1, state="running")
    assert h.check("duplicate_runs") == [("d", T0 + dt.timedelta(days=1), 2)]


def test_duplicate_launches_finds_one_try_queued_twice(h):
    v = h.apply()
    _, tis = h.run(v, 1)
    h.ti(tis["a"], *DONE)
    h.ti(tis["b"], "none", "scheduled", "queued", "running", "up_for_retry")
    h.ti(tis["b"], "up_for_retry", "scheduled", "queued", "running", "success", try_number=2)
    assert h.check("duplicate_launches") == []
    h.ti(tis["c"], *LAUNCH)
    h.ti(tis["c"], "queued", "running", "success")  # try 1 queued again (through a lost update, say)
    h.ti(tis["c"], "scheduled", "queued", "running", "success")
    assert h.check("duplicate_launches") == [(tis["c"], 1, 2)]


# -- pools ---------------------------------------------------------------------------------------


def test_pool_violations_finds_a_pool_over_its_slots_and_accepts_slots_freed_in_time(h):
    v = h.apply(tasks=10)
    tis = [h.run(v, day)[1]["c"] for day in range(1, 4)]  # three task instances in pool p (2 slots)
    h.ti(tis[0], *LAUNCH, final=False)
    h.ti(tis[1], *LAUNCH, final=False)
    h.ti(tis[0], "running", "success")
    h.ti(tis[2], *LAUNCH, final=False)  # a slot was freed first: fine
    assert h.check("pool_violations") == []
    h.ti(tis[0], "success", "none", "scheduled", "queued", try_number=2)  # cleared and queued: a third
    [violation] = h.check("pool_violations")
    assert (violation["pool"], violation["used"], violation["slots"]) == ("p", 3, 2)


def test_pool_violations_follow_the_slots_a_pool_had_at_each_moment(h):
    v = h.apply(tasks=10)
    tis = [h.run(v, day)[1]["c"] for day in range(1, 4)]
    h.ti(tis[0], *LAUNCH, final=False)
    h.ti(tis[1], *LAUNCH, final=False)
    set_pool(h.db, "p", 1, now=T0)  # shrunk below what is in use: the running tries go on
    h.ti(tis[0], "running", "success")
    assert h.check("pool_violations") == []
    h.ti(tis[2], *LAUNCH, final=False)  # one still holds the only slot left
    [violation] = h.check("pool_violations")
    assert (violation["used"], violation["slots"]) == (2, 1)
    set_pool(h.db, "p", 2, now=T0)  # a later resize does not excuse the earlier admission
    assert len(h.check("pool_violations")) == 1


# -- maxActiveTasks, maxActiveTisPerDag, maxActiveRuns ---------------------------------------------


def test_max_active_tasks_counts_a_dags_queued_and_running_tis_across_runs(h):
    v = h.apply(runs=5, tasks=2)
    _, one = h.run(v, 1)
    _, two = h.run(v, 2)
    h.ti(one["a"], *LAUNCH, final=False)
    h.ti(two["b"], *LAUNCH, final=False)
    h.ti(one["a"], "running", "success")
    h.ti(one["b"], *LAUNCH, final=False)
    assert h.check("max_active_violations") == []
    h.ti(one["c"], "none", "scheduled", "queued", final=False)  # a third at once
    assert [(x["limit"], x["active"], x["max"]) for x in h.check("max_active_violations")] == [
        ("maxActiveTasks", 3, 2)]


def test_max_active_tis_per_dag_counts_one_task_across_runs(h):
    v = h.apply(runs=5, tasks=10)
    _, one = h.run(v, 1)
    _, two = h.run(v, 2)
    h.ti(one["a"], *DONE)
    h.ti(two["a"], *LAUNCH, final=False)  # after the first ended: fine
    assert h.check("max_active_violations") == []
    _, three = h.run(v, 3)
    h.ti(three["a"], "none", "scheduled", "queued", final=False)
    assert [(x["limit"], x["task_id"], x["active"], x["max"]) for x in h.check("max_active_violations")] == [
        ("maxActiveTisPerDag", "a", 2, 1)]


def test_max_active_runs_counts_running_runs_with_the_limit_of_the_runs_version(h):
    strict = h.apply(runs=1)
    first, _ = h.run(strict, 1, state="queued")
    second, _ = h.run(strict, 2, state="queued")
    h.run_moves(first, "queued", "running", "success")
    h.run_moves(second, "queued", "running")
    assert h.check("max_active_violations") == []
    loose = h.apply(runs=3)  # a new version allows more: runs on it may start beside the old one
    third, _ = h.run(loose, 3, state="queued")
    h.run_moves(third, "queued", "running")
    assert h.check("max_active_violations") == []
    fourth, _ = h.run(strict, 4, state="queued")  # but a run on the strict version may not
    h.run_moves(fourth, "queued", "running")
    assert [(x["limit"], x["running"], x["max"]) for x in h.check("max_active_violations")] == [
        ("maxActiveRuns", 3, 1)]


def test_a_cleared_run_counts_but_is_not_judged_and_a_backfill_keeps_its_own_limit(h):
    v = h.apply(runs=3)
    bf = h.backfill(max_active_runs=1)
    done, _ = h.run(v, 1, state="queued")
    h.run_moves(done, "queued", "running", "success")
    a, _ = h.run(v, 2, state="queued", backfill=bf)
    b, _ = h.run(v, 3, state="queued", backfill=bf)
    h.run_moves(a, "queued", "running")
    h.run_moves(done, "success", "running")  # `tasks clear` re-opens it: a person's decision
    assert h.check("max_active_violations") == []
    h.run_moves(b, "queued", "running")  # the backfill's second at once (and the DAG's third: allowed)
    assert [(x["limit"], x["running"], x["max"]) for x in h.check("max_active_violations")] == [
        ("backfill maxActiveRuns", 2, 1)]


# -- unfinished queued TIs, the timeline ----------------------------------------------------------


def test_unfinished_queued_tis_finds_a_queued_ti_left_in_a_finished_run(h):
    v = h.apply()
    run, tis = h.run(v, 1)
    h.ti(tis["a"], *DONE)
    h.run_moves(run, "running", "success")
    assert h.check("unfinished_queued_tis") == []
    h.ti(tis["b"], "none", "scheduled", "queued")
    assert h.check("unfinished_queued_tis") == [tis["b"]]


def test_broken_timeline_finds_a_run_whose_previous_is_not_the_run_before(h):
    v = h.apply()
    first, _ = h.run(v, 1, state="success")
    h.run(v, 2, state="success", previous=first)
    assert h.check("broken_timeline") == []
    third, _ = h.run(v, 3, state="success", previous=first)
    assert h.check("broken_timeline") == [third]


# -- lost task instances --------------------------------------------------------------------------


def test_lost_tis_accepts_ended_tries_and_tries_in_flight(h):
    v = h.apply()
    _, tis = h.run(v, 1)
    h.ti(tis["a"], "none", "scheduled", "queued", "running", "up_for_retry")
    h.ti(tis["a"], "up_for_retry", "scheduled", "queued", "running", "success", try_number=2)
    h.ti(tis["b"], *LAUNCH)  # still running its try: in flight, not lost
    h.ti(tis["c"], "none", "scheduled", "queued", "failed")  # could not be launched: an end too
    assert h.check("lost_tis") == []


def test_lost_tis_finds_a_try_that_ended_without_a_trace(h):
    v = h.apply()
    _, tis = h.run(v, 1)
    h.ti(tis["a"], *LAUNCH)
    h.set_ti(tis["a"], state="scheduled")  # moved on, but no event says the try ended
    [lost] = h.check("lost_tis")
    assert (lost["ti_id"], lost["try_number"], lost["state"]) == (tis["a"], 1, "scheduled")


def test_lost_tis_finds_a_try_overtaken_by_the_next_one_without_an_end(h):
    v = h.apply()
    _, tis = h.run(v, 1)
    h.ti(tis["a"], *LAUNCH)
    h.ti(tis["a"], "running", "queued", try_number=2)  # queued again while try 1 never ended
    [lost] = h.check("lost_tis")
    assert (lost["ti_id"], lost["try_number"], lost["row_try_number"]) == (tis["a"], 1, 2)


def test_lost_tis_finds_vanished_rows_and_runs_missing_task_instances(h):
    v = h.apply()
    _, tis = h.run(v, 1)
    h.run(v, 2, tasks=("a", "b"))  # `c` is missing; `late` starts after both runs
    h.ti(tis["a"], *DONE)
    with h.db.begin() as conn:
        conn.execute(ti_t.delete().where(ti_t.c.id == tis["b"]))
        conn.execute(insert(event_t).values(at=T0, who="test", entity="task_instance", ti_id=tis["b"],
                                            try_number=1, from_state="scheduled", to_state="queued"))
    found = h.check("lost_tis")
    assert {(x.get("ti_id"), x.get("task_id"), x["reason"]) for x in found} == {
        (tis["b"], None, "its task instance row no longer exists"),
        (None, "b", "the run has no task instance for it"),  # run 1 lost b
        (None, "c", "the run has no task instance for it"),  # run 2 never had c
    }


# -- stuck task instances and runs (a drained system) ----------------------------------------------


def test_stuck_tis_accepts_what_still_waits_for_time_a_pool_a_person_or_upstream(h):
    v = h.apply()
    _, tis = h.run(v, 1)
    h.ti(tis["a"], "none", "scheduled", "queued", "running", "up_for_retry")
    h.set_ti(tis["a"], next_retry_at=T0 + dt.timedelta(hours=1))  # waits for its retry time
    _, other = h.run(v, 2)
    with h.db.begin() as conn:
        conn.execute(ti_t.update().where(ti_t.c.id == other["c"]).values(state="scheduled", pool="nowhere"))
    h.ti(other["a"], *DONE)
    h.ti(other["b"], "none", "scheduled")
    set_paused(h.db, "d", True, now=T0)  # paused: nothing of it is expected to move
    assert h.check("stuck_tis", T0) == []
    set_paused(h.db, "d", False, now=T0)
    assert [(x["ti_id"], x["reason"]) for x in h.check("stuck_tis", T0)] == [
        (other["b"], "scheduled, and no limit holds it")]  # `c` waits for its pool to exist


def test_stuck_tis_finds_each_kind_of_task_instance_nothing_will_move(h):
    v = h.apply()
    _, tis = h.run(v, 1)
    h.ti(tis["a"], *DONE)  # b and c are now ready but stay `none`
    _, retry = h.run(v, 2)
    h.ti(retry["a"], "none", "scheduled", "queued", "running", "up_for_retry")  # retry due (no time set)
    _, active = h.run(v, 3)
    h.ti(active["a"], *LAUNCH)  # a zombie nobody settled
    done, orphan = h.run(v, 4)
    h.ti(orphan["a"], *DONE)
    h.run_moves(done, "running", "failed")  # b, c left `none` in a finished run
    found = {x["ti_id"]: x["reason"] for x in h.check("stuck_tis", T0)}
    assert found == {
        tis["b"]: "none, although its upstream tasks are done",
        tis["c"]: "none, although its upstream tasks are done",
        retry["a"]: "up_for_retry, and its retry time has come",
        active["a"]: "running with no replica left to run or settle it",
        orphan["b"]: "none in a failed run",
        orphan["c"]: "none in a failed run",
    }


def test_stuck_runs_finds_running_and_startable_runs_but_not_future_or_held_ones(h):
    v = h.apply()
    h.run(v, 1, state="success")
    h.run(v, 40, state="queued")  # its logical date has not come
    bf = h.backfill(max_active_runs=1)
    with h.db.begin() as conn:
        conn.execute(backfill_t.update().where(backfill_t.c.id == bf).values(is_paused=True))
    h.run(v, 2, state="queued", backfill=bf)
    assert h.check("stuck_runs", T0 + dt.timedelta(days=10)) == []
    running, _ = h.run(v, 3, state="running")
    startable, _ = h.run(v, 4, state="queued")
    assert [x["dag_run_id"] for x in h.check("stuck_runs", T0 + dt.timedelta(days=10))] == [running, startable]


def test_stuck_tis_says_when_a_scheduled_ti_waits_behind_stuck_ones(h):
    v = h.apply(tasks=10)
    _, one = h.run(v, 1)
    _, two = h.run(v, 2)
    _, three = h.run(v, 3)
    h.ti(one["c"], *LAUNCH)  # pool p has 2 slots: two zombies fill it
    h.ti(two["c"], *LAUNCH)
    h.ti(three["c"], "none", "scheduled")
    found = {x["ti_id"]: x["reason"] for x in h.check("stuck_tis", T0)}
    assert found[three["c"]] == "scheduled, held by task instances nothing will finish (pool p full)"
    assert found[one["c"]] == found[two["c"]] == "running with no replica left to run or settle it"


DAILY = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: daily}
spec:
  paused: false
  catchup: true
  schedule: "@daily"
  startDate: "2026-03-01"
  endDate: "2026-03-10"
  tasks:
    - {id: a, spark: {mainApplicationFile: a.py}}
"""


def test_missing_runs_finds_an_ended_interval_of_the_schedule_without_a_run(pg_db, tmp_path):
    path = tmp_path / "daily.yaml"
    path.write_text(DAILY)
    apply_dags(pg_db, load_dag_paths([str(path)]), now=T0)
    with pg_db.begin() as conn:
        version = conn.execute(select(dag_t.c.current_version_id).where(dag_t.c.dag_id == "daily")).scalar_one()
        for day in (1, 2, 4):  # the 3rd is missing; the 5th has not ended at `now`
            when = dt.datetime(2026, 3, day, tzinfo=dt.timezone.utc)
            conn.execute(insert(dag_run_t).values(
                dag_id="daily", run_id=f"scheduled__{day}", logical_date=when, data_interval_start=when,
                data_interval_end=when + dt.timedelta(days=1), run_after=when + dt.timedelta(days=1),
                run_type="scheduled", state="success", dag_version_id=version, created_at=when))
    now = dt.datetime(2026, 3, 5, 12, tzinfo=dt.timezone.utc)
    with pg_db.begin() as conn:
        assert audit.missing_runs(conn, now) == [{"dag_id": "daily", "logical_date": "2026-03-03T00:00:00+00:00"}]
        assert audit.missing_runs(conn, dt.datetime(2026, 3, 2, 12, tzinfo=dt.timezone.utc)) == []
    set_paused(pg_db, "daily", True, now=T0)  # a paused DAG is not expected to keep up
    with pg_db.begin() as conn:
        assert audit.missing_runs(conn, now) == []
