"""Field types of the spec models: ids, durations, instants, Spark sizes and templated strings.

Each is an `Annotated[str, ...]` whose validator raises `ValueError` with a message that names the value;
pydantic turns it into a validation error at the field's path.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict
from pydantic.alias_generators import to_camel

from dagline.templating import check_template
from dagline.times import parse_duration, parse_instant

_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_TASK_ID_RE = re.compile(r"^[a-zA-Z0-9_.-]+$")
_SPARK_MEMORY_RE = re.compile(r"^[0-9]+([kmgtp]b?|b)?$", re.IGNORECASE)


def check_dag_id(value: str) -> str:
    if len(value) > 63 or not _DNS_LABEL_RE.match(value):
        raise ValueError(
            f"dag id {value!r} is not a lowercase DNS-1123 label (at most 63 characters of a-z, 0-9 "
            f"and '-', starting and ending with a letter or digit)"
        )
    return value


def _check_task_id(value: str) -> str:
    if not _TASK_ID_RE.match(value):
        raise ValueError(f"task id {value!r} may only contain letters, digits, '_', '.' and '-'")
    return value


def _check_duration(value: str) -> str:
    parse_duration(value)
    return value


def _check_memory(value: str) -> str:
    if not _SPARK_MEMORY_RE.match(value):
        raise ValueError(f"{value!r} is not a Spark memory size (examples: '512m', '1g', '4g')")
    return value


def _scalar_to_str(value: Any) -> Any:
    """YAML reads `4` and `true` as numbers and booleans; Spark wants their text (`true`, not `True`)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return value


def _check_templated(value: str) -> str:
    check_template(value)
    return value


def _check_instant(value: str) -> str:
    parse_instant(value)
    return value


def _date_to_str(value: Any) -> Any:
    return value.isoformat() if isinstance(value, dt.date) else value


DagId = Annotated[str, AfterValidator(check_dag_id)]
TaskId = Annotated[str, AfterValidator(_check_task_id)]
IsoDuration = Annotated[str, AfterValidator(_check_duration)]
SparkMemory = Annotated[str, AfterValidator(_check_memory)]
TemplatedStr = Annotated[str, BeforeValidator(_scalar_to_str), AfterValidator(_check_templated)]
InstantStr = Annotated[str, BeforeValidator(_date_to_str), AfterValidator(_check_instant)]


class SpecModel(BaseModel):
    """Base of every spec model: camelCase keys in YAML, snake_case in Python, unknown keys refused."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

