"""The replica's Spark Connect server: started on demand, health-checked, restarted after a crash, stopped with it.

A task with `spark.connect: true` (ADR 0070) runs as `python job.py` with `SPARK_REMOTE` pointing here
instead of starting a JVM of its own through `spark-submit`. The local executor owns one `ConnectServer`
(one per replica): `ensure()` starts it when the first Connect try is launched, as

    <spark_home>/bin/spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer \\
        --master local[<DAGLINE_CONNECT_CORES>] --driver-memory <DAGLINE_CONNECT_DRIVER_MEMORY> \\
        --conf spark.connect.grpc.binding.address=127.0.0.1 --conf spark.connect.grpc.binding.port=<port> ...

(what the pyspark package's `sbin/start-connect-server.sh --wait` runs, without its daemon files), with
its output appended to `<log folder>/connect-server.log`. Its environment is a local job's
(`dagline.domain.secrets.job_environment`: none of the replica's `DAGLINE_*` settings, database or
Kubernetes credentials, or secret variables): the Python workers it starts for the jobs' UDFs and
`foreachBatch` functions inherit it, and they are the jobs' code. It listens on loopback only. Its memory is
bounded by its driver's heap (local mode: the executors live in the driver). `ensure()` does not wait
for the server to listen: a Connect client retries an unavailable server with back-off, so a job
started meanwhile connects as soon as it is up.

`check()` is the health check, called at every `sync` of the executor: the process must live, and
must accept connections on its port within `DAGLINE_CONNECT_START_TIMEOUT` of its start (and at every
later check, at most every `PROBE_EVERY_S`). A server that exited, or does not answer, is stopped and
`check()` returns why, once: the executor then fails the Connect tries in flight with that message (the
scheduler retries them as usual), and the next Connect launch starts a new server. `stop()` ends it
(SIGTERM, then SIGKILL); the server also gets SIGKILL when the replica dies (Linux parent-death
signal), so a killed replica leaves no JVM behind.

With `DAGLINE_CONNECT_URL` (`sc://HOST[:PORT]`) the replica starts no server: its Connect tries use that
one, already running (another replica's with a fixed `DAGLINE_CONNECT_PORT`, one started by
`start-connect-server.sh`, the test suite's), so `backfill run`, `dags test` and `tasks test` need not
wait for a server of their own. The health check then only probes it (at most every `PROBE_EVERY_S`):
while it does not answer, `check()` says so and the Connect tries in flight fail with that message; it
is neither restarted nor stopped by dagline (it is not the replica's).
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from dagline.domain.secrets import DEFAULT_SECRET_PREFIX, job_environment
from dagline.errors import InvalidInput

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
PROBE_EVERY_S = 5.0  # how often a running server's port is probed
_STOP_WAIT_S = 15.0
_MEMORY_RE = re.compile(r"[1-9][0-9]{0,6}[kmgt]b?", re.IGNORECASE)
_URL_RE = re.compile(r"sc://(?P<host>[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::(?P<port>[0-9]{1,5}))?/?")
DEFAULT_CONNECT_PORT = 15002  # a Spark Connect URL's port when it names none (Spark's own default)


@dataclasses.dataclass(frozen=True)
class ConnectSettings:
    """How the replica's Spark Connect server is run (DAGLINE_CONNECT_* in the scheduler's environment)."""

    port: int = 0  # DAGLINE_CONNECT_PORT; 0: a free loopback port, chosen at each start
    driver_memory: str = "1g"  # DAGLINE_CONNECT_DRIVER_MEMORY: the server's heap, its memory bound
    cores: int = 2  # DAGLINE_CONNECT_CORES: local[cores], the task threads every Connect job shares
    start_timeout_s: float = 120.0  # DAGLINE_CONNECT_START_TIMEOUT: seconds to listen after a start
    url: str = ""  # DAGLINE_CONNECT_URL: an existing server (sc://HOST[:PORT]) used instead of starting one


def read_connect_settings(environ: Mapping[str, str] | None = None) -> ConnectSettings:
    """The settings from DAGLINE_CONNECT_PORT, _DRIVER_MEMORY, _CORES, _START_TIMEOUT, _URL; a bad value is
    an `InvalidInput` naming its variable."""
    environ = os.environ if environ is None else environ
    default = ConnectSettings()

    def number(name: str, fallback, kind, least, most):
        raw = environ.get(name)
        if raw is None or raw == "":
            return fallback
        try:
            value = kind(raw)
        except ValueError:
            raise InvalidInput(f"must be a number, got {raw!r}", field=name) from None
        if not least <= value <= most:
            raise InvalidInput(f"must be between {least} and {most}, got {raw}", field=name)
        return value

    memory = environ.get("DAGLINE_CONNECT_DRIVER_MEMORY") or default.driver_memory
    if not _MEMORY_RE.fullmatch(memory):
        raise InvalidInput(f"must be a Spark memory size such as 512m or 2g, got {memory!r}",
                           field="DAGLINE_CONNECT_DRIVER_MEMORY")
    url = (environ.get("DAGLINE_CONNECT_URL") or "").strip()
    if url and not _URL_RE.fullmatch(url):
        raise InvalidInput(f"must be a Spark Connect URL sc://HOST or sc://HOST:PORT (no parameters), got {url!r}",
                           field="DAGLINE_CONNECT_URL")
    if url and not 0 < int(_URL_RE.fullmatch(url)["port"] or DEFAULT_CONNECT_PORT) <= 65535:
        raise InvalidInput(f"its port must be between 1 and 65535, got {url!r}", field="DAGLINE_CONNECT_URL")
    return ConnectSettings(
        url=url.rstrip("/"),
        port=number("DAGLINE_CONNECT_PORT", default.port, int, 0, 65535),
        driver_memory=memory,
        cores=number("DAGLINE_CONNECT_CORES", default.cores, int, 1, 256),
        start_timeout_s=number("DAGLINE_CONNECT_START_TIMEOUT", default.start_timeout_s, float, 1, 3600),
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listens(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def _die_with_parent() -> None:
    """In the server's process before exec: SIGKILL it when the replica that started it dies (Linux)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort: `stop` still ends it on a graceful stop
        pass


def _last_lines(log_file: Path, count: int = 3) -> str:
    try:
        with open(log_file, "rb") as f:
            f.seek(max(0, os.path.getsize(log_file) - 8192))
            lines = [line.strip() for line in f.read().decode(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    errors = [line for line in lines if "Exception" in line or "Error" in line]
    return " | ".join((errors or lines)[-count:])[:600]


class ConnectServer:
    """One Spark Connect server process, owned by one replica's local executor; or, with `settings.url`
    (DAGLINE_CONNECT_URL), a server someone else runs, which this only probes."""

    def __init__(self, settings: ConnectSettings, log_file: Path, spark_submit: str | None = None,
                 secret_prefix: str = DEFAULT_SECRET_PREFIX):
        self.settings = settings
        self.secret_prefix = secret_prefix  # the secret variables its environment leaves out
        self.log_file = Path(log_file)
        self._spark_submit = spark_submit
        self.process: subprocess.Popen | None = None
        self.port: int | None = None
        self.started_at = 0.0  # time.monotonic() of the start
        self.healthy = False  # has accepted a connection since its start
        self._probed_at = 0.0
        self.starts = 0  # how many times it was started (restarts after a crash count)
        self.host = "127.0.0.1"
        self._used = False  # an external server: a Connect try was launched against it (probing begins)
        if settings.url:
            found = _URL_RE.fullmatch(settings.url)
            self.host = found["host"].strip("[]")
            self.port = int(found["port"] or DEFAULT_CONNECT_PORT)

    @property
    def external(self) -> bool:
        """True when the server is not the replica's (DAGLINE_CONNECT_URL): never started nor stopped here."""
        return bool(self.settings.url)

    @property
    def url(self) -> str:
        """The `SPARK_REMOTE` of its jobs."""
        return self.settings.url or f"sc://127.0.0.1:{self.port}"

    def running(self) -> bool:
        if self.external:
            return _listens(self.port, self.host)
        return self.process is not None and self.process.poll() is None

    def command(self, port: int) -> list[str]:
        if self._spark_submit is None:
            from dagline.executors.spark_home import find_spark_submit

            self._spark_submit = find_spark_submit()
        s = self.settings
        return [
            self._spark_submit,
            "--class", SERVER_CLASS,
            "--name", "dagline Spark Connect server",
            "--master", f"local[{s.cores}]",
            "--driver-memory", s.driver_memory,
            "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf", f"spark.connect.grpc.binding.port={port}",
            "--conf", "spark.driver.host=127.0.0.1",
            "--conf", "spark.driver.bindAddress=127.0.0.1",
            "--conf", "spark.ui.enabled=false",
        ]  # fmt: skip

    def ensure(self) -> str:
        """Start the server unless it runs; its URL (`sc://127.0.0.1:<port>`). Does not wait for it to listen.
        Raises OSError if it cannot be started at all. An external server (DAGLINE_CONNECT_URL): its URL."""
        if self.external:
            if not self._used:
                self._used, self._probed_at = True, time.monotonic()
            return self.url
        if self.running():
            return self.url
        port = self.settings.port or free_port()
        cmd = self.command(port)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        # the jobs' UDFs run in Python workers of the server: they get what a job gets, not the replica's settings
        env = {**job_environment(os.environ, secret_prefix=self.secret_prefix), "SPARK_LOCAL_IP": "127.0.0.1",
               "PYSPARK_PYTHON": sys.executable}
        env.pop("SPARK_REMOTE", None)
        with open(self.log_file, "ab") as log:
            log.write(f"[dagline] {time.strftime('%Y-%m-%dT%H:%M:%S%z')} starting: "
                      f"{subprocess.list2cmdline(cmd)}\n".encode())
            log.flush()
            self.process = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True,
                                            preexec_fn=_die_with_parent)
        self.port = port
        self.started_at = self._probed_at = time.monotonic()
        self.healthy = False
        self.starts += 1
        return self.url

    def check(self) -> str | None:
        """The health check: None while the server is fine (or was never started); else why it is not, once,
        after stopping what is left of it. An external server: why, at every probe that finds it silent."""
        if self.external:
            return self._check_external()
        if self.process is None:
            return None
        code = self.process.poll()
        if code is not None:
            problem = f"the Spark Connect server exited with code {code}"
        else:
            now = time.monotonic()
            if not self.healthy:
                if _listens(self.port):
                    self.healthy, self._probed_at = True, now
                    return None
                if now - self.started_at < self.settings.start_timeout_s:
                    return None
                problem = (f"the Spark Connect server did not listen on port {self.port} within "
                           f"{self.settings.start_timeout_s:g}s (DAGLINE_CONNECT_START_TIMEOUT)")
            else:
                if now - self._probed_at < PROBE_EVERY_S:
                    return None
                self._probed_at = now
                if _listens(self.port):
                    return None
                problem = f"the Spark Connect server stopped answering on port {self.port}"
        self.stop()
        detail = _last_lines(self.log_file)
        return f"{problem} (its log {self.log_file}: {detail})" if detail else f"{problem} (see {self.log_file})"

    def _check_external(self) -> str | None:
        """Probe a server that is not the replica's, at most every `PROBE_EVERY_S` once it is in use."""
        now = time.monotonic()
        if not self._used or now - self._probed_at < PROBE_EVERY_S:
            return None
        self._probed_at = now
        self.healthy = _listens(self.port, self.host)
        if self.healthy:
            return None
        return (f"the Spark Connect server at {self.url} (DAGLINE_CONNECT_URL) does not answer; dagline does not "
                "run that server, so it does not restart it")

    def wait_listening(self, timeout_s: float | None = None) -> bool:
        """Wait until the server accepts connections (for `bench/` and tests); False if it died or timed out."""
        deadline = time.monotonic() + (timeout_s or self.settings.start_timeout_s)
        while (self.external or self.running()) and time.monotonic() < deadline:
            if _listens(self.port, self.host):
                self.healthy = True
                return True
            time.sleep(0.2)
        return False

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after a while; forgets the process. An external server is left alone."""
        process, self.process = self.process, None
        self.healthy = False
        if process is None or process.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, _STOP_WAIT_S), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(process.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                process.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue
