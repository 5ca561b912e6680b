"""The scene the web UI's tests look at (tests/integration/test_web.py, tests/browser/test_web_ui.py):
real runs made by the real scheduler (noop executor) in every state a grid shows.

- `sales` (@daily, 2026-01-01 to 2026-01-05): extract -> transform -> load. On 2026-01-03 `transform`
  fails on purpose (`dagline.noop.outcome`) and `load` is `upstream_failed`; a backfill with
  `--reprocess failed` and conf `{"fixed": true}` then replaces that run (the old one is `overridden`)
  and succeeds.
- `stream` (no schedule): `serve` is a streaming task (it runs until stopped), `evaluate` starts on the
  signal `model.published`; `report` follows `serve`. A triggered run stays `running`.
"""

from __future__ import annotations

import datetime as dt
import pathlib

from click.testing import CliRunner
from sqlalchemy import select, update

from dagline.cli import main
from dagline.db.models import ti_t
from dagline.executors.base import TaskKey
from dagline.executors.try_files import log_path
from tests.helpers.dags import dag, task, write

OUTCOME = "{{ 'failed' if ds == '2026-01-03' and not conf.get('fixed') else 'success' }}"
HTML = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2"><b>bold</b>'


def cli(db, *args, expect: int = 0) -> str:
    result = CliRunner().invoke(main, ["--db", db.url, *args], catch_exceptions=False)
    assert result.exit_code == expect, result.output
    return result.stdout


def write_dags(folder: pathlib.Path) -> list[str]:
    sales = dag("sales", task("extract", spark={"arguments": ["--date", "{{ ds }}", "--out", "/data/{{ ds_nodash }}"]}),
                task("transform", "extract", spark={"conf": {"dagline.noop.outcome": OUTCOME}}),
                task("load", "transform"), schedule="@daily", startDate="2026-01-01T00:00:00",
                endDate="2026-01-05T00:00:00", maxActiveRuns=8)
    stream = dag("stream", task("serve", mode="streaming"), task("report", "serve"),
                 task("evaluate", on=[{"signal": "model.published", "action": "start"}],
                      spark={"arguments": ["--model", "{{ signal.value.path if signal else 'none' }}"]}),
                 schedule=None, maxActiveRuns=4)
    return [write(folder, sales), write(folder, stream)]


def build(db, folder: pathlib.Path) -> dict:
    """Apply the DAGs and make the runs; returns names the tests use."""
    for path in write_dags(folder):
        cli(db, "dags", "apply", path)
    cli(db, "scheduler", "--executor", "noop", "--until-idle", "--now", "2026-01-06T01:00:00Z", expect=1)
    cli(db, "backfill", "create", "sales", "--start", "2026-01-03", "--end", "2026-01-03", "--reprocess", "failed",
        "--conf", '{"fixed": true}', "--now", "2026-01-06T02:00:00")
    cli(db, "scheduler", "--executor", "noop", "--until-idle", "--now", "2026-01-06T02:00:00Z")
    _measured(db)
    token = cli(db, "tokens", "create", "ops", "--scope", "read", "--scope", "operate", "--scope",
                "signals:send").strip()
    reader = cli(db, "tokens", "create", "viewer", "--scope", "read").strip()
    return {"token": token, "reader": reader}


def _measured(db) -> None:
    """Give the finished tries of `sales` durations (20 s to 74 s): under the frozen clock they started
    and ended at one instant, which the pages show as not measured, and a durations chart needs some."""
    with db.begin() as conn:
        tries = conn.execute(select(ti_t.c.id, ti_t.c.end_date).where(
            ti_t.c.dag_id == "sales", ti_t.c.end_date.is_not(None), ti_t.c.start_date == ti_t.c.end_date)).all()
        for t in tries:
            conn.execute(update(ti_t).where(ti_t.c.id == t.id).values(
                start_date=t.end_date - dt.timedelta(seconds=20 + 9 * (t.id % 7))))


def write_log(log_folder: pathlib.Path, dag_id: str, run_id: str, task_id: str, try_number: int, text: str,
              mode: str = "w") -> pathlib.Path:
    path = log_path(log_folder, TaskKey(dag_id, run_id, task_id, try_number))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, mode, encoding="utf-8") as f:
        f.write(text)
    return path
