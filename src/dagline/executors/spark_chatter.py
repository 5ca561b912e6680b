"""Telling Spark's own log apart from a job's output, in a try's log (`dagline dags test` shows the job's).

A try's log holds both what the job prints and what Spark logs through log4j on stderr: a local job that
starts a SparkSession writes a few hundred `yy/MM/dd HH:mm:ss INFO Logger: ...` lines for a handful of its
own. `SparkChatter` recognises Spark's INFO, WARN, DEBUG and TRACE lines (with the Java stack frames and
blank lines that continue them) and the launcher's banners; ERROR lines, Python tracebacks and everything
else are the job's and stay. The log file itself keeps every line (`dagline tasks logs`).
"""

from __future__ import annotations

import re

_LOG4J_LINE = re.compile(r"^\d{2}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} (?P<level>[A-Z]+) \S")
_QUIET_LEVELS = frozenset({"INFO", "WARN", "DEBUG", "TRACE"})
_CONTINUATION = re.compile(  # a Java exception and its stack frames, after the log line they belong to
    r"^\s+at \S|^\s*\.\.\. \d+ more$|^Caused by: |^\s*$|^(?:[a-z_][\w$]*\.)+[\w$]*(?:Exception|Error)\b")
_BANNERS = (
    "Using Spark's default log4j profile:",
    "WARNING: Using incubator modules:",
    "Setting default log level to ",
    "To adjust logging level use sc.setLogLevel(",
)


class SparkChatter:
    """Decides, line by line in the order of the log, whether a line is Spark's own log (`hides`), and
    counts those it hid. One per try's log: a continuation line belongs to the log line before it."""

    def __init__(self) -> None:
        self.hidden = 0
        self._in_spark_entry = False  # the previous line was Spark's (its stack frames continue it)

    def hides(self, line: str) -> bool:
        match = _LOG4J_LINE.match(line)
        if match is not None:
            spark = match.group("level") in _QUIET_LEVELS
        elif self._in_spark_entry and _CONTINUATION.match(line):
            spark = True
        else:
            spark = line.startswith(_BANNERS)
        self._in_spark_entry = spark
        self.hidden += spark
        return spark
