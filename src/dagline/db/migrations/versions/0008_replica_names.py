"""names: a scheduler replica is a `replica`, not a "job" (which, in dagline, is a Spark job).
The table `scheduler_job` becomes `replica`, `task_instance.queued_by_job_id` becomes
`queued_by_replica_id`, and their index and constraints follow.

Both databases rename in place, rows and references kept: PostgreSQL with ALTER TABLE/INDEX ... RENAME;
SQLite with ALTER TABLE ... RENAME (3.25+ rewrites the foreign key in `task_instance`) and, having no
ALTER INDEX, by dropping and re-creating the state index.

Revision ID: 0008_replica_names
Revises: 0007_deadlines_callbacks
Create Date: 2026-11-24
"""
from alembic import op

revision = '0008_replica_names'
down_revision = '0007_deadlines_callbacks'
branch_labels = None
depends_on = None

POSTGRES_RENAMES = (  # (kind, table or None, old, new), applied in order on upgrade
    ('TABLE', None, 'scheduler_job', 'replica'),
    ('COLUMN', 'task_instance', 'queued_by_job_id', 'queued_by_replica_id'),
    ('INDEX', None, 'ix_scheduler_job_state', 'ix_replica_state'),
    ('CONSTRAINT', 'replica', 'pk_scheduler_job', 'pk_replica'),
    ('CONSTRAINT', 'task_instance', 'fk_task_instance_queued_by_job_id_scheduler_job',
     'fk_task_instance_queued_by_replica_id_replica'),
    ('SEQUENCE', None, 'scheduler_job_id_seq', 'replica_id_seq'),
)


def _rename(kind: str, table: str | None, old: str, new: str) -> None:
    if kind == 'TABLE':
        op.execute(f'ALTER TABLE {old} RENAME TO {new}')
    elif kind == 'COLUMN':
        op.execute(f'ALTER TABLE {table} RENAME COLUMN {old} TO {new}')
    elif kind == 'CONSTRAINT':
        op.execute(f'ALTER TABLE {table} RENAME CONSTRAINT {old} TO {new}')
    else:
        op.execute(f'ALTER {kind} IF EXISTS {old} RENAME TO {new}')


def upgrade() -> None:
    if op.get_bind().dialect.name == 'sqlite':
        op.drop_index('ix_scheduler_job_state', table_name='scheduler_job')
        op.execute('ALTER TABLE scheduler_job RENAME TO replica')
        op.execute('ALTER TABLE task_instance RENAME COLUMN queued_by_job_id TO queued_by_replica_id')
        op.create_index('ix_replica_state', 'replica', ['state'])
        return
    for kind, table, old, new in POSTGRES_RENAMES:
        _rename(kind, table, old, new)


def downgrade() -> None:
    if op.get_bind().dialect.name == 'sqlite':
        op.drop_index('ix_replica_state', table_name='replica')
        op.execute('ALTER TABLE task_instance RENAME COLUMN queued_by_replica_id TO queued_by_job_id')
        op.execute('ALTER TABLE replica RENAME TO scheduler_job')
        op.create_index('ix_scheduler_job_state', 'scheduler_job', ['state'])
        return
    for kind, table, old, new in reversed(POSTGRES_RENAMES):
        _rename(kind, table, new, old)  # the table is still `replica` when its constraint is renamed back
