"""Is this daemon ready to take over the node? The signal behind the DaemonSet's readinessProbe.

Ready means, for every driver that runs:

1. **registered**: the kubelet said so (NotifyRegistrationStatus with registered=true) and the
   registration socket it dialled is still there; a removed socket means the kubelet has
   deregistered this instance, a registered=false means it refused it;
2. **DRA service answering**: the DRA socket accepts a connection and opens it as a gRPC server does (its
   HTTP/2 SETTINGS frame);
3. **slices published**: this instance's publisher has reconciled the slices at least once, or
   another instance on the node holds the publisher lease and publishes them (the old pod during a
   rolling update; the new one takes the lease over when the old one exits).

4. **not standing down**: no same-name driver on the node and the instance lock still held (the daemon
   refuses every new claim while either lasts).

A monitor thread checks every `interval` seconds and writes the result to
`<state-dir>/ready/<pod-uid>.json` (pod UIDs keep two pods on a node apart); `dra-driver ready`
reads that file for the exec probe, which needs no port (a host-network surge pod may not have
its metrics port yet). The file alone cannot prove a daemon is alive (a killed daemon leaves it, a clock
step moves its wall-clock time), so the probe trusts it only with two proofs read now:
- a live process holds the flock on `<state-dir>/ready/<pod-uid>.lock` (taken by the monitor for the
  daemon's life; the kernel drops it when the process dies, so a killed daemon is unready at once);
- the report's `heartbeat` (CLOCK_MONOTONIC, one clock for every process of the machine, never stepped) is a
  finite number at most the probe's limit in the past and not in the future: a hung monitor stops renewing it.
The wall-clock `checkedAt` is only for people. When the registration socket disappears the monitor serves it
again, so the kubelet registers the instance anew instead of it staying unready until a restart.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import math
import os
import socket
import stat
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeGuard

from dra_driver.common import json_text, node_file
from dra_driver.common.atomic_file import replace_file
from dra_driver.common.logs import fields
from dra_driver.common.periodic import Periodic
from dra_driver.common import file_modes

if TYPE_CHECKING:
    from dra_driver.node.plugin.driver import DriverPlugin

log = logging.getLogger(__name__)

CHECK_INTERVAL_S = 2.0
DIAL_TIMEOUT_S = 1.0
# The probe's default limit on the status file's age: several missed checks, not one slow one.
MAX_AGE_S = 15.0
STATUS_DIR = "ready"


MAX_STATUS_BYTES = 1 << 20  # a status is a few hundred bytes; a problem list never nears this


@dataclass(frozen=True)
class ReadinessReport:
    ready: bool
    problems: dict[str, list[str]] = field(default_factory=dict)  # driver (or "daemon") -> what is missing
    checked_at: float = 0.0  # wall clock, seconds since the epoch: for people only
    heartbeat: float | None = None  # time.monotonic() of the check: what freshness is judged by

    def summary(self) -> str:
        if self.ready:
            return "ready"
        return "; ".join(f"{who}: {', '.join(what)}" for who, what in sorted(self.problems.items()))

    def to_json(self) -> str:
        data = {"ready": self.ready, "problems": self.problems, "checkedAt": self.checked_at, "heartbeat": self.heartbeat}
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> ReadinessReport:
        data = json_text.loads(text)
        if not isinstance(data, dict) or not isinstance(data.get("ready"), bool):
            raise ValueError("not a readiness status (ready, heartbeat)")
        problems = data.get("problems") or {}
        if not isinstance(problems, dict):
            raise ValueError("problems is not an object")
        checked_at, heartbeat = data.get("checkedAt"), data.get("heartbeat")
        return cls(
            data["ready"],
            {str(k): [str(p) for p in v] for k, v in problems.items() if isinstance(v, list)},
            float(checked_at) if _is_number(checked_at) else 0.0,
            float(heartbeat) if _is_number(heartbeat) else None,
        )

    def age_problem(self, max_age: float, now: float) -> str | None:
        """Why this report is not fresh at monotonic time `now`, or None: its heartbeat must be a finite number
        at most `max_age` seconds in the past (a future one was not written by this machine's clock)."""
        if self.heartbeat is None or not math.isfinite(self.heartbeat):
            return f"readiness status has no valid heartbeat ({self.heartbeat!r}): not written by a running daemon"
        age = now - self.heartbeat
        if age < 0:
            return f"readiness status heartbeat is {-age:.3g} s in the future: not written by a daemon on this machine"
        if age > max_age:
            return f"readiness status is {age:.0f} s old (limit {max_age:.0f} s): the daemon stopped checking"
        return None


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def status_path(state_dir: Path, pod_uid: str | None) -> Path:
    """Where the daemon of this pod writes its readiness (the pod UID was checked against the UID rules)."""
    return state_dir / STATUS_DIR / f"{pod_uid or 'no-pod-uid'}.json"


def liveness_path(status: Path) -> Path:
    """The lock file a running daemon holds beside its status file."""
    return status.with_suffix(".lock")


def read_status(path: Path, max_age: float, now: float | None = None) -> ReadinessReport:
    """The daemon's last report, or a not-ready one saying why it cannot be trusted: missing, damaged, no live
    daemon holding its lock, a heartbeat stale, in the future or not a number. `now` is time.monotonic()."""
    now = time.monotonic() if now is None else now
    try:
        report = ReadinessReport.from_json(node_file.read_regular(path, MAX_STATUS_BYTES))
    except FileNotFoundError:
        return _unready(f"no readiness status at {path} (not started yet, or another --state-dir/--pod-uid)")
    except (OSError, ValueError) as exc:
        return _unready(f"readiness status {path} unreadable: {exc}")
    if not report.ready:
        return report  # its reasons say more than any check below
    problem = daemon_alive_problem(liveness_path(path)) or report.age_problem(max_age, now)
    return _unready(problem, report.checked_at) if problem is not None else report


def _unready(problem: str, checked_at: float = 0.0) -> ReadinessReport:
    return ReadinessReport(False, {"daemon": [problem]}, checked_at)


def daemon_alive_problem(lock: Path) -> str | None:
    """None when a live process holds the flock on `lock` (never blocks, never follows a link), else why not."""
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return f"no daemon is running: {lock} is missing"
        return f"cannot open {lock}: {exc.strerror or exc}"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return f"{lock} is not a regular file: remove it and restart the driver"
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return None  # held: the daemon lives
        return f"no daemon is running: nobody holds {lock}"
    finally:
        os.close(fd)


def _socket_present(path: Path) -> bool:
    try:
        return stat.S_ISSOCK(path.lstat().st_mode)
    except OSError:
        return False


# What a gRPC client sends first (RFC 9113 3.4): the connection preface and an empty SETTINGS frame.
_HTTP2_CLIENT_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
_HTTP2_FRAME_HEADER_BYTES = 9
_HTTP2_SETTINGS = 0x4
_HTTP2_ACK = 0x1


def _dials(path: Path, timeout: float) -> bool:
    """Whether a gRPC server answers on the unix socket `path` within `timeout`: it accepts a connection and its first
    frame is HTTP/2 SETTINGS, the server's connection preface, which is what a gRPC channel waits for to be ready.

    Done on a plain socket: a gRPC channel per check (every 2 s) started and stopped threads in the daemon and kept
    one of them polling for ~0.2 s, beside the claim calls it shares the CPU with (docs/performance.md)."""
    deadline = time.monotonic() + timeout
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(path))
            sock.sendall(_HTTP2_CLIENT_PREFACE)
            header = b""
            while len(header) < _HTTP2_FRAME_HEADER_BYTES:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                sock.settimeout(left)
                chunk = sock.recv(_HTTP2_FRAME_HEADER_BYTES - len(header))
                if not chunk:  # closed without a preface: not a gRPC server
                    return False
                header += chunk
    except OSError:  # refused, no listener, timed out, path too long for a unix socket
        return False
    return header[3] == _HTTP2_SETTINGS and not header[4] & _HTTP2_ACK


def driver_problems(plugin: DriverPlugin, api_connected: bool, dial_timeout: float = DIAL_TIMEOUT_S) -> list[str]:
    """What keeps one driver from being ready; empty when it is."""
    problems: list[str] = []
    status = plugin.registration.status
    if not _socket_present(plugin.paths.registration_socket):
        problems.append(f"registration socket {plugin.paths.registration_socket} is gone (the kubelet deregistered this instance)")
    elif status is None:
        problems.append("not registered with the kubelet yet")
    elif not status.registered:
        problems.append(f"the kubelet refused the registration: {status.error}")
    if not _socket_present(plugin.paths.dra_socket) or not _dials(plugin.paths.dra_socket, dial_timeout):
        problems.append(f"DRA service on {plugin.paths.dra_socket} does not answer")
    recovery = plugin.service.recovery_problem()
    if recovery is not None:  # the socket answers, but a claim call would wait or be refused
        problems.append(recovery)
    if not api_connected:
        problems.append("API client not built yet: slices not published")
    elif plugin.publisher is not None and not plugin.publisher.slices_published():
        problems.append("slices not published yet")
    return problems


class ReadinessMonitor:
    """Checks the running drivers every `interval` seconds, writes the status file, restores a lost registration socket."""

    def __init__(
        self,
        plugins: Callable[[], Mapping[str, DriverPlugin]],
        api_connected: Callable[[], bool],
        status_file: Path | None,
        interval: float = CHECK_INTERVAL_S,
        stand_down: Callable[[str], str | None] | None = None,
    ) -> None:
        self._plugins = plugins
        self._api_connected = api_connected
        self.status_file = status_file
        self._stand_down = stand_down or (lambda driver: None)
        self._liveness_fd: int | None = None  # the flock on liveness_path(status_file), held while running
        # A check must never end the loop: a stale file turns the probe red anyway.
        self._periodic = Periodic("readiness", self.check_and_record, interval, log, "readiness check failed")
        self._last: ReadinessReport | None = None
        self._lock = threading.Lock()

    def check(self) -> ReadinessReport:
        plugins = dict(self._plugins())
        connected = self._api_connected()
        problems = {driver: found for driver, plugin in plugins.items() if (found := self._problems(driver, plugin, connected))}
        if not plugins:
            problems["daemon"] = ["no driver is running"]
        return ReadinessReport(not problems, problems, time.time(), time.monotonic())

    def _problems(self, driver: str, plugin: DriverPlugin, connected: bool) -> list[str]:
        reason = self._stand_down(driver)
        return driver_problems(plugin, connected) + ([f"standing down: {reason}"] if reason is not None else [])

    def check_and_record(self) -> ReadinessReport:
        """One check: log a change, write the status file, serve a registration socket that was removed."""
        report = self.check()
        with self._lock:
            previous, self._last = self._last, report
        if previous is None or previous.ready != report.ready or previous.problems.keys() != report.problems.keys():
            if report.ready:
                log.info("ready: registered with the kubelet, DRA service answering, slices published")
            elif previous is not None and previous.ready:
                log.warning("no longer ready", extra=fields(problems=report.summary()))
            else:
                log.info("not ready yet", extra=fields(problems=report.summary()))
        self._write(report)
        self._restore_lost_registrations()
        return report

    def _restore_lost_registrations(self) -> None:
        for driver, plugin in dict(self._plugins()).items():
            if self._periodic.stopping:
                return
            if plugin.serving and not _socket_present(plugin.paths.registration_socket):
                log.warning("registration socket removed; serving it again so the kubelet registers this instance",
                            extra=fields(driver=driver, socket=str(plugin.paths.registration_socket)))  # fmt: skip
                try:
                    plugin.serve_registration()
                except Exception as exc:
                    log.error("cannot serve the registration socket again", extra=fields(driver=driver, error=str(exc)))

    def _write(self, report: ReadinessReport) -> None:
        if self.status_file is None:
            return
        try:
            file_modes.own_dir(self.status_file.parent, file_modes.STATUS_DIR)  # narrowed if found wider: nobody plants a status
            if not self._hold_liveness():
                return
            replace_file(self.status_file, report.to_json().encode(), durable=False, mode=file_modes.STATUS_FILE)
        except (OSError, file_modes.PermissionProblem) as exc:
            from dra_driver.node.plugin.storage_errors import cause  # here: `dra-driver ready` imports this module

            detail = cause(exc) if isinstance(exc, OSError) else str(exc)
            log.error("cannot write the readiness status; the readiness probe will fail", extra=fields(path=str(self.status_file), error=detail))

    def _hold_liveness(self) -> bool:
        """Hold the flock that proves to `dra-driver ready` that this daemon lives; False (status not written) while
        another live daemon of the same pod holds it, or a probe checks it this instant (taken at the next check)."""
        if self._liveness_fd is not None:
            return True
        assert self.status_file is not None
        from dra_driver.node.plugin.locks import flock_or_close, open_lock_file

        fd = flock_or_close(open_lock_file(liveness_path(self.status_file)), fcntl.LOCK_EX | fcntl.LOCK_NB)
        if fd is None:
            log.warning("readiness lock busy (another daemon of this pod, or a probe); status not written", extra=fields(path=str(self.status_file)))
            return False
        self._liveness_fd = fd
        return True

    @property
    def last(self) -> ReadinessReport | None:
        with self._lock:
            return self._last

    def start(self) -> ReadinessMonitor:
        self._periodic.start()
        return self

    def stop(self) -> None:
        """Stop checking and remove the status file (only one this daemon wrote): a stopping daemon is not ready."""
        self._periodic.stop()
        if self.status_file is not None and self._liveness_fd is not None:
            try:
                os.unlink(self.status_file)
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("cannot remove the readiness status", extra=fields(path=str(self.status_file), error=str(exc)))
            os.close(self._liveness_fd)
            self._liveness_fd = None
