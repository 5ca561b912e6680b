"""How human-readable listings show times and durations (JSON keeps UTC ISO-8601).

A time is shown in the time zone of the DAG it belongs to, with its offset, to the minute when it
falls on one (`2026-03-29 02:00+02:00`), else to the second (`2026-03-29 02:00:07+02:00`).
A duration is short and exact enough to compare at a glance: `0.4s`, `12s`, `3m05s`, `2h01m`, `3d04h`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping

import pendulum

TIME_FIELDS = ("logical_date", "data_interval_start", "data_interval_end", "run_after", "start_date", "end_date",
               "next_run_after", "from_date", "to_date", "created_at", "completed_at", "queued_at", "next_retry_at",
               "sent_at", "decided_at")


def local_time(value: str | dt.datetime | None, timezone: str) -> str | None:
    """An instant (aware datetime or ISO-8601 text) in `timezone`, e.g. `2026-03-29 02:00+02:00`."""
    if value is None:
        return None
    instant = pendulum.parse(value) if isinstance(value, str) else pendulum.instance(value)
    local = instant.in_timezone(pendulum.timezone(timezone))
    clock = "HH:mm" if local.second == 0 and local.microsecond == 0 else "HH:mm:ss"
    return local.format(f"YYYY-MM-DD {clock}Z")


NOT_MEASURED = "—"  # a duration a frozen clock (`--now`) cannot measure: start and end are one instant


def duration(seconds: float | None) -> str | None:
    """`0.4s`, `12s`, `3m05s`, `2h01m`, `3d04h`; None stays None. Exactly zero is `—`, not measured: a
    try or run that started and ended at the same instant ran under a frozen clock (`--now`)."""
    if seconds is None:
        return None
    if seconds == 0:
        return NOT_MEASURED
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = int(round(seconds))
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def seconds_between(start: str | dt.datetime | None, end: str | dt.datetime | None) -> float | None:
    """Seconds from `start` to `end` (ISO-8601 text or datetimes); None unless both are known."""
    if start is None or end is None:
        return None
    a = dt.datetime.fromisoformat(start) if isinstance(start, str) else start
    b = dt.datetime.fromisoformat(end) if isinstance(end, str) else end
    return round((b - a).total_seconds(), 3)


def for_people(rows: Iterable[Mapping], timezones: Mapping[str, str] | str) -> list[dict]:
    """Rows with their times in their DAG's zone (`timezones`: dag_id -> zone, or one zone for all)
    and `duration_s` as a `duration` column."""
    shown = []
    for row in rows:
        zone = timezones if isinstance(timezones, str) else timezones.get(row.get("dag_id"), "UTC")
        out = dict(row)
        for field in TIME_FIELDS:
            if isinstance(out.get(field), str):
                out[field] = local_time(out[field], zone)
        if "duration_s" in out:
            out["duration"] = duration(out["duration_s"])
        shown.append(out)
    return shown
