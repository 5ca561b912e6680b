"""The noop executor as the chaos harness uses it: task durations from the environment
(`DAGLINE_NOOP_DURATION`, `DAGLINE_NOOP_SEED`) that take time, reproducibly, with a clear error for a
bad value; and jobs that die with their replica, so another one cannot adopt them."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from dagline.cli import main
from dagline.db.models import replica_t, ti_t
from dagline.errors import InvalidInput
from dagline.executors import make_executor
from dagline.executors.base import SparkJob, TaskKey, TaskLaunch
from dagline.executors.noop import parse_duration_option
from tests.helpers.dags import dag, task, write

DAG = dag("timed", task("first", app="a.py"), task("second", "first", app="b.py"))


def _cli(db, *args, env=None):
    return CliRunner().invoke(main, ["--db", db.url, *args], env=env)


def test_tries_last_as_long_as_the_environment_says(sqlite_db, tmp_path):
    write(tmp_path, DAG, "dag.yaml")
    assert _cli(sqlite_db, "dags", "apply", str(tmp_path / "dag.yaml")).exit_code == 0
    assert _cli(sqlite_db, "dags", "trigger", "timed").exit_code == 0
    env = {"DAGLINE_NOOP_DURATION": "0.3-0.4", "DAGLINE_NOOP_SEED": "3", "DAGLINE_SCHEDULER_POLL_INTERVAL_S": "0.02"}
    result = _cli(sqlite_db, "scheduler", "--executor", "noop", "--until-idle", env=env)
    assert result.exit_code == 0, result.output
    with sqlite_db.begin() as conn:
        rows = conn.execute(select(ti_t.c.task_id, ti_t.c.state, ti_t.c.start_date, ti_t.c.end_date)).all()
    assert {r.task_id: r.state for r in rows} == {"first": "success", "second": "success"}
    assert all((r.end_date - r.start_date).total_seconds() >= 0.3 for r in rows)


@pytest.mark.parametrize("name, value", [("DAGLINE_NOOP_DURATION", "fast"), ("DAGLINE_NOOP_DURATION", "0.5-0.1"),
                                         ("DAGLINE_NOOP_SEED", "seven")])
def test_a_bad_value_is_refused_naming_the_variable_and_nothing_starts(sqlite_db, name, value):
    result = _cli(sqlite_db, "scheduler", "--executor", "noop", "--until-idle", env={name: value})
    assert result.exit_code == 2 and name in result.output and repr(value) in result.output
    with sqlite_db.begin() as conn:
        assert conn.execute(select(func.count()).select_from(replica_t)).scalar_one() == 0


def test_with_a_seed_a_try_lasts_the_same_whichever_replica_launches_it_in_whatever_order():
    keys = [TaskKey("d", "manual__1", f"t{i}", 1) for i in range(20)]

    def durations(seed, order):
        executor = make_executor("noop", parallelism=1, log_folder="unused", duration_s=(0.05, 0.5), seed=seed)
        return {key: executor.duration_of(key) for key in order}

    one, other = durations(7, keys), durations(7, list(reversed(keys)))
    assert one == other and all(0.05 <= d <= 0.5 for d in one.values()) and len(set(one.values())) == 20
    assert durations(8, keys) != one
    next_try = TaskKey("d", "manual__1", "t0", 2)
    assert durations(7, [next_try])[next_try] != one[keys[0]]  # the next try of a task draws anew


def test_duration_option_reads_a_number_or_a_range():
    assert parse_duration_option("0.2") == 0.2
    assert parse_duration_option(" 0.05-0.5 ") == (0.05, 0.5)
    assert parse_duration_option("1..2") == (1.0, 2.0)
    with pytest.raises(InvalidInput, match="DAGLINE_NOOP_DURATION: '-1' is not a duration"):
        parse_duration_option("-1")


def test_tries_of_another_replica_cannot_be_adopted_but_its_own_are_followed():
    keys = [TaskKey("d", "manual__1", task, 1) for task in ("mine", "theirs")]
    launches = [TaskLaunch(ti_id=i, key=key, job=SparkJob("job.py")) for i, key in enumerate(keys)]
    executor = make_executor("noop", parallelism=4, log_folder="unused", duration_s=60)
    executor.launch(launches[:1])
    assert executor.adopt(launches) == [launches[1]]  # its job died with the replica that launched it
    assert executor.free_slots() == 3  # nothing was taken over
