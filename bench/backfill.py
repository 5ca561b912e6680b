"""Backfill creation speed: plan and insert a 10,000-day backfill of a 5-task daily DAG; prints JSON.

    python bench/backfill.py --db postgres|sqlite [--days 10000]

runs_per_s counts runs planned and inserted (with their task instances, timeline links and events)
per second of `create_backfill`. Not a test. PostgreSQL from $DAGLINE_TEST_POSTGRES_URL.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import chain_dag_yaml, fresh_database  # noqa: E402
from sqlalchemy import func, select  # noqa: E402

from dagline.db.models import dag_run_t, ti_t  # noqa: E402
from dagline.spec import load_dag_paths  # noqa: E402
from dagline.store.backfills import create_backfill  # noqa: E402
from dagline.store.dags import apply_dags  # noqa: E402
from dagline.times import UTC  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="postgres")
    parser.add_argument("--days", type=int, default=10_000)
    parser.add_argument("--tasks", type=int, default=5)
    args = parser.parse_args()
    db, drop = fresh_database(args.db)
    try:
        start = dt.datetime(1990, 1, 1, tzinfo=UTC)
        end = start + dt.timedelta(days=args.days - 1)
        now = end + dt.timedelta(days=2)
        folder = tempfile.mkdtemp(prefix="dagline-bench-dags-")
        path = os.path.join(folder, "daily.yaml")
        with open(path, "w") as fh:
            fh.write(chain_dag_yaml("daily", args.tasks, schedule="@daily", start="1990-01-01T00:00:00"))
        apply_dags(db, load_dag_paths([path]), now=now)
        began = time.perf_counter()
        result = create_backfill(db, "daily", start=start, end=end, now=now)
        elapsed = time.perf_counter() - began
        with db.engine.connect() as conn:
            runs = conn.execute(select(func.count()).select_from(dag_run_t)).scalar_one()
            tis = conn.execute(select(func.count()).select_from(ti_t)).scalar_one()
        print(json.dumps({"db": args.db, "days": args.days, "runs": runs, "tis": tis,
                          "planned": len(result.plan.entries), "seconds": round(elapsed, 3),
                          "runs_per_s": round(runs / elapsed, 1)}))
    finally:
        drop()


if __name__ == "__main__":
    main()
