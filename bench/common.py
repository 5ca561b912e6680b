"""Shared set-up for the benchmarks: fresh databases and generated DAG specs (not a test helper)."""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import uuid

from sqlalchemy import create_engine, text

from dagline.db.engine import Database, normalize_url, upgrade

PG_URL = os.environ.get("DAGLINE_TEST_POSTGRES_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/test")


def fresh_database(kind: str) -> tuple[Database, callable]:
    """A new, migrated database of `kind` (sqlite or postgres) and a function that drops it."""
    if kind == "sqlite":
        folder = tempfile.mkdtemp(prefix="dagline-bench-")
        db = Database(f"sqlite:///{folder}/bench.db")
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
            f"  maxActiveTasks: 64\n  tasks:\n" + "\n".join(tasks) + "\n")


def percentiles(values: list[float]) -> dict:
    if not values:
        return {"p50": None, "p95": None, "p99": None, "max": None}
    ordered = sorted(values)

    def pick(q):
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)

    return {"p50": round(statistics.median(ordered), 1), "p95": pick(0.95), "p99": pick(0.99),
            "max": round(ordered[-1], 1)}
