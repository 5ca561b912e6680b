"""Migration 0013 (issue 38): a database made by the release before namespaced names, with history, upgrades
on SQLite and PostgreSQL without losing a row; each DAG keeps the namespace it had (a file's DAG goes to
`default`), its history moves with it under its new key, and then two namespaces may each have the name."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import func, select, text

from dagline.db.engine import Database, upgrade
from dagline.db.models import Base, dag_run_t, dag_t, pool_t, signal_t, ti_t
from tests.helpers.cli import cli
from tests.helpers.old_release import DAGS, create_old_schema, seed
from tests.helpers.postgres import make_pg_database

RUNS, TASKS = 4, 3


@pytest.fixture(params=["sqlite", "postgres"])
def old_db(request, tmp_path):
    """An empty database at the previous release's schema, with its history seeded."""
    if request.param == "sqlite":
        db = Database(f"sqlite:///{tmp_path}/old.db")
        drop = db.dispose
    else:
        db, drop = make_pg_database(request.getfixturevalue("pg_admin"), migrated=False)
    create_old_schema(db)
    seed(db, runs_per_dag=RUNS, tasks=TASKS)
    yield db
    drop()


def _counts(db) -> dict[str, int]:
    with db.begin() as conn:
        return {t.name: conn.execute(select(func.count()).select_from(t)).scalar_one()
                for t in Base.metadata.sorted_tables if t.name != "replica"}


def test_every_row_survives_and_keeps_its_namespace(old_db):
    before = _counts(old_db)
    upgrade(old_db)
    assert _counts(old_db) == before  # not one run, task instance, event, callback or signal lost or added
    with old_db.begin() as conn:
        dags = dict(conn.execute(select(dag_t.c.dag_id, dag_t.c.namespace)).all())
        runs = dict(conn.execute(select(dag_run_t.c.dag_id, func.count()).group_by(dag_run_t.c.dag_id)).all())
        tis = dict(conn.execute(select(ti_t.c.dag_id, func.count()).group_by(ti_t.c.dag_id)).all())
        pools = dict(conn.execute(select(pool_t.c.name, pool_t.c.namespace)).all())
        ti_pools = dict(conn.execute(select(ti_t.c.dag_id, func.min(ti_t.c.pool)).group_by(ti_t.c.dag_id)).all())
        signals = dict(conn.execute(select(signal_t.c.key, signal_t.c.namespace)
                                    .where(signal_t.c.sender_id == "a-etl")).all())
        previous_kept = conn.execute(select(func.count()).where(dag_run_t.c.previous_run_id.is_not(None))).scalar_one()
    assert dags == {"etl": "default", "a-team/a-etl": "a-team", "team-b/b-etl": "team-b"}
    assert runs == dict.fromkeys(dags, RUNS) and tis == dict.fromkeys(dags, RUNS * TASKS)
    assert pools == {"default": None, "a-team/spark": "a-team"}  # a-team's own pool, under its key
    assert ti_pools == {"etl": "spark", "a-team/a-etl": "a-team/spark", "team-b/b-etl": "spark"}
    assert signals == {"a-team/orders.ready": "a-team"}  # sent within a-team: a-team's signal now
    assert previous_kept == len(DAGS) * (RUNS - 1)  # the timelines are intact


def test_after_the_upgrade_two_namespaces_may_each_have_a_name(old_db, tmp_path):
    upgrade(old_db)
    (tmp_path / "etl.yaml").write_text("""
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: a-etl}
spec:
  schedule: "@daily"
  startDate: "2026-01-01"
  tasks: [{id: load, spark: {mainApplicationFile: load.py}}]
""")
    cli(old_db, "dags", "apply", str(tmp_path / "etl.yaml"), "--namespace", "team-b")
    listed = json.loads(cli(old_db, "runs", "list", "a-etl", "--namespace", "a-team", "--json").output)
    assert {(r["dag_id"], r["namespace"]) for r in listed} == {("a-etl", "a-team")} and len(listed) == RUNS
    assert json.loads(cli(old_db, "runs", "list", "a-etl", "--namespace", "team-b", "--json").output) == []


def test_downgrading_gives_the_previous_schema_back_while_no_name_is_shared(old_db):
    from alembic import command
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from dagline.db.engine import migrations_config
    from tests.helpers.old_release import OLD_REVISION

    with old_db.begin() as conn:
        before = {t: conn.execute(text(f"SELECT * FROM {t} ORDER BY 1")).all() for t in ("dag", "dag_run", "pool")}
    upgrade(old_db)
    cfg = migrations_config(old_db)
    with old_db.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, OLD_REVISION)
    with old_db.begin() as conn:
        after = {t: conn.execute(text(f"SELECT * FROM {t} ORDER BY 1")).all() for t in ("dag", "dag_run", "pool")}
    assert after == before
    upgrade(old_db)  # and up again
    with old_db.engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata) == []
