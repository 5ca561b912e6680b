"""deadlines and callbacks: `deadline_at` / `deadline_missed_at` on runs and task instances (with partial
indexes holding only the rows whose deadline may still be missed), and the `callback_outbox` table.

Plain ADD COLUMN and CREATE INDEX on both databases (no SQLite table rebuild).

Revision ID: 0007_deadlines_callbacks
Revises: 0006_signals
Create Date: 2026-11-24
"""
import sqlalchemy as sa
from alembic import op

revision = '0007_deadlines_callbacks'
down_revision = '0006_signals'
branch_labels = None
depends_on = None

RUN_OPEN = "deadline_at IS NOT NULL AND deadline_missed_at IS NULL AND state IN ('queued', 'running')"
TI_OPEN = ("deadline_at IS NOT NULL AND deadline_missed_at IS NULL AND "
           "state IN ('none', 'scheduled', 'queued', 'running', 'up_for_retry')")


def upgrade() -> None:
    for table in ('dag_run', 'task_instance'):
        op.add_column(table, sa.Column('deadline_at', sa.DateTime(timezone=True), nullable=True))
        op.add_column(table, sa.Column('deadline_missed_at', sa.DateTime(timezone=True), nullable=True))
    op.create_index('ix_dag_run_deadline_due', 'dag_run', ['deadline_at'], unique=False,
                    sqlite_where=sa.text(RUN_OPEN), postgresql_where=sa.text(RUN_OPEN))
    op.create_index('ix_task_instance_deadline_due', 'task_instance', ['deadline_at'], unique=False,
                    sqlite_where=sa.text(TI_OPEN), postgresql_where=sa.text(TI_OPEN))
    op.create_table(
        'callback_outbox',
        sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
        sa.Column('delivery_id', sa.String(length=36), nullable=False),
        sa.Column('channel', sa.String(length=20), nullable=False),
        sa.Column('event', sa.String(length=20), nullable=False),
        sa.Column('dag_id', sa.String(length=63), nullable=False),
        sa.Column('dag_run_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=True),
        sa.Column('task_id', sa.String(length=250), nullable=True),
        sa.Column('target', sa.JSON(), nullable=False),
        sa.Column('payload', sa.JSON(), nullable=False),
        sa.Column('state', sa.String(length=16), nullable=False),
        sa.Column('attempts', sa.Integer(), nullable=False),
        sa.Column('next_attempt_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('claimed_by', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=True),
        sa.Column('last_error', sa.Text(), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('delivered_at', sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("state IN ('pending', 'delivered', 'failed')", name=op.f('ck_callback_outbox_state_known')),
        sa.CheckConstraint("channel IN ('webhook', 'log', 'kubernetes_event')",
                           name=op.f('ck_callback_outbox_channel_known')),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_callback_outbox')),
        sa.UniqueConstraint('delivery_id', name=op.f('uq_callback_outbox_delivery_id')),
    )
    op.create_index('ix_callback_outbox_due', 'callback_outbox', ['next_attempt_at', 'id'], unique=False,
                    sqlite_where=sa.text("state = 'pending'"), postgresql_where=sa.text("state = 'pending'"))
    op.create_index(op.f('ix_callback_outbox_dag_run_id'), 'callback_outbox', ['dag_run_id'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_callback_outbox_dag_run_id'), table_name='callback_outbox')
    op.drop_index('ix_callback_outbox_due', table_name='callback_outbox')
    op.drop_table('callback_outbox')
    op.drop_index('ix_task_instance_deadline_due', table_name='task_instance')
    op.drop_index('ix_dag_run_deadline_due', table_name='dag_run')
    for table in ('task_instance', 'dag_run'):
        op.drop_column(table, 'deadline_missed_at')
        op.drop_column(table, 'deadline_at')
