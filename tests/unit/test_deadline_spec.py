"""The `deadline` of a DAG or task in the spec: validation naming the field, and the instant it sets."""

from __future__ import annotations

import datetime as dt

import pytest

from dagline.domain.deadlines import DeadlineSpec, deadline_at
from dagline.errors import InvalidInput
from dagline.spec import parse_dag_yaml

UTC = dt.timezone.utc


def _dag(deadline: str, where: str = "spec") -> str:
    task_deadline = f", deadline: {deadline}" if where == "task" else ""
    dag_deadline = f"\n  deadline: {deadline}" if where == "spec" else ""
    return f"""
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {{name: d}}
spec:{dag_deadline}
  tasks: [{{id: a{task_deadline}, spark: {{mainApplicationFile: a.py}}}}]
"""


@pytest.mark.parametrize("deadline, where, field, message", [
    ("{within: PT0S}", "spec", "spec.deadline.within", "zero duration"),
    ("{within: two hours}", "spec", "spec.deadline.within", "two hours"),
    ("{within: PT1H, of: start_date}", "task", "spec.tasks[0].deadline.of", "data_interval_end"),
    ("{of: queued}", "spec", "spec.deadline.within", ""),
    ("{within: PT1H, after: queued}", "spec", "spec.deadline.after", ""),
])
def test_a_bad_deadline_is_refused_naming_the_field(deadline, where, field, message):
    with pytest.raises(InvalidInput) as caught:
        parse_dag_yaml(_dag(deadline, where))
    assert field in str(caught.value) and message in str(caught.value)


def test_the_deadline_instant_by_reference():
    logical, end, queued = (dt.datetime(2026, 3, 1, tzinfo=UTC), dt.datetime(2026, 3, 2, tzinfo=UTC),
                            dt.datetime(2026, 3, 2, 0, 7, tzinfo=UTC))
    times = {"logical_date": logical, "data_interval_end": end, "queued_at": queued}
    assert deadline_at(DeadlineSpec(within="PT2H"), **times) == end + dt.timedelta(hours=2)
    assert deadline_at(DeadlineSpec(within="PT2H", of="logical_date"), **times) == logical + dt.timedelta(hours=2)
    assert deadline_at(DeadlineSpec(within="PT30M", of="queued"), **times) == queued + dt.timedelta(minutes=30)
    assert deadline_at(None, **times) is None
    (doc,) = parse_dag_yaml(_dag("{within: P1DT2H, of: logical_date}", "task"))
    assert doc.spec.tasks[0].deadline.within == "P1DT2H"
