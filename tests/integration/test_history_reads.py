"""Reads that do not grow with history: `runs list --limit`, `runs grid`, the DAG list's last run and the
grid and timeline pages read only the runs they show (newest first through an index), page through
older runs at stable URLs, and on SQLite after an ANALYZE none of their statements scans the runs or
task instances."""

from __future__ import annotations

import json
import re

from fastapi.testclient import TestClient
from sqlalchemy import event, text

from dagline.api import ApiSettings, create_app
from dagline.store.backfills import create_backfill
from dagline.store.pages import dag_list, grid, timeline
from dagline.store.read_models import latest_runs, list_runs, metric_figures
from tests.helpers.cli import cli
from tests.helpers.dags import DAILY_EXTRACT_LOAD
from tests.helpers.harness import apply, schedule, t, write_dag

DAILY = DAILY_EXTRACT_LOAD


def _history(db, tmp_path):
    """Runs 03-01 .. 03-10, all finished, and the 03-09 run replaced by a backfill's run (still queued)."""
    apply(db, write_dag(tmp_path, DAILY), now="2026-03-01T00:00:00+00:00")
    schedule(db, "2026-03-11T00:00:00+00:00")
    create_backfill(db, "daily", start=t("2026-03-09"), end=t("2026-03-09"), now=t("2026-03-11T01:00:00+00:00"),
                    reprocess="completed", paused=True)


def _days(rows) -> list[str]:
    return [r["logical_date"][5:10] for r in rows]


def test_runs_list_limit_and_runs_grid_show_the_latest_runs(db, tmp_path):
    _history(db, tmp_path)
    rows = json.loads(cli(db, "runs", "list", "daily", "--limit", "3", "--json").output)
    # the overridden 03-09 and its replacement are both runs of the DAG: the latest three by logical date
    assert [(r["logical_date"][5:10], r["state"]) for r in rows] == [
        ("03-09", "overridden"), ("03-09", "queued"), ("03-10", "success")]
    with db.begin() as conn:
        assert _days(list_runs(conn, "daily", limit=3, live=True)) == ["03-08", "03-09", "03-10"]
        assert len(list_runs(conn, "daily")) == 11
    out = cli(db, "runs", "grid", "daily", "--limit", "2", "--no-color").output
    assert "(2 runs" in out and "◌" in out  # 03-10 and the backfill's queued 03-09, not the overridden one


def test_the_dag_lists_last_run_is_the_latest_live_one(db, tmp_path):
    _history(db, tmp_path)
    with db.begin() as conn:
        latest = latest_runs(conn)
        assert latest["daily"].run_id.startswith("backfill__2026-03-09") is False
        assert latest["daily"].state == "success" and "2026-03-10" in latest["daily"].run_id
        [row] = dag_list(conn)
    assert row["last_run"]["state"] == "success" and row["last_run"]["id"] == latest["daily"].id
    assert json.loads(cli(db, "dags", "list", "--json").output)[0]["last_run_state"] == "success"


def test_the_metrics_gauges_count_what_is_unfinished_and_the_running_backfills_runs(db, tmp_path):
    _history(db, tmp_path)
    with db.begin() as conn:
        figures = metric_figures(conn)
    assert figures.runs == {"queued": 1}  # the backfill's run; the ten finished runs are not read
    assert figures.task_instances == {"none": 2}
    assert figures.backfill_runs == {"queued": 1} and figures.backfills == {"running": 1}


def test_grid_and_timeline_pages_page_through_older_runs_at_stable_urls(db, tmp_path):
    _history(db, tmp_path)
    client = TestClient(create_app(db, ApiSettings(anonymous_read=True)), follow_redirects=False)
    newest = client.get("/dags/daily/grid?runs=3")
    assert newest.status_code == 200
    older = re.search(r'href="(/dags/daily/grid\?runs=3&amp;before=[^"]+)" rel="next"', newest.text)
    assert older is not None and "newest runs" not in newest.text
    url = older.group(1).replace("&amp;", "&")
    page = client.get(url)
    assert page.status_code == 200 and 'rel="first"' in page.text
    with db.begin() as conn:
        shown = grid(conn, "daily", None, 3, before=t("2026-03-08"))
        assert _days(shown.runs) == ["03-05", "03-06", "03-07"]
        assert _days(timeline(conn, "daily", 2, before=t("2026-03-03"))) == ["03-02", "03-01"]
    # the same URL shows the same runs after more runs were made
    schedule(db, "2026-03-13T00:00:00+00:00")
    assert client.get(url).text.count('data-run="') == page.text.count('data-run="')
    timeline_page = client.get("/dags/daily/timeline?runs=3&before=2026-03-05")
    assert timeline_page.status_code == 200 and "before=2026-03-02" in timeline_page.text
    oldest = client.get("/dags/daily/timeline?runs=3&before=2026-03-02")
    assert "first on the timeline" in oldest.text and 'rel="next"' not in oldest.text
    bad = client.get("/dags/daily/grid?before=yesterday")
    assert bad.status_code == 422 and "before" in bad.text


def test_sqlite_reads_use_indexes_not_scans_of_the_history(tmp_path):
    """After an ANALYZE, the statements of these reads search the runs and task instances by index, with
    and without a running backfill (the planner's choice depends on the statistics)."""
    from dagline.db.engine import Database, upgrade

    db = Database(f"sqlite:///{tmp_path}/plans.db")
    upgrade(db)
    apply(db, write_dag(tmp_path, DAILY), now="2026-03-01T00:00:00+00:00")
    schedule(db, "2026-03-11T00:00:00+00:00")
    without_backfill = _scans(db)
    create_backfill(db, "daily", start=t("2026-03-09"), end=t("2026-03-09"), now=t("2026-03-11T01:00:00+00:00"),
                    reprocess="completed", paused=True)
    with_backfill = _scans(db)
    db.dispose()
    assert without_backfill == [] and with_backfill == []


def _scans(db) -> list[tuple[str, str]]:
    """The full scans of runs or task instances in the plans of the history reads' statements."""
    with db.begin() as conn:
        conn.execute(text("ANALYZE"))
    statements: list[tuple[str, object]] = []

    def seen(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("SELECT"):
            statements.append((statement, parameters))

    event.listen(db.engine, "before_cursor_execute", seen)
    with db.begin() as conn:
        list_runs(conn, "daily", limit=20)
        list_runs(conn, "daily", limit=20, live=True)
        dag_list(conn)
        grid(conn, "daily", None, 25, before=t("2026-03-08"))
        timeline(conn, "daily", 25)
        metric_figures(conn)
    event.remove(db.engine, "before_cursor_execute", seen)
    scans = []
    with db.engine.connect() as conn:
        raw = conn.connection.driver_connection
        for statement, parameters in statements:
            for row in raw.execute("EXPLAIN QUERY PLAN " + statement, parameters):
                detail = row[-1]
                if re.match(r"SCAN (dag_run|task_instance|live)\b", detail):  # a SEARCH reads by index
                    scans.append((detail, statement))
    return scans
