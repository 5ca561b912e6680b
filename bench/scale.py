"""dagline at scale: reads against a large history, and run creation at a tick with many DAGs (issue 32).

    python bench/scale.py [--db postgres|sqlite] [--runs 0,100000] [--dags 1000] [--tasks 10] [--repeat 5]

For each history size in `--runs` (a fresh database each time), seeds that many finished runs with
`--tasks` task instances each, set-based (one INSERT ... SELECT per table: generate_series on
PostgreSQL, a recursive CTE on SQLite), spread over 10 DAGs, then measures (median and max of
`--repeat`, milliseconds, in-process):
- `runs_list_ms` (`runs list DAG --limit 20`), `runs_grid_ms` (`runs grid DAG`: 30 runs and their
  task states), `dag_list_ms` (the DAG list with each DAG's last run), `metrics_ms` (one /metrics read of
  the database gauges), `grid_page_ms` (GET /dags/D/grid?runs=1000: query and render),
  `timeline_page_ms`, `older_page_ms` (the grid page 25 runs back through `?before=`),
  `api_signals_ms` (GET /api/v1/signals); and for a wide DAG of 10,000 runs x 50 tasks seeded beside
  them (fewer runs when `--runs` is smaller), `wide_grid_page_ms` (its grid page: 25 runs x 50 tasks),
  `wide_older_page_ms` (100 runs back) and `wide_grid_1000_ms` (1,000 runs x 50 tasks);
- `idle_pass_ms`: one loop pass of a replica with nothing to do;
- `clean`: `db clean` of the oldest half of one DAG's history: runs deleted per second and the batches.
With `--passes N` the reads are measured N times over the same seeded history (one line each, `clean` in
the last): seeding a million runs once, three passes give min/median/max of three.
Then, with `--dags N` (0: skip), on a fresh database: `apply_s` (`dags apply` of a folder of N hourly
one-task DAGs) and the tick: all N due at the same instant, one replica (in-process, a clock that starts
at the tick and runs with the wall clock): the SQL statements per DAG applied and per run created (the
load-independent cost), `delay_s` of every run (created_at minus run_after:
p50/p99/max), `runs_per_s`, and the process's peak RSS.
With `--replicas 1,3` (PostgreSQL), for each DAG count in `--dags` and each replica count, on a fresh
database: `apply_s` (`dags apply` of the folder) and the tick with that many replica processes
(`--replica`, below), started before the tick and idle until it: `startup_s` (spawn to every replica
registered and idle), `delay_s` of every run (p50/p99/max, seconds after the tick: the replicas'
clock reaches the tick at one wall instant), the runs created by each replica, `duplicates` (runs
sharing a DAG and logical date: must be 0), each replica's resident memory once the runs are made
(`rss_mib`, and its peak `hwm_mib`), and then, with nothing due, `idle_cpu_s_per_min` (user + system
CPU of each replica over `--idle-s` seconds, per minute). Prints one JSON line per measurement set, and
the load average beside the tick's figures. Not a test: figures depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from common import chain_dag_yaml, fresh_database, percentiles, running_replicas, stop_processes  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from sqlalchemy import event, func, select, text  # noqa: E402

from dagline.api import ApiSettings, create_app  # noqa: E402
from dagline.clock import FixedClock, ShiftedClock  # noqa: E402
from dagline.db.engine import Database  # noqa: E402
from dagline.db.models import dag_run_t, dag_t, event_t  # noqa: E402
from dagline.executors.noop import NoopExecutor  # noqa: E402
from dagline.scheduler.loop import Scheduler  # noqa: E402
from dagline.spec import load_dag_paths  # noqa: E402
from dagline.store import pages  # noqa: E402
from dagline.store.dags import apply_dags  # noqa: E402
from dagline.store.read_models import list_runs, metric_figures, task_states  # noqa: E402

HISTORY_DAGS = 10
WIDE_RUNS, WIDE_TASKS = 10_000, 50  # the grid page: 10,000 runs x 50 tasks
START = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)


APPLY_SPLIT: dict[str, float] = {}  # the latest apply's loading (parsing, validating) and storing seconds


def apply_folder(db, texts: dict[str, str], now: dt.datetime) -> float:
    """`dags apply` of a folder holding `texts`; returns the seconds it took (loading and storing; each
    kept in APPLY_SPLIT)."""
    with tempfile.TemporaryDirectory(prefix="dagline-scale-") as folder:
        for name, body in texts.items():
            with open(os.path.join(folder, name), "w") as fh:
                fh.write(body)
        began = time.perf_counter()
        loaded = load_dag_paths([folder])
        parsed = time.perf_counter()
        apply_dags(db, loaded, now=now)
        APPLY_SPLIT.update(load_s=round(parsed - began, 2), store_s=round(time.perf_counter() - parsed, 2))
        return time.perf_counter() - began


def seed_history(db, runs: int, tasks: int) -> float:
    """`runs` finished hourly runs (and `tasks` task instances each) over HISTORY_DAGS paused DAGs, and
    beside them a wide DAG of up to WIDE_RUNS runs of WIDE_TASKS task instances (the grid page's worst case)."""
    texts = {f"h{i}.yaml": chain_dag_yaml(f"hist-{i}", tasks, schedule="@hourly", start="2020-01-01")
             .replace("paused: false", "paused: true") for i in range(HISTORY_DAGS)}
    texts["wide.yaml"] = (chain_dag_yaml("wide", WIDE_TASKS, schedule="@hourly", start="2020-01-01")
                          .replace("paused: false", "paused: true"))
    apply_folder(db, texts, START)
    per_dag = runs // HISTORY_DAGS
    if not per_dag:
        return 0.0
    began = time.perf_counter()
    with db.begin() as conn:
        for i in range(HISTORY_DAGS):
            _seed_dag(conn, f"hist-{i}", per_dag, tasks)
        _seed_dag(conn, "wide", min(WIDE_RUNS, runs), WIDE_TASKS)
    with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("ANALYZE"))
    return time.perf_counter() - began


def _seed_dag(conn, dag_id: str, runs: int, tasks: int) -> None:
    """`runs` finished hourly runs of `dag_id` from 2020-01-01, `tasks` task instances each, linked."""
    pg = conn.dialect.name == "postgresql"
    version = conn.execute(select(dag_t.c.current_version_id).where(dag_t.c.dag_id == dag_id)).scalar_one()
    first = conn.execute(select(func.coalesce(func.max(dag_run_t.c.id), 0))).scalar_one() + 1
    if pg:
        conn.execute(text("""
            INSERT INTO dag_run (dag_id, run_id, logical_date, data_interval_start, data_interval_end,
                run_after, run_type, state, dag_version_id, created_at, queued_at, start_date, end_date,
                is_test)
            SELECT :dag, 'scheduled__' || g, ts, ts, ts + interval '1 hour', ts + interval '1 hour',
                'scheduled', CASE WHEN g % 50 = 0 THEN 'failed' ELSE 'success' END, :version,
                ts + interval '1 hour', ts + interval '1 hour', ts + interval '1 hour',
                ts + interval '70 minutes', false
            FROM generate_series(0, :n - 1) AS g,
                 LATERAL (SELECT timestamptz '2020-01-01 00:00:00+00' + g * interval '1 hour' AS ts) t
            ORDER BY g"""), {"dag": dag_id, "version": version, "n": runs})
        conn.execute(text("""
            INSERT INTO task_instance (dag_run_id, dag_id, task_id, state, try_number, max_tries, pool,
                pool_slots, priority_weight, queued_at, start_date, end_date)
            SELECT r.id, r.dag_id, 't' || k, r.state, 1, 1, 'default', 1, 1, r.queued_at, r.start_date,
                r.end_date
            FROM dag_run r, generate_series(0, :tasks - 1) AS k
            WHERE r.dag_id = :dag"""), {"dag": dag_id, "tasks": tasks})
    else:
        conn.execute(text("""
            WITH RECURSIVE g(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM g WHERE n + 1 < :n)
            INSERT INTO dag_run (dag_id, run_id, logical_date, data_interval_start, data_interval_end,
                run_after, run_type, state, dag_version_id, created_at, queued_at, start_date, end_date,
                is_test)
            SELECT :dag, 'scheduled__' || n, ts, ts, te, te, 'scheduled',
                CASE WHEN n % 50 = 0 THEN 'failed' ELSE 'success' END, :version, te, te, te,
                datetime('2020-01-01', '+' || (n * 60 + 70) || ' minutes'), 0
            FROM (SELECT n, datetime('2020-01-01', '+' || n || ' hours') AS ts,
                         datetime('2020-01-01', '+' || (n + 1) || ' hours') AS te FROM g)"""),
            {"dag": dag_id, "version": version, "n": runs})
        conn.execute(text("""
            WITH RECURSIVE k(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM k WHERE n + 1 < :tasks)
            INSERT INTO task_instance (dag_run_id, dag_id, task_id, state, try_number, max_tries, pool,
                pool_slots, priority_weight, queued_at, start_date, end_date)
            SELECT r.id, r.dag_id, 't' || k.n, r.state, 1, 1, 'default', 1, 1, r.queued_at, r.start_date,
                r.end_date
            FROM dag_run r, k WHERE r.dag_id = :dag"""), {"dag": dag_id, "tasks": tasks})
    conn.execute(text("UPDATE dag_run SET previous_run_id = id - 1 WHERE dag_id = :dag AND id > :first"),
                 {"dag": dag_id, "first": first})


def timed(fn, repeat: int) -> dict:
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        fn()
        times.append((time.perf_counter() - began) * 1000)
    return {"median": round(statistics.median(times), 1), "max": round(max(times), 1)}


def measure_reads(db, repeat: int) -> dict:
    def read(fn):
        def once():
            with db.begin() as conn:
                fn(conn)
        return once

    def grid_cli(conn):
        rows = list_runs(conn, "hist-0", limit=30, live=True)
        task_states(conn, [r["id"] for r in rows])

    client = TestClient(create_app(db, ApiSettings(anonymous_read=True)))
    with db.begin() as conn:
        newest = list_runs(conn, "hist-0", limit=26, live=True)
        wide = list_runs(conn, "wide", limit=101, live=True)
    before = newest[0]["logical_date"] if newest else "2020-01-01T00:00:00+00:00"
    wide_before = wide[-1]["logical_date"] if wide else "2020-01-01T00:00:00+00:00"

    def get(url):
        def once():
            answer = client.get(url)
            assert answer.status_code == 200, (url, answer.status_code)
        return once

    return {
        "runs_list_ms": timed(read(lambda c: list_runs(c, "hist-0", limit=20)), repeat),
        "runs_grid_ms": timed(read(grid_cli), repeat),
        "dag_list_ms": timed(read(pages.dag_list), repeat),
        "metrics_ms": timed(read(metric_figures), repeat),
        "grid_page_ms": timed(get("/dags/hist-0/grid?runs=1000"), repeat),
        "timeline_page_ms": timed(get("/dags/hist-0/timeline?runs=50"), repeat),
        "older_page_ms": timed(get(f"/dags/hist-0/grid?runs=25&before={before.replace('+', '%2B')}"), repeat),
        "index_page_ms": timed(get("/"), repeat),
        "api_signals_ms": timed(get("/api/v1/signals"), repeat),
        # the wide DAG (WIDE_RUNS runs x WIDE_TASKS tasks): its grid page (25 runs), 100 runs back, and 1,000 runs
        "wide_grid_page_ms": timed(get("/dags/wide/grid"), repeat),
        "wide_older_page_ms": timed(get(f"/dags/wide/grid?before={wide_before.replace('+', '%2B')}"), repeat),
        "wide_grid_1000_ms": timed(get("/dags/wide/grid?runs=1000"), repeat),
    }


def idle_pass(db, repeat: int) -> dict:
    clock = FixedClock(dt.datetime(2030, 1, 1, tzinfo=dt.UTC))
    sched = Scheduler(db, NoopExecutor(parallelism=32, clock=clock), clock=clock)
    sched.start()
    try:
        sched.iterate()
        return timed(sched.iterate, repeat)
    finally:
        sched.stop()


def measure_clean(db, runs: int) -> dict:
    """`db clean` of hist-0's older half: seconds, runs per second, batches."""
    from dagline.store.retention import clean_history  # here: `--runs ''` measures older code too

    per_dag = runs // HISTORY_DAGS
    if per_dag < 2:
        return {}
    cutoff = START + dt.timedelta(hours=per_dag // 2)
    batches = []
    began = time.perf_counter()
    cleaned = clean_history(db, before=cutoff, now=cutoff, dag_id="hist-0", after_batch=lambda d: batches.append(1))
    seconds = time.perf_counter() - began
    return {"runs": cleaned.runs, "task_instances": cleaned.task_instances, "seconds": round(seconds, 2),
            "runs_per_s": round(cleaned.runs / seconds) if seconds else None, "batches": len(batches)}


def tick(db, dags: int) -> dict:
    """`dags apply` of `dags` hourly one-task DAGs, then all due at one instant: one replica creates them."""
    at, texts = TICK, tick_texts(dags)
    statements = [0]

    def count(*_args):
        statements[0] += 1

    event.listen(db.engine, "before_cursor_execute", count)
    apply_s = apply_folder(db, texts, at - dt.timedelta(minutes=30))
    apply_statements, statements[0] = statements[0], 0
    clock = ShiftedClock(at)
    sched = Scheduler(db, NoopExecutor(parallelism=64, clock=clock), clock=clock)
    sched.start()
    began = time.perf_counter()
    try:
        while True:
            sched.iterate()
            with db.engine.connect() as conn:
                made = conn.execute(select(func.count()).select_from(dag_run_t)).scalar_one()
            if made >= dags or time.perf_counter() - began > 900:
                break
    finally:
        sched.stop()
        event.remove(db.engine, "before_cursor_execute", count)
    with db.engine.connect() as conn:
        rows = conn.execute(select(dag_run_t.c.created_at, dag_run_t.c.run_after)).all()
    delays = [(r.created_at - r.run_after).total_seconds() for r in rows]
    last = max(delays) if delays else None
    return {"dags": dags, "apply_s": round(apply_s, 2), "apply_statements_per_dag": round(apply_statements / dags, 1),
            # every statement of the replica until the last run was created (its other phases included)
            "tick_statements_per_run": round(statements[0] / max(len(rows), 1), 1), "runs_created": len(rows),
            "delay_s": percentiles(delays),
            "runs_per_s": round(len(rows) / last) if last else None,
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


TICK = dt.datetime(2026, 6, 1, 12, tzinfo=dt.UTC)


def tick_texts(dags: int) -> dict[str, str]:
    """`dags` hourly one-task DAGs without catch-up whose first interval ends at TICK."""
    return {f"d{i:05d}.yaml": chain_dag_yaml(f"tick-{i:05d}", 1, schedule="@hourly",
                                             start="2026-06-01T11:00:00").replace("catchup: true", "catchup: false")
            for i in range(dags)}


class TickClock:
    """A replica's clock in the tick: the wall clock's pace, reaching TICK at the wall instant written in
    `start_file` (by the benchmark, once every replica is up); before that file exists, ten minutes
    before TICK (nothing is due)."""

    frozen = False

    def __init__(self, start_file: str):
        self.start_file = start_file
        self.offset = (TICK - dt.timedelta(minutes=10)) - dt.datetime.now(dt.UTC)
        self.fixed = False

    def now(self) -> dt.datetime:
        if not self.fixed and os.path.exists(self.start_file):
            with open(self.start_file) as fh:
                body = fh.read().strip()
            if body:
                self.offset = TICK - dt.datetime.fromtimestamp(float(body), dt.UTC)
                self.fixed = True
        return dt.datetime.now(dt.UTC) + self.offset


def replica_main(url: str, start_file: str) -> None:
    """One replica of the tick (`--replica URL START_FILE`): the noop executor, the `TickClock`."""
    db = Database(url)
    clock = TickClock(start_file)
    sched = Scheduler(db, NoopExecutor(parallelism=64, clock=clock), clock=clock)
    signal.signal(signal.SIGTERM, lambda *_: sched.request_stop())
    sched.run()


def proc_status(pid: int) -> dict:
    """VmRSS and VmHWM of a process, MiB."""
    found = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(("VmRSS:", "VmHWM:")):
                found[line.split(":")[0]] = round(int(line.split()[1]) / 1024)
    return {"rss_mib": found.get("VmRSS"), "hwm_mib": found.get("VmHWM")}


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tick_replicas(db, dags: int, replicas: int, idle_s: float) -> dict:
    """`dags apply` of `dags` DAGs, then the tick with `replicas` replica processes (see the docstring)."""
    apply_s = apply_folder(db, tick_texts(dags), TICK - dt.timedelta(minutes=30))
    folder = tempfile.mkdtemp(prefix="dagline-tick-")
    start_file = os.path.join(folder, "start")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    spawned = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--replica", db.url, start_file],
                              env=env, stderr=open(os.path.join(folder, f"replica{i}.log"), "w"))  # noqa: SIM115
             for i in range(replicas)]  # the logs stay in `folder` (a replica that exits says why there)
    try:
        while running_replicas(db) < replicas:
            if any(p.poll() is not None for p in procs) or time.perf_counter() - spawned > 600:
                raise RuntimeError("a replica exited or did not start")
            time.sleep(0.05)
        registered_s = time.perf_counter() - spawned
        time.sleep(3)  # past `plan_at_this_clock` and the first idle passes
        t0 = time.time() + 1
        with open(start_file + ".tmp", "w") as fh:
            fh.write(repr(t0))
        os.rename(start_file + ".tmp", start_file)
        load_at_tick = os.getloadavg()
        while True:
            with db.engine.connect() as conn:
                made = conn.execute(select(func.count()).select_from(dag_run_t)).scalar_one()
            if made >= dags or time.time() - t0 > 900:
                break
            if any(p.poll() is not None for p in procs):
                raise RuntimeError(f"a replica exited during the tick: see {folder}/replica*.log")
            time.sleep(0.05)
        load_after = os.getloadavg()
        memory = [proc_status(p.pid) for p in procs]
        with db.engine.connect() as conn:
            rows = conn.execute(select(dag_run_t.c.created_at, dag_run_t.c.run_after)).all()
            duplicates = conn.execute(text(
                "SELECT count(*) - count(DISTINCT (dag_id, logical_date)) FROM dag_run")).scalar_one()
            by_replica = dict(conn.execute(
                select(event_t.c.who, func.count()).where(event_t.c.entity == "dag_run", event_t.c.from_state.is_(None))
                .group_by(event_t.c.who)).all())
        delays = sorted((r.created_at - r.run_after).total_seconds() for r in rows)
        finished_by = time.time() + 300  # idle means the runs have finished (noop executor)
        while time.time() < finished_by:
            with db.engine.connect() as conn:
                open_runs = conn.execute(select(func.count()).select_from(dag_run_t)
                                         .where(dag_run_t.c.state.in_(("queued", "running")))).scalar_one()
            if not open_runs:
                break
            time.sleep(0.5)
        time.sleep(12)  # past the housekeeping that follows the last runs
        before = [cpu_seconds(p.pid) for p in procs]
        time.sleep(idle_s)
        idle = [round((cpu_seconds(p.pid) - b) * 60 / idle_s, 2) for p, b in zip(procs, before, strict=True)]
    finally:
        stop_processes(procs)
    return {"dags": dags, "replicas": replicas, "apply_s": round(apply_s, 2), "apply_split": dict(APPLY_SPLIT),
            "registered_s": round(registered_s, 1), "runs_created": len(rows), "duplicates": duplicates,
            "delay_s": {"p50": round(statistics.median(delays), 2) if delays else None,
                        "p99": round(delays[min(len(delays) - 1, int(0.99 * len(delays)))], 2) if delays else None,
                        "max": round(delays[-1], 2) if delays else None},
            "created_by": sorted(by_replica.values(), reverse=True), "memory": memory,
            "idle_cpu_s_per_min": idle, "load_at_tick": [round(x, 1) for x in load_at_tick],
            "load_after": [round(x, 1) for x in load_after]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--runs", default="0,100000", help="history sizes, comma-separated")
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--dags", default="1000", help="DAGs due at one tick, comma-separated (0: skip)")
    parser.add_argument("--replicas", default="", help="replica processes at the tick, comma-separated "
                        "(e.g. 1,3); empty: the in-process tick with statement counts")
    parser.add_argument("--idle-s", type=float, default=60.0, help="seconds of idle CPU measured after the tick")
    parser.add_argument("--replica", nargs=2, metavar=("URL", "START_FILE"), help=argparse.SUPPRESS)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--passes", type=int, default=1, help="measurement passes over each seeded history "
                        "(one JSON line each; `db clean` in the last)")
    args = parser.parse_args()
    if args.replica:
        replica_main(*args.replica)
        return
    for runs in [int(x) for x in args.runs.split(",") if x]:
        db, drop = fresh_database(args.db)
        try:
            seeded = seed_history(db, runs, args.tasks)
            for done in range(1, args.passes + 1):  # the same history read again: passes vary with the machine only
                last = done == args.passes
                print(json.dumps({"db": args.db, "history_runs": runs, "task_instances": runs * args.tasks,
                                  "seed_s": round(seeded, 1), "pass": done, **measure_reads(db, args.repeat),
                                  "idle_pass_ms": idle_pass(db, args.repeat),
                                  **({"clean": measure_clean(db, runs)} if last else {})}),
                      flush=True)
        finally:
            drop()
    for dags in [int(x) for x in args.dags.split(",") if x and int(x)]:
        for replicas in [int(x) for x in args.replicas.split(",") if x] or [0]:
            db, drop = fresh_database(args.db)
            try:
                measured = tick_replicas(db, dags, replicas, args.idle_s) if replicas else tick(db, dags)
                print(json.dumps({"db": args.db, **measured}), flush=True)
            finally:
                drop()


if __name__ == "__main__":
    main()
