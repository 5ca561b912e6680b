"""Streaming tries stop cooperatively: the `dagline.sdk.streaming` helper turns SIGTERM into a clean stop
(exit 0), the wrapper waits the task's stopGracePeriod before SIGKILL, and a streaming task stopped
with `dagline tasks stop` under the real local executor ends `success` (its job's own log says it
stopped cleanly): started by `spark-submit` (on SQLite), whose JVM is left alone, and as a Spark Connect
try (on PostgreSQL, on the session's server: no JVM of its own)."""

from __future__ import annotations

import datetime as dt
import json
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from dagline.clock import SystemClock
from dagline.executors.local import LocalExecutor
from dagline.scheduler.loop import Scheduler
from dagline.store.runs import stop_task, trigger_run
from tests.helpers.harness import apply, events, tis, write_dag

HELPER_JOB = textwrap.dedent("""
    import sys, time
    from dagline.sdk.streaming import StopRequest

    def close():
        print("stopped cleanly", flush=True)

    stop = StopRequest.install(on_stop=[close])
    print("started", flush=True)
    while not stop.wait(0.1):
        pass
    stop.done.wait(5)
    sys.exit(0)
""")


def _wait(predicate, what, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_the_helper_turns_sigterm_into_a_clean_exit(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(HELPER_JOB)
    proc = subprocess.Popen([sys.executable, str(job)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "started"
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0 and "stopped cleanly" in out


def test_the_wrapper_kills_a_job_that_ignores_sigterm_after_its_grace(tmp_path):
    exit_file = tmp_path / "out.exit"
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); " \
               "time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-m", "dagline.executors.wrapper", "--exit-file", str(exit_file),
                             "--grace", "0.5", "--", sys.executable, "-c", stubborn],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "up"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=20)
    outcome = json.loads(exit_file.read_text())
    assert outcome["exit_code"] == -signal.SIGKILL and outcome["signal"] == "SIGTERM"
    assert "SIGKILL after 0.5s" in err and "did not stop in time" in err


FAKE_JVM = textwrap.dedent("""
    import ctypes, signal, subprocess, sys
    ctypes.CDLL(None).prctl(15, b"java", 0, 0, 0)  # PR_SET_NAME: it looks like spark-submit's JVM
    signal.signal(signal.SIGTERM, lambda *_: (print("the JVM got SIGTERM", flush=True), sys.exit(143)))
    driver = subprocess.Popen([sys.executable, sys.argv[1]], stdout=subprocess.PIPE, text=True)
    for line in driver.stdout:  # the JVM relays the driver's output, as PythonRunner does
        print(line, end="", flush=True)
    sys.exit(driver.wait())
""")


def test_a_stop_goes_to_the_pyspark_driver_alone_and_its_jvm_exits_with_it(tmp_path):
    """SIGTERM to the JVM too would stop the SparkContext under the driver and could cut its last output."""
    (tmp_path / "jvm.py").write_text(FAKE_JVM)
    (tmp_path / "job.py").write_text(HELPER_JOB)
    exit_file, log = tmp_path / "out.exit", tmp_path / "out.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "dagline.executors.wrapper", "--exit-file", str(exit_file),
                                 "--grace", "20", "--", sys.executable, str(tmp_path / "jvm.py"),
                                 str(tmp_path / "job.py")], stdout=out, stderr=subprocess.PIPE, text=True)
        _wait(lambda: "started" in log.read_text(), "the driver to start")
        proc.send_signal(signal.SIGTERM)  # how a try is stopped
        _, err = proc.communicate(timeout=30)
    assert "SIGTERM to the PySpark driver" in err
    assert "stopped cleanly" in log.read_text() and "the JVM got SIGTERM" not in log.read_text()
    assert json.loads(exit_file.read_text())["exit_code"] == 0  # the JVM exited with the driver's code


STREAM_DAG = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: stream}
spec:
  schedule: null
  paused: false
  tasks:
    - {id: serve, mode: streaming, stopGracePeriod: PT20S, retries: 0, spark: {mainApplicationFile: job.py}}
"""


@pytest.mark.spark
@pytest.mark.parametrize("how, database", [("spark-submit", "sqlite_db"), ("connect", "pg_db")])
def test_a_streaming_task_stopped_by_tasks_stop_ends_success_after_a_clean_stop(how, database, request, tmp_path):
    """The database changes nothing the stop does: each way of starting a try runs on one of them."""
    db = request.getfixturevalue(database)
    server = request.getfixturevalue("connect_server") if how == "connect" else None
    (tmp_path / "job.py").write_text(HELPER_JOB)
    dag = STREAM_DAG if server is None else STREAM_DAG.replace("{mainApplicationFile: job.py}",
                                                               "{mainApplicationFile: job.py, connect: true}")
    apply(db, write_dag(tmp_path, dag))
    run = trigger_run(db, "stream", now=dt.datetime.now(dt.timezone.utc))
    logs = tmp_path / "logs"
    sched = Scheduler(db, LocalExecutor(parallelism=1, log_folder=str(logs), connect_server=server),
                      clock=SystemClock())
    sched.start()
    try:
        log = None

        def started():
            nonlocal log
            sched.iterate()
            found = list(logs.rglob("try-1.log"))
            log = found[0] if found else None
            return log is not None and "started" in log.read_text()

        _wait(started, "the streaming job to start")
        assert tis(db, run.id)["serve"].state == "running"
        assert stop_task(db, str(run.id), "serve", now=dt.datetime.now(dt.timezone.utc)) == "serve try 1: stop asked"

        def ended():
            sched.iterate()
            return tis(db, run.id)["serve"].state not in ("queued", "running")

        _wait(ended, "the stopped try to end")
    finally:
        sched.stop()
    serve = tis(db, run.id)["serve"]
    assert (serve.state, serve.try_number) == ("success", 1)
    assert "stopped cleanly" in log.read_text()
    if server is None:
        assert "SIGTERM to the PySpark driver" in log.read_text()  # not to spark-submit's JVM
    else:
        assert "dagline.executors.connect_job" in log.read_text() and "spark-submit" not in log.read_text()
        assert "SIGTERM to the job" in log.read_text()  # no JVM: the job's processes
    assert [e.to_state for e in events(db, entity="task_instance", task_id="serve")][-1] == "success"


SPARK_JOB = textwrap.dedent("""
    import os, sys, time
    from pyspark.sql import SparkSession
    from dagline.sdk.streaming import run_until_stopped

    out, ckpt = sys.argv[1], sys.argv[2]  # absolute: the server resolves paths in its own working directory
    spark = SparkSession.builder.config("spark.sql.shuffle.partitions", "1").getOrCreate()  # SPARK_REMOTE
    rows = spark.readStream.format("rate").option("rowsPerSecond", 20).load()
    query = (rows.writeStream.format("parquet").option("path", out).option("checkpointLocation", ckpt)
             .trigger(processingTime="200 milliseconds").queryName("rates").start())
    while query.lastProgress is None:
        time.sleep(0.1)
    print("started", flush=True)
    stopped = run_until_stopped(spark, poll_s=0.2)
    print("stopped:", ",".join(stopped), flush=True)
    spark.stop()
""")


@pytest.mark.spark
def test_run_until_stopped_stops_a_real_structured_streaming_query_with_its_checkpoint_intact(tmp_path,
                                                                                              connect_server):
    """One real PySpark job, on the session's Spark Connect server: SIGTERM to its Python driver stops the
    query through the helper, the job exits 0, and the checkpoint is consistent: every planned batch
    committed but at most the one in flight. (On a spark-submit driver's classic session the helper stops
    the ml-signals example's streaming jobs: test_ml_signals_example.py.)"""
    job = tmp_path / "job.py"
    job.write_text(SPARK_JOB)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    env = {**__import__("os").environ, "SPARK_REMOTE": connect_server.url}
    proc = subprocess.Popen([sys.executable, str(job), str(out), str(ckpt)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "started"
        time.sleep(1.0)  # let a few micro-batches commit (not a wait for dagline: the job's own pace)
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and "stopped: rates" in rest
    offsets = sorted(int(p.name) for p in (ckpt / "offsets").iterdir() if p.name.isdigit())
    commits = sorted(int(p.name) for p in (ckpt / "commits").iterdir() if p.name.isdigit())
    assert offsets and commits and commits[-1] >= offsets[-1] - 1  # at most the batch in flight uncommitted
    assert list(out.glob("*.parquet"))
