"""What launching queued tries reads: each try's run (its id, dates and conf), the folder of its DAG
version, the signal that started it and the signal that created its run, if any
(`dagline.scheduler.launches`). Reads only."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import and_, bindparam, select
from sqlalchemy.engine import Connection

from dagline.db.models import dag_run_t, dag_version_t, signal_action_t, signal_t, ti_t
from dagline.domain.states import SignalAction

# Built once with bind parameters: SQLAlchemy then neither rebuilds it nor computes its cache key at each
# launch (see `db.claims`).
_trigger = signal_action_t.alias("trigger_action")  # the action of a signal that created the run
_trigger_signal = signal_t.alias("trigger_signal")
_RUNS_AND_SIGNALS = (
    select(ti_t.c.id.label("ti_id"), dag_run_t.c.run_id, dag_run_t.c.logical_date, dag_run_t.c.data_interval_start,
           dag_run_t.c.data_interval_end, dag_run_t.c.conf, dag_version_t.c.source_dir, signal_t.c.seq,
           signal_t.c.key, signal_t.c.value, signal_t.c.source, _trigger_signal.c.seq.label("trigger_seq"),
           _trigger_signal.c.key.label("trigger_key"), _trigger_signal.c.value.label("trigger_value"),
           _trigger_signal.c.source.label("trigger_source"))
    .join(dag_run_t, dag_run_t.c.id == ti_t.c.dag_run_id)
    .outerjoin(dag_version_t, dag_version_t.c.id == dag_run_t.c.dag_version_id)
    .outerjoin(signal_t, signal_t.c.seq == ti_t.c.signal_seq)
    .outerjoin(_trigger, and_(_trigger.c.dag_run_id == dag_run_t.c.id, _trigger.c.task_id == "",
                              _trigger.c.action == SignalAction.TRIGGER))
    .outerjoin(_trigger_signal, _trigger_signal.c.seq == _trigger.c.signal_seq)
    .where(ti_t.c.id.in_(bindparam("ti_ids", expanding=True))))


def runs_and_signals_of_tries(conn: Connection, ti_ids: Sequence[int]) -> list:
    """Per task instance of `ti_ids`: ti_id, its run's run_id, logical_date, data interval and conf, its
    version's source_dir, the seq, key, value and source of the signal that started it (None when
    none did, or it was pruned), and the same of the signal that created its run as `trigger_*`
    (a DAG's `triggers:`). One read."""
    return conn.execute(_RUNS_AND_SIGNALS, {"ti_ids": list(ti_ids)}).all()
