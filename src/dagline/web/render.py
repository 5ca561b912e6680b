"""The Jinja2 environment of the pages (templates/ beside this module, autoescape on for every
template: a task id or a log line holding HTML is shown, never run) and the formatting helpers the
templates use: times in the DAG's zone with the offset, durations, state classes."""

from __future__ import annotations

import datetime as dt
import functools
import json
from zoneinfo import ZoneInfo

from jinja2 import Environment, PackageLoader, StrictUndefined
from jinja2.utils import url_quote
from markupsafe import Markup, escape

from dagline.domain.states import RunState, RunType, TIState
from dagline.times import UTC, run_labels

# the states a grid cell or badge is coloured by: a task instance's, and a run's own `overridden`
STATES = (TIState.SUCCESS, TIState.FAILED, TIState.UPSTREAM_FAILED, TIState.UP_FOR_RETRY, TIState.RUNNING,
          TIState.QUEUED, TIState.SCHEDULED, TIState.SKIPPED, TIState.REMOVED, TIState.NONE, RunState.OVERRIDDEN)
_CELLS = {state: f"<td class=s-{state}>" for state in STATES}  # end tags left out: the row's </tr> ends them
_EMPTY_CELL = "<td class=s-absent>"
RUN_TYPE_LETTERS = {RunType.SCHEDULED: "s", RunType.MANUAL: "m", RunType.BACKFILL: "b", RunType.SIGNAL: "g"}


@functools.lru_cache(maxsize=64)
def _zone(name: str | None):
    try:
        return ZoneInfo(name or "UTC")
    except Exception:  # noqa: BLE001 - an unknown zone in an old spec: show UTC
        return UTC


def _parse(value) -> dt.datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, dt.datetime):
        return value
    return dt.datetime.fromisoformat(str(value))


def local_time(value, zone: str | None = "UTC", *, seconds: bool = False) -> str:
    """`2026-03-29 02:00 +02:00`: a stored UTC time in the DAG's zone, with its offset."""
    when = _parse(value)
    if when is None:
        return ""
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    when = when.astimezone(_zone(zone))
    text = when.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")
    offset = when.strftime("%z")
    return f"{text} {offset[:3]}:{offset[3:]}" if offset else text


def duration(seconds) -> str:
    """`4.2s`, `3m 05s`, `2h 07m`: a duration for people; exactly zero is `—`, not measured (a try or run
    that started and ended at the same instant ran under a frozen clock, `--now`)."""
    if seconds is None:
        return ""
    seconds = float(seconds)
    if seconds == 0:
        return "—"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, sec = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m {sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def state_class(state: str | None) -> str:
    return f"s-{state}" if state in STATES else "s-absent"


def grid_row(states: list[str | None]) -> Markup:
    """One task's row of grid cells, built without a template loop (20,000 cells render in milliseconds).
    Safe: the class comes from a fixed table of known states, never from the stored text itself."""
    cells = _CELLS
    return Markup("".join([cells.get(s, _EMPTY_CELL) for s in states]))


def grid_head(runs: list[dict], zone: str, *, types: bool = True) -> Markup:
    """The grid's header rows (the time axis, run types, then one link per run coloured by its state),
    built in Python for the same reason as `grid_row`; every stored text in it goes through `escape`.
    The time axis names each run at its schedule's resolution, as the terminal grid does
    (`times.run_labels`): the date where it changes, and for sub-daily runs the time `HH:MM`."""
    parts = []
    labels = run_labels(runs, zone)
    for row, index in (("date", 0), ("time", 1)):
        if row == "time" and not any(label[1] for label in labels):
            continue  # daily or slower: the date names each run
        parts.append(f"<tr class='axis axis-{row}'><th>{row}</th>")
        parts += [f"<th><span>{escape(label[index])}</span>" for label in labels]
        parts.append("</tr>")
    if types:
        parts.append("<tr class=run-types><th>run type</th>")
        for r in runs:
            kind = r["run_type"]
            parts.append(f'<th class=t-{escape(kind)} title="{escape(kind)}">{RUN_TYPE_LETTERS.get(kind, "?")}')
        parts.append("</tr>")
    parts.append("<tr class=run-states><th>run</th>")
    for r in runs:
        title = escape(f"{r['run_id']} · {r['state']} · {local_time(r['logical_date'], zone)}")
        parts.append(f'<th data-run={r["id"]}><a href="/runs/{r["id"]}" class={state_class(r["state"])} '
                     f'title="{title}"></a>')
    parts.append("</tr>")
    return Markup("".join(parts))


def state_badge(value: str | None) -> str:
    """The `state` macro of _macros.html, in Python (for rows built without a template loop)."""
    return f'<span class="state {state_class(value)}">{escape(value) if value else "-"}</span>'


def task_rows(tasks: list[dict], run_pk: int, dag_id: str, chosen: str | None, zone: str) -> Markup:
    """The run page's task table rows, built in Python like `grid_row` (a run of 1,000 tasks renders in
    milliseconds, not a third of a second); every stored text goes through `escape` or `url_quote`."""
    dag_q = url_quote(dag_id)
    parts = []
    for t in tasks:
        task_id = t["task_id"]
        shown, quoted = escape(task_id), url_quote(task_id)
        why = ""
        if t.get("reason"):
            why += f'<span class="reason">{escape(t["reason"])}</span>'
        if t.get("message"):
            why += f'<span class="message">{escape(t["message"])}</span>'
        here = ' class="chosen"' if task_id == chosen else ""
        parts.append(
            f'<tr data-task="{shown}"{here}>\n'
            f'  <td><input type="checkbox" name="task" value="{shown}" aria-label="select {shown}"></td>\n'
            f'  <td><a href="/runs/{run_pk}?task={quoted}">{shown}</a>\n'
            f'    <a class="muted small" href="/dags/{dag_q}/tasks/{quoted}" '
            f'title="durations across runs">durations</a></td>\n'
            f'  <td>{state_badge(t["state"])}</td>\n'
            f'  <td>{t["try_number"]}/{t["max_tries"]}</td>\n'
            f'  <td>{escape(t["pool"])}</td>\n'
            f'  <td>{escape(local_time(t["start_date"], zone, seconds=True))}</td>\n'
            f'  <td>{escape(local_time(t["end_date"], zone, seconds=True))}</td>\n'
            f'  <td>{escape(duration(t["duration_s"]))}</td>\n'
            f'  <td class="why">{why}</td>\n</tr>\n')
    return Markup("".join(parts))


def _short(text: str, length: int = 24) -> str:
    """Jinja's `truncate(24, True, "…")`: kept whole up to 5 characters over."""
    return text if len(text) <= length + 5 else text[:length - 1] + "…"


def gantt_bars(bars: list[dict], run_pk: int, label_w: int) -> Markup:
    """The Gantt chart's bars (one link per try), built in Python for the same reason as `task_rows`."""
    parts = []
    for b in bars:
        task_id = b["task_id"]
        title = f"{task_id} try {b['try_number']}: {b['state']}"
        if b.get("duration_s") is not None:
            title += f", {duration(b['duration_s'])}"
        wait = (f'<rect class="wait" x="{b["wait_x"]}" y="{b["y"] + 8}" width="{b["wait_w"]}" height="4"/>\n'
                if b.get("wait_w") else "")
        parts.append(
            f'<a href="/runs/{run_pk}?task={url_quote(task_id)}&amp;try={b["try_number"]}#log">\n'
            f'<text class="label" x="{label_w - 8}" y="{b["y"] + 14}" text-anchor="end">'
            f'{escape(_short(task_id))} #{b["try_number"]}</text>\n{wait}'
            f'<rect class="bar {state_class(b["state"])}" x="{b["x"]}" y="{b["y"] + 2}" width="{b["w"]}" '
            f'height="16" rx="3"><title>{escape(title)}</title></rect></a>\n')
    return Markup("".join(parts))


def pretty_json(value) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def _tojson_attr(value) -> Markup:
    """JSON for a data-* attribute, escaped for HTML."""
    return escape(json.dumps(value, default=str))


@functools.lru_cache(maxsize=1)
def environment() -> Environment:
    env = Environment(loader=PackageLoader("dagline.web", "templates"), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True)
    env.filters.update(local_time=local_time, duration=duration, state_class=state_class, pretty_json=pretty_json,
                       json_attr=_tojson_attr)
    env.globals.update(grid_row=grid_row, grid_head=grid_head, task_rows=task_rows, gantt_bars=gantt_bars,
                       STATES=STATES)
    return env


def render(name: str, **context) -> str:
    return environment().get_template(name).render(**context)
