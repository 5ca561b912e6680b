"""The Jinja2 environment of the pages (templates/ beside this module, autoescape on for every
template: a task id or a log line holding HTML is shown, never run) and the formatting helpers the
templates use: times in the DAG's zone with the offset, durations, state classes."""

from __future__ import annotations

import datetime as dt
import functools
import json
from zoneinfo import ZoneInfo

from jinja2 import Environment, PackageLoader, StrictUndefined
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
    env.globals.update(grid_row=grid_row, grid_head=grid_head, STATES=STATES)
    return env


def render(name: str, **context) -> str:
    return environment().get_template(name).render(**context)
