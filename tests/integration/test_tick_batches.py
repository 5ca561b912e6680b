"""Many DAGs due at one tick (issue 32): their runs are created set-based, a batch of DAGs in a few
statements, and are the runs the DAG-by-DAG path would create: one per due interval, `previous`
linked along each DAG's timeline (a manual run holding a date or sitting after the due dates
included), the applied version recorded, `maxActiveRuns` kept, paused DAGs untouched, and the next
run the same as `dags next-runs` lists."""

from __future__ import annotations

import datetime as dt
import json

from sqlalchemy import event

from dagline.scheduler.create_runs import create_scheduled_runs
from dagline.store.dags import DagCache
from tests.helpers.cli import cli
from tests.helpers.dags import dag, task, write

NOW = "2026-03-01T04:00:00+00:00"  # four hourly intervals (00:00 to 03:00) have ended
DUE = [f"2026-03-01T0{h}:00:00+00:00" for h in range(4)]


def _apply(db, tmp_path, count: int, **special) -> None:
    for i in range(count):
        name = f"d{i:02d}"
        fields = {"maxActiveRuns": 16, **special.get(name, {})}
        cli(db, "dags", "apply", write(tmp_path, dag(name, task("a"), schedule="@hourly", startDate="2026-03-01",
                                                     **fields)), "--now", "2026-03-01T00:00:00Z")


def _runs(db, dag_id: str) -> list[dict]:
    runs = json.loads(cli(db, "runs", "list", dag_id, "--json").output)
    return sorted(runs, key=lambda r: r["logical_date"])


def test_a_tick_of_many_dags_creates_the_runs_one_by_one_creation_would(db, tmp_path):
    _apply(db, tmp_path, 12, d05={"maxActiveRuns": 2}, d07={"paused": True})
    cli(db, "dags", "trigger", "d03", "--logical-date", "2026-03-01T05:30:00+00:00")  # after the due dates
    cli(db, "dags", "trigger", "d04", "--logical-date", DUE[1])  # holds a due date
    cli(db, "scheduler", "--executor", "noop", "--until-idle", "--now", NOW)

    for i in range(12):
        name = f"d{i:02d}"
        runs = _runs(db, name)
        if name == "d07":
            assert runs == []  # paused: untouched
            continue
        dates = [r["logical_date"] for r in runs]
        if name == "d03":
            assert dates == [*DUE, "2026-03-01T05:30:00+00:00"]
        else:
            assert dates == DUE, name
        scheduled = [r for r in runs if r["run_type"] == "scheduled"]
        assert len(scheduled) == (3 if name == "d04" else 4), name  # d04's 01:00 is its manual run's
        assert len({r["logical_date"] for r in runs}) == len(runs)  # no duplicate
        assert [r["previous_run_id"] for r in runs] == [None] + [r["id"] for r in runs[:-1]], name
        assert {r["dag_version"] for r in runs} == {json.loads(cli(db, "dags", "show", name, "--json").output)
                                                    ["version"]}
        assert all(r["state"] == "success" for r in runs if r["logical_date"] in DUE)  # 05:30 is still to come
        upcoming = json.loads(cli(db, "dags", "next-runs", name, "--now", NOW, "--json").output)
        assert upcoming[0]["logical_date"] == "2026-03-01T04:00:00+00:00"


def test_max_active_runs_holds_within_a_batch(db, tmp_path):
    _apply(db, tmp_path, 3, d01={"maxActiveRuns": 2})
    with db.begin() as conn:
        created = create_scheduled_runs(conn, now=dt.datetime.fromisoformat(NOW), dags=DagCache(), who="test",
                                        limit=50, per_dag=16)
    assert created == 4 + 2 + 4
    assert [r["logical_date"] for r in _runs(db, "d01")] == DUE[:2]


def test_a_batch_of_due_dags_costs_a_few_statements_not_a_few_per_dag(db, tmp_path):
    _apply(db, tmp_path, 40)
    statements = []
    event.listen(db.engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    with db.begin() as conn:
        created = create_scheduled_runs(conn, now=dt.datetime.fromisoformat(NOW), dags=DagCache(), who="test",
                                        limit=50, per_dag=16)
    assert created == 40 * 4
    assert len(statements) < 20, statements  # DAG by DAG: about 20 per run
