"""The files a local try leaves on disk, and what they say: its log, its outcome and its pids.

Each try of the local executor has a log file `log_path(log_folder, key)`; the task wrapper
(`dagline.executors.wrapper`) writes the try's outcome next to it in `<log>.exit` and its pids in
`<log>.pid`. Because the record of a try lives in these files rather than in a scheduler's memory,
any scheduler on this host can find a try again: read its outcome, check that its wrapper is still
alive (guarding against pid reuse through /proc), or name the last meaningful line of its log as the
reason it failed. `dagline tasks logs` reads the same paths.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from pathlib import Path

from dagline.executors.base import TaskKey

_UNSAFE_PATH_CHARS = re.compile(r"[^A-Za-z0-9._=+:@-]+")
_SPARK_LOG_LINE = re.compile(r"^\d{2}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} (INFO|DEBUG|TRACE) ")
_JAVA_STACK_LINE = re.compile(r"^\s+at \S|^\s*\.\.\. \d+ more$")
_TAIL_BYTES = 64 * 1024
_MESSAGE_LINE_MAX = 300


def _path_part(text: str) -> str:
    """One safe path component: no separators, no '..', never empty."""
    part = _UNSAFE_PATH_CHARS.sub("_", str(text))
    if part.strip(".") == "":
        part = "_" + part
    return part


def log_path(log_folder: str | os.PathLike, key: TaskKey) -> Path:
    """The log file of one try: `<log_folder>/<dag_id>/<run_id>/<task_id>/try-<n>.log`, where a DAG of
    another namespace than `default` is `<namespace>/<name>` (its key; a run id, `<kind>__...`, is never
    a DAG's name, so the two never meet).

    Its outcome is kept next to it in `try-<n>.log.exit` (and the wrapper's pids in `try-<n>.log.pid`).
    """
    return (
        Path(log_folder).joinpath(*(_path_part(part) for part in key.dag_id.split("/", 1)))
        / _path_part(key.run_id)
        / _path_part(key.task_id)
        / f"try-{int(key.try_number)}.log"
    )


# Rotation of a try's log (done by the wrapper): at most LOG_FILES files of about LOG_MAX_BYTES each,
# `try-<n>.log` (the newest) and `try-<n>.log.1` ... `.<LOG_FILES - 1>` (the oldest). Settings:
# DAGLINE_LOG_MAX_BYTES and DAGLINE_LOG_FILES in the scheduler's environment.
LOG_MAX_BYTES = 10 * 1024 * 1024
LOG_FILES = 5


def log_limits(environ=None) -> tuple[int, int]:
    """(max bytes per file, files per try) from DAGLINE_LOG_MAX_BYTES / DAGLINE_LOG_FILES."""
    from dagline.errors import InvalidInput

    environ = os.environ if environ is None else environ
    limits = []
    for name, default, least in (("DAGLINE_LOG_MAX_BYTES", LOG_MAX_BYTES, 1024), ("DAGLINE_LOG_FILES", LOG_FILES, 1)):
        raw = environ.get(name)
        try:
            value = default if raw is None else int(raw)
        except ValueError:
            raise InvalidInput(f"must be an integer, got {raw!r}", field=name) from None
        if value < least:
            raise InvalidInput(f"must be at least {least}, got {value}", field=name)
        limits.append(value)
    return limits[0], limits[1]


def log_files(log_file: Path) -> list[Path]:
    """Every file of a try's log that exists, oldest first (rotated copies, then the current file)."""
    rotated = []
    for path in log_file.parent.glob(log_file.name + ".*"):
        suffix = path.name[len(log_file.name) + 1:]
        if suffix.isdigit():
            rotated.append((int(suffix), path))
    found = [path for _, path in sorted(rotated, reverse=True)]
    return found + ([log_file] if log_file.exists() else [])


def exit_file_path(log_file: Path) -> Path:
    return log_file.with_name(log_file.name + ".exit")


def pid_file_path(log_file: Path) -> Path:
    return log_file.with_name(log_file.name + ".pid")


def read_outcome(exit_file: Path) -> dict | None:
    """The wrapper's outcome JSON, or None while there is none (or it is unreadable)."""
    try:
        data = json.loads(exit_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "exit_code" in data else None


def last_log_line(log_file: Path) -> str | None:
    """The last line of the log worth showing: not blank, not Spark INFO chatter, not a Java stack frame."""
    try:
        with open(log_file, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - _TAIL_BYTES))
            tail = f.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    for line in reversed(tail.splitlines()):
        if (
            not line.strip()
            or line.startswith("[dagline]")
            or _SPARK_LOG_LINE.match(line)
            or _JAVA_STACK_LINE.match(line)
        ):
            continue
        line = line.strip()
        return line if len(line) <= _MESSAGE_LINE_MAX else line[: _MESSAGE_LINE_MAX - 3] + "..."
    return None


def parse_time(text) -> dt.datetime | None:
    try:
        value = dt.datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)


def wrapper_alive(wrapper_pid: int, exit_file: Path) -> bool:
    """True if `wrapper_pid` is alive and is the wrapper of this try (guards against pid reuse)."""
    try:
        with open(f"/proc/{wrapper_pid}/cmdline", "rb") as f:
            argv = [os.fsdecode(a) for a in f.read().split(b"\0")]
    except OSError:
        return False  # gone (a zombie has an empty cmdline too)
    if "--exit-file" not in argv[:-1]:
        return False
    theirs = argv[argv.index("--exit-file") + 1]
    if not os.path.isabs(theirs):
        theirs = os.path.join(f"/proc/{wrapper_pid}/cwd", theirs)
    return os.path.realpath(theirs) == os.path.realpath(exit_file)


def claim_pid_file(pid_file: Path, wrapper_pid: int, started_at: dt.datetime) -> None:
    """Record the wrapper's pid at once, unless the wrapper already wrote its own (fuller) pid file.
    Without this, a scheduler dying in the moment before the wrapper writes its file would leave a
    running job that no later scheduler can find. Created whole or not at all (link is atomic)."""
    tmp = pid_file.with_name(f"{pid_file.name}.{wrapper_pid}.tmp")
    tmp.write_text(json.dumps({"wrapper_pid": wrapper_pid, "started_at": started_at.isoformat()}))
    try:
        os.link(tmp, pid_file)
    except FileExistsError:
        pass  # the wrapper was first
    finally:
        tmp.unlink(missing_ok=True)
