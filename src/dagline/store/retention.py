"""Retention: `dagline db clean` and the replicas' periodic clean delete finished history in small batches.

What goes: finished runs (`success`, `failed`, `overridden`, test runs included) that ended before the
cutoff (`end_date`, else `created_at` for a run that ended without starting), with their task
instances, events, callback outbox rows, signal actions and try tokens; then handled signals sent
before the cutoff (as `signals prune`). What stays, whatever its age (ADR 0076):
- every run not finished, and each DAG's latest `keep_last` live runs (at least one: the run a new
  run's `dependsOnPast` looks at, and the DAG list's last run);
- a run that is the `previous` of a run not finished yet (its `dependsOnPast` still reads it);
- the runs of a running backfill, and a run with a callback still to deliver.

Each batch is one short transaction holding the DAG's row (as a trigger, a backfill or a clear does),
so the timeline cannot change under it and the scheduler's loop waits at most one batch. A kept run
whose `previous` is deleted follows the latest live run kept before it, or none: the oldest kept run
becomes the first on its timeline. With an archive folder, every row is appended to `<folder>/<table>.jsonl` before its
batch commits (a batch that fails after writing is written again by the next clean: at least once).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
from collections.abc import Callable, Iterator
from pathlib import Path

from sqlalchemy import delete, func, select, text, update
from sqlalchemy.engine import Connection

from dagline.db.claims import lock_dag
from dagline.db.engine import Database
from dagline.db.models import (
    LIVE_RUN_SQL,
    api_token_t,
    backfill_t,
    callback_outbox_t,
    dag_run_t,
    dag_t,
    event_t,
    signal_action_t,
    signal_t,
    ti_t,
    try_launch_t,
)
from dagline.db.transitions import record_events
from dagline.domain.states import BackfillState, OutboxState, RunState, SignalActionStatus
from dagline.errors import InvalidInput

BATCH_RUNS = 100  # runs per transaction: a few thousand rows with their task instances and events
CLEANABLE = (RunState.SUCCESS, RunState.FAILED, RunState.OVERRIDDEN)
_R = dag_run_t.c


@dataclasses.dataclass
class Cleaned:
    """What a clean removed (or, dry, would remove), by table; `runs_by_dag` per DAG."""

    runs: int = 0
    task_instances: int = 0
    events: int = 0
    callbacks: int = 0
    signal_actions: int = 0
    signals: int = 0
    runs_by_dag: dict[str, int] = dataclasses.field(default_factory=dict)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        return (f"{self.runs} run(s), {self.task_instances} task instance(s), {self.events} event(s), "
                f"{self.callbacks} callback(s), {self.signal_actions} signal action(s), {self.signals} signal(s)")


def clean_history(
    db: Database, *, before: dt.datetime, now: dt.datetime, dag_id: str | None = None, keep_last: int = 1,
    archive: Path | None = None, dry_run: bool = False, batch_runs: int = BATCH_RUNS, who: str = "db-clean",
    after_batch: Callable[[Cleaned], None] | None = None,
) -> Cleaned:
    """Delete finished history that ended before `before` (see the module's docstring), DAG by DAG, in
    batches of `batch_runs` runs, each in its own transaction; `after_batch` is called after each.
    `dry_run`: count what would go, write nothing."""
    if before.tzinfo is None:
        raise InvalidInput("an aware time is needed", field="--older-than")
    if keep_last < 1:
        raise InvalidInput("must be at least 1: each DAG keeps its latest run", field="--keep-last")
    if archive is not None and not dry_run:
        archive.mkdir(parents=True, exist_ok=True)
    done = Cleaned()
    with db.begin() as conn:
        dag_ids = [dag_id] if dag_id is not None else list(
            conn.execute(select(dag_t.c.dag_id).order_by(dag_t.c.dag_id)).scalars())
    for one in dag_ids:
        _clean_dag(db, one, before=before, now=now, keep_last=keep_last, archive=archive, dry_run=dry_run,
                   batch_runs=batch_runs, who=who, done=done, after_batch=after_batch)
    if dag_id is None:
        _clean_signals(db, before=before, archive=archive, dry_run=dry_run, batch=batch_runs * 10, done=done,
                       after_batch=after_batch)
    return done


CLEAN_LOCK = (0x436C, 1)  # the advisory lock of the replicas' periodic clean ("Cl")


@contextlib.contextmanager
def clean_turn(db: Database) -> Iterator[bool]:
    """Whether this process may clean now: on PostgreSQL, a session advisory lock on a connection of its
    own (held while the body runs, released if the process dies), so one replica cleans at a time; on
    SQLite one scheduler runs at a time (its file lock), so always."""
    if db.is_sqlite:
        yield True
        return
    with db.engine.connect() as conn:
        got = bool(conn.execute(select(func.pg_try_advisory_lock(*CLEAN_LOCK))).scalar())
        conn.commit()
        try:
            yield got
        finally:
            if got:
                conn.execute(select(func.pg_advisory_unlock(*CLEAN_LOCK)))
                conn.commit()


def _threshold(conn: Connection, dag_id: str, keep_last: int) -> dt.datetime | None:
    """The logical date of the DAG's `keep_last`-th newest live run (None: it has fewer): runs from it on stay."""
    return conn.execute(select(_R.logical_date).where(_R.dag_id == dag_id, text(LIVE_RUN_SQL))
                        .order_by(_R.logical_date.desc()).offset(keep_last - 1).limit(1)).scalar()


def _clean_dag(db: Database, dag_id: str, *, before, now, keep_last, archive, dry_run, batch_runs, who, done,
               after_batch) -> None:
    with db.begin() as conn:
        threshold = _threshold(conn, dag_id, keep_last)
        running_backfills = list(conn.execute(select(backfill_t.c.id).where(
            backfill_t.c.dag_id == dag_id, backfill_t.c.state == BackfillState.RUNNING)).scalars())
    if threshold is None:
        return
    cursor: tuple[dt.datetime, int] | None = None
    removed = 0
    while True:
        with db.begin() as conn:
            if not dry_run:
                lock_dag(conn, dag_id)
            page = conn.execute(_page(dag_id, threshold, before, running_backfills, cursor, batch_runs)).all()
            if not page:
                break
            cursor = (page[-1].logical_date, page[-1].id)
            ids = _deletable(conn, [r.id for r in page])
            if ids:
                batch = _clean_runs(conn, ids, archive=None if dry_run else archive, dry_run=dry_run)
                removed += batch.runs
                _add(done, batch)
                done.runs_by_dag[dag_id] = done.runs_by_dag.get(dag_id, 0) + batch.runs
        if after_batch is not None and ids:
            after_batch(done)
        if len(page) < batch_runs:
            break
    if removed and not dry_run:
        with db.begin() as conn:
            record_events(conn, [{"at": now, "who": who, "entity": "dag", "dag_id": dag_id,
                                  "to_state": "cleaned",
                                  "detail": f"history before {before.isoformat()} cleaned: {removed} run(s)"}])


def _page(dag_id, threshold, before, running_backfills, cursor, limit):
    """The next runs old enough and finished, by (logical_date, id), after `cursor`: read through the
    (dag_id, logical_date, id) index."""
    stmt = select(_R.id, _R.logical_date).where(
        _R.dag_id == dag_id, _R.logical_date < threshold, _R.state.in_(CLEANABLE),
        func.coalesce(_R.end_date, _R.created_at) < before)
    if running_backfills:
        stmt = stmt.where((_R.backfill_id.is_(None)) | (_R.backfill_id.not_in(running_backfills)))
    if cursor is not None:
        stmt = stmt.where((_R.logical_date > cursor[0]) | ((_R.logical_date == cursor[0]) & (_R.id > cursor[1])))
    return stmt.order_by(_R.logical_date, _R.id).limit(limit)


def _deletable(conn: Connection, run_pks: list[int]) -> list[int]:
    """`run_pks` less those still needed: the `previous` of a run not finished, or with a callback to deliver."""
    needed = set(conn.execute(select(_R.previous_run_id).where(
        _R.previous_run_id.in_(run_pks), _R.state.in_(tuple(RunState.ACTIVE)))).scalars())
    o = callback_outbox_t.c
    needed |= set(conn.execute(select(o.dag_run_id).where(
        o.dag_run_id.in_(run_pks), o.state == OutboxState.PENDING)).scalars())
    return [pk for pk in run_pks if pk not in needed]


def _clean_runs(conn: Connection, run_pks: list[int], *, archive: Path | None, dry_run: bool) -> Cleaned:
    """Delete runs `run_pks` and what hangs off them (or count it, `dry_run`)."""
    ti_ids = list(conn.execute(select(ti_t.c.id).where(ti_t.c.dag_run_id.in_(run_pks))).scalars())
    children = ((event_t, event_t.c.dag_run_id), (callback_outbox_t, callback_outbox_t.c.dag_run_id),
                (signal_action_t, signal_action_t.c.dag_run_id), (ti_t, ti_t.c.dag_run_id))
    if dry_run:
        counts = [conn.execute(select(func.count()).select_from(table).where(column.in_(run_pks))).scalar_one()
                  for table, column in children]
        return Cleaned(len(run_pks), counts[3], counts[0], counts[1], counts[2])
    if archive is not None:
        _archive(conn, archive, dag_run_t, _R.id.in_(run_pks))
        for table, column in children:
            _archive(conn, archive, table, column.in_(run_pks))
    for start in range(0, len(ti_ids), 500):  # the job each try launched with points at its task instance
        conn.execute(delete(try_launch_t).where(try_launch_t.c.ti_id.in_(ti_ids[start:start + 500])))
    counts = []
    for table, column in children:
        counts.append(conn.execute(delete(table).where(column.in_(run_pks))).rowcount)
    for start in range(0, len(ti_ids), 500):
        conn.execute(delete(api_token_t).where(api_token_t.c.ti_id.in_(ti_ids[start:start + 500])))
    # the kept runs that followed a deleted one follow the latest live run kept before them, if any:
    # the oldest kept run becomes the first on its timeline
    followers = conn.execute(select(_R.id, _R.dag_id, _R.logical_date).where(
        _R.previous_run_id.in_(run_pks), _R.id.not_in(run_pks))).all()
    conn.execute(update(dag_run_t).where(_R.previous_run_id.in_(run_pks)).values(previous_run_id=None))
    runs = conn.execute(delete(dag_run_t).where(_R.id.in_(run_pks))).rowcount
    for follower in followers:
        before = conn.execute(select(_R.id).where(_R.dag_id == follower.dag_id, text(LIVE_RUN_SQL),
                                                  _R.logical_date < follower.logical_date)
                              .order_by(_R.logical_date.desc()).limit(1)).scalar()
        if before is not None:
            conn.execute(update(dag_run_t).where(_R.id == follower.id).values(previous_run_id=before))
    return Cleaned(runs, counts[3], counts[0], counts[1], counts[2])


def _clean_signals(db: Database, *, before, archive, dry_run, batch, done, after_batch) -> None:
    """Handled signals sent before `before` without a pending action, with their actions, in batches."""
    s, a = signal_t.c, signal_action_t.c
    pending = select(a.signal_seq).where(a.status == SignalActionStatus.PENDING)
    after = 0
    while True:
        with db.begin() as conn:
            seqs = list(conn.execute(select(s.seq).where(
                s.seq > after, s.sent_at < before, s.handled_at.is_not(None), s.seq.not_in(pending))
                .order_by(s.seq).limit(batch)).scalars())
            if not seqs:
                return
            after = seqs[-1]
            if dry_run:
                actions = conn.execute(select(func.count()).select_from(signal_action_t)
                                       .where(a.signal_seq.in_(seqs))).scalar_one()
            else:
                if archive is not None:
                    _archive(conn, archive, signal_t, s.seq.in_(seqs))
                    _archive(conn, archive, signal_action_t, a.signal_seq.in_(seqs))
                actions = conn.execute(delete(signal_action_t).where(a.signal_seq.in_(seqs))).rowcount
                conn.execute(delete(signal_t).where(s.seq.in_(seqs)))
            done.signals += len(seqs)
            done.signal_actions += actions
        if after_batch is not None:
            after_batch(done)
        if len(seqs) < batch:
            return


def _add(total: Cleaned, batch: Cleaned) -> None:
    for field in ("runs", "task_instances", "events", "callbacks", "signal_actions", "signals"):
        setattr(total, field, getattr(total, field) + getattr(batch, field))


def _archive(conn: Connection, folder: Path, table, where) -> None:
    """Append the rows of `table` matching `where` to `<folder>/<table>.jsonl`, one JSON object a line."""
    rows = conn.execute(select(table).where(where).order_by(*table.primary_key.columns)).mappings().all()
    if not rows:
        return
    with open(folder / f"{table.name}.jsonl", "a", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(dict(row), default=_json_value, sort_keys=True) + "\n")


def _json_value(value):
    if isinstance(value, dt.datetime):
        return value.isoformat()
    return str(value)
