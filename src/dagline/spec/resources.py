"""Specs of the kinds beside DAG: `BackfillSpec`, `DagRunSpec` (a trigger) and `PoolSpec`.

The CLI reads their fields as options; the Kubernetes operator reads them as custom resources.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from dagline.domain.states import Reprocess
from dagline.limits import MAX_ACTIVE_LIMIT, MAX_ID_LENGTH, MAX_POOL_SLOTS
from dagline.spec.bounds import json_value_problem
from dagline.spec.fields import DagId, InstantStr, SpecModel


class BackfillSpec(SpecModel):
    """A request to (re)process a DAG's logical dates in `[start, end]`."""

    dag: DagId
    start: InstantStr = Field(description="date or date-time; naive = in the DAG's time zone")
    end: InstantStr = Field(description="date or date-time; naive = in the DAG's time zone")
    reprocess: Literal["none", "failed", "completed"] = Reprocess.NONE
    max_active_runs: int | None = Field(None, ge=1, le=MAX_ACTIVE_LIMIT)
    run_backwards: bool = False
    dry_run: bool = False
    paused: bool = False


class DagRunSpec(SpecModel):
    """A DagRun resource: made by a user, a manual trigger of `dag`; made by dagline, the mirror of an
    existing run (then `runId` names it and the rest is informative)."""

    dag: DagId
    logical_date: InstantStr | None = Field(None, description="date or date-time; naive = in the DAG's time zone")
    conf: dict[str, Any] = Field(default_factory=dict, description="overrides `params` in this run's templates")
    run_id: str | None = Field(None, max_length=MAX_ID_LENGTH,
                               description="set by dagline on the runs it mirrors; leave empty to trigger")

    @field_validator("conf", mode="before")
    @classmethod
    def _bounded_conf(cls, value: Any) -> Any:
        problem = json_value_problem(value)
        if problem:
            raise ValueError(problem)
        return value


class PoolSpec(SpecModel):
    """A pool: a named number of slots shared by the tasks that name it."""

    slots: int = Field(ge=0, le=MAX_POOL_SLOTS)
    description: str | None = None
