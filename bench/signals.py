"""Signals: how soon a signal starts work, how many the HTTP API takes in, and a storm.

    python bench/signals.py [--replicas 1,3] [--signals 200] [--storm 20000]

PostgreSQL (`$DAGLINE_TEST_POSTGRES_URL`), a fresh database per replica count; `dagline scheduler
--executor noop` replicas woken by NOTIFY (their fallback poll left at 0.5 s) and one `dagline api`
process (uvicorn); signals go through `dagline.sdk.client` (HTTP, a named token), as a job would send them.

- `latency` (per replica count): a running run whose task `evaluate` has a `start` rule
  (`handling: each`) on `model.published`, kept running by a streaming task. One signal at a time, at
  random moments (0.05-0.25 s apart, so the replicas are idle, somewhere in their wait): sent (just
  before the HTTP request) -> the API's answer (stored) -> the task's new try seen `queued` -> seen
  started (`running` or finished). Seen by a dedicated connection polling the task instance every millisecond, on this
  machine's clock. p50/p95/p99/max in ms, nearest rank: with fewer than 100 signals p99 is the maximum,
  so the default is 200 (about a minute per replica count). Measured warm: signals are first sent the
  same way, uncounted, until every replica has reacted to one (`warm_up_signals`); each replica's first
  reaction pays once for what a process does on first use (compiling its SQL statements, PostgreSQL
  loading the tables into a new connection's caches), and is reported on its own as
  `first_reaction_ms` (sent -> queued, by replica).
- `ingest` (with the last replica count running): 10,000 signals in batches of 500 from 4 threads, and
  1,000 single-signal requests from 4 threads, to a key nobody listens to: signals per second.
- `storm` (the last replica count): 20,000 signals of a key a `start` rule with `handling: latest`
  listens to, sent in batches of 500 from 4 threads as fast as the API takes them, while an unrelated
  hourly DAG catches up 24 runs of a 5-task chain. Counts every signal stored, handled, and acted on
  exactly once (one action row each), and compares that DAG's hop lag (upstream end -> downstream
  start) with the same DAG run alone before the storm. The audit's violation counts are included.

One JSON line per phase. Not a test: figures depend on the machine.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import (  # noqa: E402
    apply_dag_texts,
    chain_dag_yaml,
    fresh_database,
    percentiles,
    start_noop_replicas,
    stop_processes,
    wait_until,
)
from sqlalchemy import func, select  # noqa: E402

from dagline.clock import SystemClock  # noqa: E402
from dagline.db.models import dag_run_t, event_t, signal_action_t, signal_t, ti_t  # noqa: E402
from dagline.sdk.client import send_signal, send_signals  # noqa: E402
from dagline.store.runs import trigger_run  # noqa: E402
from dagline.store.tokens import create_token  # noqa: E402
from dagline.testing import audit  # noqa: E402

WARM_UP_MAX = 30  # warm-up signals at most, until every replica has reacted once

LISTEN = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: listen}
spec:
  schedule: null
  paused: false
  tasks:
    - id: keep
      mode: streaming
      spark: {mainApplicationFile: keep.py}
    - id: evaluate
      on: [{signal: model.published, action: start, handling: each}]
      spark: {mainApplicationFile: evaluate.py, arguments: ["{{ signal.value.n }}"]}
    - id: sink
      on: [{signal: storm.tick, action: start, handling: latest}]
      spark: {mainApplicationFile: sink.py}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_api(db) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "dagline.cli", "--db", db.url, "api", "--port", str(port)],
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/api/v1/health", timeout=1):
                return True
        except OSError:
            return False

    wait_until(up, "the API to answer", [proc], timeout_s=60, poll_s=0.05)
    return proc, url


def ti_of(db, dag_id: str, task_id: str) -> int:
    with db.engine.connect() as conn:
        return conn.execute(select(ti_t.c.id).where(ti_t.c.dag_id == dag_id, ti_t.c.task_id == task_id)).scalar_one()


def latency(db, url: str, token: str, signals: int, seed: int, replicas: int) -> dict:
    rng = random.Random(seed)
    evaluate = ti_of(db, "listen", "evaluate")
    answered_ms, queued_ms, started_ms = [], [], []
    first_ms = {}  # replica -> sent -> queued of the first signal it reacted to (the warm-up)
    with db.engine.connect() as conn:
        def seen():
            row = conn.execute(select(ti_t.c.try_number, ti_t.c.state).where(ti_t.c.id == evaluate)).one()
            conn.rollback()  # a fresh snapshot at every look
            return row

        def queued_by(try_number: int) -> str:
            who = conn.execute(select(event_t.c.who).where(
                event_t.c.ti_id == evaluate, event_t.c.try_number == try_number, event_t.c.to_state == "queued")
            ).scalar_one()
            conn.rollback()
            return who

        def one(n: int) -> tuple[float, float, float]:
            """Send signal n (its try is the task's try n); sent -> answered, -> queued, -> started in ms."""
            time.sleep(rng.uniform(0.05, 0.25))
            sent = time.perf_counter()
            send_signal("model.published", {"n": n}, url=url, token=token)
            answered = time.perf_counter()
            queued = started = None
            deadline = sent + 30
            while started is None:
                row = seen()
                now = time.perf_counter()
                if row.try_number == n:
                    if queued is None and row.state in ("queued", "running", "success", "failed"):
                        queued = now
                    if row.state in ("running", "success", "failed"):
                        started = now
                if now > deadline:
                    raise RuntimeError(f"signal {n} started nothing within 30 s")
                time.sleep(0.001)
            wait_until(lambda: seen().state in ("success", "failed"), f"try {n} to end", timeout_s=30, poll_s=0.002)
            return (answered - sent) * 1000, (queued - sent) * 1000, (started - sent) * 1000

        n = 0
        while len(first_ms) < replicas and n < WARM_UP_MAX:
            n += 1
            _, queued, _ = one(n)
            first_ms.setdefault(queued_by(n), round(queued, 1))
        warm_up = n
        for n in range(warm_up + 1, warm_up + signals + 1):
            answered, queued, started = one(n)
            answered_ms.append(answered)
            queued_ms.append(queued)
            started_ms.append(started)
    return {"sent_to_answered_ms": percentiles(answered_ms), "sent_to_queued_ms": percentiles(queued_ms),
            "sent_to_started_ms": percentiles(started_ms), "warm_up_signals": warm_up,
            "first_reaction_ms": dict(sorted(first_ms.items()))}


def in_threads(threads: int, work) -> float:
    """Run `work(i)` in `threads` threads at once; the seconds it took."""
    began = time.perf_counter()
    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return time.perf_counter() - began


def ingest(url: str, token: str) -> dict:
    def batches(i):
        for b in range(5):
            send_signals([{"key": "ingest.batch", "value": {"t": i, "b": b, "n": n}} for n in range(500)],
                         url=url, token=token)

    def singles(i):
        for n in range(250):
            send_signal("ingest.single", {"t": i, "n": n}, url=url, token=token)

    batch_s = in_threads(4, batches)
    single_s = in_threads(4, singles)
    return {"batched": {"signals": 10_000, "batch": 500, "threads": 4, "seconds": round(batch_s, 2),
                        "signals_per_s": round(10_000 / batch_s)},
            "single_requests": {"signals": 1_000, "threads": 4, "seconds": round(single_s, 2),
                                "signals_per_s": round(1_000 / single_s)}}


def cron_dag(dag_id: str) -> str:
    start = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=24)).replace(minute=0, second=0, microsecond=0)
    return chain_dag_yaml(dag_id, 5, schedule="0 * * * *", start=start.strftime("%Y-%m-%dT%H:%M:%S+00:00"))


def cron_hop_lag(db, dag_id: str) -> dict:
    with db.engine.connect() as conn:
        tis = {(r.dag_run_id, r.task_id): r for r in conn.execute(
            select(ti_t.c.dag_run_id, ti_t.c.task_id, ti_t.c.start_date, ti_t.c.end_date)
            .where(ti_t.c.dag_id == dag_id))}
    lags = [(ti.start_date - tis[(run, f"t{int(task[1:]) - 1}")].end_date).total_seconds() * 1000
            for (run, task), ti in tis.items() if int(task[1:])]
    return percentiles(lags)


def cron_done(db, dag_id: str, runs: int):
    def done() -> bool:
        with db.engine.connect() as conn:
            return conn.execute(select(func.count()).select_from(dag_run_t).where(
                dag_run_t.c.dag_id == dag_id, dag_run_t.c.state == "success")).scalar_one() >= runs
    return done


def storm(db, url: str, token: str, count: int, procs) -> dict:
    apply_dag_texts(db, {"cron-alone.yaml": cron_dag("cron-alone")})
    wait_until(cron_done(db, "cron-alone", 24), "the cron DAG alone", procs)
    alone = cron_hop_lag(db, "cron-alone")

    apply_dag_texts(db, {"cron-storm.yaml": cron_dag("cron-storm")})
    per_thread = count // 4

    def send(i):
        for start in range(0, per_thread, 500):
            send_signals([{"key": "storm.tick", "value": {"t": i, "n": n}, "id": f"{i}-{n}"}
                          for n in range(start, min(start + 500, per_thread))], url=url, token=token)

    sent_s = in_threads(4, send)
    s, a = signal_t.c, signal_action_t.c
    key = s.key == "storm.tick"

    def handled() -> bool:
        with db.engine.connect() as conn:
            return conn.execute(select(func.count()).select_from(signal_t).where(key, s.handled_at.is_(None))
                                ).scalar_one() == 0
    began = time.perf_counter()
    wait_until(handled, "every storm signal to be handled", procs, timeout_s=600, poll_s=0.05)
    handled_s = time.perf_counter() - began + sent_s
    wait_until(cron_done(db, "cron-storm", 24), "the cron DAG during the storm", procs)
    with db.engine.connect() as conn:
        stored = conn.execute(select(func.count()).select_from(signal_t).where(key)).scalar_one()
        acted = conn.execute(select(a.signal_seq, func.count()).join(signal_t, s.seq == a.signal_seq)
                             .where(key).group_by(a.signal_seq)).all()
        statuses = dict(conn.execute(select(a.status, func.count()).join(signal_t, s.seq == a.signal_seq)
                                     .where(key).group_by(a.status)).all())
        violations = {name: len(found) for name, found in audit.all_violations(conn).items()}
    during = cron_hop_lag(db, "cron-storm")
    return {"signals_sent": per_thread * 4, "stored": stored, "acted_on_once": sum(1 for _, n in acted if n == 1),
            "acted_on_twice_or_more": sum(1 for _, n in acted if n > 1), "lost": per_thread * 4 - len(acted),
            "action_statuses": statuses, "send_s": round(sent_s, 2), "all_handled_s": round(handled_s, 2),
            "cron_hop_lag_alone_ms": alone, "cron_hop_lag_during_storm_ms": during,
            "p50_ratio": round(during["p50"] / alone["p50"], 2) if alone["p50"] else None,
            "violations": violations}


def run(replicas: int, signals: int, storm_count: int | None, seed: int) -> list[dict]:
    db, drop = fresh_database("postgres")
    procs, api = [], None
    out = []
    try:
        clock = SystemClock()
        apply_dag_texts(db, {"listen.yaml": LISTEN})
        with db.begin() as conn:
            token = create_token(conn, "bench", ["signals:send"], now=clock.now())
        api, url = start_api(db)
        procs = start_noop_replicas(db, replicas, poll_interval_s=0.5, parallelism=256)
        trigger_run(db, "listen", now=clock.now())
        keep = ti_of(db, "listen", "keep")

        def keep_running() -> bool:
            with db.engine.connect() as conn:
                return conn.execute(select(ti_t.c.state).where(ti_t.c.id == keep)).scalar_one() == "running"
        wait_until(keep_running, "the streaming task to run", procs)
        out.append({"phase": "latency", "db": "postgres", "replicas": replicas, "signals": signals,
                    **latency(db, url, token, signals, seed, replicas)})
        print(json.dumps(out[-1]), flush=True)
        if storm_count is not None:
            out.append({"phase": "ingest", "db": "postgres", "replicas": replicas, **ingest(url, token)})
            print(json.dumps(out[-1]), flush=True)
        if storm_count:
            out.append({"phase": "storm", "db": "postgres", "replicas": replicas,
                        **storm(db, url, token, storm_count, procs + [api])})
            print(json.dumps(out[-1]), flush=True)
        return out
    finally:
        stop_processes(procs + ([api] if api else []))
        drop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", default="1,3", help="replica counts, separated by commas")
    parser.add_argument("--signals", type=int, default=200,
                        help="signals sent one at a time for the latency (at least 100, or p99 is the maximum)")
    parser.add_argument("--storm", type=int, default=20_000, help="storm size (0: no storm)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    counts = [int(c) for c in args.replicas.split(",")]
    for i, count in enumerate(counts):
        run(count, args.signals, args.storm if i == len(counts) - 1 else None, args.seed)


if __name__ == "__main__":
    main()
