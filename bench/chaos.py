"""Chaos harness: several `dagline scheduler` replicas on one PostgreSQL, killed and restarted at random
while the database restarts once; then every promise is checked from the tables and the event log.

    python bench/chaos.py [--replicas 3] [--seconds 60] [--dags 50] [--tasks 10] [--seed 0]
                          [--signals-per-s 5] [--throwaway-cluster] [--no-db-restart] [--drain-seconds 300]

What it does, in order:
1. a database of its own (`dagline_chaos_<hex>`) in the server at $DAGLINE_TEST_POSTGRES_URL (default
   postgresql+psycopg2://postgres@127.0.0.1:5432/test), or with `--throwaway-cluster` in a private
   server it starts (`pg_cluster.ThrowawayCluster`) and deletes after; the database is dropped after;
2. with the real command: `db upgrade`, `pools set` (two tight pools), `dags apply` of DAGS DAGs of
   TASKS tasks in layers (1, 3, 3, 3...), with tight `maxActiveRuns`/`maxActiveTasks`/
   `maxActiveTisPerDag`, pools and multi-slot tasks, retries, and in every fifth DAG a task whose
   first try fails on purpose. Each DAG has an ISO-duration schedule (`PT<period>S`) whose `startDate`
   lies `backlog` intervals in the past (a backlog from the start) and whose `endDate` is the end of
   the chaos period, so runs keep coming for the whole period and then stop. Plus a signal load (unless
   `--signals-per-s 0`): DAG `sig-trigger` makes a run per `chaos.ready` signal (maxActiveRuns 2),
   DAG `sig-stream` (one run, triggered at the start) has a streaming task, a task started by each
   `chaos.model` signal and a streaming task restarted by each `chaos.validated` signal;
3. REPLICAS `python -m dagline.cli --db URL scheduler --executor noop` processes, their tasks lasting
   `DAGLINE_NOOP_DURATION` (default 0.05-0.5 s, seeded); a noop job dies with its replica, so a
   killed replica leaves zombies behind for the others to settle;
4. for SECONDS seconds, at random gaps, act on a random replica: SIGKILL it (and start a new one in
   its place a moment later), or SIGTERM it (a fifth of the time: it stops gracefully and is
   replaced), or freeze it (SIGSTOP, then SIGCONT after 0.5-2x the replica timeout: a long pause,
   after which its peers have usually declared it dead, so it must stop without launching anything;
   a frozen replica that exits after it thaws is counted as `fenced_exits`); restart PostgreSQL once (the throwaway
   cluster with `pg_ctl restart`, else the machine's with `pg_ctlcluster ... restart`, or not at all
   with `--no-db-restart`); manual triggers every few seconds; signals at `signals_per_s` (each with
   an id: a send the database refused during its restart is sent again with the same id, so it is
   stored once); two backfills (`--reprocess
   completed`, replacing finished runs) and a pool shrunk then grown again. A replica that exits on
   its own is counted as a crash (`replica_crashes`) and replaced, as a Deployment would;
5. stop the chaos, stop the `sig-stream` run (`dagline runs stop`), keep REPLICAS replicas running until
   every run is finished, every signal handled and no DAG has an interval left (at most
   `--drain-seconds`), stop them with SIGTERM;
6. run every check of `dagline.testing.audit` (`drained_violations`) and print one JSON object: the
   violation counts, and what helps read them (kills, freezes, zombies settled, retries, replicas
   declared dead, the signal counts: `signals_sent`, `signals_stored`, `signal_runs` (must equal the
   `chaos.ready` signals), `signal_starts` (tries started by `chaos.model` signals), `signal_actions`,
   and the signal checks (`duplicate_signal_actions`, `signal_order_violations`,
   `signal_trigger_violations`, `unhandled_signals`, `stuck_signals`), plus `signals_lost` and
   `signals_doubled` counted from the harness's own list of what it sent; `longest_quiet_s`: the
   longest time no task instance succeeded, which shows stalls such as the database restart or a
   frozen replica holding locks). `actions.log` in the log folder says what the harness did when
   (same clock and format as the replica logs).

When a check fails (or with `--keep`), the database is kept for a post-mortem and stderr says how
to reach it (a throwaway cluster is stopped, its folder kept, with the command that starts it).

Every violation count must be 0; the exit status is 1 otherwise. Replica logs (one file per replica
process) stay in a temporary folder whose path is printed on stderr. Not a test (see
tests/integration/test_chaos.py for the short version that is); the harness lives in this module
(`ChaosConfig`, `run_chaos`) so both share it.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import datetime as dt
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import PG_URL  # noqa: E402
from pg_cluster import MachineServer, ThrowawayCluster, wait_until_accepting  # noqa: E402
from sqlalchemy import create_engine, func, select, text  # noqa: E402

from dagline.db.engine import Database, normalize_url  # noqa: E402
from dagline.db.models import dag_run_t, dag_t, event_t, signal_action_t, signal_t, ti_t  # noqa: E402
from dagline.store.signals import send_signal  # noqa: E402
from dagline.testing import audit  # noqa: E402

POOLS = {"alpha": 8, "beta": 8}


@dataclasses.dataclass
class ChaosConfig:
    replicas: int = 3
    seconds: float = 60.0
    dags: int = 50
    tasks: int = 10
    seed: int = 0
    period_s: int = 30                 # every DAG's schedule: PT<period_s>S
    backlog: int = 4                   # intervals per DAG already due when the replicas start
    parallelism: int = 16              # of each replica's noop executor
    task_duration: str = "0.05-0.5"    # DAGLINE_NOOP_DURATION
    kill_gap_s: tuple[float, float] = (2.0, 6.0)
    restart_after_s: tuple[float, float] = (0.2, 3.0)
    sigterm_share: float = 0.2
    freeze_share: float = 0.15
    db_restart: bool = True
    throwaway_cluster: bool = False
    trigger_every_s: float = 4.0
    signals_per_s: float = 5.0         # 0: no signal load
    drain_s: float = 300.0
    replica_env: dict[str, str] = dataclasses.field(default_factory=lambda: {
        "DAGLINE_SCHEDULER_POLL_INTERVAL_S": "0.2",
        "DAGLINE_SCHEDULER_HEARTBEAT_INTERVAL_S": "1",
        "DAGLINE_SCHEDULER_HOUSEKEEPING_INTERVAL_S": "2",
        "DAGLINE_SCHEDULER_REPLICA_TIMEOUT_S": "6",
    })
    log_dir: str | None = None
    progress: bool = True
    keep: bool = False                 # keep the database (always kept when a check fails)


# -- the DAGs ---------------------------------------------------------------------------------------


def _layers(tasks: int) -> list[list[int]]:
    """Task indexes in layers of 1, 3, 3, 3...: every task depends on the whole layer before it."""
    layers, i = [[0]], 1
    while i < tasks:
        layers.append(list(range(i, min(i + 3, tasks))))
        i += 3
    return layers


def chaos_dag_yaml(index: int, tasks: int, *, period_s: int, start: dt.datetime, end: dt.datetime) -> str:
    layers = _layers(tasks)
    lines = []
    failing = tasks // 2 if index % 5 == 0 else None
    for depth, layer in enumerate(layers):
        for t in layer:
            fields = [f"id: t{t}"]
            if depth:
                fields.append(f"upstream: [{', '.join(f't{u}' for u in layers[depth - 1])}]")
            if t % 3 == 1:
                fields.append("pool: alpha")
            elif t % 3 == 2:
                fields.append("pool: beta")
                if t % 4 == 2:
                    fields.append("poolSlots: 2")
            if t == 0:
                fields.append("maxActiveTisPerDag: 1")
            if t == tasks - 1 and depth:
                fields.append("triggerRule: all_done")
            conf = ""
            if t == failing:
                conf = ", conf: {dagline.noop.outcome: \"{{ 'failed' if try_number == 1 else 'success' }}\"}"
            fields.append(f"spark: {{mainApplicationFile: job.py{conf}}}")
            lines.append("    - {" + ", ".join(fields) + "}")
    return (
        "apiVersion: dagline.io/v1alpha1\nkind: DAG\n"
        f"metadata: {{name: chaos-{index:02d}}}\n"
        "spec:\n"
        "  paused: false\n"
        "  catchup: true\n"
        f"  schedule: PT{period_s}S\n"
        f"  startDate: '{start:%Y-%m-%dT%H:%M:%S}'\n"
        f"  endDate: '{end:%Y-%m-%dT%H:%M:%S}'\n"
        "  maxActiveRuns: 3\n"
        "  maxActiveTasks: 4\n"
        f"  defaults: {{retries: 2, retryDelay: PT1S, priorityWeight: {index % 3 + 1}}}\n"
        "  tasks:\n" + "\n".join(lines) + "\n"
    )


SIGNAL_DAGS = """\
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: sig-trigger}
spec:
  schedule: null
  paused: false
  maxActiveRuns: 2
  triggers: [{signal: chaos.ready}]
  defaults: {retries: 3, retryDelay: PT1S}
  tasks:
    - {id: a, spark: {mainApplicationFile: job.py, arguments: ["{{ conf.i }}"]}}
    - {id: b, upstream: [a], spark: {mainApplicationFile: job.py}}
---
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: sig-stream}
spec:
  schedule: null
  paused: false
  defaults: {retries: 3, retryDelay: PT1S}
  tasks:
    - {id: train, mode: streaming, retries: 100, stopGracePeriod: PT2S, spark: {mainApplicationFile: job.py}}
    - id: evaluate
      on: [{signal: chaos.model, action: start, handling: each}]
      spark: {mainApplicationFile: job.py, arguments: ["{{ signal.value.i }}"]}
    - id: serve
      mode: streaming
      retries: 100
      stopGracePeriod: PT2S
      on: [{signal: chaos.validated, action: restart}]
      spark: {mainApplicationFile: job.py, arguments: ["{{ signal.value.i if signal else -1 }}"]}
"""
SIGNAL_KEYS = ("chaos.ready", "chaos.model", "chaos.model", "chaos.model", "chaos.validated")


# -- replicas -------------------------------------------------------------------------------------


class Replica:
    """One slot of the replica set: the process now filling it, and what happened to the earlier ones."""

    def __init__(self, slot: int, harness: Harness):
        self.slot = slot
        self.harness = harness
        self.generation = 0
        self.process: subprocess.Popen | None = None
        self.log_path: str | None = None
        self.stopping_since: float | None = None  # SIGTERM sent, waiting for the exit
        self.restart_at: float | None = None       # empty slot: start a replica at this time
        self.frozen_until: float | None = None     # SIGSTOPped until then
        self.thawed = False                        # this process was frozen and resumed

    def start(self) -> None:
        self.generation += 1
        self.harness.note(f"start replica {self.slot} generation {self.generation}")
        self.log_path = os.path.join(self.harness.log_dir, f"replica-{self.slot}-{self.generation:03d}.log")
        log = open(self.log_path, "w")  # noqa: SIM115 - handed to the child
        self.process = subprocess.Popen(
            [sys.executable, "-m", "dagline.cli", "--db", self.harness.url, "scheduler", "--executor", "noop",
             "--parallelism", str(self.harness.config.parallelism)],
            env=self.harness.replica_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.restart_at = None
        self.stopping_since = None
        self.frozen_until = None
        self.thawed = False

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)
        self.process = None

    def freeze(self, seconds: float) -> None:
        self.process.send_signal(signal.SIGSTOP)
        self.frozen_until = time.monotonic() + seconds

    def thaw(self) -> None:
        self.harness.note(f"thaw replica {self.slot} (pid {self.process.pid})")
        self.process.send_signal(signal.SIGCONT)
        self.frozen_until = None
        self.thawed = True

    def terminate(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.stopping_since = time.monotonic()

    def tail(self, lines: int = 3) -> list[str]:
        try:
            with open(self.log_path) as fh:
                return [line.rstrip() for line in fh.readlines()[-lines:]]
        except OSError:
            return []


# -- the harness ----------------------------------------------------------------------------------


class Harness:
    def __init__(self, config: ChaosConfig, url: str | None = None):
        self.config = config
        self.rng = random.Random(config.seed)
        self.base_url = normalize_url(url or PG_URL)
        self.log_dir = config.log_dir or tempfile.mkdtemp(prefix="dagline-chaos-")
        self.server = None
        self.db_name = f"dagline_chaos_{uuid.uuid4().hex[:8]}"
        self.url = ""
        self.db: Database | None = None
        self.replicas: list[Replica] = []
        self.cli_jobs: list[tuple[str, subprocess.Popen]] = []
        self.counts = {"kills": 0, "sigterms": 0, "sigterm_timeouts": 0, "freezes": 0, "fenced_exits": 0,
                       "db_restarts": 0, "replica_crashes": 0, "triggers": 0, "cli_failures": 0,
                       "signal_send_retries": 0}
        self.signals_sent: list[tuple[str, str, dict]] = []  # (key, id, value), each stored once
        self.signals_unsent: list[tuple[str, str, dict]] = []  # refused (database restarting): sent again
        self.stream_run: str | None = None
        self.kept: str | None = None
        self.crashes: list[dict] = []
        self.first_kill_at: dt.datetime | None = None
        self.replica_env = {**os.environ, **config.replica_env, "DAGLINE_NOOP_DURATION": config.task_duration,
                            "DAGLINE_NOOP_SEED": str(config.seed), "PYTHONUNBUFFERED": "1"}

    def say(self, message: str) -> None:
        if self.config.progress:
            print(f"[chaos] {message}", file=sys.stderr, flush=True)

    def note(self, message: str) -> None:
        """One line in `actions.log` (wall-clock UTC, as the replica logs): what the harness did when."""
        with open(os.path.join(self.log_dir, "actions.log"), "a") as fh:
            fh.write(f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M:%S,%f} {message}\n")

    # -- set-up and tear-down ---

    def set_up(self) -> None:
        if self.config.throwaway_cluster:
            self.server = ThrowawayCluster().start()
            self.base_url = self.server.url
            wait_until_accepting(self.base_url)
        else:
            self.server = MachineServer(self.base_url)
        admin = create_engine(self.base_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{self.db_name}"'))
        admin.dispose()
        self.url = self.base_url.rsplit("/", 1)[0] + f"/{self.db_name}"
        self.db = Database(self.url)
        self.cli("db", "upgrade")
        for name, slots in POOLS.items():
            self.cli("pools", "set", name, str(slots))
        folder = os.path.join(self.log_dir, "dags")
        os.makedirs(folder, exist_ok=True)
        now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None, microsecond=0)
        period = dt.timedelta(seconds=self.config.period_s)
        self.start_date = now - self.config.backlog * period
        end = now + dt.timedelta(seconds=self.config.seconds) - period
        for i in range(self.config.dags):
            with open(os.path.join(folder, f"chaos-{i:02d}.yaml"), "w") as fh:
                fh.write(chaos_dag_yaml(i, self.config.tasks, period_s=self.config.period_s,
                                        start=self.start_date, end=max(end, self.start_date)))
        if self.config.signals_per_s > 0:
            with open(os.path.join(folder, "signals.yaml"), "w") as fh:
                fh.write(SIGNAL_DAGS)
        self.cli("dags", "apply", folder)
        if self.config.signals_per_s > 0:
            self.stream_run = self.cli("dags", "trigger", "sig-stream").strip()

    def tear_down(self) -> None:
        for replica in self.replicas:
            if replica.alive:
                replica.kill()
        for _, job in self.cli_jobs:
            if job.poll() is None:
                job.kill()
        if self.db is not None:
            self.db.dispose()
        if self.kept is not None:
            self._keep()
            return
        try:
            admin = create_engine(self.base_url, isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)'))
            admin.dispose()
        finally:
            if self.server is not None:
                self.server.close()

    def _keep(self) -> None:
        where = f"database kept for a post-mortem: {self.kept}"
        if isinstance(self.server, ThrowawayCluster):
            where += f"\n[chaos] (throwaway cluster stopped; start it again with: {self.server.stop_keeping()})"
        print(f"[chaos] {where}", file=sys.stderr, flush=True)

    def cli(self, *args: str) -> str:
        result = subprocess.run([sys.executable, "-m", "dagline.cli", "--db", self.url, *args],
                                capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"dagline {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
        return result.stdout

    def cli_in_background(self, what: str, *args: str) -> None:
        log = open(os.path.join(self.log_dir, "cli.log"), "a")  # noqa: SIM115 - handed to the child
        log.write(f"--- {what}: dagline {' '.join(args)}\n")
        log.flush()
        job = subprocess.Popen([sys.executable, "-m", "dagline.cli", "--db", self.url, *args],
                               stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.cli_jobs.append((what, job))

    def _reap_cli_jobs(self) -> None:
        still = []
        for what, job in self.cli_jobs:
            code = job.poll()
            if code is None:
                still.append((what, job))
            elif code != 0:
                self.counts["cli_failures"] += 1  # e.g. during the database restart: reported, not fatal
        self.cli_jobs = still

    # -- the chaos ---

    def _plan(self) -> list[tuple[float, str]]:
        """Timed actions over the chaos period, drawn from the seed."""
        c, rng = self.config, self.rng
        plan: list[tuple[float, str]] = []
        t = rng.uniform(*c.kill_gap_s)
        while t < c.seconds:
            draw = rng.random()
            plan.append((t, "sigterm" if draw < c.sigterm_share else
                         "freeze" if draw < c.sigterm_share + c.freeze_share else "sigkill"))
            t += rng.uniform(*c.kill_gap_s)
        t = c.trigger_every_s
        while t < c.seconds:
            plan.append((t, "trigger"))
            t += c.trigger_every_s
        if c.db_restart and getattr(self.server, "restartable", True):
            plan.append((rng.uniform(0.3, 0.6) * c.seconds, "db_restart"))
        plan += [(0.6 * c.seconds, "backfill"), (0.45 * c.seconds, "pool_shrink"), (0.7 * c.seconds, "pool_grow")]
        return sorted(plan)

    def _act(self, action: str) -> None:
        c, rng = self.config, self.rng
        if action in ("sigkill", "sigterm", "freeze"):
            candidates = [r for r in self.replicas if r.alive and r.stopping_since is None and r.frozen_until is None]
            if not candidates:
                return
            replica = rng.choice(candidates)
            self.note(f"{action} replica {replica.slot} (pid {replica.process.pid}, {replica.log_path})")
            if action == "sigkill":
                replica.kill()
                self.counts["kills"] += 1
                if self.first_kill_at is None:
                    self.first_kill_at = dt.datetime.now(dt.timezone.utc)
                replica.restart_at = time.monotonic() + rng.uniform(*c.restart_after_s)
            elif action == "freeze":
                timeout = float(self.replica_env.get("DAGLINE_SCHEDULER_REPLICA_TIMEOUT_S", "30"))
                replica.freeze(rng.uniform(0.5, 2.0) * timeout)
                self.counts["freezes"] += 1
            else:
                replica.terminate()
                self.counts["sigterms"] += 1
        elif action == "db_restart":
            self.say("restarting PostgreSQL")
            self.note("restarting PostgreSQL")
            self.server.restart()
            self.note("PostgreSQL restarted")
            self.counts["db_restarts"] += 1
        elif action == "trigger":
            self.cli_in_background("trigger", "dags", "trigger", f"chaos-{rng.randrange(c.dags):02d}")
            self.counts["triggers"] += 1
        elif action == "backfill":
            period = dt.timedelta(seconds=c.period_s)
            end = self.start_date + 2 * period
            for dag in sorted({0, min(1, c.dags - 1)}):
                self.cli_in_background("backfill", "backfill", "create", f"chaos-{dag:02d}",
                                       "--start", f"{self.start_date:%Y-%m-%dT%H:%M:%S}",
                                       "--end", f"{end:%Y-%m-%dT%H:%M:%S}", "--reprocess", "completed",
                                       "--max-active-runs", "1")
        elif action == "pool_shrink":
            self.cli_in_background("pool", "pools", "set", "beta", str(POOLS["beta"] // 2))
        elif action == "pool_grow":
            self.cli_in_background("pool", "pools", "set", "beta", str(POOLS["beta"]))

    def _tend_replicas(self) -> None:
        """Start replicas due to start, finish SIGTERMs, and replace replicas that exited on their own."""
        now = time.monotonic()
        for replica in self.replicas:
            if replica.process is None:
                if replica.restart_at is not None and now >= replica.restart_at:
                    replica.start()
                continue
            if replica.frozen_until is not None:
                if now >= replica.frozen_until:
                    replica.thaw()
                continue
            code = replica.process.poll()
            if replica.stopping_since is not None:
                if code is None and now - replica.stopping_since > 30:
                    self.counts["sigterm_timeouts"] += 1
                    replica.kill()
                elif code is not None:
                    replica.process = None
                if replica.process is None:
                    replica.restart_at = now + self.rng.uniform(*self.config.restart_after_s)
                    replica.stopping_since = None
                continue
            if code is not None and replica.thawed and any("declared dead" in line for line in replica.tail(5)):
                self.counts["fenced_exits"] += 1  # declared dead while frozen: it must stop
                replica.process = None
                replica.restart_at = now + self.rng.uniform(*self.config.restart_after_s)
            elif code is not None:
                self.counts["replica_crashes"] += 1
                self.crashes.append({"log": replica.log_path, "exit": code, "tail": replica.tail()})
                self.say(f"replica {replica.slot} exited on its own ({code}); see {replica.log_path}")
                replica.process = None
                replica.restart_at = now + 1.0

    def _progress(self) -> dict:
        with self.db.engine.connect() as conn:
            runs = dict(conn.execute(select(dag_run_t.c.state, func.count()).group_by(dag_run_t.c.state)).all())
            tis = dict(conn.execute(select(ti_t.c.state, func.count()).group_by(ti_t.c.state)).all())
            due = conn.execute(select(func.count()).select_from(dag_t).where(
                dag_t.c.is_active.is_(True), dag_t.c.next_dagrun.is_not(None))).scalar_one()
            unhandled = conn.execute(select(func.count()).select_from(signal_t).where(
                signal_t.c.handled_at.is_(None))).scalar_one()
        return {"runs": runs, "tis": tis, "dags_with_intervals_left": due, "unhandled_signals": unhandled}

    def _safe_progress(self) -> dict | None:
        try:
            return self._progress()
        except Exception:  # noqa: BLE001 - the database may be restarting: ask again later
            return None

    def _report(self, elapsed: float, progress: dict | None) -> None:
        if progress is None:
            self.say(f"{elapsed:5.0f}s database not reachable")
            return
        runs, tis = progress["runs"], progress["tis"]
        self.say(f"{elapsed:5.0f}s runs {runs.get('success', 0)} ok {runs.get('failed', 0)} failed "
                 f"{runs.get('running', 0)} running {runs.get('queued', 0)} queued; "
                 f"tis {tis.get('success', 0)} ok {tis.get('queued', 0) + tis.get('running', 0)} active; "
                 f"kills {self.counts['kills']} sigterms {self.counts['sigterms']} "
                 f"crashes {self.counts['replica_crashes']}")

    def run(self) -> dict:
        c = self.config
        self.say(f"replica logs in {self.log_dir}")
        self.set_up()
        self.replicas = [Replica(i, self) for i in range(c.replicas)]
        for replica in self.replicas:
            replica.start()
        if c.db_restart and not getattr(self.server, "restartable", True):
            self.say(f"not restarting PostgreSQL: {self.base_url} is not a local cluster (use --throwaway-cluster)")
        plan = self._plan()
        began = time.monotonic()
        last_report = began
        while (elapsed := time.monotonic() - began) < c.seconds:
            while plan and plan[0][0] <= elapsed:
                self._act(plan.pop(0)[1])
            self._send_signals(elapsed)
            self._tend_replicas()
            self._reap_cli_jobs()
            if time.monotonic() - last_report >= 10:
                last_report = time.monotonic()
                self._report(elapsed, self._safe_progress())
            time.sleep(0.05)
        chaos_s = time.monotonic() - began
        self.say("chaos over: draining")
        drained, drain_began = False, time.monotonic()
        while self.signals_unsent and time.monotonic() - drain_began < 60:
            self._send_signals(None)
            time.sleep(0.2)
        if self.stream_run is not None:
            self.cli_in_background("stop the streaming run", "runs", "stop", self.stream_run)
        for replica in self.replicas:  # every slot filled again, no more killing
            if replica.process is None:
                replica.restart_at = time.monotonic()
        while time.monotonic() - drain_began < c.drain_s:
            self._tend_replicas()
            self._reap_cli_jobs()
            progress = self._safe_progress()
            if progress is not None and not self.cli_jobs and _is_drained(progress):
                drained = True
                break
            if time.monotonic() - last_report >= 10:
                last_report = time.monotonic()
                self._report(time.monotonic() - began, progress)
            time.sleep(0.25)
        drain_s = time.monotonic() - drain_began
        self._stop_replicas()
        return self._result(chaos_s, drain_s, drained)

    def _send_signals(self, elapsed: float | None) -> None:
        """Send the signals due by `elapsed` seconds (None: only those refused before), each with an id."""
        c = self.config
        if c.signals_per_s <= 0:
            return
        if elapsed is not None:
            due = int(elapsed * c.signals_per_s)
            while len(self.signals_sent) + len(self.signals_unsent) < due:
                i = len(self.signals_sent) + len(self.signals_unsent)
                self.signals_unsent.append((SIGNAL_KEYS[i % len(SIGNAL_KEYS)], f"chaos-{i}", {"i": i}))
        still = []
        for key, sender_id, value in self.signals_unsent:
            try:
                with self.db.begin() as conn:
                    send_signal(conn, key, value, sender_id=sender_id, source="chaos",
                                now=dt.datetime.now(dt.timezone.utc))
                self.signals_sent.append((key, sender_id, value))
            except Exception:  # noqa: BLE001 - the database is restarting: the same id again later
                self.counts["signal_send_retries"] += 1
                still.append((key, sender_id, value))
        self.signals_unsent = still

    def _signal_counts(self, conn) -> dict:
        if self.config.signals_per_s <= 0:
            return {}
        stored = conn.execute(select(signal_t.c.key, signal_t.c.sender_id, signal_t.c.seq)
                              .where(signal_t.c.source == "chaos")).all()
        by_id = collections.Counter(r.sender_id for r in stored)
        sent_ids = {sender_id for _, sender_id, _ in self.signals_sent}
        ready = {r.seq for r in stored if r.key == "chaos.ready"}
        signal_runs = conn.execute(select(dag_run_t.c.run_id).where(dag_run_t.c.dag_id == "sig-trigger")).scalars()
        run_seqs = collections.Counter(int(run_id.split("__")[1]) for run_id in signal_runs)
        actions = conn.execute(select(func.count()).select_from(signal_action_t)).scalar_one()
        starts = conn.execute(select(func.count()).select_from(signal_action_t).where(
            signal_action_t.c.action == "start", signal_action_t.c.status == "done")).scalar_one()
        return {
            "signals_sent": len(self.signals_sent), "signals_stored": len(stored),
            "signals_unsent": len(self.signals_unsent), "signal_send_retries": self.counts["signal_send_retries"],
            "signal_runs": sum(run_seqs.values()), "signal_starts": starts, "signal_actions": actions,
            # what the harness sent but the database does not have, or has twice; a chaos.ready
            # signal without exactly one run
            "signals_lost": len(sent_ids - set(by_id)) + sum(1 for seq in ready if run_seqs[seq] != 1),
            "signals_doubled": sum(1 for n in by_id.values() if n > 1) + sum(1 for n in run_seqs.values() if n > 1),
        }

    def _stop_replicas(self) -> None:
        for replica in self.replicas:
            if replica.frozen_until is not None:
                replica.thaw()
        for replica in self.replicas:
            if replica.alive:
                replica.process.send_signal(signal.SIGTERM)
        for replica in self.replicas:
            if replica.process is not None:
                try:
                    replica.process.wait(30)
                except subprocess.TimeoutExpired:
                    self.counts["sigterm_timeouts"] += 1
                    replica.kill()

    def _result(self, chaos_s: float, drain_s: float, drained: bool) -> dict:
        now = dt.datetime.now(dt.timezone.utc)
        progress = self._progress()
        runs, tis = progress["runs"], progress["tis"]
        with self.db.engine.connect() as conn:
            found = audit.drained_violations(conn, now)  # every check the audit has, each a count below
            after_kill = 0
            if self.first_kill_at is not None:
                after_kill = conn.execute(select(func.count()).select_from(dag_run_t).where(
                    dag_run_t.c.state == "success", dag_run_t.c.end_date > self.first_kill_at)).scalar_one()
            ti_events = select(func.count()).select_from(event_t).where(event_t.c.entity == "task_instance")
            retries = conn.execute(ti_events.where(event_t.c.to_state == "up_for_retry")).scalar_one()
            zombies = conn.execute(ti_events.where(event_t.c.detail.ilike("%zombie%"))).scalar_one()
            declared_dead = conn.execute(select(func.count()).select_from(event_t).where(
                event_t.c.entity == "scheduler", event_t.c.to_state == "dead")).scalar_one()
            stamps = [r[0] for r in conn.execute(select(event_t.c.at).where(
                event_t.c.entity == "task_instance", event_t.c.to_state == "success").order_by(event_t.c.at))]
            gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(stamps)]
            longest_quiet = max(gaps) if gaps else None
            signal_counts = self._signal_counts(conn)
            failed_why = [{"ti_id": r.ti_id, "task_id": r.task_id, "try_number": r.try_number, "detail": r.detail}
                          for r in conn.execute(ti_events.with_only_columns(
                              event_t.c.ti_id, event_t.c.task_id, event_t.c.try_number, event_t.c.detail)
                              .where(event_t.c.to_state == "failed").order_by(event_t.c.id).limit(3))]
        result = {
            "replicas": self.config.replicas, "seconds": round(chaos_s, 1), "kills": self.counts["kills"],
            "sigterms": self.counts["sigterms"], "db_restarts": self.counts["db_restarts"],
            "freezes": self.counts["freezes"], "fenced_exits": self.counts["fenced_exits"],
            "replica_crashes": self.counts["replica_crashes"], "sigterm_timeouts": self.counts["sigterm_timeouts"],
            "runs": sum(runs.values()), "runs_succeeded": runs.get("success", 0), "runs_failed": runs.get("failed", 0),
            "runs_overridden": runs.get("overridden", 0), "runs_succeeded_after_first_kill": after_kill,
            "tis": sum(tis.values()), "tis_succeeded": tis.get("success", 0), "tis_failed": tis.get("failed", 0),
            "retries": retries, "zombies": zombies, "replicas_declared_dead": declared_dead,
            "triggers": self.counts["triggers"], "cli_failures": self.counts["cli_failures"],
            **signal_counts,
            **{name: len(rows) for name, rows in found.items()},
            "violation_checks": sorted([*found, *(["signals_lost", "signals_doubled"] if signal_counts else [])]),
            "drained": drained, "drain_s": round(drain_s, 1),
            "tis_per_s": round(tis.get("success", 0) / (chaos_s + drain_s), 1),
            "longest_quiet_s": round(longest_quiet, 1) if longest_quiet is not None else None,
        }
        samples = {name: rows[:5] for name, rows in found.items() if rows}
        if samples:
            result["samples"] = samples
        if failed_why:
            result["failed_samples"] = failed_why
        if self.crashes:
            result["crash_samples"] = self.crashes[:3]
        result["log_dir"] = self.log_dir
        if samples or self.config.keep:
            self.kept = self.url
        return result


def _is_drained(progress: dict) -> bool:
    runs = progress["runs"]
    return (runs.get("queued", 0) == 0 and runs.get("running", 0) == 0 and progress["dags_with_intervals_left"] == 0
            and progress["unhandled_signals"] == 0)


def violation_count(result: dict) -> int:
    return sum(result[name] for name in result["violation_checks"])


def run_chaos(config: ChaosConfig, url: str | None = None) -> dict:
    """Run the whole harness (set up, chaos, drain, audit, tear down) and return its JSON result."""
    harness = Harness(config, url)
    try:
        return harness.run()
    finally:
        harness.tear_down()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--dags", type=int, default=50)
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--period", type=int, default=30, help="seconds between a DAG's scheduled runs")
    parser.add_argument("--backlog", type=int, default=4, help="intervals per DAG already due at the start")
    parser.add_argument("--task-duration", default="0.05-0.5", help="seconds a noop task takes (a range)")
    parser.add_argument("--parallelism", type=int, default=16, help="noop tasks at once per replica")
    parser.add_argument("--signals-per-s", type=float, default=5.0, help="signal load (0: none)")
    parser.add_argument("--throwaway-cluster", action="store_true",
                        help="start a private PostgreSQL server (restarted instead of the machine's)")
    parser.add_argument("--no-db-restart", action="store_true")
    parser.add_argument("--drain-seconds", type=float, default=300.0)
    parser.add_argument("--keep", action="store_true", help="keep the database (kept anyway when a check fails)")
    args = parser.parse_args()
    config = ChaosConfig(
        replicas=args.replicas, seconds=args.seconds, dags=args.dags, tasks=args.tasks, seed=args.seed,
        period_s=args.period, backlog=args.backlog, task_duration=args.task_duration,
        parallelism=args.parallelism, throwaway_cluster=args.throwaway_cluster, db_restart=not args.no_db_restart,
        drain_s=args.drain_seconds, keep=args.keep, signals_per_s=args.signals_per_s,
    )
    result = run_chaos(config)
    print(json.dumps(result, default=str))
    sys.exit(1 if violation_count(result) else 0)


if __name__ == "__main__":
    main()
