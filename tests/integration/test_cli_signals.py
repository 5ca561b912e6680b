"""`dagline signals ...`, `tasks stop`, `runs stop` as other programs drive them: exit codes, JSON
fields (shared/CLI.md), warnings, and bad input leaving nothing stored."""

from __future__ import annotations

import json

from click.testing import CliRunner
from sqlalchemy import func, select

from dagline.cli import main
from dagline.db.models import signal_t

LISTENER = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: ml}
spec:
  schedule: null
  paused: false
  tasks:
    - id: serve
      mode: streaming
      onSignal: [{signal: model.validated, action: restart}]
      spark: {mainApplicationFile: serve.py}
"""


def cli(db, *args, expect: int = 0):
    result = CliRunner().invoke(main, ["--db", db.url, *args], catch_exceptions=False)
    assert result.exit_code == expect, result.output
    return result


def count(db) -> int:
    with db.begin() as conn:
        return conn.execute(select(func.count()).select_from(signal_t)).scalar_one()


def test_send_prints_the_seq_and_warns_when_nobody_listens(db, tmp_path):
    first = cli(db, "signals", "send", "nobody.listens", "--value", '{"a": 1}', "--now", "2026-05-01T00:00:00")
    assert first.stdout.strip() == "1"
    assert "no DAG listens to 'nobody.listens'" in first.stderr
    (tmp_path / "dag.yaml").write_text(LISTENER)
    cli(db, "dags", "apply", str(tmp_path / "dag.yaml"))
    second = cli(db, "signals", "send", "model.validated", "--value", '{"path": "/m/1"}', "--id", "v1", "--json")
    body = json.loads(second.stdout)
    assert body["seq"] == 2 and body["created"] is True
    assert body["namespace"] == "default" and body["key"] == "model.validated"
    assert body["listeners"] == [{"dag_id": "ml", "namespace": "default", "rule": "spec.tasks[serve].on[0]",
                                  "task_id": "serve", "action": "restart"}]
    assert "no DAG listens" not in second.stderr
    again = cli(db, "signals", "send", "model.validated", "--value", '{"path": "/m/1"}', "--id", "v1")
    assert again.stdout.strip() == "2" and "already sent" in again.stderr
    assert count(db) == 2


def test_list_and_show_print_times_as_other_tables_and_json_keeps_utc(db):
    cli(db, "signals", "send", "a.b", "--value", "1", "--now", "2026-05-01T12:00:07.250000Z")
    table = cli(db, "signals", "list").stdout
    assert "2026-05-01 12:00:07+00:00" in table and ".25" not in table
    assert "sent_at: 2026-05-01 12:00:07+00:00\n" in cli(db, "signals", "show", "1").stdout
    assert json.loads(cli(db, "signals", "list", "--json").stdout)[0]["sent_at"] == "2026-05-01T12:00:07.250000+00:00"


def test_bad_input_is_refused_with_the_field_and_nothing_stored(db):
    assert "key" in cli(db, "signals", "send", "Model.X", expect=2).stderr
    assert "sent by dagline itself" in cli(db, "signals", "send", "dagline.task.a.b.success", expect=2).stderr
    assert "--value: not valid JSON" in cli(db, "signals", "send", "a.b", "--value", "{nope", expect=2).stderr
    assert "--value: not valid JSON" in cli(db, "signals", "send", "a.b", "--value", "NaN", expect=2).stderr
    big = json.dumps("x" * 70_000)
    assert "the limit is 65,536 bytes" in cli(db, "signals", "send", "a.b", "--value", big, expect=2).stderr
    cli(db, "signals", "send", "a.b", "--value", "1", "--id", "same")
    conflict = cli(db, "signals", "send", "a.b", "--value", "2", "--id", "same", expect=1)
    assert "with another value" in conflict.stderr
    assert "--older-than" in cli(db, "signals", "prune", "--older-than", "3 days", expect=2).stderr
    assert count(db) == 1


def test_a_value_with_a_lone_surrogate_or_a_nul_is_exit_2_naming_value_and_nothing_stored(db):
    lone = cli(db, "signals", "send", "a.b", "--value", '{"path": "\\ud800"}', expect=2).stderr
    assert "--value: path: a lone surrogate (\\ud800) in a string" in lone
    nul = cli(db, "signals", "send", "a.b", "--value", '["\\u0000"]', expect=2).stderr
    assert "--value: [0]: a NUL character (\\u0000)" in nul
    assert "Traceback" not in lone + nul
    assert count(db) == 0


def test_list_and_show_give_every_field_of_the_contract(db):
    for i in range(3):
        cli(db, "signals", "send", f"k{i % 2}", "--value", str(i), "--now", f"2026-05-0{i + 1}T00:00:00")
    rows = json.loads(cli(db, "signals", "list", "--json").stdout)
    assert [r["seq"] for r in rows] == [1, 2, 3]
    assert set(rows[0]) >= {"seq", "key", "value", "id", "source", "sent_at", "actions"}
    assert rows[0]["sent_at"] == "2026-05-01T00:00:00+00:00" and rows[0]["source"].startswith("user:")
    assert [r["seq"] for r in json.loads(cli(db, "signals", "list", "--key", "k0", "--json").stdout)] == [1, 3]
    assert [r["seq"] for r in json.loads(cli(db, "signals", "list", "--since", "1", "--limit", "1",
                                              "--json").stdout)] == [3]
    shown = json.loads(cli(db, "signals", "show", "2", "--json").stdout)
    assert shown["value"] == 1 and shown["actions"] == [] and shown["why_nothing"] == "no DAG listens to this key"
    assert "no DAG listens to this key" in cli(db, "signals", "show", "2").stdout
    assert "no signal with seq 9" in cli(db, "signals", "show", "9", expect=1).stderr
    out = cli(db, "signals", "prune", "--older-than", "P1D", "--now", "2026-05-03T12:00:00").stdout
    assert out.startswith("deleted 2 signal(s)")
    assert [r["seq"] for r in json.loads(cli(db, "signals", "list", "--json").stdout)] == [3]


def test_stop_commands_name_what_they_did(db, tmp_path):
    (tmp_path / "dag.yaml").write_text(LISTENER)
    cli(db, "dags", "apply", str(tmp_path / "dag.yaml"))
    run_id = cli(db, "dags", "trigger", "ml", "--now", "2026-05-01T00:00:00").stdout.strip()
    assert "nothing running to stop" in cli(db, "tasks", "stop", run_id, "serve").stdout
    assert "has no task 'nope'" in cli(db, "tasks", "stop", run_id, "nope", expect=2).stderr
    out = cli(db, "runs", "stop", run_id).stdout
    assert "skipped 1: serve" in out
    assert "nothing to stop" in cli(db, "runs", "stop", run_id, expect=1).stderr


def test_apply_warns_about_a_rule_on_a_task_no_dag_has_and_stores_it(db, tmp_path):
    (tmp_path / "dag.yaml").write_text(LISTENER.replace("model.validated", "dagline.task.ingest.load.success"))
    out = cli(db, "dags", "apply", str(tmp_path / "dag.yaml"))
    assert "no DAG 'ingest' is applied yet" in out.output
    listeners = json.loads(cli(db, "signals", "send", "x.y", "--json").stdout)["listeners"]
    assert listeners == []
