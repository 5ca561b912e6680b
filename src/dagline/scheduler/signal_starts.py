"""The `start` actions of one signal reaction, written per task instance in a few statements.

A `start` rule's action on a task instance only writes `signal_action` rows: `pending` until a try
starts with it (`examine`), and, with `handling: latest`, each new signal supersedes the starts still
pending for that task instance. Acting on a claim of 200 signals one at a time cost three statements
each (has this signal acted already, supersede, insert): during a storm of one key, most of a
replica's time. `StartActions` gathers them per task instance, in signal order, and writes them in
at most three statements per task instance, with the very rows the one-at-a-time way leaves:

- the signals that acted on it already (a re-claim after a lost commit) are left out;
- the starts already stored and pending are superseded by the first `latest` signal, if any;
- each gathered start that a later `latest` signal of the batch supersedes is written `superseded`
  by that signal; the rest are written `pending`.

Any other action on the same task instance (`restart`, `stop`) reads and changes its pending starts,
so the caller writes what was gathered for it first (`flush`), and the order holds. Those actions
write their rows with the same two steps, one row at a time: `insert_actions`, `supersede_pending`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from collections.abc import Sequence

from sqlalchemy.engine import Connection

from dagline import metrics
from dagline.db.observe import at_commit
from dagline.domain.states import SignalAction, SignalActionStatus
from dagline.store.signal_actions import actions_taken, insert_action_rows, supersede_pending_actions

_ACTION_DEFAULTS = {"try_number": None, "done_at": None, "detail": None}
STARTING = (SignalAction.START, SignalAction.RESTART)  # the actions that start a try


def insert_actions(conn: Connection, rows: Sequence[dict], sent_at: Sequence[dt.datetime]) -> set[tuple[int, str]]:
    """Insert action rows of one task instance (`try_number`, `done_at`, `detail` may be left out:
    NULL), one statement; a (signal, rule, run, task) that has its row already is left as it is.
    Returns (signal seq, rule) of the rows written. Once the transaction commits, the time from each
    written row's signal (`sent_at`, in the order of `rows`) to its decision is observed
    (`metrics.SIGNAL_ACTION_LATENCY`, by action)."""
    if not rows:
        return set()
    written = insert_action_rows(conn, [{**_ACTION_DEFAULTS, **row} for row in rows])
    observed = [(row["action"], max((row["decided_at"] - sent).total_seconds(), 0.0))  # a clock may be behind
                for row, sent in zip(rows, sent_at, strict=True) if (row["signal_seq"], row["rule"]) in written]
    if observed:
        at_commit(conn, functools.partial(_observe, observed))
    return written


def supersede_pending(conn: Connection, run_pk: int, task_id: str, *, actions: Sequence[str], now: dt.datetime,
                      by: int) -> None:
    """The task instance's pending actions of these kinds are superseded by signal `by`."""
    supersede_pending_actions(conn, run_pk, task_id, actions=actions, now=now, detail=f"superseded by signal {by}")


def action_row(s, r, *, now: dt.datetime, **fields) -> dict:
    """The action row of signal `s` for rule `r` (a task rule on one running run), decided `now`."""
    return dict(signal_seq=s.seq, rule=r.rule, dag_id=r.dag_id, dag_run_id=r.run_pk, run_id=r.run_name,
                task_id=r.task_id, action=r.action, decided_at=now, **fields)


@dataclasses.dataclass
class _Start:
    signal_seq: int
    sent_at: dt.datetime
    rule: str
    latest: bool
    row: dict


class StartActions:
    """Start actions gathered for task instances, keyed by (run id, task id), written by `flush`."""

    def __init__(self, conn: Connection, now: dt.datetime):
        self.conn = conn
        self.now = now
        self._gathered: dict[tuple[int, str], list[_Start]] = {}

    def add(self, s, r, *, busy: bool) -> None:
        """Gather rule `r`'s start for signal `s` (the task instance's try is running: `busy`)."""
        row = action_row(s, r, now=self.now, status=SignalActionStatus.PENDING, try_number=None, done_at=None,
                         detail="waits for the task to be free" if busy else None)
        self._gathered.setdefault((r.run_pk, r.task_id), []).append(
            _Start(s.seq, s.sent_at, r.rule, r.handling == "latest", row))

    def flush(self, key: tuple[int, str] | None = None) -> int:
        """Write what was gathered for one task instance (`key`), or for all; how many actions were written."""
        keys = [key] if key is not None else list(self._gathered)
        return sum(self._write(k, self._gathered.pop(k)) for k in keys if k in self._gathered)

    def _write(self, key: tuple[int, str], starts: list[_Start]) -> int:
        run_pk, task_id = key
        latest = [(s.signal_seq, s.rule) for s in starts if s.latest]
        if latest:  # `latest` alone checks first: `each` relies on the unique row (a conflict writes nothing)
            acted = actions_taken(self.conn, run_pk, task_id, latest)
            starts = [s for s in starts if not (s.latest and (s.signal_seq, s.rule) in acted)]
        rows = [dict(s.row) for s in starts]
        first_latest = next((s.signal_seq for s in starts if s.latest), None)
        if first_latest is not None:
            supersede_pending(self.conn, run_pk, task_id, actions=(SignalAction.START,), now=self.now, by=first_latest)
        superseder = None  # walking back: the next `latest` signal after each start
        for start, row in zip(reversed(starts), reversed(rows), strict=True):
            if superseder is not None:
                row.update(status=SignalActionStatus.SUPERSEDED, done_at=self.now,
                           detail=f"superseded by signal {superseder}")
            if start.latest:
                superseder = start.signal_seq
        return len(insert_actions(self.conn, rows, [s.sent_at for s in starts]))


def _observe(observed: list[tuple[str, float]]) -> None:
    for action, latency in observed:
        metrics.SIGNAL_ACTION_LATENCY.labels(action=action).observe(latency)
