"""One scheduler replica: the loop that runs the phases in order, each in its own short transaction.

    heartbeat when due -> react to signals -> create runs -> start queued runs -> examine running runs
    -> critical section -> launch -> executor reports (+ mini-scheduler) -> stop the tries asked to stop
    -> follow-up (queue, launch, store reports again while reports made tasks runnable) -> callbacks
    (settle and start deliveries from the outbox, never waiting on the network: `deliveries`) -> missed
    deadlines, then housekeeping, on intervals (`phases.upkeep`: timeouts; declare silent peers dead;
    adopt orphaned tries; reconcile this replica's own tries)

This module keeps the order; the phases are in `phases/` and the modules it names, the replica's own
rules (liveness, adoption, wake-ups, work gathering) in `replica/`. A replica loads the current
version of every active DAG at start (`DagCache.warm`), before it registers (so a replica shown
running is ready for work); then it adopts orphaned tries, before it launches anything. A replica
that stays (not `until_idle`) then freezes what start-up built (`gc.freeze`): the collector's full
passes skip it from then on.

Any number of replicas may run this loop against one PostgreSQL (row locks, see `db.claims`), one
against SQLite (`replica.guard`). Between loops an idle replica waits (`replica.wakeup`): on
PostgreSQL until any writer commits a state change, else for `poll_interval_s` (stretched on
PostgreSQL while nothing happens: `replica.idle_poll`). A transient database
error ends the iteration (its transaction rolls back) and the loop carries on after a backoff
(`replica.resilience`). New work gathers on the replica at work for longest (`replica.gathering`).
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

import functools
import gc
import logging
import time
from collections.abc import Callable, Mapping

from dagline import metrics
from dagline.clock import Clock
from dagline.db.engine import Database
from dagline.db.faults import first_line, is_transient
from dagline.db.notify import announce_as_scoped
from dagline.executors.base import Executor
from dagline.scheduler import housekeeping
from dagline.scheduler.channels import Callback, SecretReader, log_channel, webhook_channel
from dagline.scheduler.create_runs import create_scheduled_runs, plan_at_this_clock
from dagline.scheduler.deliveries import CallbackSettings, Deliveries
from dagline.scheduler.examine import examine_running_runs
from dagline.scheduler.phases.context import Context
from dagline.scheduler.phases.hops import Hops
from dagline.scheduler.phases.mini_scheduler import MiniScheduler
from dagline.scheduler.phases.reaction import react
from dagline.scheduler.phases.stats import LoopStats
from dagline.scheduler.phases.take_in import TakeIn
from dagline.scheduler.phases.until_idle import callbacks_pending, retry_wait
from dagline.scheduler.phases.upkeep import Upkeep
from dagline.scheduler.replica.adoption import Adopter, declare_others_dead
from dagline.scheduler.replica.guard import SchedulerLock
from dagline.scheduler.replica.idle_pass import has_own_work, pass_left_to_peers
from dagline.scheduler.replica.idle_poll import idle_poll_s, stretched
from dagline.scheduler.replica.liveness import ReplicaFenced
from dagline.scheduler.replica.resilience import Backoff
from dagline.scheduler.replica.timers import IdleTimers
from dagline.scheduler.settings import SchedulerSettings
from dagline.store.read_models import next_due_at

log = logging.getLogger(__name__)

_PEER_IN_CRITICAL_SECTION_S = 0.002  # the follow-up's pause before it looks again when a peer held the pools
CREATE_RUNS_BUDGET_S = 5.0  # longest the create-runs step goes on batch after batch (a tick of thousands of DAGs)


class Scheduler(Context):
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
        super().__init__(db, executor, clock=clock, settings=settings, backfill_id=backfill_id,
                         test_run_id=test_run_id, api_url=api_url)
        self.backoff = Backoff(max_s=self.settings.backoff_max_s)
        self.callback_settings = callback_settings or CallbackSettings()
        secrets = secret_reader or SecretReader()
        self.callback_channels = {"webhook": webhook_channel(secrets, timeout_s=self.callback_settings.timeout_s,
                                                              egress=self.callback_settings.egress),
                                  "log": log_channel, **(callback_channels or {})}
        self.failed_loops = 0  # iterations ended by a transient database error
        self._lock = SchedulerLock(db)
        self.mini = MiniScheduler(self)
        self.take_in = TakeIn(self, self.mini)
        self.hops = Hops(self, self.mini, self.take_in)
        self.upkeep = Upkeep(self, self.hops,
                             deadline_check_interval_s=self.callback_settings.deadline_check_interval_s)
        self._in_flight_gauge = metrics.EXECUTOR_IN_FLIGHT.labels(executor=executor.name)
        self._open_slots_gauge = metrics.EXECUTOR_OPEN_SLOTS.labels(executor=executor.name)
        self.quiet_passes = 0  # full passes in a row that found nothing to do (`replica.idle_poll`)
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
        self._at_start("loading the current DAG versions",  # before registering: a replica shown running is ready
                       lambda: self.transact(self.dags.warm), "they load as runs come")
        self.replica_id = self.liveness.register()
        self.who = f"scheduler:{self.replica_id}"
        self._at_start("planning the DAGs without catch-up at this clock",  # its clock decides what is due
                       lambda: self.transact(lambda conn: plan_at_this_clock(conn, now=self.clock.now(),
                                                                             dags=self.dags)),
                       "they are planned again as their runs end")
        if self.backfill_id is not None:  # no peer leaves new work to it (see `replica.gathering`)
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
        self._at_start("adopting orphaned task instances",  # before launching anything (housekeeping repeats it)
                       lambda: self.upkeep.take_over(self.adopter.adopt_orphans(self.clock.now()), LoopStats()),
                       "housekeeping tries again")
        scope = f", backfill {self.backfill_id} only" if self.backfill_id is not None else ""
        log.info("scheduler %s started: %s executor, parallelism %s%s", self.replica_id, self.executor.name,
                 self.executor.parallelism, scope)

    def _at_start(self, step: str, work: Callable[[], object], otherwise: str) -> None:
        """A start-up step that may be missed: after a transient database error, a warning saying what
        makes up for it (`otherwise`), and the start goes on."""
        self.step = step
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
                self.hops.store_reports(LoopStats())
            if self.replica_id is not None:
                try:
                    self.hops.store_reports(LoopStats())
                except Exception as exc:  # noqa: BLE001 - a peer or the next start reads them from the jobs
                    log.warning("could not store the last executor reports (%s): the jobs' adopter will",
                                first_line(exc))
                running = len(self.in_flight)
                self.executor.detach()  # its jobs are left to whoever adopts them
                if running:
                    log.info("%d jobs keep running; %s adopts them", running,
                             "the next scheduler" if self.db.is_sqlite else "a live replica")
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
                    self.quiet_passes += 1  # `iterate_safely` sets it back at any work
                    if until_idle and not self.executor.has_work() and not self.hops.pending_reports \
                            and not callbacks_pending(self):
                        wait_s, self.waiting_retry = retry_wait(self)
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
        (`TakeIn.new_runs`): the replica that claims them goes on with a full pass; the others, finding
        them taken, wait on until the same deadline, so the full pass they owe to the poll is not put
        off, and a burst of triggers costs each idle peer a look, not a full pass.

        While a peer is at work, new runs are left to it (`replica.gathering`): a wake-up for them costs
        no look at all, and this replica looks once they have waited `runs_left_to_peer_s`, taking in
        only those the peer left waiting that long; likewise for the task instances its critical
        sections left to the peer (`replica.left_to_peer`). And the full pass owed to the poll is left
        to it too, when this replica has nothing of its own to follow (`replica.idle_pass`). The
        timers are `replica.timers`."""
        timers = IdleTimers(poll_s=self._poll_s(), left_s=self.settings.runs_left_to_peer_s,
                            tasks_left=self.left.tasks_left)
        while True:
            why = self.wakeup.wait(timers.wait_s())
            if self._stop_requested:
                return
            if self.left.tasks_left.fires(why):  # the peer had its time: queue what it left (left again if fresh)
                stats = self.iterate_safely(functools.partial(self._alone, self.hops.queue_and_launch))
                if stats is None or stats.tis_queued:
                    return
                continue
            if timers.poll_due(why) and self._pass_left_to_peers():
                self.iterate_safely(self._alone)
                timers.restart_poll()
                continue
            if timers.runs_waited(why):  # the peer had its time: this look takes the runs it left that long
                why = "runs"
            elif why == "runs" and self.leaving_runs_to_peers():
                timers.runs_left()
                continue
            if why not in ("signals", "runs") or self._stop_requested:
                return
            if self.test_run_id is not None or (why == "signals" and self.backfill_id is not None):
                continue  # such a replica has nothing to do with them
            stats = self.iterate_safely(self._react_alone if why == "signals" else self._start_alone)
            if stats is None or stats.work:
                return

    def _pass_left_to_peers(self) -> bool:
        return pass_left_to_peers(**self._own_work(), leaving=self.leaving_runs_to_peers)

    def _own_work(self) -> dict[str, int | bool]:
        deliveries_busy = self.deliveries is not None and self.deliveries.busy()
        return {"tries_in_flight": len(self.in_flight), "reports_pending": len(self.hops.pending_reports),
                "executor_busy": self.executor.has_work(), "deliveries_busy": deliveries_busy}

    def _poll_s(self) -> float:
        """This idle wait's poll: `poll_interval_s`, stretched after quiet passes (`replica.idle_poll`)."""
        s = self.settings
        if not stretched(stretch=s.idle_poll_stretch, quiet_passes=self.quiet_passes, listens=self.wakeup.listens,
                         own_work=has_own_work(**self._own_work())):
            return s.poll_interval_s
        try:
            due = self.transact(next_due_at)
        except Exception as exc:
            if not is_transient(exc):
                raise
            return s.poll_interval_s  # the database is away: the next pass meets the error and backs off
        due_in_s = None if due is None else (due - self.clock.now()).total_seconds()
        return idle_poll_s(poll_s=s.poll_interval_s, stretch=s.idle_poll_stretch, quiet_passes=self.quiet_passes,
                           due_in_s=due_in_s)

    def _alone(self, step: Callable[[LoopStats, object], object] | None = None) -> LoopStats:
        """One step outside a full pass, for `_idle_wait`: the heartbeat when due, then `step(stats,
        now)` (the critical section, a reaction to signals, taking new runs in), counted in the stats."""
        stats = LoopStats()
        self._heartbeat_if_due()
        if step is not None:
            step(stats, self.clock.now())
        return stats

    def _react_alone(self) -> LoopStats:
        return self._alone(functools.partial(react, self, self.hops))

    def _start_alone(self) -> LoopStats:
        return self._alone(self.take_in.new_runs)

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
            log.warning("database error while %s: %s; carrying on in %.1fs", self.step, first_line(exc), delay)
            self.wakeup.wait(delay, listen=False)
            return None
        self.backoff.reset()
        if stats.work:  # a full pass or an idle wait's own step: the plain poll again (`replica.idle_poll`)
            self.quiet_passes = 0
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

    def _iterate(self) -> LoopStats:
        stats = LoopStats()
        now = self.clock.now()
        s = self.settings
        self._heartbeat_if_due()
        testing = self.test_run_id is not None  # a test run is created running: nothing to create or start
        if self.backfill_id is None and not testing:
            react(self, self.hops, stats, now)
            with self.phase("create_runs", "creating runs"):
                created = self._create_runs(now)
                stats.runs_created += created
                self.left.created_runs = self.left.created_runs or created > 0
        if not testing:
            with self.phase("start_runs", "starting runs"):
                stats.runs_started = len(self.transact(lambda conn: self.take_in.start_runs(conn, now)))
        with self.phase("examine", "examining runs"):
            result = self.transact(lambda conn: examine_running_runs(
                conn, limit=s.runs_per_loop, backfill_id=self.backfill_id, test_run_id=self.test_run_id, now=now,
                dags=self.dags, who=self.who))
        stats.tis_decided += result.tis_changed
        stats.runs_finished += result.runs_finished
        self.left.own_tis.update(result.scheduled)
        if not self._stop_requested:  # a stopping replica takes no new work
            self.hops.queue_and_launch(stats, now)
        with self.phase("executor_sync", "storing executor reports"):
            decided, queued = self.hops.store_reports(stats, queue=True)
        stats.tries_stopped = self.hops.stop_tries()  # before the follow-up: a restart's stop waits for nothing
        self._follow_up(stats, decided, began=time.monotonic(), queued=queued)
        if not testing:  # a test run fires no callbacks and has no deadline
            with self.phase("callbacks", "delivering callbacks"):
                stats.callbacks = self.deliveries.pump(now)
            self.upkeep.check_deadlines(stats, now)
        if stats.runs_finished and not testing:
            with self.phase("finish_backfills", "finishing backfills"):
                self.transact(lambda conn: housekeeping.finish_backfills(conn, now=now, who=self.who))
        self.upkeep.housekeeping(stats, now)
        return stats

    def _create_runs(self, now) -> int:
        """Create due runs, a batch of `dags_per_loop` DAGs per transaction (each at the clock's time when
        it begins), batch after batch while they come back full, for at most CREATE_RUNS_BUDGET_S:
        thousands of DAGs due at one tick are created before this replica turns to starting and following
        them (peers claim other batches meanwhile)."""
        s = self.settings
        began, created, at = time.monotonic(), 0, now
        while True:
            made = self.transact(functools.partial(
                create_scheduled_runs, now=at, dags=self.dags, who=self.who, limit=s.dags_per_loop,
                per_dag=s.runs_created_per_dag))
            created += made
            if made < s.dags_per_loop or time.monotonic() - began >= CREATE_RUNS_BUDGET_S or self._stop_requested:
                return created
            self._heartbeat_if_due()  # a long tick on a loaded machine: peers must still see this replica alive
            self.step = "creating runs"  # the heartbeat named its own step
            # each batch at its own time: a run's `created_at` (and the schedule delay measured from it)
            # is when its batch was made, not when the pass began; what comes due meanwhile is taken too
            at = self.clock.now()

    def _heartbeat_if_due(self) -> None:
        # first: a replica declared dead learns it before taking work (a test run's process is no replica)
        if self.replica_id is not None and self.liveness.heartbeat_due():
            with self.phase("heartbeat", "heartbeating"):
                self.liveness.beat()

    def _follow_up(self, stats: LoopStats, decided: int, *, began: float, queued: int | None = None) -> None:
        """The fast path: while the reports just stored made tasks runnable (the mini-scheduler decided
        them), queue, launch and store reports again at once, without a full pass (create, start, examine)
        in between, for at most `follow_up_s`. A chain of quick tasks then moves one hop per transaction,
        not one hop per loop: the transaction storing the reports queues what they made runnable
        (`Hops.store_reports` with `queue`), and a critical section of its own runs only when that one
        did not (`queued` None: a peer held the pools), may have left some (it queued its limit), or runs
        a peer held were decided since. Nothing is skipped: the next full pass still looks at everything.

        Runs triggered meanwhile are taken in on the way (`phases.take_in`), so they do not wait for a
        whole chain: on PostgreSQL when new runs or a change a replica must act on were announced
        (peers' ordinary changes wake no one: `db.notify`), on SQLite when the transaction storing the
        reports saw a run newer than the last start step had. New signals are left to idle peers (woken
        for them) or to the next full pass: reacting to a storm of them at every hop would hold up the
        chains being followed."""
        look_again = False
        while ((decided or self.mini.skipped or look_again) and not self._stop_requested
               and time.monotonic() - began < self.settings.follow_up_s):
            take_in = self.wakeup.pending() in ("notified", "runs") or self.take_in.work_waiting
            retried = 0
            if self.mini.skipped:  # runs a peer was examining when the reports came: their peer is done now
                retried = self.mini.retry_skipped(stats)
                decided += retried
            if queued is None or retried or queued >= self.settings.tis_per_loop:
                queued = self.hops.queue_and_launch(stats, self.clock.now())
            with self.phase("executor_sync", "storing executor reports"):
                decided, queued_with_reports = self.hops.store_reports(stats, queue=True, take_in=take_in)
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
