"""PostgreSQL servers a fault harness may restart: a throwaway cluster of its own, or the machine's.

`ThrowawayCluster` runs `initdb` and `pg_ctl` from /usr/lib/postgresql/<version>/bin (the newest) in a
temporary folder, on a free port of 127.0.0.1, with trust authentication for the `postgres` user.
Both programs refuse to run as root, so as root they run as the `postgres` user (`runuser -u
postgres --`) and the folder is handed to that user. It starts in about a second; `restart()` stops
it (fast mode: sessions are cut) and starts it again on the same port and data; `close()` stops it
and deletes everything. Durability settings are off (`fsync`, `synchronous_commit`): the data only
has to outlive a restart of the server, not of the machine.

`MachineServer` is the shared server the URL points at, restarted with
`pg_ctlcluster --skip-systemctl-redirect <version> main restart` (Debian's wrapper): only for
machines where nothing else uses that server at the time.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time

from sqlalchemy import create_engine, text


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bin_dir() -> str:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if not found:
        initdb = shutil.which("initdb")
        if initdb is None:
            raise RuntimeError("no PostgreSQL server binaries (initdb under /usr/lib/postgresql/*/bin or on PATH)")
        return os.path.dirname(initdb)
    return os.path.dirname(found[-1])


def wait_until_accepting(url: str, timeout_s: float = 30.0) -> None:
    """Return once a connection to `url` succeeds (after a start or a restart)."""
    engine = create_engine(url)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                with engine.connect() as conn:
                    conn.execute(text("SELECT 1"))
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    finally:
        engine.dispose()


class ThrowawayCluster:
    """A private PostgreSQL server for one harness run (see the module docstring)."""

    def __init__(self) -> None:
        self.bin = _bin_dir()
        self.port = _free_port()
        self.folder = tempfile.mkdtemp(prefix="dagline-pg-")
        self.data = os.path.join(self.folder, "data")
        self.log = os.path.join(self.folder, "server.log")
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            user = pwd.getpwnam("postgres")
            os.chown(self.folder, user.pw_uid, user.pw_gid)
        self.restarts = 0

    @property
    def url(self) -> str:
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, program: str, *args: str, timeout: float = 120) -> None:
        command = [os.path.join(self.bin, program), *args]
        if self._as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        if result.returncode != 0:
            raise RuntimeError(f"{program} failed ({result.returncode}): {result.stderr.strip() or result.stdout}")

    def start(self) -> ThrowawayCluster:
        self._run("initdb", "-D", self.data, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8")
        self._pg_ctl("start")
        return self

    def _pg_ctl(self, action: str) -> None:
        options = (f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
        args = ["-D", self.data, "-l", self.log, "-w", "-t", "60"]
        if action == "start":
            self._run("pg_ctl", *args, "-o", options, "start")
        elif action == "restart":
            self._run("pg_ctl", *args, "-m", "fast", "-o", options, "restart")
        else:
            self._run("pg_ctl", "-D", self.data, "-w", "-m", "immediate", "stop")

    def restart(self) -> None:
        self._pg_ctl("restart")
        self.restarts += 1

    def stop_keeping(self) -> str:
        """Stop the server but keep its folder; returns the command that starts it again."""
        self._pg_ctl("stop")
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1"
        prefix = "runuser -u postgres -- " if self._as_postgres else ""
        return f"{prefix}{self.bin}/pg_ctl -D {self.data} -l {self.log} -o '{options}' start"

    def close(self) -> None:
        try:
            if os.path.exists(os.path.join(self.data, "postmaster.pid")):
                self._pg_ctl("stop")
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> ThrowawayCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


class MachineServer:
    """The machine's own cluster, restarted with Debian's `pg_ctlcluster` (see the module docstring)."""

    def __init__(self, url: str):
        self.url = url
        self.restarts = 0

    @property
    def restartable(self) -> bool:
        """Only a server on this machine, with Debian's cluster layout, can be restarted from here."""
        from sqlalchemy.engine import make_url

        return make_url(self.url).host in ("127.0.0.1", "localhost", "::1", None) and os.path.isdir("/etc/postgresql")

    def restart(self) -> None:
        if not self.restartable:
            raise RuntimeError(f"cannot restart the server at {self.url} from here (not a local Debian cluster)")
        versions = sorted(os.listdir("/etc/postgresql"), key=int)
        subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", versions[-1], "main", "restart"],
                       check=True, capture_output=True, timeout=120)
        self.restarts += 1

    def close(self) -> None:
        pass
