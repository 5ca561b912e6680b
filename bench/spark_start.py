"""Warm Spark: how soon a task's job code runs, spark-submit against Spark Connect, in the same run.

    python bench/spark_start.py [--jobs 10] [--db sqlite|postgres] [--only submit|connect]

One DAG per way, a chain of `--jobs` tasks running the same tiny PySpark job (`spark.range(100000)`,
a group-by, `collect`), run by a real scheduler with the local executor (parallelism 1, so the jobs are
consecutive): `spark.connect: false` (a `spark-submit --master local[*]` per task) and then
`spark.connect: true` (`python job.py` against the replica's Spark Connect server). Per task:

- `queued_to_running_s`: the try queued (`queued_at`) -> the job's first line runs (it prints the time);
- `queued_to_done_s`: queued -> the try's `end_date`;
- `peak_rss_mb`: the largest resident memory of the try's process tree (wrapper, spark-submit's JVM and
  Python driver, or the Connect job's Python), sampled every 0.1 s from /proc.

Each way reports p50 and max of each (nearest rank). The Connect way also reports the server's start
(`server_start_s`, before the first job: a replica pays it once) and its own peak memory
(`server_peak_rss_mb`, shared by every Connect job), and `speedup_p50` compares the two ways'
queued -> running p50. The machine's load average (1 min) is printed at the start and the end. One JSON
document. Not a test: figures depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import select  # noqa: E402

from bench.common import fresh_database  # noqa: E402
from dagline.clock import SystemClock  # noqa: E402
from dagline.db.models import ti_t  # noqa: E402
from dagline.executors.connect_server import ConnectServer, ConnectSettings  # noqa: E402
from dagline.executors.local import LocalExecutor  # noqa: E402
from dagline.scheduler.loop import Scheduler  # noqa: E402
from dagline.spec import load_dag_paths  # noqa: E402
from dagline.store.dags import apply_dags  # noqa: E402
from dagline.store.runs import trigger_run  # noqa: E402

JOB = """\
import time
print("JOB_RUNNING", time.time(), flush=True)
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
rows = spark.range(100000).selectExpr("id % 10 AS k").groupBy("k").count().collect()
print("groups", len(rows), flush=True)
"""


def dag_yaml(dag_id: str, jobs: int, connect: bool) -> str:
    tasks = []
    for i in range(jobs):
        upstream = f", upstream: [t{i - 1}]" if i else ""
        tasks.append(f"    - {{id: t{i}{upstream}, spark: {{mainApplicationFile: job.py}}}}")
    return (f"apiVersion: dagline.io/v1alpha1\nkind: DAG\nmetadata: {{name: {dag_id}}}\nspec:\n"
            f"  schedule: null\n  paused: false\n"
            f"  defaults: {{retries: 0, spark: {{connect: {str(connect).lower()}}}}}\n"
            f"  tasks:\n" + "\n".join(tasks) + "\n")


def _rss_mb(pids) -> float:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            pass
    return total / 2**20


def _tree(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
                children.setdefault(int(stat[stat.rfind(")") + 2:].split()[1]), []).append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    found, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


class Sampler(threading.Thread):
    """Peak RSS of each running try's process tree (by task id), and of the Connect server's."""

    def __init__(self, executor: LocalExecutor):
        super().__init__(daemon=True)
        self.executor, self.peaks, self.server_peak, self.stop = executor, {}, 0.0, threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.1):
            for key, t in list(self.executor._tries.items()):  # a benchmark may look inside
                if t.process is not None and t.process.poll() is None:
                    rss = _rss_mb(_tree(t.process.pid))
                    self.peaks[key.task_id] = max(self.peaks.get(key.task_id, 0.0), rss)
            server = self.executor.connect_server.process
            if server is not None and server.poll() is None:
                self.server_peak = max(self.server_peak, _rss_mb(_tree(server.pid)))


def _nearest_rank(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q * len(ordered) + 0.5) - 1))]


def run_way(db, folder: Path, jobs: int, connect: bool, server: ConnectServer | None) -> dict:
    dag_id = "warm" if connect else "cold"
    (folder / f"{dag_id}.yaml").write_text(dag_yaml(dag_id, jobs, connect))
    apply_dags(db, load_dag_paths([str(folder / f"{dag_id}.yaml")]), now=dt.datetime.now(dt.timezone.utc))
    logs = folder / f"logs-{dag_id}"
    executor = LocalExecutor(parallelism=1, log_folder=str(logs), connect_server=server)
    sampler = Sampler(executor)
    sched = Scheduler(db, executor, clock=SystemClock())
    sched.start()
    sampler.start()
    run = trigger_run(db, dag_id, now=dt.datetime.now(dt.timezone.utc))
    try:
        while True:
            sched.iterate()
            with db.begin() as conn:
                rows = conn.execute(select(ti_t).where(ti_t.c.dag_run_id == run.id)).all()
            if all(r.state in ("success", "failed", "upstream_failed") for r in rows):
                break
            time.sleep(0.05)
    finally:
        sampler.stop.set()
        sched.stop()
    per_task = []
    for r in sorted(rows, key=lambda r: int(r.task_id[1:])):
        log = next(p for p in logs.rglob("try-1.log") if f"/{r.task_id}/" in str(p)).read_text()
        started = next(float(line.split()[1]) for line in log.splitlines() if line.startswith("JOB_RUNNING"))
        queued = r.queued_at.timestamp()
        per_task.append({"task": r.task_id, "state": r.state,
                         "queued_to_running_s": round(started - queued, 2),
                         "queued_to_done_s": round(r.end_date.timestamp() - queued, 2),
                         "peak_rss_mb": round(sampler.peaks.get(r.task_id, 0.0))})

    def summary(name: str) -> dict:
        values = [t[name] for t in per_task]
        return {"p50": round(statistics.median(values), 2), "max": max(values)}

    result = {"way": "connect" if connect else "spark-submit", "jobs": jobs,
              "succeeded": sum(t["state"] == "success" for t in per_task),
              "queued_to_running_s": summary("queued_to_running_s"), "queued_to_done_s": summary("queued_to_done_s"),
              "peak_rss_mb": summary("peak_rss_mb"), "tasks": per_task}
    if connect:
        result["server_peak_rss_mb"] = round(sampler.server_peak)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=10)
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--only", choices=("submit", "connect"))
    args = parser.parse_args()
    db, drop = fresh_database(args.db)
    out = {"load_1min_start": os.getloadavg()[0], "cores": os.cpu_count(), "db": args.db}
    try:
        with tempfile.TemporaryDirectory(prefix="dagline-bench-spark-") as tmp:
            folder = Path(tmp)
            (folder / "job.py").write_text(JOB)
            ways = []
            if args.only != "connect":
                ways.append(run_way(db, folder, args.jobs, False, None))
            if args.only != "submit":
                server = ConnectServer(ConnectSettings(), folder / "connect-server.log")
                began = time.monotonic()
                server.ensure()
                if not server.wait_listening():
                    raise SystemExit(f"the Spark Connect server did not start: {server.log_file}")
                server_start_s = time.monotonic() - began
                try:
                    connect = run_way(db, folder, args.jobs, True, server)
                finally:
                    server.stop()
                connect["server_start_s"] = round(server_start_s, 1)
                ways.append(connect)
            out["ways"] = ways
            if len(ways) == 2:
                out["speedup_p50"] = round(ways[0]["queued_to_running_s"]["p50"]
                                           / max(ways[1]["queued_to_running_s"]["p50"], 0.01), 1)
    finally:
        drop()
    out["load_1min_end"] = os.getloadavg()[0]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
