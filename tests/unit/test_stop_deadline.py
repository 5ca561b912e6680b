"""`StopDeadline`: the timer that ends a replica still busy when its stop grace period is over."""

from __future__ import annotations

import logging
import threading

import pytest

from dagline.scheduler.stop_deadline import EXIT_CODE, StopDeadline

pytestmark = pytest.mark.timeout(30)


def test_past_the_grace_period_it_says_why_and_ends_the_process(caplog):
    ended = threading.Event()
    codes = []

    def end_process(code):
        codes.append(code)
        ended.set()

    deadline = StopDeadline(0.01, "the scheduler replica", end_process=end_process)
    with caplog.at_level(logging.ERROR, logger="dagline.scheduler.stop_deadline"):
        deadline.start()
        deadline.start()  # a second SIGTERM: still one deadline
        assert ended.wait(20), "the deadline never ended the process"
        deadline._timer.join(20)
    assert codes == [EXIT_CODE] == [143]
    assert "the scheduler replica did not stop within 0.01 s of the stop request" in caplog.text


def test_a_replica_that_stopped_in_time_is_left_alone():
    codes = []
    deadline = StopDeadline(3600, end_process=codes.append)
    deadline.cancel()  # before any request: nothing to cancel
    deadline.start()
    deadline.cancel()
    deadline._timer.join(20)
    assert not deadline._timer.is_alive() and codes == []
