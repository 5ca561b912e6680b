"""Wake-up latency: how soon an idle replica starts the first task of a run someone just triggered.

    python bench/wakeup.py [--db postgres|sqlite] [--triggers 30] [--poll-interval 0.5]

One `dagline scheduler --executor noop` replica, idle, its fallback poll at the default 0.5 s. The
benchmark triggers a one-task DAG, waits for the task to succeed, lets the replica fall idle again
for a random 0.1-0.6 s (so triggers land at every phase of its poll), and repeats. On PostgreSQL the
trigger's NOTIFY wakes the replica at once; SQLite has no NOTIFY, so there the figure is the polling
latency to compare with. `latency_ms`: the run's creation -> its task's launch (both stamped by the
wall clock of this machine). Prints one JSON line. Not a test: figures depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import (  # noqa: E402
    apply_dag_texts,
    chain_dag_yaml,
    count_rows,
    fresh_database,
    percentiles,
    start_noop_replicas,
    stop_processes,
    wait_until,
)
from sqlalchemy import func, select  # noqa: E402

from dagline.clock import SystemClock  # noqa: E402
from dagline.db.models import dag_run_t, ti_t  # noqa: E402
from dagline.store.runs import trigger_run  # noqa: E402

DAG_ID = "one-task"


def run(kind: str, triggers: int, poll_interval_s: float, seed: int) -> dict:
    db, drop = fresh_database(kind)
    rng = random.Random(seed)
    procs = []
    try:
        clock = SystemClock()
        apply_dag_texts(db, {"one.yaml": chain_dag_yaml(DAG_ID, 1)})
        procs = start_noop_replicas(db, 1, poll_interval_s=poll_interval_s)
        succeeded = select(func.count()).select_from(ti_t).where(ti_t.c.state == "success")
        for n in range(1, triggers + 1):
            time.sleep(rng.uniform(0.1, 0.6))  # the replica is idle again, somewhere in its poll wait
            trigger_run(db, DAG_ID, now=clock.now())
            wait_until(lambda n=n: count_rows(db, succeeded) == n, f"task {n} to succeed", procs,
                       timeout_s=60, poll_s=0.005)
        with db.engine.connect() as conn:
            rows = conn.execute(select(dag_run_t.c.created_at, ti_t.c.start_date)
                                .join(ti_t, ti_t.c.dag_run_id == dag_run_t.c.id)).all()
        latencies = [(r.start_date - r.created_at).total_seconds() * 1000 for r in rows]
        return {"db": kind, "triggers": triggers, "poll_interval_s": poll_interval_s,
                "wakes_by": "notify" if kind == "postgres" else "poll", "latency_ms": percentiles(latencies)}
    finally:
        stop_processes(procs)
        drop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="postgres")
    parser.add_argument("--triggers", type=int, default=30)
    parser.add_argument("--poll-interval", type=float, default=0.5,
                        help="DAGLINE_SCHEDULER_POLL_INTERVAL_S of the replica (seconds; the default is 0.5)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print(json.dumps(run(args.db, args.triggers, args.poll_interval, args.seed)), flush=True)


if __name__ == "__main__":
    main()
