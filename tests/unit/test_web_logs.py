"""The run page's window on a try's log (`dagline.web.logs.read_chunk`), whatever reader the try's executor has:
the end of a large log at first, then what was added past an offset; a reason when there is no log."""

from __future__ import annotations

from dagline.executors.base import TaskKey
from dagline.executors.folder_log import FolderLog
from dagline.executors.try_logs import NoLog, StoredTry
from dagline.web.logs import FIRST_VIEW, MAX_CHUNK, read_chunk

LOG = b"".join(b"line %06d\n" % n for n in range(150_000))  # 1.5 MB


class StreamedLog:
    """A log whose size only reading it tells (as a driver pod's)."""

    what = "the log"

    def __init__(self, data: bytes | None):
        self.data = data

    def read(self, skip: int = 0):
        if self.data is None:
            raise NoLog("the pod is gone")
        return (self.data[i:i + 65536] for i in range(skip, len(self.data), 65536))

    def size(self):
        return None


def test_a_page_first_shows_the_end_of_a_large_log_whether_its_size_is_known_or_not(tmp_path):
    stored = StoredTry(TaskKey("sales", "manual__1", "load", 1), None, str(tmp_path))
    stored.log_path.parent.mkdir(parents=True)
    stored.log_path.write_bytes(LOG)
    for log in (FolderLog(stored), StreamedLog(LOG)):
        first = read_chunk(log, None)
        assert first.exists and first.truncated
        assert first.text.encode() == LOG[-FIRST_VIEW:] and first.offset == len(LOG)
        later = read_chunk(log, len(LOG) - 11)
        assert (later.text, later.offset, later.truncated) == ("line 149999\n"[1:], len(LOG), False)
        part = read_chunk(log, 0)
        assert part.text.encode() == LOG[:MAX_CHUNK] and part.offset == MAX_CHUNK


def test_no_log_is_shown_with_the_readers_reason():
    chunk = read_chunk(StreamedLog(None), 40)
    assert (chunk.exists, chunk.text, chunk.offset, chunk.missing) == (False, "", 40, "the pod is gone")
