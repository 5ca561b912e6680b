"""Migration 0013 (namespaced names, issue 38) on a large history: time and memory of `dagline db upgrade`.

    python bench/migrate_namespaces.py [--db postgres|sqlite] [--runs 100000] [--tasks 10]

Makes a database at the previous release's schema (0012), seeds `--runs` finished runs with `--tasks` task
instances each (set-based, `tests.helpers.old_release`), split over a file's DAG and two Kubernetes
namespaces' DAGs, so two thirds of the history is re-keyed; then runs `dagline db upgrade` in a child
process and prints JSON: the seconds the upgrade took (`upgrade_s`, the command's wall time) and the
child's peak resident memory (`peak_rss_mib`), and the rows before and after (must be equal).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from sqlalchemy import func, select  # noqa: E402

from bench.common import fresh_database  # noqa: E402
from dagline.db.models import Base  # noqa: E402
from tests.helpers.old_release import DAGS, create_old_schema, seed  # noqa: E402


def counts(db) -> dict[str, int]:
    with db.begin() as conn:
        return {t.name: conn.execute(select(func.count()).select_from(t)).scalar_one()
                for t in Base.metadata.sorted_tables if t.name in ("dag_run", "task_instance", "event", "signal")}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--tasks", type=int, default=10)
    args = parser.parse_args()
    db, drop = fresh_database(args.db, migrated=False)
    try:
        create_old_schema(db)
        began = time.perf_counter()
        seed(db, runs_per_dag=args.runs // len(DAGS), tasks=args.tasks)
        seed_s = time.perf_counter() - began
        before = counts(db)
        db.dispose()
        dagline = os.path.join(os.path.dirname(sys.executable), "dagline")
        began = time.perf_counter()
        subprocess.run([dagline, "--db", db.url, "db", "upgrade"], check=True, capture_output=True)
        upgrade_s = time.perf_counter() - began
        peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        after = counts(db)
        print(json.dumps({"bench": "migrate_namespaces", "db": args.db, "runs": args.runs, "tasks": args.tasks,
                          "seed_s": round(seed_s, 2), "upgrade_s": round(upgrade_s, 2),
                          "peak_rss_mib": round(peak_kib / 1024, 1), "rows_before": before, "rows_after": after,
                          "rows_kept": before == after}))
    finally:
        drop()


if __name__ == "__main__":
    main()
