"""Trying a DAG before it is scheduled: `dags test`, `tasks test`, `tasks render`, and `tasks clear`
asking first. Driven through the real `dagline` command on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import textwrap

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from dagline.cli import main
from dagline.db.models import dag_run_t, ti_t
from dagline.testing.audit import all_violations
from tests.helpers.cli import cli, snapshot

DAG = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: sales}
spec:
  schedule: "0 2 * * *"
  catchup: true
  timezone: Europe/Amsterdam
  startDate: "2026-03-01"
  params: {out: /tmp/out}
  tasks:
    - id: extract
      spark:
        mainApplicationFile: extract.py
        arguments: ["--ds", "{{ ds }}", "--out", "{{ params.out }}", "--run", "{{ run_id }}"]
    - id: load
      upstream: [extract]
      pool: POOL
      spark:
        mainApplicationFile: load.py
        conf: {dagline.noop.outcome: "{{ 'failed' if conf.get('fail') else 'success' }}"}
"""


@pytest.fixture
def dag_file(tmp_path):
    path = tmp_path / "sales.yaml"
    path.write_text(DAG.replace("POOL", "default"))
    return path


@pytest.fixture
def applied(db, dag_file):
    cli(db, "dags", "apply", str(dag_file))
    cli(db, "dags", "pause", "sales")  # `dags test` needs no unpaused DAG
    return dag_file


def runs(db) -> list[dict]:
    return json.loads(cli(db, "runs", "list", "sales", "--json").output)


def test_dags_test_runs_a_paused_dag_once_and_stays_off_the_timeline(db, applied):
    out = cli(db, "dags", "test", "sales", "2026-03-02T02:00", "--executor", "noop", "--no-color",
              "--now", "2026-03-10").output
    assert "[extract] success" in out and "[load] success" in out
    assert "run state  ■" in out and "t test" in out  # the grid, with the test run's column
    [test_run] = runs(db)
    assert (test_run["run_type"], test_run["is_test"], test_run["state"]) == ("manual", True, "success")
    assert test_run["run_id"].startswith("test__") and test_run["previous_run_id"] is None
    assert test_run["logical_date"] == "2026-03-02T01:00:00+00:00"  # read in the DAG's zone

    # The scheduler, unpaused, still creates the scheduled run of that very date, and the timeline
    # skips the test run: nothing points at it, and `dags list` does not report it as the last run.
    cli(db, "dags", "unpause", "sales", "--now", "2026-03-03T02:00+01:00")
    cli(db, "scheduler", "--executor", "noop", "--until-idle", "--now", "2026-03-03T02:00+01:00")
    scheduled = [r for r in runs(db) if not r["is_test"]]
    assert [r["logical_date"] for r in scheduled] == ["2026-03-01T01:00:00+00:00", "2026-03-02T01:00:00+00:00"]
    assert scheduled[1]["previous_run_id"] == scheduled[0]["id"]
    assert all(r["previous_run_id"] != test_run["id"] for r in scheduled)
    with db.begin() as conn:
        violations = all_violations(conn)
    assert violations == {name: [] for name in violations}


def test_a_failing_test_run_exits_1_naming_the_task_and_conf_file_works(db, applied, tmp_path):
    conf = tmp_path / "conf.json"
    conf.write_text('{"fail": true}')
    result = cli(db, "dags", "test", "sales", "2026-03-02", "--executor", "noop", "--conf-file", str(conf),
                 "--now", "2026-03-10", expect=1)
    assert "[load] failed" in result.output
    assert "failed: load (failed on purpose" in result.output
    [run] = runs(db)
    assert (run["state"], run["is_test"]) == ("failed", True)


def test_a_test_run_that_cannot_go_on_stops_and_says_why(db, tmp_path):
    path = tmp_path / "sales.yaml"
    path.write_text(DAG.replace("POOL", "nowhere"))
    cli(db, "dags", "apply", str(path))
    result = cli(db, "dags", "test", "sales", "2026-03-02", "--executor", "noop", "--now", "2026-03-10", expect=1)
    assert "cannot go on: load: pool 'nowhere' does not exist" in result.output
    [run] = runs(db)
    assert run["state"] == "failed"  # not left running for ever
    tasks = {t["task_id"]: t["state"] for t in json.loads(cli(db, "tasks", "list", str(run["id"]), "--json").output)}
    assert tasks == {"extract": "success", "load": "skipped"}


def test_scheduler_replicas_leave_a_test_run_alone(db, applied):
    from dagline.store.runs import create_test_run
    from dagline.times import parse_instant

    cli(db, "dags", "unpause", "sales", "--now", "2026-03-03T02:00+01:00")
    run = create_test_run(db, "sales", now=parse_instant("2026-03-10"), logical_date=parse_instant("2026-03-05"))
    cli(db, "scheduler", "--executor", "noop", "--until-idle", "--now", "2026-03-02T02:00+01:00")
    with db.begin() as conn:
        states = set(conn.execute(select(ti_t.c.state).where(ti_t.c.dag_run_id == run.id)).scalars())
        assert states == {"none"}  # neither scheduled, queued nor adopted by the replica
        assert conn.execute(select(dag_run_t.c.state).where(dag_run_t.c.id == run.id)).scalar() == "running"


@pytest.mark.parametrize("args, code, cause", [
    (["dags", "test", "nope"], 1, "unknown DAG 'nope'"),
    (["dags", "test", "sales", "yesterday"], 2, "LOGICAL_DATE"),
    (["dags", "test", "sales", "--conf", "{nope"], 2, "--conf"),
    (["dags", "test", "sales", "--conf", "[1]"], 2, "--conf: must be a JSON object"),
    (["dags", "test", "sales", "--conf-file", "/no/such/file.json"], 2, "--conf-file: cannot read"),
    (["dags", "test", "sales", "--conf", "{}", "--conf-file", "x"], 2, "not both"),
    (["tasks", "test", "sales", "nope", "2026-03-02"], 2, "TASK_ID: DAG 'sales' has no task 'nope'"),
    (["tasks", "test", "sales", "extract", "03/02/2026"], 2, "LOGICAL_DATE"),
    (["tasks", "render", "nope", "extract", "2026-03-02"], 1, "unknown DAG 'nope'"),
    (["tasks", "render", "sales", "extract"], 2, "LOGICAL_DATE"),
])
def test_bad_input_names_the_field_and_changes_nothing(db, applied, args, code, cause):
    before = snapshot(db)
    result = CliRunner().invoke(main, ["--db", db.url, *args, "--now", "2026-03-10"] if args[0] == "dags"
                                else ["--db", db.url, *args])
    assert result.exit_code == code, result.output
    assert cause in result.output
    assert snapshot(db) == before


def test_tasks_render_shows_what_a_try_would_get(db, applied):
    data = json.loads(cli(db, "tasks", "render", "sales", "extract", "2026-03-02T02:00", "--json").stdout)
    assert data["arguments"] == ["--ds", "2026-03-02", "--out", "/tmp/out", "--run",
                                 "test__2026-03-02T01:00:00+00:00"]
    assert data["context"]["data_interval_end"] == "2026-03-03T02:00:00+01:00"
    conf = json.loads(cli(db, "tasks", "render", "sales", "load", "2026-03-02T02:00", "--conf", '{"fail": 1}',
                          "--json").stdout)["conf"]
    assert conf == {"dagline.noop.outcome": "failed"}
    # With a run at that date, its run id and conf are the context, as for its real tries.
    cli(db, "dags", "trigger", "sales", "--logical-date", "2026-03-02T02:00", "--conf", '{"out": "/elsewhere"}',
        "--now", "2026-03-10")
    text = cli(db, "tasks", "render", "sales", "extract", "2026-03-02T02:00").output
    assert "  /elsewhere\n" in text and "  manual__2026-03-02T01:00:00+00:00\n" in text


def test_tasks_render_of_a_date_uses_the_run_of_that_day(db, applied):
    """`2026-03-02` names the day whose `ds` is 2026-03-02: the run at 02:00 that day, not a made-up one."""
    cli(db, "dags", "trigger", "sales", "--logical-date", "2026-03-02T02:00", "--conf", '{"out": "/elsewhere"}',
        "--now", "2026-03-10")
    result = cli(db, "tasks", "render", "sales", "extract", "2026-03-02", "--json")
    data = json.loads(result.stdout)
    assert data["run_id"] == "manual__2026-03-02T01:00:00+00:00"
    assert data["arguments"][1] == "2026-03-02" and "/elsewhere" in data["arguments"]
    assert result.stderr == ""


def test_tasks_render_without_a_run_uses_the_schedules_interval_and_says_so(db, applied):
    for command in (["render"], ["test"]):
        extra = ["--executor", "noop"] if command == ["test"] else ["--json"]
        result = cli(db, "tasks", *command, "sales", "extract", "2026-03-02", *extra)
        assert "no run at 2026-03-02" in result.stderr
        assert "2026-03-02 02:00+01:00 to 2026-03-03 02:00+01:00" in result.stderr
    data = json.loads(cli(db, "tasks", "render", "sales", "extract", "2026-03-02", "--json").stdout)
    assert data["context"]["ds"] == "2026-03-02"
    assert data["context"]["data_interval_start"] == "2026-03-02T02:00:00+01:00"
    assert data["context"]["data_interval_end"] == "2026-03-03T02:00:00+01:00"


def test_tasks_test_with_noop_stores_nothing(db, applied):
    before = snapshot(db)
    result = cli(db, "tasks", "test", "sales", "extract", "2026-03-02", "--executor", "noop")
    assert "noop executor: success" in result.output
    result = cli(db, "tasks", "test", "sales", "load", "2026-03-02", "--executor", "noop", "--conf", '{"fail": 1}',
                 expect=1)
    assert "noop executor: failed" in result.output
    assert snapshot(db) == before


@pytest.mark.spark
def test_tasks_and_dags_test_with_the_local_executor(db, applied, tmp_path, connect_url):
    """Two small Python scripts as Spark Connect tries on the session's server (DAGLINE_CONNECT_URL): the
    task's output on stdout, its exit code; `dags test` shows the job's own output, one job using a real
    (Connect) SparkSession. Spark's own log, which only a spark-submit try writes, is the test below."""
    applied.write_text(DAG.replace("POOL", "default").replace("  params:", "  defaults: {spark: {connect: true}}\n"
                                                                           "  params:"))
    cli(db, "dags", "apply", str(applied))
    (tmp_path / "extract.py").write_text(textwrap.dedent("""
        import sys
        print("extracting", " ".join(sys.argv[1:]), flush=True)
        if "--run" in sys.argv:  # in `dags test`: a real SparkSession, on the Spark Connect server
            from pyspark.sql import SparkSession
            spark = SparkSession.builder.getOrCreate()
            print("rows", spark.range(3).count(), flush=True)
            spark.stop()
    """))
    (tmp_path / "load.py").write_text("import sys\nprint('loading')\nsys.exit(3)\n")
    before = snapshot(db)
    out = cli(db, "tasks", "test", "sales", "extract", "2026-03-02").output
    assert "extracting --ds 2026-03-02 --out /tmp/out" in out
    result = cli(db, "tasks", "test", "sales", "load", "2026-03-02", expect=3)
    assert "loading" in result.output
    assert snapshot(db) == before

    logs = tmp_path / "logs"
    result = cli(db, "dags", "test", "sales", "2026-03-02", "--log-folder", str(logs), expect=1)
    lines = result.output.splitlines()
    assert "[extract] extracting --ds 2026-03-02 --out /tmp/out --run test__2026-03-01T23:00:00+00:00" in lines
    assert "[load] loading" in lines
    assert lines.index("[extract] running") < lines.index("[load] loading")
    assert "load (exit code 3: loading)" in result.output
    assert "[extract] rows 3" in lines
    # the test run's logs stay where `tasks logs` finds them
    [run] = runs(db)
    extract_log = cli(db, "tasks", "logs", run["run_id"], "extract", "--log-folder", str(logs)).output
    assert "loading" in cli(db, "tasks", "logs", run["run_id"], "load", "--log-folder", str(logs)).output
    assert "rows 3" in extract_log and "dagline.executors.connect_job" in extract_log  # no JVM of its own


SPARK_LOG_DAG = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: counted}
spec:
  schedule: null
  tasks:
    - {id: count, spark: {mainApplicationFile: count.py}}
"""


@pytest.mark.spark
@pytest.mark.timeout(600)  # a spark-submit with a real SparkSession, on a shared machine
def test_dags_test_hides_sparks_own_log_of_a_spark_submit_try_and_keeps_it_in_the_file(sqlite_db, tmp_path):
    """A real `spark-submit` with a real SparkSession, whose JVM logs INFO/WARN lines: `dags test` shows the
    job's output without them and says where they are. On SQLite only: the database holds nothing of it."""
    (tmp_path / "count.py").write_text(textwrap.dedent("""
        from pyspark.sql import SparkSession
        spark = SparkSession.builder.master("local[1]").getOrCreate()
        print("rows", spark.range(3).count(), flush=True)
        spark.stop()
    """))
    (tmp_path / "counted.yaml").write_text(SPARK_LOG_DAG)
    cli(sqlite_db, "dags", "apply", str(tmp_path / "counted.yaml"))
    logs = tmp_path / "logs"
    lines = cli(sqlite_db, "dags", "test", "counted", "2026-03-02", "--log-folder", str(logs)).output.splitlines()
    assert "[count] rows 3" in lines
    assert not [line for line in lines if " INFO " in line or " WARN " in line]  # Spark's log is not shown
    [note] = [line for line in lines if "Spark log lines of try 1 not shown" in line]
    # the test run's logs stay where `tasks logs` finds them, Spark's log included
    [run] = json.loads(cli(sqlite_db, "runs", "list", "counted", "--json").output)
    assert note.startswith("[count] (") and f"`dagline tasks logs {run['run_id']} count --try 1`" in note
    assert " INFO SparkContext: " in cli(sqlite_db, "tasks", "logs", run["run_id"], "count", "--log-folder",
                                         str(logs)).output


def test_tasks_clear_asks_before_clearing_more_than_one(db, applied):
    cli(db, "dags", "unpause", "sales", "--now", "2026-03-03T02:00+01:00")
    cli(db, "scheduler", "--executor", "noop", "--until-idle", "--now", "2026-03-02T02:00+01:00")
    before = snapshot(db)
    with db.begin() as conn:
        states_before = conn.execute(select(ti_t.c.state).order_by(ti_t.c.id)).scalars().all()
    refused = CliRunner().invoke(main, ["--db", db.url, "tasks", "clear", "1"])  # stdin empty, no terminal
    assert refused.exit_code == 1 and "pass --yes" in refused.output
    declined = CliRunner().invoke(main, ["--db", db.url, "tasks", "clear", "1"], input="n\n")
    assert declined.exit_code == 1 and "nothing was changed" in declined.output
    assert snapshot(db) == before
    with db.begin() as conn:
        assert conn.execute(select(ti_t.c.state).order_by(ti_t.c.id)).scalars().all() == states_before
    accepted = CliRunner().invoke(main, ["--db", db.url, "tasks", "clear", "1", "--now", "2026-03-02T03:00+01:00"],
                                  input="y\n")
    assert accepted.exit_code == 0 and "clear 2 task instances of run 1 (extract, load)?" in accepted.output
    assert "cleared 2" in accepted.output
    cli(db, "scheduler", "--executor", "noop", "--until-idle", "--now", "2026-03-02T03:00+01:00")
    assert "cleared 1" in cli(db, "tasks", "clear", "1", "load").output  # one task: no question


def test_dags_test_runs_beside_a_running_scheduler(db, dag_file):
    """On SQLite the scheduler lock is for scheduler replicas, and on PostgreSQL the replicas leave test
    runs alone: either way `dags test` needs no scheduler stopped, and the scheduler's own work goes on."""
    import os
    import subprocess
    import sys

    from dagline.db.models import replica_t
    from tests.helpers.polling import wait_for

    cli(db, "dags", "apply", str(dag_file))
    cli(db, "dags", "unpause", "sales", "--now", "2026-03-03T02:00+01:00")
    env = dict(os.environ, DAGLINE_SCHEDULER_POLL_INTERVAL_S="0.05")
    scheduler = subprocess.Popen([sys.executable, "-m", "dagline.cli", "--db", db.url, "scheduler", "--executor",
                                  "noop", "--now", "2026-03-03T02:00+01:00"], env=env, stderr=subprocess.PIPE)
    try:
        def registered():  # on SQLite the replica holds the file lock by then
            assert scheduler.poll() is None, scheduler.stderr.read()
            with db.begin() as conn:
                return conn.execute(select(replica_t.c.id).where(replica_t.c.state == "running")).first()

        wait_for(registered, "the scheduler replica to register", timeout=60)
        out = cli(db, "dags", "test", "sales", "2026-03-02", "--executor", "noop").output
        assert "test run test__" in out and ": success" in out

        def successes():  # its 2 scheduled runs, and the test
            assert scheduler.poll() is None, runs(db)
            return len([r for r in runs(db) if r["state"] == "success"])

        wait_for(successes, "3 successful runs", timeout=60, until=lambda n: n >= 3)
    finally:
        scheduler.terminate()
        scheduler.wait(60)
        scheduler.stderr.close()
    assert scheduler.returncode == 0
    assert sorted((r["run_type"], r["is_test"]) for r in runs(db)) == [
        ("manual", True), ("scheduled", False), ("scheduled", False)]


def test_a_template_that_cannot_render_is_a_failed_operation_naming_the_task(db, tmp_path):
    path = tmp_path / "sales.yaml"
    path.write_text(DAG.replace("POOL", "default").replace('"{{ params.out }}"', '"{{ conf.out.upper() }}"'))
    cli(db, "dags", "apply", str(path))
    before = snapshot(db)
    for command in ("render", "test"):
        result = cli(db, "tasks", command, "sales", "extract", "2026-03-02", expect=1)
        assert "task 'extract': template error" in result.output and "conf.out" in result.output
    assert snapshot(db) == before
    assert "{{ conf.out.upper() }}" not in cli(db, "tasks", "render", "sales", "extract", "2026-03-02",
                                               "--conf", '{"out": "/x"}').output
