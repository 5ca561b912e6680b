"""A scheduler that dies mid-task on SQLite: the next one adopts what still runs and settles the rest.

Real processes: `dagline scheduler` with the local executor, killed with SIGKILL while a job runs.
The test polls the database for the state it needs before acting (it waits on real processes, never
on a fixed sleep). The adopted job is a `spark-submit` try: only those outlive their replica (a Spark
Connect try ends with its replica's server). The zombie's job dies with its scheduler anyway, so it is a
Connect try on the session's server (DAGLINE_CONNECT_URL): no JVM start per try."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys

import pytest
from click.testing import CliRunner

from dagline.cli import main
from tests.helpers.dags import dag, task, write
from tests.helpers.harness import SLOW_DAG, assert_invariants, events, runs, ti_states, tis
from tests.helpers.polling import wait_for

JOB = "import sys, time\nprint('started', flush=True)\ntime.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 6)\n"


def _applied_and_triggered(db, tmp_path, document):
    (tmp_path / "slow.py").write_text(JOB)
    write(tmp_path, document, "dag.yaml")
    runner = CliRunner()
    for args in (["dags", "apply", str(tmp_path / "dag.yaml")], ["dags", "trigger", "slow"]):
        assert runner.invoke(main, ["--db", db.url, *args]).exit_code == 0
    return db, tmp_path


@pytest.fixture
def setup(sqlite_db, tmp_path):
    return _applied_and_triggered(sqlite_db, tmp_path, SLOW_DAG)


@pytest.fixture
def connect_setup(sqlite_db, tmp_path, connect_url):
    """SLOW_DAG as a Spark Connect task, run by the scheduler processes on the session's server."""
    return _applied_and_triggered(sqlite_db, tmp_path, dag("slow", task("slow", retries=1, retryDelay="PT1S",
                                                                        spark={"connect": True})))


@contextlib.contextmanager
def _scheduler(db, tmp_path, *extra):
    """A `dagline scheduler` process; killed if it still runs at the end, its pipe closed."""
    env = dict(os.environ, DAGLINE_SCHEDULER_POLL_INTERVAL_S="0.1")
    with subprocess.Popen([sys.executable, "-m", "dagline.cli", "--db", db.url, "scheduler", "--log-folder",
                           str(tmp_path / "logs"), *extra], env=env, stderr=subprocess.PIPE, text=True) as process:
        try:
            yield process
        finally:
            if process.poll() is None:
                process.kill()


def _run_id(db) -> int:
    return runs(db, "slow")[0]["id"]


@pytest.mark.spark
def test_a_job_outliving_its_killed_scheduler_is_adopted_and_followed_to_the_end(setup):
    db, tmp_path = setup
    with _scheduler(db, tmp_path) as first:
        wait_for(lambda: ti_states(db, _run_id(db)) == {"slow": "running"}, "the job to start", timeout=60)
        first.send_signal(signal.SIGKILL)
    with _scheduler(db, tmp_path, "--until-idle") as second:
        _, stderr = second.communicate(timeout=120)
    assert second.returncode == 0, stderr
    ti = tis(db, _run_id(db))["slow"]
    assert (ti.state, ti.try_number) == ("success", 1)  # the same try, followed to its end
    assert len(events(db, entity="task_instance", to_state="queued")) == 1  # launched once
    assert "1 adopted" in stderr
    assert_invariants(db)


@pytest.mark.spark
def test_a_job_that_died_with_its_scheduler_is_a_zombie_and_is_retried(connect_setup):
    db, tmp_path = connect_setup

    def job_pids():
        found = list((tmp_path / "logs").rglob("try-1.log.pid"))
        return json.loads(found[0].read_text()) if found else {}

    with _scheduler(db, tmp_path) as first:
        wait_for(lambda: ti_states(db, _run_id(db)) == {"slow": "running"}, "the job to start", timeout=60)
        wait_for(lambda: "pid" in job_pids(), "the wrapper to start the job", timeout=60)  # it adds the job's pid
        pids = job_pids()
        wrapper_pid = pids["wrapper_pid"]
        first.send_signal(signal.SIGKILL)  # the node dies: the scheduler and the job with it
        for pid in (pids["pid"], wrapper_pid):
            try:
                os.killpg(os.getpgid(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
    wait_for(lambda: subprocess.run(["kill", "-0", str(wrapper_pid)], capture_output=True).returncode != 0,
             "the job to be gone", timeout=60)
    with _scheduler(db, tmp_path, "--until-idle") as second:
        _, stderr = second.communicate(timeout=120)
    assert second.returncode == 0, stderr
    ti = tis(db, _run_id(db))["slow"]
    assert (ti.state, ti.try_number) == ("success", 2)
    details = [e.detail for e in events(db, entity="task_instance", to_state="up_for_retry")]
    assert details and details[0].startswith("zombie")
    assert_invariants(db)
