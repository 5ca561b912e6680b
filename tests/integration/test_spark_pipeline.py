"""The example pipeline run for real: a one-day backfill of examples/sales_daily through the
scheduler and the local executor (five PySpark jobs on a Spark Connect server, as the example chooses:
the session's, named by DAGLINE_CONNECT_URL, rather than one started by the backfill), as `make demo` does
for seven days; and a crashing job (through spark-submit: one of the suite's few real spark-submits)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from dagline.cli import main
from dagline.db.models import event_t
from tests.helpers.harness import assert_invariants, runs, ti_states


@pytest.mark.spark
@pytest.mark.timeout(600)  # five PySpark jobs on a loaded 2-core machine
def test_a_day_of_the_example_pipeline_runs_through_the_scheduler(sqlite_db, tmp_path, connect_url):
    out = tmp_path / "data"
    example = "examples/sales_daily"
    runner = CliRunner()

    def cli(*args):
        result = runner.invoke(main, ["--db", sqlite_db.url, *args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    cli("pools", "set", "spark", "4")
    applied = cli("dags", "apply", example)
    assert "created paused" in applied and "`dagline dags unpause sales-daily` to start" in applied
    cli("dags", "unpause", "sales-daily")  # a DAG applied for the first time is paused (as the demo does)
    # a run's conf overrides the DAG's params: the output goes to tmp_path
    cli("backfill", "run", "sales-daily", "--start", "2026-03-02", "--end", "2026-03-02", "--parallelism", "2",
        "--conf", json.dumps({"out": str(out)}),
        "--log-folder", str(tmp_path / "logs"), "--now", "2026-03-10T00:00:00Z")
    [run] = runs(sqlite_db, "sales-daily")
    assert run["state"] == "success", ti_states(sqlite_db, run["id"])
    assert set(ti_states(sqlite_db, run["id"]).values()) == {"success"}
    report = json.loads((out / "reports" / "ds=2026-03-02" / "report.json").read_text())
    assert report["ds"] == "2026-03-02"
    log = cli("tasks", "logs", str(run["id"]), "ingest_orders", "--log-folder", str(tmp_path / "logs"))
    assert "SparkContext" in log or "SparkSession" in log or "ingest" in log.lower()
    with sqlite_db.begin() as conn:
        order = [r.task_id for r in conn.execute(
            select(event_t.c.task_id).where(event_t.c.entity == "task_instance", event_t.c.to_state == "success")
            .order_by(event_t.c.id))]
    assert order[0] == "ingest_orders" and order[1] == "clean_orders" and order[-1] == "daily_report"
    assert not (tmp_path / "logs" / "connect-server.log").exists()  # the backfill started no server of its own
    assert_invariants(sqlite_db)


@pytest.mark.spark
def test_a_crashing_job_fails_its_task_with_the_cause_and_its_log(sqlite_db, tmp_path):
    (tmp_path / "crash.py").write_text("import sys\nprint('reading input')\nraise SystemExit('no input for 2026-03-02')\n")
    (tmp_path / "dag.yaml").write_text("""
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: crashing}
spec:
  paused: false
  catchup: true
  schedule: null
  tasks:
    - {id: crash, spark: {mainApplicationFile: crash.py}}
    - {id: after, upstream: [crash], spark: {mainApplicationFile: crash.py}}
""")
    runner = CliRunner()

    def cli(*args, code=0):
        result = runner.invoke(main, ["--db", sqlite_db.url, *args], catch_exceptions=False)
        assert result.exit_code == code, result.output
        return result.output

    cli("dags", "apply", str(tmp_path / "dag.yaml"))
    cli("dags", "trigger", "crashing", "--now", "2026-03-02T00:00:00Z")
    failed = cli("scheduler", "--until-idle", "--log-folder", str(tmp_path / "logs"), "--now", "2026-03-02T00:00:00Z",
                 code=1)  # --until-idle exits 1 when a run it finished failed, saying why
    assert "1 run(s) failed" in failed and "crash (try 1): exit code 1" in failed
    [run] = runs(sqlite_db, "crashing")
    tasks = {t["task_id"]: t for t in json.loads(cli("tasks", "list", str(run["id"]), "--json"))}
    assert run["state"] == "failed"
    assert tasks["crash"]["state"] == "failed" and tasks["after"]["state"] == "upstream_failed"
    assert "exit code 1" in tasks["crash"]["message"] and "no input for 2026-03-02" in tasks["crash"]["message"]
    assert "reading input" in cli("tasks", "logs", str(run["id"]), "crash", "--log-folder", str(tmp_path / "logs"))
