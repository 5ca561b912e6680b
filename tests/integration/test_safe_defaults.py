"""Safe defaults, as Airflow's: a DAG applied for the first time is paused unless its spec says
`paused: false` (the apply says how to start it), and `catchup` is false, so unpausing a DAG whose
startDate is long past runs the latest interval, not every interval since (a new user's first apply of
the README example used to make 326 runs at once)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from dagline.cli import main
from tests.helpers.harness import runs, schedule, write_dag

PLAIN = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: plain}
spec:
  schedule: "@daily"
  startDate: "2025-01-01"
  tasks:
    - {id: a, spark: {mainApplicationFile: a.py}}
"""


def cli(db, *args):
    result = CliRunner().invoke(main, ["--db", db.url, *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_a_new_dag_is_created_paused_and_unpausing_it_runs_only_the_latest_interval(db, tmp_path):
    path = write_dag(tmp_path, PLAIN)
    out = cli(db, "dags", "apply", path, "--now", "2026-03-01T00:00:00Z")
    assert "plain: created paused (version " in out and "`dagline dags unpause plain` to start" in out
    assert json.loads(cli(db, "dags", "list", "--json"))[0]["paused"] is True
    schedule(db, "2026-03-01T00:00:00Z")
    assert runs(db, "plain") == []  # paused: a year of intervals is due, none is run

    cli(db, "dags", "unpause", "plain", "--now", "2026-03-01T00:00:00Z")
    assert "unchanged" in cli(db, "dags", "apply", path)  # applying it again does not pause it again
    assert json.loads(cli(db, "dags", "list", "--json"))[0]["paused"] is False
    schedule(db, "2026-03-01T00:00:00Z")
    # catchup: false -- the latest complete interval only, not the 424 days since startDate
    assert [r["logical_date"] for r in runs(db, "plain")] == ["2026-02-28T00:00:00+00:00"]


def test_a_spec_that_says_paused_false_starts_at_once_and_a_change_of_paused_applies(db, tmp_path):
    path = write_dag(tmp_path, PLAIN.replace("  tasks:", "  paused: false\n  tasks:"))
    out = cli(db, "dags", "apply", path)
    assert "plain: created (version " in out and "unpause" not in out
    assert json.loads(cli(db, "dags", "list", "--json"))[0]["paused"] is False
    write_dag(tmp_path, PLAIN.replace("  tasks:", "  paused: true\n  tasks:"))
    cli(db, "dags", "apply", path)
    assert json.loads(cli(db, "dags", "list", "--json"))[0]["paused"] is True


def test_an_existing_dag_whose_spec_does_not_say_paused_keeps_its_state_when_applied_again(db, tmp_path):
    """Upgrading dagline (or editing a spec that never said `paused`) must not pause a running DAG: the
    default applies to a DAG's first apply only."""
    path = write_dag(tmp_path, PLAIN.replace("  tasks:", "  paused: false\n  tasks:"))
    cli(db, "dags", "apply", path)
    write_dag(tmp_path, PLAIN.replace("a.py", "a2.py"))  # a new version, without `paused`
    assert "updated" in cli(db, "dags", "apply", path)
    assert json.loads(cli(db, "dags", "list", "--json"))[0]["paused"] is False
