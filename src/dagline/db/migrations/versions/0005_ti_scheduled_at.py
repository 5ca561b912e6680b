"""task instance readiness: `task_instance.scheduled_at`, when a TI last became `scheduled` (its
dependencies met), so the critical section can measure how long runnable tasks wait to be queued
(`dagline_task_instance_queue_delay_seconds`).

A plain nullable ADD COLUMN on both databases (TIs scheduled before it have none and are not measured).

Revision ID: 0005_ti_scheduled_at
Revises: 0004
Create Date: 2026-11-24
"""
import sqlalchemy as sa
from alembic import op

revision = '0005_ti_scheduled_at'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('task_instance', sa.Column('scheduled_at', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column('task_instance', 'scheduled_at')
