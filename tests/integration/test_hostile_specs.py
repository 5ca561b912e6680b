"""Fuzz-style: a generated batch of malformed DAG specs, each applied with the real `dagline dags apply`
next to a healthy spec, must be refused with exit 2 and a message (never a traceback, a hang or a crash),
and leave every stored row exactly as it was (issue 11).

Each example takes a valid document and breaks it in one way drawn from the kinds of hostile input the
issue lists: wrong types, numbers beyond what a column or a date holds, deep nesting, long strings, YAML
alias bombs and alias floods, bad ids, unknown kinds, durations and dates out of range, templates nested
thousands deep, too many tasks. Hypothesis runs a
fixed, derandomized batch (so CI is repeatable) with a per-example deadline as the bound on time.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from dagline import limits
from dagline.cli import main
from dagline.db.models import Base
from tests.helpers.cli import GOOD

pytestmark = pytest.mark.timeout(120)

EXAMPLES = 5  # per kind of hostility and database: 60 specs per database, about 25 s in all

# --- a valid document and ways to break it ------------------------------------------------------------------


def base_document() -> dict:
    return {
        "apiVersion": "dagline.io/v1alpha1", "kind": "DAG", "metadata": {"name": "hostile"},
        "spec": {
            "schedule": "@daily", "startDate": "2026-03-01", "params": {"out": "/tmp/x"},
            "defaults": {"retries": 1, "retryDelay": "PT5M"},
            "tasks": [
                {"id": "a", "retries": 2, "poolSlots": 1, "priorityWeight": 1,
                 "spark": {"mainApplicationFile": "a.py", "arguments": ["{{ ds }}"],
                           "driver": {"cores": 1, "memory": "1g"}, "executor": {"instances": 1, "cores": 1}}},
                {"id": "b", "upstream": ["a"], "spark": {"mainApplicationFile": "b.py"}},
            ],
        },
    }


# (path, smallest, largest) of every bounded integer
INTEGERS = [
    (("spec", "maxActiveRuns"), 1, limits.MAX_ACTIVE_LIMIT),
    (("spec", "maxActiveTasks"), 1, limits.MAX_ACTIVE_LIMIT),
    (("spec", "defaults", "retries"), 0, limits.MAX_RETRIES),
    (("spec", "tasks", 0, "retries"), 0, limits.MAX_RETRIES),
    (("spec", "tasks", 0, "poolSlots"), 1, limits.MAX_POOL_SLOTS),
    (("spec", "tasks", 0, "priorityWeight"), limits.INT32_MIN, limits.INT32_MAX),
    (("spec", "tasks", 0, "maxActiveTisPerDag"), 1, limits.MAX_ACTIVE_LIMIT),
    (("spec", "tasks", 0, "spark", "driver", "cores"), 1, limits.MAX_SPARK_CORES),
    (("spec", "tasks", 0, "spark", "executor", "instances"), 1, limits.MAX_SPARK_INSTANCES),
]
STRINGS = [("metadata", "name"), ("spec", "tasks", 0, "id"), ("spec", "tasks", 0, "pool"),
           ("spec", "tasks", 0, "spark", "mainApplicationFile"), ("spec", "tasks", 0, "spark", "arguments", 0),
           ("spec", "timezone"), ("spec", "schedule")]
DURATIONS = [("spec", "tasks", 0, "retryDelay"), ("spec", "defaults", "retryDelay"),
             ("spec", "tasks", 0, "executionTimeout"), ("spec", "schedule")]
DATES = [("spec", "startDate"), ("spec", "endDate"), ("spec", "tasks", 1, "startDate")]


def put(document: dict, path: tuple, value: Any) -> dict:
    node = document
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return document


def as_yaml(document: dict) -> str:
    return yaml.safe_dump(document, sort_keys=False, width=10**9)


collections = st.one_of(st.lists(st.integers(), min_size=1, max_size=3),
                      st.dictionaries(st.text("abc", min_size=1, max_size=3), st.integers(), min_size=1, max_size=2))


@st.composite
def bad_type(draw) -> str:
    if draw(st.booleans()):  # a number field given a collection or words
        path, _, _ = draw(st.sampled_from(INTEGERS))
        value = draw(st.one_of(collections, st.text("xyz ", min_size=1, max_size=8)))
    else:  # a text field given a collection
        path, value = draw(st.sampled_from(STRINGS[:5])), draw(collections)
    return as_yaml(put(base_document(), path, value))


@st.composite
def huge_number(draw) -> str:
    path, low, high = draw(st.sampled_from(INTEGERS))
    value = draw(st.one_of(st.integers(high + 1, 10**40), st.integers(-(10**40), low - 1),
                           st.sampled_from([float("nan"), float("inf"), float("-inf"), 1e29])))
    if draw(st.integers(0, 4)) == 0:  # an integer too long for Python to read (over 4,300 digits)
        return as_yaml(put(base_document(), path, 7)).replace(": 7\n", ": " + "9" * 5_000 + "\n", 1)
    return as_yaml(put(base_document(), path, value))


@st.composite
def deep_nesting(draw) -> str:
    depth = draw(st.integers(limits.MAX_NESTING_DEPTH + 1, 200_000))
    style = draw(st.sampled_from(["map", "list"]))
    opener, closer = ("{a: ", "}") if style == "map" else ("[", "]")
    text = as_yaml(base_document())
    return text.replace("  params:\n", f"  params:\n    deep: {opener * depth}1{closer * depth}\n", 1)


@st.composite
def long_string(draw) -> str:
    length = draw(st.integers(limits.MAX_STRING_LENGTH + 1, limits.MAX_STRING_LENGTH * 4))
    path = draw(st.sampled_from(STRINGS))
    return as_yaml(put(base_document(), path, draw(st.sampled_from("xé/")) * length))


@st.composite
def alias_bomb(draw) -> str:
    fan_out = draw(st.integers(8, 12))
    levels = draw(st.integers(7, 9))  # fan_out ** levels: 2 million or more, ten times the expansion limit
    lines = [f"    l0: &l0 [{', '.join(['x'] * fan_out)}]"]
    lines += [f"    l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * fan_out)}]" for level in range(1, levels)]
    return as_yaml(base_document()).replace("  params:\n", "  params:\n" + "\n".join(lines) + "\n", 1)


@st.composite
def alias_flood(draw) -> str:
    count = draw(st.integers(limits.MAX_YAML_ALIASES + 1, limits.MAX_YAML_ALIASES * 5))
    many = f"    v: &v 1\n    many: [{', '.join(['*v'] * count)}]\n"
    return as_yaml(base_document()).replace("  params:\n", "  params:\n" + many, 1)


@st.composite
def bad_id(draw) -> str:
    path = draw(st.sampled_from([("metadata", "name"), ("spec", "tasks", 0, "id"), ("spec", "tasks", 0, "pool")]))
    good = {"metadata": "hostile", "spec": "a"}[path[0]] if path[-1] != "pool" else "spark"
    value = draw(st.one_of(
        st.just(good + "\n"),
        st.just(good + "\n" + good),
        st.integers(limits.MAX_ID_LENGTH + 1, 5_000).map(lambda n: "a" * n),
        st.sampled_from(["", " ", "a\tb", "a\x00b", " a", "a ", "\x1b[31m"]),
        st.sampled_from(["a b", "é"] if path[-1] != "pool" else ["\u200ba\u2028"]),  # fine in a pool name: a b
    ))
    if path[-1] == "name" and value == "é":
        value = "Hostile"  # a dag id must be a lowercase DNS label
    return as_yaml(put(base_document(), path, value))


@st.composite
def unknown_kind(draw) -> str:
    kind = draw(st.one_of(st.sampled_from(["Dag", "dag", "DAGs", "Pipeline", "Backfil", "dagrun"]),
                          st.text("ABCDEFGabcdefg", min_size=1, max_size=12)))
    if kind in ("DAG", "Backfill", "DagRun", "Pool"):
        kind = kind + "s"
    return as_yaml({**base_document(), "kind": kind})


@st.composite
def bad_duration(draw) -> str:
    path = draw(st.sampled_from(DURATIONS))
    longest = {"retryDelay": limits.MAX_RETRY_DELAY, "executionTimeout": limits.MAX_EXECUTION_TIMEOUT,
               "schedule": limits.MAX_SCHEDULE_INTERVAL}[path[-1]]
    value = draw(st.one_of(
        st.sampled_from(["P9999Y", "PT99999999999999999999S", "5 minutes", "PT5M\nPT5M", "-PT5M"]),
        st.integers(longest.days + 1, 999_999).map(lambda days: f"P{days}D"),
        st.integers(longest.days // 30 + 2, 99_999).map(lambda months: f"P{months}M"),
    ))
    return as_yaml(put(base_document(), path, value))


@st.composite
def bad_date(draw) -> str:
    year = draw(st.one_of(st.integers(1, limits.MIN_YEAR - 1), st.integers(limits.MAX_YEAR + 1, 9999)))
    day = dt.date(year, draw(st.integers(1, 12)), draw(st.integers(1, 28))).isoformat()
    return as_yaml(put(base_document(), draw(st.sampled_from(DATES)), day))


@st.composite
def deep_template(draw) -> str:
    depth = draw(st.integers(2_000, 20_000))
    template = draw(st.sampled_from(["{{ " + "(" * depth + "1" + ")" * depth + " }}", "{{ " + "[" * depth + "]" * depth
                                     + " }}", "{% if 1 %}" * depth, "{{ " + "-" * depth + "1 }}"]))
    if len(template) > limits.MAX_STRING_LENGTH:
        template = template[: limits.MAX_STRING_LENGTH]  # still unbalanced, so still refused
    return as_yaml(put(base_document(), ("spec", "tasks", 0, "spark", "arguments", 0), template))


@st.composite
def too_many_tasks(draw) -> str:
    count = draw(st.integers(limits.MAX_TASKS_PER_DAG + 1, 20_000))
    document = base_document()
    document["spec"]["tasks"] = [{"id": f"t{i}", "spark": {"mainApplicationFile": "a"}} for i in range(count)]
    return json.dumps(document)  # JSON is YAML, and a large one is quick to write


HOSTILE = {"bad type": bad_type(), "huge number": huge_number(), "deep nesting": deep_nesting(),
           "long string": long_string(), "alias bomb": alias_bomb(), "alias flood": alias_flood(), "bad id": bad_id(),
           "unknown kind": unknown_kind(), "bad duration": bad_duration(), "bad date": bad_date(),
           "deep template": deep_template(), "too many tasks": too_many_tasks()}


# --- the test -------------------------------------------------------------------------------------------------


def stored(db) -> dict[str, list[tuple]]:
    """Every row of every table, in primary-key order: what a refused apply must leave as it was."""
    with db.begin() as conn:
        return {table.name: [tuple(row) for row in conn.execute(select(table).order_by(*table.primary_key.columns))]
                for table in Base.metadata.sorted_tables}


def test_the_valid_base_document_is_accepted(tmp_path):
    from dagline.spec import load_dag_paths

    path = tmp_path / "base.yaml"
    path.write_text(as_yaml(base_document()))
    assert [item.dag.dag_id for item in load_dag_paths([path])] == ["hostile"]


@pytest.mark.parametrize("kind", list(HOSTILE))
@settings(max_examples=EXAMPLES, deadline=dt.timedelta(seconds=10), derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(data=st.data())
def test_a_hostile_spec_is_refused_with_exit_2_and_changes_nothing(db, tmp_path_factory, kind, data):
    text = data.draw(HOSTILE[kind], label=kind)
    folder = tmp_path_factory.mktemp("dags")
    healthy = folder / "healthy.yaml"
    healthy.write_text(GOOD)
    with db.begin() as conn:
        first = not conn.execute(select(Base.metadata.tables["dag"])).first()
    if first:  # the healthy DAG is stored once; later examples would store a new version if applied
        assert CliRunner().invoke(main, ["--db", db.url, "dags", "apply", str(healthy)]).exit_code == 0
    healthy.write_text(GOOD.replace('"@daily"', '"@hourly"'))  # a change: applying it would write
    (folder / "hostile.yaml").write_text(text)
    before = stored(db)
    result = CliRunner().invoke(main, ["--db", db.url, "dags", "apply", str(folder)])
    assert result.exit_code == 2, (result.output[-2000:], text[:500])
    assert result.output.startswith("error: ") and "Traceback" not in result.output
    assert "hostile" in result.output  # the message names the file (or the DAG in it)
    assert stored(db) == before
