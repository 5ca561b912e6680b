"""The task wrapper: runs one try's command on the host and records its outcome in a file.

    python -m dagline.executors.wrapper --exit-file PATH [--pid-file PATH] [--timeout SECONDS]
        [--log-file PATH --log-max-bytes N --log-files N] -- CMD...

The local executor starts every try through this wrapper instead of running `spark-submit` itself.
The wrapper starts CMD in a new session and process group (stdout and stderr are inherited: the
executor points them at the try's log file), waits for it, enforces `--timeout` (executionTimeout)
by stopping the whole job, and then writes the outcome atomically (a temporary file, then a rename)
as JSON to the exit file:

    {"exit_code": 1, "timed_out": false, "signal": null,
     "started_at": "2026-01-02T01:00:00.123456+00:00", "finished_at": "...", "pid": 4242}

Why a separate process: the outcome survives the scheduler replica that launched the try. If that
replica dies, the wrapper keeps running, and another replica on the host can later read the exit
file (or, while the wrapper still lives, find it through the pid file) and adopt the try instead of
running it a second time.

Stopping a job: `spark-submit` execs a JVM that starts a Python driver, and PySpark's worker daemon
moves itself into its own process group. So the wrapper marks itself a child subreaper (Linux).
The stop request (SIGTERM) goes to the PySpark driver alone when there is one (a Python process
whose parent is the JVM, other than PySpark's workers): the driver's SparkSession lives in that JVM,
so a JVM that got SIGTERM too would run its shutdown hooks and stop the SparkContext under the
driver's feet (no clean stop of its streaming queries), and, since the JVM relays the driver's
output, could exit before the driver's last lines reach the log. The driver stops, its JVM then
exits with the driver's exit code. Without such a driver (a JVM application, any other command) the
SIGTERM goes to the job's process group and every other descendant. After `--grace` seconds (the
task's stopGracePeriod; `KILL_GRACE_S` by default) everything gets SIGKILL. When the job's main
process has exited, leftover descendants are killed too: a finished try leaves nothing behind.
SIGTERM, SIGINT and SIGHUP sent to the wrapper are forwarded the same way (that is how a try is
cancelled), and the signal is recorded in the outcome.

Log rotation (`--log-file`): the job writes its log file directly (O_APPEND, never through a pipe, so
it neither blocks on a slow reader nor dies with the wrapper). Whenever the wrapper sees the file past
`--log-max-bytes` (it looks every `POLL_S`, and once more at the end), it rotates it the way
logrotate's `copytruncate` does: `<log>.<n>` becomes `<log>.<n+1>` (the oldest beyond `--log-files`
minus one is deleted), the file is copied to `<log>.1` and truncated; the job's appends go on at the
new end. A file can overshoot the limit by what the job writes in one poll interval, and lines written
during the copy itself (microseconds) can be lost: the price of never blocking the job.

`exit_code` is the main process's return code as `subprocess` reports it: negative when a signal
ended it (-9 for SIGKILL), 127 when CMD could not be started. `pid` is CMD's process id, which is
also its process group id. The wrapper uses only the standard library, so it starts fast.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import time

KILL_GRACE_S = 5.0  # between SIGTERM and SIGKILL when stopping a job
POLL_S = 0.2

_received_signal: int | None = None


def _now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat()


def _write_json_atomically(path: str, data: dict) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _set_child_subreaper() -> None:
    """Make orphaned descendants (e.g. PySpark's daemon after the JVM dies) our children (Linux only)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except Exception:  # noqa: BLE001 - best effort; the process-group kill still works
        pass


def _processes() -> dict[int, tuple[int, str]]:
    """Every process: pid -> (parent pid, command name), read from /proc (empty where it is absent)."""
    found: dict[int, tuple[int, str]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        # the command name (field 2) may contain spaces and parentheses: split after the last ')'
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) >= 2:
            found[int(entry)] = (int(fields[1]), stat[stat.find("(") + 1 : stat.rfind(")")])
    return found


def _descendants(root: int, processes: dict[int, tuple[int, str]] | None = None) -> set[int]:
    """Process ids below `root`."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _name) in (_processes() if processes is None else processes).items():
        children.setdefault(parent, []).append(pid)
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _pyspark_drivers(root: int) -> list[int]:
    """The Python processes below `root` whose parent is a JVM, but PySpark's own workers."""
    processes = _processes()
    drivers = []
    for pid in _descendants(root, processes):
        parent, name = processes[pid]
        if not name.startswith("python") or processes.get(parent, (0, ""))[1] != "java":
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if b"pyspark.daemon" not in cmdline and b"pyspark.worker" not in cmdline:
            drivers.append(pid)
    return drivers


def _request_stop(pgid: int) -> str:
    """SIGTERM to the PySpark driver alone if there is one, else to the whole job; says which."""
    drivers = _pyspark_drivers(os.getpid())
    for pid in drivers:
        try:
            os.kill(pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    if drivers:
        return "the PySpark driver"
    _signal_job(pgid, signal.SIGTERM)
    return "the job"


def _signal_job(pgid: int, sig: int) -> None:
    """Send `sig` to the job's process group and to every other descendant of this wrapper."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in _descendants(os.getpid()):
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _reap() -> None:
    """Collect exited adopted orphans so they do not stay zombies (we are their subreaper)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _on_signal(signum, frame) -> None:  # noqa: ARG001 - signal handler signature
    global _received_signal
    if _received_signal is None:
        _received_signal = signum


def rotate_log(log_file: str, keep: int) -> None:
    """Copy-truncate `log_file` into `<log_file>.1`, shifting older copies up; at most `keep` files in all."""
    if keep <= 1:
        os.truncate(log_file, 0)
        return
    oldest = f"{log_file}.{keep - 1}"
    if os.path.exists(oldest):
        os.remove(oldest)
    for number in range(keep - 2, 0, -1):
        if os.path.exists(f"{log_file}.{number}"):
            os.replace(f"{log_file}.{number}", f"{log_file}.{number + 1}")
    shutil.copyfile(log_file, f"{log_file}.1")
    os.truncate(log_file, 0)


def _rotate_if_large(log_file: str | None, max_bytes: int | None, keep: int) -> None:
    if not log_file or not max_bytes:
        return
    try:
        if os.path.getsize(log_file) > max_bytes:
            rotate_log(log_file, keep)
    except OSError as exc:  # a full disk or a removed folder must not end the try
        _log(f"could not rotate {log_file}: {exc}")


def _log(message: str) -> None:
    print(f"[dagline] {message}", file=sys.stderr, flush=True)


def run(cmd: list[str], exit_file: str, timeout_s: float | None, pid_file: str | None = None,
        grace_s: float = KILL_GRACE_S, *, log_file: str | None = None, log_max_bytes: int | None = None,
        log_files: int = 5) -> int:
    """Run `cmd` to the end (or the timeout), write the outcome to `exit_file`, return an exit status."""
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _on_signal)
    _set_child_subreaper()
    started_at = _now_iso()
    began = time.monotonic()
    outcome = {"exit_code": 127, "timed_out": False, "signal": None, "started_at": started_at, "pid": 0}
    try:
        child = subprocess.Popen(cmd, start_new_session=True)
    except OSError as exc:
        _log(f"cannot start {cmd[0]!r}: {exc}")
        _write_json_atomically(exit_file, {**outcome, "finished_at": _now_iso()})
        return 127
    outcome["pid"] = child.pid
    if pid_file:
        _write_json_atomically(pid_file, {"wrapper_pid": os.getpid(), "pid": child.pid, "started_at": started_at})

    deadline = began + timeout_s if timeout_s else None
    stop_reason: str | None = None
    kill_at: float | None = None
    while True:
        try:
            returncode = child.wait(timeout=POLL_S)
            break
        except subprocess.TimeoutExpired:
            pass
        _rotate_if_large(log_file, log_max_bytes, log_files)
        now = time.monotonic()
        if stop_reason is None and deadline is not None and now >= deadline:
            stop_reason = f"timed out after {timeout_s:g}s"
            outcome["timed_out"] = True
        if stop_reason is None and _received_signal is not None:
            stop_reason = f"received {signal.Signals(_received_signal).name}"
            outcome["signal"] = signal.Signals(_received_signal).name
        if stop_reason is not None and kill_at is None:
            whom = _request_stop(child.pid)
            _log(f"{stop_reason}: stopping the job (SIGTERM to {whom}, then SIGKILL after {grace_s:g}s)")
            kill_at = now + grace_s
        elif kill_at is not None and now >= kill_at:
            _log("the job did not stop in time: SIGKILL")
            _signal_job(child.pid, signal.SIGKILL)
            kill_at = float("inf")

    # The main process is gone; nothing it started may outlive the try.
    leftovers = _descendants(os.getpid())
    try:
        os.killpg(child.pid, 0)
        group_alive = True
    except (ProcessLookupError, PermissionError):
        group_alive = False
    if leftovers or group_alive:
        _signal_job(child.pid, signal.SIGKILL)
    _reap()
    _rotate_if_large(log_file, log_max_bytes, log_files)

    outcome["exit_code"] = returncode
    outcome["finished_at"] = _now_iso()
    _write_json_atomically(exit_file, outcome)
    how = f"exit code {returncode}" if returncode >= 0 else f"killed by {signal.Signals(-returncode).name}"
    _log(f"{how} after {time.monotonic() - began:.1f}s" + (f" ({stop_reason})" if stop_reason else ""))
    return returncode if returncode >= 0 else 128 - returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dagline.executors.wrapper",
        description="Run a task's command in its own process group and record its outcome as JSON.",
    )
    parser.add_argument("--exit-file", required=True, help="where the outcome JSON is written at the end")
    parser.add_argument("--pid-file", help="where {wrapper_pid, pid, started_at} is written at the start")
    parser.add_argument("--timeout", type=float, default=None, help="seconds; 0 or absent: no timeout")
    parser.add_argument("--log-file", help="the try's log file (the job's stdout and stderr), to rotate")
    parser.add_argument("--log-max-bytes", type=int, default=None, help="rotate the log file past this size")
    parser.add_argument("--log-files", type=int, default=5, help="files kept per try, the current one included")
    parser.add_argument("--grace", type=float, default=KILL_GRACE_S,
                        help="seconds between SIGTERM and SIGKILL when stopping the job (stopGracePeriod)")
    parser.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    args = parser.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("no command given after --")
    return run(cmd, args.exit_file, args.timeout or None, args.pid_file, args.grace, log_file=args.log_file,
               log_max_bytes=args.log_max_bytes, log_files=max(1, args.log_files))


if __name__ == "__main__":
    sys.exit(main())
