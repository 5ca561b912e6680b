"""Runs one Spark Connect task's job: `python job.py`, with the task's session confs already set.

    SPARK_REMOTE=sc://127.0.0.1:<port> python -m dagline.executors.connect_job [--conf KEY=VALUE]... -- APP [ARGS...]

The local executor starts a Connect try (`spark.connect: true`) through this module, under the task
wrapper, instead of `spark-submit`. It runs APP as `python APP ARGS...` would (`__main__`, `sys.argv`,
its folder first on `sys.path`), so the job is unchanged: its `SparkSession.builder.getOrCreate()`
connects to the server named by `SPARK_REMOTE` (PySpark 4). Two things it adds around the job:

* the task's `spark.conf` (runtime confs only: static ones are refused at apply, see
  `dagline.spec.connect`) is set on the job's session before the job runs: the session is created here
  with them, and the job's `getOrCreate()` returns that same session;
* an exception that ends the job is printed as Python prints it, then summed up on one last line (a
  Connect error's text ends with the server's Java stack trace; the try's failure message is the log's
  last meaningful line);
* when the job ends -- returns, raises, calls `sys.exit`, or gets SIGTERM without a handler of its
  own -- its session is released on the server (`spark.stop()`), which stops any streaming query it
  left running: a Connect job's queries do not outlive its process, as they do not outlive a
  `spark-submit` driver. A job that handles SIGTERM itself (`dagline.sdk.streaming.run_until_stopped`)
  stops its queries cleanly first.

It imports PySpark only when the job has confs or has used Spark, so it adds nothing to a job's start.
"""

from __future__ import annotations

import argparse
import os
import runpy
import signal
import sys
import traceback
import warnings


def _on_sigterm(signum, frame) -> None:  # noqa: ARG001 - signal handler signature
    raise SystemExit(128 + signum)  # unwinds the job, so its session is released below


def _release_session() -> None:
    """Stop the job's Connect session if it is still open (its streaming queries stop with it)."""
    module = sys.modules.get("pyspark.sql.connect.session")
    if module is None:
        return
    session_class = module.SparkSession
    session = session_class.getActiveSession() or getattr(session_class, "_default_session", None)
    if session is None or getattr(session, "is_stopped", False):
        return
    try:
        session.stop()
    except Exception as exc:  # noqa: BLE001 - the job's own outcome matters more
        print(f"[dagline] could not release the Spark Connect session: {exc}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dagline.executors.connect_job",
                                     description="Run a PySpark job against SPARK_REMOTE with session confs set.")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a session conf")
    parser.add_argument("app", nargs=argparse.REMAINDER, help="-- APP [ARGS...]")
    args = parser.parse_args(argv)
    app = args.app[1:] if args.app[:1] == ["--"] else args.app
    if not app:
        parser.error("no application given after --")
    confs = dict(item.split("=", 1) for item in args.conf)
    path = os.path.abspath(app[0])
    sys.argv = [app[0], *app[1:]]
    sys.path.insert(0, os.path.dirname(path))
    # the client's import warns about pandas 3 on every job: noise at the top of each try's log
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas", category=FutureWarning)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        if confs:
            from pyspark.sql import SparkSession

            SparkSession.builder.config(map=confs).getOrCreate()  # SPARK_REMOTE: a Connect session
        runpy.run_path(path, run_name="__main__")
    except Exception as exc:  # noqa: BLE001 - reported as Python would, then summed up on the last line
        traceback.print_exc()
        # A Connect error's text ends with the server's JVM stack trace: the try's failure message (the
        # log's last meaningful line) should be the error itself.
        first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
        print(f"{type(exc).__module__}.{type(exc).__qualname__}: {first}"[:1000], file=sys.stderr, flush=True)
        return 1
    finally:
        _release_session()
    return 0


if __name__ == "__main__":
    sys.exit(main())
