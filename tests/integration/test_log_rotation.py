"""The local executor's logs are rotated per try by the task wrapper (copy-truncate past a size, at most
N files per try), and `log_files` gives them back oldest first, as `dagline tasks logs` prints them."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from dagline.errors import InvalidInput
from dagline.executors.try_files import log_files, log_limits
from dagline.executors.wrapper import rotate_log


def test_rotation_keeps_at_most_n_files_per_try_oldest_first(tmp_path):
    log = tmp_path / "try-1.log"
    for generation in range(1, 6):
        log.write_text(f"generation {generation}\n")
        rotate_log(str(log), keep=3)
    log.write_text("current\n")
    assert [p.name for p in log_files(log)] == ["try-1.log.2", "try-1.log.1", "try-1.log"]
    assert [p.read_text() for p in log_files(log)] == ["generation 4\n", "generation 5\n", "current\n"]
    assert not (tmp_path / "try-1.log.3").exists() and not (tmp_path / "try-1.log.10").exists()
    assert log_files(tmp_path / "try-2.log") == []


def test_the_wrapper_rotates_a_growing_log_and_the_job_keeps_writing(tmp_path):
    log = tmp_path / "try-1.log"
    job = textwrap.dedent("""\
        import sys, time
        for burst in range(3):
            sys.stdout.write("".join("burst %d line %03d %s\\n" % (burst, i, "x" * 60) for i in range(40)))
            sys.stdout.flush()
            time.sleep(0.6)  # the job pauses: the wrapper looks at the log every 0.2 s meanwhile
    """)
    with open(log, "ab") as out:
        done = subprocess.run(
            [sys.executable, "-m", "dagline.executors.wrapper", "--exit-file", str(tmp_path / "try-1.log.exit"),
             "--log-file", str(log), "--log-max-bytes", "2000", "--log-files", "3", "--", sys.executable, "-c", job],
            stdout=out, stderr=subprocess.STDOUT, timeout=60)
    assert done.returncode == 0
    files = log_files(log)
    assert [p.name for p in files] == ["try-1.log.2", "try-1.log.1", "try-1.log"]
    text = "".join(p.read_text() for p in files)
    # the oldest burst was rotated away; the last two are whole, in order, followed by the wrapper's footer
    assert "burst 0 " not in text
    assert text.index("burst 1 line 000") < text.index("burst 1 line 039") < text.index("burst 2 line 000")
    assert text.count("burst 1 line") == 40 and text.count("burst 2 line") == 40
    assert "[dagline] exit code 0" in files[-1].read_text()
    assert all(p.stat().st_size < 2000 + 40 * 80 for p in files)  # one burst over the limit at most


def test_log_limits_come_from_the_environment_and_bad_values_name_the_variable():
    assert log_limits({}) == (10 * 1024 * 1024, 5)
    assert log_limits({"DAGLINE_LOG_MAX_BYTES": "4096", "DAGLINE_LOG_FILES": "2"}) == (4096, 2)
    with pytest.raises(InvalidInput, match="DAGLINE_LOG_FILES"):
        log_limits({"DAGLINE_LOG_FILES": "0"})
    with pytest.raises(InvalidInput, match="DAGLINE_LOG_MAX_BYTES"):
        log_limits({"DAGLINE_LOG_MAX_BYTES": "ten"})


def test_following_a_log_across_a_rotation_loses_nothing(tmp_path):
    from dagline.executors.folder_log import LogTail

    log = tmp_path / "try-1.log"
    log.write_text("one\n")
    tail = LogTail(log)
    assert tail.read() == b"one\n"
    with open(log, "a") as f:
        f.write("two\n")  # written after the last read, then rotated away before the next one
    rotate_log(str(log), keep=3)
    with open(log, "a") as f:
        f.write("three\n")
    assert tail.read() == b"two\nthree\n"
    assert tail.read() == b""
