"""A database as the release before namespaced names left it (schema 0012_history_indexes), with history:
what the migration tests and `bench/migrate_namespaces.py` upgrade. Rows are written with that schema's
SQL, set-based (a hundred thousand runs in seconds): a DAG applied from a file (namespace NULL), DAGs of
Kubernetes namespaces (`k8s://<namespace>/<name>`, names global then), their versions, finished runs with
task instances, events, a pending callback, a signal listener and a handled signal with its action, a
backfill, and a namespace's pool."""

from __future__ import annotations

import datetime as dt

from alembic import command
from sqlalchemy import text

from dagline.db.engine import Database, migrations_config

OLD_REVISION = "0012_history_indexes"
T0 = dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc)
# name -> namespace (None: applied from a file)
DAGS = {"etl": None, "a-etl": "a-team", "b-etl": "team-b"}


def create_old_schema(db: Database) -> None:
    cfg = migrations_config(db)
    with db.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, OLD_REVISION)


def seed(db: Database, *, runs_per_dag: int = 3, tasks: int = 2) -> None:
    """The history described above: `runs_per_dag` hourly runs of each of DAGS, `tasks` task instances each."""
    pg = db.engine.dialect.name == "postgresql"
    with db.begin() as conn:
        conn.execute(text("INSERT INTO pool (name, slots, namespace) VALUES ('spark', 4, 'a-team')"))
        for name, namespace in DAGS.items():
            source = f"/dags/{name}.yaml" if namespace is None else f"k8s://{namespace}/{name}"
            conn.execute(text(
                "INSERT INTO dag (dag_id, is_paused, is_active, timezone, source_path, namespace, created_at, "
                "updated_at) VALUES (:d, false, true, 'UTC', :s, :ns, :t, :t)"), {"d": name, "s": source, "ns": namespace,
                                                                                  "t": T0})
            version = conn.execute(text(
                "INSERT INTO dag_version (dag_id, version, spec, created_at) VALUES (:d, 'v1', :spec, :t) "
                "RETURNING id"), {"d": name, "spec": '{"tasks": []}', "t": T0}).scalar_one()
            conn.execute(text("UPDATE dag SET current_version_id = :v WHERE dag_id = :d"), {"v": version, "d": name})
            backfill = conn.execute(text(
                "INSERT INTO backfill (dag_id, from_date, to_date, reprocess, is_paused, state, total, "
                "skipped_existing, overridden, created_at, run_backwards) VALUES (:d, :t, :t, 'none', false, "
                "'completed', 1, 0, 0, :t, false) RETURNING id"), {"d": name, "t": T0}).scalar_one()
            _runs(conn, pg, name, version, runs_per_dag, tasks)
            conn.execute(text("UPDATE dag_run SET backfill_id = :b WHERE dag_id = :d AND run_id = 'scheduled__0'"),
                         {"b": backfill, "d": name})
            conn.execute(text(
                "INSERT INTO event (at, who, entity, dag_id, dag_run_id, from_state, to_state) "
                "SELECT end_date, 'scheduler', 'dag_run', dag_id, id, 'running', state FROM dag_run WHERE dag_id = :d"),
                {"d": name})
            run = conn.execute(text("SELECT max(id) FROM dag_run WHERE dag_id = :d"), {"d": name}).scalar_one()
            conn.execute(text(
                "INSERT INTO callback_outbox (delivery_id, channel, event, dag_id, dag_run_id, target, payload, "
                "state, attempts, next_attempt_at, created_at) VALUES (:id, 'log', 'run_success', :d, :r, '{}', "
                "'{}', 'pending', 0, :t, :t)"), {"id": f"delivery-{name}", "d": name, "r": run, "t": T0})
            conn.execute(text(
                "INSERT INTO signal_listener (dag_version_id, dag_id, key, rule, task_id, action, handling, scope) "
                "VALUES (:v, :d, 'orders.ready', 'spec.triggers[0]', '', 'trigger', 'each', 'dag')"),
                {"v": version, "d": name})
            seq = conn.execute(text(
                "INSERT INTO signal (key, value, sender_id, source, sent_at, handled_at, namespaces) VALUES "
                "('orders.ready', '1', :sid, 'test', :t, :t, :ns) RETURNING seq"),
                {"sid": name, "t": T0, "ns": namespace}).scalar_one()
            conn.execute(text(
                "INSERT INTO signal_action (signal_seq, rule, dag_id, dag_run_id, run_id, task_id, action, status, "
                "decided_at) VALUES (:s, 'spec.triggers[0]', :d, :r, 'scheduled__0', '', 'trigger', 'done', :t)"),
                {"s": seq, "d": name, "r": run, "t": T0})


def _runs(conn, pg: bool, dag: str, version: int, runs: int, tasks: int) -> None:
    if pg:
        conn.execute(text("""
            INSERT INTO dag_run (dag_id, run_id, logical_date, data_interval_start, data_interval_end, run_after,
                run_type, state, dag_version_id, created_at, start_date, end_date, is_test)
            SELECT :dag, 'scheduled__' || g, ts, ts, ts + interval '1 hour', ts + interval '1 hour', 'scheduled',
                'success', :version, ts + interval '1 hour', ts + interval '1 hour', ts + interval '70 minutes', false
            FROM generate_series(0, :n - 1) AS g,
                 LATERAL (SELECT timestamptz '2020-01-01 00:00:00+00' + g * interval '1 hour' AS ts) t"""),
            {"dag": dag, "version": version, "n": runs})
        conn.execute(text("""
            INSERT INTO task_instance (dag_run_id, dag_id, task_id, state, try_number, max_tries, pool, pool_slots,
                priority_weight, start_date, end_date)
            SELECT r.id, r.dag_id, 't' || k, 'success', 1, 1, 'spark', 1, 1, r.start_date, r.end_date
            FROM dag_run r, generate_series(0, :tasks - 1) AS k WHERE r.dag_id = :dag"""),
            {"dag": dag, "tasks": tasks})
    else:
        conn.execute(text("""
            WITH RECURSIVE g(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM g WHERE n + 1 < :n)
            INSERT INTO dag_run (dag_id, run_id, logical_date, data_interval_start, data_interval_end, run_after,
                run_type, state, dag_version_id, created_at, start_date, end_date, is_test)
            SELECT :dag, 'scheduled__' || n, ts, ts, te, te, 'scheduled', 'success', :version, te, te, te, 0
            FROM (SELECT n, datetime('2020-01-01', '+' || n || ' hours') AS ts,
                         datetime('2020-01-01', '+' || (n + 1) || ' hours') AS te FROM g)"""),
            {"dag": dag, "version": version, "n": runs})
        conn.execute(text("""
            WITH RECURSIVE k(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM k WHERE n + 1 < :tasks)
            INSERT INTO task_instance (dag_run_id, dag_id, task_id, state, try_number, max_tries, pool, pool_slots,
                priority_weight, start_date, end_date)
            SELECT r.id, r.dag_id, 't' || k.n, 'success', 1, 1, 'spark', 1, 1, r.start_date, r.end_date
            FROM dag_run r, k WHERE r.dag_id = :dag"""), {"dag": dag, "tasks": tasks})
    conn.execute(text("UPDATE dag_run SET previous_run_id = id - 1 WHERE dag_id = :dag AND run_id <> 'scheduled__0'"),
                 {"dag": dag})
