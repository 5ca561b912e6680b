"""signals (AIP-35): the `signal` log, the rules that listen to signals per DAG version
(`signal_listener`), what each signal caused (`signal_action`, the exactly-once guard), API tokens
(`api_token`, hashed), the signal that started a try and a stop request on `task_instance`, and the
run type `signal`.

The run-type CHECK on `dag_run` gains 'signal'. PostgreSQL drops and re-adds the constraint. SQLite
cannot alter a CHECK, and a table rebuild (Alembic's batch mode) would drop `dag_run`, which task
instances refer to (foreign keys are on, and cannot be turned off inside the migration's
transaction); so on SQLite the stored CREATE TABLE text is edited in place, the procedure SQLite's
documentation gives for loosening a constraint (writable_schema, then a new schema_version). The
constraint only gets wider, so every stored row still satisfies it.

Revision ID: 0006_signals
Revises: 0005_ti_scheduled_at
Create Date: 2026-11-24
"""
import sqlalchemy as sa
from alembic import op

revision = '0006_signals'
down_revision = '0005_ti_scheduled_at'
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), 'sqlite')
OLD_RUN_TYPES = "run_type IN ('scheduled', 'manual', 'backfill')"
NEW_RUN_TYPES = "run_type IN ('scheduled', 'manual', 'backfill', 'signal')"


def _set_run_type_check(old: str, new: str) -> None:
    bind = op.get_bind()
    if bind.dialect.name == 'sqlite':
        version = bind.exec_driver_sql('PRAGMA schema_version').scalar()
        bind.exec_driver_sql('PRAGMA writable_schema=ON')
        changed = bind.exec_driver_sql(
            "UPDATE sqlite_master SET sql = replace(sql, ?, ?) WHERE type = 'table' AND name = 'dag_run' "
            "AND instr(sql, ?) > 0", (old, new, old)).rowcount
        if changed != 1:
            raise RuntimeError(f"dag_run's stored definition has no {old!r} to widen")
        bind.exec_driver_sql(f'PRAGMA schema_version={version + 1}')
        bind.exec_driver_sql('PRAGMA writable_schema=OFF')
    else:
        op.drop_constraint(op.f('ck_dag_run_run_type_known'), 'dag_run', type_='check')
        op.create_check_constraint(op.f('ck_dag_run_run_type_known'), 'dag_run', new)


def upgrade() -> None:
    op.create_table('signal',
    sa.Column('seq', Id, autoincrement=True, nullable=False),
    sa.Column('key', sa.String(length=200), nullable=False),
    sa.Column('value', sa.Text(), nullable=False),
    sa.Column('sender_id', sa.String(length=200), nullable=True),
    sa.Column('source', sa.String(length=250), nullable=False),
    sa.Column('source_dag_run_id', Id, nullable=True),
    sa.Column('source_ti_id', Id, nullable=True),
    sa.Column('sent_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('handled_at', sa.DateTime(timezone=True), nullable=True),
    sa.CheckConstraint('length(value) <= 65536', name=op.f('ck_signal_value_size')),
    sa.PrimaryKeyConstraint('seq', name=op.f('pk_signal')),
    sa.UniqueConstraint('key', 'sender_id', name=op.f('uq_signal_key_sender_id'))
    )
    op.create_index(op.f('ix_signal_key_seq'), 'signal', ['key', 'seq'], unique=False)
    op.create_index(op.f('ix_signal_sent_at'), 'signal', ['sent_at'], unique=False)
    op.create_index('ix_signal_unhandled', 'signal', ['seq'], unique=False,
                    sqlite_where=sa.text('handled_at IS NULL'), postgresql_where=sa.text('handled_at IS NULL'))
    op.create_table('signal_listener',
    sa.Column('id', Id, autoincrement=True, nullable=False),
    sa.Column('dag_version_id', Id, nullable=False),
    sa.Column('dag_id', sa.String(length=63), nullable=False),
    sa.Column('key', sa.String(length=200), nullable=False),
    sa.Column('rule', sa.String(length=300), nullable=False),
    sa.Column('task_id', sa.String(length=250), nullable=False),
    sa.Column('action', sa.String(length=16), nullable=False),
    sa.Column('handling', sa.String(length=16), nullable=False),
    sa.Column('scope', sa.String(length=16), nullable=False),
    sa.CheckConstraint("action IN ('trigger', 'start', 'restart', 'stop')", name=op.f('ck_signal_listener_action_known')),
    sa.CheckConstraint("handling IN ('each', 'latest')", name=op.f('ck_signal_listener_handling_known')),
    sa.CheckConstraint("scope IN ('dag', 'run')", name=op.f('ck_signal_listener_scope_known')),
    sa.ForeignKeyConstraint(['dag_version_id'], ['dag_version.id'], name=op.f('fk_signal_listener_dag_version_id_dag_version')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_signal_listener')),
    sa.UniqueConstraint('dag_version_id', 'rule', name=op.f('uq_signal_listener_dag_version_id_rule'))
    )
    op.create_index(op.f('ix_signal_listener_key_dag_version_id'), 'signal_listener', ['key', 'dag_version_id'], unique=False)
    op.create_table('signal_action',
    sa.Column('id', Id, autoincrement=True, nullable=False),
    sa.Column('signal_seq', Id, nullable=False),
    sa.Column('rule', sa.String(length=300), nullable=False),
    sa.Column('dag_id', sa.String(length=63), nullable=False),
    sa.Column('dag_run_id', Id, nullable=False),
    sa.Column('run_id', sa.String(length=250), nullable=False),
    sa.Column('task_id', sa.String(length=250), nullable=False),
    sa.Column('action', sa.String(length=16), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('try_number', sa.Integer(), nullable=True),
    sa.Column('decided_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('done_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('detail', sa.Text(), nullable=True),
    sa.CheckConstraint("action IN ('trigger', 'start', 'restart', 'stop')", name=op.f('ck_signal_action_action_known')),
    sa.CheckConstraint("status IN ('pending', 'done', 'superseded', 'dropped')", name=op.f('ck_signal_action_status_known')),
    sa.ForeignKeyConstraint(['signal_seq'], ['signal.seq'], name=op.f('fk_signal_action_signal_seq_signal')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_signal_action')),
    sa.UniqueConstraint('signal_seq', 'rule', 'dag_run_id', 'task_id', name=op.f('uq_signal_action_signal_seq_rule_dag_run_id_task_id'))
    )
    op.create_index(op.f('ix_signal_action_dag_run_id_task_id_status'), 'signal_action', ['dag_run_id', 'task_id', 'status'], unique=False)
    op.create_table('api_token',
    sa.Column('id', Id, autoincrement=True, nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('secret_hash', sa.String(length=128), nullable=False),
    sa.Column('scope', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('last_used_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('dag_run_id', Id, nullable=True),
    sa.Column('ti_id', Id, nullable=True),
    sa.Column('try_number', sa.Integer(), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_api_token')),
    sa.UniqueConstraint('name', name=op.f('uq_api_token_name')),
    sa.UniqueConstraint('secret_hash', name=op.f('uq_api_token_secret_hash'))
    )
    op.create_index(op.f('ix_api_token_ti_id_try_number'), 'api_token', ['ti_id', 'try_number'], unique=False)
    op.add_column('task_instance', sa.Column('signal_seq', Id, nullable=True))
    op.add_column('task_instance', sa.Column('stop_requested_at', sa.DateTime(timezone=True), nullable=True))
    _set_run_type_check(OLD_RUN_TYPES, NEW_RUN_TYPES)


def downgrade() -> None:
    _set_run_type_check(NEW_RUN_TYPES, OLD_RUN_TYPES)
    op.drop_column('task_instance', 'stop_requested_at')
    op.drop_column('task_instance', 'signal_seq')
    op.drop_index(op.f('ix_api_token_ti_id_try_number'), table_name='api_token')
    op.drop_table('api_token')
    op.drop_index(op.f('ix_signal_action_dag_run_id_task_id_status'), table_name='signal_action')
    op.drop_table('signal_action')
    op.drop_index(op.f('ix_signal_listener_key_dag_version_id'), table_name='signal_listener')
    op.drop_table('signal_listener')
    op.drop_index('ix_signal_unhandled', table_name='signal')
    op.drop_index(op.f('ix_signal_sent_at'), table_name='signal')
    op.drop_index(op.f('ix_signal_key_seq'), table_name='signal')
    op.drop_table('signal')
