"""The `dagline` command run in-process, as the CLI tests drive it: `cli(db, *args, expect=0)` invokes it on
`db` and checks the exit code, `snapshot(db)` counts the rows of every table (what a refused command must
leave unchanged), and `GOOD` is a valid DAG document (`sales`, @daily from 2026-03-01, extract -> load).
The `applied` fixture (tests/integration/conftest.py) applies `GOOD` from a file."""

from __future__ import annotations

from click.testing import CliRunner
from sqlalchemy import func, select

from dagline.cli import main
from dagline.db.models import Base

GOOD = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: sales}
spec:
  paused: false
  catchup: true
  schedule: "@daily"
  startDate: "2026-03-01"
  tasks:
    - id: extract
      spark: {mainApplicationFile: extract.py, arguments: ["--ds", "{{ ds }}"]}
    - id: load
      upstream: [extract]
      spark: {mainApplicationFile: load.py}
"""


def cli(db, *args, expect: int = 0):
    result = CliRunner().invoke(main, ["--db", db.url, *args], catch_exceptions=False)
    assert result.exit_code == expect, (result.output, result.stderr if hasattr(result, "stderr") else "")
    return result


def snapshot(db) -> dict:
    """Row counts of every table: what a failed command must leave unchanged."""
    with db.begin() as conn:
        return {t.name: conn.execute(select(func.count()).select_from(t)).scalar_one()
                for t in Base.metadata.sorted_tables}
