"""A try's log for the run page: read from the log folder the schedulers write to
(`<log folder>/<dag_id>/<run_id>/<task_id>/try-<n>.log`, as `dagline tasks logs`), from a byte offset,
so a page following a running try fetches only what was added. The text is sent as text/plain and
put in the page with `textContent`: a log line holding HTML is shown, never run."""

from __future__ import annotations

import dataclasses
import os

from dagline.executors import resolve_log_folder
from dagline.executors.base import TaskKey
from dagline.executors.try_files import log_path

MAX_CHUNK = 256 * 1024  # bytes sent per fetch; a following page asks again for the rest
FIRST_VIEW = 512 * 1024  # a page shows at most this much of the log's end at first


@dataclasses.dataclass(frozen=True)
class LogChunk:
    text: str
    offset: int       # where the next read starts
    exists: bool
    path: str
    truncated: bool = False


def read_chunk(log_folder: str | None, key: TaskKey, offset: int | None) -> LogChunk:
    """The log from `offset` (None: the last FIRST_VIEW bytes), at most MAX_CHUNK bytes of it."""
    path = log_path(resolve_log_folder(log_folder), key)
    try:
        size = os.path.getsize(path)
    except OSError:
        return LogChunk("", offset or 0, False, str(path))
    truncated = False
    if offset is None:
        offset = max(0, size - FIRST_VIEW)
        truncated = offset > 0
        limit = FIRST_VIEW
    else:
        limit = MAX_CHUNK
    offset = min(max(0, offset), size)
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read(limit)
    cut = _whole_characters(data)  # the next read continues where this one stopped
    return LogChunk(data[:cut].decode("utf-8", errors="replace"), offset + cut, True, str(path), truncated)


def _whole_characters(data: bytes) -> int:
    """How many bytes of `data` end on a whole UTF-8 character (a character cut by the read is left
    for the next one)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # not a continuation byte: the start of the last character
            need = 1 if byte < 0x80 else 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return len(data) if back >= need else len(data) - back
    return len(data)
