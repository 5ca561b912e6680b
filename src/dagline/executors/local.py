"""The local executor: runs each try as a `spark-submit --master local[*]` subprocess on this host.

Flow: the scheduler calls `launch` with rendered `TaskLaunch`es (never more than `free_slots()`);
each try starts at once as

    python -m dagline.executors.wrapper --exit-file <log>.exit --pid-file <log>.pid --timeout <s> \\
        -- <spark_home>/bin/spark-submit --master local[*] --name <job name> --conf ... <app file> <args...>

with its working directory set to the DAG file's folder and stdout + stderr appended to the try's log
file `log_path(log_folder, key)` (a file, never a pipe: a job printing megabytes cannot block), which
the wrapper rotates past `DAGLINE_LOG_MAX_BYTES` (10 MiB), keeping `DAGLINE_LOG_FILES` (5) per try. The
wrapper (see `dagline.executors.wrapper`) owns the job's process group, enforces executionTimeout and
writes the outcome to `<log>.exit`; `sync` polls the wrappers and turns exit files into reports:
one 'running' per try, then 'success' or 'failed' with a short reason and the job's last
meaningful log line.

Because the outcome lives in files next to the log, not in this process, a try survives the replica
that launched it: `adopt` (and a repeated `launch`) picks up a finished try from its exit file, or a
still running one from its pid file, instead of starting a second `spark-submit`. The wrapper runs
in its own session, so it outlives its replica however that ends (SIGKILL included); `detach` is
how a replica leaves on a graceful stop (its jobs keep running, another replica adopts them), `end`
stops every job. Pid files and /proc are of this machine only: the executor is `host_bound`, a
replica on another host cannot adopt its tries. Where those files are and how to read them is
`dagline.executors.try_files`; this module starts, watches, stops and reports tries. `KIND_CODE` is
what the registry (`dagline.executors.registry`) builds it with and reads its tries' logs with.

The job's environment (`dagline.domain.secrets.job_environment`) is the scheduler's without anything
`DAGLINE_*` (the database URL, API tokens), the database and Kubernetes credential variables, or the
secret variables (`SECRET_*`), plus the try's `DAGLINE_API_URL` and `DAGLINE_SIGNAL_TOKEN` and the
task's `env`, its secrets read from `LocalSecrets` when the try starts (a missing one fails the try,
saying which). ADR 0040.

`spark-submit` comes from the installed `pyspark` package, not from PATH, so the job runs with the
same Spark and the same Python as the scheduler. In local mode the driver runs the executors, so the
spec's `executor` sizes are ignored; driver memory/cores and `conf` are passed on.

A Spark Connect try (`spark.connect: true`, ADR 0070) starts no JVM: the wrapper runs
`python -m dagline.executors.connect_job --conf ... -- <app file> <args...>` (the job as `python job.py`,
its session confs set) with `SPARK_REMOTE` naming this executor's `ConnectServer`
(`dagline.executors.connect_server`), started with the first such try and stopped by `end` and
`detach` (or, with `DAGLINE_CONNECT_URL`, a server already running, which it neither starts nor stops).
When the server's health check fails, every Connect try in flight is killed and reported
failed with the reason (the scheduler retries it as usual); the next Connect try starts a new server.
A Connect try lives only as long as its replica's server: `detach` kills those tries (their outcome
recorded for the adopter, which reports them failed: retried as usual), and a replica adopting a still
running Connect try of another fails it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from dagline.clock import SystemClock
from dagline.domain.secrets import job_environment
from dagline.domain.states import TIState
from dagline.executors.base import TaskKey, TaskLaunch, TaskReport
from dagline.executors.connect_server import ConnectServer, ConnectSettings, read_connect_settings
from dagline.executors.folder_log import FolderLog
from dagline.executors.registry import ExecutorSettings, KindCode, ShownSetting
from dagline.executors.secret_sources import LocalSecrets, SecretNotFound
from dagline.executors.spark_home import find_spark_submit
from dagline.executors.try_files import (
    claim_pid_file,
    exit_file_path,
    last_log_line,
    log_path,
    parse_time,
    pid_file_path,
    read_outcome,
    wrapper_alive,
)
from dagline.executors.try_files import log_limits as read_log_limits

_END_WAIT_S = 15.0  # how long `end` waits for wrappers to stop their jobs before SIGKILL


def spark_submit_command(launch: TaskLaunch, spark_submit: str) -> list[str]:
    """The `spark-submit` command line of one try (local mode, loopback networking, no UI)."""
    job = launch.job
    cmd = [
        spark_submit,
        "--master", "local[*]",
        "--name", launch.key.job_name,
        "--conf", "spark.driver.host=127.0.0.1",
        "--conf", "spark.driver.bindAddress=127.0.0.1",
        "--conf", "spark.ui.enabled=false",
    ]  # fmt: skip
    if job.driver_memory:
        cmd += ["--driver-memory", str(job.driver_memory)]
    if job.driver_cores:
        cmd += ["--driver-cores", str(job.driver_cores)]
    for key, value in job.conf:
        cmd += ["--conf", f"{key}={value}"]
    cmd.append(job.main_application_file)
    cmd.extend(str(a) for a in job.arguments)
    return cmd


def connect_job_command(launch: TaskLaunch) -> list[str]:
    """The command line of one Spark Connect try: the job run by Python, its session confs set first."""
    job = launch.job
    cmd = [sys.executable, "-m", "dagline.executors.connect_job"]
    for key, value in job.conf:
        cmd += ["--conf", f"{key}={value}"]
    return [*cmd, "--", job.main_application_file, *(str(a) for a in job.arguments)]


@dataclasses.dataclass
class _Try:
    launch: TaskLaunch
    log_file: Path
    started_at: dt.datetime | None
    process: subprocess.Popen | None = None  # the wrapper, when this instance started it
    wrapper_pid: int | None = None
    outcome: dict | None = None  # known final outcome (adopted from an exit file, or a start failure)
    start_error: str | None = None
    adopted: bool = False
    cancelled: bool = False
    reported_running: bool = False
    server_lost: str | None = None  # a Connect try whose server went away: why (its failure message)

    @property
    def exit_file(self) -> Path:
        return exit_file_path(self.log_file)


class LocalExecutor:
    """Runs tries as local `spark-submit` subprocesses, at most `parallelism` at a time."""

    name = "local"
    host_bound = True  # its jobs can be found (and adopted) only on the host that started them

    def __init__(self, parallelism: int, log_folder: str, clock=None, log_limits: tuple[int, int] | None = None,
                 secrets: LocalSecrets | None = None, connect: ConnectSettings | None = None,
                 connect_server: ConnectServer | None = None):
        if parallelism < 1:
            raise ValueError("parallelism must be at least 1")
        self.log_limits = log_limits or read_log_limits()  # (bytes per file, files per try): the wrapper rotates
        self.parallelism = parallelism
        self.log_folder = Path(os.path.abspath(log_folder))  # jobs run in their DAG's folder, not ours
        self.clock = clock or SystemClock()
        self._tries: dict[TaskKey, _Try] = {}
        self._spark_submit: str | None = None
        self.secrets = secrets or LocalSecrets.from_env()  # where the tasks' `env` secrets are read
        # the replica's own server; one given here (tests, bench) is shared, and `end`/`detach` leave it running
        self._owns_server = connect_server is None
        self.connect_server = connect_server or ConnectServer(connect or ConnectSettings(),
                                                              self.log_folder / "connect-server.log",
                                                              secret_prefix=self.secrets.prefix)

    # -- protocol -----------------------------------------------------------------------------

    def start(self) -> None:
        self.log_folder.mkdir(parents=True, exist_ok=True)

    def launch(self, launches: list[TaskLaunch]) -> None:
        for launch in launches:
            if launch.key in self._tries:
                continue  # already running here: one process per try
            if self._adopt_one(launch):
                continue  # finished or still running under another instance's wrapper
            self._start(launch)

    def sync(self) -> list[TaskReport]:
        reports: list[TaskReport] = []
        self._check_connect_server()
        for key, t in list(self._tries.items()):
            outcome = self._poll(t)
            if t.start_error is not None:
                reports.append(self._report(t, TIState.FAILED, self.clock.now(), message=t.start_error))
                del self._tries[key]
                continue
            if not t.reported_running:
                t.reported_running = True
                reports.append(self._report(t, TIState.RUNNING, t.started_at))
            if outcome is not None:
                reports.append(self._final_report(t, outcome))
                del self._tries[key]
        return reports

    def cancel(self, key: TaskKey) -> None:
        t = self._tries.get(key)
        if t is None or t.outcome is not None:
            return
        if not self._alive(t):
            return  # finished on its own; the next sync reports how
        t.cancelled = True
        try:
            # the wrapper stops the job's whole process tree and still records the outcome
            os.kill(t.process.pid if t.process is not None else t.wrapper_pid, signal.SIGTERM)
        except ProcessLookupError:
            pass

    def adopt(self, launches: list[TaskLaunch]) -> list[TaskLaunch]:
        return [launch for launch in launches if launch.key not in self._tries and not self._adopt_one(launch)]

    def free_slots(self) -> int:
        busy = sum(1 for t in self._tries.values() if t.outcome is None and t.start_error is None)
        return max(0, self.parallelism - busy)

    def has_work(self) -> bool:
        return bool(self._tries)

    def detach(self) -> None:
        """Forget every try and leave the wrappers running: a graceful stop of the replica, whose jobs
        are adopted by another replica on this host (or the next scheduler) through their files. Connect
        tries excepted: their server stops with the replica, so they are killed (`_kill_connect_tries`)."""
        self._kill_connect_tries()
        self._tries.clear()

    def end(self) -> None:
        """Stop every running try: SIGTERM to each wrapper, then SIGKILL what is left after a while."""
        running = [t for t in self._tries.values() if t.outcome is None and t.start_error is None]
        for t in running:
            self.cancel(t.launch.key)
        deadline = time.monotonic() + _END_WAIT_S
        for t in running:
            while self._alive(t) and time.monotonic() < deadline:
                time.sleep(0.1)
            if self._alive(t):
                self._kill_hard(t)
        self._stop_server()

    # -- internals ----------------------------------------------------------------------------

    def _kill_connect_tries(self) -> None:
        """On a graceful stop of the replica: kill the Connect jobs (they cannot outlive its server, which
        stops with it) and let their wrappers record it, for the adopter to report them failed and the
        scheduler to retry them. Not a stop request: a stopped streaming try would end `success`."""
        running = [t for t in self._tries.values()
                   if t.launch.job.connect and t.outcome is None and t.start_error is None and self._alive(t)]
        for t in running:
            try:
                job_pid = int(json.loads(pid_file_path(t.log_file).read_text(encoding="utf-8"))["pid"])
                os.killpg(job_pid, signal.SIGKILL)
            except (OSError, ValueError, KeyError, TypeError):
                self._kill_hard(t)
        deadline = time.monotonic() + _END_WAIT_S
        for t in running:
            while self._alive(t) and time.monotonic() < deadline:
                time.sleep(0.05)
            with open(t.log_file, "a", encoding="utf-8") as log:
                # not a `[dagline]` line: the adopter's failure message is the log's last meaningful line
                log.write("dagline: the replica stopped, and this Spark Connect try with its server; it is retried "
                          "as usual\n")
        self._stop_server()

    def _stop_server(self) -> None:
        if self._owns_server:
            self.connect_server.stop()

    def _check_connect_server(self) -> None:
        """The server's health check; when it fails, kill every Connect try in flight (its server is gone,
        nothing is left to stop gracefully) and say why in their failure messages."""
        problem = self.connect_server.check()
        if problem is None:
            return
        for t in self._tries.values():
            if t.launch.job.connect and t.outcome is None and t.start_error is None and self._alive(t):
                t.server_lost = f"{problem}; the try was stopped and is retried as usual"
                self._kill_hard(t)

    def _job_command(self, launch: TaskLaunch) -> tuple[list[str], dict[str, str]]:
        """The job's command line and what it adds to the environment: spark-submit, or a Connect job."""
        if launch.job.connect:
            self._check_connect_server()  # a server that died since the last sync fails its tries first
            return connect_job_command(launch), {"SPARK_REMOTE": self.connect_server.ensure()}
        if self._spark_submit is None:
            self._spark_submit = find_spark_submit()
        return spark_submit_command(launch, self._spark_submit), {
            "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}

    def _start(self, launch: TaskLaunch) -> None:
        log_file = log_path(self.log_folder, launch.key)
        t = _Try(launch=launch, log_file=log_file, started_at=self.clock.now())
        self._tries[launch.key] = t
        try:
            log_file.parent.mkdir(parents=True, exist_ok=True)
            job_cmd, job_env = self._job_command(launch)
            max_bytes, files = self.log_limits
            cmd = [sys.executable, "-m", "dagline.executors.wrapper", "--exit-file", str(t.exit_file),
                   "--pid-file", str(pid_file_path(log_file)), "--log-file", str(log_file),
                   "--log-max-bytes", str(max_bytes), "--log-files", str(files)]  # fmt: skip
            if launch.timeout_s:
                cmd += ["--timeout", f"{launch.timeout_s:g}"]
            cmd += ["--grace", f"{launch.stop_grace_s:g}"]
            cmd += ["--", *job_cmd]
            env = job_environment(os.environ, secret_prefix=self.secrets.prefix, try_env=launch.env,
                                  task_env=self.secrets.resolve_env(launch.task_env))
            env.pop("SPARK_REMOTE", None)  # set only for a Connect try, to this replica's server
            env.update(job_env)
            key = launch.key
            header = (
                f"[dagline] {t.started_at.isoformat()} try {key.try_number} of {key.dag_id}/{key.run_id}/"
                f"{key.task_id} in {launch.working_dir or os.getcwd()}: "
                f"{subprocess.list2cmdline(cmd[cmd.index('--') + 1 :])}\n"
            )
            with open(log_file, "ab") as log:
                log.write(header.encode())
                log.flush()
                t.process = subprocess.Popen(
                    cmd,
                    cwd=launch.working_dir or None,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # a Ctrl-C at the scheduler's terminal does not hit the jobs
                )
            t.wrapper_pid = t.process.pid
            claim_pid_file(pid_file_path(log_file), t.wrapper_pid, t.started_at)
        except (OSError, SecretNotFound) as exc:
            t.start_error = f"could not start the job: {exc}"

    def _adopt_one(self, launch: TaskLaunch) -> bool:
        """Track a try started by an earlier executor instance, if its files say it exists."""
        log_file = log_path(self.log_folder, launch.key)
        exit_file = exit_file_path(log_file)
        outcome = read_outcome(exit_file)
        if outcome is not None:
            started = parse_time(outcome.get("started_at"))
            self._tries[launch.key] = _Try(launch, log_file, started, outcome=outcome, adopted=True)
            return True
        try:
            pids = json.loads(pid_file_path(log_file).read_text(encoding="utf-8"))
            wrapper_pid = int(pids["wrapper_pid"])
        except (OSError, ValueError, KeyError, TypeError):
            return False
        if not wrapper_alive(wrapper_pid, exit_file):
            # the wrapper may have finished between our two reads
            outcome = read_outcome(exit_file)
            if outcome is None:
                return False
            started = parse_time(outcome.get("started_at"))
            self._tries[launch.key] = _Try(launch, log_file, started, outcome=outcome, adopted=True)
            return True
        started = parse_time(pids.get("started_at"))
        t = _Try(launch, log_file, started, wrapper_pid=wrapper_pid, adopted=True)
        self._tries[launch.key] = t
        if launch.job.connect:
            t.server_lost = ("its Spark Connect server stopped with the replica that launched it; the try was "
                             "stopped and is retried as usual")
            self._kill_hard(t)
        return True

    def _poll(self, t: _Try) -> dict | None:
        """The try's outcome if it has finished, else None."""
        if t.outcome is not None or t.start_error is not None:
            return t.outcome
        if t.process is not None:
            returncode = t.process.poll()
            if returncode is None:
                return None
            t.outcome = read_outcome(t.exit_file) or {
                "exit_code": returncode,
                "lost": f"the task wrapper exited with code {returncode} without recording an outcome",
            }
            return t.outcome
        outcome = read_outcome(t.exit_file)
        if outcome is None and not wrapper_alive(t.wrapper_pid, t.exit_file):
            outcome = read_outcome(t.exit_file) or {
                "exit_code": -1,
                "lost": f"the task wrapper (pid {t.wrapper_pid}) died without recording an outcome",
            }
        t.outcome = outcome
        return outcome

    def _alive(self, t: _Try) -> bool:
        if t.process is not None:
            return t.process.poll() is None
        return t.wrapper_pid is not None and wrapper_alive(t.wrapper_pid, t.exit_file)

    def _kill_hard(self, t: _Try) -> None:
        pids = [t.process.pid if t.process is not None else t.wrapper_pid]
        try:
            pids.append(int(json.loads(pid_file_path(t.log_file).read_text(encoding="utf-8"))["pid"]))
        except (OSError, ValueError, KeyError, TypeError):
            pass
        for pgid in pids:
            if pgid:
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        if t.process is not None:
            t.process.wait()

    def _report(self, t: _Try, state: str, at: dt.datetime | None, message: str | None = None) -> TaskReport:
        pid = t.process.pid if t.process is not None else t.wrapper_pid
        if pid is None and t.outcome is not None:
            pid = t.outcome.get("pid")
        return TaskReport(
            ti_id=t.launch.ti_id,
            try_number=t.launch.key.try_number,
            state=state,
            at=at or self.clock.now(),
            external_id=f"local:{pid}" if pid else None,
            message=message,
            started_at=t.started_at,
        )

    def _final_report(self, t: _Try, outcome: dict) -> TaskReport:
        at = parse_time(outcome.get("finished_at")) if t.adopted else None
        if outcome.get("exit_code") == 0 and not outcome.get("timed_out") and "lost" not in outcome:
            return self._report(t, TIState.SUCCESS, at or self.clock.now())
        return self._report(t, TIState.FAILED, at or self.clock.now(), message=self._failure_message(t, outcome))

    def _failure_message(self, t: _Try, outcome: dict) -> str:
        code = outcome.get("exit_code")
        if t.server_lost:
            return t.server_lost
        if "lost" in outcome:
            reason = outcome["lost"]
        elif outcome.get("timed_out"):
            timeout = t.launch.timeout_s
            reason = f"timed out after {timeout:g}s (executionTimeout)" if timeout else "timed out (executionTimeout)"
        elif t.cancelled:
            reason = "cancelled"
        elif outcome.get("signal"):
            reason = f"stopped: the task wrapper received {outcome['signal']}"
        elif isinstance(code, int) and code < 0:
            try:
                reason = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                reason = f"killed by signal {-code}"
        elif code == 127 and not outcome.get("pid"):
            reason = "the job could not be started (exit code 127)"
        else:
            reason = f"exit code {code}"
        if outcome.get("timed_out") or t.cancelled or outcome.get("signal"):
            return reason  # the log ends with the consequences of stopping the job: no help there
        line = last_log_line(t.log_file)
        return f"{reason}: {line}" if line else reason


def _build(settings: ExecutorSettings) -> LocalExecutor:
    return LocalExecutor(parallelism=settings.parallelism, log_folder=settings.log_folder, clock=settings.clock,
                         **settings.options)


def _exit_status(stored) -> int | None:
    """The job's exit status, from the outcome the wrapper wrote next to the log (None without one)."""
    code = (read_outcome(exit_file_path(stored.log_path)) or {}).get("exit_code")
    return code if isinstance(code, int) else None


def _shown(environ) -> list[ShownSetting]:
    connect = read_connect_settings(environ)
    return [ShownSetting("local.connect.port", connect.port, "DAGLINE_CONNECT_PORT"),
            ShownSetting("local.connect.driver_memory", connect.driver_memory, "DAGLINE_CONNECT_DRIVER_MEMORY"),
            ShownSetting("local.connect.cores", connect.cores, "DAGLINE_CONNECT_CORES"),
            ShownSetting("local.connect.start_timeout_s", connect.start_timeout_s, "DAGLINE_CONNECT_START_TIMEOUT"),
            ShownSetting("local.connect.url", connect.url or None, "DAGLINE_CONNECT_URL")]


KIND_CODE = KindCode(
    build=_build,
    open_log=FolderLog,
    read_options=lambda environ: {"log_limits": read_log_limits(environ),  # DAGLINE_LOG_MAX_BYTES, _FILES
                                  "secrets": LocalSecrets.from_env(environ),  # DAGLINE_SECRET_PREFIX, _SECRETS_FILE
                                  "connect": read_connect_settings(environ)},  # DAGLINE_CONNECT_*
    option_names=frozenset({"log_limits", "secrets", "connect"}),
    settings_shown=_shown,
    exit_status=_exit_status,
)
