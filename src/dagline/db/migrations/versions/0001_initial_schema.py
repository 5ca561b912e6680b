"""initial schema: DAGs and their versions, runs on a timeline, task instances, pools, backfills,
scheduler replicas and the append-only event log; plus the `default` pool (128 slots).

Revision ID: 0001
Revises: 
Create Date: 2026-11-21
"""
import sqlalchemy as sa
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('dag',
    sa.Column('dag_id', sa.String(length=63), nullable=False),
    sa.Column('current_version_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=True),
    sa.Column('is_paused', sa.Boolean(), nullable=False),
    sa.Column('is_active', sa.Boolean(), nullable=False),
    sa.Column('schedule', sa.String(length=100), nullable=True),
    sa.Column('timezone', sa.String(length=64), nullable=False),
    sa.Column('source_path', sa.Text(), nullable=True),
    sa.Column('next_dagrun', sa.DateTime(timezone=True), nullable=True),
    sa.Column('next_dagrun_data_interval_start', sa.DateTime(timezone=True), nullable=True),
    sa.Column('next_dagrun_data_interval_end', sa.DateTime(timezone=True), nullable=True),
    sa.Column('next_dagrun_create_after', sa.DateTime(timezone=True), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('dag_id', name=op.f('pk_dag'))
    )
    op.create_index(op.f('ix_dag_is_active_is_paused_next_dagrun_create_after'), 'dag', ['is_active', 'is_paused', 'next_dagrun_create_after'], unique=False)
    op.create_table('event',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('who', sa.String(length=100), nullable=False),
    sa.Column('entity', sa.String(length=20), nullable=False),
    sa.Column('dag_id', sa.String(length=63), nullable=True),
    sa.Column('dag_run_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=True),
    sa.Column('ti_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=True),
    sa.Column('task_id', sa.String(length=250), nullable=True),
    sa.Column('try_number', sa.Integer(), nullable=True),
    sa.Column('from_state', sa.String(length=20), nullable=True),
    sa.Column('to_state', sa.String(length=20), nullable=True),
    sa.Column('detail', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_event'))
    )
    op.create_index(op.f('ix_event_entity_dag_run_id'), 'event', ['entity', 'dag_run_id'], unique=False)
    op.create_table('pool',
    sa.Column('name', sa.String(length=256), nullable=False),
    sa.Column('slots', sa.Integer(), nullable=False),
    sa.Column('description', sa.Text(), nullable=True),
    sa.CheckConstraint('slots >= 0', name=op.f('ck_pool_slots_not_negative')),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_pool'))
    )
    op.create_table('scheduler_job',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('hostname', sa.String(length=250), nullable=False),
    sa.Column('pid', sa.Integer(), nullable=False),
    sa.Column('executor', sa.String(length=32), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('latest_heartbeat', sa.DateTime(timezone=True), nullable=False),
    sa.Column('ended_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_scheduler_job'))
    )
    op.create_table('backfill',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('dag_id', sa.String(length=63), nullable=False),
    sa.Column('request_id', sa.String(length=256), nullable=True),
    sa.Column('from_date', sa.DateTime(timezone=True), nullable=False),
    sa.Column('to_date', sa.DateTime(timezone=True), nullable=False),
    sa.Column('reprocess', sa.String(length=16), nullable=False),
    sa.Column('max_active_runs', sa.Integer(), nullable=True),
    sa.Column('run_backwards', sa.Boolean(), nullable=False),
    sa.Column('is_paused', sa.Boolean(), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('total', sa.Integer(), nullable=False),
    sa.Column('skipped_existing', sa.Integer(), nullable=False),
    sa.Column('overridden', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('completed_at', sa.DateTime(timezone=True), nullable=True),
    sa.CheckConstraint("reprocess IN ('none', 'failed', 'completed')", name=op.f('ck_backfill_reprocess_known')),
    sa.CheckConstraint("state IN ('running', 'completed', 'cancelled')", name=op.f('ck_backfill_state_known')),
    sa.ForeignKeyConstraint(['dag_id'], ['dag.dag_id'], name=op.f('fk_backfill_dag_id_dag')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_backfill')),
    sa.UniqueConstraint('request_id', name=op.f('uq_backfill_request_id'))
    )
    op.create_table('dag_version',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('dag_id', sa.String(length=63), nullable=False),
    sa.Column('version', sa.String(length=64), nullable=False),
    sa.Column('spec', sa.JSON(), nullable=False),
    sa.Column('source_dir', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['dag_id'], ['dag.dag_id'], name=op.f('fk_dag_version_dag_id_dag')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_dag_version')),
    sa.UniqueConstraint('dag_id', 'version', name=op.f('uq_dag_version_dag_id_version'))
    )
    op.create_table('dag_run',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('dag_id', sa.String(length=63), nullable=False),
    sa.Column('run_id', sa.String(length=250), nullable=False),
    sa.Column('logical_date', sa.DateTime(timezone=True), nullable=False),
    sa.Column('data_interval_start', sa.DateTime(timezone=True), nullable=False),
    sa.Column('data_interval_end', sa.DateTime(timezone=True), nullable=False),
    sa.Column('run_after', sa.DateTime(timezone=True), nullable=False),
    sa.Column('run_type', sa.String(length=16), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('previous_run_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=True),
    sa.Column('dag_version_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('backfill_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=True),
    sa.Column('conf', sa.JSON(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('queued_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('start_date', sa.DateTime(timezone=True), nullable=True),
    sa.Column('end_date', sa.DateTime(timezone=True), nullable=True),
    sa.Column('last_scheduling_decision', sa.DateTime(timezone=True), nullable=True),
    sa.CheckConstraint("run_type IN ('scheduled', 'manual', 'backfill')", name=op.f('ck_dag_run_run_type_known')),
    sa.CheckConstraint("state IN ('queued', 'running', 'success', 'failed', 'overridden')", name=op.f('ck_dag_run_state_known')),
    sa.ForeignKeyConstraint(['backfill_id'], ['backfill.id'], name=op.f('fk_dag_run_backfill_id_backfill')),
    sa.ForeignKeyConstraint(['dag_id'], ['dag.dag_id'], name=op.f('fk_dag_run_dag_id_dag')),
    sa.ForeignKeyConstraint(['dag_version_id'], ['dag_version.id'], name=op.f('fk_dag_run_dag_version_id_dag_version')),
    sa.ForeignKeyConstraint(['previous_run_id'], ['dag_run.id'], name=op.f('fk_dag_run_previous_run_id_dag_run')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_dag_run')),
    sa.UniqueConstraint('dag_id', 'run_id', name=op.f('uq_dag_run_dag_id_run_id'))
    )
    op.create_index(op.f('ix_dag_run_backfill_id'), 'dag_run', ['backfill_id'], unique=False)
    op.create_index(op.f('ix_dag_run_previous_run_id'), 'dag_run', ['previous_run_id'], unique=False)
    op.create_index(op.f('ix_dag_run_state_dag_id'), 'dag_run', ['state', 'dag_id'], unique=False)
    op.create_index('uq_dag_run_live_logical_date', 'dag_run', ['dag_id', 'logical_date'], unique=True, sqlite_where=sa.text("state != 'overridden'"), postgresql_where=sa.text("state != 'overridden'"))
    op.create_table('task_instance',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('dag_run_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('dag_id', sa.String(length=63), nullable=False),
    sa.Column('task_id', sa.String(length=250), nullable=False),
    sa.Column('state', sa.String(length=20), nullable=False),
    sa.Column('try_number', sa.Integer(), nullable=False),
    sa.Column('max_tries', sa.Integer(), nullable=False),
    sa.Column('pool', sa.String(length=256), nullable=False),
    sa.Column('pool_slots', sa.Integer(), nullable=False),
    sa.Column('priority_weight', sa.Integer(), nullable=False),
    sa.Column('queued_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('start_date', sa.DateTime(timezone=True), nullable=True),
    sa.Column('end_date', sa.DateTime(timezone=True), nullable=True),
    sa.Column('next_retry_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('external_id', sa.String(length=250), nullable=True),
    sa.Column('queued_by_job_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=True),
    sa.Column('hostname', sa.String(length=250), nullable=True),
    sa.Column('last_heartbeat', sa.DateTime(timezone=True), nullable=True),
    sa.CheckConstraint("state IN ('none', 'scheduled', 'queued', 'running', 'success', 'failed', 'up_for_retry', 'upstream_failed', 'skipped', 'removed')", name=op.f('ck_task_instance_state_known')),
    sa.CheckConstraint('pool_slots >= 1', name=op.f('ck_task_instance_pool_slots_positive')),
    sa.ForeignKeyConstraint(['dag_run_id'], ['dag_run.id'], name=op.f('fk_task_instance_dag_run_id_dag_run')),
    sa.ForeignKeyConstraint(['queued_by_job_id'], ['scheduler_job.id'], name=op.f('fk_task_instance_queued_by_job_id_scheduler_job')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_task_instance')),
    sa.UniqueConstraint('dag_run_id', 'task_id', name=op.f('uq_task_instance_dag_run_id_task_id'))
    )
    op.create_index(op.f('ix_task_instance_dag_id_state'), 'task_instance', ['dag_id', 'state'], unique=False)
    op.create_index(op.f('ix_task_instance_state_pool'), 'task_instance', ['state', 'pool'], unique=False)
    pool = sa.table('pool', sa.column('name', sa.String), sa.column('slots', sa.Integer),
                    sa.column('description', sa.Text))
    op.bulk_insert(pool, [{'name': 'default', 'slots': 128, 'description': 'the default pool'}])


def downgrade() -> None:
    op.drop_index(op.f('ix_task_instance_state_pool'), table_name='task_instance')
    op.drop_index(op.f('ix_task_instance_dag_id_state'), table_name='task_instance')
    op.drop_table('task_instance')
    op.drop_index('uq_dag_run_live_logical_date', table_name='dag_run', sqlite_where=sa.text("state != 'overridden'"), postgresql_where=sa.text("state != 'overridden'"))
    op.drop_index(op.f('ix_dag_run_state_dag_id'), table_name='dag_run')
    op.drop_index(op.f('ix_dag_run_previous_run_id'), table_name='dag_run')
    op.drop_index(op.f('ix_dag_run_backfill_id'), table_name='dag_run')
    op.drop_table('dag_run')
    op.drop_table('dag_version')
    op.drop_table('backfill')
    op.drop_table('scheduler_job')
    op.drop_table('pool')
    op.drop_index(op.f('ix_event_entity_dag_run_id'), table_name='event')
    op.drop_table('event')
    op.drop_index(op.f('ix_dag_is_active_is_paused_next_dagrun_create_after'), table_name='dag')
    op.drop_table('dag')
