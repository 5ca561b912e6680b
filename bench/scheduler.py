"""Scheduler throughput and latency: 100 DAGs x 10-task linear chains (1,000 TIs), all triggered at
once, the noop executor, N replicas; prints one JSON line per replica count.

    python bench/scheduler.py --db sqlite|postgres [--replicas 1[,2,3]] [--dags 100] [--length 10]

makespan_s: first run created -> last TI finished. hop_lag_ms: upstream end -> downstream start.
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
from dagline.db.models import dag_run_t, ti_t  # noqa: E402
from dagline.executors.noop import NoopExecutor  # noqa: E402
from dagline.runs import trigger_run  # noqa: E402
from dagline.scheduler.loop import Scheduler  # noqa: E402
from dagline.spec import load_dag_paths  # noqa: E402


def run_once(kind: str, replicas: int, dags: int, length: int) -> dict:
    db, drop = fresh_database(kind)
    try:
        folder = tempfile.mkdtemp(prefix="dagline-bench-dags-")
        for i in range(dags):
            with open(os.path.join(folder, f"chain{i:03d}.yaml"), "w") as fh:
                fh.write(chain_dag_yaml(f"chain-{i:03d}", length))
        clock = SystemClock()
        apply_dags(db, load_dag_paths([folder]), now=clock.now())
        for i in range(dags):
            trigger_run(db, f"chain-{i:03d}", now=clock.now())
        total = dags * length
        if replicas == 1:
            sched = Scheduler(db, NoopExecutor(parallelism=1024, clock=clock), clock=clock)
            sched.run(should_stop=lambda: _finished(db) >= total, until_idle=True)
        else:
            env = dict(os.environ, DAGLINE_SCHEDULER_POLL_INTERVAL_S="0.01")
            procs = [subprocess.Popen(
                [sys.executable, "-m", "dagline.cli", "--db", db.url, "scheduler", "--executor", "noop",
                 "--parallelism", "1024"], env=env) for _ in range(replicas)]
            try:
                deadline = time.monotonic() + 300
                while _finished(db) < total and time.monotonic() < deadline:
                    time.sleep(0.05)
            finally:
                for p in procs:
                    p.terminate()
                for p in procs:
                    p.wait(30)
        return _measure(db, kind, replicas, total)
    finally:
        drop()


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
    args = parser.parse_args()
    for replicas in [int(n) for n in args.replicas.split(",")]:
        if args.db == "sqlite" and replicas > 1:
            print(json.dumps({"db": "sqlite", "replicas": replicas, "error": "SQLite runs one scheduler"}))
            continue
        print(json.dumps(run_once(args.db, replicas, args.dags, args.length)), flush=True)


if __name__ == "__main__":
    main()
