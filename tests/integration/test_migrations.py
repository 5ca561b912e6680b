"""The Alembic migrations produce exactly the models, on SQLite and PostgreSQL, and are idempotent;
the database enforces the invariants itself."""

from __future__ import annotations

import datetime as dt

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import insert
from sqlalchemy.exc import IntegrityError

from dagline.db.engine import current_revision, head_revision, upgrade
from dagline.db.models import Base, dag_run_t, dag_t, dag_version_t, ti_t
from dagline.times import UTC


def test_migrations_match_the_models(db):
    with db.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    assert diff == []
    assert current_revision(db) == head_revision(db)
    assert upgrade(db)[0] == head_revision(db)  # idempotent


def _seed(conn):
    now = dt.datetime(2026, 1, 1, tzinfo=UTC)
    conn.execute(insert(dag_t).values(dag_id="d", is_paused=False, is_active=True, timezone="UTC",
                                      created_at=now, updated_at=now))
    vid = conn.execute(insert(dag_version_t).values(dag_id="d", version="v", spec={}, created_at=now)
                       .returning(dag_version_t.c.id)).scalar_one()
    return now, vid


def _run(now, vid, run_id, state="queued"):
    return dict(dag_id="d", run_id=run_id, logical_date=now, data_interval_start=now, data_interval_end=now,
                run_after=now, run_type="manual", state=state, dag_version_id=vid, created_at=now)


def test_two_live_runs_at_one_logical_date_are_impossible(db):
    with db.begin() as conn:
        now, vid = _seed(conn)
        conn.execute(insert(dag_run_t).values(**_run(now, vid, "a", state="overridden")))
        conn.execute(insert(dag_run_t).values(**_run(now, vid, "b")))
    with pytest.raises(IntegrityError):
        with db.begin() as conn:
            conn.execute(insert(dag_run_t).values(**_run(now, vid, "c")))


def test_a_task_instance_always_belongs_to_a_run(db):
    with pytest.raises(IntegrityError):
        with db.begin() as conn:
            conn.execute(insert(ti_t).values(dag_run_id=None, dag_id="d", task_id="t", state="none"))


def test_upgrading_a_sqlite_database_with_runs_keeps_them_and_allows_signal_runs(tmp_path):
    """0006 widens dag_run's run-type check in place on SQLite (no table rebuild under the task
    instances that refer to it)."""
    from alembic import command
    from alembic.script import ScriptDirectory

    from dagline.db.engine import Database, migrations_config

    db = Database(f"sqlite:///{tmp_path}/old.db")
    cfg = migrations_config(db)
    before = ScriptDirectory.from_config(cfg).get_revision("0006_signals").down_revision
    with db.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, before)
    with db.begin() as conn:
        now, vid = _seed(conn)
        run = conn.execute(insert(dag_run_t).values(**_run(now, vid, "a")).returning(dag_run_t.c.id)).scalar_one()
        conn.execute(insert(ti_t).values(dag_run_id=run, dag_id="d", task_id="t", state="none"))
    upgrade(db)
    with db.begin() as conn:
        conn.execute(insert(dag_run_t).values(**{**_run(now + dt.timedelta(days=1), vid, "s"), "run_type": "signal"}))
        assert conn.execute(ti_t.select()).one().dag_run_id == run
    with pytest.raises(IntegrityError):
        with db.begin() as conn:
            conn.execute(insert(dag_run_t).values(**{**_run(now + dt.timedelta(days=2), vid, "x"), "run_type": "x"}))
    db.dispose()
