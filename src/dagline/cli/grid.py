"""The terminal grid of `dagline runs grid`: runs as columns, tasks as rows, coloured by state."""

from __future__ import annotations

import pendulum

from dagline.domain.states import RunState, RunType, TIState

STYLE = {  # state (of a task instance, or of a run) -> (symbol, ANSI colour)
    TIState.SUCCESS: ("■", "32"), TIState.FAILED: ("✗", "31"), TIState.UPSTREAM_FAILED: ("▲", "33"),
    TIState.UP_FOR_RETRY: ("↻", "33"), TIState.RUNNING: ("▶", "36"), TIState.QUEUED: ("◌", "37"),
    TIState.SCHEDULED: ("○", "37"), TIState.SKIPPED: ("»", "35"), TIState.REMOVED: ("-", "90"),
    TIState.NONE: ("·", "90"), RunState.OVERRIDDEN: ("~", "90"),
}
RUN_TYPE_LETTERS = {RunType.SCHEDULED: "s", RunType.MANUAL: "m", RunType.BACKFILL: "b"}
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
    labels = [pendulum.parse(r["logical_date"]).in_timezone(timezone).format("MM-DD") for r in runs]
    lines = [f"{dag_id}  ({len(runs)} runs, logical dates in {timezone})", ""]
    # column headers: the month-day of each run, written vertically two characters per run
    for row in range(5):
        lines.append(" " * (width + 2) + " ".join(label[row] if row < len(label) else " " for label in labels))
    lines.append(" " * (width + 2) + " ".join("t" if r.get("is_test") else RUN_TYPE_LETTERS[r["run_type"]]
                                               for r in runs))
    lines.append(f"{'run state':<{width}}  " + " ".join(_paint(r["state"], color) for r in runs))
    for task in tasks:
        cells = [_paint(tasks_by_run.get(r["id"], {}).get(task), color) for r in runs]
        lines.append(f"{task:<{width}}  " + " ".join(cells))
    lines.append("")
    lines.append("run type: s scheduled  m manual  b backfill" + ("  t test" if any(r.get("is_test") for r in runs)
                                                                  else ""))
    lines.append("   ".join(f"{_paint(state, color)} {state}" for state in LEGEND))
    return "\n".join(lines)
