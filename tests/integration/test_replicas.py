"""Leader-less replicas on PostgreSQL: liveness on the database's clock, a silent replica declared dead
once, its task instances adopted or settled, idle replicas woken by NOTIFY, a graceful stop that
deregisters and leaves jobs to a peer, and the misconfigurations a replica refuses.

Replicas run in this process (real loop, real SQL, noop or local executor) where the test needs to
drive them step by step, and as real `dagline scheduler` processes where signals matter. Heartbeats
are on the database clock by design, so a replica is made "silent" by moving its heartbeat back in
the database, never by waiting."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from alembic import command
from click.testing import CliRunner
from sqlalchemy import select, text, update

from dagline.cli import main
from dagline.clock import FixedClock
from dagline.db import replicas
from dagline.db.engine import head_revision, migrations_config, upgrade
from dagline.db.models import backfill_t, dag_run_t, replica_t, ti_t
from dagline.executors.base import TaskKey
from dagline.executors.local import LocalExecutor
from dagline.executors.noop import NoopExecutor
from dagline.executors.try_files import log_path
from dagline.scheduler.loop import Scheduler
from dagline.scheduler.replica.liveness import ReplicaFenced
from dagline.scheduler.settings import SchedulerSettings
from dagline.store.backfills import create_backfill
from dagline.store.runs import trigger_run
from tests.helpers.dags import dag, task, write
from tests.helpers.harness import SLOW_DAG, apply, assert_invariants, events, runs, t, ti_states, tis, write_dag
from tests.helpers.polling import wait_for

NOW = "2026-03-01T00:00:00Z"
CHAIN = dag("chain", task("a", retries=1), task("b", "a", retries=1))
# every iterate() does its housekeeping (judging peers, adopting), so tests can drive it step by step
FAST = SchedulerSettings(heartbeat_interval_s=1.0, replica_timeout_s=2.0, poll_interval_s=0.05,
                         housekeeping_interval_s=1e-6)


def _jobs(db) -> dict[int, object]:
    with db.begin() as conn:
        return {r.id: r for r in conn.execute(select(replica_t))}


def _backdate(db, replica_id: int, *, heartbeat: dt.timedelta | None = None, alive_since: dt.timedelta | None = None):
    """Move a replica's heartbeat (it went silent) or the start of its alive streak back in time."""
    values = {}
    if heartbeat is not None:
        values["latest_heartbeat"] = text(f"now() - interval '{int(heartbeat.total_seconds())} seconds'")
    if alive_since is not None:
        values["alive_since"] = text(f"now() - interval '{int(alive_since.total_seconds())} seconds'")
    with db.begin() as conn:
        conn.execute(update(replica_t).where(replica_t.c.id == replica_id).values(**values))


def _long_alive(sched: Scheduler) -> None:
    """The replica has been alive for an hour (so it may judge its peers); a heartbeat makes it know it."""
    _backdate(sched.db, sched.replica_id, alive_since=dt.timedelta(hours=1))
    sched.liveness.beat()


def _abandon(sched: Scheduler) -> None:
    """The replica's process is gone (kill -9): no stop, no deregistration; only its sockets close."""
    sched.wakeup.close()
    sched._lock.release()


def _replica_running_a(db, clock, settings=None) -> Scheduler:
    """A started replica whose noop job for task `a` of the chain runs (for an hour): `a` running."""
    sched = Scheduler(db, NoopExecutor(4, clock=clock, duration_s=3600), clock=clock,
                      **({"settings": settings} if settings else {}))
    sched.start()
    sched.iterate()
    sched.iterate()
    return sched


@pytest.fixture
def chain(pg_db, tmp_path):
    apply(pg_db, write(tmp_path, CHAIN))
    return pg_db


def test_heartbeats_use_the_database_clock_so_replicas_hours_apart_never_declare_each_other_dead(chain):
    early = Scheduler(chain, NoopExecutor(1), clock=FixedClock(t("2020-01-01T00:00:00Z")), settings=FAST)
    late = Scheduler(chain, NoopExecutor(1), clock=FixedClock(t("2035-06-01T00:00:00Z")), settings=FAST)
    early.start()
    late.start()
    try:
        for sched in (early, late):
            _long_alive(sched)
        for sched in (early, late, early):
            sched.iterate()  # housekeeping: each judges its peers
        jobs = _jobs(chain)
        assert [jobs[s.replica_id].state for s in (early, late)] == ["running", "running"]
        assert events(chain, entity="scheduler", to_state="dead") == []
        with chain.begin() as conn:
            db_now = replicas.database_now(conn)
        for sched in (early, late):  # written on the database's clock, not 2020 or 2035
            assert abs((jobs[sched.replica_id].latest_heartbeat - db_now).total_seconds()) < 60
    finally:
        early.stop()
        late.stop()


def test_a_silent_replica_is_declared_dead_once_and_its_task_instances_are_adopted(chain):
    run = trigger_run(chain, "chain", now=t(NOW))
    clock = FixedClock(t(NOW))
    victim = _replica_running_a(chain, clock, FAST)
    assert ti_states(chain, run.id) == {"a": "running", "b": "none"}
    _abandon(victim)  # killed with its job; its heartbeat stops
    _backdate(chain, victim.replica_id, heartbeat=dt.timedelta(minutes=5))

    peers = [Scheduler(chain, NoopExecutor(4, clock=clock), clock=clock, settings=FAST) for _ in range(2)]
    for peer in peers:
        peer.start()
    try:
        for peer in peers:
            _long_alive(peer)
        barrier = threading.Barrier(2)
        errors = []

        def judge(peer):
            try:
                barrier.wait(10)
                peer.iterate()
            except Exception as exc:  # noqa: BLE001 - reported by the assertion below
                errors.append(exc)

        threads = [threading.Thread(target=judge, args=(peer,)) for peer in peers]
        for th in threads:
            th.start()
        for th in threads:
            th.join(30)
        assert errors == []
        dead = events(chain, entity="scheduler", to_state="dead")
        assert len(dead) == 1 and dead[0].detail.startswith(f"scheduler {victim.replica_id} ")
        assert "no heartbeat since" in dead[0].detail
        assert _jobs(chain)[victim.replica_id].state == "dead"

        adoption = [e for e in events(chain, entity="scheduler") if e.detail and " adopts " in e.detail]
        assert len(adoption) == 1  # one adopter (the other may queue the retry at once: they run side by side)
        adopter = next(p for p in peers if p.who == adoption[0].who)
        for _ in range(10):
            for peer in peers:
                peer.iterate()
        assert ti_states(chain, run.id) == {"a": "success", "b": "success"}
        # a noop job dies with its replica: the adopter found none, settled try 1 as a zombie and retried
        [zombie] = events(chain, entity="task_instance", task_id="a", to_state="up_for_retry")
        assert (zombie.who, zombie.try_number) == (adopter.who, 1) and zombie.detail.startswith("zombie: ")
        assert tis(chain, run.id)["a"].try_number == 2
    finally:
        for peer in peers:
            peer.stop()
    assert_invariants(chain)


def test_a_replica_declared_dead_while_it_still_runs_stops_before_taking_any_work(chain):
    settings = SchedulerSettings(heartbeat_interval_s=0.01, replica_timeout_s=2.0, housekeeping_interval_s=1e-6)
    stalled = Scheduler(chain, NoopExecutor(1), clock=FixedClock(t(NOW)), settings=settings)
    peer = Scheduler(chain, NoopExecutor(1), clock=FixedClock(t(NOW)), settings=settings)
    stalled.start()
    peer.start()
    try:
        _backdate(chain, stalled.replica_id, heartbeat=dt.timedelta(minutes=5))  # it stalled for 5 minutes
        _long_alive(peer)
        peer.iterate()
        assert _jobs(chain)[stalled.replica_id].state == "dead"
        trigger_run(chain, "chain", now=t(NOW))
        wait_for(stalled.liveness.heartbeat_due, "its next heartbeat to be due")
        with pytest.raises(ReplicaFenced, match="declared dead by its peers"):
            stalled.iterate()  # its heartbeat comes first: it learns it before it queues or launches anything
        assert events(chain, entity="task_instance", to_state="queued") == []
        stalled.stop()
        assert _jobs(chain)[stalled.replica_id].state == "dead"  # its stop does not bring it back
    finally:
        peer.stop()


def test_after_an_outage_a_replica_judges_no_peer_until_it_has_been_alive_for_a_whole_timeout(chain):
    quiet = Scheduler(chain, NoopExecutor(1), clock=FixedClock(t(NOW)), settings=FAST)
    judge = Scheduler(chain, NoopExecutor(1), clock=FixedClock(t(NOW)), settings=FAST)
    quiet.start()
    judge.start()
    try:
        for sched in (quiet, judge):  # the database was unreachable for 5 minutes: nobody could heartbeat
            _backdate(chain, sched.replica_id, heartbeat=dt.timedelta(minutes=5), alive_since=dt.timedelta(hours=1))
        judge.liveness.beat()  # the first heartbeat after the outage starts a new alive streak
        judge.iterate()
        assert _jobs(chain)[quiet.replica_id].state == "running"
        _long_alive(judge)  # a whole timeout later the quiet one would have had its chances
        judge.iterate()
        assert _jobs(chain)[quiet.replica_id].state == "dead"
    finally:
        judge.stop()
        _abandon(quiet)


def test_a_running_try_whose_job_is_gone_is_a_zombie_and_a_queued_one_without_trace_is_launched_as_is(
        chain, tmp_path):
    """A local-executor replica on this host ended; nothing it ran left a trace (no pid or exit file)."""
    run = trigger_run(chain, "chain", now=t(NOW))
    with chain.begin() as conn:
        gone, _ = replicas.register(conn, executor="local")
        conn.execute(update(replica_t).where(replica_t.c.id == gone).values(state="dead"))
        ids = dict(conn.execute(select(ti_t.c.task_id, ti_t.c.id).where(ti_t.c.dag_run_id == run.id)).all())
    clock = FixedClock(t(NOW))
    _replica_running_a(chain, clock).stop()
    with chain.begin() as conn:  # as the ended local replica left them: `a` running, `b` queued (try 1)
        conn.execute(update(ti_t).where(ti_t.c.id == ids["a"]).values(queued_by_replica_id=gone))
        conn.execute(update(ti_t).where(ti_t.c.id == ids["b"]).values(state="queued", try_number=1,
                                                                      queued_by_replica_id=gone))
    executor = LocalExecutor(parallelism=2, log_folder=str(tmp_path / "logs"))
    adopter = Scheduler(chain, executor, clock=clock)
    try:
        adopter.start()  # adopts at start, before it launches anything
        a, b = tis(chain, run.id)["a"], tis(chain, run.id)["b"]
        assert (a.state, a.try_number) == ("up_for_retry", 1)
        [zombie] = events(chain, entity="task_instance", ti_id=ids["a"], to_state="up_for_retry")
        assert zombie.detail == "zombie: the scheduler that ran it ended and no job of this try was found"
        assert (b.state, b.try_number, b.queued_by_replica_id) == ("queued", 1, adopter.replica_id)
        assert executor.has_work()  # b's try 1 was launched now, as try 1
        assert log_path(tmp_path / "logs", TaskKey("chain", run.run_id, "b", 1)).exists()
    finally:
        executor.end()  # no need to run Spark to the end here
        adopter.stop()


def test_a_job_timed_out_by_a_peer_is_cancelled_by_the_replica_that_runs_it(pg_db, tmp_path):
    apply(pg_db, write_dag(tmp_path, """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: slow}
spec:
  paused: false
  catchup: true
  schedule: null
  tasks:
    - {id: slow, retries: 1, retryDelay: PT1M, executionTimeout: PT10M, spark: {mainApplicationFile: s.py}}
"""))
    run = trigger_run(pg_db, "slow", now=t(NOW))
    runner_clock, peer_clock = FixedClock(t(NOW)), FixedClock(t("2026-03-01T00:10:01Z"))  # the peer is later
    runner = Scheduler(pg_db, NoopExecutor(2, clock=runner_clock, duration_s=3600), clock=runner_clock, settings=FAST)
    peer = Scheduler(pg_db, NoopExecutor(2, clock=peer_clock), clock=peer_clock, settings=FAST)
    runner.start()
    peer.start()
    try:
        runner.iterate()
        runner.iterate()
        assert ti_states(pg_db, run.id) == {"slow": "running"} and runner.executor.has_work()
        peer.iterate()  # notices first: past its executionTimeout
        [timed_out] = events(pg_db, entity="task_instance", to_state="up_for_retry")
        assert timed_out.who == peer.who and "executionTimeout" in timed_out.detail
        runner.iterate()  # its housekeeping sees the try is no longer running: it stops the job
        runner.iterate()
        assert not runner.executor.has_work()
        assert tis(pg_db, run.id)["slow"].state == "up_for_retry"  # the cancelled job's report changed nothing
    finally:
        runner.stop()
        peer.stop()


def test_a_stopped_replicas_task_instances_are_adopted_by_a_peer_at_once(chain):
    run = trigger_run(chain, "chain", now=t(NOW))
    clock = FixedClock(t(NOW))
    leaving = _replica_running_a(chain, clock)
    leaving.request_stop()
    leaving.stop()
    assert _jobs(chain)[leaving.replica_id].state == "stopped"
    assert ti_states(chain, run.id) == {"a": "running", "b": "none"}  # left running for a peer

    peer = Scheduler(chain, NoopExecutor(4, clock=clock), clock=clock)  # no staleness to wait for
    peer.run(until_idle=True)
    assert ti_states(chain, run.id) == {"a": "success", "b": "success"}
    assert tis(chain, run.id)["a"].queued_by_replica_id == peer.replica_id
    # the noop job did not outlive its replica (a local one does, see below): a zombie, retried at once
    [zombie] = events(chain, entity="task_instance", task_id="a", to_state="up_for_retry")
    assert zombie.who == peer.who and zombie.detail.startswith("zombie: the scheduler that ran it ended")
    assert [(e.task_id, e.try_number) for e in events(chain, entity="task_instance", to_state="queued")] == [
        ("a", 1), ("a", 2), ("b", 1)]  # each try launched once
    assert_invariants(chain)


def test_an_idle_replica_wakes_at_once_when_another_session_commits_a_change(chain):
    clock = FixedClock(t(NOW))
    sched = Scheduler(chain, NoopExecutor(4, clock=clock), clock=clock,
                      settings=SchedulerSettings(poll_interval_s=60.0))
    waiting = threading.Event()
    wait = sched.wakeup.wait

    def observed_wait(timeout, **kwargs):
        waiting.set()
        return wait(timeout, **kwargs)

    sched.wakeup.wait = observed_wait
    thread = threading.Thread(target=sched.run)
    thread.start()
    try:
        wait_for(waiting.is_set, "the replica to go idle")  # a NOTIFY from now on is queued for its wait
        started = time.monotonic()
        run = trigger_run(chain, "chain", now=t(NOW))  # commits, with a NOTIFY
        wait_for(lambda: runs(chain, "chain")[0]["state"] == "success", "the run to finish", timeout=30)
        assert time.monotonic() - started < 10  # far less than the 60 s poll interval
        assert sched.wakeup.reasons.get("runs", 0) >= 1  # woken by the new run alone: it only had to start it
        assert ti_states(chain, run.id) == {"a": "success", "b": "success"}
    finally:
        sched.request_stop()
        thread.join(30)
    assert not thread.is_alive()


def test_sigterm_is_a_graceful_stop_that_deregisters(chain):
    env = dict(os.environ, DAGLINE_SCHEDULER_POLL_INTERVAL_S="30")  # the stop must not wait for a poll
    proc = subprocess.Popen([sys.executable, "-m", "dagline.cli", "--db", chain.url, "scheduler", "--executor",
                             "noop"], env=env, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: any(j.pid == proc.pid for j in _jobs(chain).values()), "the replica to register")
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert time.monotonic() - started < 10
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stderr = proc.stderr.read()
        proc.stderr.close()
    [job] = [j for j in _jobs(chain).values() if j.pid == proc.pid]
    assert (job.state, job.ended_at is not None) == ("stopped", True)
    assert "stopped" in stderr


def test_a_replica_refuses_a_database_with_an_older_schema_and_says_to_upgrade(pg_db):
    with pg_db.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0001'"))
    result = CliRunner().invoke(main, ["--db", pg_db.url, "scheduler", "--executor", "noop", "--until-idle"])
    assert result.exit_code == 1
    assert "has schema revision 0001" in result.output and "run `dagline db upgrade`" in result.output
    assert _jobs(pg_db) == {}  # it never registered


def test_a_replica_timeout_shorter_than_two_heartbeats_is_refused_naming_the_variable(pg_db):
    result = CliRunner().invoke(main, ["--db", pg_db.url, "scheduler", "--executor", "noop", "--until-idle"],
                                env={"DAGLINE_SCHEDULER_REPLICA_TIMEOUT_S": "6"})
    assert result.exit_code == 2
    assert "DAGLINE_SCHEDULER_REPLICA_TIMEOUT_S" in result.output and "heartbeat_interval_s" in result.output
    assert _jobs(pg_db) == {}


def test_a_database_with_replicas_and_their_task_instances_upgrades_to_this_schema(db, tmp_path):
    """`dagline db upgrade` over a live installation of the first schema keeps replicas and owners.
    (The rows are made with today's code, then the schema is taken back to 0001 with them in it.)"""
    apply(db, write(tmp_path, CHAIN))
    run = trigger_run(db, "chain", now=t(NOW))
    with db.begin() as conn:
        job = conn.execute(text("INSERT INTO replica (hostname, pid, executor, state, started_at, "
                                "latest_heartbeat) VALUES ('h', 1, 'noop', 'running', :at, :at) RETURNING id"),
                           {"at": t(NOW)}).scalar_one()
        conn.execute(update(ti_t).where(ti_t.c.dag_run_id == run.id, ti_t.c.task_id == "a")
                     .values(state="running", try_number=1, queued_by_replica_id=job))
    cfg = migrations_config(db)
    with db.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0001")
    assert upgrade(db) == ("0001", head_revision(db))
    assert tis(db, run.id)["a"].queued_by_replica_id == job and _jobs(db)[job].state == "running"


# -- real processes and real jobs: the local executor's jobs outlive their replica -----------------

JOB = "import time\nprint('started', flush=True)\ntime.sleep(8)\nprint('done', flush=True)\n"


def _replica_process(db, logs, **env):
    env = dict(os.environ, DAGLINE_SCHEDULER_POLL_INTERVAL_S="0.1", DAGLINE_SCHEDULER_HEARTBEAT_INTERVAL_S="0.5",
               DAGLINE_SCHEDULER_REPLICA_TIMEOUT_S="2", DAGLINE_SCHEDULER_HOUSEKEEPING_INTERVAL_S="0.5", **env)
    return subprocess.Popen([sys.executable, "-m", "dagline.cli", "--db", db.url, "scheduler", "--log-folder",
                             str(logs), "--parallelism", "1"], env=env, stderr=subprocess.DEVNULL)


@pytest.mark.spark
@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_a_job_outlives_its_replica_and_a_peer_on_the_host_follows_it_to_the_end(pg_db, tmp_path, how):
    (tmp_path / "slow.py").write_text(JOB)
    apply(pg_db, write(tmp_path, SLOW_DAG))
    run = trigger_run(pg_db, "slow", now=dt.datetime.now(dt.timezone.utc))
    logs = tmp_path / "logs"
    first = _replica_process(pg_db, logs)
    second = None
    try:
        wait_for(lambda: ti_states(pg_db, run.id) == {"slow": "running"}, "the job to start", timeout=60)
        pid_file = next(logs.rglob("try-1.log.pid"))
        wait_for(lambda: "pid" in json.loads(pid_file.read_text()), "the wrapper to start the job")
        wrapper_pid = json.loads(pid_file.read_text())["wrapper_pid"]
        [first_job] = [j.id for j in _jobs(pg_db).values() if j.pid == first.pid]
        first.send_signal(getattr(signal, how))
        first.wait(30)
        os.kill(wrapper_pid, 0)  # the job's wrapper is still alive: it runs in its own session
        if how == "SIGTERM":
            assert _jobs(pg_db)[first_job].state == "stopped"  # deregistered as it left
        second = _replica_process(pg_db, logs)
        wait_for(lambda: runs(pg_db, "slow")[0]["state"] == "success", "the adopted job to finish", timeout=90)
        ti = tis(pg_db, run.id)["slow"]
        assert (ti.state, ti.try_number) == ("success", 1)  # the same try, followed to its end
        assert len(events(pg_db, entity="task_instance", to_state="queued")) == 1  # launched once
        assert ti.queued_by_replica_id != first_job
        assert _jobs(pg_db)[first_job].state == {"SIGKILL": "dead", "SIGTERM": "stopped"}[how]
        assert "done" in log_path(logs, TaskKey("slow", run.run_id, "slow", 1)).read_text()
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(30)
    assert_invariants(pg_db)



def test_a_backfill_whose_runs_a_dead_replica_finished_is_completed_by_a_peers_housekeeping(pg_db, tmp_path):
    """A replica killed between finishing a backfill's last run and marking the backfill completed (two
    transactions) leaves it `running`; any replica's housekeeping completes it."""
    # endDate: the schedule creates no runs of its own after the backfill's (which a peer would run and finish)
    apply(pg_db, write(tmp_path, dag("daily", *CHAIN["spec"]["tasks"], schedule="@daily", startDate="2026-02-01",
                                     endDate="2026-02-02")))
    create_backfill(pg_db, "daily", start=t("2026-02-01T00:00:00Z"), end=t("2026-02-02T00:00:00Z"),
                    now=t(NOW))
    with pg_db.begin() as conn:  # what the killed replica committed: every run finished
        conn.execute(update(dag_run_t).where(dag_run_t.c.backfill_id.is_not(None)).values(state="success"))
    peer = Scheduler(pg_db, NoopExecutor(1), clock=FixedClock(t(NOW)), settings=FAST)
    peer.start()
    try:
        assert peer.iterate().runs_finished == 0  # nothing for it to finish: only housekeeping can see it
    finally:
        peer.stop()
    with pg_db.begin() as conn:
        assert conn.execute(select(backfill_t.c.state)).scalars().all() == ["completed"]
