"""Rendering a task's templates in a separate process, with a hard time budget.

The sandbox bounds what a template may allocate (`dagline.domain.templating`), but not how long it runs: a
loop such as `{% for i in range(99999) %}{% for j in range(99999) %}` cannot be interrupted inside a
thread. So a replica renders in a small long-lived child process (`python -m
dagline.scheduler.renderer`) and waits for each template's answer at most `time_budget_s` (2 s): past
that, the child is killed and that one try fails with a message naming the task and the template.
Starting the child takes about 0.2 s (more on a busy node): a replica starts it with itself
(`prestart`) and again right after killing it, so no try's launch waits for Python to start; a
renderer nobody prestarted (a test run, `--until-idle`) starts it on first use. The child also runs under an
address-space limit (`MEMORY_LIMIT`), so a template that slips past the sandbox's checks fails with
an out-of-memory error rather than taking the replica's memory.

The replica waits in short slices and asks `should_stop()` between them: SIGTERM stops a replica
within its grace period even mid-render (the try stays `queued`; whoever adopts it renders it again).
Rendering happens outside any database transaction: callers gather the inputs in one transaction and
record the outcome in another.

Frames are a 4-byte length and a body: pickle from the replica to the child (the context holds
pendulum times), JSON from the child back (it only ever returns text).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import pickle
import select
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from dagline.domain.secrets import is_reserved
from dagline.domain.templating import TIME_BUDGET_S, render
from dagline.errors import DaglineError, Unavailable
from dagline.limits import RENDERER_MEMORY_LIMIT

log = logging.getLogger(__name__)

MEMORY_LIMIT = RENDERER_MEMORY_LIMIT  # the child's address space: 1 GiB
STARTUP_TIMEOUT_S = 60.0  # a slow machine: the child imports Jinja and pendulum before it is ready
_HEADER = struct.Struct(">I")


class RenderFailed(DaglineError, ValueError):
    """A template of the task could not be rendered (error, bound, time budget); the message names it. The
    DAG's fault: exit 2, 422."""

    exit_code = 2
    http_status = 422


class RenderInterrupted(Unavailable):
    """The replica is stopping: rendering was abandoned."""


@dataclasses.dataclass(frozen=True)
class RenderRequest:
    """What a task needs rendered: its templates (where, text) and the context they see."""

    task_id: str
    templates: list[tuple[str, str]]
    context: dict[str, Any]


class Renderer:
    """A replica's renderer process. Not thread-safe: one per replica loop."""

    def __init__(self, *, time_budget_s: float = TIME_BUDGET_S, should_stop: Callable[[], bool] | None = None):
        self.time_budget_s = time_budget_s
        self.should_stop = should_stop or (lambda: False)
        self._proc: subprocess.Popen | None = None
        self._ready = False  # the child said it is ready (see `_process`)
        self._keep_started = False  # `prestart` was called: start a new child as soon as one is killed
        self.spawns = 0  # processes started so far (for tests and logs)
        self.kills = 0  # renders that ran out of time

    def prestart(self) -> None:
        """Start the child now, without waiting for it, and again whenever one is killed, so renders
        never wait for its start. Its readiness is awaited by the first render."""
        self._keep_started = True
        if self._proc is None or self._proc.poll() is not None:
            self._kill()
            self._spawn()

    def render(self, request: RenderRequest) -> dict[str, str]:
        """Each template's text; raises RenderFailed naming the task and the template, or RenderInterrupted."""
        if not request.templates:
            return {}
        proc = self._process()
        try:
            _write_frame(proc.stdin, pickle.dumps((request.templates, request.context)))
        except (BrokenPipeError, OSError):
            self._kill()
            proc = self._process()
            _write_frame(proc.stdin, pickle.dumps((request.templates, request.context)))
        values: dict[str, str] = {}
        for where, text in request.templates:
            answer = self._read_answer(proc)
            if answer is None:
                self.kills += 1
                self._kill()
                if self._keep_started:
                    self._spawn()  # it boots while the caller records this failure
                shown = text if len(text) <= 80 else text[:80] + "..."
                raise RenderFailed(f"task {request.task_id}, {where}: template {shown!r} did not finish rendering "
                                   f"within the time budget of {self.time_budget_s:g}s")
            status, _, value = answer
            if status != "ok":
                raise RenderFailed(f"task {request.task_id}, {where}: {value}")
            values[where] = value
        return values

    def close(self) -> None:
        if self._proc is not None:
            try:
                self._proc.stdin.close()  # the child ends at EOF
                self._proc.wait(1)
            except (OSError, subprocess.TimeoutExpired):
                pass
            self._kill()  # kills it if it is still there, and closes its pipes

    # -- internals ------------------------------------------------------------------------------

    def _process(self) -> subprocess.Popen:
        if self._proc is not None and self._proc.poll() is not None:
            self._kill()  # it died: close its pipes before starting another
        if self._proc is None:
            self._spawn()
        if not self._ready:
            # The budget is for rendering, not for starting Python: wait for the child to say it is ready.
            ready = select.select([self._proc.stdout.fileno()], [], [], STARTUP_TIMEOUT_S)[0]
            if not ready or _read_frame(self._proc.stdout) != b"ready":
                self._kill()
                raise RenderFailed(f"the renderer process did not start within {STARTUP_TIMEOUT_S:g}s")
            self._ready = True
        return self._proc

    def _spawn(self) -> None:
        # Templates run in a sandbox that cannot reach os.environ; the process holding them gets no
        # DAGLINE_* (database URL, tokens) nor credential variables all the same (ADR 0040).
        env = {name: value for name, value in os.environ.items() if not is_reserved(name)}
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "dagline.scheduler.renderer"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True, bufsize=0, env=env)
        self._ready = False
        self.spawns += 1

    def _read_answer(self, proc: subprocess.Popen) -> list | None:
        """The next answer, or None when the time budget passed (or the child died)."""
        deadline = time.monotonic() + self.time_budget_s
        fd = proc.stdout.fileno()
        while True:
            if self.should_stop():
                self._kill()
                raise RenderInterrupted("the replica is stopping")
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            readable, _, _ = select.select([fd], [], [], min(left, 0.1))
            if readable:  # a frame has begun: the rest follows at once (the child writes it whole)
                body = _read_frame(proc.stdout)
                return None if body is None else json.loads(body)

    def _kill(self) -> None:
        if self._proc is not None:
            try:
                self._proc.kill()
                self._proc.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                pass
            for stream in (self._proc.stdin, self._proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
            self._proc = None
            self._ready = False


def _write_frame(stream, body: bytes) -> None:
    stream.write(_HEADER.pack(len(body)) + body)
    stream.flush()


def _read_exactly(stream, size: int) -> bytes | None:
    """`size` bytes from an unbuffered stream (reads may return less), or None at EOF."""
    parts, left = [], size
    while left:
        chunk = stream.read(left)
        if not chunk:
            return None
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def _read_frame(stream) -> bytes | None:
    header = _read_exactly(stream, _HEADER.size)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    return _read_exactly(stream, size)


def _serve() -> None:
    """The child: render requests from stdin until EOF, one answer per template."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    except (ImportError, ValueError, OSError):  # pragma: no cover - not on this platform
        pass
    stdin, stdout = sys.stdin.buffer.raw, sys.stdout.buffer
    _write_frame(stdout, b"ready")
    while True:
        body = _read_frame(stdin)
        if body is None:
            return
        templates, context = pickle.loads(body)  # noqa: S301 - from the replica that started this process
        for _where, text in templates:
            try:
                answer = ["ok", _where, render(text, context)]
            except ValueError as exc:
                answer = ["error", _where, str(exc)]
            except MemoryError:
                answer = ["error", _where, f"template {text[:80]!r} ran out of memory"]
            _write_frame(stdout, json.dumps(answer).encode())


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    _serve()
