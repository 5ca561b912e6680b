"""A try's log for the run page, read through the log reader of the executor that ran it -- the reader
`dagline tasks logs` uses (`dagline.executors.registry.open_log`): the log folder's files for a local
try (`<log folder>/<dag_id>/<run_id>/<task_id>/try-<n>.log` and its rotated copies), the driver
pod's log for a spark-k8s one. It is read from a byte offset, so a page following a running try
fetches only what was added. The text is sent as text/plain and put in the page with `textContent`:
a log line holding HTML is shown, never run."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from dagline.executors import registry, resolve_log_folder
from dagline.executors.base import TaskKey
from dagline.executors.try_logs import NoLog, StoredTry, TryLog
from dagline.store.tries import TaskTry

MAX_CHUNK = 256 * 1024  # bytes sent per fetch; a following page asks again for the rest
FIRST_VIEW = 512 * 1024  # a page shows at most this much of the log's end at first


@dataclasses.dataclass(frozen=True)
class LogChunk:
    text: str
    offset: int       # where the next read starts
    exists: bool
    missing: str | None = None  # why there is no log (the reader's words), when there is none
    truncated: bool = False


def read_try_chunk(log_folder: str | None, key: TaskKey, ti: TaskTry, offset: int | None) -> LogChunk:
    """`read_chunk` of try `key` of a stored task instance, read as its executor's kind reads it."""
    return read_chunk(registry.open_log(ti.executor, StoredTry(key, ti.external_id, resolve_log_folder(log_folder))),
                      offset)


def read_chunk(log: TryLog, offset: int | None) -> LogChunk:
    """The log from `offset` (None: its last FIRST_VIEW bytes), at most MAX_CHUNK bytes of it."""
    try:
        if offset is None:
            start, data = _end_of(log, FIRST_VIEW)
        else:
            size = log.size()
            start = max(0, offset) if size is None else min(max(0, offset), size)
            data = _take(log.read(start), MAX_CHUNK)
    except NoLog as exc:
        return LogChunk("", offset or 0, False, str(exc))
    cut = _whole_characters(data)  # the next read continues where this one stopped
    return LogChunk(data[:cut].decode("utf-8", errors="replace"), start + cut, True,
                    truncated=offset is None and start > 0)


def _take(chunks: Iterator[bytes], limit: int) -> bytes:
    """The first `limit` bytes of `chunks` (the rest is not read)."""
    data = bytearray()
    try:
        for chunk in chunks:
            data += chunk[:limit - len(data)]
            if len(data) >= limit:
                break
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()  # a file or a connection is released now
    return bytes(data)


def _end_of(log: TryLog, limit: int) -> tuple[int, bytes]:
    """(where they start, the last `limit` bytes of the log): read from there when its size is known,
    else read through, keeping the end."""
    size = log.size()
    if size is not None:
        start = max(0, size - limit)
        return start, _take(log.read(start), limit)
    kept, total = bytearray(), 0
    for chunk in log.read():
        total += len(chunk)
        kept += chunk
        if len(kept) > 2 * limit:
            del kept[:len(kept) - limit]
    kept = kept[-limit:]
    return total - len(kept), bytes(kept)


def _whole_characters(data: bytes) -> int:
    """How many bytes of `data` end on a whole UTF-8 character (a character cut by the read is left
    for the next one)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # not a continuation byte: the start of the last character
            need = 1 if byte < 0x80 else 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return len(data) if back >= need else len(data) - back
    return len(data)
