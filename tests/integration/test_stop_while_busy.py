"""SIGTERM stops a scheduler replica within its grace period even while a step keeps it busy (issue 30).

A replica whose catch-up skip looped inside a spring-forward gap ignored SIGTERM: the signal only asks
the loop to stop after the step it is in, and that step never ended, so it spun until SIGKILL. Here a
real `dagline scheduler` process runs with a DAG's schedule computation made endless (a hook this test
alone installs through `python -c`), gets SIGTERM while in it, and must exit on its own once
`DAGLINE_SCHEDULER_STOP_GRACE_S` has passed, saying why. Then a new replica creates the run as usual.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner

from dagline.cli import main
from dagline.scheduler.stop_deadline import EXIT_CODE
from tests.helpers.harness import write_dag
from tests.helpers.polling import wait_for

pytestmark = pytest.mark.timeout(120)

NOW = "2026-03-08T12:00:00Z"
DAG = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: nightly}
spec:
  schedule: "30 2 * * *"
  timezone: America/New_York
  startDate: "2026-03-01"
  tasks:
    - {id: a, spark: {mainApplicationFile: a.py}}
"""

# Run as `python -c HOOK MARKER dagline-args...`: every schedule computation in this process never ends
# (pure Python, as the old catch-up skip's loop was), after writing MARKER to say it has begun.
HOOK = textwrap.dedent("""
    import pathlib, sys
    from dagline.domain import timetable
    marker = pathlib.Path(sys.argv.pop(1))

    def endless(self, *args, **kwargs):
        marker.write_text("computing the schedule")
        while True:
            pass

    timetable._PeriodicTimetable.next_run = endless
    from dagline.cli import main
    main()
""")


def cli(db, *args):
    result = CliRunner().invoke(main, ["--db", db.url, *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_sigterm_stops_a_replica_busy_computing_a_schedule(db, tmp_path):
    cli(db, "dags", "apply", write_dag(tmp_path, DAG), "--now", NOW)
    cli(db, "dags", "unpause", "nightly", "--now", NOW)
    marker = tmp_path / "busy"
    env = dict(os.environ, DAGLINE_SCHEDULER_STOP_GRACE_S="2")
    proc = subprocess.Popen([sys.executable, "-c", HOOK, str(marker), "--db", db.url, "scheduler",
                             "--executor", "noop", "--now", NOW], env=env, stderr=subprocess.PIPE, text=True)
    try:
        def busy() -> bool:
            assert proc.poll() is None, f"the replica ended before computing a schedule: {proc.stderr.read()}"
            return marker.exists()

        wait_for(busy, "the replica to be computing the DAG's schedule", timeout=60)
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=60)  # generous: the grace period is 2 s, the computation never ends
        except subprocess.TimeoutExpired:
            pytest.fail("the replica was still running 60 s after SIGTERM")
        stderr = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        proc.stderr.close()
    assert code == EXIT_CODE, stderr
    assert "did not stop within 2 s of the stop request" in stderr, stderr

    cli(db, "scheduler", "--executor", "noop", "--until-idle", "--now", NOW)  # a new replica carries on
    runs = json.loads(cli(db, "runs", "list", "nightly", "--json"))
    assert [r["logical_date"] for r in runs] == ["2026-03-07T07:30:00+00:00"]
