"""namespaced names: every DAG, signal key and namespace pool is keyed within its namespace (ADR 92).

- `dag_id` columns widen to 127 characters and signal keys to 264: a key is `name` in `default`, else
  `namespace/name` (`dagline.domain.names`);
- `dag.namespace` becomes NOT NULL (DAGs of no namespace, applied from files, go to `default`) and is
  checked against the key;
- each DAG of another namespace is re-keyed `namespace/name` in every table that names it (its row is
  copied under the new key, its versions, runs, task instances, backfills, events, callbacks, listeners
  and signal actions moved, the old row deleted): no row changes namespace, none is lost;
- `signal.namespace` (the sender's) replaces `signal.namespaces` (whom it reached): a signal sent within
  one namespace is that namespace's; one sent by an unlimited sender, or within several, `default`'s
  (the first of several, as before they reached all of them); keys are re-keyed as DAGs are, and so
  are the listeners of other namespaces' DAGs;
- a namespace's pool is re-keyed `namespace/name`, and its namespace's task instances with it;
- a backfill's request id is stored `namespace/<request id>` (widened to 320): unique per namespace.

On SQLite the column types, NOT NULL and the new check are written into the stored table definitions
(`PRAGMA writable_schema`, as 0006 did), after the data complies: no table is rebuilt under the
tables that refer to it. The downgrade undoes it all where no DAG name is in two namespaces (else it
refuses, changing nothing: restore the backup taken before the upgrade).

Revision ID: 0013_namespaced_names
Revises: 0012_history_indexes
Create Date: 2026-11-28
"""
import sqlalchemy as sa
from alembic import op

revision = '0013_namespaced_names'
down_revision = '0012_history_indexes'
branch_labels = None
depends_on = None

DEFAULT = 'default'
DAG_KEY_TABLES = ('dag_version', 'backfill', 'dag_run', 'task_instance', 'event', 'callback_outbox',
                  'signal_listener', 'signal_action')
DAG_KEY_CHECK = ("(namespace = 'default' AND dag_id NOT LIKE '%/%') OR (namespace <> 'default' AND "
                 "dag_id LIKE namespace || '/%' AND substr(dag_id, length(namespace) + 2) NOT LIKE '%/%')")


def _qualify(namespace: str, name: str) -> str:
    return name if namespace == DEFAULT else f'{namespace}/{name}'


def _sqlite_definition(bind, table: str, replacements: list[tuple[str, str]]) -> None:
    """Rewrite a table's stored definition on SQLite, each `old` text present exactly once."""
    sql = bind.exec_driver_sql("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).scalar()
    for old, new in replacements:
        if sql.count(old) != 1:
            raise RuntimeError(f'{table}: the stored definition has {sql.count(old)} times {old!r}, not once')
        sql = sql.replace(old, new)
    bind.exec_driver_sql("UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND name = ?", (sql, table))


def _widen_and_tighten_sqlite(bind) -> None:
    version = bind.exec_driver_sql('PRAGMA schema_version').scalar()
    bind.exec_driver_sql('PRAGMA writable_schema=ON')
    for table in DAG_KEY_TABLES:
        _sqlite_definition(bind, table, [('dag_id VARCHAR(63)', 'dag_id VARCHAR(127)')]
                           + ([('"key" VARCHAR(200)', '"key" VARCHAR(264)')] if table == 'signal_listener' else []))
    _sqlite_definition(bind, 'dag', [
        ('dag_id VARCHAR(63)', 'dag_id VARCHAR(127)'),
        ('namespace VARCHAR(63), ', "namespace VARCHAR(63) DEFAULT 'default' NOT NULL, "),
        ('CONSTRAINT pk_dag PRIMARY KEY (dag_id)',
         f'CONSTRAINT pk_dag PRIMARY KEY (dag_id), CONSTRAINT ck_dag_key_of_namespace CHECK ({DAG_KEY_CHECK})'),
    ])
    _sqlite_definition(bind, 'signal', [('"key" VARCHAR(200)', '"key" VARCHAR(264)')])
    _sqlite_definition(bind, 'backfill', [('request_id VARCHAR(256)', 'request_id VARCHAR(320)')])
    bind.exec_driver_sql(f'PRAGMA schema_version={version + 1}')
    bind.exec_driver_sql('PRAGMA writable_schema=OFF')


def _move_dags(bind, moves: list[tuple[str, str]]) -> None:
    """Each DAG `old` under the key `new`: its row copied under the new key, every row naming it moved,
    the old row deleted (the foreign keys to `dag` hold throughout, on both databases)."""
    dag = sa.table('dag', sa.column('dag_id'))
    columns = [c['name'] for c in sa.inspect(bind).get_columns('dag')]
    listed = ', '.join(c for c in columns if c != 'dag_id')
    for old, new in moves:
        bind.execute(sa.text(f'INSERT INTO dag (dag_id, {listed}) SELECT :new, {listed} FROM dag WHERE dag_id = :old'),
                     {'new': new, 'old': old})
        for table in DAG_KEY_TABLES:
            t = sa.table(table, sa.column('dag_id'))
            bind.execute(sa.update(t).where(t.c.dag_id == old).values(dag_id=new))
        bind.execute(sa.delete(dag).where(dag.c.dag_id == old))


def _rekey_dags(bind) -> None:
    """Each DAG of a namespace other than `default` under `namespace/name`, everywhere."""
    dag = sa.table('dag', sa.column('dag_id'), sa.column('namespace'))
    moved = bind.execute(sa.select(dag.c.dag_id, dag.c.namespace)
                         .where(dag.c.namespace.is_not(None), dag.c.namespace != DEFAULT)).all()
    _move_dags(bind, [(old, _qualify(namespace, old)) for old, namespace in moved])
    bind.execute(sa.update(dag).where(dag.c.namespace.is_(None)).values(namespace=DEFAULT))


def _rekey_signals(bind) -> None:
    signal = sa.table('signal', sa.column('seq'), sa.column('key', sa.String), sa.column('namespaces'),
                      sa.column('namespace'))
    for reach in bind.execute(sa.select(signal.c.namespaces).where(signal.c.namespaces.is_not(None))
                              .distinct()).scalars().all():
        namespace = sorted(reach.split())[0]
        if namespace != DEFAULT:
            bind.execute(sa.update(signal).where(signal.c.namespaces == reach)
                         .values(namespace=namespace, key=sa.literal(namespace + '/', sa.String) + signal.c.key))
    listener = sa.table('signal_listener', sa.column('dag_id'), sa.column('key', sa.String))
    dag = sa.table('dag', sa.column('dag_id'), sa.column('namespace'))
    for dag_id, namespace in bind.execute(sa.select(dag.c.dag_id, dag.c.namespace).where(dag.c.namespace != DEFAULT)):
        bind.execute(sa.update(listener).where(listener.c.dag_id == dag_id)
                     .values(key=sa.literal(namespace + '/', sa.String) + listener.c.key))


def _rekey_pools(bind) -> None:
    pool = sa.table('pool', sa.column('name'), sa.column('namespace'))
    ti = sa.table('task_instance', sa.column('pool'), sa.column('dag_id'))
    dag = sa.table('dag', sa.column('dag_id'), sa.column('namespace'))
    for name, namespace in bind.execute(sa.select(pool.c.name, pool.c.namespace)
                                        .where(pool.c.namespace.is_not(None))).all():
        new = f'{namespace}/{name}'
        bind.execute(sa.update(pool).where(pool.c.name == name).values(name=new))
        owned = sa.select(dag.c.dag_id).where(dag.c.namespace == namespace)
        bind.execute(sa.update(ti).where(ti.c.pool == name, ti.c.dag_id.in_(owned)).values(pool=new))


def _scope_request_ids(bind, *, add: bool) -> None:
    """Backfill request ids with (`add`) or without their DAG's namespace in front."""
    backfill = sa.table('backfill', sa.column('request_id', sa.String), sa.column('dag_id'))
    dag = sa.table('dag', sa.column('dag_id'), sa.column('namespace'))
    for namespace in bind.execute(sa.select(dag.c.namespace).distinct()).scalars().all():
        owned = backfill.c.dag_id.in_(sa.select(dag.c.dag_id).where(dag.c.namespace == namespace))
        prefix = f'{namespace or DEFAULT}/'
        if add:
            value = sa.literal(prefix, sa.String) + backfill.c.request_id
        else:
            value = sa.func.substr(backfill.c.request_id, len(prefix) + 1)
        bind.execute(sa.update(backfill).where(owned, backfill.c.request_id.is_not(None)).values(request_id=value))


def upgrade() -> None:
    bind = op.get_bind()
    sqlite = bind.dialect.name == 'sqlite'
    if not sqlite:
        op.alter_column('backfill', 'request_id', type_=sa.String(320), existing_type=sa.String(256))
        for table in ('dag', *DAG_KEY_TABLES):
            op.alter_column(table, 'dag_id', type_=sa.String(127), existing_type=sa.String(63),
                            existing_nullable=table == 'event')
        for table in ('signal', 'signal_listener'):
            op.alter_column(table, 'key', type_=sa.String(264), existing_type=sa.String(200), existing_nullable=False)
    op.add_column('signal', sa.Column('namespace', sa.String(63), nullable=False, server_default=DEFAULT))
    _rekey_dags(bind)
    _rekey_signals(bind)
    _rekey_pools(bind)
    _scope_request_ids(bind, add=True)
    if sqlite:
        _widen_and_tighten_sqlite(bind)
        bind.exec_driver_sql('ALTER TABLE signal DROP COLUMN namespaces')
    else:
        op.alter_column('dag', 'namespace', existing_type=sa.String(63), nullable=False, server_default=DEFAULT)
        op.create_check_constraint(op.f('ck_dag_key_of_namespace'), 'dag', DAG_KEY_CHECK)
        op.drop_column('signal', 'namespaces')
    op.create_index('ix_signal_namespace_seq', 'signal', ['namespace', 'seq'])


def _unkey_dags(bind) -> None:
    dag = sa.table('dag', sa.column('dag_id'), sa.column('namespace'))
    moved = bind.execute(sa.select(dag.c.dag_id, dag.c.namespace).where(dag.c.namespace != DEFAULT)).all()
    plain = set(bind.execute(sa.select(dag.c.dag_id).where(dag.c.namespace == DEFAULT)).scalars())
    names = [key.split('/', 1)[1] for key, _ in moved]
    clashes = sorted({n for n in names if n in plain or names.count(n) > 1})
    if clashes:
        raise RuntimeError(f'cannot go back before 0013: DAG name(s) {", ".join(clashes)} exist in several '
                           'namespaces, which the older schema cannot hold; restore a backup instead')
    _move_dags(bind, [(key, key.split('/', 1)[1]) for key, _ in moved])
    # a DAG of a file belonged to no namespace before 0013
    bind.execute(sa.text("UPDATE dag SET namespace = NULL WHERE namespace = 'default' AND "
                         "(source_path IS NULL OR source_path NOT LIKE 'k8s://%')"))


def downgrade() -> None:
    """Back to names without namespaces, where no name is in two namespaces (else refused, nothing changed)."""
    bind = op.get_bind()
    sqlite = bind.dialect.name == 'sqlite'
    op.drop_index('ix_signal_namespace_seq', table_name='signal')
    if sqlite:
        version = bind.exec_driver_sql('PRAGMA schema_version').scalar()
        bind.exec_driver_sql('PRAGMA writable_schema=ON')
        _sqlite_definition(bind, 'dag', [
            ("namespace VARCHAR(63) DEFAULT 'default' NOT NULL, ", 'namespace VARCHAR(63), '),
            (f', CONSTRAINT ck_dag_key_of_namespace CHECK ({DAG_KEY_CHECK})', '')])
        bind.exec_driver_sql(f'PRAGMA schema_version={version + 1}')
        bind.exec_driver_sql('PRAGMA writable_schema=OFF')
    else:
        op.drop_constraint(op.f('ck_dag_key_of_namespace'), 'dag', type_='check')
        op.alter_column('dag', 'namespace', existing_type=sa.String(63), nullable=True, server_default=None)
    _scope_request_ids(bind, add=False)
    _unkey_dags(bind)
    op.add_column('signal', sa.Column('namespaces', sa.Text(), nullable=True))
    signal = sa.table('signal', sa.column('key', sa.String), sa.column('namespace'), sa.column('namespaces'))
    listener = sa.table('signal_listener', sa.column('key', sa.String))
    for table in (signal, listener):  # keys lose their namespace (`namespace/key` -> `key`)
        for key in bind.execute(sa.select(table.c.key).where(table.c.key.like('%/%')).distinct()).scalars().all():
            bind.execute(sa.update(table).where(table.c.key == key).values(key=key.split('/', 1)[1]))
    bind.execute(sa.update(signal).where(signal.c.namespace != DEFAULT).values(namespaces=signal.c.namespace))
    op.drop_column('signal', 'namespace')
    pool = sa.table('pool', sa.column('name'), sa.column('namespace'))
    ti = sa.table('task_instance', sa.column('pool'))
    for key in bind.execute(sa.select(pool.c.name).where(pool.c.namespace.is_not(None))).scalars().all():
        bind.execute(sa.update(pool).where(pool.c.name == key).values(name=key.split('/', 1)[1]))
        bind.execute(sa.update(ti).where(ti.c.pool == key).values(pool=key.split('/', 1)[1]))
    if sqlite:
        version = bind.exec_driver_sql('PRAGMA schema_version').scalar()
        bind.exec_driver_sql('PRAGMA writable_schema=ON')
        for table in ('dag', *DAG_KEY_TABLES):
            _sqlite_definition(bind, table, [('dag_id VARCHAR(127)', 'dag_id VARCHAR(63)')]
                               + ([('"key" VARCHAR(264)', '"key" VARCHAR(200)')]
                                  if table in ('signal_listener',) else []))
        _sqlite_definition(bind, 'signal', [('"key" VARCHAR(264)', '"key" VARCHAR(200)')])
        _sqlite_definition(bind, 'backfill', [('request_id VARCHAR(320)', 'request_id VARCHAR(256)')])
        bind.exec_driver_sql(f'PRAGMA schema_version={version + 1}')
        bind.exec_driver_sql('PRAGMA writable_schema=OFF')
    else:
        for table in ('dag', *DAG_KEY_TABLES):
            op.alter_column(table, 'dag_id', type_=sa.String(63), existing_type=sa.String(127),
                            existing_nullable=table == 'event')
        for table in ('signal', 'signal_listener'):
            op.alter_column(table, 'key', type_=sa.String(200), existing_type=sa.String(264), existing_nullable=False)
        op.alter_column('backfill', 'request_id', type_=sa.String(256), existing_type=sa.String(320))
