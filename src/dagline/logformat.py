"""How dagline's processes write their own log: plain text (the default) or one JSON object per line.

`configure("json")` (`dagline scheduler --log-format json`, the operator's `DAGLINE_LOG_FORMAT=json`)
puts a `JsonFormatter` on the root handlers and turns on the decision log (`dagline.decisions`, see
`dagline.db.decisions`): one line per decision worth knowing (a run created, started or finished, a
task instance queued or ended, a timeout, a zombie, an adoption, a replica declared dead, a missed
deadline), with the decision's fields as keys. Every line has `ts` (UTC ISO-8601), `level`, `logger`
and `message`; a record's `decision` and `fields` extras become keys of their own.
"""

from __future__ import annotations

import datetime as dt
import json
import logging

FORMATS = ("text", "json")
DECISIONS = "dagline.decisions"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        decision = getattr(record, "decision", None)
        if decision is not None:
            line["decision"] = decision
        for key, value in (getattr(record, "fields", None) or {}).items():
            line.setdefault(key, value)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure(log_format: str) -> None:
    """Switch this process's log to `log_format` ("text" or "json")."""
    if log_format not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, got {log_format!r}")
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(level=logging.WARNING)
    if log_format == "json":
        for handler in root.handlers:
            handler.setFormatter(JsonFormatter())
        logging.getLogger(DECISIONS).setLevel(logging.INFO)
