"""Tests for dagline.domain.deps: trigger rules, depends_on_past, retries and run outcomes."""

from __future__ import annotations

import datetime as dt

import pendulum
import pytest

from dagline.domain.deps import (
    Decision,
    TriggerRule,
    UpstreamCounts,
    depends_on_past_met,
    evaluate_trigger_rule,
    next_state_after_failure,
    retry_delay,
    run_outcome,
)
from dagline.domain.states import RunState, TIState

R = Decision.RUN
W = Decision.WAIT
S = Decision.SKIP
UF = Decision.UPSTREAM_FAILED

# Upstream counts per case: ok = success, sk = skipped, f = failed, uf = upstream_failed,
# pend = unfinished (running, queued, up_for_retry...). total = ok + sk + f + uf + pend.
# fmt: off
TRIGGER_RULE_TABLE = [
    # rule                              ok sk  f uf pend  expected  case
    ("all_success",                      0, 0, 0, 0, 0,   R,        "no upstreams"),
    ("all_success",                      1, 0, 0, 0, 1,   W,        "one still running"),
    ("all_success",                      2, 0, 0, 0, 0,   R,        "all succeeded"),
    ("all_success",                      1, 0, 1, 0, 0,   UF,       "one failed"),
    ("all_success",                      1, 0, 0, 1, 0,   UF,       "one upstream_failed"),
    ("all_success",                      0, 0, 1, 0, 1,   UF,       "early: failed while another runs"),
    ("all_success",                      1, 1, 0, 0, 0,   S,        "one skipped"),
    ("all_success",                      0, 1, 0, 0, 1,   S,        "early: skipped while another runs"),
    ("all_success",                      0, 1, 1, 0, 0,   UF,       "failure beats skip"),

    ("all_failed",                       0, 0, 0, 0, 0,   R,        "no upstreams"),
    ("all_failed",                       0, 0, 1, 0, 1,   W,        "one still running"),
    ("all_failed",                       0, 0, 1, 1, 0,   R,        "all failed or upstream_failed"),
    ("all_failed",                       1, 0, 1, 0, 0,   S,        "one succeeded"),
    ("all_failed",                       0, 1, 1, 0, 0,   S,        "one skipped"),
    ("all_failed",                       1, 0, 0, 0, 1,   S,        "early: success while another runs"),

    ("all_done",                         0, 0, 0, 0, 0,   R,        "no upstreams"),
    ("all_done",                         1, 1, 1, 0, 1,   W,        "one still running"),
    ("all_done",                         1, 1, 1, 1, 0,   R,        "mixed, all finished"),
    ("all_done",                         0, 0, 2, 0, 0,   R,        "all failed"),

    ("all_skipped",                      0, 0, 0, 0, 0,   R,        "no upstreams"),
    ("all_skipped",                      0, 1, 0, 0, 1,   W,        "one still running"),
    ("all_skipped",                      0, 2, 0, 0, 0,   R,        "all skipped"),
    ("all_skipped",                      1, 1, 0, 0, 0,   S,        "one succeeded"),
    ("all_skipped",                      0, 1, 1, 0, 0,   S,        "one failed"),
    ("all_skipped",                      0, 1, 0, 1, 0,   S,        "one upstream_failed"),
    ("all_skipped",                      0, 0, 1, 0, 1,   S,        "early: failed while another runs"),

    ("one_success",                      0, 0, 0, 0, 0,   R,        "no upstreams"),
    ("one_success",                      0, 1, 1, 0, 1,   W,        "no success yet, one running"),
    ("one_success",                      1, 0, 0, 0, 2,   R,        "early: success while others run"),
    ("one_success",                      1, 1, 1, 0, 0,   R,        "one success among failures"),
    ("one_success",                      0, 2, 0, 0, 0,   S,        "all skipped"),
    ("one_success",                      0, 1, 1, 0, 0,   UF,       "done, no success, some failed"),
    ("one_success",                      0, 0, 0, 2, 0,   UF,       "all upstream_failed"),

    ("one_failed",                       0, 0, 0, 0, 0,   R,        "no upstreams"),
    ("one_failed",                       1, 0, 0, 0, 1,   W,        "none failed yet, one running"),
    ("one_failed",                       0, 0, 1, 0, 2,   R,        "early: failed while others run"),
    ("one_failed",                       1, 0, 0, 1, 0,   R,        "one upstream_failed"),
    ("one_failed",                       1, 1, 0, 0, 0,   S,        "all done, none failed"),

    ("one_done",                         0, 0, 0, 0, 0,   R,        "no upstreams"),
    ("one_done",                         0, 1, 0, 1, 1,   W,        "only skipped/upstream_failed, one running"),
    ("one_done",                         1, 0, 0, 0, 2,   R,        "early: success while others run"),
    ("one_done",                         0, 0, 1, 0, 2,   R,        "early: failed while others run"),
    ("one_done",                         0, 1, 0, 1, 0,   S,        "all done, only skipped/upstream_failed"),
    ("one_done",                         0, 2, 0, 0, 0,   S,        "all skipped"),

    ("none_failed",                      0, 0, 0, 0, 0,   R,        "no upstreams"),
    ("none_failed",                      1, 0, 0, 0, 1,   W,        "one still running"),
    ("none_failed",                      1, 1, 0, 0, 0,   R,        "success and skipped"),
    ("none_failed",                      0, 2, 0, 0, 0,   R,        "all skipped"),
    ("none_failed",                      1, 0, 1, 0, 0,   UF,       "one failed"),
    ("none_failed",                      1, 0, 0, 1, 0,   UF,       "one upstream_failed"),
    ("none_failed",                      0, 0, 1, 0, 1,   UF,       "early: failed while another runs"),

    ("none_failed_min_one_success",      0, 0, 0, 0, 0,   R,        "no upstreams"),
    ("none_failed_min_one_success",      1, 0, 0, 0, 1,   W,        "one still running"),
    ("none_failed_min_one_success",      1, 1, 0, 0, 0,   R,        "success and skipped"),
    ("none_failed_min_one_success",      0, 2, 0, 0, 0,   S,        "all skipped"),
    ("none_failed_min_one_success",      1, 0, 1, 0, 0,   UF,       "one failed"),
    ("none_failed_min_one_success",      0, 1, 0, 1, 0,   UF,       "one upstream_failed"),
    ("none_failed_min_one_success",      0, 0, 1, 0, 1,   UF,       "early: failed while another runs"),

    ("none_skipped",                     0, 0, 0, 0, 0,   R,        "no upstreams"),
    ("none_skipped",                     1, 0, 0, 0, 1,   W,        "one still running"),
    ("none_skipped",                     1, 0, 1, 1, 0,   R,        "all done, none skipped"),
    ("none_skipped",                     1, 1, 0, 0, 0,   S,        "one skipped"),
    ("none_skipped",                     0, 1, 0, 0, 1,   S,        "early: skipped while another runs"),

    ("always",                           0, 0, 0, 0, 0,   R,        "no upstreams"),
    ("always",                           0, 0, 0, 0, 2,   R,        "all still running"),
    ("always",                           0, 1, 1, 1, 0,   R,        "everything went wrong"),
]
# fmt: on


@pytest.mark.parametrize(
    ("rule", "ok", "sk", "f", "uf", "pend", "expected"),
    [pytest.param(*row[:-1], id=f"{row[0]}: {row[-1]}") for row in TRIGGER_RULE_TABLE],
)
def test_trigger_rule(rule, ok, sk, f, uf, pend, expected):
    counts = UpstreamCounts(success=ok, skipped=sk, failed=f, upstream_failed=uf, total=ok + sk + f + uf + pend)
    assert evaluate_trigger_rule(rule, counts) is expected
    assert evaluate_trigger_rule(TriggerRule(rule), counts) is expected


def test_trigger_rule_table_covers_every_rule_and_outcome():
    rules = {row[0] for row in TRIGGER_RULE_TABLE}
    assert rules == {r.value for r in TriggerRule}
    for rule in rules:
        outcomes = {row[6] for row in TRIGGER_RULE_TABLE if row[0] == rule}
        if rule != "always":
            assert W in outcomes, rule
        assert R in outcomes, rule


def test_unknown_trigger_rule_is_refused():
    with pytest.raises(ValueError):
        evaluate_trigger_rule("most_success", UpstreamCounts(success=1, total=1))


def test_upstream_counts_from_states_ignores_removed():
    counts = UpstreamCounts.from_states(
        [TIState.SUCCESS, TIState.SKIPPED, TIState.FAILED, TIState.UPSTREAM_FAILED, TIState.RUNNING,
         TIState.UP_FOR_RETRY, TIState.NONE, TIState.REMOVED]
    )
    assert counts == UpstreamCounts(success=1, skipped=1, failed=1, upstream_failed=1, total=7)
    assert counts.done == 4
    assert UpstreamCounts.from_states([]) == UpstreamCounts()
    assert UpstreamCounts.from_states([TIState.REMOVED]).total == 0


def test_removed_upstreams_do_not_block():
    counts = UpstreamCounts.from_states([TIState.SUCCESS, TIState.REMOVED])
    assert evaluate_trigger_rule(TriggerRule.ALL_SUCCESS, counts) is R
    only_removed = UpstreamCounts.from_states([TIState.REMOVED])
    assert evaluate_trigger_rule(TriggerRule.ONE_SUCCESS, only_removed) is R


@pytest.mark.parametrize(
    "kwargs",
    [dict(success=-1, total=0), dict(success=2, failed=1, total=2)],
    ids=["negative", "more done than total"],
)
def test_upstream_counts_refuse_inconsistent_values(kwargs):
    with pytest.raises(ValueError):
        UpstreamCounts(**kwargs)


@pytest.mark.parametrize(
    ("previous", "met"),
    [
        (None, True),
        (TIState.SUCCESS, True),
        (TIState.SKIPPED, True),
        (TIState.FAILED, False),
        (TIState.UPSTREAM_FAILED, False),
        (TIState.RUNNING, False),
        (TIState.QUEUED, False),
        (TIState.SCHEDULED, False),
        (TIState.UP_FOR_RETRY, False),
        (TIState.NONE, False),
        (TIState.REMOVED, False),
    ],
)
def test_depends_on_past_met(previous, met):
    assert depends_on_past_met(previous) is met


MIN = dt.timedelta(minutes=1)

# fmt: off
RETRY_DELAY_TABLE = [
    # try  base      exponential  max_delay               expected                case
    (1,    5 * MIN,  False,       dt.timedelta(days=1),   5 * MIN,                "linear, first try"),
    (7,    5 * MIN,  False,       dt.timedelta(days=1),   5 * MIN,                "linear, later try"),
    (1,    5 * MIN,  True,        dt.timedelta(days=1),   5 * MIN,                "exponential, first try"),
    (2,    5 * MIN,  True,        dt.timedelta(days=1),   10 * MIN,               "exponential, second try"),
    (4,    5 * MIN,  True,        dt.timedelta(days=1),   40 * MIN,               "exponential, fourth try"),
    (5,    5 * MIN,  True,        30 * MIN,               30 * MIN,               "exponential, capped"),
    (1000, 5 * MIN,  True,        dt.timedelta(days=1),   dt.timedelta(days=1),   "exponential, huge try capped"),
    (1,    2 * dt.timedelta(days=1), False, dt.timedelta(days=1), dt.timedelta(days=1), "linear, capped"),
]
# fmt: on


@pytest.mark.parametrize(
    ("try_number", "base", "exponential", "max_delay", "expected"),
    [pytest.param(*row[:-1], id=row[-1]) for row in RETRY_DELAY_TABLE],
)
def test_retry_delay(try_number, base, exponential, max_delay, expected):
    assert retry_delay(try_number, base, exponential, max_delay) == expected


def test_retry_delay_default_cap_is_one_day():
    assert retry_delay(20, dt.timedelta(seconds=1), True) == dt.timedelta(days=1)
    assert retry_delay(3, dt.timedelta(seconds=1), True) == dt.timedelta(seconds=4)


def test_retry_delay_accepts_pendulum_durations():
    delay = retry_delay(3, pendulum.duration(minutes=5), True, pendulum.duration(hours=1))
    assert delay == dt.timedelta(minutes=20)
    assert type(delay) is dt.timedelta


@pytest.mark.parametrize(
    ("try_number", "base", "max_delay"),
    [(0, MIN, dt.timedelta(days=1)), (1, -MIN, dt.timedelta(days=1)), (1, MIN, -MIN)],
    ids=["try 0", "negative base", "negative cap"],
)
def test_retry_delay_refuses_bad_input(try_number, base, max_delay):
    with pytest.raises(ValueError):
        retry_delay(try_number, base, True, max_delay)


@pytest.mark.parametrize(
    ("try_number", "max_tries", "expected"),
    [
        (1, 1, TIState.FAILED),        # retries=0
        (1, 2, TIState.UP_FOR_RETRY),  # retries=1, first try
        (2, 2, TIState.FAILED),        # retries=1, last try
        (2, 4, TIState.UP_FOR_RETRY),
        (4, 4, TIState.FAILED),
        (5, 4, TIState.FAILED),        # beyond max_tries (e.g. after retries were lowered)
    ],
)
def test_next_state_after_failure(try_number, max_tries, expected):
    assert next_state_after_failure(try_number, max_tries) == expected


# fmt: off
RUN_OUTCOME_TABLE = [
    # TI states (task id -> state)                                          leaves              expected          case
    ({"a": "success", "b": "success"},                                      ["b"],              RunState.SUCCESS, "all succeeded"),
    ({"a": "success", "b": "running"},                                      ["b"],              None,             "unfinished: running"),
    ({"a": "failed", "b": "none"},                                          ["b"],              None,             "unfinished: failure not yet propagated"),
    ({"a": "up_for_retry", "b": "none"},                                    ["b"],              None,             "unfinished: up for retry"),
    ({"a": "success", "b": "scheduled", "c": "queued"},                     ["b", "c"],         None,             "unfinished: scheduled and queued"),
    ({"a": "failed", "b": "upstream_failed"},                               ["b"],              RunState.FAILED,  "failure propagated to leaf"),
    ({"a": "failed", "b": "upstream_failed", "cleanup": "success"},         ["b", "cleanup"],   RunState.FAILED,  "cleanup (all_done) after failure stays failed"),
    ({"a": "failed", "cleanup": "success"},                                 ["cleanup"],        RunState.FAILED,  "failed non-leaf, green only leaf"),
    ({"a": "success", "left": "success", "right": "skipped"},               ["left", "right"],  RunState.SUCCESS, "skipped branch"),
    ({"a": "skipped", "b": "skipped"},                                      ["b"],              RunState.SUCCESS, "everything skipped"),
    ({"a": "success", "b": "upstream_failed", "c": "success"},              ["c"],              RunState.SUCCESS, "upstream_failed non-leaf"),
    ({"a": "success", "b": "removed"},                                      ["b"],              RunState.SUCCESS, "removed leaf"),
    ({"a": "success"},                                                      ["gone"],           RunState.SUCCESS, "leaf without a TI"),
    ({},                                                                    [],                 RunState.SUCCESS, "no TIs"),
]
# fmt: on


@pytest.mark.parametrize(
    ("ti_states", "leaves", "expected"),
    [pytest.param(*row[:-1], id=row[-1]) for row in RUN_OUTCOME_TABLE],
)
def test_run_outcome(ti_states, leaves, expected):
    assert run_outcome(ti_states, leaves) == expected
    assert run_outcome(ti_states, iter(leaves)) == expected  # any iterable of leaves


def test_state_sets():
    assert TIState.FINISHED == {"success", "failed", "upstream_failed", "skipped", "removed"}
    assert TIState.ACTIVE == {"queued", "running"}
    assert RunState.FINISHED == {"success", "failed"}
    assert RunState.ACTIVE == {"queued", "running"}
    assert Decision.UPSTREAM_FAILED == TIState.UPSTREAM_FAILED
    assert TriggerRule("none_failed_min_one_success") is TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS
