"""Spark Connect tasks with real PySpark: jobs share the replica's warm server and cannot hurt each other.

A job's failure or its `spark.stop()` leaves the server serving the next job (whose session confs are the
task's own); a server crash fails the tries in flight with a clear message, they are retried as usual on
a new server; `tasks stop` ends a streaming Connect job cleanly (its query stopped, its checkpoint
intact). Most tests share one server (`connect_server`, tests/conftest.py); the crash test kills its own.
They use PostgreSQL only (`pg_db`): what they check does not depend on the database, and each costs
seconds of Spark.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import textwrap
import time

import pytest

from dagline.clock import SystemClock
from dagline.executors.connect_server import ConnectSettings
from dagline.executors.local import LocalExecutor
from dagline.scheduler.loop import Scheduler
from dagline.store.runs import stop_task, trigger_run
from tests.helpers.harness import apply, events, tis, write_dag

pytestmark = pytest.mark.spark

UTC = dt.timezone.utc

BOOM = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
spark.sql("SELECT * FROM no_such_table").collect()
"""

STOPPER = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
print("rows", spark.range(5).count(), flush=True)
spark.stop()
print("my session stopped", flush=True)
"""

COUNT = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
print("partitions", spark.conf.get("spark.sql.shuffle.partitions"), flush=True)
print("sum", spark.range(100).groupBy().sum("id").collect()[0][0], flush=True)
"""

SHARED_DAG = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: warm}
spec:
  schedule: null
  paused: false
  defaults: {retries: 0, spark: {connect: true}}
  tasks:
    - {id: boom, spark: {mainApplicationFile: boom.py}}
    - {id: stopper, spark: {mainApplicationFile: stopper.py}}
    - id: after
      upstream: [boom, stopper]
      triggerRule: all_done
      spark: {mainApplicationFile: count.py, conf: {spark.sql.shuffle.partitions: "3"}}
"""


def _drive(sched: Scheduler, predicate, what: str, timeout: float = 300.0) -> None:
    """Iterate the scheduler until `predicate()` holds (the jobs are real processes: they take their time)."""
    deadline = time.monotonic() + timeout
    while True:
        sched.iterate()
        if predicate():
            return
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _log(logs, task_id: str, try_number: int = 1) -> str:
    found = [p for p in logs.rglob(f"try-{try_number}.log") if f"/{task_id}/" in str(p)]
    return found[0].read_text() if found else ""


def _details(db, task_id: str) -> list[str]:
    return [e.detail or "" for e in events(db, entity="task_instance", task_id=task_id)]


def test_a_failing_job_and_a_stopped_session_leave_the_server_to_the_next_job(pg_db, tmp_path, connect_server):
    for name, code in (("boom.py", BOOM), ("stopper.py", STOPPER), ("count.py", COUNT)):
        (tmp_path / name).write_text(code)
    apply(pg_db, write_dag(tmp_path, SHARED_DAG))
    run = trigger_run(pg_db, "warm", now=dt.datetime.now(UTC))
    logs = tmp_path / "logs"
    executor = LocalExecutor(parallelism=2, log_folder=str(logs), connect_server=connect_server)
    sched = Scheduler(pg_db, executor, clock=SystemClock())
    sched.start()
    try:
        _drive(sched, lambda: tis(pg_db, run.id)["after"].state in ("success", "failed", "upstream_failed"),
               "the task after the failure and the stop")
    finally:
        sched.stop()
    states = {task_id: ti.state for task_id, ti in tis(pg_db, run.id).items()}
    assert states == {"boom": "failed", "stopper": "success", "after": "success"}
    assert any("no_such_table" in d or "TABLE_OR_VIEW_NOT_FOUND" in d for d in _details(pg_db, "boom"))
    assert "my session stopped" in _log(logs, "stopper")
    after = _log(logs, "after")
    assert "dagline.executors.connect_job" in after and "spark-submit" not in after  # no JVM of its own
    assert "partitions 3" in after and "sum 4950" in after  # its own session confs, a working server
    assert connect_server.running() and connect_server.check() is None


CRASH_DAG = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: fragile}
spec:
  schedule: null
  paused: false
  tasks:
    - id: work
      retries: 1
      retryDelay: PT0S
      spark: {mainApplicationFile: work.py, arguments: ["{{ try_number }}"], connect: true}
"""

WORK = """
import sys, time
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
print("sum", spark.range(10).groupBy().sum("id").collect()[0][0], flush=True)
if sys.argv[1] == "1":
    print("working", flush=True)
    while True:
        spark.range(3).collect()
        time.sleep(0.2)
"""


@pytest.mark.timeout(600)  # it starts a server of its own twice: minutes on a loaded 2-core machine
def test_a_server_crash_fails_the_tries_in_flight_clearly_and_the_retry_runs_on_a_new_server(pg_db, tmp_path):
    (tmp_path / "work.py").write_text(WORK)
    apply(pg_db, write_dag(tmp_path, CRASH_DAG))
    run = trigger_run(pg_db, "fragile", now=dt.datetime.now(UTC))
    logs = tmp_path / "logs"
    executor = LocalExecutor(parallelism=1, log_folder=str(logs),
                             connect=ConnectSettings(driver_memory="512m", cores=1))
    sched = Scheduler(pg_db, executor, clock=SystemClock())
    sched.start()
    try:
        _drive(sched, lambda: "working" in _log(logs, "work", 1), "the first try to work on the server")
        os.killpg(executor.connect_server.process.pid, signal.SIGKILL)  # the server crashes
        _drive(sched, lambda: tis(pg_db, run.id)["work"].state in ("success", "failed"), "the retry to end")
        assert executor.connect_server.starts == 2  # started again for the retry
    finally:
        sched.stop()
    work = tis(pg_db, run.id)["work"]
    assert (work.state, work.try_number) == ("success", 2)
    crash = [d for d in _details(pg_db, "work") if "Spark Connect server" in d]
    assert crash and "the Spark Connect server exited with code -9" in crash[0] and "retried" in crash[0]
    assert "sum 45" in _log(logs, "work", 2)
    assert not executor.connect_server.running()  # stopped with the replica


STREAM_DAG = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: stream}
spec:
  schedule: null
  paused: false
  tasks:
    - id: serve
      mode: streaming
      stopGracePeriod: PT60S
      retries: 0
      spark: {mainApplicationFile: stream.py, arguments: [out, ckpt], connect: true}
"""

STREAM_JOB = textwrap.dedent("""
    import os, sys, time
    from pyspark.sql import SparkSession
    from dagline.sdk.streaming import run_until_stopped

    # absolute: the server resolves paths, in its own working directory
    out, ckpt = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    spark = SparkSession.builder.getOrCreate()
    rows = spark.readStream.format("rate").option("rowsPerSecond", 20).load()
    query = (rows.writeStream.format("parquet").option("path", out).option("checkpointLocation", ckpt)
             .trigger(processingTime="200 milliseconds").queryName("rates").start())
    while query.lastProgress is None:
        time.sleep(0.1)
    print("started", flush=True)
    stopped = run_until_stopped(spark, poll_s=0.2)
    print("stopped:", ",".join(stopped), flush=True)
""")


def test_tasks_stop_ends_a_streaming_connect_job_cleanly_with_its_checkpoint_intact(pg_db, tmp_path,
                                                                                    connect_server):
    (tmp_path / "stream.py").write_text(STREAM_JOB)
    apply(pg_db, write_dag(tmp_path, STREAM_DAG))
    run = trigger_run(pg_db, "stream", now=dt.datetime.now(UTC))
    logs = tmp_path / "logs"
    sched = Scheduler(pg_db, LocalExecutor(parallelism=1, log_folder=str(logs), connect_server=connect_server),
                      clock=SystemClock())
    sched.start()
    try:
        _drive(sched, lambda: "started" in _log(logs, "serve"), "the streaming query to run")
        assert stop_task(pg_db, str(run.id), "serve", now=dt.datetime.now(UTC)) == "serve try 1: stop asked"
        _drive(sched, lambda: tis(pg_db, run.id)["serve"].state not in ("queued", "running"), "the stop")
    finally:
        sched.stop()
    serve = tis(pg_db, run.id)["serve"]
    assert (serve.state, serve.try_number) == ("success", 1)
    log = _log(logs, "serve")
    assert "stopped: rates" in log
    ckpt = tmp_path / "ckpt"
    offsets = sorted(int(p.name) for p in (ckpt / "offsets").iterdir() if p.name.isdigit())
    commits = sorted(int(p.name) for p in (ckpt / "commits").iterdir() if p.name.isdigit())
    assert offsets and commits and commits[-1] >= offsets[-1] - 1  # at most the batch in flight uncommitted
    assert connect_server.running() and connect_server.check() is None
