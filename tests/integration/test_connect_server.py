"""The replica's Spark Connect server as the local executor supervises it, with a stand-in server (a small
Python process listening on the port; the real one is in test_spark_connect.py): the health check, a crash
failing the Connect tries in flight with the reason, and a graceful replica stop failing them for the
adopter to report, while the server is stopped with the replica. And a server that is not the replica's
(DAGLINE_CONNECT_URL): used as it is, probed, never started nor stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dagline.errors import InvalidInput
from dagline.executors import connect_server as connect_server_module
from dagline.executors.base import SparkJob, TaskKey, TaskLaunch
from dagline.executors.connect_server import ConnectServer, ConnectSettings, free_port, read_connect_settings
from dagline.executors.local import LocalExecutor

LISTENER = "import socket, sys, time; s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); " \
           "time.sleep(600)"
JOB = textwrap.dedent("""
    import os, time
    print("remote", os.environ["SPARK_REMOTE"], flush=True)
    time.sleep(600)
""")


class StandIn(ConnectServer):
    """Listens where the real server would, without Spark."""

    def __init__(self, folder: Path, listens: bool = True, start_timeout_s: float = 60.0):
        super().__init__(ConnectSettings(start_timeout_s=start_timeout_s), folder / "connect-server.log")
        self.listens = listens

    def command(self, port: int) -> list[str]:
        return [sys.executable, "-c", LISTENER if self.listens else "import time; time.sleep(600)", str(port)]


def _until(predicate, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while not (found := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return found


def _launch(folder: Path, try_number: int = 1) -> TaskLaunch:
    (folder / "job.py").write_text(JOB)
    return TaskLaunch(ti_id=1, key=TaskKey("d", "r", "t", try_number),
                      job=SparkJob("job.py", connect=True), working_dir=str(folder))


def test_the_health_check_reports_a_crash_once_and_the_next_start_is_a_new_server(tmp_path):
    server = StandIn(tmp_path)
    first_url = server.ensure()
    assert server.wait_listening(30) and server.check() is None
    os.killpg(server.process.pid, signal.SIGKILL)
    _until(lambda: server.process.poll() is not None, "the stand-in to die")
    problem = server.check()
    assert problem.startswith("the Spark Connect server exited with code -9") and str(server.log_file) in problem
    assert server.check() is None and not server.running()  # reported once
    assert server.ensure().startswith("sc://127.0.0.1:") and server.starts == 2 and first_url
    server.stop()


def test_a_server_that_never_listens_is_stopped_after_its_start_timeout(tmp_path):
    server = StandIn(tmp_path, listens=False, start_timeout_s=1.0)
    server.ensure()
    problem = _until(server.check, "the start timeout", timeout=20)
    assert "did not listen" in problem and "DAGLINE_CONNECT_START_TIMEOUT" in problem
    assert not server.running()


def test_a_server_crash_fails_the_connect_tries_in_flight_with_the_reason(tmp_path):
    server = StandIn(tmp_path)
    executor = LocalExecutor(parallelism=1, log_folder=str(tmp_path / "logs"), connect_server=server)
    executor.start()
    executor.launch([_launch(tmp_path)])
    log = next(iter(executor._tries.values())).log_file
    _until(lambda: "remote sc://127.0.0.1:" in log.read_text(), "the job to start with SPARK_REMOTE")
    assert server.wait_listening(30)
    os.killpg(server.process.pid, signal.SIGKILL)
    reports = []
    _until(lambda: reports.extend(executor.sync()) or any(r.state == "failed" for r in reports), "the failure")
    failed = [r for r in reports if r.state == "failed"][0]
    assert failed.message.startswith("the Spark Connect server exited with code -9")
    assert failed.message.endswith("the try was stopped and is retried as usual")
    assert not executor.has_work()


def test_a_graceful_replica_stop_kills_its_connect_tries_for_the_adopter_to_fail_and_stops_the_server(tmp_path):
    logs = tmp_path / "logs"
    launch = _launch(tmp_path)
    first = LocalExecutor(parallelism=1, log_folder=str(logs), connect=ConnectSettings())
    first.connect_server = StandIn(logs)  # the replica's own server (owned: stopped with it), Spark-free
    first.launch([launch])
    log = next(iter(first._tries.values())).log_file
    _until(lambda: "remote" in log.read_text(), "the job to start")
    server = first.connect_server.process
    first.detach()
    assert server.poll() is not None  # the server stopped with the replica
    adopter = LocalExecutor(parallelism=1, log_folder=str(logs))
    assert adopter.adopt([launch]) == []
    reports = adopter.sync()
    assert [r.state for r in reports] == ["running", "failed"]
    assert reports[-1].message.startswith("killed by SIGKILL: dagline: the replica stopped")


def test_the_server_gets_a_jobs_environment_not_the_replicas_settings_or_secrets(tmp_path, monkeypatch):
    """Its Python workers run the jobs' UDFs and foreachBatch functions: what they can read of the
    environment is what a local job can (issue 26, defect 4), not the database URL or API tokens."""
    for name, value in {"DAGLINE_DB_URL": "postgresql://dagline:db-hunter2@db/dagline", "PGPASSWORD": "db-hunter2",
                        "DAGLINE_API_TOKENS": "admin:dgl_admin_token", "SECRET_WAREHOUSE__PASSWORD": "w-pass",
                        "SPARK_REMOTE": "sc://elsewhere:1"}.items():
        monkeypatch.setenv(name, value)
    dump = tmp_path / "server-env.json"

    class EnvDumper(StandIn):
        def command(self, port: int) -> list[str]:
            return [sys.executable, "-c", f"import json, os; json.dump(dict(os.environ), open({str(dump)!r}, 'w')); "
                    + LISTENER, str(port)]

    server = EnvDumper(tmp_path)
    server.ensure()
    try:
        assert server.wait_listening(30)
        env = json.loads(dump.read_text())
    finally:
        server.stop()
    assert env["PATH"] == os.environ["PATH"] and env["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert not {"DAGLINE_DB_URL", "PGPASSWORD", "DAGLINE_API_TOKENS", "SECRET_WAREHOUSE__PASSWORD",
                "SPARK_REMOTE"} & set(env)
    assert not any("hunter2" in value or "dgl_admin_token" in value for value in env.values())


def test_dagline_connect_url_names_a_running_server_and_bad_ones_are_refused_naming_it():
    assert read_connect_settings({"DAGLINE_CONNECT_URL": "sc://127.0.0.1:15003"}).url == "sc://127.0.0.1:15003"
    assert read_connect_settings({"DAGLINE_CONNECT_URL": "sc://spark.internal/"}).url == "sc://spark.internal"
    assert ConnectServer(ConnectSettings(url="sc://spark.internal"), Path("x.log")).port == 15002  # Spark's default
    for bad in ("127.0.0.1:15002", "http://127.0.0.1:15002", "sc://h:99999", "sc://h:1/;token=secret", "sc://"):
        with pytest.raises(InvalidInput) as caught:
            read_connect_settings({"DAGLINE_CONNECT_URL": bad})
        assert caught.value.field == "DAGLINE_CONNECT_URL"


def test_a_server_named_by_dagline_connect_url_is_used_probed_and_never_started_or_stopped(tmp_path, monkeypatch):
    monkeypatch.setattr(connect_server_module, "PROBE_EVERY_S", 0.0)  # every sync probes it
    port = free_port()
    listener = subprocess.Popen([sys.executable, "-c", LISTENER, str(port)])
    try:
        url = f"sc://127.0.0.1:{port}"
        executor = LocalExecutor(parallelism=1, log_folder=str(tmp_path / "logs"), connect=ConnectSettings(url=url))
        server = executor.connect_server
        assert server.wait_listening(30)
        executor.launch([_launch(tmp_path)])
        log = next(iter(executor._tries.values())).log_file
        _until(lambda: f"remote {url}" in log.read_text(), "the job to start with SPARK_REMOTE naming that server")
        assert [r.state for r in executor.sync()] == ["running"]  # it answers: the try goes on
        assert server.process is None and server.starts == 0 and not (tmp_path / "logs" / "connect-server.log").exists()
        listener.kill()
        listener.wait(10)
        reports = []
        _until(lambda: reports.extend(executor.sync()) or any(r.state == "failed" for r in reports), "the failure")
        failed = [r for r in reports if r.state == "failed"][0]
        assert failed.message.startswith(f"the Spark Connect server at {url} (DAGLINE_CONNECT_URL) does not answer")
        assert failed.message.endswith("the try was stopped and is retried as usual")
        # it answers again (restarted by whoever runs it): the next try runs there, nothing was started here
        listener = subprocess.Popen([sys.executable, "-c", LISTENER, str(port)])
        assert server.wait_listening(30)
        executor.launch([_launch(tmp_path, try_number=2)])
        log = next(iter(executor._tries.values())).log_file
        _until(lambda: f"remote {url}" in log.read_text(), "the retry to start on the same server")
        executor.end()
        assert listener.poll() is None and server.starts == 0  # not the replica's: left running
    finally:
        listener.kill()
        listener.wait(10)
