"""The publisher lease: one instance per (node, driver) publishes ResourceSlices at a time.

During a rolling update the old and the new pod run side by side; both
publishing would make each treat the other's writes as foreign and rewrite the
slices in a loop. The lease is a non-blocking `flock` on a file in the plugin
directory shared by both pods: the holder publishes; the other polls and takes
over when the holder's process exits (the kernel drops the lock with it).
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from pathlib import Path
from typing import Protocol

from dra_driver.common import file_modes
from dra_driver.common.logs import fields
from dra_driver.backend.interface import HealthEvent

log = logging.getLogger(__name__)

POLL_INTERVAL_S = 1.0


class Publisher(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...

    def set_device_health(self, event: HealthEvent) -> None: ...


class LeasedPublisher:
    """Starts the wrapped publisher only while holding the lease file; health events always pass through."""

    def __init__(self, inner: Publisher, lease: Path, driver: str, poll_interval: float = POLL_INTERVAL_S) -> None:
        self.inner = inner
        self.lease = lease
        self._driver = driver
        self._poll = poll_interval
        self._fd: int | None = None
        self._stop = threading.Event()
        self._waiter: threading.Thread | None = None
        self._guard = threading.Lock()
        self.publishing = threading.Event()
        self._inner_started = False

    def start(self) -> None:
        self._stop.clear()
        if self._try_acquire():
            return
        log.info("another instance publishes this driver's slices; waiting for its lease", extra=fields(driver=self._driver, lease=str(self.lease)))
        self._waiter = threading.Thread(target=self._wait_for_lease, name=f"lease-{self._driver}", daemon=True)
        self._waiter.start()

    def _try_acquire(self) -> bool:
        with self._guard:
            if self._stop.is_set():
                return False
            file_modes.make_dirs(self.lease.parent, file_modes.PRIVATE_DIR)
            fd = os.open(self.lease, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return False
            self._fd = fd
            self._inner_started = True  # even if start raises below, it may have written slices: abort withdraws them
            try:
                self.inner.start()
            except BaseException:
                self._release()
                raise
            self.publishing.set()
            log.info("publisher lease taken; publishing slices", extra=fields(driver=self._driver))
            return True

    def _wait_for_lease(self) -> None:
        while not self._stop.wait(self._poll):
            try:
                if self._try_acquire():
                    return
            except Exception as exc:
                log.error("starting the publisher after taking the lease failed", extra=fields(driver=self._driver, error=str(exc)))

    def stop(self) -> None:
        """Stop publishing (slices stay for the next holder) and give the lease back."""
        self._stop.set()
        if self._waiter is not None:
            self._waiter.join(timeout=5)
            self._waiter = None
        with self._guard:
            if self.publishing.is_set():
                self.inner.stop()
            self._release()

    def abort(self) -> None:
        """Stop after a failed start: the slices this instance published are withdrawn (it is not registered)."""
        was_publishing = self.publishing.is_set() or self._inner_started
        self._stop.set()
        if self._waiter is not None:
            self._waiter.join(timeout=5)
            self._waiter = None
        with self._guard:
            if was_publishing:
                self.inner.stop()
                withdraw = getattr(self.inner, "withdraw", None)
                if withdraw is not None:
                    count = withdraw()
                    log.warning("withdrew slices of a driver that failed to start", extra=fields(driver=self._driver, slices=count))
            self._release()

    def _release(self) -> None:
        self.publishing.clear()
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def set_device_health(self, event: HealthEvent) -> None:
        self.inner.set_device_health(event)

    def slices_published(self) -> bool:
        """This instance holds the lease and its publisher has reconciled once (a publisher without a `synced`
        signal counts once started), or another instance holds the lease and publishes (readiness)."""
        if self.publishing.is_set():
            synced = getattr(self.inner, "synced", None)
            return bool(synced()) if callable(synced) else True
        return self._waiter is not None and not self._stop.is_set()
