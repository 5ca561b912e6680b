"""Shared set-up for the benchmarks: fresh databases and generated DAG specs (not a test helper)."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

from sqlalchemy import create_engine, func, select, text

from dagline.db.engine import Database, normalize_url, upgrade
from dagline.db.models import replica_t

PG_URL = os.environ.get("DAGLINE_TEST_POSTGRES_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/test")


def fresh_database(kind: str, *, migrated: bool = True) -> tuple[Database, callable]:
    """A new database of `kind` (sqlite or postgres), migrated unless `migrated` is False (empty), and a
    function that drops it."""
    if kind == "sqlite":
        folder = tempfile.mkdtemp(prefix="dagline-bench-")
        db = Database(f"sqlite:///{folder}/bench.db")
        if migrated:
            upgrade(db)

        def remove():
            db.dispose()
            shutil.rmtree(folder, ignore_errors=True)

        return db, remove
    admin = create_engine(normalize_url(PG_URL), isolation_level="AUTOCOMMIT")
    name = f"dagline_bench_{uuid.uuid4().hex[:8]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = normalize_url(PG_URL).rsplit("/", 1)[0] + f"/{name}"
    db = Database(url)
    if migrated:
        upgrade(db)

    def drop():
        db.dispose()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

    return db, drop


def chain_dag_yaml(dag_id: str, length: int, *, schedule: str | None = None, start: str | None = None) -> str:
    tasks = []
    for i in range(length):
        upstream = f"\n      upstream: [t{i - 1}]" if i else ""
        tasks.append(f"    - id: t{i}{upstream}\n      spark: {{mainApplicationFile: job.py}}")
    head = f"  schedule: {schedule!r}\n" if schedule else "  schedule: null\n"
    if start:
        head += f"  startDate: {start!r}\n"
    return (f"apiVersion: dagline.io/v1alpha1\nkind: DAG\nmetadata: {{name: {dag_id}}}\nspec:\n{head}"
            f"  paused: false\n  catchup: true\n  maxActiveTasks: 64\n  tasks:\n" + "\n".join(tasks) + "\n")


def percentiles(values: list[float]) -> dict:
    if not values:
        return {"p50": None, "p95": None, "p99": None, "max": None}
    ordered = sorted(values)

    def pick(q):
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)

    return {"p50": round(statistics.median(ordered), 1), "p95": pick(0.95), "p99": pick(0.99),
            "max": round(ordered[-1], 1)}


def apply_dag_texts(db: Database, texts: dict[str, str]) -> None:
    """Store DAG specs given as {file name: YAML}, as `dagline dags apply` of a folder does."""
    from dagline.clock import SystemClock
    from dagline.spec import load_dag_paths
    from dagline.store.dags import apply_dags

    with tempfile.TemporaryDirectory(prefix="dagline-bench-dags-") as folder:
        for name, text in texts.items():
            with open(os.path.join(folder, name), "w") as fh:
                fh.write(text)
        apply_dags(db, load_dag_paths([folder]), now=SystemClock().now())


def start_noop_replicas(db: Database, count: int, *, poll_interval_s: float, parallelism: int | None = None,
                        metrics_ports: list[int] | None = None):
    """`count` processes of `dagline scheduler --executor noop` against `db`; waits until all registered.
    With `metrics_ports`, replica i serves its metrics on `metrics_ports[i]`."""
    env = dict(os.environ, DAGLINE_SCHEDULER_POLL_INTERVAL_S=str(poll_interval_s))
    args = [sys.executable, "-m", "dagline.cli", "--db", db.url, "scheduler", "--executor", "noop"]
    if parallelism is not None:
        args += ["--parallelism", str(parallelism)]
    procs = [subprocess.Popen(args + (["--metrics-port", str(metrics_ports[i])] if metrics_ports else []),
                              env=env, stderr=subprocess.DEVNULL) for i in range(count)]
    try:
        wait_until(lambda: running_replicas(db) >= count, "the replicas to register", procs)
    except BaseException:
        stop_processes(procs)
        raise
    return procs


def stop_processes(procs) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait(30)


def running_replicas(db: Database) -> int:
    return count_rows(db, select(func.count()).select_from(replica_t).where(replica_t.c.state == "running"))


def count_rows(db: Database, stmt) -> int:
    with db.engine.connect() as conn:
        return conn.execute(stmt).scalar_one()


def wait_until(condition, what: str, procs=(), timeout_s: float = 300, poll_s: float = 0.02) -> None:
    """Poll `condition` until true; fail if a process in `procs` exits or `timeout_s` passes."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if any(p.poll() is not None for p in procs):
            raise RuntimeError(f"a replica exited while waiting for {what}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(poll_s)


def free_ports(count: int) -> list[int]:
    """Ports free now (for the replicas' metrics servers)."""
    import socket

    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def loop_phases(ports: list[int]) -> dict:
    """The replicas' loop phase histograms, summed over replicas: {phase: {"s": seconds, "n": count}},
    plus the critical sections skipped because another replica held the pools, and CPU seconds."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    phases: dict[str, dict] = {}
    extra = {"critical_section_busy": 0.0, "cpu_s": 0.0}
    for port in ports:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            page = response.read().decode()
        for family in text_string_to_metric_families(page):
            for sample in family.samples:
                if sample.name == "dagline_scheduler_loop_phase_duration_seconds_sum":
                    phases.setdefault(sample.labels["phase"], {"s": 0.0, "n": 0})["s"] += sample.value
                elif sample.name == "dagline_scheduler_loop_phase_duration_seconds_count":
                    phases.setdefault(sample.labels["phase"], {"s": 0.0, "n": 0})["n"] += int(sample.value)
                elif sample.name == "dagline_scheduler_critical_section_busy_total":
                    extra["critical_section_busy"] += sample.value
                elif sample.name == "process_cpu_seconds_total":
                    extra["cpu_s"] += sample.value
    result = {phase: {"s": round(v["s"], 3), "n": v["n"]} for phase, v in phases.items() if v["n"]}
    return {"phases": result, **{k: round(v, 2) for k, v in extra.items()}}
