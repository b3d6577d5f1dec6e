"""The watch stream's line reader: lines split wherever the chunks break, and a stream that never sends a newline
ends the watch at the bound instead of filling the daemon's memory (a real chunked HTTP stream over a socket)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from dra_driver.kube.client import make_json_api
from dra_driver.kube.watch_lines import MAX_LINE_BYTES, WatchLineTooLong, watch_lines


def test_lines_are_split_across_chunks_and_utf8_survives_a_split() -> None:
    text = '{"type":"ADDED","name":"é✓"}\n\n{"type":"BOOKMARK"}\npartial'.encode()
    for size in (1, 2, 3, 7, len(text)):
        chunks = [text[i : i + size] for i in range(0, len(text), size)]
        assert list(watch_lines(chunks)) == ['{"type":"ADDED","name":"é✓"}', "", '{"type":"BOOKMARK"}']
    assert list(watch_lines([b"bad \xff byte\n"])) == ["bad \ufffd byte"]  # replaced, as kubernetes' reader does


def test_a_line_over_the_bound_ends_the_stream_after_holding_at_most_the_bound_and_a_chunk() -> None:
    held: list[int] = []

    def endless() -> Iterator[bytes]:
        yield b'{"type":"ADDED"}\n'
        while True:
            held.append(1)
            yield b"x" * 1000

    lines = watch_lines(endless(), limit=10_000)
    assert next(lines) == '{"type":"ADDED"}'
    with pytest.raises(WatchLineTooLong, match="longer than 10000 bytes without a newline"):
        next(lines)
    assert len(held) == 11  # stopped at the first chunk past the bound


def _serve_one_endless_line(listener: socket.socket) -> None:
    """An HTTP server that answers the watch with 200, chunked, and a line with no end."""
    connection, _ = listener.accept()
    with connection:
        head = b""
        while b"\r\n\r\n" not in head:
            head += connection.recv(4096)
        connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b"y" * 2**20
        try:
            for _ in range(MAX_LINE_BYTES // len(chunk) + 8):
                connection.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        except OSError:  # the client hung up: what the reader should do
            pass


def test_a_server_sending_an_endless_line_ends_the_watch_with_a_clear_error() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        server = threading.Thread(target=_serve_one_endless_line, args=(listener,), daemon=True)
        server.start()
        stream = make_json_api(f"http://127.0.0.1:{listener.getsockname()[1]}").watch("/apis/resource.k8s.io/v1/resourceslices", {})
        with pytest.raises(WatchLineTooLong, match=f"longer than {MAX_LINE_BYTES} bytes"):
            list(stream)
        server.join(timeout=30)
        assert not server.is_alive()
