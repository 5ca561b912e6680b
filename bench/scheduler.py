"""Scheduler throughput and latency: 100 DAGs x 10-task linear chains (1,000 TIs), all triggered at
once, the noop executor, N replicas; prints one JSON line per replica count.

    python bench/scheduler.py --db sqlite|postgres [--replicas 1[,2,3]] [--dags 100] [--length 10]

Every replica count runs the same way, so the figures compare: N `dagline scheduler --executor noop`
processes (N = 1 too) are started, the benchmark waits until all have registered, then triggers the
runs. makespan_s: first run created -> last TI finished. hop_lag_ms: upstream end -> downstream start.
Not a test: figures depend on the machine. PostgreSQL from $DAGLINE_TEST_POSTGRES_URL.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import chain_dag_yaml, fresh_database, percentiles  # noqa: E402
from sqlalchemy import func, select  # noqa: E402

from dagline import audit  # noqa: E402
from dagline.clock import SystemClock  # noqa: E402
from dagline.dagstore import apply_dags  # noqa: E402
from dagline.db.models import dag_run_t, scheduler_job_t, ti_t  # noqa: E402
from dagline.runs import trigger_run  # noqa: E402
from dagline.spec import load_dag_paths  # noqa: E402


def run_once(kind: str, replicas: int, dags: int, length: int, poll_interval_s: float) -> dict:
    db, drop = fresh_database(kind)
    procs: list[subprocess.Popen] = []
    try:
        clock = SystemClock()
        with tempfile.TemporaryDirectory(prefix="dagline-bench-dags-") as folder:
            for i in range(dags):
                with open(os.path.join(folder, f"chain{i:03d}.yaml"), "w") as fh:
                    fh.write(chain_dag_yaml(f"chain-{i:03d}", length))
            apply_dags(db, load_dag_paths([folder]), now=clock.now())
        env = dict(os.environ, DAGLINE_SCHEDULER_POLL_INTERVAL_S=str(poll_interval_s))
        procs = [subprocess.Popen(
            [sys.executable, "-m", "dagline.cli", "--db", db.url, "scheduler", "--executor", "noop",
             "--parallelism", "1024"], env=env, stderr=subprocess.DEVNULL) for _ in range(replicas)]
        _wait(lambda: _registered(db) >= replicas, "the replicas to register", procs)
        for i in range(dags):
            trigger_run(db, f"chain-{i:03d}", now=clock.now())
        total = dags * length
        _wait(lambda: _finished(db) >= total, "every task instance to succeed", procs)
        return _measure(db, kind, replicas, total)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(30)
        drop()


def _wait(condition, what: str, procs, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if any(p.poll() is not None for p in procs):
            raise RuntimeError(f"a replica exited while waiting for {what}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _registered(db) -> int:
    with db.engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(scheduler_job_t)
                            .where(scheduler_job_t.c.state == "running")).scalar_one()


def _finished(db) -> int:
    with db.engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(ti_t).where(ti_t.c.state == "success")).scalar_one()


def _measure(db, kind: str, replicas: int, total: int) -> dict:
    with db.engine.connect() as conn:
        first_created = conn.execute(select(func.min(dag_run_t.c.created_at))).scalar_one()
        last_end = conn.execute(select(func.max(ti_t.c.end_date))).scalar_one()
        tis = {(r.dag_run_id, r.task_id): r for r in conn.execute(
            select(ti_t.c.dag_run_id, ti_t.c.task_id, ti_t.c.start_date, ti_t.c.end_date, ti_t.c.state))}
        violations = {name: len(found) for name, found in audit.all_violations(conn).items()}
    lags = []
    for (run, task), ti in tis.items():
        n = int(task[1:])
        if n:
            up = tis[(run, f"t{n - 1}")]
            lags.append((ti.start_date - up.end_date).total_seconds() * 1000)
    makespan = (last_end - first_created).total_seconds()
    done = sum(1 for ti in tis.values() if ti.state == "success")
    return {"db": kind, "replicas": replicas, "tasks": total, "succeeded": done, "makespan_s": round(makespan, 3),
            "hop_lag_ms": percentiles(lags), "tis_per_s": round(done / makespan, 1) if makespan else None,
            "violations": violations}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--replicas", default="1", help="a count, or counts separated by commas")
    parser.add_argument("--dags", type=int, default=100)
    parser.add_argument("--length", type=int, default=10)
    parser.add_argument("--poll-interval", type=float, default=0.01,
                        help="DAGLINE_SCHEDULER_POLL_INTERVAL_S of the replicas (seconds)")
    args = parser.parse_args()
    for replicas in [int(n) for n in args.replicas.split(",")]:
        if args.db == "sqlite" and replicas > 1:
            print(json.dumps({"db": "sqlite", "replicas": replicas, "error": "SQLite runs one scheduler"}))
            continue
        print(json.dumps(run_once(args.db, replicas, args.dags, args.length, args.poll_interval)), flush=True)


if __name__ == "__main__":
    main()
