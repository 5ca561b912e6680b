"""Many rows into one table in one statement whose text depends only on the column names.

An executemany of N rows is sent by SQLAlchemy as one `INSERT ... VALUES (...), (...)` with a bind
parameter per value: PostgreSQL parses and plans a statement of N x columns parameters every time
(the event log of a hop of 100 task instances: a thousand parameters), and every value is bound one
by one. On PostgreSQL `insert_rows` sends one array per column instead,
`INSERT INTO t (a, b) SELECT * FROM unnest(CAST(:a AS type[]), CAST(:b AS type[]))`: the same short
text for any number of rows. SQLite keeps the executemany, which its driver runs in C.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Table, insert, text
from sqlalchemy.engine import Connection

SMALL = 4  # fewer rows than this: the plain insert is as cheap


def insert_rows(conn: Connection, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert `rows` (a missing key is NULL); returns nothing (no RETURNING)."""
    if not rows:
        return
    names = sorted({name for row in rows for name in row})
    if conn.dialect.name != "postgresql" or len(rows) < SMALL:
        conn.execute(insert(table), [{name: row.get(name) for name in names} for row in rows])
        return
    dialect = conn.dialect
    arrays, params = [], {}
    for n, name in enumerate(names):
        column = table.c[name]
        bind = column.type.process_bind_param if hasattr(column.type, "process_bind_param") else None
        values = [row.get(name) for row in rows]
        params[f"c{n}"] = [bind(v, dialect) for v in values] if bind is not None else values
        arrays.append(f"CAST(:c{n} AS {column.type.compile(dialect=dialect)}[])")
    conn.execute(text(f"INSERT INTO {table.name} ({', '.join(names)}) "
                      f"SELECT * FROM unnest({', '.join(arrays)})"), params)
