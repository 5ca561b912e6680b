"""The terminal grid of `dagline runs grid`: runs as columns, tasks as rows, coloured by state."""

from __future__ import annotations

import pendulum

STYLE = {  # state -> (symbol, ANSI colour)
    "success": ("■", "32"), "failed": ("✗", "31"), "upstream_failed": ("▲", "33"), "up_for_retry": ("↻", "33"),
    "running": ("▶", "36"), "queued": ("◌", "37"), "scheduled": ("○", "37"), "skipped": ("»", "35"),
    "removed": ("-", "90"), "none": ("·", "90"), "overridden": ("~", "90"),
}


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
    lines.append(" " * (width + 2) + " ".join("t" if r.get("is_test") else
                                               {"scheduled": "s", "manual": "m", "backfill": "b"}[r["run_type"]]
                                               for r in runs))
    lines.append(f"{'run state':<{width}}  " + " ".join(_paint(r["state"], color) for r in runs))
    for task in tasks:
        cells = [_paint(tasks_by_run.get(r["id"], {}).get(task), color) for r in runs]
        lines.append(f"{task:<{width}}  " + " ".join(cells))
    lines.append("")
    lines.append("run type: s scheduled  m manual  b backfill" + ("  t test" if any(r.get("is_test") for r in runs)
                                                                  else ""))
    lines.append("   ".join(f"{_paint(state, color)} {state}" for state in
                            ("success", "failed", "upstream_failed", "up_for_retry", "running", "queued", "skipped")))
    return "\n".join(lines)
