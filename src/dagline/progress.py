"""The progress bar of `dagline backfill run`: redrawn in place on a terminal, a line per change otherwise."""

from __future__ import annotations

from dagline.states import TIState


class ProgressBar:
    def __init__(self, stream, width: int = 30):
        self.stream = stream
        self.width = width
        self.tty = hasattr(stream, "isatty") and stream.isatty()
        self._last = None

    def _line(self, s: dict, tasks: dict[str, int]) -> str:
        done = s["succeeded"] + s["failed"]
        tasks_total = sum(tasks.values())
        tasks_done = sum(n for state, n in tasks.items() if state in TIState.FINISHED)
        # the bar moves with tasks, so a long run does not look stuck
        fraction = tasks_done / tasks_total if tasks_total else done / max(s["total"], 1)
        filled = int(self.width * fraction)
        bar = "#" * filled + "-" * (self.width - filled)
        running = tasks.get("running", 0) + tasks.get("queued", 0)
        return (f"backfill {s['id']} [{bar}] runs {done}/{s['total']} (failed {s['failed']})  "
                f"tasks {tasks_done}/{tasks_total} (running {running})")

    def update(self, status: dict, tasks: dict[str, int] | None = None) -> None:
        line = self._line(status, tasks or {})
        if line == self._last:
            return
        self._last = line
        if self.tty:
            self.stream.write("\r" + line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def finish(self, status: dict, tasks: dict[str, int] | None = None) -> None:
        self.update(status, tasks)
        if self.tty:
            self.stream.write("\n")
        self.stream.write(f"backfill {status['id']}: {status['state']}\n")
        self.stream.flush()
