"""The DAG spec: parsing, validation errors, resolution of defaults, versions, and loading files."""

from __future__ import annotations

import copy
import datetime as dt
import json
import os
from pathlib import Path

import pendulum
import pytest
import yaml

from dagline.errors import InvalidInput
from dagline.spec import (
    BackfillSpec,
    Dag,
    DagDocument,
    DagSpec,
    PoolSpec,
    TaskSpec,
    load_dag_file,
    load_dag_paths,
    normalized_spec,
    parse_dag_yaml,
    spec_version,
)

SPECS = Path(__file__).parent / "specs"
SALES = SPECS / "sales-daily.yaml"
UTC = dt.timezone.utc


def sales_data() -> dict:
    """The full example as plain data, for tests that change one thing in it."""
    return yaml.safe_load(SALES.read_text())


def parse_one(data: dict) -> Dag:
    [document] = parse_dag_yaml(yaml.safe_dump(data, sort_keys=False))
    return Dag.from_document(document)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def minimal(name: str, **spec) -> str:
    body = {"tasks": [{"id": "t", "spark": {"mainApplicationFile": "t.py"}}], **spec}
    document = {"apiVersion": "dagline.io/v1alpha1", "kind": "DAG", "metadata": {"name": name}, "spec": body}
    return yaml.safe_dump(document)


# --- the full example --------------------------------------------------------------------------


def test_full_example_loads_with_defaults_and_overrides():
    [loaded] = load_dag_file(SALES)
    dag = loaded.dag
    assert loaded.source_path == str(SALES.resolve())
    assert (dag.dag_id, dag.namespace, dag.name) == ("data/sales-daily", "data", "sales-daily")  # metadata.namespace
    assert dag.timezone == "Europe/Amsterdam"
    assert dag.spec.schedule == "0 2 * * *"
    assert dag.start_date == dt.datetime(2025, 12, 31, 23, 0, tzinfo=UTC)  # naive: Amsterdam midnight
    assert dag.end_date is None
    assert dag.spec.max_active_runs == 4 and dag.spec.max_active_tasks == 16
    assert dag.spec.params == {"out": "/tmp/dagline-demo"}
    assert list(dag.tasks) == ["extract", "transform"]

    extract = dag.tasks["extract"]  # everything from `defaults`
    assert extract.upstream == ()
    assert extract.trigger_rule == "all_success"
    assert extract.retries == 2
    assert extract.retry_delay == pendulum.duration(minutes=5)
    assert extract.retry_exponential_backoff is False
    assert extract.depends_on_past is False
    assert (extract.pool, extract.pool_slots, extract.priority_weight) == ("default", 1, 1)
    assert extract.max_active_tis_per_dag is None
    assert extract.execution_timeout is None
    assert extract.start_date is None
    assert extract.spark.main_application_file == "jobs/extract.py"
    assert extract.spark.arguments == ["--date", "{{ ds }}", "--out", "{{ params.out }}"]
    assert extract.spark.conf == {"spark.sql.shuffle.partitions": "4"}
    assert extract.spark.driver.cores == 1 and extract.spark.driver.memory == "1g"
    assert extract.spark.executor.instances == 1

    transform = dag.tasks["transform"]  # its own settings win
    assert transform.upstream == ("extract",)
    assert transform.retries == 3
    assert transform.retry_delay == pendulum.duration(minutes=10)
    assert (transform.pool, transform.pool_slots) == ("spark", 2)
    assert transform.max_active_tis_per_dag == 1
    assert transform.depends_on_past is True
    assert transform.execution_timeout == pendulum.duration(hours=1)
    assert transform.spark.conf == {
        "spark.sql.shuffle.partitions": "8",
        "spark.sql.adaptive.enabled": "true",
        "spark.app.name": "{{ dag_id }}.{{ task_id }}",
    }
    assert transform.spark.executor.instances == 2 and transform.spark.executor.memory == "2g"

    assert dag.downstream == {"extract": ("transform",), "transform": ()}
    assert dag.roots == ("extract",)
    assert dag.leaves == ("transform",)
    assert dag.spec_json == normalized_spec(dag.spec)
    assert dag.version == spec_version(dag.spec)
    assert len(dag.version) == 16 and int(dag.version, 16) >= 0


def test_minimal_dag_gets_every_default():
    [document] = parse_dag_yaml(minimal("tiny"))
    dag = Dag.from_document(document)
    spec = dag.spec
    assert (spec.schedule, spec.timezone, spec.start_date, spec.end_date) == (None, "UTC", None, None)
    # safe defaults, as in Airflow: no catch-up storm, and a new DAG waits to be unpaused
    assert (spec.catchup, spec.paused, spec.max_active_runs, spec.max_active_tasks) == (False, True, 16, 16)
    task = dag.tasks["t"]
    assert (task.retries, task.retry_delay, task.pool, task.pool_slots, task.priority_weight) == (
        0, pendulum.duration(minutes=5), "default", 1, 1)
    assert (task.retry_exponential_backoff, task.depends_on_past, task.trigger_rule) == (False, False, "all_success")
    assert task.spark.arguments == [] and task.spark.conf == {} and task.spark.image is None
    json_spec = dag.spec_json
    assert json_spec["defaults"]["retryDelay"] == "PT5M" and json_spec["tasks"][0]["triggerRule"] == "all_success"


def test_python_names_are_accepted_too():
    task = {"id": "t", "spark": {"main_application_file": "t.py"}}
    spec = DagSpec.model_validate({"max_active_runs": 2, "tasks": [task]})
    assert spec.max_active_runs == 2
    assert normalized_spec(spec)["maxActiveRuns"] == 2


def test_task_start_date_naive_is_in_the_dag_time_zone():
    data = sales_data()
    data["spec"]["tasks"][0]["startDate"] = "2026-02-01T06:00:00"
    data["spec"]["tasks"][1]["startDate"] = "2026-02-01T06:00:00+00:00"
    dag = parse_one(data)
    assert dag.tasks["extract"].start_date == dt.datetime(2026, 2, 1, 5, 0, tzinfo=UTC)
    assert dag.tasks["transform"].start_date == dt.datetime(2026, 2, 1, 6, 0, tzinfo=UTC)


def test_unquoted_yaml_dates_are_read_like_strings():
    text = SALES.read_text().replace('startDate: "2026-01-01T00:00:00"', "startDate: 2026-01-01")
    [document] = parse_dag_yaml(text)
    assert Dag.from_document(document).start_date == dt.datetime(2025, 12, 31, 23, 0, tzinfo=UTC)


def test_params_are_kept_as_json_values():
    data = sales_data()
    data["spec"]["params"] = {"out": "/o", "day": dt.date(2026, 1, 2), "n": 3}
    dag = parse_one(data)
    assert dag.spec.params == {"out": "/o", "day": "2026-01-02", "n": 3}  # what a DAG rebuilt from the database sees


def test_end_date_is_resolved_in_the_time_zone():
    data = sales_data()
    data["spec"]["endDate"] = "2026-06-30T00:00:00"
    assert parse_one(data).end_date == dt.datetime(2026, 6, 29, 22, 0, tzinfo=UTC)


# --- invalid input -------------------------------------------------------------------------------


def _tasks(data):
    return data["spec"]["tasks"]


def _parent(data, path: str):
    """The container holding the last key of a dotted path (numbers index lists), and that key."""
    *parents, last = path.split(".")
    node = data
    for key in parents:
        node = node[int(key) if key.isdigit() else key]
    return node, int(last) if last.isdigit() else last


def _set(path: str, value):
    """A change to the example: set `value` at `path`."""

    def change(data):
        node, key = _parent(data, path)
        node[key] = value

    return change


def _set_conf(task: int, key: str, value: str):
    """Conf keys hold dots, so they get their own change."""

    def change(data):
        data["spec"]["tasks"][task]["spark"]["conf"][key] = value

    return change


def _rename(path: str, new: str):
    def change(data):
        node, key = _parent(data, path)
        node[new] = node.pop(key)

    return change


def _drop(path: str):
    def change(data):
        node, key = _parent(data, path)
        del node[key]

    return change


BAD_INPUTS = [
    # (id, change, field, words in the message)
    ("unknown task field", _rename("spec.tasks.1.retries", "retires"), "spec.tasks[1].retires",
     ["unknown field", "did you mean 'retries'"]),
    ("unknown spark key", _rename("spec.tasks.0.spark", "sprak"), "spec.tasks[0].sprak",
     ["unknown field", "did you mean 'spark'", "spec.tasks[0].spark: required field is missing"]),
    ("unknown spec field", _set("spec.schedul", "@daily"), "spec.schedul", ["unknown field", "'schedule'"]),
    ("unknown driver field", _set("spec.tasks.0.spark.driver.gpus", 1), "spec.tasks[0].spark.driver.gpus",
     ["unknown field", "cores, memory"]),
    ("bad cron", _set("spec.schedule", "0 25 * * *"), "spec.schedule", ["0 25 * * *"]),
    ("cron with 4 fields", _set("spec.schedule", "0 2 * *"), "spec.schedule", ["0 2 * *"]),
    ("bad preset", _set("spec.schedule", "@fortnightly"), "spec.schedule", ["@fortnightly"]),
    ("bad duration schedule", _set("spec.schedule", "P1X"), "spec.schedule", ["P1X"]),
    ("unknown time zone", _set("spec.timezone", "Europe/Amsterdm"), "spec.timezone",
     ["unknown time zone", "Europe/Amsterdm"]),
    ("cycle", _set("spec.tasks.0.upstream", ["transform"]), "spec.tasks[0].upstream",
     ["cycle", "extract -> transform -> extract"]),
    ("task depends on itself", _set("spec.tasks.1.upstream", ["extract", "transform"]), "spec.tasks[1].upstream",
     ["cycle", "transform -> transform"]),
    ("unknown upstream", _set("spec.tasks.1.upstream", ["extrct"]), "spec.tasks[1].upstream",
     ["unknown task 'extrct' (tasks are: extract, transform)"]),
    ("duplicate task id", _set("spec.tasks.1.id", "extract"), "spec.tasks[1].id",
     ["duplicate task id 'extract'", "spec.tasks[0]"]),
    ("bad default retryDelay", _set("spec.defaults.retryDelay", "5 minutes"), "spec.defaults.retryDelay",
     ["'5 minutes' is not an ISO-8601 duration"]),
    ("bad task retryDelay", _set("spec.tasks.1.retryDelay", "10m"), "spec.tasks[1].retryDelay",
     ["not an ISO-8601 duration"]),
    ("zero executionTimeout", _set("spec.defaults.executionTimeout", "PT0S"), "spec.defaults.executionTimeout",
     ["zero duration"]),
    ("bad task executionTimeout", _set("spec.tasks.1.executionTimeout", "1h"), "spec.tasks[1].executionTimeout",
     ["'1h' is not an ISO-8601 duration"]),
    ("bad default executionTimeout", _set("spec.defaults.executionTimeout", "forever"),
     "spec.defaults.executionTimeout", ["not an ISO-8601 duration"]),
    ("template does not parse", _set("spec.tasks.0.spark.arguments.1", "{{ ds "), "spec.tasks[0].spark.arguments[1]",
     ["does not parse"]),
    ("unknown template variable in an argument", _set("spec.tasks.0.spark.arguments.1", "{{ execution_date }}"),
     "spec.tasks[0].spark.arguments[1]", ["unknown variable execution_date"]),
    ("unknown template variable in conf", _set_conf(1, "spark.app.name", "{{ dag }}"),
     'spec.tasks[1].spark.conf["spark.app.name"]', ["unknown variable dag"]),
    ("unknown filter", _set("spec.tasks.0.spark.arguments.1", "{{ ds | nodash }}"),
     "spec.tasks[0].spark.arguments[1]", ["does not parse", "nodash"]),
    ("unknown param", _set("spec.tasks.0.spark.arguments.3", "{{ params.outdir }}"),
     "spec.tasks[0].spark.arguments[3]", ["unknown param outdir", "params are: out"]),
    ("dag id with capitals", _set("metadata.name", "Sales-Daily"), "metadata.name", ["DNS-1123"]),
    ("dag id with underscore", _set("metadata.name", "sales_daily"), "metadata.name", ["DNS-1123"]),
    ("dag id too long", _set("metadata.name", "a" * 64), "metadata.name", ["at most 63"]),
    ("dag id missing", _set("metadata", {"namespace": "data"}), "metadata.name", ["required"]),
    ("task id with a space", _set("spec.tasks.0.id", "ex tract"), "spec.tasks[0].id",
     ["'ex tract'", "letters, digits"]),
    ("negative retries", _set("spec.tasks.1.retries", -1), "spec.tasks[1].retries", ["greater than or equal to 0"]),
    ("negative default retries", _set("spec.defaults.retries", -2), "spec.defaults.retries",
     ["greater than or equal to 0"]),
    ("poolSlots 0", _set("spec.tasks.1.poolSlots", 0), "spec.tasks[1].poolSlots", ["greater than or equal to 1"]),
    ("maxActiveRuns 0", _set("spec.maxActiveRuns", 0), "spec.maxActiveRuns", ["greater than or equal to 1"]),
    ("maxActiveTasks 0", _set("spec.maxActiveTasks", 0), "spec.maxActiveTasks", ["greater than or equal to 1"]),
    ("retries not a number", _set("spec.tasks.1.retries", "many"), "spec.tasks[1].retries",
     ["valid integer", "'many'"]),
    ("endDate before startDate", _set("spec.endDate", "2025-12-01T00:00:00"), "spec.endDate",
     ["before startDate"]),
    ("schedule without startDate", _drop("spec.startDate"), "spec.startDate", ["required when a schedule is set"]),
    ("wrong apiVersion", _set("apiVersion", "dagline.io/v1"), "apiVersion", ["dagline.io/v1alpha1", "'dagline.io/v1'"]),
    ("missing kind", _drop("kind"), "kind", ["required field is missing"]),
    ("unknown trigger rule", _set("spec.tasks.1.triggerRule", "all_sucess"), "spec.tasks[1].triggerRule",
     ["all_success", "'all_sucess'"]),
    ("bad memory", _set("spec.tasks.0.spark.driver.memory", "1 GB"), "spec.tasks[0].spark.driver.memory",
     ["not a Spark memory size"]),
    ("no tasks", _set("spec.tasks", []), "spec.tasks", ["at least 1"]),
    ("no main file", _drop("spec.tasks.0.spark.mainApplicationFile"), "spec.tasks[0].spark.mainApplicationFile",
     ["required field is missing"]),
    ("conf value a list", _set("spec.tasks.0.spark.conf.x", [1]), 'spec.tasks[0].spark.conf.x', ["valid string"]),
]


@pytest.mark.parametrize(
    "change, field, words", [case[1:] for case in BAD_INPUTS], ids=[case[0] for case in BAD_INPUTS]
)
def test_invalid_input_names_the_field_and_the_cause(change, field, words):
    data = sales_data()
    change(data)
    with pytest.raises(InvalidInput) as caught:
        parse_dag_yaml(yaml.safe_dump(data, sort_keys=False), "examples/sales/dag.yaml")
    error = caught.value
    assert error.field == field, str(error)
    for word in words:
        assert word in error.reason, str(error)
    if data.get("metadata", {}).get("name") == "sales-daily":
        assert error.source == "sales-daily (examples/sales/dag.yaml)"
    assert str(error).startswith(f"{error.source}: {field}: ")


def test_several_problems_are_all_reported_one_per_line():
    data = sales_data()
    _tasks(data)[1]["retries"] = -1
    _tasks(data)[1]["poolSlots"] = 0
    data["spec"]["timezone"] = "Mars/Olympus"
    with pytest.raises(InvalidInput) as caught:
        parse_dag_yaml(yaml.safe_dump(data))
    error = caught.value
    assert error.field == "spec.timezone"
    lines = error.reason.splitlines()
    assert len(lines) == 3
    assert "unknown time zone 'Mars/Olympus'" in lines[0]
    assert lines[1].startswith("spec.tasks[1].retries: ")
    assert lines[2].startswith("spec.tasks[1].poolSlots: ")


def test_several_graph_problems_are_all_reported():
    data = sales_data()
    _tasks(data)[0]["upstream"] = ["nope"]
    _tasks(data)[1]["upstream"] = ["extract", "missing"]
    with pytest.raises(InvalidInput) as caught:
        parse_dag_yaml(yaml.safe_dump(data))
    assert caught.value.field == "spec.tasks[0].upstream"
    assert caught.value.reason.splitlines()[1] == (
        "spec.tasks[1].upstream: unknown task 'missing' (tasks are: extract, transform)")


def test_longer_cycle_is_named_in_order():
    text = minimal("loop").replace("tasks:\n- id: t\n  spark:\n    mainApplicationFile: t.py\n", "")
    data = yaml.safe_load(text)
    data["spec"]["tasks"] = [
        {"id": "a", "spark": {"mainApplicationFile": "a.py"}},
        {"id": "b", "upstream": ["a", "d"], "spark": {"mainApplicationFile": "b.py"}},
        {"id": "c", "upstream": ["b"], "spark": {"mainApplicationFile": "c.py"}},
        {"id": "d", "upstream": ["c"], "spark": {"mainApplicationFile": "d.py"}},
        {"id": "e", "upstream": ["d"], "spark": {"mainApplicationFile": "e.py"}},
    ]
    with pytest.raises(InvalidInput) as caught:
        parse_dag_yaml(yaml.safe_dump(data))
    assert caught.value.field == "spec.tasks[1].upstream"
    assert caught.value.reason == "cycle in the task graph: b -> c -> d -> b"


def test_invalid_yaml_names_the_line():
    text = SALES.read_text().replace("  timezone: Europe/Amsterdam", "  timezone: [Europe/Amsterdam")
    with pytest.raises(InvalidInput) as caught:
        parse_dag_yaml(text, "dag.yaml")
    assert caught.value.source == "dag.yaml"
    assert caught.value.field is None
    assert "invalid YAML at line" in caught.value.reason


def test_invalid_yaml_line_number_is_right():
    text = "apiVersion: dagline.io/v1alpha1\nkind: DAG\nmetadata:\n  name: x\n   bad: indentation\n"
    with pytest.raises(InvalidInput, match=r"invalid YAML at line 5"):
        parse_dag_yaml(text)


def test_a_key_given_twice_is_refused():
    text = SALES.read_text().replace("      retries: 3\n", "      retries: 3\n      retries: 4\n")
    with pytest.raises(InvalidInput) as caught:
        parse_dag_yaml(text, "dag.yaml")
    assert "duplicate key 'retries'" in caught.value.reason
    assert "at line 40" in caught.value.reason and "first at line 39" in caught.value.reason


def test_yaml_anchors_and_merge_keys_work():
    text = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: anchors}
spec:
  tasks:
    - id: a
      spark: &spark {mainApplicationFile: job.py, arguments: ["--step", a], executor: {instances: 2}}
    - id: b
      upstream: [a]
      spark:
        <<: *spark
        arguments: ["--step", b]
"""
    dag = Dag.from_document(parse_dag_yaml(text)[0])
    assert dag.tasks["b"].spark.arguments == ["--step", "b"]
    assert dag.tasks["b"].spark.executor.instances == 2


def test_unknown_upstream_in_a_large_dag_suggests_close_ids():
    data = yaml.safe_load(minimal("large"))
    ids = ["extract_orders", "extract_customers"] + [f"report_{n:02d}" for n in range(30)]
    data["spec"]["tasks"] = [{"id": task_id, "spark": {"mainApplicationFile": "job.py"}} for task_id in ids]
    data["spec"]["tasks"][5]["upstream"] = ["extract_order"]
    with pytest.raises(InvalidInput) as caught:
        parse_dag_yaml(yaml.safe_dump(data))
    assert caught.value.field == "spec.tasks[5].upstream"
    assert caught.value.reason.startswith("unknown task 'extract_order' (did you mean 'extract_orders'")


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "---\n---\n"])
def test_empty_file_is_refused(text):
    with pytest.raises(InvalidInput, match="empty file"):
        parse_dag_yaml(text, "empty.yaml")


def test_a_document_that_is_not_a_mapping_is_refused():
    with pytest.raises(InvalidInput, match="expected a mapping"):
        parse_dag_yaml("- just\n- a list\n")


def test_from_document_checks_a_document_built_directly():
    data = sales_data()
    _tasks(data)[1]["upstream"] = ["ghost"]
    document = DagDocument.model_validate(data)  # structurally fine, the graph is not
    with pytest.raises(InvalidInput) as caught:
        Dag.from_document(document)
    assert caught.value.field == "spec.tasks[1].upstream"
    assert caught.value.source == "data/sales-daily"  # the DAG as namespace/name: its metadata.namespace is data


# --- versions -------------------------------------------------------------------------------------


def test_version_ignores_formatting_key_order_and_spelled_out_defaults():
    base = parse_one(sales_data()).version

    assert Dag.from_document(parse_dag_yaml(SALES.read_text())[0]).version == base
    reordered = yaml.safe_dump(sales_data(), sort_keys=True, default_flow_style=True)
    assert Dag.from_document(parse_dag_yaml(reordered)[0]).version == base
    as_json = json.dumps(sales_data(), indent=1)  # JSON is YAML too
    assert Dag.from_document(parse_dag_yaml(as_json)[0]).version == base

    data = sales_data()
    data["spec"]["defaults"]["poolSlots"] = 1  # spelled-out defaults are still the defaults
    data["spec"]["tasks"][0]["spark"]["arguments"] = ["--date", "{{ ds }}", "--out", "{{ params.out }}"]
    data["spec"]["tasks"][0]["triggerRule"] = "all_success"
    del data["spec"]["endDate"]
    data["metadata"]["labels"] = {"other": "labels"}  # metadata other than the name is not the spec
    assert parse_one(data).version == base


EDITS = [
    ("schedule", _set("spec.schedule", "0 3 * * *")),
    ("timezone", _set("spec.timezone", "UTC")),
    ("startDate", _set("spec.startDate", "2026-01-02T00:00:00")),
    ("paused", _set("spec.paused", True)),
    ("catchup", _set("spec.catchup", False)),
    ("params", _set("spec.params", {"out": "/tmp/elsewhere"})),
    ("default retries", _set("spec.defaults.retries", 1)),
    ("task retries", _set("spec.tasks.1.retries", 4)),
    ("argument", _set("spec.tasks.0.spark.arguments.0", "--day")),
    ("conf value", _set("spec.tasks.0.spark.conf", {"spark.sql.shuffle.partitions": "5"})),
    ("memory", _set("spec.tasks.0.spark.driver.memory", "2g")),
    ("upstream", _set("spec.tasks.1.upstream", [])),
    ("trigger rule", _set("spec.tasks.1.triggerRule", "all_done")),
    ("image", _set("spec.tasks.0.spark.image", "spark:3.5")),
]


@pytest.mark.parametrize("change", [edit[1] for edit in EDITS], ids=[edit[0] for edit in EDITS])
def test_version_changes_with_any_edit(change):
    base = parse_one(sales_data()).version
    data = sales_data()
    change(data)
    assert parse_one(data).version != base


def test_from_spec_json_round_trip_gives_the_same_dag():
    [loaded] = load_dag_file(SALES)
    dag = loaded.dag
    stored = json.loads(json.dumps(dag.spec_json))  # what the database gives back
    rebuilt = Dag.from_spec_json("sales-daily", stored)
    assert rebuilt.version == dag.version
    assert rebuilt.tasks == dag.tasks
    assert rebuilt.spec == dag.spec
    assert rebuilt.spec_json == dag.spec_json
    assert (rebuilt.start_date, rebuilt.end_date, rebuilt.timezone) == (dag.start_date, dag.end_date, dag.timezone)
    assert (rebuilt.downstream, rebuilt.leaves, rebuilt.roots) == (dag.downstream, dag.leaves, dag.roots)


def test_from_spec_json_refuses_a_bad_spec():
    bad = copy.deepcopy(load_dag_file(SALES)[0].dag.spec_json)
    bad["tasks"][0]["sprak"] = bad["tasks"][0].pop("spark")
    with pytest.raises(InvalidInput) as caught:
        Dag.from_spec_json("sales-daily", bad)
    assert caught.value.field == "spec.tasks[0].sprak"
    assert caught.value.source == "sales-daily"
    with pytest.raises(InvalidInput, match="DNS-1123"):
        Dag.from_spec_json("Not_A_Label", load_dag_file(SALES)[0].dag.spec_json)


# --- graph order ----------------------------------------------------------------------------------


def test_topological_order_keeps_spec_order_among_ready_tasks():
    data = yaml.safe_load(minimal("diamond"))
    data["spec"]["tasks"] = [
        {"id": "d", "upstream": ["b", "c"], "spark": {"mainApplicationFile": "d.py"}},
        {"id": "b", "upstream": ["a"], "spark": {"mainApplicationFile": "b.py"}},
        {"id": "c", "upstream": ["a", "a"], "spark": {"mainApplicationFile": "c.py"}},
        {"id": "a", "spark": {"mainApplicationFile": "a.py"}},
        {"id": "e", "spark": {"mainApplicationFile": "e.py"}},
    ]
    dag = parse_one(data)
    assert list(dag.tasks) == ["a", "b", "c", "d", "e"]
    assert dag.downstream == {"a": ("b", "c"), "b": ("d",), "c": ("d",), "d": (), "e": ()}
    assert dag.roots == ("a", "e")
    assert dag.leaves == ("d", "e")
    assert dag.tasks["c"].upstream == ("a",)  # listed twice, counted once
    order = list(dag.tasks)
    for task in dag.tasks.values():
        assert all(order.index(up) < order.index(task.task_id) for up in task.upstream)


# --- loading files and folders ---------------------------------------------------------------------


def test_folder_loading_takes_yaml_recursively_sorted_and_skips_other_kinds():
    loaded = load_dag_paths([str(SPECS / "folder")])
    assert [item.dag.dag_id for item in loaded] == ["a-hourly", "b-first", "b-second"]
    assert loaded[0].source_path == str((SPECS / "folder" / "a-hourly.yaml").resolve())
    assert loaded[1].source_path == loaded[2].source_path == str((SPECS / "folder" / "sub" / "b-two.yml").resolve())
    assert all(os.path.isabs(item.source_path) for item in loaded)


def test_a_file_given_twice_is_loaded_once():
    folder = SPECS / "folder"
    loaded = load_dag_paths([folder, folder / "a-hourly.yaml", str(folder / "a-hourly.yaml")])
    assert [item.dag.dag_id for item in loaded] == ["a-hourly", "b-first", "b-second"]


def test_hidden_folders_and_other_extensions_are_skipped(tmp_path):
    write(tmp_path / "dags" / "one.yaml", minimal("one"))
    write(tmp_path / "dags" / ".git" / "broken.yaml", "not: [valid")
    write(tmp_path / "dags" / "notes.md", "# not a DAG")
    write(tmp_path / "dags" / "one.yaml.bak", "not: [valid")
    assert [item.dag.dag_id for item in load_dag_paths([tmp_path / "dags"])] == ["one"]


def test_a_file_given_explicitly_is_read_whatever_its_extension(tmp_path):
    path = write(tmp_path / "dag.txt", minimal("texty"))
    assert [item.dag.dag_id for item in load_dag_file(path)] == ["texty"]


def test_duplicate_dag_ids_across_files_are_refused(tmp_path):
    first = write(tmp_path / "a.yaml", minimal("same"))
    second = write(tmp_path / "nested" / "b.yaml", minimal("same", paused=True))
    with pytest.raises(InvalidInput) as caught:
        load_dag_paths([tmp_path])
    assert caught.value.field == "metadata.name"
    assert str(first) in caught.value.reason and str(second) in caught.value.reason
    assert "'same'" in caught.value.reason


def test_duplicate_dag_ids_in_one_file_are_refused(tmp_path):
    path = write(tmp_path / "a.yaml", minimal("same") + "---\n" + minimal("same"))
    with pytest.raises(InvalidInput, match="defined more than once"):
        load_dag_file(path)


def test_one_bad_file_fails_the_whole_load(tmp_path):
    write(tmp_path / "a.yaml", minimal("good"))
    write(tmp_path / "b.yaml", minimal("bad", maxActiveRuns=0))
    with pytest.raises(InvalidInput) as caught:
        load_dag_paths([tmp_path])
    assert caught.value.source == f"bad ({tmp_path / 'b.yaml'})"
    assert caught.value.field == "spec.maxActiveRuns"


def test_no_dag_at_all_is_an_error(tmp_path):
    pool = {"apiVersion": "dagline.io/v1alpha1", "kind": "Pool", "metadata": {"name": "p"}, "spec": {"slots": 4}}
    write(tmp_path / "pool.yaml", yaml.safe_dump(pool))
    with pytest.raises(InvalidInput, match="no DAG found"):
        load_dag_paths([tmp_path])
    with pytest.raises(InvalidInput, match="no DAG document"):
        load_dag_file(tmp_path / "pool.yaml")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidInput, match="no DAG found"):
        load_dag_paths([tmp_path / "empty"])


def test_a_missing_path_is_an_error(tmp_path):
    with pytest.raises(InvalidInput, match="no such file or directory") as caught:
        load_dag_paths([tmp_path / "nope"])
    assert caught.value.source == str(tmp_path / "nope")
    with pytest.raises(InvalidInput, match="cannot read"):
        load_dag_file(tmp_path / "nope.yaml")


def test_several_documents_in_one_string():
    text = minimal("one") + "---\n" + minimal("two")
    assert [document.metadata.name for document in parse_dag_yaml(text)] == ["one", "two"]


# --- the other specs and the schemas ----------------------------------------------------------------


def test_backfill_spec():
    backfill = BackfillSpec.model_validate(yaml.safe_load(
        "{dag: sales-daily, start: 2026-01-01, end: '2026-01-31T00:00:00+01:00', reprocess: failed, maxActiveRuns: 2}"
    ))
    assert backfill.start == "2026-01-01"  # an unquoted YAML date stays a date string
    assert (backfill.reprocess, backfill.max_active_runs) == ("failed", 2)
    assert (backfill.run_backwards, backfill.dry_run, backfill.paused) == (False, False, False)
    for bad in ({"dag": "x", "start": "yesterday", "end": "2026-01-01"},
                {"dag": "x", "start": "2026-01-01", "end": "2026-01-02", "reprocess": "all"},
                {"dag": "x", "start": "2026-01-01", "end": "2026-01-02", "dryrun": True}):
        with pytest.raises(ValueError):
            BackfillSpec.model_validate(bad)


def test_pool_spec():
    assert PoolSpec.model_validate({"slots": 0}).slots == 0
    with pytest.raises(ValueError):
        PoolSpec.model_validate({"slots": -1})


def test_json_schemas_are_structural_and_in_yaml_spelling():
    schema = DagDocument.model_json_schema(by_alias=True)
    definitions = schema["$defs"]
    assert definitions["SparkSpec"]["required"] == ["mainApplicationFile"]
    assert definitions["SparkSpec"]["additionalProperties"] is False
    assert "retryDelay" in definitions["TaskDefaults"]["properties"]
    assert definitions["DagSpec"]["properties"]["startDate"]["anyOf"][0] == {"format": "date-time", "type": "string"}
    assert set(definitions["TriggerRule"]["enum"]) >= {"all_success", "none_failed_min_one_success", "always"}
    assert len(definitions["TriggerRule"]["enum"]) == 11
    for model in (BackfillSpec, PoolSpec, TaskSpec):
        json.dumps(model.model_json_schema(by_alias=True))
