"""Whether a task instance may be scheduled: trigger rules, retries and run outcomes.

Pure domain logic, modelled on Airflow's dependency checks: no database, no clock reads. Callers
(the scheduler, backfill planning, the database layer) gather the facts -- upstream TI states, the
previous run's TI state, try numbers -- and these functions decide:

* `evaluate_trigger_rule`: from the counts of upstream TI states, RUN, WAIT, SKIP or UPSTREAM_FAILED.
  Like Airflow, decisive outcomes are taken early, even while some upstreams are still unfinished.
* `depends_on_past_met`: whether the task's TI in the previous run lets this one start.
* `retry_delay` / `next_state_after_failure`: what happens after a failed try.
* `run_outcome`: the final state of a DAG run once all its TIs are finished (stricter than Airflow:
  any failed TI fails the run, so an ``all_done`` cleanup task cannot turn a failed run green).

The states themselves (`TIState`, `RunState`) live in `dagline.domain.states`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
from collections.abc import Iterable, Mapping

from dagline.domain.states import RunState, TIState
from dagline.limits import MAX_RETRY_DELAY


class TriggerRule(str, enum.Enum):
    """When a task runs, given the states of its upstream TIs (Airflow's rules)."""

    ALL_SUCCESS = "all_success"
    ALL_FAILED = "all_failed"
    ALL_DONE = "all_done"
    ALL_SKIPPED = "all_skipped"
    ONE_SUCCESS = "one_success"
    ONE_FAILED = "one_failed"
    ONE_DONE = "one_done"
    NONE_FAILED = "none_failed"
    NONE_FAILED_MIN_ONE_SUCCESS = "none_failed_min_one_success"
    NONE_SKIPPED = "none_skipped"
    ALWAYS = "always"


class Decision(str, enum.Enum):
    """What to do with a not-yet-scheduled TI: run it, wait, or finish it as skipped / upstream_failed."""

    RUN = "run"
    WAIT = "wait"
    SKIP = "skip"
    UPSTREAM_FAILED = "upstream_failed"


@dataclasses.dataclass(frozen=True)
class UpstreamCounts:
    """Counts of a TI's direct upstream TIs in the same run, by state.

    `total` counts the upstream tasks that have a TI in this run; removed upstreams and upstreams
    with no TI are not counted. Upstreams counted in `total` but in none of the other fields are
    unfinished (none, scheduled, queued, running, up_for_retry).
    """

    success: int = 0
    skipped: int = 0
    failed: int = 0
    upstream_failed: int = 0
    total: int = 0

    def __post_init__(self) -> None:
        if min(self.success, self.skipped, self.failed, self.upstream_failed, self.total) < 0:  # cheap first
            for field in dataclasses.fields(self):
                if getattr(self, field.name) < 0:
                    raise ValueError(f"UpstreamCounts.{field.name} must be >= 0, got {getattr(self, field.name)}")
        if self.done > self.total:
            raise ValueError(f"UpstreamCounts: {self.done} finished upstreams but total is {self.total}")

    @property
    def done(self) -> int:
        """Finished upstreams (success, skipped, failed or upstream_failed)."""
        return self.success + self.skipped + self.failed + self.upstream_failed

    @classmethod
    def from_states(cls, states: Iterable[str]) -> UpstreamCounts:
        """Count upstream TI states; REMOVED ones are ignored (neither counted nor in `total`)."""
        success = skipped = failed = upstream_failed = total = 0
        for state in states:
            if state == TIState.REMOVED:
                continue
            total += 1
            if state == TIState.SUCCESS:
                success += 1
            elif state == TIState.SKIPPED:
                skipped += 1
            elif state == TIState.FAILED:
                failed += 1
            elif state == TIState.UPSTREAM_FAILED:
                upstream_failed += 1
        return cls(success=success, skipped=skipped, failed=failed, upstream_failed=upstream_failed, total=total)


def evaluate_trigger_rule(rule: TriggerRule | str, counts: UpstreamCounts) -> Decision:
    """Decide a TI's fate from its trigger rule and its upstream counts (Airflow semantics).

    A task with no upstream TIs (``total == 0``) runs whatever its rule. Decisive outcomes are taken
    as soon as they are certain, even while other upstreams are unfinished (e.g. ``all_success`` with
    one failed upstream is UPSTREAM_FAILED at once). Raises ValueError for an unknown rule.
    """
    rule = TriggerRule(rule)
    c = counts
    if c.total == 0 or rule is TriggerRule.ALWAYS:
        return Decision.RUN
    all_done = c.done >= c.total
    any_failed = c.failed + c.upstream_failed > 0

    if rule is TriggerRule.ALL_SUCCESS:
        if any_failed:
            return Decision.UPSTREAM_FAILED
        if c.skipped:
            return Decision.SKIP
        return Decision.RUN if c.success >= c.total else Decision.WAIT
    if rule is TriggerRule.ALL_FAILED:
        if c.success or c.skipped:
            return Decision.SKIP
        return Decision.RUN if all_done else Decision.WAIT
    if rule is TriggerRule.ALL_DONE:
        return Decision.RUN if all_done else Decision.WAIT
    if rule is TriggerRule.ALL_SKIPPED:
        if c.success or any_failed:
            return Decision.SKIP
        return Decision.RUN if all_done else Decision.WAIT
    if rule is TriggerRule.ONE_SUCCESS:
        if c.success:
            return Decision.RUN
        if not all_done:
            return Decision.WAIT
        return Decision.SKIP if c.skipped >= c.total else Decision.UPSTREAM_FAILED
    if rule is TriggerRule.ONE_FAILED:
        if any_failed:
            return Decision.RUN
        return Decision.SKIP if all_done else Decision.WAIT
    if rule is TriggerRule.ONE_DONE:
        if c.success or c.failed:
            return Decision.RUN
        return Decision.SKIP if all_done else Decision.WAIT
    if rule is TriggerRule.NONE_FAILED:
        if any_failed:
            return Decision.UPSTREAM_FAILED
        return Decision.RUN if all_done else Decision.WAIT
    if rule is TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS:
        if any_failed:
            return Decision.UPSTREAM_FAILED
        if not all_done:
            return Decision.WAIT
        return Decision.SKIP if c.skipped >= c.total else Decision.RUN
    if rule is TriggerRule.NONE_SKIPPED:
        if c.skipped:
            return Decision.SKIP
        return Decision.RUN if all_done else Decision.WAIT
    raise AssertionError(f"unhandled trigger rule {rule!r}")  # pragma: no cover


def depends_on_past_met(previous_ti_state: str | None) -> bool:
    """Whether a ``depends_on_past`` task may start, given its TI's state in the previous run.

    None means there is no previous run or the task had no TI in it: met. Otherwise met only when the
    previous TI succeeded or was skipped (any other state, removed included, blocks).
    """
    return previous_ti_state is None or previous_ti_state in (TIState.SUCCESS, TIState.SKIPPED)


def _microseconds(delta: dt.timedelta) -> int:
    # Works for pendulum.Duration too (its floor division by a timedelta does not).
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def retry_delay(
    try_number: int,
    base: dt.timedelta,
    exponential: bool,
    max_delay: dt.timedelta = MAX_RETRY_DELAY,
) -> dt.timedelta:
    """Delay before the next try after try `try_number` (1-based) failed.

    `base` when not exponential, else ``base * 2 ** (try_number - 1)``; either way capped at
    `max_delay`. Returns a plain `datetime.timedelta`. Raises ValueError for a try number below 1 or a
    negative base or cap.
    """
    if try_number < 1:
        raise ValueError(f"try_number must be >= 1, got {try_number}")
    base_us, cap_us = _microseconds(base), _microseconds(max_delay)
    if base_us < 0 or cap_us < 0:
        raise ValueError(f"retry delays must not be negative (base={base}, max_delay={max_delay})")
    delay_us = base_us * 2 ** (try_number - 1) if exponential else base_us  # exact int: no overflow
    return dt.timedelta(microseconds=min(delay_us, cap_us))


def pool_too_small(pool: str, pool_slots: int, pool_size: int | None) -> str | None:
    """Why a task instance needing `pool_slots` slots of `pool` (which has `pool_size`, None if it does not
    exist) can never start however long it waits, or None. Said at `dags apply` and by the scheduler."""
    if pool_size is None or pool_slots <= pool_size:
        return None
    return f"poolSlots {pool_slots} > pool {pool} size {pool_size}"


def next_state_after_failure(try_number: int, max_tries: int) -> str:
    """State of a TI whose try `try_number` (1-based) failed; `max_tries` = retries + 1 tries in all."""
    return TIState.UP_FOR_RETRY if try_number < max_tries else TIState.FAILED


def run_outcome(ti_states: Mapping[str, str], leaves: Iterable[str]) -> str | None:
    """Final state of a DAG run from its TIs' states (task id -> state), or None while unfinished.

    FAILED if any TI failed or any leaf task is upstream_failed; else SUCCESS (skipped and removed TIs
    count as fine). Stricter than Airflow, which judges by leaves only: a cleanup leaf with
    ``all_done`` that succeeds after a failure does not make the run green. Leaves without a TI are
    ignored; a run with no TIs at all is SUCCESS.
    """
    if any(state not in TIState.FINISHED for state in ti_states.values()):
        return None
    if any(state == TIState.FAILED for state in ti_states.values()):
        return RunState.FAILED
    if any(ti_states.get(leaf) == TIState.UPSTREAM_FAILED for leaf in leaves):
        return RunState.FAILED
    return RunState.SUCCESS
