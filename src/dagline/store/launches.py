"""What launching queued tries reads: each try's run (its id, dates and conf), the folder of its DAG
version, and the signal that started it, if any (`dagline.scheduler.launches`). Reads only."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import bindparam, select
from sqlalchemy.engine import Connection

from dagline.db.models import dag_run_t, dag_version_t, signal_t, ti_t

# Built once with bind parameters: SQLAlchemy then neither rebuilds it nor computes its cache key at each
# launch (see `db.claims`).
_RUNS_AND_SIGNALS = (
    select(ti_t.c.id.label("ti_id"), dag_run_t.c.run_id, dag_run_t.c.logical_date, dag_run_t.c.data_interval_start,
           dag_run_t.c.data_interval_end, dag_run_t.c.conf, dag_version_t.c.source_dir, signal_t.c.seq,
           signal_t.c.key, signal_t.c.value, signal_t.c.source)
    .join(dag_run_t, dag_run_t.c.id == ti_t.c.dag_run_id)
    .outerjoin(dag_version_t, dag_version_t.c.id == dag_run_t.c.dag_version_id)
    .outerjoin(signal_t, signal_t.c.seq == ti_t.c.signal_seq)
    .where(ti_t.c.id.in_(bindparam("ti_ids", expanding=True))))


def runs_and_signals_of_tries(conn: Connection, ti_ids: Sequence[int]) -> list:
    """Per task instance of `ti_ids`: ti_id, its run's run_id, logical_date, data interval and conf, its
    version's source_dir, and the seq, key, value and source of the signal that started it (None when
    none did, or it was pruned). One read."""
    return conn.execute(_RUNS_AND_SIGNALS, {"ti_ids": list(ti_ids)}).all()
