"""The web UI's run page of a run with 1,000 tasks, server time (issue 27: under 300 ms on this machine).

    python bench/run_page.py [--db sqlite|postgres] [--tasks 1000] [--repeat 10]

Stores a DAG of `--tasks` tasks (a chain of fan-outs, each task with templated arguments and conf) and one
finished run with its task instances, each with a stored launch record (`try_launch`: the job as rendered
at launch, ADR 60); then times `GET /runs/<id>` (the first task chosen) and `GET /runs/<id>?task=<last>`
on the real app, in-process, over `--repeat` requests each: wall-clock median and max (`server_ms_*`),
the process's CPU time per request (`cpu_ms_median`: what the page costs, whatever else the machine
runs), the page's size, and the load average while it ran. The renderer is replaced by a stand-in that
counts calls, so the JSON says how many renders the page views started (`renders`: must be 0). Prints
one JSON line. Not a test: figures depend on the machine.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from common import fresh_database  # noqa: E402
from sqlalchemy import insert, select  # noqa: E402

from dagline.api import ApiSettings, create_app  # noqa: E402
from dagline.db.models import dag_run_t, ti_t, try_launch_t  # noqa: E402
from dagline.scheduler import renderer  # noqa: E402
from dagline.spec import load_dag_paths  # noqa: E402
from dagline.store.dags import DagCache, apply_dags  # noqa: E402
from dagline.store.tokens import create_token  # noqa: E402


def store(db, tasks: int, logs: str) -> tuple[str, int, str]:
    folder = tempfile.mkdtemp(prefix="dagline-run-page-bench-")
    lines = ["apiVersion: dagline.io/v1alpha1", "kind: DAG", "metadata: {name: bench}", "spec:",
             "  schedule: '@daily'", "  startDate: '2026-01-01T00:00:00'", "  paused: true", "  tasks:"]
    for i in range(tasks):
        upstream = f", upstream: [task_{(i - 1) // 10 * 10:04d}]" if i else ""
        spark = (f"{{mainApplicationFile: jobs/t.py, arguments: ['--ds', '{{{{ ds }}}}', '--n', '{i}'], "
                 f"conf: {{spark.app.tag: '{{{{ run_id }}}}'}}}}")
        lines.append(f"    - {{id: task_{i:04d}{upstream}, spark: {spark}}}")
    path = os.path.join(folder, "bench.yaml")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    now = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
    apply_dags(db, load_dag_paths([path]), now=now)
    ld = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    run_id = f"scheduled__{ld.isoformat()}"
    with db.begin() as conn:
        version_id, dag = DagCache().current(conn, "bench")
        run_pk = conn.execute(insert(dag_run_t).returning(dag_run_t.c.id), [dict(
            dag_id="bench", run_id=run_id, logical_date=ld, data_interval_start=ld,
            data_interval_end=ld + dt.timedelta(days=1), run_after=ld + dt.timedelta(days=1), run_type="scheduled",
            state="success", dag_version_id=version_id, created_at=now, start_date=ld, end_date=ld, is_test=False)]
        ).scalar_one()
        rows = []
        for i, task_id in enumerate(dag.tasks):
            begin = ld + dt.timedelta(days=1, seconds=i)
            rows.append(dict(dag_run_id=run_pk, dag_id="bench", task_id=task_id, state="success", try_number=1,
                             max_tries=1, pool="default", pool_slots=1, priority_weight=1, queued_at=begin,
                             start_date=begin, end_date=begin + dt.timedelta(seconds=30)))
        conn.execute(insert(ti_t), rows)
        tis = conn.execute(select(ti_t.c.id, ti_t.c.task_id).where(ti_t.c.dag_run_id == run_pk)).all()
        conn.execute(insert(try_launch_t), [dict(
            ti_id=t.id, try_number=1, launched_at=now, main_application_file="jobs/t.py",
            arguments=["--ds", "2026-01-01", "--n", t.task_id[5:]], conf={"spark.app.tag": run_id}) for t in tis])
        token = create_token(conn, "bench", ["read"], now=now)
    last = list(dag.tasks)[-1]
    for task_id in (list(dag.tasks)[0], last):
        log = os.path.join(logs, "bench", run_id.replace(":", "_"), task_id)
        os.makedirs(log, exist_ok=True)
    return token, run_pk, last


def timed(client, url: str, headers: dict, repeat: int) -> dict:
    client.get(url, headers=headers)  # warm: templates compiled, pool filled
    times, cpu, size = [], [], 0
    for _ in range(repeat):
        begin, begin_cpu = time.perf_counter(), time.process_time()
        answer = client.get(url, headers=headers)
        times.append((time.perf_counter() - begin) * 1000)
        cpu.append((time.process_time() - begin_cpu) * 1000)
        assert answer.status_code == 200, answer.text[:500]
        size = len(answer.content)
    return {"server_ms_median": round(statistics.median(times), 1), "server_ms_max": round(max(times), 1),
            "cpu_ms_median": round(statistics.median(cpu), 1), "page_bytes": size,
            "shows_stored_job": "--ds\n2026-01-01" in answer.text}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    renders = []
    renderer.Renderer.render = lambda self, request: renders.append(request) or {}  # counts; a page must not call it
    db, remove = fresh_database(args.db)
    logs = tempfile.mkdtemp(prefix="dagline-run-page-logs-")
    try:
        token, run_pk, last = store(db, args.tasks, logs)
        client = TestClient(create_app(db, ApiSettings(log_folder=logs)))
        headers = {"Authorization": f"Bearer {token}"}
        result = {"benchmark": "run_page", "db": args.db, "tasks": args.tasks,
                  "first_task": timed(client, f"/runs/{run_pk}", headers, args.repeat),
                  "last_task": timed(client, f"/runs/{run_pk}?task={last}", headers, args.repeat),
                  "renders": len(renders), "load_average_1m": round(os.getloadavg()[0], 1)}
        result["under_300ms"] = all(result[k]["server_ms_median"] < 300 for k in ("first_task", "last_task"))
        result["cpu_under_300ms"] = all(result[k]["cpu_ms_median"] < 300 for k in ("first_task", "last_task"))
    finally:
        remove()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
