"""`dagline operator` as a process: kopf and the scheduler loop against the emulator and PostgreSQL, its
probes and metrics over HTTP, and a graceful stop on SIGTERM."""

from __future__ import annotations

import datetime as dt
import os
import re
import signal
import subprocess
import sys
import threading

from sqlalchemy import select

from dagline.db.models import replica_t
from dagline.sdk.client import send_signal
from dagline.store.tokens import create_token
from tests.helpers import prometheus
from tests.helpers.k8s.operator_harness import NS, dag_manifest, dagrun_manifest, http_get, is_ready


class Process:
    """A child process whose stderr is collected line by line as it comes."""

    def __init__(self, args, env):
        self.proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def find(self, pattern: str):
        for line in list(self.lines):
            match = re.search(pattern, line)
            if match:
                return match
        return None

    def text(self) -> str:
        return "\n".join(self.lines)

    def stop_with_sigterm(self, timeout: float = 20) -> int:
        """SIGTERM, then the exit code; fails the test if the process is still there after `timeout` s."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"no exit {timeout:g} s after SIGTERM; stderr:\n{self.text()}") from None

    def kill_if_running(self) -> None:
        """Kill it if it still runs; then the reader has read everything and its pipe is closed."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(10)
        self.proc.stderr.close()


def test_the_operator_process_serves_probes_and_metrics_and_stops_on_sigterm(kube, pg_db, tmp_path):
    env = {**os.environ, "KUBECONFIG": str(kube.kubeconfig_path), "DAGLINE_STATUS_INTERVAL": "0.2",
           "DAGLINE_SCHEDULER_POLL_INTERVAL_S": "0.1"}
    env.pop("DAGLINE_DB_URL", None)
    args = [sys.executable, "-m", "dagline.cli", "--db", pg_db.url, "operator", "--executor", "noop",
            "--namespace", NS, "--health-port", "0", "--metrics-port", "0", "--api-port", "0"]
    process = Process(args, env)
    try:
        ports = kube.wait_for(lambda: process.find(r"health on :(\d+), metrics on :(\d+)"), timeout=30,
                              what=f"the start line; stderr so far: {process.text()}")
        health, metrics = int(ports[1]), int(ports[2])
        api = int(process.find(r"API on :(\d+)")[1])
        with pg_db.begin() as conn:
            secret = create_token(conn, "k8s-test", ["signals:send"], now=dt.datetime.now(dt.timezone.utc))
        sent = send_signal("nobody.listens", {"from": "test"}, url=f"http://127.0.0.1:{api}", token=secret)
        assert sent["created"] is True  # every replica serves the signal API
        assert http_get(health, "/healthz") == (200, "ok\n")
        assert http_get(health, "/readyz") == (200, "ok\n")
        kube.create("dags", NS, dag_manifest("daily", schedule=None))
        kube.wait_for(lambda: kube.get("dags", NS, "daily"), until=is_ready, timeout=10, what="DAG Ready")
        kube.create("dagruns", NS, dagrun_manifest("daily-1", logicalDate="2026-03-01"))
        kube.wait_for(lambda: kube.get("dagruns", NS, "daily-1"), timeout=10, what="run success",
                      until=lambda r: (r.get("status") or {}).get("state") == "success")
        code, page = http_get(metrics, "/metrics")
        assert code == 200
        assert prometheus.value(page, "dagline_dag_runs", state="running") == 0  # unfinished only (ADR 0075)
        assert prometheus.value(page, "dagline_dag_runs_finished_total", state="success") == 1
        assert prometheus.value(page, "dagline_task_instance_transitions_total", state="success") == 2
        assert prometheus.value(page, "dagline_scheduler_loops_total") > 0
        assert prometheus.value(page, "dagline_database_up") == 1
        assert prometheus.value(page, "dagline_dag_runs_created_total", run_type="manual") == 1
        assert process.stop_with_sigterm() == 0, process.text()
    finally:
        process.kill_if_running()
    assert "Traceback" not in process.text(), process.text()
    with pg_db.begin() as conn:
        assert conn.execute(select(replica_t.c.state)).scalars().all() == ["stopped"]


def test_kopf_run_serves_the_handlers_with_a_replica_built_from_the_environment(kube, pg_db):
    env = {**os.environ, "KUBECONFIG": str(kube.kubeconfig_path), "DAGLINE_DB_URL": pg_db.url,
           "DAGLINE_EXECUTOR": "noop", "DAGLINE_HEALTH_PORT": "0", "DAGLINE_METRICS_PORT": "0", "DAGLINE_API_PORT": "0",
           "DAGLINE_STATUS_INTERVAL": "0.2"}
    args = [sys.executable, "-m", "kopf", "run", "-m", "dagline.k8s.handlers", "--standalone", "-n", NS]
    process = Process(args, env)
    try:
        ports = kube.wait_for(lambda: process.find(r"health on :(\d+)"), timeout=30,
                              what=f"the start line; stderr so far: {process.text()}")
        kube.create("dags", NS, dag_manifest("daily", schedule=None))
        kube.wait_for(lambda: kube.get("dags", NS, "daily"), until=is_ready, timeout=10, what="DAG Ready")
        kube.create("dagruns", NS, dagrun_manifest("daily-1", logicalDate="2026-03-01"))
        kube.wait_for(lambda: kube.get("dagruns", NS, "daily-1"), timeout=10, what="run success",
                      until=lambda r: (r.get("status") or {}).get("state") == "success")
        assert http_get(int(ports[1]), "/healthz") == (200, "ok\n")
        assert process.stop_with_sigterm() == 0, process.text()
    finally:
        process.kill_if_running()
    with pg_db.begin() as conn:
        assert conn.execute(select(replica_t.c.state)).scalars().all() == ["stopped"]


def test_the_operator_refuses_to_start_without_a_database_or_with_a_bad_setting(tmp_path):
    env = {key: value for key, value in os.environ.items() if not key.startswith("DAGLINE_")}
    missing = subprocess.run([sys.executable, "-m", "dagline.cli", "operator"], env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "--db: the operator's replicas share one database" in missing.stderr
    assert not (tmp_path / "dagline.db").exists()  # no SQLite file made up on the way
    bad = subprocess.run([sys.executable, "-m", "dagline.cli", "--db", f"sqlite:///{tmp_path}/x.db", "operator"],
                         env={**env, "DAGLINE_DAGRUN_HISTORY_LIMIT": "lots"}, capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "DAGLINE_DAGRUN_HISTORY_LIMIT: must be an integer, got 'lots'" in bad.stderr
