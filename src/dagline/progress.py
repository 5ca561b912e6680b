"""The progress bar of `dagline backfill run`: redrawn in place on a terminal, a line per change otherwise."""

from __future__ import annotations


class ProgressBar:
    def __init__(self, stream, width: int = 30):
        self.stream = stream
        self.width = width
        self.tty = hasattr(stream, "isatty") and stream.isatty()
        self._last = None

    def _line(self, s: dict) -> str:
        done = s["succeeded"] + s["failed"]
        total = max(s["total"], 1)
        filled = int(self.width * done / total)
        bar = "#" * filled + "-" * (self.width - filled)
        return (f"backfill {s['id']} [{bar}] {done}/{s['total']} runs  "
                f"success {s['succeeded']}  failed {s['failed']}  running {s['running']}  queued {s['queued']}")

    def update(self, status: dict) -> None:
        line = self._line(status)
        if line == self._last:
            return
        self._last = line
        if self.tty:
            self.stream.write("\r" + line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def finish(self, status: dict) -> None:
        self.update(status)
        if self.tty:
            self.stream.write("\n")
        self.stream.write(f"backfill {status['id']}: {status['state']}\n")
        self.stream.flush()
