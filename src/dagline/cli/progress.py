"""The progress bar of `dagline backfill run`: redrawn in place on a terminal, a line per change otherwise."""

from __future__ import annotations

import datetime as dt

from dagline.domain.states import TIState


def in_words(seconds: float) -> str:
    """A wait as people say it: `4m`, `1h 5m`, `12s`."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m" + (f" {secs}s" if secs and minutes < 10 else "")
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h" + (f" {minutes}m" if minutes else "")
    return f"{hours // 24}d" + (f" {hours % 24}h" if hours % 24 else "")


def retry_words(retry, now: dt.datetime) -> str:
    """`retrying extract in 4m` for a task instance waiting for its retry time."""
    at = retry.next_retry_at or now
    return f"retrying {retry.task_id} in {in_words((at - now).total_seconds())}" if at > now else \
        f"retrying {retry.task_id} now"


class ProgressBar:
    def __init__(self, stream, width: int = 30):
        self.stream = stream
        self.width = width
        self.tty = hasattr(stream, "isatty") and stream.isatty()
        self._last = None

    def _line(self, s: dict, tasks: dict[str, int], note: str | None = None) -> str:
        done = s["succeeded"] + s["failed"]
        tasks_total = sum(tasks.values())
        tasks_done = sum(n for state, n in tasks.items() if state in TIState.FINISHED)
        # the bar moves with tasks, so a long run does not look stuck
        fraction = tasks_done / tasks_total if tasks_total else done / max(s["total"], 1)
        filled = int(self.width * fraction)
        bar = "#" * filled + "-" * (self.width - filled)
        running = tasks.get(TIState.RUNNING, 0) + tasks.get(TIState.QUEUED, 0)
        line = (f"backfill {s['id']} [{bar}] runs {done}/{s['total']} (failed {s['failed']})  "
                f"tasks {tasks_done}/{tasks_total} (running {running})")
        return f"{line}  {note}" if note else line

    def update(self, status: dict, tasks: dict[str, int] | None = None, note: str | None = None) -> None:
        """Redraw; `note` says what the backfill waits for (e.g. `retrying extract in 4m`)."""
        line = self._line(status, tasks or {}, note)
        if line == self._last:
            return
        self._last = line
        if self.tty:
            self.stream.write("\r" + line + "\x1b[K")  # erase what a longer line left
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def finish(self, status: dict, tasks: dict[str, int] | None = None) -> None:
        self.update(status, tasks)
        if self.tty:
            self.stream.write("\n")
        self.stream.write(f"backfill {status['id']}: {status['state']}\n")
        self.stream.flush()
