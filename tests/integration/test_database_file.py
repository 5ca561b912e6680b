"""A command never creates a SQLite database by looking for it: in a folder without `dagline.db`, a read
(or any command that needs the schema) exits 1 naming the file it looked for and how to point at another
database or create this one, and leaves the folder as it was (no `dagline.db`, no `.writer.lock`). Only
`dagline db upgrade` creates the file. On PostgreSQL, a database that does not exist is named the same way.
"""

from __future__ import annotations

import pathlib

import pytest
from click.testing import CliRunner

from dagline.cli import main
from tests.helpers.dags import dag, task, write
from tests.helpers.postgres import database_url

COMMANDS = {
    "runs list": ["runs", "list", "sales-daily"],
    "dags list": ["dags", "list"],
    "tasks list": ["tasks", "list", "1"],
    "signals list": ["signals", "list"],
    "pools list": ["pools", "list"],
    "runs grid": ["runs", "grid", "sales-daily"],
    "scheduler": ["scheduler", "--executor", "noop", "--until-idle"],
}


def _run(folder: pathlib.Path, monkeypatch, *args: str, env: dict | None = None):
    monkeypatch.chdir(folder)
    monkeypatch.delenv("DAGLINE_DB_URL", raising=False)
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def _assert_refused_naming(result, path: pathlib.Path) -> None:
    assert result.exit_code == 1, result.output
    message = result.stderr
    assert f"no database file at {path}" in message
    assert "--db" in message and "DAGLINE_DB_URL" in message and "dagline db upgrade" in message
    assert "Traceback" not in result.output


@pytest.mark.parametrize("args", COMMANDS.values(), ids=COMMANDS.keys())
def test_a_command_in_a_folder_without_a_database_names_the_file_and_creates_nothing(tmp_path, monkeypatch, args):
    result = _run(tmp_path, monkeypatch, *args)
    _assert_refused_naming(result, tmp_path / "dagline.db")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_dags_apply_without_a_database_creates_nothing_either(tmp_path, monkeypatch):
    spec = tmp_path / "specs"
    spec.mkdir()
    path = write(spec, dag("sales", task("a")))
    result = _run(tmp_path, monkeypatch, "dags", "apply", path)
    _assert_refused_naming(result, tmp_path / "dagline.db")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["specs"]


def test_a_missing_file_named_by_db_or_the_environment_is_named(tmp_path, monkeypatch):
    wanted = tmp_path / "elsewhere" / "prod.db"
    _assert_refused_naming(_run(tmp_path, monkeypatch, "--db", f"sqlite:///{wanted}", "dags", "list"), wanted)
    relative = _run(tmp_path, monkeypatch, "dags", "list", env={"DAGLINE_DB_URL": "sqlite:///state/x.db"})
    _assert_refused_naming(relative, tmp_path / "state" / "x.db")  # a relative path, named in full
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_db_check_reports_the_missing_file_and_creates_nothing(tmp_path, monkeypatch):
    result = _run(tmp_path, monkeypatch, "db", "check")
    assert result.exit_code == 1
    assert f"connection: failed: no database file at {tmp_path / 'dagline.db'}" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_db_upgrade_creates_the_database_and_reads_then_work(tmp_path, monkeypatch):
    created = _run(tmp_path, monkeypatch, "db", "upgrade")
    assert created.exit_code == 0 and "was empty" in created.output
    assert (tmp_path / "dagline.db").is_file()
    listed = _run(tmp_path, monkeypatch, "dags", "list")
    assert listed.exit_code == 0 and listed.output == "(none)\n"


def test_a_postgresql_database_that_does_not_exist_is_named(pg_admin, tmp_path, monkeypatch):
    url = database_url("dagline_no_such_database")
    result = _run(tmp_path, monkeypatch, "--db", url, "dags", "list")
    assert result.exit_code == 1
    assert "cannot reach the database" in result.stderr and "dagline_no_such_database" in result.stderr
