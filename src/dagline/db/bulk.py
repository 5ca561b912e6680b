"""Many rows into one table in one statement whose text depends only on the column names.

An executemany of N rows is sent by SQLAlchemy as one `INSERT ... VALUES (...), (...)` with a bind
parameter per value: PostgreSQL parses and plans a statement of N x columns parameters every time
(the event log of a hop of 100 task instances: a thousand parameters), and every value is bound one
by one. On PostgreSQL `insert_rows` sends the rows as one JSON document instead,
`INSERT INTO t (a, b) SELECT a, b FROM json_populate_recordset(NULL::t, :rows)`: the same short text
for any number of rows, one parameter to adapt (psycopg2 adapts a list element by element, in
Python: slower than the statement itself), and the column types are the table's own. SQLite keeps
the executemany, which its driver runs in C.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Table, insert, text
from sqlalchemy.engine import Connection

SMALL = 4  # fewer rows than this: the plain insert is as cheap


def insert_rows(conn: Connection, table: Table, rows: Sequence[Mapping[str, Any]],
                returning: Sequence[str] = ()) -> list[Any]:
    """Insert `rows` (a missing key is NULL); returns the `returning` columns of the new rows (none
    asked: an empty list), in no particular order."""
    if not rows:
        return []
    names = sorted({name for row in rows for name in row})
    if conn.dialect.name != "postgresql" or len(rows) < SMALL:
        stmt = _plain_insert(table, tuple(returning))
        result = conn.execute(stmt, [{name: row.get(name) for name in names} for row in rows])
        return result.all() if returning else []
    # a key a row lacks is NULL to json_populate_recordset too: the rows go in as they are, and only
    # the values JSON cannot carry (datetimes) pass through `plain`, from the encoder
    document = json_document(rows)
    columns = ", ".join(names)
    back = f" RETURNING {', '.join(returning)}" if returning else ""
    result = conn.execute(text(f"INSERT INTO {table.name} ({columns}) SELECT {columns} FROM "
                               f"json_populate_recordset(NULL::{table.name}, CAST(:rows AS json)){back}"),
                          {"rows": document})
    return result.all() if returning else []


def json_document(rows: Sequence[Mapping[str, Any]]) -> str:
    """Rows as one JSON document for `json_populate_recordset` / `json_to_recordset` (datetimes as `plain`)."""
    return json.dumps(rows, separators=(",", ":"), default=_json_value)


@functools.lru_cache(maxsize=64)
def _plain_insert(table: Table, returning: tuple[str, ...]):
    """`INSERT INTO table` (its columns are those of the parameters) returning `returning`, built once."""
    stmt = insert(table)
    return stmt.returning(*(table.c[name] for name in returning)) if returning else stmt


def _json_value(value: Any) -> Any:
    """`json.dumps`'s hook for what it cannot encode itself: a datetime as `plain` gives it, else an error."""
    if isinstance(value, dt.datetime):
        return plain(value)
    raise TypeError(f"{type(value).__name__} value {value!r} cannot be stored as JSON")


def plain(value: Any) -> Any:
    """A value as JSON carries it: aware datetimes as ISO-8601 text, which PostgreSQL reads back exactly."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r} given to the database; dagline stores aware UTC times")
        return value.isoformat()
    return value
