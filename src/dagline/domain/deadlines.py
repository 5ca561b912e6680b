"""Deadlines (Airflow's SLAs, now Deadline Alerts): "done within PT2H of the interval's end".

Pure domain: the `deadline` model of the spec (on a DAG or a task) and the instant a run or a task
instance must be done by. The instant is fixed when the run is created and stored on its row
(`dag_run.deadline_at`, `task_instance.deadline_at`), so finding missed deadlines is one indexed query
(`dagline.scheduler.deadlines`), and a later edit of the DAG never moves the deadline of a run in flight.

Backfill runs get no deadline: they reprocess the past, whose deadlines passed before they were
created. Scheduled and manual runs do (a scheduled run created late, after its deadline, has missed it).

The reference (`of`) is always a time of the run, for a task too:
- `data_interval_end` (default): the end of the run's data interval;
- `logical_date`: the start of its data interval (its logical date);
- `queued`: when the run was created and queued.
"""

from __future__ import annotations

import datetime as dt
from enum import Enum
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from dagline.times import parse_duration


class DeadlineReference(str, Enum):
    DATA_INTERVAL_END = "data_interval_end"
    LOGICAL_DATE = "logical_date"
    QUEUED = "queued"


def _positive_duration(value: str) -> str:
    if parse_duration(value).total_seconds() <= 0:
        raise ValueError(f"{value!r} is not a positive duration")
    return value


class DeadlineSpec(BaseModel):
    """`deadline: {within: PT2H, of: data_interval_end}`: the run (or task) must be finished within
    `within` of the run's `of` time; if it is not, the miss is recorded once and `deadline_miss`
    callbacks fire."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    within: Annotated[str, AfterValidator(_positive_duration)] = Field(
        description="ISO-8601 duration, e.g. PT2H")
    of: DeadlineReference = Field(
        DeadlineReference.DATA_INTERVAL_END, description="data_interval_end, logical_date or queued (the run's)")


def deadline_at(
    deadline: DeadlineSpec | None, *, logical_date: dt.datetime, data_interval_end: dt.datetime,
    queued_at: dt.datetime,
) -> dt.datetime | None:
    """The instant a run (or one of its task instances) must be done by; None without a deadline."""
    if deadline is None:
        return None
    reference = {
        DeadlineReference.DATA_INTERVAL_END: data_interval_end,
        DeadlineReference.LOGICAL_DATE: logical_date,
        DeadlineReference.QUEUED: queued_at,
    }[deadline.of]
    return reference + parse_duration(deadline.within).as_timedelta()
