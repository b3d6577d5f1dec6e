"""The daemon's HTTP endpoint: /metrics, /readyz and /livez on one listener, with bounded resources.

One thread serves every connection through a selector, so a connection costs a socket and a few
KiB, never a thread. What keeps it bounded:

- a connection that has not sent a whole request head (8 KiB at most) within `idle_timeout` seconds,
  or does not take its answer within that time, is closed;
- at most `max_connections` are open; a new one beyond that closes the connection that has waited
  longest, so idle connections can delay a scrape by at most one accept, never lock it out;
- one request per connection (`Connection: close`), answered from memory.

Binding is not a start-up condition. During a rolling update with host networking the old pod
still holds the port: the server logs that and tries again every `bind_retry` seconds, so the new
pod starts, registers and becomes ready, and takes the port over once the old one is gone.
"""

from __future__ import annotations

import errno
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from dra_driver.common.logs import fields

log = logging.getLogger(__name__)

MAX_REQUEST_HEAD = 8192
DEFAULT_IDLE_TIMEOUT_S = 10.0
DEFAULT_MAX_CONNECTIONS = 64
DEFAULT_BIND_RETRY_S = 5.0
_TICK_S = 0.5  # how often idle connections are checked and a failed bind is retried at the soonest


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"


Handler = Callable[[], Response]
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 431: "Request Header Fields Too Large",
            500: "Internal Server Error", 503: "Service Unavailable"}  # fmt: skip


@dataclass(frozen=True)
class BindAddress:
    """host:port to listen on; an empty host means every address (0.0.0.0), port 0 means off."""

    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> BindAddress:
        """`HOST:PORT`, `:PORT`, `[IPv6]:PORT`, or `0` (off); ValueError names the problem and the form."""
        text = text.strip()
        if text in ("0", ""):
            return cls("", 0)
        host, sep, port_text = text.rpartition(":")
        if not sep or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
            raise ValueError(f"{text!r} is not HOST:PORT with a port from 0 to 65535 (e.g. 127.0.0.1:8080, :8080 for every address, 0 for off)")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if any(c.isspace() or c in "/[]" for c in host):
            raise ValueError(f"{text!r}: host {host!r} is not an IP address or host name")
        return cls(host, int(port_text))

    @property
    def enabled(self) -> bool:
        return self.port > 0

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


@dataclass
class _Connection:
    sock: socket.socket
    last_progress: float
    head: bytearray = field(default_factory=bytearray)
    out: memoryview | None = None


class HttpEndpoint:
    """Serves GET/HEAD of a fixed set of paths; `start` returns at once, binding in the background if needed."""

    def __init__(
        self,
        address: BindAddress,
        routes: Mapping[str, Handler],
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT_S,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        bind_retry: float | None = None,
    ) -> None:
        self.address = address
        self._routes = dict(routes)
        self._idle_timeout = idle_timeout
        self._max_connections = max_connections
        self._bind_retry = DEFAULT_BIND_RETRY_S if bind_retry is None else bind_retry
        self._stop = threading.Event()
        self._bound = threading.Event()
        self._thread: threading.Thread | None = None
        self._listener: socket.socket | None = None
        self._connections: dict[int, _Connection] = {}
        self.port: int | None = None  # the port bound (the chosen one, or the kernel's for tests binding port 0 elsewhere)
        self.closed_idle = 0  # connections closed for idleness or to make room: for tests and debugging
        self.refused_room = 0
        self._bind_failures = 0

    def start(self) -> HttpEndpoint:
        """Bind now if the address is free (so the endpoint answers once start returns), else keep trying in the thread."""
        self._try_bind()
        self._thread = threading.Thread(target=self._run, name="metrics-http", daemon=True)
        self._thread.start()
        return self

    def wait_bound(self, timeout: float) -> bool:
        return self._bound.wait(timeout)

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    # ---------------------------------------------------------------- the loop

    def _run(self) -> None:
        selector = selectors.DefaultSelector()
        try:
            if not self._bind_until_stopped():
                return
            assert self._listener is not None
            selector.register(self._listener, selectors.EVENT_READ)
            while not self._stop.is_set():
                for key, events in selector.select(_TICK_S):
                    if key.fileobj is self._listener:
                        self._accept(selector)
                    else:
                        self._service(selector, key.fileobj, events)  # type: ignore[arg-type]  # only sockets are registered
                self._close_idle(selector, time.monotonic() - self._idle_timeout)
        except Exception as exc:  # the endpoint must never take the daemon down; metrics are not worth a crash
            log.error("metrics endpoint failed; it is off until the daemon restarts", extra=fields(address=str(self.address), error=repr(exc)))
        finally:
            for conn in list(self._connections.values()):
                self._close(selector, conn)
            if self._listener is not None:
                self._listener.close()
                self._listener = None
            selector.close()

    def _bind_until_stopped(self) -> bool:
        while self._listener is None:
            if self._stop.wait(self._bind_retry):
                return False
            self._try_bind()
        return True

    def _try_bind(self) -> None:
        try:
            self._listener = _listen(self.address)
        except OSError as exc:
            self._bind_failures += 1
            # A busy port is expected for a while (the old pod of a rolling update holds it); anything else is a mistake.
            expected = exc.errno in (errno.EADDRINUSE, errno.EACCES)
            level = (logging.WARNING if expected else logging.ERROR) if self._bind_failures == 1 else logging.DEBUG
            log.log(level, "metrics endpoint cannot bind; the daemon serves on without it and retries",
                    extra=fields(address=str(self.address), error=exc.strerror or str(exc), retry_in=self._bind_retry))  # fmt: skip
            return
        self.port = self._listener.getsockname()[1]
        self._bound.set()
        log.info("serving metrics", extra=fields(address=str(self.address), after_failures=self._bind_failures))

    def _accept(self, selector: selectors.BaseSelector) -> None:
        assert self._listener is not None
        try:
            sock, _peer = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:  # EMFILE and friends: drop the oldest to recover, never spin
            log.warning("metrics endpoint cannot accept", extra=fields(error=exc.strerror or str(exc)))
            self._make_room(selector)
            return
        sock.setblocking(False)
        if len(self._connections) >= self._max_connections:
            self._make_room(selector)
        conn = _Connection(sock, time.monotonic())
        self._connections[sock.fileno()] = conn
        selector.register(sock, selectors.EVENT_READ)

    def _make_room(self, selector: selectors.BaseSelector) -> None:
        if not self._connections:
            return
        oldest = min(self._connections.values(), key=lambda c: c.last_progress)
        self.refused_room += 1
        self._close(selector, oldest)

    def _service(self, selector: selectors.BaseSelector, sock: socket.socket, events: int) -> None:
        conn = self._connections.get(sock.fileno())
        if conn is None:
            return
        try:
            if events & selectors.EVENT_READ and conn.out is None:
                self._read(selector, conn)
            elif events & selectors.EVENT_WRITE and conn.out is not None:
                self._write(selector, conn)
        except OSError:
            self._close(selector, conn)

    def _read(self, selector: selectors.BaseSelector, conn: _Connection) -> None:
        chunk = conn.sock.recv(4096)
        if not chunk:
            self._close(selector, conn)
            return
        conn.last_progress = time.monotonic()
        conn.head += chunk
        end = conn.head.find(b"\r\n\r\n")
        if end < 0:
            if len(conn.head) > MAX_REQUEST_HEAD:
                self._answer(selector, conn, Response(431, b"request head too large\n"), head_only=False)
            return
        self._answer(selector, conn, *self._route(bytes(conn.head[:end])))

    def _route(self, head: bytes) -> tuple[Response, bool]:
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return Response(400, b"bad request line\n"), False
        method, target = parts[0], parts[1].split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            return Response(405, b"only GET and HEAD\n"), False
        handler = self._routes.get(target)
        if handler is None:
            return Response(404, f"not found; paths: {', '.join(sorted(self._routes))}\n".encode()), method == "HEAD"
        try:
            return handler(), method == "HEAD"
        except Exception as exc:
            log.error("metrics endpoint handler failed", extra=fields(path=target, error=repr(exc)))
            return Response(500, b"internal error\n"), method == "HEAD"

    def _answer(self, selector: selectors.BaseSelector, conn: _Connection, response: Response, head_only: bool) -> None:
        reason = _REASONS.get(response.status, "")
        head = (f"HTTP/1.1 {response.status} {reason}\r\nContent-Type: {response.content_type}\r\n"
                f"Content-Length: {len(response.body)}\r\nConnection: close\r\n\r\n").encode("latin-1")  # fmt: skip
        conn.out = memoryview(head if head_only else head + response.body)
        conn.head.clear()
        selector.modify(conn.sock, selectors.EVENT_WRITE)
        self._write(selector, conn)

    def _write(self, selector: selectors.BaseSelector, conn: _Connection) -> None:
        assert conn.out is not None
        try:
            sent = conn.sock.send(conn.out)
        except BlockingIOError:
            return
        if sent:
            conn.last_progress = time.monotonic()
        conn.out = conn.out[sent:]
        if not conn.out:
            self._close(selector, conn)

    def _close_idle(self, selector: selectors.BaseSelector, before: float) -> None:
        for conn in [c for c in self._connections.values() if c.last_progress < before]:
            self.closed_idle += 1
            self._close(selector, conn)

    def _close(self, selector: selectors.BaseSelector, conn: _Connection) -> None:
        self._connections.pop(conn.sock.fileno(), None)
        try:
            selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()


def _listen(address: BindAddress) -> socket.socket:
    host = address.host or "0.0.0.0"
    family, kind, proto, _name, sockaddr = socket.getaddrinfo(host, address.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    try:
        # SO_REUSEADDR (TIME_WAIT after a restart), never SO_REUSEPORT: two pods must not share the port unnoticed.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
        sock.listen(128)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock
