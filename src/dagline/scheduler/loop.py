"""One scheduler replica: the loop that runs the phases in order, each in its own short transaction.

    heartbeat when due -> react to signals -> create runs -> start queued runs -> examine running runs
    -> critical section -> launch -> executor reports (+ mini-scheduler) -> stop the tries asked to stop
    -> follow-up (queue, launch, store reports again while reports made tasks runnable) -> callbacks
    (settle and start deliveries from the outbox, never waiting on the network: `deliveries`) -> missed
    deadlines (every `deadline_check_interval_s`: `deadlines`) -> housekeeping on intervals (timeouts;
    declare silent peers dead; adopt orphaned tries; reconcile this replica's own tries)

A replica loads the current version of every active DAG at start (`DagCache.warm`), before it registers
(so a replica shown running is ready for work), and the first runs do not pay for reading them; then
it adopts orphaned tries, before it launches anything. A replica that stays (not `until_idle`) then
freezes what start-up built (`gc.freeze`): the collector's full passes skip it from then on.

Any number of replicas may run this loop against one PostgreSQL (row locks, see `db.claims`), one
against SQLite (`guard`). Between loops an idle replica waits (`wakeup`): on PostgreSQL until any
writer commits a state change, else for `poll_interval_s`. A transient database error ends the
iteration (its transaction rolls back) and the loop carries on after a backoff (`resilience`).
New work gathers on the replica at work for longest: the others leave it new runs, and idle ones
their polling passes, for a moment (`_leaving_runs_to_peers`), so one replica's hops carry many
chains at once rather than each replica's a few.
SIGTERM (`request_stop`) is a graceful stop: the iteration finishes, nothing new is queued, the
replica records itself `stopped`, and its running jobs are left running for a peer (or, on SQLite,
the next scheduler) to adopt. A replica its peers declared dead stops at once (`ReplicaFenced`).

A replica made for one test run (`test_run_id`, `dagline dags test`) works on that run alone, paused
DAG or not: it takes no SQLite scheduler lock, registers no replica, adopts nothing and judges no
peer, so it can run beside a scheduler on the same database; scheduler replicas in turn leave test
runs alone (see `db.claims`). It stops the jobs it started when it stops.

`run(until_idle=True)` returns once a loop did nothing and the executor has nothing in flight: every
run is finished or waiting for time to pass (a retry delay, a future logical date) or for a limit.
The clock is injected: with a frozen clock the loop's decisions are fully predictable (replica
liveness alone uses the database's clock).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import gc
import logging
import os
import time
from collections.abc import Callable, Mapping

from dagline import metrics
from dagline.clock import Clock, SystemClock
from dagline.db.claims import PoolsBusy, lock_runs_by_id
from dagline.db.engine import Database
from dagline.db.faults import first_line, is_transient
from dagline.db.notify import announce, announce_as_scoped
from dagline.db.observe import at_commit
from dagline.db.replicas import database_now
from dagline.executors.base import Executor, TaskLaunch
from dagline.scheduler import housekeeping
from dagline.scheduler.channels import Callback, SecretReader, log_channel, webhook_channel
from dagline.scheduler.create_runs import create_scheduled_runs
from dagline.scheduler.critical_section import queue_task_instances
from dagline.scheduler.deadlines import record_missed_deadlines
from dagline.scheduler.deliveries import CallbackSettings, Deliveries
from dagline.scheduler.examine import examine_running_runs, examine_runs
from dagline.scheduler.executor_events import apply_reports, fail_unlaunchable
from dagline.scheduler.launches import DEFAULT_API_URL, gather_launches, render_launches
from dagline.scheduler.renderer import Renderer
from dagline.scheduler.replica.adoption import Adopter, Settled, declare_others_dead, declare_stale_replicas_dead
from dagline.scheduler.replica.guard import SchedulerLock
from dagline.scheduler.replica.liveness import Liveness, ReplicaFenced
from dagline.scheduler.replica.resilience import Backoff, Transactions
from dagline.scheduler.replica.wakeup import Wakeup
from dagline.scheduler.settings import SchedulerSettings
from dagline.scheduler.signal_reactions import react_to_signals
from dagline.scheduler.start_runs import newest_run, start_queued_runs
from dagline.scheduler.stops import tries_to_stop
from dagline.scheduler.tries import InFlight
from dagline.store.dags import DagCache
from dagline.store.read_models import pending_retries
from dagline.store.tokens import delete_ended_try_tokens

log = logging.getLogger(__name__)

_PEER_IN_CRITICAL_SECTION_S = 0.002  # the follow-up's pause before it looks again when a peer held the pools


@dataclasses.dataclass
class LoopStats:
    signals_handled: int = 0
    runs_created: int = 0
    runs_started: int = 0
    tis_decided: int = 0
    runs_finished: int = 0
    tis_queued: int = 0
    reports: int = 0
    tis_adopted: int = 0
    callbacks: int = 0  # outbox rows claimed or settled
    deadlines_missed: int = 0
    tries_stopped: int = 0

    @property
    def work(self) -> int:
        return sum(dataclasses.astuple(self))

    def summary(self) -> str:
        parts = [f"{value} {field.name.replace('_', ' ')}" for field, value in
                 zip(dataclasses.fields(self), dataclasses.astuple(self), strict=True) if value]
        return ", ".join(parts)


class Scheduler:
    """A replica. `backfill_id` restricts it to one backfill's runs (`dagline backfill run`), in which
    case it creates no scheduled runs: a scheduler service does that. `test_run_id` restricts it to one
    test run (`dagline dags test`, see the module docstring)."""

    def __init__(
        self, db: Database, executor: Executor, *, clock: Clock | None = None,
        settings: SchedulerSettings | None = None, backfill_id: int | None = None,
        callback_settings: CallbackSettings | None = None,
        callback_channels: Mapping[str, Callable[[Callback], None]] | None = None,
        secret_reader: SecretReader | None = None,
        test_run_id: int | None = None, api_url: str | None = None,
    ):
        self.db = db
        self.executor = executor
        self.clock = clock or SystemClock()
        self.settings = s = settings or SchedulerSettings()
        self.backfill_id = backfill_id
        self.test_run_id = test_run_id
        self.api_url = api_url or DEFAULT_API_URL  # given to every try, with a token of its own
        self.dags = DagCache()
        self.replica_id: int | None = None
        self.who = "scheduler" if test_run_id is None else f"dags-test:{os.getpid()}"
        self.tx = Transactions(db)
        self.liveness = Liveness(self.tx, executor=executor.name, heartbeat_interval_s=s.heartbeat_interval_s,
                                 timeout_s=s.replica_timeout_s)
        self.wakeup = Wakeup(db, at_work_gap_s=s.peer_at_work_s)
        self.backoff = Backoff(max_s=s.backoff_max_s)
        self.in_flight = InFlight()
        self.renderer = Renderer(time_budget_s=s.template_time_budget_s, should_stop=lambda: self._stop_requested)
        self.adopter: Adopter | None = None
        self.callback_settings = callback_settings or CallbackSettings()
        secrets = secret_reader or SecretReader()
        self.callback_channels = {"webhook": webhook_channel(secrets, timeout_s=self.callback_settings.timeout_s),
                                  "log": log_channel, **(callback_channels or {})}
        self.deliveries: Deliveries | None = None
        self._last_deadline_check = float("-inf")
        self.failed_loops = 0  # iterations ended by a transient database error
        self._lock = SchedulerLock(db)
        self._pending_reports: list = []  # read from the executor, not yet stored
        self._skipped_runs: set[int] = set()  # runs the mini-scheduler could not lock (a peer held them)
        self._work_waiting = False  # SQLite: the last reports stored saw runs newer than the last start step
        self._newest_seen = 0  # SQLite: the newest run id when the last start step looked
        self._stop_requested = False
        self._created_runs = False  # runs created (schedule, signals) since the last start step: started by it
        self._own_scheduled: set[int] = set()  # TIs this replica made runnable since its last critical section
        self._peer_took_runs_at = float("-inf")  # time.monotonic() when a look found the announced runs taken
        self._tis_left_at: float | None = None  # time.monotonic() when a critical section left a peer fresh TIs
        self._last_housekeeping = float("-inf")
        self._step = "start"
        self._launch_failures = metrics.EXECUTOR_LAUNCH_FAILURES.labels(executor=executor.name)
        self._launched = metrics.EXECUTOR_LAUNCHES.labels(executor=executor.name)
        self._in_flight_gauge = metrics.EXECUTOR_IN_FLIGHT.labels(executor=executor.name)
        self._open_slots_gauge = metrics.EXECUTOR_OPEN_SLOTS.labels(executor=executor.name)
        self.waiting_retry = None  # with `until_idle`: the soonest retry it waits for (dag_id, run_id, task_id...)

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        if self.test_run_id is not None:
            self.wakeup.start()
            self.wakeup.ignore(self.who)
            self.executor.start()
            return
        self._lock.acquire()
        self.wakeup.start()  # listen before the first look at the database
        self._load_dags_at_start()  # before registering: a replica that shows as running is ready for work
        self.replica_id = self.liveness.register()
        self.who = f"scheduler:{self.replica_id}"
        if self.backfill_id is not None:  # no peer leaves new work to it (see `_leaving_runs_to_peers`)
            announce_as_scoped(self.db.engine, self.who)
        self.wakeup.ignore(self.who)
        self.adopter = Adopter(self.tx, self.executor, dags=self.dags, replica_id=self.replica_id, who=self.who,
                               batch=self.settings.tis_per_loop, sqlite=self.db.is_sqlite, renderer=self.renderer,
                               api_url=self.api_url)
        self.deliveries = Deliveries(self.tx, self.callback_channels, replica_id=self.replica_id, clock=self.clock,
                                     settings=self.callback_settings, on_done=self.wakeup.interrupt)
        self.executor.start()
        if self.db.is_sqlite:  # the file lock proves every earlier scheduler is gone
            self.tx.run(lambda conn: declare_others_dead(conn, replica_id=self.replica_id, who=self.who),
                        what="declare earlier schedulers gone")
        self._adopt_at_start()
        scope = f", backfill {self.backfill_id} only" if self.backfill_id is not None else ""
        log.info("scheduler %s started: %s executor, parallelism %s%s", self.replica_id, self.executor.name,
                 self.executor.parallelism, scope)

    def _adopt_at_start(self) -> None:
        """Take over what ended replicas left before launching anything (housekeeping repeats it)."""
        self._at_start("adopting orphaned task instances",
                       lambda: self._take_over(self.adopter.adopt_orphans(self.clock.now()), LoopStats()),
                       "housekeeping tries again")

    def _load_dags_at_start(self) -> None:
        """Load the current DAG versions before taking work (`DagCache.warm`)."""
        self._at_start("loading the current DAG versions",
                       lambda: self.tx.run(self.dags.warm, what=self._step), "they load as runs come")

    def _at_start(self, step: str, work: Callable[[], object], otherwise: str) -> None:
        """A start-up step that may be missed: after a transient database error, a warning saying what
        makes up for it (`otherwise`), and the start goes on."""
        self._step = step
        try:
            work()
        except Exception as exc:
            if not is_transient(exc):
                raise
            log.warning("database error while %s: %s; %s", step, first_line(exc), otherwise)

    def stop(self) -> None:
        """Leave gracefully: store what the executor reported, leave its jobs running, deregister."""
        try:
            if self.test_run_id is not None:
                self.executor.end()  # a test run's jobs end with it (normally none is left)
                self._apply_reports(LoopStats())
            if self.replica_id is not None:
                try:
                    self._apply_reports(LoopStats())
                except Exception as exc:  # noqa: BLE001 - a peer or the next start reads them from the jobs
                    log.warning("could not store the last executor reports (%s): the jobs' adopter will",
                                first_line(exc))
                self._detach_executor()
                try:
                    if self.liveness.deregister(self.who):
                        log.info("scheduler %s stopped", self.replica_id)
                except Exception as exc:  # noqa: BLE001 - peers will find the heartbeat stale instead
                    log.warning("scheduler %s stopped without deregistering (%s); peers will declare it dead",
                                self.replica_id, first_line(exc))
        finally:
            if self.deliveries is not None:
                self.deliveries.close()
            self.renderer.close()
            self.wakeup.close()
            self._lock.release()

    def request_stop(self) -> None:
        """Finish the current step, then stop (SIGTERM). Safe to call from a signal handler."""
        self._stop_requested = True
        self.wakeup.interrupt()

    @property
    def stop_requested(self) -> bool:
        return self._stop_requested

    def run(self, *, until_idle: bool = False, should_stop: Callable[[], bool] | None = None,
            on_loop: Callable[[LoopStats], None] | None = None) -> None:
        try:
            if not until_idle:  # a replica that stays: its first templated launch need not wait for a process
                self.renderer.prestart()
            self.start()
            if not until_idle:
                # What start-up built (modules, the DAG versions) lives as long as the replica: frozen,
                # the collector's full passes no longer walk it (one cost 60-90 ms, 1,000 TIs in).
                gc.freeze()
            while not self._stop_requested:
                stats = self.iterate_safely()
                if stats is None:
                    continue  # a database error: the backoff was waited, try again
                if stats.work:
                    log.info("%s", stats.summary())
                if on_loop is not None:
                    on_loop(stats)
                if should_stop is not None and should_stop():
                    break
                if stats.work == 0 and not self._stop_requested:
                    if (until_idle and not self.executor.has_work() and not self._pending_reports
                            and not self._callbacks_pending()):
                        wait_s = self._retry_wait()
                        if wait_s is None:
                            break
                        self.wakeup.wait(wait_s)  # a NOTIFY or SIGTERM ends it early
                        continue
                    self._idle_wait()
        finally:
            self.stop()

    def _idle_wait(self) -> None:
        """Wait for a change, at most `poll_interval_s`. A wake-up for new signals alone (nothing else
        changed) is met with the reaction step alone, one for new runs alone with starting runs alone
        (`_take_new_work`): the replica that claims them goes on with a full pass; the others, finding
        them taken, wait on until the same deadline, so the full pass they owe to the poll is not put
        off, and a burst of triggers costs each idle peer a look, not a full pass.

        While a peer is at work, new runs are left to it (`_leaving_runs_to_peers`): a wake-up for them
        costs no look at all, and this replica looks once they have waited `runs_left_to_peer_s`,
        taking in only those the peer left waiting that long; likewise for the task instances its
        critical sections left to the peer (`_queue`). And the full pass owed to the poll is left to it
        too, when this replica has nothing of its own to follow (`_pass_left_to_peers`)."""
        deadline = time.monotonic() + self.settings.poll_interval_s
        leave_s = self.settings.runs_left_to_peer_s
        left_first = left_last = None  # wake-ups for new runs left to a peer: the oldest not yet looked after
        while True:
            until = deadline if left_first is None else min(deadline, left_first + leave_s)
            if self._tis_left_at is not None:
                until = min(until, self._tis_left_at + leave_s)
            why = self.wakeup.wait(max(0.0, until - time.monotonic()))
            if self._stop_requested:
                return
            if why == "timeout" and self._tis_left_at is not None and time.monotonic() >= self._tis_left_at + leave_s:
                self._tis_left_at = None  # the peer had its time: queue what it left (set again if still fresh)
                stats = self.iterate_safely(functools.partial(self._alone, self._queue_and_launch))
                if stats is None or stats.tis_queued:
                    return
                continue
            if why == "timeout" and time.monotonic() >= deadline and self._pass_left_to_peers():
                self.iterate_safely(self._alone)
                deadline = time.monotonic() + self.settings.poll_interval_s
                continue
            if why == "timeout" and left_first is not None and time.monotonic() < deadline:
                # the peer had its time: this look takes the runs announced more than `leave_s` ago
                covered = time.monotonic() - leave_s
                left_first = left_last if left_last > covered else None
                why = "runs"
            elif why == "runs" and self._leaving_runs_to_peers():
                left_last = time.monotonic()
                left_first = left_first if left_first is not None else left_last
                continue
            if why not in ("signals", "runs") or self._stop_requested:
                return
            if self.test_run_id is not None or (why == "signals" and self.backfill_id is not None):
                continue  # such a replica has nothing to do with them
            stats = self.iterate_safely(self._react_alone if why == "signals" else self._start_alone)
            if stats is None or stats.work:
                return

    def _pass_left_to_peers(self) -> bool:
        """Whether an idle replica leaves the full pass it owes to the poll to a peer at work: that peer
        runs a full pass at least every `follow_up_s` (every pass looks at every DAG, run and pool), so
        this one's would find nothing to do, while holding run locks and the pools it needs. Only a
        replica with nothing of its own to follow leaves it: no tries in flight (their ends are seen by
        polling), no executor reports or callback deliveries pending."""
        return (not len(self.in_flight) and not self._pending_reports and not self.executor.has_work()
                and (self.deliveries is None or not self.deliveries.busy()) and self._leaving_runs_to_peers())

    def _alone(self, step: Callable[[LoopStats, object], object] | None = None) -> LoopStats:
        """One step outside a full pass, for `_idle_wait`: the heartbeat when due, then `step(stats,
        now)` (the critical section, a reaction to signals, taking new runs in), counted in the stats."""
        stats = LoopStats()
        self._heartbeat_if_due()
        if step is not None:
            step(stats, self.clock.now())
        return stats

    def _react_alone(self) -> LoopStats:
        return self._alone(self._react)

    def _start_alone(self) -> LoopStats:
        return self._alone(self._take_new_work)

    def _retry_wait(self) -> float | None:
        """With nothing runnable and nothing running: seconds until the earliest retry time of a task
        instance waiting to be retried (pending work, so `until_idle` waits for it), or None when there
        is none, or when the clock is frozen (`--now`: its time never comes by waiting)."""
        self._step = "looking for retries"
        waiting = self.tx.run(lambda conn: pending_retries(conn, self.backfill_id, limit=1), what=self._step)
        self.waiting_retry = waiting[0] if waiting else None
        if self.waiting_retry is None:
            return None
        now = self.clock.now()
        at = self.waiting_retry.next_retry_at or now
        if getattr(self.clock, "frozen", False):
            if at <= now:
                return None  # due, yet nothing was runnable (a limit holds it): nothing more happens
            log.info("%s.%s waits for its retry at %s; the clock is frozen at %s, so it stays waiting",
                     self.waiting_retry.dag_id, self.waiting_retry.task_id, at.isoformat(), now.isoformat())
            return None
        wait_s = min(max((at - now).total_seconds(), 0.0) + 0.01, self.settings.retry_wait_max_s)
        log.info("%s.%s (run %s) retries at %s: waiting %.1fs", self.waiting_retry.dag_id,
                 self.waiting_retry.task_id, self.waiting_retry.run_id, at.isoformat(), wait_s)
        return wait_s

    def iterate_safely(self, iterate: Callable[[], LoopStats] | None = None) -> LoopStats | None:
        """One iteration (or `iterate`); after a transient database error, a warning and a backoff, and None."""
        try:
            stats = (iterate or self.iterate)()
        except ReplicaFenced:
            raise
        except Exception as exc:
            if not is_transient(exc):
                raise
            self.failed_loops += 1
            metrics.FAILED_LOOPS.inc()
            delay = self.backoff.next()
            log.warning("database error while %s: %s; carrying on in %.1fs", self._step, first_line(exc), delay)
            self.wakeup.wait(delay, listen=False)
            return None
        self.backoff.reset()
        return stats

    # -- one loop ----------------------------------------------------------------------------------

    def iterate(self) -> LoopStats:
        began = time.perf_counter()
        stats = self._iterate()
        metrics.LOOP_SECONDS.observe(time.perf_counter() - began)
        metrics.LOOPS.inc()
        self._in_flight_gauge.set(len(self.in_flight))
        self._open_slots_gauge.set(self.executor.free_slots())
        return stats

    @contextlib.contextmanager
    def _phase(self, phase: str, step: str):
        """Name the step (for error messages) and time it into the phase histogram."""
        self._step = step
        began = time.perf_counter()
        try:
            yield
        finally:
            metrics.LOOP_PHASE_SECONDS.labels(phase=phase).observe(time.perf_counter() - began)

    def _iterate(self) -> LoopStats:
        stats = LoopStats()
        now = self.clock.now()
        s = self.settings
        self._heartbeat_if_due()
        testing = self.test_run_id is not None  # a test run is created running: nothing to create or start
        if self.backfill_id is None and not testing:
            self._react(stats, now)
            with self._phase("create_runs", "creating runs"):
                created = self.tx.run(lambda conn: create_scheduled_runs(
                    conn, now=now, dags=self.dags, who=self.who, limit=s.dags_per_loop,
                    per_dag=s.runs_created_per_dag), what=self._step)
                stats.runs_created += created
                self._created_runs = self._created_runs or created > 0
        if not testing:
            with self._phase("start_runs", "starting runs"):
                stats.runs_started = len(self.tx.run(lambda conn: self._start_runs(conn, now), what=self._step))
        with self._phase("examine", "examining runs"):
            result = self.tx.run(lambda conn: examine_running_runs(
                conn, limit=s.runs_per_loop, backfill_id=self.backfill_id, test_run_id=self.test_run_id, now=now,
                dags=self.dags, who=self.who), what=self._step)
        stats.tis_decided += result.tis_changed
        stats.runs_finished += result.runs_finished
        self._own_scheduled.update(result.scheduled)
        if not self._stop_requested:  # a stopping replica takes no new work
            self._queue_and_launch(stats, now)
        with self._phase("executor_sync", "storing executor reports"):
            decided, queued = self._apply_reports(stats, queue=True)
        stats.tries_stopped = self._stop_tries()  # before the follow-up: a restart's stop waits for nothing
        self._follow_up(stats, decided, began=time.monotonic(), queued=queued)
        if not testing:  # a test run fires no callbacks and has no deadline
            with self._phase("callbacks", "delivering callbacks"):
                stats.callbacks = self.deliveries.pump(now)
            self._check_deadlines(stats, now)
        if stats.runs_finished and not testing:
            with self._phase("finish_backfills", "finishing backfills"):
                self.tx.run(lambda conn: housekeeping.finish_backfills(conn, now=now, who=self.who), what=self._step)
        self._housekeeping(stats, now)
        return stats

    def _heartbeat_if_due(self) -> None:
        # first: a replica declared dead learns it before taking work (a test run's process is no replica)
        if self.replica_id is not None and self.liveness.heartbeat_due():
            with self._phase("heartbeat", "heartbeating"):
                self.liveness.beat()

    def _react(self, stats: LoopStats, now) -> None:
        """React to new signals; when that made task instances runnable, queue them in the same
        transaction (the critical section with `if_free`: one commit, not two) and launch them at once,
        not after the rest of the pass. If a peer holds the pools then, the critical section runs again
        right after the reaction's commit, as its own transaction. The pass's own critical section
        still follows, so nothing is skipped. The reaction wakes no peer; if this replica queues
        nothing (no free slot, a peer in the critical section, stopping), it wakes them now."""
        queue_now = not self._stop_requested

        def react(conn):
            reacted = react_to_signals(conn, now=now, dags=self.dags, who=self.who,
                                       limit=self.settings.signals_per_loop)
            self._own_scheduled.update(reacted.scheduled)
            return reacted, self._queue(conn, now, if_free=True) if reacted.tis_changed and queue_now else None

        with self._phase("signals", "reacting to signals"):
            reacted, done = self.tx.run(react, what=self._step)
        stats.signals_handled += reacted.signals
        stats.runs_created += reacted.runs_created
        self._created_runs = self._created_runs or reacted.runs_created > 0
        stats.tis_decided += reacted.tis_changed
        stats.runs_finished += reacted.runs_finished
        if reacted.tis_changed:
            if done is not None:  # queued (or found nothing to queue) in the reaction's own transaction
                queued = self._launch_queued(stats, *done, now)
            else:
                queued = 0 if self._stop_requested else self._queue_and_launch(stats, now)
            if not queued:  # the reaction woke no one (`hold_announcements`): a peer may queue them
                self.tx.run(lambda conn: announce(conn, self.who, urgent=True), what="waking the other replicas")

    def _follow_up(self, stats: LoopStats, decided: int, *, began: float, queued: int | None = None) -> None:
        """The fast path: while the reports just stored made tasks runnable (the mini-scheduler decided
        them), queue, launch and store reports again at once, without a full pass (create, start, examine)
        in between, for at most `follow_up_s`. A chain of quick tasks then moves one hop per transaction,
        not one hop per loop: the transaction storing the reports queues what they made runnable
        (`_apply_reports` with `queue`), and a critical section of its own runs only when that one did
        not (`queued` None: a peer held the pools), may have left some (it queued its limit), or runs
        a peer held were decided since. Nothing is skipped: the next iteration's full pass still looks at
        everything.

        Runs triggered meanwhile are taken in on the way, in the transaction storing the reports (as
        `_take_new_work` would, and queued with them), so they do not wait for a whole chain: on
        PostgreSQL when new runs or a change a replica must act on were announced (peers' ordinary
        changes wake no one: `db.notify`), on SQLite (nothing is announced) when the transaction
        storing the reports saw a run newer than the last start step had seen. New signals are left to
        idle peers (woken for them) or to the next full pass: reacting to a storm of them at every hop
        would hold up the chains being followed."""
        limit = self.settings.follow_up_s
        look_again = False
        while ((decided or self._skipped_runs or look_again) and not self._stop_requested
               and time.monotonic() - began < limit):
            take_in = self.wakeup.pending() in ("notified", "runs") or self._work_waiting
            retried = 0
            if self._skipped_runs:  # runs a peer was examining when the reports came: their peer is done now
                retried = self._retry_skipped(stats)
                decided += retried
            if queued is None or retried or queued >= self.settings.tis_per_loop:
                queued = self._queue_and_launch(stats, self.clock.now())
            with self._phase("executor_sync", "storing executor reports"):
                decided, queued_with_reports = self._apply_reports(stats, queue=True, take_in=take_in)
            look_again = False
            if not queued and not decided:
                if queued is not None:
                    break
                # A peer held the pools: it queues what it sees, but what this replica made runnable may
                # have come after its look. Look again once it is through (a critical section takes
                # milliseconds) rather than leave it to a whole pass; a look that finds nothing ends it.
                look_again = True
                time.sleep(_PEER_IN_CRITICAL_SECTION_S)
            queued = queued_with_reports

    def _take_new_work(self, stats: LoopStats, now) -> None:
        """Start the runs that may start and decide those (their first tasks are then queued by the next
        critical section), as a full pass would; the rest of a full pass (reacting to signals, creating
        scheduled runs, examining every running run) waits for the next one. For a replica woken by new
        runs alone (the follow-up does the same within its reports' transaction: `_apply_reports`).

        Only the runs queued by `now` (where wake-ups exist): when several idle replicas race for a
        burst's first run, the losers do not take the next ones from under the winner. A replica that
        found nothing to take knows a peer took the runs, and leaves it the next ones for a moment,
        before that peer's changes even arrive (`_leaving_runs_to_peers`)."""
        if self.test_run_id is not None:  # a test run's process has nothing else to take in
            self._work_waiting = False
            return
        queued_by = now if self.wakeup.listens else None

        def start(conn):
            mini = LoopStats()
            self._start_and_decide(conn, mini, now, queued_by=queued_by)
            return mini

        with self._phase("start_runs", "starting runs"):
            mini = self.tx.run(start, what=self._step)
        stats.runs_started += mini.runs_started
        stats.tis_decided += mini.tis_decided
        stats.runs_finished += mini.runs_finished
        if not mini.runs_started:
            self._peer_took_runs_at = time.monotonic()

    def _start_and_decide(self, conn, mini: LoopStats, now, *, queued_by: dt.datetime | None = None) -> None:
        """Start the runs that may start (with `queued_by`, those queued by then) and decide them, in
        `conn`'s transaction, counting into `mini`."""
        self._work_waiting = False
        started = self._start_runs(conn, now, queued_by=queued_by)
        mini.runs_started += len(started)
        self._mini_schedule(conn, started, mini, now)

    def _start_runs(self, conn, now, *, queued_by: dt.datetime | None = None) -> list[int]:
        """Start the queued runs that may start (`start_queued_runs`), but those left to a peer at work
        (`_leaving_runs_to_peers`), unless this replica created runs since its last start step (from
        the schedule or a signal: a replica starts what it created); on SQLite, also remember the
        newest run this step has seen (see `_follow_up`), unless it started as many runs as it may in
        one step: then more may be waiting, and the next look takes in again. With `queued_by`, only
        runs queued by then."""
        newest = None if self.wakeup.listens else newest_run(conn)
        own, self._created_runs = self._created_runs, False
        waited_since = queued_by if own or not self._leaving_runs_to_peers() else \
            now - dt.timedelta(seconds=self.settings.runs_left_to_peer_s)
        started = start_queued_runs(conn, now=now, dags=self.dags, who=self.who, limit=self.settings.dags_per_loop,
                                    backfill_id=self.backfill_id, waited_since=waited_since)
        if newest is not None:
            self._newest_seen = -1 if len(started) >= self.settings.dags_per_loop else newest
        return started

    def _leaving_runs_to_peers(self) -> bool:
        """Whether new runs are left to a peer at work for now: new work goes to the replica already
        moving chains of tasks, whose next hop takes it in with them, one transaction for all (spread
        over every replica in small pieces, each piece costs a transaction of its own per hop: with
        three replicas on one machine, about twice the CPU of one for the same work). A replica is at work
        while it commits ordinary changes, at most `peer_at_work_s` apart (`Wakeup.replicas_at_work`);
        new runs go to the one at work for longest (ties: the lowest replica id), and the others, idle
        or at work, leave them to it. A run left waiting `runs_left_to_peer_s` is taken in by any
        replica (that one is overloaded, stuck or gone), and a replica's own new runs (`_start_runs`)
        are never left. Not for a replica of one backfill or one test run, nor to one (a backfill's
        replica announces itself so: `announce_as_scoped`), nor on SQLite (one scheduler)."""
        if self.replica_id is None or self.backfill_id is not None or self.test_run_id is not None:
            return False
        at_work = self.wakeup.replicas_at_work(self.settings.peer_at_work_s)
        if not at_work:  # unless this idle replica just found the runs it was woken for taken (`_take_new_work`)
            return time.monotonic() - self._peer_took_runs_at < self.settings.peer_at_work_s
        first = min(at_work, key=lambda replica: (at_work[replica], replica))
        return first != self.replica_id

    def _retry_skipped(self, stats: LoopStats) -> int:
        run_ids, self._skipped_runs = self._skipped_runs, set()
        mini = LoopStats()
        with self._phase("executor_sync", "deciding runs a peer held"):
            self.tx.run(lambda conn: self._mini_schedule(conn, run_ids, mini, self.clock.now(), hop=True),
                        what=self._step)
        self._skipped_runs -= run_ids  # skipped twice: left to the next examination
        stats.tis_decided += mini.tis_decided
        stats.runs_finished += mini.runs_finished
        return mini.tis_decided

    def _queue(self, conn, now, *, if_free: bool = False):
        """The critical section in `conn`'s transaction: (queued, their launches), or None when
        `if_free` and a peer holds the pools (see `critical_section`). A replica leaving new work to a
        peer (`_leaving_runs_to_peers`) leaves it what was made runnable less than `runs_left_to_peer_s`
        ago, but what it made runnable itself (`_own_scheduled`, see `_mini_schedule`): the peer's
        fresh work (it missed the pools only because this replica held them), and the next hops of
        this replica's chains, which then go on with the peer's. If the peer leaves them waiting that
        long, this replica queues them (`_idle_wait` comes back for them)."""
        leave = None
        if self._leaving_runs_to_peers():
            waited_since, mine = now - dt.timedelta(seconds=self.settings.runs_left_to_peer_s), self._own_scheduled

            def leave(candidate) -> bool:
                left = candidate.id not in mine and candidate.scheduled_at is not None and \
                    candidate.scheduled_at > waited_since
                if left and self._tis_left_at is None:
                    self._tis_left_at = time.monotonic()  # `_idle_wait` looks again once they have waited
                return left

        queued = queue_task_instances(
            conn, now=now, dags=self.dags, who=self.who, replica_id=self.replica_id,
            executor_slots=self.executor.free_slots(), limit=self.settings.tis_per_loop,
            backfill_id=self.backfill_id, test_run_id=self.test_run_id, if_free=if_free, leave=leave)
        if queued is None:
            return None
        at_commit(conn, self._own_scheduled.clear)
        return queued, gather_launches(conn, queued, dags=self.dags, now=now, api_url=self.api_url)

    def _queue_and_launch(self, stats: LoopStats, now) -> int | None:
        """The critical section and the launches; returns how many TIs it queued, None if a peer held
        the pools (nothing queued)."""
        try:
            with self._phase("critical_section", "queueing task instances"):
                queued, pending = self.tx.run(lambda conn: self._queue(conn, now), what=self._step)
        except PoolsBusy:
            metrics.CRITICAL_SECTION_BUSY.inc()
            log.debug("another replica is in the critical section; queueing nothing this round")
            return None
        return self._launch_queued(stats, queued, pending, now)

    def _launch_queued(self, stats: LoopStats, queued, pending, now) -> int:
        """Render and launch what a committed critical section queued; returns how many TIs it queued."""
        stats.tis_queued += len(queued)
        self._step = "rendering templates"  # outside any transaction: a template may take its whole budget
        rendered = render_launches(pending, self.renderer)
        if rendered.broken:
            self._step = "failing tries whose templates do not render"

            def fail(conn):
                mini = LoopStats()
                affected = fail_unlaunchable(conn, rendered.broken, at=now, dags=self.dags, who=self.who)
                self._mini_schedule(conn, affected, mini, now)
                at_commit(conn, functools.partial(self._launch_failures.inc, len(rendered.broken)))
                return mini

            mini = self.tx.run(fail, what=self._step)
            stats.tis_decided += mini.tis_decided
            stats.runs_finished += mini.runs_finished
        if rendered.left:
            log.info("stopping: %d queued tries left unrendered for the next replica to launch", len(rendered.left))
        self._launch(rendered.launches)  # only now: the queueing transaction has committed
        return len(queued)

    def _launch(self, launches: list[TaskLaunch]) -> None:
        if not launches:
            return
        with self._phase("launch", "launching"):
            if self.replica_id is not None:
                self.liveness.check_before_launch()
            self.executor.launch(launches)
            self.in_flight.add(launches)
        self._launched.inc(len(launches))

    def _apply_reports(self, stats: LoopStats, *, queue: bool = False,
                       take_in: bool = False) -> tuple[int, int | None]:
        """Store the executor's reports. Reports whose transaction fails are kept and stored next time
        (compare-and-set makes storing one twice harmless), so none is lost. With `take_in`, the same
        transaction starts the runs that may start and decides them (`_take_new_work`), reports or not.
        With `queue`, when that made task instances runnable, it runs the critical section too
        (`if_free`: a peer holding the pools leaves it to a critical section of its own) and what it
        queued is launched once it has committed: one commit per hop of a chain, not three. Returns
        (how many task instances were decided, how many were queued with the reports: None when none
        was tried or a peer held the pools)."""
        self._pending_reports += self.executor.sync()
        reports = self._pending_reports
        take_in = take_in and self.test_run_id is None  # a test run's process has nothing else to take in
        if not reports and not take_in:
            return 0, None
        now = self.clock.now()

        def store(conn):
            mini = LoopStats()
            if reports:
                affected = apply_reports(conn, reports, dags=self.dags, who=self.who)
                self._mini_schedule(conn, affected, mini, now, hop=True)
            if take_in:
                self._start_and_decide(conn, mini, now)
            # nothing announces new work on SQLite: look, for the follow-up (see `_follow_up`)
            self._work_waiting = not self.wakeup.listens and self.backfill_id is None and \
                self.test_run_id is None and newest_run(conn) != self._newest_seen
            queue_now = queue and mini.tis_decided and not self._stop_requested
            return mini, self._queue(conn, now, if_free=True) if queue_now else None

        mini, done = self.tx.run(store, what=self._step)
        self._pending_reports = []
        self.in_flight.stored(reports)
        for report in reports:
            metrics.EXECUTOR_REPORTS.labels(executor=self.executor.name, state=report.state).inc()
        stats.reports += len(reports)
        stats.runs_started += mini.runs_started
        stats.tis_decided += mini.tis_decided
        stats.runs_finished += mini.runs_finished
        return mini.tis_decided, None if done is None else self._launch_queued(stats, *done, now)

    def _mini_schedule(self, conn, run_ids, stats: LoopStats, now, *, hop: bool = False) -> None:
        """Decide the downstream tasks of runs whose TIs just ended, in the same transaction. Runs a peer
        holds (it is examining them) are skipped, and noted: the follow-up tries them again once. What
        it makes runnable is this replica's to queue (`_queue`), save the next hop of a chain (`hop`)
        while it leaves new work to a peer: that chain then goes on with the peer's."""
        if run_ids:
            locked = lock_runs_by_id(conn, sorted(run_ids))
            result = examine_runs(conn, locked, now=now, dags=self.dags, who=self.who)
            if result.scheduled and (not hop or not self._leaving_runs_to_peers()):
                self._own_scheduled.update(result.scheduled)
            stats.tis_decided += result.tis_changed
            stats.runs_finished += result.runs_finished
            skipped = set(run_ids) - {run.id for run in locked}
            if skipped:
                at_commit(conn, lambda: self._skipped_runs.update(skipped))

    def _stop_tries(self) -> int:
        """Stop the jobs of this replica's tries that were asked to stop (once per try); how many."""
        mine = self.in_flight.tries()
        if not mine:
            return 0
        stopped = 0
        with self._phase("stop_tries", "stopping tries"):
            asked = self.tx.run(lambda conn: tries_to_stop(conn, mine), what=self._step)
            for ti_try in asked:
                key = self.in_flight.to_cancel(ti_try)
                if key is not None:
                    log.info("stopping %s/%s/%s try %s on request", key.dag_id, key.run_id, key.task_id,
                             key.try_number)
                    self.executor.cancel(key)
                    stopped += 1
        return stopped

    # -- callbacks and deadlines -------------------------------------------------------------------

    def _callbacks_pending(self) -> bool:
        """For `until_idle`: deliveries in flight, or due rows a forced claim starts now."""
        if self.deliveries is None:  # a test run's process delivers none
            return False
        return self.deliveries.busy() or self.deliveries.pump(self.clock.now(), force=True) > 0

    def _check_deadlines(self, stats: LoopStats, now) -> None:
        if time.monotonic() - self._last_deadline_check < self.callback_settings.deadline_check_interval_s:
            return
        with self._phase("deadlines", "recording missed deadlines"):
            misses = self.tx.run(lambda conn: record_missed_deadlines(conn, now=now, who=self.who), what=self._step)
        self._last_deadline_check = time.monotonic()
        if misses.runs or misses.tasks:
            metrics.DEADLINE_MISSES.labels(kind="run").inc(misses.runs)
            metrics.DEADLINE_MISSES.labels(kind="task").inc(misses.tasks)
            log.warning("deadlines missed: %d run(s), %d task instance(s)", misses.runs, misses.tasks)
        stats.deadlines_missed += misses.runs + misses.tasks

    # -- housekeeping ------------------------------------------------------------------------------

    def _housekeeping(self, stats: LoopStats, now) -> None:
        if time.monotonic() - self._last_housekeeping < self.settings.housekeeping_interval_s:
            return
        with self._phase("housekeeping", "timing out tasks"):
            self._keep_house(stats, now)
        self._last_housekeeping = time.monotonic()

    def _keep_house(self, stats: LoopStats, now) -> None:
        if self.test_run_id is not None:
            for key in self.tx.run(lambda conn: housekeeping.time_out_tasks(
                    conn, now=now, dags=self.dags, who=self.who, test_run_id=self.test_run_id), what=self._step):
                self.executor.cancel(key)
            return

        def time_out_and_finish(conn):
            timed_out = housekeeping.time_out_tasks(conn, now=now, dags=self.dags, who=self.who)
            # Runs finished elsewhere (a cancelled backfill, a deactivated DAG, another replica) end theirs too.
            housekeeping.finish_backfills(conn, now=now, who=self.who)
            delete_ended_try_tokens(conn)  # they authenticate no more; keep the table small
            return timed_out

        timed_out = self.tx.run(time_out_and_finish, what=self._step)
        metrics.TIMEOUTS.inc(len(timed_out))
        for key in timed_out:
            self.executor.cancel(key)  # a no-op unless this replica runs it
        if not self.db.is_sqlite:
            self._declare_silent_peers_dead()
        self._step = "adopting orphaned task instances"
        self._take_over(self.adopter.adopt_orphans(now), stats)
        self._step = "reconciling own task instances"
        own, cancel = self.adopter.reconcile_own_tries(self.in_flight, now)
        for key in cancel:
            self.executor.cancel(key)
        self._take_over(own, stats)

    def _take_over(self, settled: Settled, stats: LoopStats) -> None:
        """Track the tries the executor now follows; launch the queued ones that never started."""
        self.in_flight.add(settled.followed)
        stats.tis_adopted += settled.count
        metrics.ADOPTED.inc(len(settled.followed) + len(settled.to_launch))
        metrics.ZOMBIES.inc(settled.zombies)
        self._launch(settled.to_launch)

    def _declare_silent_peers_dead(self) -> None:
        self._step = "declaring silent replicas dead"

        def declare(conn):
            now = database_now(conn)
            if not self.liveness.may_judge_peers(now):
                return []
            return declare_stale_replicas_dead(conn, replica_id=self.replica_id,
                                               timeout_s=self.settings.replica_timeout_s, who=self.who, now=now)

        dead = self.tx.run(declare, what=self._step)
        metrics.REPLICAS_DECLARED_DEAD.inc(len(dead))

    def _detach_executor(self) -> None:
        """Leave running jobs to whoever adopts them."""
        running = len(self.in_flight)
        self.executor.detach()
        if running:
            log.info("%d jobs keep running; %s adopts them", running,
                     "the next scheduler" if self.db.is_sqlite else "a live replica")
