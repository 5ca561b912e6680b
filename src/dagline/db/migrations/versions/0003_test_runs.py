"""test runs: `dag_run.is_test` flags the runs `dagline dags test` makes, and the unique index on a
DAG's live logical dates leaves them out (a test run is not on the timeline: it may share a logical
date with a scheduled, manual or backfill run, and never holds one).

Plain ADD COLUMN (with a server default for existing rows) and a re-created partial index, on both
databases: no table rebuild on SQLite.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24
"""
import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None

OLD_WHERE = "state != 'overridden'"
NEW_WHERE = "state != 'overridden' AND NOT is_test"


def upgrade() -> None:
    op.add_column('dag_run', sa.Column('is_test', sa.Boolean(), nullable=False, server_default=sa.false()))
    op.drop_index('uq_dag_run_live_logical_date', table_name='dag_run')
    op.create_index('uq_dag_run_live_logical_date', 'dag_run', ['dag_id', 'logical_date'], unique=True,
                    sqlite_where=sa.text(NEW_WHERE), postgresql_where=sa.text(NEW_WHERE))


def downgrade() -> None:
    op.execute("DELETE FROM task_instance WHERE dag_run_id IN (SELECT id FROM dag_run WHERE is_test)")
    op.execute("DELETE FROM dag_run WHERE is_test")
    op.drop_index('uq_dag_run_live_logical_date', table_name='dag_run')
    op.create_index('uq_dag_run_live_logical_date', 'dag_run', ['dag_id', 'logical_date'], unique=True,
                    sqlite_where=sa.text(OLD_WHERE), postgresql_where=sa.text(OLD_WHERE))
    op.drop_column('dag_run', 'is_test')
