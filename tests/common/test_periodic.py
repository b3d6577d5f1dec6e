"""Periodic (dra_driver/common/periodic.py): a step that raises is logged and the next one runs; stop ends the thread."""

from __future__ import annotations

import logging
import threading

import pytest

from dra_driver.common.periodic import Periodic


def test_a_failing_step_is_logged_and_the_next_one_runs(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[int] = []
    again = threading.Event()

    def step() -> None:
        calls.append(len(calls))
        if len(calls) == 1:
            raise RuntimeError("boom")
        again.set()

    periodic = Periodic("test-periodic", step, 0.01, logging.getLogger("test.periodic"), "the step failed")
    with caplog.at_level(logging.ERROR, logger="test.periodic"):
        periodic.start()
        assert periodic.running
        assert again.wait(10), "no step after the one that raised"
        periodic.stop()
    assert not periodic.running and periodic.stopping
    assert [record.getMessage() for record in caplog.records] == ["the step failed"]


def test_stop_ends_a_long_wait_at_once() -> None:
    ran = threading.Event()
    periodic = Periodic("test-periodic", ran.set, 3600, logging.getLogger("test.periodic"), "the step failed")
    periodic.start()
    assert ran.wait(10)
    thread = periodic._thread
    periodic.stop(timeout=10)
    assert thread is not None and not thread.is_alive()  # stopped inside the hour's wait, not after it
