"""A step repeated on a daemon thread until stopped: the node's readiness checks and device metrics collections."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from dra_driver.common.logs import fields


class Periodic:
    """`step` on a daemon thread named `name`: at start, then `interval` seconds after each one ends, until `stop`.

    A step that raises is logged as `failure` on the owner's logger and the next one runs anyway: a background
    check must never end its own loop."""

    def __init__(self, name: str, step: Callable[[], object], interval: float, log: logging.Logger, failure: str) -> None:
        self.name = name
        self.interval = interval
        self._step = step
        self._log = log
        self._failure = failure
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None

    @property
    def stopping(self) -> bool:
        """Set by `stop`: a long step checks it to end early."""
        return self._stop.is_set()

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._step()
            except Exception as exc:  # never end the loop
                self._log.error(self._failure, extra=fields(error=repr(exc)))
            self._stop.wait(self.interval)

    def stop(self, timeout: float = 10) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
            self._thread = None
