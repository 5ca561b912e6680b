"""Many rows in one statement (`db.bulk.insert_rows`, `transitions.change_tries_each`): on PostgreSQL
they travel as one JSON document, so every value must come back exactly as it went in (instants to
the microsecond whatever their offset, text with quotes, backslashes, JSON and non-ASCII, NULLs)."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select

from dagline.db.bulk import insert_rows
from dagline.db.models import api_token_t, event_t

AWKWARD = ['plain', "it's \"quoted\"", "back\\slash", '{"looks": ["like", "json"]}', "naïve café ✓", "tab\tnew\nline", None]


def test_rows_come_back_exactly_as_they_went_in(db):
    base = dt.datetime(2026, 11, 24, 23, 59, 59, 999_999, tzinfo=dt.timezone.utc)
    amsterdam = dt.timezone(dt.timedelta(hours=1))
    rows = [{"at": base + dt.timedelta(microseconds=n) if n % 2 else (base + dt.timedelta(microseconds=n)).astimezone(amsterdam),
             "who": f"who-{n}", "entity": "task_instance", "dag_id": "d", "dag_run_id": n, "ti_id": 10_000_000_000 + n,
             "task_id": f"t{n}", "detail": AWKWARD[n % len(AWKWARD)]}
            | ({"try_number": n} if n % 3 else {})  # a key some rows lack is NULL for them
            for n in range(20)]
    with db.begin() as conn:
        insert_rows(conn, event_t, rows)
    with db.begin() as conn:
        stored = conn.execute(select(event_t).order_by(event_t.c.dag_run_id)).all()
    assert len(stored) == 20
    for row, back in zip(rows, stored, strict=True):
        assert back.at == row["at"] and back.at.tzinfo == dt.timezone.utc
        assert (back.who, back.ti_id, back.task_id, back.detail) == (row["who"], row["ti_id"], row["task_id"],
                                                                     row["detail"])
        assert back.try_number == row.get("try_number")
        assert back.from_state is None


def test_returning_gives_each_new_row_its_id(db):
    now = dt.datetime(2026, 11, 24, tzinfo=dt.timezone.utc)
    rows = [{"name": f"tok-{n}", "secret_hash": f"hash-{n}", "scope": "send", "created_at": now} for n in range(6)]
    with db.begin() as conn:
        made = dict(insert_rows(conn, api_token_t, rows, returning=("secret_hash", "id")))
    with db.begin() as conn:
        stored = dict(conn.execute(select(api_token_t.c.secret_hash, api_token_t.c.id)).all())
    assert made == stored and len(made) == 6
