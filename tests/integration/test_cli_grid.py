"""`dagline runs grid`, read as a person reads it, on both databases: its columns are labelled at the
resolution of the runs (a daily DAG by month-day; an hourly DAG by hour and minute, with the date over
the first column and wherever the day changes, in the DAG's time zone), and every kind of run has its
letter (a signal-triggered run is `g`, as on the web grid)."""

from __future__ import annotations

from dagline.cli.grid import RUN_TYPE_LETTERS
from dagline.domain.states import RunType
from dagline.web.render import RUN_TYPE_LETTERS as WEB_RUN_TYPE_LETTERS
from tests.helpers.cli import cli
from tests.helpers.dags import dag, task, write


def _grid(db, dag_id: str) -> list[str]:
    return cli(db, "runs", "grid", dag_id, "--no-color").output.splitlines()


def _columns(lines: list[str]) -> list[str]:
    """Each column's header read top to bottom (its label's characters, then its run-type letter)."""
    state_row = next(i for i, line in enumerate(lines) if line.startswith("run state"))
    first = lines[state_row].index("  ") + 2
    header = lines[2:state_row]
    count = (len(lines[state_row]) - first + 1) // 2
    return ["".join(line[first + 2 * i] if first + 2 * i < len(line) else " " for line in header)
            for i in range(count)]


def test_a_daily_dags_columns_are_labelled_by_month_and_day(db, applied):
    cli(db, "scheduler", "--executor", "noop", "--until-idle", "--now", "2026-03-04T00:00:00Z")
    assert _columns(_grid(db, "sales")) == ["03-01s", "03-02s", "03-03s"]


def test_hourly_runs_are_told_apart_by_their_time_and_a_new_day_shows_its_date(db, tmp_path):
    cli(db, "dags", "apply", write(tmp_path, dag("hourly", task("a"), schedule="@hourly", timezone="America/New_York",
                                                 startDate="2026-04-01T22:00:00", maxActiveRuns=8)))
    cli(db, "scheduler", "--executor", "noop", "--until-idle", "--now", "2026-04-02T02:00:00-04:00")
    lines = _grid(db, "hourly")
    assert "logical dates in America/New_York" in lines[0]
    assert _columns(lines) == ["04-0122:00s", "     23:00s", "04-0200:00s", "     01:00s"]


def test_signal_triggered_runs_have_their_letter_in_the_grid(db, tmp_path):
    cli(db, "dags", "apply", write(tmp_path, dag("features", task("build"), triggers=[{"signal": "features.ready"}])))
    for day in ("2026-05-01", "2026-05-02"):
        cli(db, "signals", "send", "features.ready", "--value", f'{{"day": "{day}"}}', "--now", f"{day}T06:00:00Z")
        cli(db, "scheduler", "--executor", "noop", "--until-idle", "--now", f"{day}T06:00:00Z")
    cli(db, "dags", "trigger", "features", "--now", "2026-05-02T07:30:00Z")
    lines = _grid(db, "features")
    assert [column[-1] for column in _columns(lines)] == ["g", "g", "m"]
    assert "run type: s scheduled  m manual  b backfill  g signal" in lines
    assert _columns(lines) == ["05-0106:00g", "05-0206:00g", "     07:30m"]  # two runs on 05-02: their times


def test_every_run_type_has_one_letter_the_same_in_the_terminal_and_on_the_web():
    assert RUN_TYPE_LETTERS == WEB_RUN_TYPE_LETTERS
    assert set(RUN_TYPE_LETTERS) == set(RunType)
    assert len(set(RUN_TYPE_LETTERS.values()) | {"t"}) == len(RunType) + 1  # `t`: a test run
