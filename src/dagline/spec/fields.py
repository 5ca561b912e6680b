"""Field types of the spec models: ids, durations, instants, Spark sizes and templated strings, each with
its bounds from `dagline.limits`.

Each is an `Annotated[str, ...]` whose validator raises `ValueError` with a message that names the value;
pydantic turns it into a validation error at the field's path.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.alias_generators import to_camel

from dagline.domain.templating import check_template
from dagline.limits import (
    KIB,
    MAX_EXECUTION_TIMEOUT,
    MAX_ID_LENGTH,
    MAX_RETRY_DELAY,
    MAX_SCHEDULE_INTERVAL,
    MAX_SPARK_MEMORY_BYTES,
    MIB,
)
from dagline.spec.problems import shorten
from dagline.times import duration_seconds, parse_duration, parse_instant

# Every pattern is used with `fullmatch`: `$` would also match before a trailing newline.
_DNS_LABEL_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_TASK_ID_RE = re.compile(r"[a-zA-Z0-9_.-]+")
_SPARK_MEMORY_RE = re.compile(r"(?P<number>[0-9]+)(?P<unit>[kmgtp]b?|b)?", re.IGNORECASE)
_MEMORY_UNITS = {"b": 1, "k": KIB, "m": MIB, "g": 1024 * MIB, "t": 1024**2 * MIB, "p": 1024**3 * MIB}


def check_dag_id(value: str) -> str:
    if len(value) > 63 or not _DNS_LABEL_RE.fullmatch(value):
        raise ValueError(
            f"dag id {shorten(value)} is not a lowercase DNS-1123 label (at most 63 characters of a-z, 0-9 "
            f"and '-', starting and ending with a letter or digit)"
        )
    return value


def _check_task_id(value: str) -> str:
    if not _TASK_ID_RE.fullmatch(value):
        raise ValueError(f"task id {shorten(value)} may only contain letters, digits, '_', '.' and '-'")
    if len(value) > MAX_ID_LENGTH:
        raise ValueError(f"task id of {len(value)} characters is too long (the limit is {MAX_ID_LENGTH})")
    return value


def check_pool_name(value: str) -> str:
    """A pool name: 1 to MAX_ID_LENGTH printable characters, no space at either end."""
    if not value or len(value) > MAX_ID_LENGTH:
        raise ValueError(f"a pool name must be 1 to {MAX_ID_LENGTH} characters, got {len(value)}")
    if not value.isprintable() or value != value.strip():
        raise ValueError(f"pool name {shorten(value)} must be printable characters without spaces at either end")
    if "/" in value:
        raise ValueError(f"pool name {shorten(value)} may not contain '/': a namespace's pool is named within "
                         "its namespace (`--namespace NS`, or the Pool object's namespace)")
    return value


def _check_duration(value: str) -> str:
    parse_duration(value)
    return value


def _duration_at_most(maximum: dt.timedelta, what: str, *, allow_zero: bool = False):
    def check(value: str) -> str:
        seconds = duration_seconds(parse_duration(value, allow_zero=allow_zero))
        if seconds > maximum.total_seconds():
            raise ValueError(f"{what} {value!r} is longer than the maximum of {_say(maximum)} "
                             f"(limit {_iso(maximum)})")
        return value
    return check


def _say(delta: dt.timedelta) -> str:
    return f"{delta.days} day{'s' if delta.days != 1 else ''}" if delta.seconds == 0 else str(delta)


def _iso(delta: dt.timedelta) -> str:
    return f"P{delta.days}D" if delta.seconds == 0 else f"PT{int(delta.total_seconds())}S"


def _check_memory(value: str) -> str:
    match = _SPARK_MEMORY_RE.fullmatch(value)
    if not match:
        raise ValueError(f"{shorten(value)} is not a Spark memory size (examples: '512m', '1g', '4g')")
    unit = (match["unit"] or "m")[0].lower()  # Spark reads a bare number of driver/executor memory as MiB
    number = match["number"].lstrip("0") or "0"
    if len(number) > 20 or int(number) * _MEMORY_UNITS[unit] > MAX_SPARK_MEMORY_BYTES:
        raise ValueError(f"{shorten(value)} is more memory than the limit of {MAX_SPARK_MEMORY_BYTES // 1024**5}p "
                         f"({MAX_SPARK_MEMORY_BYTES:,} bytes)")
    return value


def _scalar_to_str(value: Any) -> Any:
    """YAML reads `4` and `true` as numbers and booleans; Spark wants their text (`true`, not `True`)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return value


def _check_templated(value: str) -> str:
    try:
        check_template(value)
    except RecursionError:  # thousands of nested brackets or blocks: Jinja's parser recurses
        raise ValueError(f"template {shorten(value)} nests too deeply for the template parser") from None
    return value


def _check_instant(value: str) -> str:
    parse_instant(value)
    return value


def _date_to_str(value: Any) -> Any:
    return value.isoformat() if isinstance(value, dt.date) else value


DagId = Annotated[str, AfterValidator(check_dag_id)]


def check_namespace_name(value: str) -> str:
    if len(value) > 63 or not _DNS_LABEL_RE.fullmatch(value):
        raise ValueError(f"namespace {shorten(value)} is not a lowercase DNS-1123 label (at most 63 characters of "
                         "a-z, 0-9 and '-', starting and ending with a letter or digit)")
    return value


Namespace = Annotated[str, AfterValidator(check_namespace_name)]
TaskId = Annotated[str, Field(max_length=MAX_ID_LENGTH), AfterValidator(_check_task_id)]
IsoDuration = Annotated[str, AfterValidator(_check_duration)]
RetryDelay = Annotated[str, AfterValidator(_duration_at_most(MAX_RETRY_DELAY, "retryDelay", allow_zero=True))]
ExecutionTimeout = Annotated[str, AfterValidator(_duration_at_most(MAX_EXECUTION_TIMEOUT, "executionTimeout"))]
PoolName = Annotated[str, Field(min_length=1, max_length=MAX_ID_LENGTH), AfterValidator(check_pool_name)]
check_schedule_interval = _duration_at_most(MAX_SCHEDULE_INTERVAL, "schedule")
SparkMemory = Annotated[str, AfterValidator(_check_memory)]
TemplatedStr = Annotated[str, BeforeValidator(_scalar_to_str), AfterValidator(_check_templated)]
InstantStr = Annotated[str, BeforeValidator(_date_to_str), AfterValidator(_check_instant)]


class SpecModel(BaseModel):
    """Base of every spec model: camelCase keys in YAML, snake_case in Python, unknown keys refused."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

