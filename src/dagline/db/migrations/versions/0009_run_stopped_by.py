"""a stopped run remembers who stopped it: `dag_run.stopped_by`, set by `dagline runs stop` (or the web
UI's stop), so that the run decision ends the run `failed` ("stopped by <who>") once its stopped tries
have ended, however they ended (a stopped streaming try ends `success`, tasks not started `skipped`).
Clearing tasks of the run (it runs again) resets it.

A plain nullable ADD COLUMN on both databases (runs before it were never stopped this way).

Revision ID: 0009_run_stopped_by
Revises: 0008_replica_names
Create Date: 2026-11-26
"""
import sqlalchemy as sa
from alembic import op

revision = '0009_run_stopped_by'
down_revision = '0008_replica_names'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('dag_run', sa.Column('stopped_by', sa.String(length=250), nullable=True))


def downgrade() -> None:
    op.drop_column('dag_run', 'stopped_by')
