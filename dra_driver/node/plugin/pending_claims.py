"""A claim source that is not there yet: prepares wait for the API client instead of failing.

The daemon serves its sockets before it has built the kubernetes client (that
import alone takes longer than the rest of start-up), so a NodePrepareResources
call can arrive first. It waits here for the real source; if the client cannot
be built, or does not come within the wait, the claim fails with a message
saying why (the kubelet retries it).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from dra_driver.common.errors import DraError

if TYPE_CHECKING:
    from dra_driver.model.resource_v1 import ResourceClaim
    from dra_driver.node.plugin.prepare import ClaimSource

DEFAULT_WAIT_S = 30.0  # well inside the kubelet's 45 s call deadline; the client normally comes in well under 1 s


class ClientNotReady(DraError):
    """The API client this claim needs is not available (yet)."""


class PendingClaims:
    """ClaimSource that forwards to the source given to ready(), waiting for it until then."""

    def __init__(self, wait_s: float = DEFAULT_WAIT_S) -> None:
        self._wait_s = wait_s
        self._settled = threading.Event()
        self._source: ClaimSource | None = None
        self._problem = ""
        self._lock = threading.Lock()

    def ready(self, source: ClaimSource) -> None:
        with self._lock:
            if not self._settled.is_set():
                self._source = source
                self._settled.set()

    def fail(self, problem: str) -> None:
        """Every waiting and later read fails with `problem`; ignored once a source is ready."""
        with self._lock:
            if not self._settled.is_set():
                self._problem = problem
                self._settled.set()

    def get(self, namespace: str, name: str, uid: str = "", deadline: float | None = None) -> ResourceClaim:
        wait = self._wait_s if deadline is None else min(self._wait_s, deadline - time.monotonic())
        if not self._settled.wait(max(0.0, wait)):
            raise ClientNotReady(f"reading ResourceClaim {namespace}/{name}: the API client is not ready after {wait:.0f} s; the kubelet will retry")
        if self._source is None:
            raise ClientNotReady(f"reading ResourceClaim {namespace}/{name}: {self._problem}")
        return self._source.get(namespace, name, uid, deadline=deadline)
