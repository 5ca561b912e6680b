"""try launches: the `try_launch` table, one row per launched try with its Spark job as rendered at
launch (or the error that kept it from launching), so pages show what ran without rendering (ADR 60);
and `server_secret`, secrets every replica shares without configuration (the web UI's CSRF key, ADR 61).

A plain CREATE TABLE on both databases. Tries launched before this revision have no row: the run page
says so.

Revision ID: 0010_try_launches
Revises: 0009_run_stopped_by
Create Date: 2026-11-26
"""
import sqlalchemy as sa
from alembic import op

revision = '0010_try_launches'
down_revision = '0009_run_stopped_by'
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), 'sqlite')


def upgrade() -> None:
    op.create_table('try_launch',
    sa.Column('ti_id', Id, nullable=False),
    sa.Column('try_number', sa.Integer(), nullable=False),
    sa.Column('launched_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('main_application_file', sa.Text(), nullable=True),
    sa.Column('arguments', sa.JSON(), nullable=True),
    sa.Column('conf', sa.JSON(), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.ForeignKeyConstraint(['ti_id'], ['task_instance.id'], name=op.f('fk_try_launch_ti_id_task_instance')),
    sa.PrimaryKeyConstraint('ti_id', 'try_number', name=op.f('pk_try_launch'))
    )
    op.create_table('server_secret',
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('secret', sa.String(length=128), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_server_secret'))
    )


def downgrade() -> None:
    op.drop_table('server_secret')
    op.drop_table('try_launch')
