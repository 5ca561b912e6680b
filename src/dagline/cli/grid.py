"""The terminal grid of `dagline runs grid`: runs as columns, tasks as rows, coloured by state.

Each column is labelled, written vertically, by its run's logical date in the DAG's time zone, at the
resolution the runs need (`dagline.times.run_labels`, which the web grid's time axis uses too):

* daily or slower (every run on a day of its own, and no run covering less than a day): `MM-DD`;
* sub-daily (a scheduled or backfill run whose data interval is shorter than a day, e.g. an hourly
  DAG, or two runs on the same day): the time `HH:MM` on the five lower rows, and the date `MM-DD` on
  five rows above it, written over the first column and over each column whose date differs from
  the column before it (blank elsewhere), so hourly runs are told apart and a new day is seen.

Under the labels, the run type of each column: `s` scheduled, `m` manual, `b` backfill, `g` signal
(as the web grid writes them), `t` a test run.
"""

from __future__ import annotations

from dagline.domain.states import RunState, RunType, TIState
from dagline.times import run_labels
from dagline.wording import counted

STYLE = {  # state (of a task instance, or of a run) -> (symbol, ANSI colour)
    TIState.SUCCESS: ("■", "32"), TIState.FAILED: ("✗", "31"), TIState.UPSTREAM_FAILED: ("▲", "33"),
    TIState.UP_FOR_RETRY: ("↻", "33"), TIState.RUNNING: ("▶", "36"), TIState.QUEUED: ("◌", "37"),
    TIState.SCHEDULED: ("○", "37"), TIState.SKIPPED: ("»", "35"), TIState.REMOVED: ("-", "90"),
    TIState.NONE: ("·", "90"), RunState.OVERRIDDEN: ("~", "90"),
}
RUN_TYPE_LETTERS = {RunType.SCHEDULED: "s", RunType.MANUAL: "m", RunType.BACKFILL: "b", RunType.SIGNAL: "g"}
LEGEND = (TIState.SUCCESS, TIState.FAILED, TIState.UPSTREAM_FAILED, TIState.UP_FOR_RETRY, TIState.RUNNING,
          TIState.QUEUED, TIState.SKIPPED)


def _paint(state: str | None, color: bool) -> str:
    symbol, code = STYLE.get(state or "", ("?", "0")) if state else (" ", "0")
    return f"\x1b[{code}m{symbol}\x1b[0m" if color and state else symbol


def render_grid(dag_id: str, timezone: str, runs: list[dict], tasks_by_run: dict[int, dict[str, str]],
                task_order: list[str], *, color: bool) -> str:
    if not runs:
        return f"{dag_id}: no runs yet"
    tasks = list(task_order) + sorted({t for m in tasks_by_run.values() for t in m} - set(task_order))
    width = max(len(t) for t in tasks + ["run state"])
    labels = run_labels(runs, timezone)
    lines = [f"{dag_id}  ({counted(len(runs), 'run')}, logical dates in {timezone})", ""]
    rows = [(0, row) for row in range(5)] + ([(1, row) for row in range(5)] if any(t for _, t in labels) else [])
    for part, row in rows:  # each label written vertically, one character per line
        lines.append(" " * (width + 2) + " ".join(label[part][row] if row < len(label[part]) else " "
                                                   for label in labels))
    lines.append(" " * (width + 2) + " ".join("t" if r.get("is_test") else RUN_TYPE_LETTERS.get(r["run_type"], "?")
                                               for r in runs))
    lines.append(f"{'run state':<{width}}  " + " ".join(_paint(r["state"], color) for r in runs))
    for task in tasks:
        cells = [_paint(tasks_by_run.get(r["id"], {}).get(task), color) for r in runs]
        lines.append(f"{task:<{width}}  " + " ".join(cells))
    lines.append("")
    legend = "run type: s scheduled  m manual  b backfill"
    if any(r["run_type"] == RunType.SIGNAL and not r.get("is_test") for r in runs):
        legend += "  g signal"
    lines.append(legend + ("  t test" if any(r.get("is_test") for r in runs) else ""))
    lines.append("   ".join(f"{_paint(state, color)} {state}" for state in LEGEND))
    return "\n".join(lines)
