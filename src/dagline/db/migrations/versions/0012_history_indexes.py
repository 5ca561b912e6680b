"""indexes for reads and deletes that must not grow with history (issue 32).

- `dag_run (dag_id, logical_date, id)`: a DAG's runs in timeline order, so `runs list --limit N`, the grid
  and timeline pages and retention read only the rows they show or delete;
- `dag_run (dag_version_id)`: deleting a DAG's versions checks the foreign key without a scan of all runs;
- `event (dag_run_id, entity)` replaces `event (entity, dag_run_id)`: the same lookups (a run's task
  instance events) and, run first, retention's delete of a run's events whatever their entity.

Revision ID: 0012_history_indexes
Revises: 0011_tenancy
Create Date: 2026-11-26
"""
from alembic import op

revision = '0012_history_indexes'
down_revision = '0011_tenancy'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index('ix_dag_run_dag_id_logical_date_id', 'dag_run', ['dag_id', 'logical_date', 'id'])
    op.create_index('ix_dag_run_dag_version_id', 'dag_run', ['dag_version_id'])
    op.create_index('ix_event_dag_run_id_entity', 'event', ['dag_run_id', 'entity'])
    op.drop_index('ix_event_entity_dag_run_id', table_name='event')


def downgrade() -> None:
    op.create_index('ix_event_entity_dag_run_id', 'event', ['entity', 'dag_run_id'])
    op.drop_index('ix_event_dag_run_id_entity', table_name='event')
    op.drop_index('ix_dag_run_dag_version_id', table_name='dag_run')
    op.drop_index('ix_dag_run_dag_id_logical_date_id', table_name='dag_run')
