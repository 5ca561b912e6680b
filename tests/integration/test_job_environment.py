"""What a local job's environment holds (issue 26, defect 4): a real job run by the scheduler through
the local executor (a plain Python script that writes `os.environ` to a file), with the scheduler's
database URL, API tokens and database password in its environment. The job gets its try's token and the
API's URL, its task's `env` (a literal, a secret variable, a line of the secrets file), and none of the
scheduler's settings nor any secret its task did not name. Both ways a local try starts: `spark-submit`
(on SQLite; one of the suite's few real spark-submits) and a Spark Connect try on the session's server
(on PostgreSQL): the database changes nothing the job gets, so each way runs on one of them."""

from __future__ import annotations

import datetime as dt
import json
import os

import pytest

from dagline.clock import FixedClock
from dagline.executors.local import LocalExecutor
from dagline.scheduler.loop import Scheduler
from dagline.store.runs import trigger_run
from tests.helpers.harness import apply, tis, write_dag

NOW = dt.datetime(2026, 5, 1, tzinfo=dt.timezone.utc)
DAG = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: envdump}
spec:
  schedule: null
  paused: false
  defaults:
    env: [{name: STAGE, value: prod}]
  tasks:
    - id: dump
      env:
        - {name: DB_PASSWORD, valueFrom: {secretKeyRef: {name: warehouse, key: password}}}
        - {name: REGION, valueFrom: {secretKeyRef: {name: cloud, key: region}}}
        - {name: PGPASSWORD, valueFrom: {secretKeyRef: {name: warehouse, key: password}}}
      spark: {mainApplicationFile: dump_env.py, arguments: ["{{ params.out }}"]}
  params: {out: OUT}
"""
SCHEDULER_SETTINGS = {
    "DAGLINE_DB_URL": "postgresql://dagline:db-hunter2@db.internal/dagline",
    "DAGLINE_API_TOKENS": "admin:dgl_admin_token",
    "DAGLINE_SCHEDULER_POLL_INTERVAL_S": "0.2",
    "PGPASSWORD": "db-hunter2",
    "SECRET_WAREHOUSE__PASSWORD": "w-pass",
    "SECRET_PAYROLL__KEY": "not-for-this-task",
}
# What Spark itself puts in a Python job's environment (spark-submit, its JVM, PySpark's launcher), and
# what the local executor sets for loopback networking and the job's Python.
SPARKS_OWN = ("SPARK_", "PYSPARK_", "PY4J", "PYTHONHASHSEED", "PYTHONUNBUFFERED", "JAVA_", "MALLOC_ARENA_MAX",
              "OLDPWD", "_", "SHLVL", "PWD", "LD_LIBRARY_PATH", "PYTHONPATH", "MASTER")


@pytest.mark.spark
@pytest.mark.parametrize("how, database", [("spark-submit", "sqlite_db"), ("connect", "pg_db")])
def test_a_local_job_gets_its_token_and_its_tasks_env_and_nothing_of_the_schedulers(how, database, request,
                                                                                   tmp_path, monkeypatch):
    db = request.getfixturevalue(database)
    server = request.getfixturevalue("connect_server") if how == "connect" else None
    out = tmp_path / "env.json"
    (tmp_path / "dump_env.py").write_text(
        "import json, os, sys\nwith open(sys.argv[1], 'w') as f:\n    json.dump(dict(os.environ), f)\n")
    secrets_file = tmp_path / "secrets.env"
    secrets_file.write_text("SECRET_CLOUD__REGION=eu-west-1\nDAGLINE_DB_URL=sqlite:///from-the-file.db\n")
    for name, value in {**SCHEDULER_SETTINGS, "DAGLINE_SECRETS_FILE": str(secrets_file)}.items():
        monkeypatch.setenv(name, value)
    before = dict(os.environ)  # the scheduler's environment

    dag = DAG.replace("OUT", str(out))
    if server is not None:
        dag = dag.replace("mainApplicationFile: dump_env.py,", "mainApplicationFile: dump_env.py, connect: true,")
    apply(db, write_dag(tmp_path, dag))
    run = trigger_run(db, "envdump", now=NOW)
    clock = FixedClock(NOW)
    executor = LocalExecutor(parallelism=1, log_folder=str(tmp_path / "logs"), clock=clock, connect_server=server)
    Scheduler(db, executor, clock=clock, api_url="http://127.0.0.1:8793").run(until_idle=True)
    assert {task: ti.state for task, ti in tis(db, run.id).items()} == {"dump": "success"}

    env = json.loads(out.read_text())
    # spark-submit's JVM started it, or the Connect job runner with the server's URL (and no JVM of its own)
    assert ("SPARK_REMOTE" not in env and "SPARK_HOME" in env) if server is None else (
        env["SPARK_REMOTE"] == server.url and "SPARK_HOME" not in env)
    # every variable the job has that the scheduler did not give it as it was: exactly these
    given = sorted(name for name, value in env.items() if before.get(name) != value and not name.startswith(SPARKS_OWN))
    assert given == ["DAGLINE_API_URL", "DAGLINE_SIGNAL_TOKEN", "DB_PASSWORD", "PGPASSWORD", "REGION", "STAGE"]
    assert env["DAGLINE_API_URL"] == "http://127.0.0.1:8793" and env["DAGLINE_SIGNAL_TOKEN"].startswith("dgl_")
    assert (env["STAGE"], env["DB_PASSWORD"], env["REGION"], env["PGPASSWORD"]) == ("prod", "w-pass", "eu-west-1",
                                                                                       "w-pass")
    # every variable of the scheduler the job does not have: its settings and every secret variable
    taken = sorted(name for name in before if name not in env and name != "_")  # `_`: the shell's last command
    assert taken == sorted(name for name in before if name.upper().startswith(("DAGLINE_", "SECRET_")))
    assert "DAGLINE_DB_URL" in taken and "DAGLINE_API_TOKENS" in taken and "SECRET_PAYROLL__KEY" in taken
    assert not any("db-hunter2" in value or "dgl_admin_token" in value for value in env.values())


def test_the_template_renderer_process_holds_none_of_the_schedulers_settings(monkeypatch):
    """Templates cannot reach os.environ (the sandbox; tests/unit/test_templating.py); the process that
    renders them does not even hold the database URL or tokens."""
    from dagline.scheduler.renderer import Renderer, RenderRequest

    for name, value in SCHEDULER_SETTINGS.items():
        monkeypatch.setenv(name, value)
    renderer = Renderer()
    try:
        assert renderer.render(RenderRequest("t", [("spark.arguments[0]", "{{ ds }}")], {"ds": "2026-05-01"})) == {
            "spark.arguments[0]": "2026-05-01"}
        with open(f"/proc/{renderer._proc.pid}/environ", "rb") as f:
            names = {item.partition(b"=")[0].decode() for item in f.read().split(b"\0") if item}
    finally:
        renderer.close()
    assert "PATH" in names
    assert not {"DAGLINE_DB_URL", "DAGLINE_API_TOKENS", "DAGLINE_SCHEDULER_POLL_INTERVAL_S", "PGPASSWORD"} & names
