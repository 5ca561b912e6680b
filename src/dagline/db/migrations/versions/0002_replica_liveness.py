"""replica liveness: `scheduler_job.alive_since` (when a replica's unbroken run of heartbeats began)
and an index on `scheduler_job.state` to find live and ended replicas.

Plain ADD COLUMN and CREATE INDEX on both databases: on SQLite a table rebuild (Alembic's batch
mode) would drop `scheduler_job`, which `task_instance.queued_by_job_id` refers to.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""
import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('scheduler_job', sa.Column('alive_since', sa.DateTime(timezone=True), nullable=True))
    op.create_index(op.f('ix_scheduler_job_state'), 'scheduler_job', ['state'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_scheduler_job_state'), table_name='scheduler_job')
    op.drop_column('scheduler_job', 'alive_since')
