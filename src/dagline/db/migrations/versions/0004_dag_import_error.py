"""import errors: `dag.import_error` and `dag.import_error_at`, why the scheduler could not load or
schedule a DAG's current version (an unreadable stored spec, a timetable that raises...), shown by
`dagline dags list` and `dags show`, cleared when a version is applied.

Plain ADD COLUMN on both databases (no table rebuild on SQLite: other tables refer to `dag`).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24
"""
import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('dag', sa.Column('import_error', sa.Text(), nullable=True))
    op.add_column('dag', sa.Column('import_error_at', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column('dag', 'import_error_at')
    op.drop_column('dag', 'import_error')
