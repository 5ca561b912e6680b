"""The executor registry (`dagline.executors.registry`): names, choices, settings, log readers, and the house
rule that an executor's name chooses code only there."""

from __future__ import annotations

import ast
import os
import pathlib

import click
import pytest

from dagline.cli import main
from dagline.errors import InvalidInput
from dagline.executors import registry
from dagline.executors.base import TaskKey
from dagline.executors.folder_log import FolderLog
from dagline.executors.try_logs import NoLog, StoredTry
from dagline.executors.wrapper import rotate_log

SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "dagline"
NAMES = {kind.name for kind in registry.KINDS}


def test_an_unknown_name_is_refused_with_the_known_ones_listed():
    with pytest.raises(InvalidInput) as refused:
        registry.kind("celery")
    assert refused.value.field == "--executor"
    assert "unknown executor 'celery' (choose local, noop, spark-k8s)" in str(refused.value)
    with pytest.raises(InvalidInput, match="unknown executor 'yarn'") as named:
        registry.make_executor("yarn", parallelism=1)
    assert named.value.field == "--executor"
    with pytest.raises(InvalidInput) as operator:
        registry.kind("Local", field="DAGLINE_EXECUTOR")  # names are exact
    assert operator.value.field == "DAGLINE_EXECUTOR"


def test_choices_come_from_the_registry():
    assert registry.names() == ["local", "noop", "spark-k8s"]
    assert registry.names(foreground=True) == ["local", "noop"]
    assert registry.names(foreground=False) == ["spark-k8s"]
    assert registry.names(first="spark-k8s") == ["spark-k8s", "local", "noop"]
    assert registry.DEFAULT in registry.names(foreground=True)


def _executor_option(*path: str) -> click.Option:
    command = main
    for name in path:
        command = command.get_command(click.Context(command), name)
    return next(p for p in command.params if p.name == "executor")


@pytest.mark.parametrize("path, choices, default", [
    (("scheduler",), ["local", "noop", "spark-k8s"], "local"),
    (("backfill", "run"), ["local", "noop", "spark-k8s"], "local"),
    (("dags", "test"), ["local", "noop"], "local"),
    (("tasks", "test"), ["local", "noop"], "local"),
    (("operator",), ["spark-k8s", "local", "noop"], None),  # default: $DAGLINE_EXECUTOR, else spark-k8s
])
def test_the_cli_offers_the_registrys_choices_with_the_same_defaults(path, choices, default):
    option = _executor_option(*path)
    assert list(option.type.choices) == choices
    assert option.default == default


def test_every_kind_builds_an_executor_that_says_its_kinds_name(tmp_path, monkeypatch):
    """A replica stores `executor.name`; the registry reads that name back to choose the log reader."""
    monkeypatch.delenv("DAGLINE_NOOP_DURATION", raising=False)
    for kind in registry.KINDS:
        executor = registry.make_executor(kind.name, parallelism=3, log_folder=str(tmp_path))
        assert (executor.name, executor.parallelism) == (kind.name, 3)


def test_settings_are_checked_and_explicit_options_win_over_the_environment(tmp_path, monkeypatch):
    noop = registry.kind("noop")
    for bad in (0, -1, True, 2.5):
        with pytest.raises(InvalidInput, match="at least 1") as refused:
            noop.settings(parallelism=bad)
        assert refused.value.field == "parallelism"
    with pytest.raises(InvalidInput, match=r"the noop executor has no option colour \(it takes duration_s, seed\)"):
        noop.settings(parallelism=1, colour="red")
    with pytest.raises(InvalidInput, match="has no option duration_s .it takes connect, log_limits."):
        registry.kind("local").settings(parallelism=1, duration_s=1.0)
    environ = {"DAGLINE_NOOP_DURATION": "0.05-0.5", "DAGLINE_NOOP_SEED": "7"}
    settings = noop.settings(parallelism=2, environ=environ, seed=9, log_folder=str(tmp_path / "logs"))
    assert settings.options == {"duration_s": (0.05, 0.5), "seed": 9}
    assert settings.log_folder == str(tmp_path / "logs")
    with pytest.raises(InvalidInput) as bad_variable:
        noop.settings(parallelism=1, environ={"DAGLINE_NOOP_DURATION": "soon"})
    assert bad_variable.value.field == "DAGLINE_NOOP_DURATION"
    with pytest.raises(InvalidInput) as bad_limit:
        registry.kind("local").settings(parallelism=1, environ={"DAGLINE_LOG_FILES": "0"})
    assert bad_limit.value.field == "DAGLINE_LOG_FILES"
    spark = registry.kind("spark-k8s").settings(parallelism=1, environ={"DAGLINE_SPARK_NAMESPACE": "etl"})
    assert spark.options["spark"].namespace == "etl"
    with pytest.raises(InvalidInput) as bad_spark:
        registry.kind("spark-k8s").settings(parallelism=1, environ={"DAGLINE_SPARK_RETENTION": "forever"})
    assert bad_spark.value.field == "DAGLINE_SPARK_RETENTION"
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DAGLINE_LOG_FOLDER", raising=False)
    assert noop.settings(parallelism=1).log_folder == str(tmp_path / "logs")  # absolute, as the jobs need


def test_a_try_no_known_executor_ran_is_read_from_the_log_folder(tmp_path):
    key = TaskKey("sales", "manual__1", "load", 1)
    stored = StoredTry(key, None, str(tmp_path))
    for executor in (None, "local", "noop", "retired-executor"):
        log = registry.open_log(executor, stored)
        assert isinstance(log, FolderLog)
        with pytest.raises(NoLog, match=f"no log at {stored.log_path} "):
            list(log.read())
    from dagline.k8s.pod_logs import DriverLog

    driver = registry.open_log("spark-k8s", StoredTry(key, "etl/sales-load-1", str(tmp_path)))
    assert isinstance(driver, DriverLog) and driver.namespace == "etl"


def test_a_folder_log_reads_rotated_copies_then_the_current_file_from_any_offset(tmp_path):
    stored = StoredTry(TaskKey("sales", "manual__1", "load", 1), None, str(tmp_path))
    path = stored.log_path
    path.parent.mkdir(parents=True)
    path.write_text("one\ntwo\n")
    rotate_log(str(path), keep=3)
    path.write_text("three\n")
    log = FolderLog(stored)
    assert b"".join(log.read()) == b"one\ntwo\nthree\n" and log.size() == 14
    assert b"".join(log.read(6)) == b"o\nthree\n"
    assert b"".join(log.read(99)) == b""
    follower = log.follow()
    assert b"".join(follower.read()) == b"one\ntwo\nthree\n"
    with open(path, "a") as fh:
        fh.write("four\n")
    assert b"".join(follower.read()) == b"four\n"


# -- the house rule ------------------------------------------------------------------------------


def _code_file(kind: registry.ExecutorKind) -> pathlib.Path:
    module = kind.code_path.partition(":")[0]
    return SRC.parent / (module.replace(".", os.sep) + ".py")


def _name_choices(tree: ast.AST) -> list[int]:
    """Lines where a quoted executor name chooses something: compared (`==`, `!=`, `in`), listed in a
    tuple, list or set (`click.Choice([...])`, `in ("spark-k8s", ...)`), a key of a dict or a subscript,
    or a `case`."""
    def named(node) -> bool:
        return isinstance(node, ast.Constant) and node.value in NAMES

    def lists_a_name(node) -> bool:
        return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(named(e) for e in node.elts)

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            hit = any(named(o) or lists_a_name(o) for o in (node.left, *node.comparators))
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            hit = lists_a_name(node)
        elif isinstance(node, ast.Dict):
            hit = any(named(k) for k in node.keys if k is not None)
        elif isinstance(node, ast.Subscript):
            hit = named(node.slice)
        elif isinstance(node, ast.MatchValue):
            hit = named(node.value)
        else:
            hit = False
        if hit:
            found.append(node.lineno)
    return found


def test_an_executors_name_chooses_code_only_in_the_registry_and_its_own_module():
    allowed = {SRC / "executors" / "registry.py", *(_code_file(kind) for kind in registry.KINDS)}
    assert all(path.exists() for path in allowed)
    offenders = [f"{path.relative_to(SRC)}:{line}"
                 for path in sorted(SRC.rglob("*.py")) if path not in allowed
                 for line in sorted(set(_name_choices(ast.parse(path.read_text()))))]
    assert offenders == [], "ask dagline.executors.registry (or the executor's capabilities) instead"


def test_the_rule_catches_the_ways_a_name_is_compared():
    caught = ('x == "spark-k8s"', '"noop" != x', 'x in ("spark-k8s", "noop")', 'x not in {"local"}',
              'click.Choice(["local", "noop"])', 'KINDS = ("local",)', '{"noop": 1}[x]', 'table["local"]',
              'match x:\n    case "noop": pass')
    for source in caught:
        assert _name_choices(ast.parse(source)), source
    passed = ('x == "postgresql"', 'print("a local try")', 'f(default="local")', '"""spark-k8s tries"""')
    for source in passed:
        assert not _name_choices(ast.parse(source)), source
