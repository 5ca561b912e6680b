"""Instants and durations as dagline reads and writes them.

Every stored or compared time is an aware UTC `datetime`. Input times may be a date or a date-time;
without an offset they are read in a given IANA zone (the DAG's, else UTC). Durations are ISO-8601
(`PT5M`, `P1D`); `parse_duration` returns a `pendulum.Duration` so calendar parts (days, months) stay
calendar parts when added in a time zone. `run_labels` names runs at the resolution their schedule needs
(the terminal grid's columns and the web grid's time axis).
"""

from __future__ import annotations

import datetime as dt
import functools
import re

import pendulum

from dagline.limits import MAX_YEAR, MIN_YEAR

UTC = dt.timezone.utc

_DURATION_RE = re.compile(
    r"P(?!$)(?:(?P<years>\d+)Y)?(?:(?P<months>\d+)M)?(?:(?P<weeks>\d+)W)?(?:(?P<days>\d+)D)?"
    r"(?:T(?=\d)(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?"
)
_MAX_DURATION_DIGITS = 9  # per part: a duration longer than about 30 years is refused by every field anyway


def parse_duration(text: str, *, allow_zero: bool = False) -> pendulum.Duration:
    """Parse an ISO-8601 duration such as ``PT5M`` or ``P1DT6H``; raise ValueError otherwise.

    A zero duration is refused unless `allow_zero` (a retry delay of zero means "retry at once"): no
    schedule or timeout means anything with it. A part with more than 9 digits is refused rather than
    overflowing a `timedelta`.
    """
    if not isinstance(text, str):
        raise ValueError(f"expected an ISO-8601 duration string such as 'PT5M', got {text!r}")
    return _parse_duration(text, allow_zero)


@functools.lru_cache(maxsize=4096)  # durations are immutable; every load of a DAG version parses its own again
def _parse_duration(text: str, allow_zero: bool) -> pendulum.Duration:
    match = _DURATION_RE.fullmatch(text.strip().upper())
    if not match:
        raise ValueError(f"{text!r} is not an ISO-8601 duration (examples: 'PT5M', 'PT6H', 'P1D')")
    if any(len(v.split(".")[0]) > _MAX_DURATION_DIGITS for v in match.groupdict().values() if v):
        raise ValueError(f"{text!r} is too long a duration (at most {_MAX_DURATION_DIGITS} digits per part)")
    parts = {k: (float(v) if k == "seconds" else int(v)) for k, v in match.groupdict().items() if v}
    seconds = parts.pop("seconds", 0.0)
    duration = pendulum.duration(
        years=parts.get("years", 0),
        months=parts.get("months", 0),
        weeks=parts.get("weeks", 0),
        days=parts.get("days", 0),
        hours=parts.get("hours", 0),
        minutes=parts.get("minutes", 0),
        seconds=int(seconds),
        microseconds=int(round((seconds - int(seconds)) * 1_000_000)),
    )
    if not allow_zero and duration.years == 0 and duration.months == 0 and duration.total_seconds() == 0:
        raise ValueError(f"{text!r} is a zero duration")
    return duration


def duration_seconds(duration: pendulum.Duration) -> float:
    """Length of a duration in seconds, counting a month as 30 days and a year as 365 (for timeouts)."""
    return duration.total_seconds() + duration.months * 30 * 86400 + duration.years * 365 * 86400


def validate_timezone(name: str) -> str:
    """Return `name` if it is a known IANA zone, else raise ValueError."""
    try:
        pendulum.timezone(name)
    except Exception:
        raise ValueError(f"unknown time zone {name!r} (expected an IANA name such as 'Europe/Amsterdam')") from None
    return name


def parse_instant(text: str | dt.datetime | dt.date, timezone: str = "UTC") -> dt.datetime:
    """Read a date or date-time; without an offset it is local time in `timezone`. Returns UTC."""
    if isinstance(text, dt.datetime):
        value = text
    elif isinstance(text, dt.date):
        value = dt.datetime(text.year, text.month, text.day)
    else:
        raw = str(text).strip()
        try:
            value = dt.datetime.fromisoformat(raw.replace("Z", "+00:00") if raw.endswith("Z") else raw)
        except ValueError:
            raise ValueError(
                f"{raw!r} is not an ISO-8601 date or date-time (examples: '2026-03-01', '2026-03-01T02:00:00+01:00')"
            ) from None
    check_year(value)
    if value.tzinfo is None:
        local = pendulum.datetime(
            value.year, value.month, value.day, value.hour, value.minute, value.second, value.microsecond,
            tz=pendulum.timezone(timezone), fold=value.fold,
        )
        return to_utc(local)
    return to_utc(value)


def check_year(value: dt.date) -> None:
    """Refuse an instant outside [MIN_YEAR, MAX_YEAR] (see `dagline.limits`): near years 1 and 9999 adding
    an interval, a retry delay or a time zone offset would overflow `datetime`."""
    if not MIN_YEAR <= value.year <= MAX_YEAR:
        raise ValueError(f"{value.isoformat()} is outside the years dagline accepts ({MIN_YEAR} to {MAX_YEAR})")


def to_utc(value: dt.datetime) -> dt.datetime:
    """An aware datetime in UTC as a plain `datetime` (naive input is taken to be UTC already)."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    converted = value.astimezone(UTC)
    return dt.datetime(
        converted.year, converted.month, converted.day, converted.hour, converted.minute,
        converted.second, converted.microsecond, tzinfo=UTC,
    )


def isoformat(value: dt.datetime | None) -> str | None:
    """UTC ISO-8601 with offset, as the CLI's JSON prints times (`2026-03-29T00:00:00+00:00`)."""
    if value is None:
        return None
    return to_utc(value).isoformat()


def run_labels(runs: list[dict], timezone: str) -> list[tuple[str, str]]:
    """(date, time) naming each run (`logical_date`, `data_interval_start`, `data_interval_end`: ISO
    strings or datetimes), in order, read in `timezone`, at the resolution the runs need:

    * daily or slower (every run on a day of its own, none covering less than a day): `(MM-DD, "")`;
    * sub-daily (a run whose data interval is shorter than a day, e.g. hourly, or two runs on one day):
      `(MM-DD, HH:MM)`, the date left empty where it is the date of the run before (a new day shows)."""
    starts = [_as_pendulum(r["logical_date"]).in_timezone(timezone) for r in runs]
    days = [start.format("MM-DD") for start in starts]
    if len(set(days)) == len(days) and not any(_shorter_than_a_day(r, timezone) for r in runs):
        return [(day, "") for day in days]
    return [(day if i == 0 or day != days[i - 1] else "", start.format("HH:mm"))
            for i, (day, start) in enumerate(zip(days, starts, strict=True))]


def _shorter_than_a_day(run: dict, timezone: str) -> bool:
    """Whether the run's data interval is not empty and ends before the same wall time a day later
    (a calendar day in `timezone`, so a 23-hour daily interval on a spring-forward day is a day)."""
    start, end = run.get("data_interval_start"), run.get("data_interval_end")
    if not start or not end:
        return False
    start, end = _as_pendulum(start).in_timezone(timezone), _as_pendulum(end).in_timezone(timezone)
    return start < end < start.add(days=1)


def _as_pendulum(value: str | dt.datetime) -> pendulum.DateTime:
    return pendulum.parse(value) if isinstance(value, str) else pendulum.instance(to_utc(value))
