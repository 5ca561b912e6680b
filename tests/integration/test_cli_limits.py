"""Input bounds as the `dagline` command enforces them (issue 11): what used to print a traceback, hang,
or be accepted silently is now an error naming the option or field and the limit (exit 2 for invalid
input, 1 for a failed operation), and nothing stored changes."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from dagline import limits
from dagline.cli import main
from dagline.errors import InvalidInput
from dagline.store.runs import trigger_run
from dagline.times import parse_instant
from tests.helpers.cli import GOOD, cli, snapshot

pytestmark = pytest.mark.timeout(60)


def run(db, *args, env=None):
    return CliRunner().invoke(main, ["--db", db.url, *args], env=env)


def refused(db, *args, code: int = 2, words=(), env=None):
    """Run a command that must fail with `code`, naming each of `words`, and change nothing stored."""
    before = snapshot(db)
    result = run(db, *args, env=env)
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    for word in words:
        assert word in result.output, (word, result.output)
    assert snapshot(db) == before
    return result


# --- numbers and dates given to commands ----------------------------------------------------------------


@pytest.mark.parametrize("slots", ["100000000000000000000", str(2**31), "1e20"])
def test_pools_set_with_a_huge_number_is_exit_2_naming_slots(db, slots):
    refused(db, "pools", "set", "big", slots, words=["SLOTS"])


def test_pools_set_names_the_limit_and_accepts_the_largest_slots(db):
    refused(db, "pools", "set", "big", str(2**31), words=[f"{limits.MAX_POOL_SLOTS:,}", f"{2**31:,}"])
    cli(db, "pools", "set", "big", str(limits.MAX_POOL_SLOTS))
    pools = {p["name"]: p["slots"] for p in json.loads(cli(db, "pools", "list", "--json").output)}
    assert pools["big"] == limits.MAX_POOL_SLOTS


@pytest.mark.parametrize("name", ["spark\n", "p" * (limits.MAX_ID_LENGTH + 1), " spark", ""])
def test_pool_names_that_end_in_a_newline_or_are_too_long_are_refused(db, name):
    refused(db, "pools", "set", name, "3", words=["NAME"])


@pytest.mark.parametrize("args, option", [
    (["dags", "pause", "sales", "--now", "0001-01-01"], "--now"),
    (["dags", "pause", "sales", "--now", "9999-12-31T23:59:59"], "--now"),
    (["dags", "trigger", "sales", "--logical-date", "9999-12-31"], "--logical-date"),
    (["dags", "trigger", "sales", "--logical-date", "0001-01-01T00:00:00+05:00"], "--logical-date"),
    (["backfill", "create", "sales", "--start", "0001-01-01", "--end", "2026-03-02"], "--start"),
    (["backfill", "create", "sales", "--start", "2026-03-01", "--end", "9999-12-31"], "--end"),
    (["backfill", "create", "sales", "--start", "2026-03-01", "--end", f"{limits.MAX_YEAR}-12-31"], "--end"),
    (["dags", "next-runs", "sales", "--after", "9999-12-31"], "--after"),
    (["scheduler", "--until-idle", "--executor", "noop", "--now", "0001-01-01T00:00:00Z"], "--now"),
])
def test_dates_at_the_ends_of_the_calendar_are_exit_2_not_a_traceback(db, applied, args, option):
    refused(db, *args, words=[option, f"{limits.MIN_YEAR} to {limits.MAX_YEAR}"])


def test_a_spec_with_a_year_1_start_date_is_exit_2(db, tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text(GOOD.replace('"2026-03-01"', '"0001-01-01"'))
    refused(db, "dags", "apply", str(path), words=["spec.startDate", "1900 to 9000"])


def test_next_runs_count_is_bounded(db, applied):
    refused(db, "dags", "next-runs", "sales", "--count", "100000000",
            words=["--count", f"{limits.MAX_NEXT_RUNS_COUNT}"])
    rows = json.loads(cli(db, "dags", "next-runs", "sales", "--count", str(limits.MAX_NEXT_RUNS_COUNT),
                          "--json").output)
    assert len(rows) == limits.MAX_NEXT_RUNS_COUNT


def test_next_runs_stop_where_the_calendar_ends(db, tmp_path):
    path = tmp_path / "decade.yaml"
    path.write_text(GOOD.replace('"@daily"', "P3650D").replace('"2026-03-01"', f'"{limits.MAX_YEAR}-01-01"'))
    rows = json.loads(cli(db, "dags", "next-runs", str(path), "--count", "1000", "--json").output)
    assert 50 < len(rows) < 1000  # the intervals up to year 9999, then no more
    assert rows[-1]["data_interval_end"] < "9999-12-31T23:59:59"


def test_numeric_ids_beyond_a_bigint_are_errors_not_tracebacks(db, applied):
    refused(db, "backfill", "show", "99999999999999999999", words=["BACKFILL_ID"])
    refused(db, "tasks", "list", "99999999999999999999", code=1, words=["unknown run"])


def test_backfill_max_active_runs_is_bounded(db, applied):
    refused(db, "backfill", "create", "sales", "--start", "2026-03-01", "--end", "2026-03-02",
            "--max-active-runs", str(2**31), words=["--max-active-runs", f"{limits.MAX_ACTIVE_LIMIT:,}"])


def test_a_backfill_over_millions_of_intervals_is_refused_before_they_are_listed(db, applied):
    refused(db, "backfill", "create", "sales", "--start", "1900-01-01", "--end", "8999-12-31", "--dry-run",
            words=["--end", f"the limit is {limits.MAX_BACKFILL_RUNS:,} per backfill", "split the range"])
    out = cli(db, "backfill", "create", "sales", "--start", "2026-03-01", "--end", "2026-03-03", "--dry-run",
              "--now", "2026-04-01").output
    assert "3 to create" in out


# --- --conf ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("conf, words", [
    ('{"x": NaN}', ["NaN"]),
    ('{"x": Infinity}', ["Infinity"]),
    ('{"x": -Infinity}', ["-Infinity"]),
    ('{"x": 1e999}', ["inf"]),
    ('{"x": ' + "[" * 100 + "]" * 100 + "}", [f"more than {limits.MAX_NESTING_DEPTH} levels"]),
    ('{"x": ' + "[" * 100_000 + "]" * 100_000 + "}", ["levels"]),
    ('{"x": "' + "y" * (limits.MAX_STRING_LENGTH + 1) + '"}', [f"{limits.MAX_STRING_LENGTH:,} characters"]),
    ('{"x": ' + "9" * 5000 + "}", ["the integer 999999999999... (5,000 digits) is out of range"]),
    ('{"x": 9223372036854775808}', ["x: the integer 9223372036854775808 is out of range"]),
    ('{"x": {"y": "\\ud800"}}', ["x.y: a lone surrogate (\\ud800) in a string"]),
    ('{"x": {"\\udfff": 1}}', ["x: a lone surrogate (\\udfff) in a key"]),
    ('{"x": ["a\\u0000b"]}', ["x[0]: a NUL character (\\u0000) in a string"]),
    ('{"x": "\udc80"}', ["not valid UTF-8"]),  # a byte of a command line that is not UTF-8
    ("[1]", ["must be a JSON object", "not an array"]),
])
def test_conf_that_is_not_bounded_json_is_exit_2_naming_conf(db, applied, conf, words):
    refused(db, "dags", "trigger", "sales", "--conf", conf, words=["--conf", *words])


def test_backfill_conf_with_nan_is_exit_2(db, applied):
    refused(db, "backfill", "create", "sales", "--start", "2026-03-01", "--end", "2026-03-02",
            "--conf", '{"x": NaN}', words=["--conf", "NaN"])


# --- request ids and run ids ----------------------------------------------------------------------------


def test_a_request_id_reused_with_other_arguments_is_a_conflict(db, applied):
    args = ["backfill", "create", "sales", "--start", "2026-03-01", "--end", "2026-03-03", "--request-id", "r1",
            "--now", "2026-04-01"]
    cli(db, *args)
    again = cli(db, *args)
    assert "nothing new" in again.output  # the same arguments: idempotent, as before
    other = [*args[:6], "2026-03-04", *args[7:]]  # another --end
    result = refused(db, *other, words=["--request-id", "'r1'", "backfill 1", "--end 2026-03-04"])
    assert "other arguments" in result.output
    refused(db, *args, "--reprocess", "failed", words=["--reprocess \"failed\", not \"none\""])
    refused(db, *args, "--conf", '{"a": 1}', words=["--conf"])


def test_a_request_id_longer_than_the_limit_is_refused(db, applied):
    refused(db, "backfill", "create", "sales", "--start", "2026-03-01", "--end", "2026-03-02",
            "--request-id", "r" * (limits.MAX_ID_LENGTH + 1), words=["--request-id", str(limits.MAX_ID_LENGTH)])


def test_a_run_id_reused_with_another_logical_date_or_conf_is_a_conflict(db, applied):
    now = parse_instant("2026-04-01")
    first = trigger_run(db, "sales", now=now, logical_date=parse_instant("2026-03-05"), conf={"a": 1}, run_id="mine")
    same = trigger_run(db, "sales", now=now, logical_date=parse_instant("2026-03-05"), conf={"a": 1}, run_id="mine")
    assert same.id == first.id
    before = snapshot(db)
    with pytest.raises(InvalidInput, match="logical date 2026-03-06") as caught:
        trigger_run(db, "sales", now=now, logical_date=parse_instant("2026-03-06"), conf={"a": 1}, run_id="mine")
    assert caught.value.field == "run_id"
    with pytest.raises(InvalidInput, match="conf"):
        trigger_run(db, "sales", now=now, logical_date=parse_instant("2026-03-05"), conf={"a": 2}, run_id="mine")
    assert snapshot(db) == before


# --- environment settings -------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0", "1e300"])
def test_a_poll_interval_that_is_not_a_positive_finite_number_is_refused(db, applied, value):
    refused(db, "scheduler", "--until-idle", "--executor", "noop", "--now", "2026-03-02T00:00:00Z",
            env={"DAGLINE_SCHEDULER_POLL_INTERVAL_S": value},
            words=["DAGLINE_SCHEDULER_POLL_INTERVAL_S", "must be a positive number no larger than 86,400"])


@pytest.mark.parametrize(("variable", "value", "says"), [
    ("DAGLINE_SCHEDULER_PEER_AT_WORK_S", "0", "must be a positive number no larger than 86,400"),
    ("DAGLINE_SCHEDULER_PEER_AT_WORK_S", "nan", "must be a positive number no larger than 86,400"),
    ("DAGLINE_SCHEDULER_RUNS_LEFT_TO_PEER_S", "-0.25", "must be a positive number no larger than 86,400"),
    ("DAGLINE_SCHEDULER_RUNS_LEFT_TO_PEER_S", "soon", "must be a number, got 'soon'"),
], ids=["at-work-zero", "at-work-nan", "left-negative", "left-not-a-number"])
def test_a_work_gathering_window_that_is_not_a_positive_finite_number_is_refused(db, applied, variable, value,
                                                                                 says):
    refused(db, "scheduler", "--until-idle", "--executor", "noop", "--now", "2026-03-02T00:00:00Z",
            env={variable: value}, words=[variable, says])


# --- the database ---------------------------------------------------------------------------------------


def test_a_read_only_database_is_a_message_and_exit_1(sqlite_db, tmp_path):
    """A SQLite database that cannot be written (here opened read-only, as a file without write permission
    is to a user who is not root) gives one line that says so, not a traceback."""
    url = f"sqlite:///file:{sqlite_db.sqlite_path}?mode=ro&uri=true"
    for args in (["pools", "set", "spark", "3"], ["dags", "apply", str(tmp_path / "sales.yaml")]):
        (tmp_path / "sales.yaml").write_text(GOOD)
        result = CliRunner().invoke(main, ["--db", url, *args])
        assert result.exit_code == 1, result.output
        assert "read-only" in result.output and "nothing was written" in result.output
        assert "Traceback" not in result.output
    assert CliRunner().invoke(main, ["--db", url, "pools", "list"]).exit_code == 0  # reading still works


# --- dags apply -----------------------------------------------------------------------------------------


def test_apply_with_an_unknown_kind_in_a_folder_names_the_file_and_exits_2(db, tmp_path):
    folder = tmp_path / "dags"
    folder.mkdir()
    (folder / "sales.yaml").write_text(GOOD)
    (folder / "typo.yaml").write_text(GOOD.replace("kind: DAG", "kind: Dag").replace("{name: sales}", "{name: x}"))
    refused(db, "dags", "apply", str(folder), words=[str(folder / "typo.yaml"), "unknown kind 'Dag'", "'DAG'"])


def test_apply_skips_a_fifo_in_the_folder_with_a_warning(db, tmp_path):
    folder = tmp_path / "dags"
    folder.mkdir()
    (folder / "sales.yaml").write_text(GOOD)
    os.mkfifo(folder / "pipe.yaml")
    result = cli(db, "dags", "apply", str(folder))
    assert "sales: created" in result.output
    assert f"warning: {folder / 'pipe.yaml'}: skipped: a FIFO, not a regular file" in result.output


def test_apply_warns_when_pool_slots_exceed_the_pool(db, tmp_path):
    cli(db, "pools", "set", "spark", "3")
    path = tmp_path / "big.yaml"
    path.write_text(GOOD.replace("spark: {mainApplicationFile: load.py}",
                                "pool: spark\n      poolSlots: 4\n      spark: {mainApplicationFile: load.py}"))
    result = cli(db, "dags", "apply", str(path))
    assert "sales: created" in result.output
    assert "sales: warning: task load: poolSlots 4 > pool spark size 3" in result.output
    assert "dagline pools set spark 4" in result.output


@pytest.mark.parametrize("change, words", [
    (lambda t: t.replace("- id: load", "- id: load\n      priorityWeight: 100000000000000000000000000000"),
     ["spec.tasks[1].priorityWeight", "2147483647"]),
    (lambda t: t.replace("- id: load", "- id: load\n      executionTimeout: P9999Y"),
     ["spec.tasks[1].executionTimeout", "P365D"]),
    (lambda t: t.replace("- id: load", "- id: load\n      retryDelay: P2D"), ["spec.tasks[1].retryDelay", "1 day"]),
    (lambda t: t.replace("- id: load", '- id: "load\\n"'), ["spec.tasks[1].id"]),
])
def test_apply_refuses_numbers_and_ids_beyond_the_limits(db, tmp_path, change, words):
    path = tmp_path / "bad.yaml"
    path.write_text(change(GOOD))
    refused(db, "dags", "apply", str(path), words=words)


def test_apply_accepts_a_zero_retry_delay(db, tmp_path):
    path = tmp_path / "now.yaml"
    path.write_text(GOOD.replace("- id: load", "- id: load\n      retries: 1\n      retryDelay: PT0S"))
    assert "sales: created" in cli(db, "dags", "apply", str(path)).output
    shown = json.loads(cli(db, "dags", "show", "sales", "--json").output)
    assert shown["spec"]["tasks"][1]["retryDelay"] == "PT0S"
