"""Scheduler throughput and latency: 100 DAGs x 10-task linear chains (1,000 TIs), all triggered at
once, the noop executor, N replicas; prints one JSON line per replica count.

    python bench/scheduler.py --db sqlite|postgres [--replicas 1[,2,3]] [--dags 100] [--length 10]

Every replica count runs the same way, so the figures compare: N `dagline scheduler --executor noop`
processes (N = 1 too) are started, the benchmark waits until all have registered, then triggers the
runs (one `trigger_run` each, as `dagline dags trigger` would: `trigger_s` says how long that took).
makespan_s: first run created -> last TI finished. hop_lag_ms: upstream end -> downstream start.
Replicas poll as deployed: on PostgreSQL every commit that makes work wakes them (NOTIFY), so they
keep the default poll interval (0.5 s, only a fallback); on SQLite, where nothing wakes a replica
but its poll, they poll every 10 ms (`--poll-interval` sets either; `poll_interval_s` in the JSON).
`loop`: the replicas' loop phase histograms (seconds and count per phase, summed over replicas), the
critical sections skipped because a peer held the pools, and the replicas' CPU seconds, scraped from
their `--metrics-port` at the end.
Not a test: figures depend on the machine. PostgreSQL from $DAGLINE_TEST_POSTGRES_URL.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import (  # noqa: E402
    apply_dag_texts,
    chain_dag_yaml,
    count_rows,
    free_ports,
    fresh_database,
    loop_phases,
    percentiles,
    start_noop_replicas,
    stop_processes,
    wait_until,
)
from sqlalchemy import func, select  # noqa: E402

from dagline.clock import SystemClock  # noqa: E402
from dagline.db.models import dag_run_t, ti_t  # noqa: E402
from dagline.scheduler.settings import SchedulerSettings  # noqa: E402
from dagline.store.runs import trigger_run  # noqa: E402
from dagline.testing import audit  # noqa: E402


def run_once(kind: str, replicas: int, dags: int, length: int, poll_interval_s: float) -> dict:
    db, drop = fresh_database(kind)
    procs = []
    try:
        clock = SystemClock()
        apply_dag_texts(db, {f"chain{i:03d}.yaml": chain_dag_yaml(f"chain-{i:03d}", length) for i in range(dags)})
        ports = free_ports(replicas)
        procs = start_noop_replicas(db, replicas, poll_interval_s=poll_interval_s, parallelism=1024,
                                    metrics_ports=ports)
        began = time.perf_counter()
        for i in range(dags):
            trigger_run(db, f"chain-{i:03d}", now=clock.now())
        triggered_s = time.perf_counter() - began
        total = dags * length
        succeeded = select(func.count()).select_from(ti_t).where(ti_t.c.state == "success")
        wait_until(lambda: count_rows(db, succeeded) >= total, "every task instance to succeed", procs)
        figures = _measure(db, kind, replicas, total)
        figures["trigger_s"] = round(triggered_s, 3)  # the benchmark's own 100 triggers, one transaction each
        figures["poll_interval_s"] = poll_interval_s
        figures["loop"] = loop_phases(ports)
        return figures
    finally:
        stop_processes(procs)
        drop()


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
    parser.add_argument("--poll-interval", type=float, default=None,
                        help="DAGLINE_SCHEDULER_POLL_INTERVAL_S of the replicas (seconds; default: 0.01 on "
                             "SQLite, the scheduler's own default on PostgreSQL, where NOTIFY wakes them)")
    args = parser.parse_args()
    for replicas in [int(n) for n in args.replicas.split(",")]:
        if args.db == "sqlite" and replicas > 1:
            print(json.dumps({"db": "sqlite", "replicas": replicas, "error": "SQLite runs one scheduler"}))
            continue
        poll = args.poll_interval
        if poll is None:
            poll = 0.01 if args.db == "sqlite" else SchedulerSettings().poll_interval_s
        print(json.dumps(run_once(args.db, replicas, args.dags, args.length, poll)), flush=True)


if __name__ == "__main__":
    main()
