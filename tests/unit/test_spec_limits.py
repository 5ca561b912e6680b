"""The bounds of `dagline.limits` as the spec loader enforces them: each hostile input is refused quickly,
with an error that names the field or the limit and the value, and nothing hangs or crashes."""

from __future__ import annotations

import copy
import datetime as dt
import json
import os
import tracemalloc
from pathlib import Path

import pytest
import yaml

from dagline import limits
from dagline.errors import InvalidInput
from dagline.spec import Dag, load_dag_file, load_dag_paths, parse_dag_document, parse_dag_yaml
from dagline.spec.fields import check_pool_name

pytestmark = pytest.mark.timeout(30)  # a hang (a FIFO, an alias bomb) fails instead of blocking the suite


def document(name: str = "lim", **spec) -> dict:
    body = {"schedule": "@daily", "startDate": "2026-03-01",
            "tasks": [{"id": "t", "spark": {"mainApplicationFile": "t.py"}}], **spec}
    return {"apiVersion": "dagline.io/v1alpha1", "kind": "DAG", "metadata": {"name": name}, "spec": body}


def with_task(**fields) -> dict:
    data = document()
    data["spec"]["tasks"][0].update(fields)
    return data


def load(data: dict) -> Dag:
    [parsed] = parse_dag_yaml(yaml.safe_dump(data, sort_keys=False))
    return Dag.from_document(parsed)


def refused(data_or_text, **kwargs) -> InvalidInput:
    text = data_or_text if isinstance(data_or_text, str) else yaml.safe_dump(data_or_text, sort_keys=False)
    with pytest.raises(InvalidInput) as caught:
        for parsed in parse_dag_yaml(text, "hostile.yaml", **kwargs):
            Dag.from_document(parsed)
    return caught.value


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# --- size of the input --------------------------------------------------------------------------------


def test_a_file_over_the_size_limit_is_refused_before_it_is_read(tmp_path):
    text = yaml.safe_dump(document()) + "#" + "x" * limits.MAX_SPEC_FILE_BYTES
    path = write(tmp_path / "big.yaml", text)
    with pytest.raises(InvalidInput) as caught:
        load_dag_file(path)
    assert f"{os.path.getsize(path):,} bytes" in caught.value.reason
    assert f"{limits.MAX_SPEC_FILE_BYTES:,} bytes per spec file" in caught.value.reason
    assert caught.value.source == str(path)
    assert "bytes per spec file" in refused(text).reason  # a text given directly is bounded too


def test_twenty_thousand_tasks_in_five_megabytes_fail_on_the_size(tmp_path):
    data = document(tasks=[{"id": f"task-{i}", "upstream": [f"task-{i - 1}"] if i else [],
                            "spark": {"mainApplicationFile": "job.py", "arguments": ["--x", "y" * 150]}}
                           for i in range(20_000)])
    path = write(tmp_path / "huge.yaml", json.dumps(data, indent=1))  # JSON is YAML, and quick to write
    assert os.path.getsize(path) > 5_000_000
    with pytest.raises(InvalidInput, match="bytes per spec file"):
        load_dag_paths([tmp_path])


def test_more_tasks_than_the_limit_are_refused_before_they_are_validated():
    tasks = [{"id": f"t{i}", "spark": {"mainApplicationFile": "a"}} for i in range(limits.MAX_TASKS_PER_DAG + 1)]
    error = refused(document(tasks=tasks))
    assert error.field == "spec.tasks"
    assert error.source == "lim (hostile.yaml)"
    assert f"more than {limits.MAX_TASKS_PER_DAG:,} tasks at line" in error.reason  # counted while parsing
    assert f"at most {limits.MAX_TASKS_PER_DAG:,}" in error.reason


def test_exactly_the_task_limit_is_accepted():
    tasks = [{"id": f"t{i}", "spark": {"mainApplicationFile": "a"}} for i in range(limits.MAX_TASKS_PER_DAG)]
    assert len(load(document(tasks=tasks)).tasks) == limits.MAX_TASKS_PER_DAG


def test_a_long_string_is_refused_naming_its_line_and_the_limit():
    error = refused(with_task(spark={"mainApplicationFile": "x" * (limits.MAX_STRING_LENGTH + 1)}))
    assert f"{limits.MAX_STRING_LENGTH + 1:,} characters" in error.reason
    assert f"{limits.MAX_STRING_LENGTH:,} characters per string" in error.reason
    assert "line " in error.reason


def test_a_template_that_would_build_a_huge_constant_is_not_built_at_load():
    """Jinja folds constant expressions while compiling: `{{ 'x' * 10**8 }}` would be a 100 MB string
    built by `dags apply` (and 10**10, 10 GB). Loading compiles it without evaluating it."""
    data = with_task(spark={"mainApplicationFile": "a", "arguments": ["{{ 'x' * 10**8 }}", "{{ 10 ** 10 ** 10 }}"]})
    tracemalloc.start()
    try:
        dag = load(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert dag.tasks["t"].spark.arguments == ["{{ 'x' * 10**8 }}", "{{ 10 ** 10 ** 10 }}"]
    assert peak < 20 * limits.MIB


# --- nesting ------------------------------------------------------------------------------------------


def test_params_nested_a_hundred_thousand_levels_are_refused_without_crashing():
    deep = "{a: " * 100_000 + "1" + "}" * 100_000
    text = yaml.safe_dump(document()).replace("spec:\n", f"spec:\n  params: {{deep: {deep}}}\n", 1)
    assert len(text) < limits.MAX_SPEC_FILE_BYTES
    error = refused(text)
    assert "nest" in error.reason


def test_block_style_nesting_is_refused_on_the_event_stream():
    text = yaml.safe_dump(document()) + "extra:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 200))
    error = refused(text)
    assert f"more than {limits.MAX_YAML_DEPTH} levels deep" in error.reason


def test_params_deeper_than_the_json_limit_name_the_field():
    nested: dict = {"leaf": 1}
    for _ in range(limits.MAX_NESTING_DEPTH):
        nested = {"a": nested}
    error = refused(document(params={"deep": nested}))
    assert error.field == "spec.params"
    assert f"more than {limits.MAX_NESTING_DEPTH} levels" in error.reason


def test_params_at_the_depth_limit_are_accepted():
    nested: dict = {"leaf": 1}
    for _ in range(limits.MAX_NESTING_DEPTH - 2):
        nested = {"a": nested}
    assert load(document(params={"deep": nested})).spec.params["deep"]["a"]


def test_a_stored_spec_nested_deeply_is_refused_without_recursion():
    spec = copy.deepcopy(load(document()).spec_json)
    nested: dict = {}
    for _ in range(100_000):
        nested = {"a": nested}
    spec["params"] = {"deep": nested}
    with pytest.raises(InvalidInput) as caught:
        Dag.from_spec_json("lim", spec)
    assert caught.value.field == "spec.params"


# --- aliases ------------------------------------------------------------------------------------------

BOMB = """\
a: &a [x, x, x, x, x, x, x, x, x, x]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]
i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h, *h]
"""


def test_an_alias_bomb_is_refused_without_expanding_it():
    error = refused(BOMB + yaml.safe_dump(document()))
    assert f"more than {limits.MAX_YAML_NODES:,} values" in error.reason
    assert "aliases are expanded" in error.reason


def test_too_many_aliases_are_refused():
    text = "x: &x 1\nmany: [" + ", ".join(["*x"] * (limits.MAX_YAML_ALIASES + 1)) + "]\n" + yaml.safe_dump(document())
    error = refused(text)
    assert f"more than {limits.MAX_YAML_ALIASES} YAML aliases" in error.reason


def test_an_alias_that_nests_too_deep_is_refused():
    deep = "[" * 30 + "1" + "]" * 30
    text = f"a: &a {deep}\nb: [[[[[[[[[[[[[[[[[[[[*a]]]]]]]]]]]]]]]]]]]]\n"
    assert "levels deep" in refused(text).reason


def test_a_few_anchors_and_merge_keys_still_work():
    text = """\
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: merged}
spec:
  tasks:
    - &base
      id: a
      retries: 2
      spark: &spark {mainApplicationFile: a.py}
    - <<: *base
      id: b
      spark: *spark
"""
    dag = load(yaml.safe_load(text))
    assert dag.tasks["b"].retries == 2


# --- numbers and durations ----------------------------------------------------------------------------

NUMBERS = [
    ("priorityWeight 1e29", with_task(priorityWeight=10**29), "spec.tasks[0].priorityWeight", "2147483647"),
    ("priorityWeight -1e29", with_task(priorityWeight=-(10**29)), "spec.tasks[0].priorityWeight", "-2147483648"),
    ("priorityWeight float", with_task(priorityWeight=1e29), "spec.tasks[0].priorityWeight", ""),
    ("retries", with_task(retries=10**9), "spec.tasks[0].retries", str(limits.MAX_RETRIES)),
    ("default retries", document(defaults={"retries": 10**9}), "spec.defaults.retries", str(limits.MAX_RETRIES)),
    ("poolSlots", with_task(poolSlots=2**31), "spec.tasks[0].poolSlots", "2147483647"),
    ("maxActiveTisPerDag", with_task(maxActiveTisPerDag=2**40), "spec.tasks[0].maxActiveTisPerDag", "2147483647"),
    ("maxActiveRuns", document(maxActiveRuns=2**31), "spec.maxActiveRuns", "2147483647"),
    ("maxActiveTasks", document(maxActiveTasks=10**20), "spec.maxActiveTasks", "2147483647"),
    ("executionTimeout P9999Y", with_task(executionTimeout="P9999Y"), "spec.tasks[0].executionTimeout", "P365D"),
    ("executionTimeout huge digits", with_task(executionTimeout="PT99999999999999999999S"),
     "spec.tasks[0].executionTimeout", "9 digits"),
    ("retryDelay above the maximum", with_task(retryDelay="P2D"), "spec.tasks[0].retryDelay", "P1D"),
    ("retryDelay in months", document(defaults={"retryDelay": "P1M"}), "spec.defaults.retryDelay", "1 day"),
    ("schedule of 9999 years", document(schedule="P9999Y"), "spec.schedule", "P3650D"),
    ("driver cores", with_task(spark={"mainApplicationFile": "a", "driver": {"cores": 10**6}}),
     "spec.tasks[0].spark.driver.cores", str(limits.MAX_SPARK_CORES)),
    ("executor instances", with_task(spark={"mainApplicationFile": "a", "executor": {"instances": 10**9}}),
     "spec.tasks[0].spark.executor.instances", str(limits.MAX_SPARK_INSTANCES)),
    ("executor memory", with_task(spark={"mainApplicationFile": "a", "executor": {"memory": "99999999p"}}),
     "spec.tasks[0].spark.executor.memory", "1p"),
    ("memory without unit", with_task(spark={"mainApplicationFile": "a", "driver": {"memory": "9" * 20}}),
     "spec.tasks[0].spark.driver.memory", "1p"),
]


@pytest.mark.parametrize("data, field, limit", [case[1:] for case in NUMBERS], ids=[case[0] for case in NUMBERS])
def test_numbers_beyond_what_a_column_or_a_date_holds_are_refused_naming_the_field(data, field, limit):
    error = refused(data)
    assert error.field == field
    assert limit in error.reason


def test_an_integer_of_thousands_of_digits_is_an_error_not_a_crash():
    text = yaml.safe_dump(with_task(retries=7)).replace("retries: 7", "retries: " + "9" * 5000)
    error = refused(text)
    assert "invalid YAML value" in error.reason and "digits" in error.reason


def test_an_unquoted_date_of_year_zero_is_an_error_not_a_crash():
    text = yaml.safe_dump(document()).replace("startDate: '2026-03-01'", "startDate: 0000-01-01")
    assert "startDate: 0000-01-01" in text
    assert "invalid YAML value" in refused(text).reason


@pytest.mark.parametrize("template", ["{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}", "{% if 1 %}" * 3000])
def test_a_template_nested_thousands_deep_is_an_error_not_a_crash(template):
    error = refused(with_task(spark={"mainApplicationFile": "a", "arguments": [template]}))
    assert error.field == "spec.tasks[0].spark.arguments[0]"
    assert "nests too deeply" in error.reason


def test_the_largest_accepted_numbers_load():
    dag = load(with_task(priorityWeight=limits.INT32_MAX, retries=limits.MAX_RETRIES, poolSlots=limits.MAX_POOL_SLOTS,
                         retryDelay="P1D", retryExponentialBackoff=True, executionTimeout="P365D"))
    task = dag.tasks["t"]
    assert (task.priority_weight, task.retries, task.pool_slots) == (2**31 - 1, 1000, 2**31 - 1)


def test_a_zero_retry_delay_means_retry_at_once():
    dag = load(with_task(retryDelay="PT0S", retries=1))
    assert dag.tasks["t"].retry_delay.as_timedelta() == dt.timedelta(0)
    assert load(document(defaults={"retryDelay": "PT0S"})).tasks["t"].retry_delay.total_seconds() == 0


@pytest.mark.parametrize("field, value", [("executionTimeout", "PT0S"), ("schedule", "PT0S")])
def test_other_zero_durations_stay_refused(field, value):
    data = with_task(executionTimeout=value) if field == "executionTimeout" else document(schedule=value)
    assert "zero duration" in refused(data).reason


# --- dates --------------------------------------------------------------------------------------------

DATES = [
    ("startDate year 1", document(startDate="0001-01-01"), "spec.startDate"),
    ("startDate year 9999", document(startDate="9999-12-31T23:00:00"), "spec.startDate"),
    ("endDate year 9999", document(endDate="9999-12-31"), "spec.endDate"),
    ("task startDate year 1", with_task(startDate="0001-01-01T00:00:00"), "spec.tasks[0].startDate"),
]


@pytest.mark.parametrize("data, field", [case[1:] for case in DATES], ids=[case[0] for case in DATES])
def test_dates_near_the_ends_of_the_calendar_are_refused(data, field):
    error = refused(data)
    assert error.field == field
    assert f"{limits.MIN_YEAR} to {limits.MAX_YEAR}" in error.reason


# --- ids ----------------------------------------------------------------------------------------------

IDS = [
    ("task id ending in a newline", with_task(id="extract\n"), "spec.tasks[0].id"),
    ("task id too long", with_task(id="t" * (limits.MAX_ID_LENGTH + 1)), "spec.tasks[0].id"),
    ("dag id ending in a newline", {**document(), "metadata": {"name": "sales\n"}}, "metadata.name"),
    ("pool name too long", with_task(pool="p" * (limits.MAX_ID_LENGTH + 1)), "spec.tasks[0].pool"),
    ("pool name ending in a newline", document(defaults={"pool": "spark\n"}), "spec.defaults.pool"),
    ("memory ending in a newline", with_task(spark={"mainApplicationFile": "a", "driver": {"memory": "1g\n"}}),
     "spec.tasks[0].spark.driver.memory"),
]


@pytest.mark.parametrize("data, field", [case[1:] for case in IDS], ids=[case[0] for case in IDS])
def test_ids_are_matched_whole_and_bounded(data, field):
    assert refused(data).field == field


def test_ids_of_exactly_the_limit_are_accepted():
    name = "p" * limits.MAX_ID_LENGTH
    dag = load(with_task(id="t" * limits.MAX_ID_LENGTH, pool=name))
    assert list(dag.tasks) == ["t" * limits.MAX_ID_LENGTH]
    assert check_pool_name(name) == name
    with pytest.raises(ValueError, match="1 to 250"):
        check_pool_name(name + "p")


# --- kinds --------------------------------------------------------------------------------------------


def test_an_unknown_kind_in_a_folder_is_an_error_naming_the_file(tmp_path):
    write(tmp_path / "good.yaml", yaml.safe_dump(document("good")))
    typo = write(tmp_path / "typo.yaml", yaml.safe_dump({**document("typo"), "kind": "Dag"}))
    with pytest.raises(InvalidInput) as caught:
        load_dag_paths([tmp_path])
    assert caught.value.source == str(typo)
    assert caught.value.field == "kind"
    assert "unknown kind 'Dag'" in caught.value.reason and "did you mean 'DAG'?" in caught.value.reason


def test_the_other_kinds_are_skipped_and_another_tools_manifests_skipped_with_a_warning(tmp_path):
    pool = {"apiVersion": "dagline.io/v1alpha1", "kind": "Pool", "metadata": {"name": "p"}, "spec": {"slots": 4}}
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    write(tmp_path / "all.yaml", "---\n".join(yaml.safe_dump(d) for d in (pool, config, document("dag"))))
    warnings: list[str] = []
    loaded = load_dag_paths([tmp_path], warn=warnings.append)
    assert [item.dag.dag_id for item in loaded] == ["dag"]
    assert warnings == [f"{tmp_path / 'all.yaml'}: skipped document 2: v1 ConfigMap is not a dagline document"]


def test_the_task_count_is_checked_on_a_resource_body_too():
    tasks = [{"id": f"t{i}", "spark": {"mainApplicationFile": "a"}} for i in range(limits.MAX_TASKS_PER_DAG + 1)]
    with pytest.raises(InvalidInput) as caught:
        parse_dag_document(document(tasks=tasks))
    assert caught.value.field == "spec.tasks"


# --- special files ------------------------------------------------------------------------------------


def test_a_fifo_in_a_folder_is_skipped_with_a_warning(tmp_path):
    write(tmp_path / "good.yaml", yaml.safe_dump(document("good")))
    os.mkfifo(tmp_path / "pipe.yaml")  # opening it for reading would block until a writer comes
    warnings: list[str] = []
    assert [item.dag.dag_id for item in load_dag_paths([tmp_path], warn=warnings.append)] == ["good"]
    assert warnings == [f"{tmp_path / 'pipe.yaml'}: skipped: a FIFO, not a regular file"]


def test_a_fifo_or_a_device_named_on_its_own_is_an_error(tmp_path):
    os.mkfifo(tmp_path / "pipe.yaml")
    with pytest.raises(InvalidInput, match="a FIFO, not a regular file"):
        load_dag_paths([tmp_path / "pipe.yaml"])
    with pytest.raises(InvalidInput, match="a character device, not a regular file"):
        load_dag_paths(["/dev/zero"])
    with pytest.raises(InvalidInput, match="a character device, not a regular file"):
        load_dag_file("/dev/urandom")


def test_a_symlink_to_a_device_in_a_folder_is_skipped(tmp_path):
    write(tmp_path / "good.yaml", yaml.safe_dump(document("good")))
    os.symlink("/dev/zero", tmp_path / "zero.yaml")
    warnings: list[str] = []
    assert [item.dag.dag_id for item in load_dag_paths([tmp_path], warn=warnings.append)] == ["good"]
    assert "a character device" in warnings[0]


# --- documentation --------------------------------------------------------------------------------------


def test_the_limits_page_lists_every_limit():
    """docs/reference/limits.md names every bound of `dagline.limits` (units and the column types they
    are built from aside), so a new bound cannot go undocumented."""
    section = (Path(__file__).parents[2] / "docs" / "reference" / "limits.md").read_text()
    names = [name for name in vars(limits) if name.isupper() and name not in ("KIB", "MIB", "INT32_MAX", "INT32_MIN")]
    assert [name for name in names if f"`{name}`" not in section] == []
