"""tenancy: the namespace that owns each DAG and pool, the namespaces a token and a signal are limited to.

- `dag.namespace` (indexed): the namespace of the DAG object defining the DAG, filled here from
  `source_path` (`k8s://<namespace>/<name>`); None for DAGs applied from files.
- `pool.namespace`: the namespace of the Pool object owning a pool; None for platform pools (every
  existing pool stays a platform pool: a Pool object takes it over at its next handling).
- `api_token.namespaces`, `signal.namespaces`: space-separated namespaces; None is every namespace.

Plain ADD COLUMN on both databases (no table rebuild on SQLite: other tables refer to `dag`); the
namespaces of existing DAGs are filled in Python, the same on both.

Revision ID: 0011_tenancy
Revises: 0010_try_launches
Create Date: 2026-11-26
"""
import sqlalchemy as sa
from alembic import op

revision = '0011_tenancy'
down_revision = '0010_try_launches'
branch_labels = None
depends_on = None

SOURCE_SCHEME = 'k8s://'


def upgrade() -> None:
    op.add_column('dag', sa.Column('namespace', sa.String(length=63), nullable=True))
    op.create_index('ix_dag_namespace', 'dag', ['namespace'])
    op.add_column('pool', sa.Column('namespace', sa.String(length=63), nullable=True))
    op.add_column('api_token', sa.Column('namespaces', sa.Text(), nullable=True))
    op.add_column('signal', sa.Column('namespaces', sa.Text(), nullable=True))
    bind = op.get_bind()
    dag = sa.table('dag', sa.column('dag_id', sa.String), sa.column('source_path', sa.Text),
                   sa.column('namespace', sa.String))
    rows = bind.execute(sa.select(dag.c.dag_id, dag.c.source_path)
                        .where(dag.c.source_path.like(SOURCE_SCHEME + '%'))).all()
    for dag_id, source_path in rows:
        namespace = source_path[len(SOURCE_SCHEME):].split('/', 1)[0]
        bind.execute(sa.update(dag).where(dag.c.dag_id == dag_id).values(namespace=namespace))


def downgrade() -> None:
    op.drop_column('signal', 'namespaces')
    op.drop_column('api_token', 'namespaces')
    op.drop_column('pool', 'namespace')
    op.drop_index('ix_dag_namespace', table_name='dag')
    op.drop_column('dag', 'namespace')
