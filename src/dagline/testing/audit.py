"""Invariant checks over the tables and the append-only event log, for tests, benchmarks and auditors.

Each check returns the violations it found (an empty list when the invariant holds). The log is
replayed in event id order: ids are drawn when a transaction writes its events, after it read the
counts it decided on, so a replay never sees less than the deciding replica saw.

Checks that hold at every moment (`all_violations` runs them):
- `duplicate_runs`: two live runs (not overridden, not test runs) of one DAG at one logical date;
- `duplicate_launches`: a task instance queued more than once for the same try;
- `pool_violations`: replaying the log, a pool holding more slots than it had at that moment (resizes
  are replayed too, so shrinking a pool below what is in use is not a violation; admitting more is);
- `max_active_violations`: replaying the log, a task instance queued while its DAG already had
  `maxActiveTasks` task instances queued or running, or its task `maxActiveTisPerDag` of them across
  runs; a run started while its DAG had `maxActiveRuns` running runs, or its backfill its own
  `maxActiveRuns`. The limits are those of the DAG version the admitted run is on (a run keeps its
  version). Only admissions are judged (`-> queued` for task instances, `queued -> running` for
  runs): re-opening a finished run (`tasks clear`) is a person's decision, but the run counts while
  it runs;
- `unfinished_queued_tis`: a TI that was queued but is not finished although its run is;
- `broken_timeline`: a live run whose `previous` is not the live run just before it;
- `duplicate_signal_actions`: a (signal, rule, run, task) with more than one action row (the unique
  constraint forbids it: this checks the constraint is there);
- `signal_order_violations`: per key and target (run and task), the tries that signals started, in
  signal `seq` order, must have increasing try numbers (a later signal never started an earlier try);
- `signal_trigger_violations`: a run of type `signal` without exactly one trigger action naming it, or
  a trigger action whose run is missing, or one signal that created two runs of one DAG;
- `lost_tis`: work that disappeared without an outcome:
  (1) a try that was queued (an event `-> queued` for that ti and try) whose end is not in the log
      (no later event of the same try from queued or running to any other state: a final state,
      `up_for_retry`, or a reset such as a clear), unless the task instance is still on that try and
      queued or running (in flight; `stuck_tis` judges those once the system has drained);
  (2) events of a task instance whose row no longer exists;
  (3) a live run missing the task instance of a task its DAG version has (tasks whose own
      `startDate` is after the run's logical date are not expected).

Checks for a drained system (`drained_violations` runs them with the others): call them when no
replica runs and nothing is in flight, e.g. after a chaos run has drained and stopped its replicas.
- `stuck_tis`: task instances of live runs that nothing will ever move, at `now`:
  (1) not in a final state although their run is finished;
  (2) `queued` or `running` (no replica is left to run or settle them);
  (3) `scheduled` in a running run of an unpaused DAG whose pool exists: after draining, only stuck
      task instances can fill a limit (the reason says which one, if any);
  (4) `up_for_retry` whose retry time has come (`next_retry_at` empty or <= now), unpaused DAG;
  (5) `none` in a running run of an unpaused DAG with every upstream task instance final and, for
      `dependsOnPast` tasks, the task in the previous run final too (a failed one blocks by design);
- `stuck_runs`: runs of unpaused DAGs that are `running`, or `queued` with `run_after <= now` and not
  in a paused or finished backfill;
- `unhandled_signals`: signals no replica handled (every signal is handled once replicas ran);
- `stuck_signals`: a start or restart still `pending` for a task instance of a finished run (it should
  have been dropped), or for a finished task instance of a running run whose trigger rule allows it
  (it should have started a try);
- `missing_runs`: for each active, unpaused DAG with a periodic schedule and `catchup`, the intervals
  of its current version's schedule (from `startDate`, none starting after `endDate`) that have
  ended by `now` but have no live run at their logical date. (A backfill that ran ahead of the
  schedule leaves gaps on purpose; the check would report those: use it where backfills only cover
  dates the schedule has already reached, as the chaos harness does.)
"""

from __future__ import annotations

import collections
import datetime as dt

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from dagline.db.models import backfill_t, dag_run_t, dag_t, event_t, pool_t, signal_action_t, signal_t, ti_t
from dagline.domain.deps import depends_on_past_met
from dagline.domain.states import BackfillState, RunState, RunType, SignalAction, SignalActionStatus, TIState
from dagline.store.dags import DagCache
from dagline.store.timeline import on_timeline, timetable_for


def duplicate_runs(conn: Connection) -> list[tuple]:
    rows = conn.execute(
        select(dag_run_t.c.dag_id, dag_run_t.c.logical_date, func.count())
        .where(on_timeline())
        .group_by(dag_run_t.c.dag_id, dag_run_t.c.logical_date).having(func.count() > 1)
    ).all()
    return [tuple(r) for r in rows]


def duplicate_launches(conn: Connection) -> list[tuple]:
    rows = conn.execute(
        select(event_t.c.ti_id, event_t.c.try_number, func.count())
        .where(event_t.c.entity == "task_instance", event_t.c.to_state == TIState.QUEUED)
        .group_by(event_t.c.ti_id, event_t.c.try_number).having(func.count() > 1)
    ).all()
    return [tuple(r) for r in rows]


def _ti_events(conn: Connection):
    return conn.execute(
        select(event_t.c.id, event_t.c.ti_id, event_t.c.try_number, event_t.c.from_state, event_t.c.to_state)
        .where(event_t.c.entity == "task_instance").order_by(event_t.c.id)
    )


def _pool_slot_history(conn: Connection) -> tuple[dict[str, int], dict[str, list[tuple[int, int]]]]:
    """Each pool's slots before its first logged change, and its changes as (event id, slots)."""
    current = dict(conn.execute(select(pool_t.c.name, pool_t.c.slots)).all())
    changes: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
    initial = dict(current)
    for ev in conn.execute(
        select(event_t.c.id, event_t.c.detail, event_t.c.from_state, event_t.c.to_state)
        .where(event_t.c.entity == "pool").order_by(event_t.c.id)
    ):
        name = (ev.detail or "").removeprefix("pool ")
        if name not in changes:
            initial[name] = _slots(ev.from_state)
        changes[name].append((ev.id, _slots(ev.to_state)))
    return initial, changes


def _slots(text: str | None) -> int:
    """A pool event's slot count; a pool that did not exist (None), or was removed, has none."""
    return int(text) if text is not None and text.isdigit() else 0


def pool_violations(conn: Connection) -> list[dict]:
    slots, changes = _pool_slot_history(conn)
    pending = collections.deque(sorted((event_id, name, n) for name, items in changes.items()
                                       for event_id, n in items))
    ti_pool = {r.id: (r.pool, r.pool_slots) for r in conn.execute(select(ti_t.c.id, ti_t.c.pool, ti_t.c.pool_slots))}
    used: collections.Counter = collections.Counter()
    violations = []
    for ev in _ti_events(conn):
        while pending and pending[0][0] < ev.id:
            _, name, n = pending.popleft()
            slots[name] = n
        if ev.ti_id not in ti_pool:
            continue  # a vanished row: `lost_tis` reports it
        pool, n = ti_pool[ev.ti_id]
        was, now = ev.from_state in TIState.ACTIVE, ev.to_state in TIState.ACTIVE
        if now and not was:
            used[pool] += n
            if used[pool] > slots.get(pool, 0):
                violations.append({"event": ev.id, "pool": pool, "used": used[pool], "slots": slots.get(pool, 0)})
        elif was and not now:
            used[pool] -= n
    return violations


def max_active_violations(conn: Connection, dags: DagCache | None = None) -> list[dict]:
    dags = dags or DagCache()
    run_of = {r.id: r for r in conn.execute(
        select(dag_run_t.c.id, dag_run_t.c.dag_id, dag_run_t.c.dag_version_id, dag_run_t.c.backfill_id))}
    ti_of = {r.id: r for r in conn.execute(select(ti_t.c.id, ti_t.c.dag_run_id, ti_t.c.dag_id, ti_t.c.task_id))}
    backfill_limit = dict(conn.execute(select(backfill_t.c.id, backfill_t.c.max_active_runs)).all())
    events = conn.execute(
        select(event_t.c.id, event_t.c.entity, event_t.c.dag_run_id, event_t.c.ti_id, event_t.c.from_state,
               event_t.c.to_state)
        .where(event_t.c.entity.in_(("task_instance", "dag_run"))).order_by(event_t.c.id)
    )
    dag_tis: collections.Counter = collections.Counter()
    task_tis: collections.Counter = collections.Counter()
    dag_runs: collections.Counter = collections.Counter()
    backfill_runs: collections.Counter = collections.Counter()
    violations: list[dict] = []
    for ev in events:
        if ev.entity == "task_instance":
            ti = ti_of.get(ev.ti_id)
            if ti is None:
                continue  # a vanished row: `lost_tis` reports it
            was, now = ev.from_state in TIState.ACTIVE, ev.to_state in TIState.ACTIVE
            if was == now:
                continue
            step = 1 if now else -1
            dag_tis[ti.dag_id] += step
            task_tis[(ti.dag_id, ti.task_id)] += step
            if not now:
                continue
            dag = dags.get(conn, run_of[ti.dag_run_id].dag_version_id)
            if dag_tis[ti.dag_id] > dag.spec.max_active_tasks:
                violations.append({"event": ev.id, "limit": "maxActiveTasks", "dag_id": ti.dag_id,
                                   "active": dag_tis[ti.dag_id], "max": dag.spec.max_active_tasks})
            task = dag.tasks.get(ti.task_id)
            cap = task.max_active_tis_per_dag if task is not None else None
            if cap is not None and task_tis[(ti.dag_id, ti.task_id)] > cap:
                violations.append({"event": ev.id, "limit": "maxActiveTisPerDag", "dag_id": ti.dag_id,
                                   "task_id": ti.task_id, "active": task_tis[(ti.dag_id, ti.task_id)], "max": cap})
            continue
        run = run_of.get(ev.dag_run_id)
        if run is None:
            continue
        was, now = ev.from_state == RunState.RUNNING, ev.to_state == RunState.RUNNING
        if was == now:
            continue
        step = 1 if now else -1
        dag_runs[run.dag_id] += step
        if run.backfill_id is not None:
            backfill_runs[run.backfill_id] += step
        if ev.from_state != RunState.QUEUED or not now:
            continue  # only the scheduler's admissions are judged
        cap = dags.get(conn, run.dag_version_id).spec.max_active_runs
        if dag_runs[run.dag_id] > cap:
            violations.append({"event": ev.id, "limit": "maxActiveRuns", "dag_id": run.dag_id,
                               "running": dag_runs[run.dag_id], "max": cap})
        bf_cap = backfill_limit.get(run.backfill_id)
        if bf_cap is not None and backfill_runs[run.backfill_id] > bf_cap:
            violations.append({"event": ev.id, "limit": "backfill maxActiveRuns", "dag_id": run.dag_id,
                               "backfill_id": run.backfill_id, "running": backfill_runs[run.backfill_id],
                               "max": bf_cap})
    return violations


def unfinished_queued_tis(conn: Connection) -> list[int]:
    queued = select(event_t.c.ti_id).where(event_t.c.entity == "task_instance", event_t.c.to_state == TIState.QUEUED)
    rows = conn.execute(
        select(ti_t.c.id).join(dag_run_t, dag_run_t.c.id == ti_t.c.dag_run_id)
        .where(ti_t.c.id.in_(queued), dag_run_t.c.state.in_(RunState.FINISHED),
               ti_t.c.state.not_in(TIState.FINISHED))
    ).scalars()
    return list(rows)


def broken_timeline(conn: Connection) -> list[int]:
    by_dag = collections.defaultdict(list)
    for r in conn.execute(
        select(dag_run_t.c.id, dag_run_t.c.dag_id, dag_run_t.c.previous_run_id)
        .where(on_timeline()).order_by(dag_run_t.c.logical_date, dag_run_t.c.id)
    ):
        by_dag[r.dag_id].append(r)
    broken = []
    for runs in by_dag.values():
        previous = None
        for r in runs:
            if r.previous_run_id != previous:
                broken.append(r.id)
            previous = r.id
    return broken


def lost_tis(conn: Connection, dags: DagCache | None = None) -> list[dict]:
    rows = {r.id: r for r in conn.execute(select(ti_t.c.id, ti_t.c.dag_run_id, ti_t.c.task_id, ti_t.c.state,
                                                 ti_t.c.try_number))}
    lost: list[dict] = []
    vanished: set[int] = set()
    open_tries: dict[tuple[int, int], int] = {}  # (ti, try) -> id of its queued event, until it ends
    for ev in _ti_events(conn):
        if ev.ti_id not in rows:
            if ev.ti_id not in vanished:
                vanished.add(ev.ti_id)
                lost.append({"ti_id": ev.ti_id, "event": ev.id, "reason": "its task instance row no longer exists"})
            continue
        key = (ev.ti_id, ev.try_number)
        if ev.to_state == TIState.QUEUED:
            open_tries[key] = ev.id
        elif ev.from_state in TIState.ACTIVE and ev.to_state not in TIState.ACTIVE:
            open_tries.pop(key, None)
    for (ti_id, try_number), event_id in sorted(open_tries.items()):
        row = rows[ti_id]
        if row.try_number == try_number and row.state in TIState.ACTIVE:
            continue  # in flight
        lost.append({"ti_id": ti_id, "try_number": try_number, "event": event_id, "state": row.state,
                     "row_try_number": row.try_number, "reason": "queued, and the log shows no end of this try"})
    lost.extend(_runs_missing_tis(conn, rows, dags or DagCache()))
    return lost


def _runs_missing_tis(conn: Connection, rows: dict, dags: DagCache) -> list[dict]:
    present: dict[int, set[str]] = collections.defaultdict(set)
    for r in rows.values():
        present[r.dag_run_id].add(r.task_id)
    missing = []
    for run in conn.execute(
        select(dag_run_t.c.id, dag_run_t.c.dag_version_id, dag_run_t.c.logical_date)
        .where(dag_run_t.c.state != RunState.OVERRIDDEN).order_by(dag_run_t.c.id)
    ):
        dag = dags.get(conn, run.dag_version_id)
        expected = {t.task_id for t in dag.tasks.values() if t.start_date is None or t.start_date <= run.logical_date}
        for task_id in sorted(expected - present.get(run.id, set())):
            missing.append({"dag_run_id": run.id, "task_id": task_id, "reason": "the run has no task instance for it"})
    return missing


def stuck_tis(conn: Connection, now: dt.datetime, dags: DagCache | None = None) -> list[dict]:
    dags = dags or DagCache()
    paused = {r.dag_id for r in conn.execute(select(dag_t.c.dag_id).where(dag_t.c.is_paused.is_(True)))}
    pools = set(conn.execute(select(pool_t.c.name)).scalars())
    runs = {r.id: r for r in conn.execute(
        select(dag_run_t.c.id, dag_run_t.c.dag_id, dag_run_t.c.state, dag_run_t.c.dag_version_id,
               dag_run_t.c.previous_run_id).where(dag_run_t.c.state != RunState.OVERRIDDEN))}
    states: dict[tuple[int, str], str] = {}
    tis = []
    for ti in conn.execute(select(ti_t.c.id, ti_t.c.dag_run_id, ti_t.c.task_id, ti_t.c.state, ti_t.c.pool,
                                  ti_t.c.pool_slots, ti_t.c.try_number, ti_t.c.next_retry_at)):
        states[(ti.dag_run_id, ti.task_id)] = ti.state
        if ti.dag_run_id in runs and ti.state not in TIState.FINISHED:
            tis.append(ti)
    blocking = _active_counts(conn)
    pending = {(r.dag_run_id, r.task_id) for r in conn.execute(
        select(signal_action_t.c.dag_run_id, signal_action_t.c.task_id)
        .where(signal_action_t.c.status == SignalActionStatus.PENDING))}
    stuck = []
    for ti in sorted(tis, key=lambda t: t.id):
        run = runs[ti.dag_run_id]
        reason = None
        movable = run.state == RunState.RUNNING and run.dag_id not in paused
        if run.state in RunState.FINISHED:
            reason = f"{ti.state} in a {run.state} run"
        elif ti.state in TIState.ACTIVE:
            reason = f"{ti.state} with no replica left to run or settle it"
        elif not movable:
            continue
        elif ti.state == TIState.SCHEDULED and ti.pool in pools:
            held = _held_by(blocking, dags.get(conn, run.dag_version_id), run.dag_id, ti)
            reason = f"scheduled, held by task instances nothing will finish ({held})" if held else \
                "scheduled, and no limit holds it"
        elif ti.state == TIState.UP_FOR_RETRY and (ti.next_retry_at is None or ti.next_retry_at <= now):
            reason = "up_for_retry, and its retry time has come"
        elif ti.state == TIState.NONE:
            task = dags.get(conn, run.dag_version_id).tasks.get(ti.task_id)
            if task is not None and task.waits_for_signal and (ti.dag_run_id, ti.task_id) not in pending:
                continue  # it waits for its start signal, by design
            if task is not None and _ready(task, run, states):
                reason = "none, although its upstream tasks are done"
        if reason is not None:
            stuck.append({"ti_id": ti.id, "dag_run_id": ti.dag_run_id, "task_id": ti.task_id, "state": ti.state,
                          "try_number": ti.try_number, "reason": reason})
    return stuck


def _active_counts(conn: Connection) -> dict[str, collections.Counter]:
    """Slots in use per pool, active TIs per DAG and per (DAG, task): after draining, all stuck ones."""
    counts = {"pool": collections.Counter(), "dag": collections.Counter(), "task": collections.Counter()}
    slots = dict(conn.execute(select(pool_t.c.name, pool_t.c.slots)).all())
    counts["slots"] = collections.Counter(slots)
    for r in conn.execute(select(ti_t.c.dag_id, ti_t.c.task_id, ti_t.c.pool, ti_t.c.pool_slots)
                          .where(ti_t.c.state.in_(TIState.ACTIVE))):
        counts["pool"][r.pool] += r.pool_slots
        counts["dag"][r.dag_id] += 1
        counts["task"][(r.dag_id, r.task_id)] += 1
    return counts


def _held_by(counts: dict, dag, dag_id: str, ti) -> str | None:
    """Which limit the active task instances fill for a scheduled `ti`, if any."""
    if counts["pool"][ti.pool] + ti.pool_slots > counts["slots"][ti.pool]:
        return f"pool {ti.pool} full"
    if counts["dag"][dag_id] >= dag.spec.max_active_tasks:
        return "maxActiveTasks reached"
    task = dag.tasks.get(ti.task_id)
    cap = task.max_active_tis_per_dag if task is not None else None
    if cap is not None and counts["task"][(dag_id, ti.task_id)] >= cap:
        return "maxActiveTisPerDag reached"
    return None


def _ready(task, run, states: dict[tuple[int, str], str]) -> bool:
    upstream = [states[(run.id, u)] for u in task.upstream if (run.id, u) in states]
    if any(state not in TIState.FINISHED for state in upstream):
        return False
    if not task.depends_on_past:
        return True
    previous = states.get((run.previous_run_id, task.task_id))
    return previous is None or (previous in TIState.FINISHED and depends_on_past_met(previous))


def stuck_runs(conn: Connection, now: dt.datetime) -> list[dict]:
    held_backfills = select(backfill_t.c.id).where((backfill_t.c.is_paused.is_(True))
                                                   | (backfill_t.c.state != BackfillState.RUNNING))
    rows = conn.execute(
        select(dag_run_t.c.id, dag_run_t.c.dag_id, dag_run_t.c.run_id, dag_run_t.c.state)
        .join(dag_t, dag_t.c.dag_id == dag_run_t.c.dag_id)
        .where(dag_t.c.is_paused.is_(False),
               (dag_run_t.c.state == RunState.RUNNING)
               | ((dag_run_t.c.state == RunState.QUEUED) & (dag_run_t.c.run_after <= now)
                  & (dag_run_t.c.backfill_id.is_(None) | dag_run_t.c.backfill_id.not_in(held_backfills))))
        .order_by(dag_run_t.c.id)
    )
    return [{"dag_run_id": r.id, "dag_id": r.dag_id, "run_id": r.run_id, "state": r.state} for r in rows]


def missing_runs(conn: Connection, now: dt.datetime, dags: DagCache | None = None) -> list[dict]:
    dags = dags or DagCache()
    missing = []
    for row in conn.execute(select(dag_t.c.dag_id, dag_t.c.current_version_id).where(
            dag_t.c.is_active.is_(True), dag_t.c.is_paused.is_(False)).order_by(dag_t.c.dag_id)):
        dag = dags.get(conn, row.current_version_id)
        table = timetable_for(dag)
        if not table.periodic or not dag.spec.catchup or dag.start_date is None:
            continue
        live = set(conn.execute(select(dag_run_t.c.logical_date).where(
            dag_run_t.c.dag_id == row.dag_id, on_timeline())).scalars())
        for info in table.runs_between(dag.start_date, now):
            if info.run_after <= now and info.logical_date not in live:
                missing.append({"dag_id": row.dag_id, "logical_date": info.logical_date.isoformat()})
    return missing


def duplicate_signal_actions(conn: Connection) -> list[tuple]:
    a = signal_action_t.c
    return [tuple(r) for r in conn.execute(
        select(a.signal_seq, a.rule, a.dag_run_id, a.task_id, func.count())
        .group_by(a.signal_seq, a.rule, a.dag_run_id, a.task_id).having(func.count() > 1))]


_STARTING = (SignalAction.START, SignalAction.RESTART)  # the actions that start a try


def signal_order_violations(conn: Connection) -> list[dict]:
    a = signal_action_t.c
    rows = conn.execute(
        select(signal_t.c.key, a.dag_run_id, a.task_id, a.signal_seq, a.try_number)
        .join(signal_t, signal_t.c.seq == a.signal_seq)
        .where(a.status == SignalActionStatus.DONE, a.action.in_(_STARTING), a.try_number.is_not(None))
        .order_by(signal_t.c.key, a.dag_run_id, a.task_id, a.signal_seq))
    last: dict[tuple, tuple[int, int]] = {}
    bad = []
    for r in rows:
        target = (r.key, r.dag_run_id, r.task_id)
        if target in last and r.try_number <= last[target][1]:
            bad.append({"key": r.key, "dag_run_id": r.dag_run_id, "task_id": r.task_id, "seq": r.signal_seq,
                        "try_number": r.try_number, "after_seq": last[target][0], "after_try": last[target][1]})
        last[target] = (r.signal_seq, r.try_number)
    return bad


def signal_trigger_violations(conn: Connection) -> list[dict]:
    a = signal_action_t.c
    triggers = collections.defaultdict(list)
    per_signal_dag = collections.Counter()
    for r in conn.execute(select(a.signal_seq, a.dag_id, a.dag_run_id).where(a.action == SignalAction.TRIGGER)):
        triggers[r.dag_run_id].append(r.signal_seq)
        per_signal_dag[(r.signal_seq, r.dag_id)] += 1
    bad = [{"signal_seq": seq, "dag_id": dag_id, "reason": f"{n} runs created by one signal"}
           for (seq, dag_id), n in sorted(per_signal_dag.items()) if n > 1]
    runs = {r.id: r for r in conn.execute(select(dag_run_t.c.id, dag_run_t.c.run_id)
                                          .where(dag_run_t.c.run_type == RunType.SIGNAL))}
    for run_pk, run in sorted(runs.items()):
        if len(triggers.get(run_pk, [])) != 1:
            bad.append({"dag_run_id": run_pk, "run_id": run.run_id,
                        "reason": f"{len(triggers.get(run_pk, []))} trigger actions name this signal run"})
    for run_pk in sorted(set(triggers) - set(runs)):
        bad.append({"dag_run_id": run_pk, "reason": "a trigger action names a run that does not exist"})
    return bad


def unhandled_signals(conn: Connection) -> list[int]:
    return list(conn.execute(select(signal_t.c.seq).where(signal_t.c.handled_at.is_(None))
                             .order_by(signal_t.c.seq)).scalars())


def stuck_signals(conn: Connection, dags: DagCache | None = None) -> list[dict]:
    dags = dags or DagCache()
    a = signal_action_t.c
    rows = conn.execute(
        select(a.signal_seq, a.dag_run_id, a.task_id, a.action, dag_run_t.c.state.label("run_state"),
               dag_run_t.c.dag_version_id, dag_run_t.c.previous_run_id, ti_t.c.state.label("ti_state"))
        .join(dag_run_t, dag_run_t.c.id == a.dag_run_id)
        .join(ti_t, (ti_t.c.dag_run_id == a.dag_run_id) & (ti_t.c.task_id == a.task_id))
        .where(a.status == SignalActionStatus.PENDING, a.action.in_(_STARTING))).all()
    if not rows:
        return []
    states = {(r.dag_run_id, r.task_id): r.state for r in conn.execute(
        select(ti_t.c.dag_run_id, ti_t.c.task_id, ti_t.c.state)
        .where(ti_t.c.dag_run_id.in_({r.dag_run_id for r in rows})))}
    stuck = []
    for r in rows:
        reason = None
        if r.run_state in RunState.FINISHED:
            reason = f"pending {r.action} in a {r.run_state} run"
        elif r.run_state == RunState.RUNNING and r.ti_state in TIState.FINISHED:
            task = dags.get(conn, r.dag_version_id).tasks.get(r.task_id)
            run = collections.namedtuple("R", "id previous_run_id")(r.dag_run_id, r.previous_run_id)
            if task is not None and _ready(task, run, states) and all(
                    states.get((r.dag_run_id, u)) == TIState.SUCCESS for u in task.upstream):
                reason = f"pending {r.action} for a task instance that is {r.ti_state}"
        if reason:
            stuck.append({"signal_seq": r.signal_seq, "dag_run_id": r.dag_run_id, "task_id": r.task_id,
                          "reason": reason})
    return stuck


def all_violations(conn: Connection, dags: DagCache | None = None) -> dict[str, list]:
    """The checks that hold at every moment, by name (`dags`: parsed DAG versions, shared by the checks)."""
    dags = dags or DagCache()
    return {
        "duplicate_runs": duplicate_runs(conn),
        "duplicate_launches": duplicate_launches(conn),
        "pool_violations": pool_violations(conn),
        "max_active_violations": max_active_violations(conn, dags),
        "unfinished_queued_tis": unfinished_queued_tis(conn),
        "broken_timeline": broken_timeline(conn),
        "lost_tis": lost_tis(conn, dags),
        "duplicate_signal_actions": duplicate_signal_actions(conn),
        "signal_order_violations": signal_order_violations(conn),
        "signal_trigger_violations": signal_trigger_violations(conn),
    }


def drained_violations(conn: Connection, now: dt.datetime) -> dict[str, list]:
    """Every check, for a system that has drained (no replica running, nothing in flight)."""
    dags = DagCache()
    return {**all_violations(conn, dags), "stuck_tis": stuck_tis(conn, now, dags), "stuck_runs": stuck_runs(conn, now),
            "missing_runs": missing_runs(conn, now, dags), "unhandled_signals": unhandled_signals(conn),
            "stuck_signals": stuck_signals(conn, dags)}
