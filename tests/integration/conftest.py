"""Fixtures shared by the integration tests: `applied`, the DAG `GOOD` (tests/helpers/cli.py) applied
through the `dagline` command from `tmp_path/sales.yaml` (the path is returned). A test module may define
its own `applied` for another DAG (test_cli_testing.py does)."""

from __future__ import annotations

import pytest

from tests.helpers.cli import GOOD, cli


@pytest.fixture
def applied(db, tmp_path):
    path = tmp_path / "sales.yaml"
    path.write_text(GOOD)
    cli(db, "dags", "apply", str(path))
    return path
