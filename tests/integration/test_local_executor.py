"""The local executor with real jobs, and the noop executor.

Real Spark is slow here (a `spark-submit` costs 2-25 s of JVM start on two cores, a SparkSession more),
so two tests start one: the example pipeline's `ingest_orders` job (spark-submit with a SparkSession,
its confs and driver memory), and adoption by a new executor (only a spark-submit try outlives its
executor: a Connect try is stopped with its replica's server). The other `spark` tests exercise the
wrapper -- exit codes, timeouts, cancellation, large output, idempotent launch -- with small plain Python
scripts run as Spark Connect tries (`python -m dagline.executors.connect_job`) against the session's
server (`connect_server`, tests/conftest.py): the same wrapper, without a JVM per test. Every wait polls
`sync()` against a deadline.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dagline.clock import FixedClock
from dagline.executors.base import SparkJob, TaskKey, TaskLaunch, TaskReport
from dagline.executors.local import LocalExecutor
from dagline.executors.noop import NoopExecutor
from dagline.executors.try_files import last_log_line, log_path
from tests.helpers.polling import wait_for

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "sales_daily"
FINAL = ("success", "failed")


# -- helpers ------------------------------------------------------------------------------------


def script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def launch_of(app: Path | str, *, task="job", try_number=1, ti_id=1, args=(), working_dir=None, timeout_s=None,
              conf=(), connect=False) -> TaskLaunch:  # fmt: skip
    return TaskLaunch(
        ti_id=ti_id,
        key=TaskKey("test-dag", "manual__2026-01-01T00:00:00+00:00", task, try_number),
        job=SparkJob(main_application_file=str(app), arguments=tuple(args), conf=tuple(conf), connect=connect),
        working_dir=str(working_dir) if working_dir else None,
        timeout_s=timeout_s,
    )


def wait_final(executor, count: int = 1, deadline_s: float = 60.0) -> list[TaskReport]:
    """Poll `sync()` until `count` final reports arrived; return every report seen, in order."""
    reports: list[TaskReport] = []

    def seen() -> list[TaskReport]:
        reports.extend(executor.sync())
        return reports

    return wait_for(seen, f"{count} final report(s)", timeout=deadline_s,
                    until=lambda seen: sum(r.state in FINAL for r in seen) >= count)


def process_alive(pid: int) -> bool:
    """True if `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def parquet_num_rows(folder: Path) -> int:
    """Rows in the Parquet files of `folder`, read from each footer (no pyarrow needed)."""
    total = 0
    files = sorted(folder.glob("part-*.parquet"))
    assert files, f"no Parquet files in {folder}"
    for file in files:
        data = file.read_bytes()
        assert data[:4] == b"PAR1" and data[-4:] == b"PAR1", f"{file} is not Parquet"
        total += _thrift_num_rows(data[-8 - int.from_bytes(data[-8:-4], "little") : -8])
    return total


def _thrift_num_rows(buf: bytes) -> int:
    """FileMetaData.num_rows (field 3, i64) from a Thrift compact-protocol footer."""
    pos = 0

    def byte() -> int:
        nonlocal pos
        pos += 1
        return buf[pos - 1]

    def varint() -> int:
        shift = result = 0
        while True:
            b = byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def zigzag() -> int:
        n = varint()
        return (n >> 1) ^ -(n & 1)

    def skip(kind: int, in_collection: bool = False) -> None:
        nonlocal pos
        if kind in (1, 2):  # booleans: in the field header, or one byte inside a collection
            pos += 1 if in_collection else 0
        elif kind == 3:
            pos += 1
        elif kind in (4, 5, 6):
            varint()
        elif kind == 7:
            pos += 8
        elif kind == 8:
            length = varint()  # not `pos += varint()`: that would add to the old position
            pos += length
        elif kind in (9, 10):
            header = byte()
            size = header >> 4 if header >> 4 != 15 else varint()
            for _ in range(size):
                skip(header & 0x0F, True)
        elif kind == 11:
            size = varint()
            types = byte() if size else 0
            for _ in range(size):
                skip(types >> 4, True)
                skip(types & 0x0F, True)
        elif kind == 12:
            fields(None)
        else:
            raise ValueError(f"unknown Thrift type {kind}")

    def fields(wanted: int | None) -> int | None:
        last = 0
        while True:
            header = byte()
            if header == 0:
                return None
            kind, delta = header & 0x0F, header >> 4
            last = last + delta if delta else zigzag()
            if last == wanted and kind == 6:
                return zigzag()
            skip(kind)

    rows = fields(3)
    assert rows is not None, "FileMetaData.num_rows not found"
    return rows


@pytest.fixture
def executor(tmp_path, connect_server):
    """An executor whose Connect tries run on the session's server (which it leaves running)."""
    ex = LocalExecutor(parallelism=2, log_folder=str(tmp_path / "logs"), connect_server=connect_server)
    ex.start()
    yield ex
    ex.end()


# -- the local executor with real spark-submit and Spark Connect tries -----------------------------


@pytest.mark.spark
def test_runs_a_pyspark_job_of_the_example(executor, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # no __pycache__ in the example's folder
    ds, out = "2026-01-03", tmp_path / "data"
    launch = TaskLaunch(
        ti_id=7,
        key=TaskKey("sales-daily", "scheduled__2026-01-03T01:00:00+00:00", "ingest_orders", 1),
        job=SparkJob(
            main_application_file="jobs/ingest_orders.py",  # relative to the DAG folder
            arguments=("--ds", ds, "--out", str(out)),
            conf=(("spark.sql.shuffle.partitions", "2"), ("spark.sql.session.timeZone", "UTC")),
            driver_memory="1g",
        ),
        working_dir=str(EXAMPLE),
        timeout_s=300,
    )
    assert executor.free_slots() == 2
    executor.launch([launch])
    assert executor.free_slots() == 1 and executor.has_work()

    reports = wait_final(executor, deadline_s=300)  # its executionTimeout: a JVM and a session take minutes at load 20

    assert [r.state for r in reports] == ["running", "success"], reports
    running, success = reports
    assert running.ti_id == success.ti_id == 7 and success.try_number == 1
    assert running.external_id.startswith("local:") and running.started_at is not None
    assert success.at >= success.started_at
    assert not executor.has_work() and executor.free_slots() == 2

    spec = importlib.util.spec_from_file_location("ingest_orders", EXAMPLE / "jobs" / "ingest_orders.py")
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    assert parquet_num_rows(out / "raw" / "orders" / f"ds={ds}") == len(job.generate_orders(ds))

    log = log_path(executor.log_folder, launch.key).read_text()
    assert "SparkContext" in log and f"wrote {len(job.generate_orders(ds))} raw orders" in log


@pytest.mark.spark
def test_a_crashing_job_fails_with_its_exit_code_and_traceback(tmp_path, monkeypatch, connect_server):
    dag_folder = tmp_path / "dag"
    dag_folder.mkdir()
    script(dag_folder, "crash.py", """\
        def load():
            raise RuntimeError("the source table is missing")
        load()
    """)  # fmt: skip
    monkeypatch.chdir(tmp_path)
    # relative to the scheduler, not the job
    executor = LocalExecutor(parallelism=1, log_folder="logs", connect_server=connect_server)
    launch = launch_of("crash.py", working_dir=dag_folder, connect=True)
    executor.launch([launch])
    assert executor.free_slots() == 0
    reports = wait_final(executor)
    assert log_path(tmp_path / "logs", launch.key).with_suffix(".log.exit").exists()

    assert [r.state for r in reports] == ["running", "failed"]
    message = reports[-1].message
    assert message.startswith("exit code 1") and "RuntimeError: the source table is missing" in message
    log = log_path(executor.log_folder, launch.key).read_text()
    assert "Traceback (most recent call last)" in log and "in load" in log


@pytest.mark.spark
def test_a_job_over_its_timeout_is_killed_with_everything_it_started(executor, tmp_path):
    pids = tmp_path / "pids.json"
    app = script(tmp_path, "slow.py", f"""\
        import json, subprocess, sys, time
        # a helper in its own process group, as PySpark's worker daemon does
        helper = subprocess.Popen(["sleep", "300"], start_new_session=True)
        with open({str(pids)!r}, "w") as f:
            json.dump({{"job": __import__("os").getpid(), "helper": helper.pid}}, f)
        time.sleep(120)
    """)  # fmt: skip
    # a Connect try starts the script in well under a second, and in a few on this two-core machine while
    # other suites run: 10 s (the job sleeps, using no CPU) leaves it time to start its helper, so that
    # there is something to kill besides the job itself
    launch = launch_of(app, timeout_s=10, connect=True)
    executor.launch([launch])
    reports = wait_final(executor, deadline_s=120)

    # the recorded reason: the report, the outcome file and the log all say it was the timeout
    assert reports[-1].state == "failed"
    assert reports[-1].message == "timed out after 10s (executionTimeout)"
    log_file = log_path(executor.log_folder, launch.key)
    outcome = json.loads(log_file.with_suffix(".log.exit").read_text())
    assert outcome["timed_out"] is True and outcome["signal"] is None and outcome["exit_code"] != 0
    assert "[dagline] timed out after 10s: stopping the job" in log_file.read_text()
    # not stopped before its time (as the wrapper recorded it, not as this test timed it)
    ran_for = dt.datetime.fromisoformat(outcome["finished_at"]) - dt.datetime.fromisoformat(outcome["started_at"])
    assert ran_for >= dt.timedelta(seconds=10)
    # what was killed: the job's process group, the job itself, and the helper it started in a session of its own
    assert pids.exists(), f"the job did not start its helper within its timeout:\n{log_file.read_text()[-2000:]}"
    started_pids = json.loads(pids.read_text())
    assert not group_alive(outcome["pid"])
    wait_for(lambda: not process_alive(started_pids["job"]) and not process_alive(started_pids["helper"]),
             "the job and its helper to be gone", timeout=10)


@pytest.mark.spark
def test_cancel_stops_the_job(executor, tmp_path):
    marker = tmp_path / "started"
    app = script(tmp_path, "sleepy.py", f"""\
        import pathlib, time
        pathlib.Path({str(marker)!r}).write_text("yes")
        time.sleep(120)
    """)  # fmt: skip
    launch = launch_of(app, connect=True)
    executor.launch([launch])
    wait_for(marker.exists)
    executor.cancel(launch.key)
    reports = wait_final(executor, deadline_s=20)

    assert reports[-1].state == "failed" and reports[-1].message.startswith("cancelled")
    outcome = json.loads(log_path(executor.log_folder, launch.key).with_suffix(".log.exit").read_text())
    assert outcome["signal"] == "SIGTERM" and not group_alive(outcome["pid"])


@pytest.mark.spark
def test_megabytes_of_output_go_to_the_log_without_blocking(executor, tmp_path):
    lines = 50_000  # 50,000 x 100 bytes = 5 MB
    app = script(tmp_path, "chatty.py", f"""\
        import sys
        for i in range({lines}):
            sys.stdout.write("line %07d %s\\n" % (i, "x" * 87))
        sys.stderr.write("done on stderr\\n")
    """)  # fmt: skip
    launch = launch_of(app, connect=True)
    executor.launch([launch])
    reports = wait_final(executor)

    assert reports[-1].state == "success", reports
    log = log_path(executor.log_folder, launch.key).read_text()
    assert log.count("\nline ") == lines
    assert f"line {lines - 1:07d}" in log and "done on stderr" in log
    assert last_log_line(log_path(executor.log_folder, launch.key)) == "done on stderr"


@pytest.mark.spark
def test_launching_a_try_twice_starts_one_process(executor, tmp_path):
    starts = tmp_path / "starts.txt"
    app = script(tmp_path, "once.py", f"""\
        import os, time
        with open({str(starts)!r}, "a") as f:
            f.write(f"{{os.getpid()}}\\n")
        time.sleep(1)
    """)  # fmt: skip
    launch = launch_of(app, ti_id=3, connect=True)
    executor.launch([launch])
    executor.launch([launch])  # e.g. the scheduler retried a launch whose commit it did not see
    assert executor.free_slots() == 1
    reports = wait_final(executor)
    assert [r.state for r in reports] == ["running", "success"]

    # Once the try has finished, launching it again replays its outcome instead of running it again.
    executor.launch([launch])
    replay = wait_final(executor, deadline_s=5)
    assert [r.state for r in replay] == ["running", "success"] and replay[-1].ti_id == 3
    assert len(starts.read_text().split()) == 1


@pytest.mark.spark
def test_a_new_executor_adopts_tries_of_a_previous_one(tmp_path):
    logs = str(tmp_path / "logs")
    release = tmp_path / "release"
    app = script(tmp_path, "waits.py", f"""\
        import pathlib, time
        while not pathlib.Path({str(release)!r}).exists():
            time.sleep(0.05)
        print("released")
    """)  # fmt: skip
    running = launch_of(app, task="running", ti_id=1)
    first = LocalExecutor(parallelism=2, log_folder=logs)
    first.launch([running])
    pid_file = log_path(logs, running.key).with_suffix(".log.pid")
    wait_for(lambda: pid_file.exists() and "pid" in json.loads(pid_file.read_text()))  # the wrapper is up
    # the replica dies here (`first` is not used again); its wrapper keeps the job going

    # A try that finished under the dead replica, as its wrapper recorded it.
    finished = launch_of(app, task="finished", ti_id=2)
    exit_file = log_path(logs, finished.key).with_suffix(".log.exit")
    exit_file.parent.mkdir(parents=True)
    exit_file.write_text(json.dumps({
        "exit_code": 0, "timed_out": False, "signal": None, "pid": 4242,
        "started_at": "2026-01-01T02:00:00+00:00", "finished_at": "2026-01-01T02:00:09+00:00",
    }))  # fmt: skip
    unknown = launch_of(app, task="never-started", ti_id=3)

    second = LocalExecutor(parallelism=2, log_folder=logs)
    try:
        assert second.adopt([running, finished, unknown]) == [unknown]
        reports = second.sync()
        by_ti = {(r.ti_id, r.state): r for r in reports}
        assert set(by_ti) == {(1, "running"), (2, "running"), (2, "success")}
        assert by_ti[(2, "success")].at == dt.datetime(2026, 1, 1, 2, 0, 9, tzinfo=dt.timezone.utc)
        assert second.free_slots() == 1  # the adopted running try takes a slot

        release.write_text("go")
        reports = wait_final(second)
        assert [(r.ti_id, r.state) for r in reports] == [(1, "success")]
        assert "released" in log_path(logs, running.key).read_text()
    finally:
        second.end()
        first.end()  # reaps the wrapper process it started (long finished when the test passes)


# -- pure helpers -------------------------------------------------------------------------------


def test_log_path_is_stable_and_safe(tmp_path):
    key = TaskKey("sales-daily", "scheduled__2026-01-01T01:00:00+00:00", "clean_orders", 2)
    assert log_path(tmp_path, key) == (
        tmp_path / "sales-daily" / "scheduled__2026-01-01T01:00:00+00:00" / "clean_orders" / "try-2.log"
    )
    evil = log_path(tmp_path, TaskKey("..", "../../etc", "a/b", 1))
    assert evil.resolve().is_relative_to(tmp_path.resolve()) and len(evil.relative_to(tmp_path).parts) == 4


def test_last_log_line_skips_spark_chatter_and_stack_frames(tmp_path):
    log = tmp_path / "try-1.log"
    log.write_text(
        "Traceback (most recent call last):\n"
        '  File "job.py", line 1, in <module>\n'
        "ValueError: " + "v" * 400 + "\n"
        "26/01/01 02:00:00 INFO SparkContext: Successfully stopped SparkContext\n"
        "\tat org.apache.spark.Foo(Foo.scala:1)\n\n"
        "[dagline] exit code 1 after 9.1s\n"
    )
    line = last_log_line(log)
    assert line.startswith("ValueError: vvv") and len(line) == 300


# -- the noop executor --------------------------------------------------------------------------


def test_noop_executor_succeeds_every_try_within_its_parallelism():
    clock = FixedClock(dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc))
    ex = NoopExecutor(parallelism=3, clock=clock)
    launches = [launch_of("x.py", task=f"t{i}", ti_id=i) for i in range(5)]
    assert ex.free_slots() == 3
    ex.launch(launches[: ex.free_slots()])
    ex.launch(launches[:1])  # idempotent
    assert ex.free_slots() == 0 and ex.has_work()
    clock.advance(dt.timedelta(seconds=5))

    reports = ex.sync()
    assert [(r.ti_id, r.state) for r in reports] == [(0, "success"), (1, "success"), (2, "success")]
    assert all(r.started_at == dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc) for r in reports)
    assert all(r.at == clock.now() for r in reports)
    assert ex.free_slots() == 3

    ex.launch(launches[3:])
    assert [r.ti_id for r in ex.sync()] == [3, 4] and not ex.has_work() and ex.sync() == []


def test_noop_executor_with_a_duration_reports_running_then_success():
    ex = NoopExecutor(parallelism=10, duration_s=(0.05, 0.15), seed=1)
    ex.launch([launch_of("x.py", task=f"t{i}", ti_id=i) for i in range(4)])
    first = ex.sync()
    assert sorted(r.ti_id for r in first if r.state == "running") == [0, 1, 2, 3]
    assert not any(r.state == "success" for r in first) and ex.free_slots() == 6
    done = wait_final(ex, count=4, deadline_s=5)
    assert sorted(r.ti_id for r in done if r.state == "success") == [0, 1, 2, 3]

    ex.launch([launch_of("x.py", task="slow", ti_id=9)])
    ex.cancel(launch_of("x.py", task="slow", ti_id=9).key)
    assert [(r.state, r.message) for r in ex.sync() if r.ti_id == 9][-1] == ("failed", "cancelled")


def test_noop_executor_is_cheap_at_benchmark_scale():
    ex = NoopExecutor(parallelism=1000)
    launches = [launch_of("x.py", task=f"t{i}", ti_id=i) for i in range(1000)]
    started = time.perf_counter()
    ex.launch(launches)
    reports = ex.sync()
    assert len(reports) == 1000 and time.perf_counter() - started < 0.5


def test_wrapper_runs_without_spark(tmp_path):
    """The wrapper alone: exit code, the JSON outcome, and its own footer in the log."""
    import subprocess

    exit_file = tmp_path / "out.exit"
    result = subprocess.run(
        [sys.executable, "-m", "dagline.executors.wrapper", "--exit-file", str(exit_file), "--",
         sys.executable, "-c", "import sys; print('hello'); sys.exit(3)"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 3 and "hello" in result.stdout and "[dagline] exit code 3" in result.stderr
    outcome = json.loads(exit_file.read_text())
    assert outcome["exit_code"] == 3 and outcome["timed_out"] is False and outcome["pid"] > 0
    assert dt.datetime.fromisoformat(outcome["finished_at"]) >= dt.datetime.fromisoformat(outcome["started_at"])
