"""Looking after what is stored: `dags delete`, `pools delete`, `runs show`, `db check`, `config` and
`tasks logs --follow`, through the real `dagline` command on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from dagline.cli import main
from dagline.clock import FixedClock
from dagline.db.engine import head_revision
from dagline.db.models import backfill_t, dag_run_t, dag_t, dag_version_t, event_t, ti_t
from dagline.executors.noop import NoopExecutor
from dagline.scheduler.loop import Scheduler
from dagline.scheduler.settings import SchedulerSettings
from dagline.times import UTC
from tests.helpers.cli import GOOD, cli, snapshot

POOLED = GOOD.replace("metadata: {name: sales}", "metadata: {name: pooled}").replace(
    "    - id: extract\n", "    - id: extract\n      pool: spark\n")


@pytest.fixture
def two_dags(db, tmp_path):
    (tmp_path / "sales.yaml").write_text(GOOD)
    (tmp_path / "pooled.yaml").write_text(POOLED)
    cli(db, "pools", "set", "spark", "2")
    cli(db, "dags", "apply", str(tmp_path / "sales.yaml"), str(tmp_path / "pooled.yaml"))
    cli(db, "scheduler", "--executor", "noop", "--until-idle", "--now", "2026-03-02T00:00:00Z")
    cli(db, "backfill", "create", "sales", "--start", "2026-03-02", "--end", "2026-03-03", "--now", "2026-03-05")
    return tmp_path


def rows_of(db, dag_id: str) -> dict[str, int]:
    with db.begin() as conn:
        return {t.name: conn.execute(select(func.count()).select_from(t).where(t.c.dag_id == dag_id)).scalar_one()
                for t in (dag_t, dag_version_t, dag_run_t, ti_t, backfill_t)}


def test_dags_delete_asks_then_removes_the_dag_and_its_history(db, two_dags):
    assert rows_of(db, "sales") == {"dag": 1, "dag_version": 1, "dag_run": 3, "task_instance": 6, "backfill": 1}
    before, pooled = snapshot(db), rows_of(db, "pooled")
    refused = CliRunner().invoke(main, ["--db", db.url, "dags", "delete", "sales"])  # no terminal, no answer
    assert refused.exit_code == 1 and "pass --yes" in refused.output
    assert "with 3 runs, 6 task instances, 1 backfill and 1 version?" in refused.output
    assert snapshot(db) == before
    with db.begin() as conn:
        events_before = conn.execute(select(func.count()).select_from(event_t)
                                     .where(event_t.c.dag_id == "sales")).scalar_one()
    done = CliRunner().invoke(main, ["--db", db.url, "dags", "delete", "sales"], input="y\n")
    assert done.exit_code == 0, done.output
    assert rows_of(db, "sales") == {"dag": 0, "dag_version": 0, "dag_run": 0, "task_instance": 0, "backfill": 0}
    assert rows_of(db, "pooled") == pooled  # the other DAG is untouched
    with db.begin() as conn:  # the event log stays, plus one event for the deletion
        assert conn.execute(select(func.count()).select_from(event_t)
                            .where(event_t.c.dag_id == "sales")).scalar_one() == events_before + 1
    assert "unknown DAG 'sales'" in cli(db, "dags", "delete", "sales", "--yes", expect=1).output
    cli(db, "dags", "apply", str(two_dags / "sales.yaml"))  # a new history starts
    assert rows_of(db, "sales")["dag_version"] == 1


def test_deleting_a_dag_under_a_running_scheduler_stops_its_jobs(db, tmp_path):
    (tmp_path / "sales.yaml").write_text(GOOD)
    cli(db, "dags", "apply", str(tmp_path / "sales.yaml"))
    executor = NoopExecutor(parallelism=4, duration_s=600)
    sched = Scheduler(db, executor, clock=FixedClock(dt.datetime(2026, 3, 2, tzinfo=UTC)),
                      settings=SchedulerSettings(housekeeping_interval_s=0.01))
    sched.start()
    try:
        sched.iterate()
        assert executor.has_work()  # `extract` of the first run is running
        cli(db, "dags", "delete", "sales", "--yes")
        deadline = time.monotonic() + 30
        while executor.has_work():  # housekeeping finds the try gone and cancels its job
            assert time.monotonic() < deadline
            time.sleep(0.02)
            sched.iterate()
    finally:
        sched.stop()
    assert rows_of(db, "sales")["task_instance"] == 0


def test_pools_delete_is_refused_while_the_pool_is_used(db, two_dags):
    result = cli(db, "pools", "delete", "spark", expect=1)
    assert "pool 'spark' is in use" in result.output and "pooled.extract" in result.output
    assert "default pool cannot be removed" in cli(db, "pools", "delete", "default", expect=1).output
    assert "unknown pool 'nope'" in cli(db, "pools", "delete", "nope", expect=1).output
    # A queued task instance in it also holds it, after its DAG stopped naming the pool.
    cli(db, "dags", "trigger", "pooled", "--logical-date", "2026-03-05", "--now", "2026-03-06")
    sched = Scheduler(db, NoopExecutor(parallelism=4, duration_s=600),
                      clock=FixedClock(dt.datetime(2026, 3, 6, tzinfo=UTC)))
    sched.start()
    try:
        sched.iterate()  # extract is queued in `spark`, and runs (for ten minutes)
    finally:
        sched.stop()
    (two_dags / "pooled.yaml").write_text(POOLED.replace("      pool: spark\n", ""))
    cli(db, "dags", "apply", str(two_dags / "pooled.yaml"))
    result = cli(db, "pools", "delete", "spark", expect=1)
    assert "queued or running in it: pooled.extract@" in result.output
    assert "tasks of active DAGs" not in result.output
    with db.begin() as conn:
        conn.execute(ti_t.update().where(ti_t.c.pool == "spark").values(state="failed"))
    assert "pool spark: deleted" in cli(db, "pools", "delete", "spark").output
    assert [p["name"] for p in json.loads(cli(db, "pools", "list", "--json").output)] == ["default"]


def test_runs_show_gives_tasks_durations_and_timeline_neighbours(db, two_dags):
    runs = json.loads(cli(db, "runs", "list", "sales", "--json").output)
    by_date = {r["logical_date"][:10]: r for r in runs}
    middle = json.loads(cli(db, "runs", "show", str(by_date["2026-03-02"]["id"]), "--json").output)
    assert (middle["run_type"], middle["state"]) == ("backfill", "queued")
    assert middle["previous"]["run_id"] == by_date["2026-03-01"]["run_id"]
    assert middle["next"]["run_id"] == by_date["2026-03-03"]["run_id"]
    assert [(t["task_id"], t["state"], t["duration_s"]) for t in middle["tasks"]] == [
        ("extract", "none", None), ("load", "none", None)]
    first = json.loads(cli(db, "runs", "show", str(by_date["2026-03-01"]["id"]), "--json").output)
    assert first["previous"] is None and first["duration_s"] == 0.0
    assert [(t["task_id"], t["state"], t["duration_s"]) for t in first["tasks"]] == [
        ("extract", "success", 0.0), ("load", "success", 0.0)]
    text = cli(db, "runs", "show", str(middle["id"])).output
    assert "previous:      scheduled__2026-03-01T00:00:00+00:00" in text
    assert "next:          backfill__2026-03-03T00:00:00+00:00" in text and "extract  none" in text
    assert "unknown run '999'" in cli(db, "runs", "show", "999", expect=1).output


def test_db_check_says_whether_the_database_is_usable(db, tmp_path):
    ok = cli(db, "db", "check")
    assert "connection: ok" in ok.output and f"schema: current (revision {head_revision(db)})" in ok.output
    down = CliRunner().invoke(main, ["--db", "postgresql://probe:s3cret@127.0.0.1:1/none", "db", "check"])
    assert down.exit_code == 1 and "connection: failed" in down.output and "s3cret" not in down.output
    empty = CliRunner().invoke(main, ["--db", f"sqlite:///{tmp_path}/empty.db", "db", "check"])
    assert empty.exit_code == 1 and "run `dagline db upgrade`" in empty.output
    bad = CliRunner().invoke(main, ["--db", "mysql://x/y", "db", "check"])
    assert bad.exit_code == 2 and "--db" in bad.output


def test_db_check_reports_an_older_schema(sqlite_db):
    from alembic import command

    from dagline.db.engine import migrations_config

    cfg = migrations_config(sqlite_db)
    with sqlite_db.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0002")
    result = CliRunner().invoke(main, ["--db", sqlite_db.url, "db", "check", "--json"])
    assert result.exit_code == 1
    head = head_revision(sqlite_db)
    assert json.loads(result.output)["schema"] == {
        "ok": False, "current": "0002", "head": head,
        "error": f"the database at {sqlite_db.url} has schema revision 0002, this dagline needs {head}: "
                 "run `dagline db upgrade` first"}


def test_config_lists_settings_and_where_they_came_from(tmp_path):
    env = {"DAGLINE_DB_URL": "postgresql://me:hunter2@db.example:5432/dagline",
           "DAGLINE_SCHEDULER_POLL_INTERVAL_S": "0.25", "DAGLINE_LOG_FOLDER": str(tmp_path / "logs")}
    result = CliRunner(env=env).invoke(main, ["config", "--json"])
    assert result.exit_code == 0, result.output
    settings = {s["name"]: s for s in json.loads(result.output)}
    assert "hunter2" not in result.output
    assert settings["db_url"]["value"] == "postgresql+psycopg2://me:***@db.example:5432/dagline"
    assert settings["db_url"]["source"] == "environment variable DAGLINE_DB_URL"
    assert (settings["scheduler.poll_interval_s"]["value"], settings["scheduler.poll_interval_s"]["source"]) == (
        0.25, "environment variable DAGLINE_SCHEDULER_POLL_INTERVAL_S")
    assert settings["scheduler.heartbeat_interval_s"]["source"] == "default"
    assert settings["log_folder"]["value"] == str(tmp_path / "logs")
    assert {"scheduler.parallelism", "operator.executor", "noop.duration_s", "spark_k8s.image",
            "local.connect.driver_memory"} <= set(settings)
    flagged = CliRunner(env=env).invoke(main, ["--db", f"sqlite:///{tmp_path}/x.db", "config"])
    assert "flag --db" in flagged.output
    bad = CliRunner(env={"DAGLINE_SCHEDULER_POLL_INTERVAL_S": "soon"}).invoke(main, ["config"])
    assert bad.exit_code == 2 and "DAGLINE_SCHEDULER_POLL_INTERVAL_S" in bad.output


def test_config_lists_every_setting_of_the_settings_page(tmp_path):
    """Each variable of docs/reference/settings.md that dagline reads (not those it sets in a try, nor the
    tests' own) is a row of `dagline config --json`, with its value and where it came from."""
    from pathlib import Path

    page = (Path(__file__).parents[2] / "docs" / "reference" / "settings.md").read_text()
    read = [part for part in page.split("\n## ")
            if not part.startswith(("Set by dagline in every task try", "Tests, benchmarks and demos"))]
    documented = set(re.findall(r"^\| `(DAGLINE_[A-Z0-9_]+)`", "\n## ".join(read), flags=re.MULTILINE))
    assert {"DAGLINE_CALLBACK_WORKERS", "DAGLINE_API_MAX_BATCH", "DAGLINE_LOG_MAX_BYTES"} <= documented
    env = {"DAGLINE_CALLBACK_WORKERS": "8", "DAGLINE_LOG_FILES": "3", "DAGLINE_API_MAX_BATCH": "10"}
    result = CliRunner(env=env).invoke(main, ["config", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert documented - {row["variable"] for row in rows} == set()
    by_name = {row["name"]: row for row in rows}
    for name, value, variable in (("callback.workers", 8, "DAGLINE_CALLBACK_WORKERS"),
                                  ("log.files", 3, "DAGLINE_LOG_FILES"), ("api.max_batch", 10, "DAGLINE_API_MAX_BATCH")):
        assert (by_name[name]["value"], by_name[name]["source"]) == (value, f"environment variable {variable}")
    assert by_name["log.max_bytes"]["source"] == "default"


FOLLOWED = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: slow}
spec:
  paused: false
  schedule: null
  tasks:
    - id: talk
      spark: {mainApplicationFile: talk.py, arguments: ["GO_FILE"], connect: true}
"""

TALK = """
import os, sys, time
print("first line", flush=True)
deadline = time.monotonic() + 120
while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
    time.sleep(0.05)
print("second line", flush=True)
"""


def _wait(predicate, what: str, deadline_s: float = 120) -> None:
    end = time.monotonic() + deadline_s
    while not predicate():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.spark
def test_tasks_logs_follow_prints_until_the_try_ends(db, tmp_path, connect_url):
    """A Connect try (a plain script, on the session's server: DAGLINE_CONNECT_URL), so no JVM per run."""
    go = tmp_path / "go"
    (tmp_path / "slow.yaml").write_text(FOLLOWED.replace("GO_FILE", str(go)))
    (tmp_path / "talk.py").write_text(TALK)
    logs = tmp_path / "logs"
    cli(db, "dags", "apply", str(tmp_path / "slow.yaml"))
    run_id = cli(db, "dags", "trigger", "slow").output.strip()
    env = dict(os.environ, DAGLINE_SCHEDULER_POLL_INTERVAL_S="0.05")
    dagline = [sys.executable, "-m", "dagline.cli", "--db", db.url]
    scheduler = subprocess.Popen([*dagline, "scheduler", "--until-idle", "--log-folder", str(logs)], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    follow = None
    try:
        log = logs / "slow" / run_id / "talk" / "try-1.log"
        _wait(lambda: log.exists() and "first line" in log.read_text(), "the first line")
        follow = subprocess.Popen([*dagline, "tasks", "logs", run_id, "talk", "--follow", "--poll-interval", "0.05",
                                   "--log-folder", str(logs)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        go.touch()
        out, err = follow.communicate(timeout=120)
        scheduler.communicate(timeout=120)  # waits for it and closes its stderr pipe
    finally:
        for process in (follow, scheduler):
            if process is not None and process.poll() is None:
                process.kill()
                process.communicate()
    assert follow.returncode == 0, err
    assert out.index("first line") < out.index("second line")
    assert "try 1 of talk ended: success" in err


DST = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: dst}
spec:
  paused: false
  schedule: "0 2 * * *"
  timezone: Europe/Amsterdam
  startDate: "2026-03-27"
  tasks:
    - id: only
      spark: {mainApplicationFile: only.py}
"""


def test_listings_take_limit_and_dag_and_show_local_times(db, two_dags, tmp_path):
    (tmp_path / "dst.yaml").write_text(DST)
    cli(db, "dags", "apply", str(tmp_path / "dst.yaml"))
    conf = tmp_path / "conf.json"
    conf.write_text('{"out": "/tmp/x"}')
    cli(db, "backfill", "run", "dst", "--start", "2026-03-28", "--end", "2026-03-30", "--executor", "noop",
        "--conf-file", str(conf), "--now", "2026-04-01")
    table = cli(db, "runs", "list", "--dag", "dst").output
    # local times with their offset, across the spring-forward night (02:00 does not exist on the 29th)
    for shown in ("2026-03-28 02:00+01:00", "2026-03-29 03:00+02:00", "2026-03-30 02:00+02:00"):
        assert shown in table
    assert "DURATION" in table and "—" in table and "0.0s" not in table  # a frozen clock measures nothing
    listed = json.loads(cli(db, "runs", "list", "dst", "--json").output)
    assert [r["logical_date"] for r in listed] == ["2026-03-28T01:00:00+00:00", "2026-03-29T01:00:00+00:00",
                                                   "2026-03-30T00:00:00+00:00"]  # JSON stays UTC
    latest = json.loads(cli(db, "runs", "list", "--dag", "dst", "--limit", "1", "--json").output)
    assert [r["logical_date"] for r in latest] == ["2026-03-30T00:00:00+00:00"]
    shown = json.loads(cli(db, "runs", "show", str(latest[0]["id"]), "--json").output)
    assert shown["conf"] == {"out": "/tmp/x"}  # from --conf-file
    assert "names DAG 'dst', but DAG_ID names 'sales'" in cli(db, "runs", "list", "sales", "--dag", "dst",
                                                              expect=2).output
    assert len(json.loads(cli(db, "dags", "list", "--limit", "2", "--json").output)) == 2
    assert len(json.loads(cli(db, "tasks", "list", "1", "--limit", "1", "--json").output)) == 1
    assert [b["dag_id"] for b in json.loads(cli(db, "backfill", "list", "--limit", "1", "--json").output)] == ["dst"]
    assert [b["dag_id"] for b in json.loads(cli(db, "backfill", "list", "--dag", "sales", "--json").output)] == [
        "sales"]
    assert len(json.loads(cli(db, "pools", "list", "--limit", "1", "--json").output)) == 1
    assert len(json.loads(cli(db, "dags", "next-runs", "dst", "--limit", "2", "--json").output)) == 2
    before = snapshot(db)
    conf.write_text("{not json")
    result = cli(db, "dags", "trigger", "dst", "--conf-file", str(conf), expect=2)
    assert "--conf-file: not valid JSON" in result.output
    result = cli(db, "backfill", "create", "dst", "--start", "2026-03-27", "--end", "2026-03-27", "--conf-file",
                 str(tmp_path / "missing.json"), "--now", "2026-04-01", expect=2)
    assert "--conf-file: cannot read" in result.output
    assert snapshot(db) == before
    conf.write_text('{"n": 1}')
    run_id = cli(db, "dags", "trigger", "dst", "--logical-date", "2026-03-31T02:00", "--conf-file", str(conf),
                 "--now", "2026-04-01").output.strip()
    assert json.loads(cli(db, "runs", "show", run_id, "--json").output)["conf"] == {"n": 1}
