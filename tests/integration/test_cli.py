"""The `dagline` command as other programs drive it: exit codes, JSON fields, messages naming the
cause, and bad input leaving every stored thing as it was."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest
from click.testing import CliRunner
from sqlalchemy import select, text, update

from dagline.cli import main
from dagline.db.models import dag_run_t, dag_t
from tests.helpers.cli import GOOD, cli, snapshot
from tests.helpers.polling import wait_for


def test_apply_list_show_and_json_fields(db, applied):
    rows = json.loads(cli(db, "dags", "list", "--json").output)
    assert list(rows[0]) == ["dag_id", "paused", "schedule", "timezone", "version", "next_run_after", "last_run_state",
                             "import_error", "namespace"]
    assert rows[0]["namespace"] == "default"  # a DAG applied from a file without --namespace is default's
    assert rows[0]["next_run_after"] == "2026-03-02T00:00:00+00:00"
    shown = json.loads(cli(db, "dags", "show", "sales", "--json").output)
    assert shown["spec"]["tasks"][1]["upstream"] == ["extract"]
    assert "unchanged" in cli(db, "dags", "apply", str(applied)).output


def test_show_spells_the_pause_state_as_the_spec_and_says_which_one_is_in_force(db, applied):
    text = cli(db, "dags", "show", "sales").output
    assert "\nactive: true\npaused: false\n" in text and "in force" not in text
    cli(db, "dags", "pause", "sales")
    text = cli(db, "dags", "show", "sales").output
    assert "\npaused: true (in force, set by `dagline dags pause`; the spec's paused: false applies again" in text
    assert "  paused: false\n" in text  # the spec as stored


def test_counts_in_messages_take_the_singular_for_one(db, applied):
    assert "(1 slot)" in cli(db, "pools", "set", "narrow", "1").output
    assert "(2 slots)" in cli(db, "pools", "set", "narrow", "2").output
    run_id = cli(db, "dags", "trigger", "sales", "--logical-date", "2026-03-05", "--now", "2026-03-06").output.strip()
    assert "sales  (1 run, logical dates in UTC)" in cli(db, "runs", "grid", "sales", "--no-color").output
    assert cli(db, "runs", "stop", run_id).output.startswith("stopping 0 tries: -; skipped 2: ")


def test_next_runs_for_a_file_and_a_stored_dag(db, applied):
    rows = json.loads(cli(db, "dags", "next-runs", str(applied), "--count", "2", "--json").output)
    assert rows == [
        {"logical_date": "2026-03-01T00:00:00+00:00", "data_interval_start": "2026-03-01T00:00:00+00:00",
         "data_interval_end": "2026-03-02T00:00:00+00:00", "run_after": "2026-03-02T00:00:00+00:00"},
        {"logical_date": "2026-03-02T00:00:00+00:00", "data_interval_start": "2026-03-02T00:00:00+00:00",
         "data_interval_end": "2026-03-03T00:00:00+00:00", "run_after": "2026-03-03T00:00:00+00:00"},
    ]
    after = json.loads(cli(db, "dags", "next-runs", "sales", "--after", "2026-06-01T12:00", "--count", "1",
                           "--json").output)
    assert after[0]["logical_date"] == "2026-06-02T00:00:00+00:00"


def test_trigger_schedule_list_runs_and_tasks(db, applied):
    run_id = cli(db, "dags", "trigger", "sales", "--logical-date", "2026-03-05", "--conf", '{"x": 1}',
                 "--now", "2026-03-06").output.strip()
    assert run_id == "manual__2026-03-05T00:00:00+00:00"
    cli(db, "scheduler", "--executor", "noop", "--until-idle", "--now", "2026-03-03T00:00:00Z")
    runs = json.loads(cli(db, "runs", "list", "sales", "--json").output)
    assert list(runs[0]) == ["id", "dag_id", "run_id", "logical_date", "data_interval_start", "data_interval_end",
                             "run_type", "state", "previous_run_id", "dag_version", "backfill_id", "start_date",
                             "end_date", "is_test", "duration_s", "deadline", "deadline_missed_at", "namespace"]
    assert [(r["run_type"], r["state"]) for r in runs] == [("scheduled", "success"), ("scheduled", "success"),
                                                          ("manual", "queued")]
    tasks = json.loads(cli(db, "tasks", "list", runs[0]["run_id"], "--json").output)
    assert list(tasks[0]) == ["task_id", "state", "try_number", "max_tries", "pool", "start_date", "end_date",
                              "external_id", "message", "duration_s", "deadline", "deadline_missed_at",
                              "signal_seq", "stop_requested_at", "reason", "namespace"]
    assert [t["state"] for t in tasks] == ["success", "success"]
    failed_runs = json.loads(cli(db, "runs", "list", "--state", "failed", "--json").output)
    assert failed_runs == []
    grid = cli(db, "runs", "grid", "sales", "--no-color").output
    assert "extract" in grid and "■" in grid


def test_clear_runs_tasks_again_on_the_same_run(db, applied):
    cli(db, "scheduler", "--executor", "noop", "--until-idle", "--now", "2026-03-02T00:00:00Z")
    out = cli(db, "tasks", "clear", "1", "extract", "--downstream", "--yes", "--now", "2026-03-02T01:00:00Z").output
    assert "cleared 2" in out
    tasks = json.loads(cli(db, "tasks", "list", "1", "--json").output)
    assert [(t["state"], t["try_number"], t["max_tries"]) for t in tasks] == [("none", 1, 2), ("none", 1, 2)]
    cli(db, "scheduler", "--executor", "noop", "--until-idle", "--now", "2026-03-02T01:00:00Z")
    tasks = json.loads(cli(db, "tasks", "list", "1", "--json").output)
    assert [(t["state"], t["try_number"]) for t in tasks] == [("success", 2), ("success", 2)]


def test_pools_and_backfill_commands(db, applied):
    cli(db, "pools", "set", "spark", "4")
    pools = json.loads(cli(db, "pools", "list", "--json").output)
    assert {p["name"]: p["slots"] for p in pools} == {"default": 128, "spark": 4}
    dry = json.loads(cli(db, "backfill", "create", "sales", "--start", "2026-03-01", "--end", "2026-03-03",
                         "--dry-run", "--json", "--now", "2026-04-01").output)
    assert dry["backfill_id"] is None and [r["action"] for r in dry["runs"]] == ["create"] * 3
    assert snapshot(db)["dag_run"] == 0
    out = cli(db, "backfill", "run", "sales", "--start", "2026-03-01", "--end", "2026-03-03", "--executor", "noop",
              "--now", "2026-04-01", "--request-id", "r1")
    assert "backfill 1" in out.output
    listed = json.loads(cli(db, "backfill", "list", "--json").output)
    assert (listed[0]["state"], listed[0]["total"], listed[0]["succeeded"]) == ("completed", 3, 3)
    before = snapshot(db)
    again = cli(db, "backfill", "create", "sales", "--start", "2026-03-01", "--end", "2026-03-03",
                "--request-id", "r1", "--now", "2026-04-01")
    assert "nothing new" in again.output and snapshot(db) == before


@pytest.mark.parametrize("body, field, cause", [
    ("spec: [", None, "YAML"),
    (GOOD.replace("schedule:", "sprak: 1\n  schedule:"), "spec.sprak", "unknown field"),
    (GOOD.replace('"@daily"', '"61 * * * *"'), "spec.schedule", ""),
    (GOOD.replace('startDate:', 'timezone: Mars/Olympus\n  startDate:'), "spec.timezone", "time zone"),
    (GOOD.replace("upstream: [extract]", "upstream: [extrct]"), "spec.tasks[1].upstream", "extrct"),
    (GOOD.replace("- id: load", "- id: extract"), "spec.tasks[1].id", "duplicate"),
    (GOOD.replace("spark: {mainApplicationFile: extract.py,", "upstream: [load]\n      spark: {mainApplicationFile: extract.py,"),
     "spec.tasks", "cycle"),
    (GOOD.replace("- id: load", "- id: load\n      retryDelay: 5 minutes"), "spec.tasks[1].retryDelay", "duration"),
    (GOOD.replace("{{ ds }}", "{{ ds "), "spec.tasks[0].spark.arguments", "template"),
    (GOOD.replace("spark: {mainApplicationFile: load.py}",
                  "spark: {mainApplicationFile: load.py, connect: true, conf: {spark.jars.packages: a:b:1}}"),
     'spec.tasks[1].spark.conf["spark.jars.packages"]', "spark.jars.packages is fixed when Spark starts"),
    (GOOD.replace("  tasks:", "  defaults: {spark: {connect: true}}\n  tasks:").replace(
        "spark: {mainApplicationFile: load.py}", "spark: {mainApplicationFile: load.py, driver: {memory: 2g}}"),
     "spec.tasks[1].spark.driver.memory", "Spark Connect"),
])
def test_invalid_specs_exit_2_name_the_field_and_change_nothing(db, applied, tmp_path, body, field, cause):
    bad = tmp_path / "bad.yaml"
    bad.write_text(body)
    before = snapshot(db)
    result = CliRunner().invoke(main, ["--db", db.url, "dags", "apply", str(applied), str(bad)])
    assert result.exit_code == 2, result.output
    message = result.output
    assert "bad.yaml" in message
    if field:
        assert field in message
    assert cause.lower() in message.lower()
    assert snapshot(db) == before


@pytest.mark.parametrize("args, code, cause", [
    (["backfill", "create", "sales", "--start", "2026-03-05", "--end", "2026-03-01"], 2, "--start"),
    (["backfill", "create", "nope", "--start", "2026-03-01", "--end", "2026-03-02"], 1, "unknown DAG 'nope'"),
    (["dags", "trigger", "nope"], 1, "unknown DAG"),
    (["tasks", "list", "999"], 1, "unknown run '999'"),
    (["tasks", "clear", "999"], 1, "unknown run"),
    (["dags", "trigger", "sales", "--conf", "{not json"], 2, "--conf"),
    (["dags", "trigger", "sales", "--logical-date", "yesterday"], 2, "--logical-date"),
    (["scheduler", "--now", "soon"], 2, "--now"),
    (["pools", "set", "p", "-1"], 2, "SLOTS"),
])
def test_bad_requests_exit_non_zero_with_the_cause_and_change_nothing(db, applied, args, code, cause):
    before = snapshot(db)
    result = CliRunner().invoke(main, ["--db", db.url, *args])
    assert result.exit_code == code, result.output
    assert cause in result.output
    assert snapshot(db) == before


def test_backfill_over_a_paused_or_deleted_dag_is_refused(db, applied):
    from dagline.store.dags import deactivate
    from dagline.times import parse_instant

    cli(db, "dags", "pause", "sales")
    before = snapshot(db)
    result = cli(db, "backfill", "create", "sales", "--start", "2026-03-01", "--end", "2026-03-02", expect=1)
    assert "paused" in result.output and snapshot(db) == before
    cli(db, "dags", "unpause", "sales")
    deactivate(db, "sales", now=parse_instant("2026-03-03"))
    result = cli(db, "backfill", "create", "sales", "--start", "2026-03-01", "--end", "2026-03-02", expect=1)
    assert "deleted" in result.output


def test_an_unreachable_database_is_a_clear_error():
    result = CliRunner().invoke(main, ["--db", "postgresql://nobody@127.0.0.1:1/none", "dags", "list"])
    assert result.exit_code == 1
    assert "cannot reach the database at postgresql+psycopg2://nobody@127.0.0.1:1/none" in result.output


def test_a_database_without_the_schema_says_to_upgrade(tmp_path):
    (tmp_path / "new.db").touch()  # an empty SQLite database (a missing file: tests/integration/test_database_file.py)
    result = CliRunner().invoke(main, ["--db", f"sqlite:///{tmp_path}/new.db", "dags", "list"])
    assert result.exit_code == 1
    assert "has no dagline schema yet: run `dagline db upgrade`" in result.output


def test_a_second_scheduler_on_sqlite_is_refused(sqlite_db, tmp_path):
    """A real second process: the first holds the SQLite scheduler lock."""
    env = dict(os.environ, DAGLINE_SCHEDULER_POLL_INTERVAL_S="0.05")
    first = subprocess.Popen([sys.executable, "-m", "dagline.cli", "--db", sqlite_db.url, "scheduler",
                              "--executor", "noop"], env=env, stderr=subprocess.PIPE)
    try:
        lock = sqlite_db.sqlite_path + ".scheduler.lock"

        def took_its_lock() -> bool:
            assert first.poll() is None, first.stderr.read()
            return os.path.exists(lock) and pathlib.Path(lock).read_text().startswith("pid")

        wait_for(took_its_lock, "the first scheduler to take its lock")
        second = subprocess.run([sys.executable, "-m", "dagline.cli", "--db", sqlite_db.url, "scheduler",
                                 "--executor", "noop", "--until-idle"], capture_output=True, text=True, timeout=60)
        assert second.returncode == 1
        assert "another scheduler (pid" in second.stderr and "one scheduler per SQLite file" in second.stderr
    finally:
        first.terminate()
        first.wait(30)
        first.stderr.close()
    assert first.returncode == 0  # SIGTERM is a graceful stop


def _blocked_on_a_lock(db) -> bool:
    with db.engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                 "AND wait_event_type = 'Lock'")).scalar_one() > 0


def test_a_command_rolled_back_by_a_deadlock_runs_again_and_writes_once(pg_db, tmp_path):
    """A real deadlock with another session (as a scheduler replica can cause): PostgreSQL rolls the
    trigger's transaction back; the command runs again and succeeds, and the run exists once."""
    path = tmp_path / "sales.yaml"
    path.write_text(GOOD)
    cli(pg_db, "dags", "apply", str(path))
    cli(pg_db, "backfill", "create", "sales", "--start", "2026-03-05", "--end", "2026-03-05", "--now", "2026-03-10")
    with pg_db.engine.connect() as conn:
        later = conn.execute(select(dag_run_t.c.id)).scalar_one()
    other = pg_db.engine.connect()
    tx = other.begin()
    other.execute(update(dag_run_t).where(dag_run_t.c.id == later).values(conf=dag_run_t.c.conf))  # holds the run
    trigger = subprocess.Popen(
        [sys.executable, "-m", "dagline.cli", "--db", pg_db.url, "dags", "trigger", "sales", "--logical-date",
         "2026-03-02", "--now", "2026-03-10"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # The trigger holds the DAG row and waits for the run it must relink (the 5th now follows the 2nd).

        def blocked() -> bool:
            assert trigger.poll() is None, trigger.communicate()
            return _blocked_on_a_lock(pg_db)

        wait_for(blocked, "the trigger to wait on a lock", interval=0.02)
        # Now this session wants the DAG row: a deadlock, which the trigger's session detects first (1 s).
        other.execute(text("SET LOCAL deadlock_timeout = '30s'"))
        other.execute(select(dag_t.c.dag_id).where(dag_t.c.dag_id == "sales").with_for_update())
        tx.commit()
        out, err = trigger.communicate(timeout=60)
    finally:
        other.close()
        if trigger.poll() is None:
            trigger.kill()
        trigger.__exit__(None, None, None)  # closes its pipes, waits for it
    assert trigger.returncode == 0, err
    assert out.strip().startswith("manual__")
    with pg_db.engine.connect() as conn:
        runs = conn.execute(select(dag_run_t.c.run_type, dag_run_t.c.previous_run_id, dag_run_t.c.id)
                            .order_by(dag_run_t.c.logical_date)).all()
    assert [r.run_type for r in runs] == ["manual", "backfill"]
    assert runs[1].previous_run_id == runs[0].id  # relinked by the attempt that committed


def test_a_database_that_is_down_is_a_clear_error_and_exit_1(tmp_path):
    result = CliRunner().invoke(main, ["--db", "postgresql://postgres@127.0.0.1:9/nothing", "dags", "list"])
    assert result.exit_code == 1
    assert "error: cannot reach the database" in result.output and "Traceback" not in result.output


def _open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_command_closes_its_database_when_it_ends(db, applied):
    """A process that runs many commands (a script calling `main`, this suite) keeps no connection or
    SQLite file open after each: before, every command left its pool open, and the suite's process
    reached 1,024 descriptors, where `select()` fails."""
    cli(db, "dags", "list")
    before = _open_files()
    for _ in range(20):
        cli(db, "dags", "list")
        cli(db, "runs", "list", "sales")
    assert _open_files() <= before + 2
