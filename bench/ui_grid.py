"""The web UI's grid at scale: 1,000 runs x 20 tasks (20,000 cells) of one DAG, to first paint.

    python bench/ui_grid.py [--db sqlite|postgres] [--runs 1000] [--tasks 20] [--repeat 5]

Stores a 20-task DAG and 1,000 finished runs with their task instances (bulk inserts, states drawn
from a seeded generator: mostly success, some failed, upstream_failed, skipped, a few running), then
- `server_ms`: the time to answer `GET /dags/bench/grid?runs=1000` on the real app (query + render),
  measured in-process over `--repeat` requests (median and max), and the page's size;
- `first_paint_ms`, when Debian's Chromium is installed (tests/tools/install_chromium.py): the app
  served by uvicorn, the page opened in headless Chromium through Playwright, and the browser's own
  Paint Timing (`first-contentful-paint`, from the navigation's start) and Navigation Timing
  (`response_end_ms`, `dom_content_loaded_ms`, `load_ms`), median over `--repeat` loads.
Prints one JSON line. Not a test: figures depend on the machine. The goal is first paint under 1 s.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from common import fresh_database  # noqa: E402
from sqlalchemy import insert  # noqa: E402

from dagline.api import ApiSettings, create_app  # noqa: E402
from dagline.db.models import dag_run_t, ti_t  # noqa: E402
from dagline.spec import load_dag_paths  # noqa: E402
from dagline.store.dags import DagCache, apply_dags  # noqa: E402
from dagline.store.tokens import create_token  # noqa: E402

STATES = ["success"] * 90 + ["failed"] * 3 + ["upstream_failed"] * 3 + ["skipped"] * 2 + ["running"] * 2


def store(db, runs: int, tasks: int, seed: int) -> str:
    folder = tempfile.mkdtemp(prefix="dagline-ui-bench-")
    lines = ["apiVersion: dagline.io/v1alpha1", "kind: DAG", "metadata: {name: bench}", "spec:",
             "  schedule: '@hourly'", "  startDate: '2026-01-01T00:00:00'", "  paused: true", "  tasks:"]
    for i in range(tasks):
        lines.append(f"    - {{id: task_{i:02d}, spark: {{mainApplicationFile: t.py}}"
                     + (f", upstream: [task_{i - 1:02d}]" if i else "") + "}")
    path = os.path.join(folder, "bench.yaml")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    now = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
    apply_dags(db, load_dag_paths([path]), now=now)
    rng = random.Random(seed)
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    with db.begin() as conn:
        version_id, dag = DagCache().current(conn, "bench")
        rows = []
        for i in range(runs):
            ld = start + dt.timedelta(hours=i)
            rows.append(dict(dag_id="bench", run_id=f"scheduled__{ld.isoformat()}", logical_date=ld,
                             data_interval_start=ld, data_interval_end=ld + dt.timedelta(hours=1),
                             run_after=ld + dt.timedelta(hours=1), run_type="scheduled", state="success",
                             dag_version_id=version_id, created_at=now, start_date=ld, end_date=ld, is_test=False))
        ids = [r.id for r in conn.execute(insert(dag_run_t).returning(dag_run_t.c.id), rows)]
        tis = []
        for run_pk in ids:
            for task_id in dag.tasks:
                state = rng.choice(STATES)
                tis.append(dict(dag_run_id=run_pk, dag_id="bench", task_id=task_id, state=state, try_number=1,
                                max_tries=1, pool="default", pool_slots=1, priority_weight=1))
        for i in range(0, len(tis), 5000):
            conn.execute(insert(ti_t), tis[i:i + 5000])
        token = create_token(conn, "bench", ["read"], now=now)
    return token


def server_side(app, token: str, runs: int, repeat: int) -> dict:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    client = TestClient(app)
    headers = {"Authorization": f"Bearer {token}"}
    client.get(f"/dags/bench/grid?runs={runs}", headers=headers)  # warm: templates compiled, pool filled
    times, size = [], 0
    for _ in range(repeat):
        begin = time.perf_counter()
        answer = client.get(f"/dags/bench/grid?runs={runs}", headers=headers)
        times.append((time.perf_counter() - begin) * 1000)
        assert answer.status_code == 200, answer.text[:500]
        size = len(answer.content)
    cells = answer.text.count("<td class=")
    return {"server_ms_median": round(statistics.median(times), 1), "server_ms_max": round(max(times), 1),
            "page_bytes": size, "cells": cells}


def browser_side(app, token: str, runs: int, repeat: int) -> dict:
    chromium = "/usr/bin/chromium"
    if not os.path.exists(chromium):
        return {"first_paint_ms": None, "browser": "no /usr/bin/chromium (python tests/tools/install_chromium.py)"}
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return {"first_paint_ms": None, "browser": "playwright is not installed (pip install -e '.[test]')"}
    from dagline.api.server import ApiServer

    server = ApiServer(app, host="127.0.0.1", port=0).start()
    url = f"http://127.0.0.1:{server.port}/dags/bench/grid?runs={runs}"
    paints, responses, loaded, ready = [], [], [], []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, headless=True,
                                        args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
            context = browser.new_context(extra_http_headers={"Authorization": f"Bearer {token}"},
                                          viewport={"width": 1600, "height": 900})
            for i in range(repeat + 1):
                page = context.new_page()
                page.goto(url, wait_until="load")
                timing = page.evaluate("""() => {
                    const nav = performance.getEntriesByType('navigation')[0];
                    const fcp = performance.getEntriesByName('first-contentful-paint')[0];
                    return {fcp: fcp ? fcp.startTime : null, response: nav.responseEnd,
                            dcl: nav.domContentLoadedEventEnd, load: nav.loadEventEnd};
                }""")
                page.close()
                if i == 0:
                    continue  # the first load warms the browser's cache of CSS and JS
                paints.append(timing["fcp"])
                responses.append(timing["response"])
                ready.append(timing["dcl"])
                loaded.append(timing["load"])
            version = browser.version
            browser.close()
    finally:
        server.stop()
    return {"first_paint_ms": round(statistics.median(paints), 1), "first_paint_ms_max": round(max(paints), 1),
            "response_end_ms": round(statistics.median(responses), 1),
            "dom_content_loaded_ms": round(statistics.median(ready), 1), "load_ms": round(statistics.median(loaded), 1),
            "browser": f"chromium {version}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    db, remove = fresh_database(args.db)
    try:
        token = store(db, args.runs, args.tasks, args.seed)
        app = create_app(db, ApiSettings())
        result = {"benchmark": "ui_grid", "db": args.db, "runs": args.runs, "tasks": args.tasks}
        result.update(server_side(app, token, args.runs, args.repeat))
        result.update(browser_side(app, token, args.runs, args.repeat))
        result["under_1s"] = result.get("first_paint_ms") is not None and result["first_paint_ms"] < 1000
    finally:
        remove()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
