"""The lines of a watch stream, each bounded: the API server writes one JSON event per line.

kubernetes.watch.watch's `iter_resp_lines` does the same splitting, but its module imports pydoc (0.22 MiB that stays
resident in the daemon, docs/performance.md, "Memory over cycles") and it buffers a line without bound: an API server
that is broken, or not one, could make the daemon hold gigabytes waiting for a newline. Here a line longer than
MAX_LINE_BYTES ends the watch with WatchLineTooLong (a ValueError, as an undecodable event is), which the watchers
handle as any failed watch: they re-list and watch again.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

# The API server refuses objects above about 1.5 MiB (etcd's request limit) and a watch event is one object in an
# envelope; its JSON may be a few times the stored size (protobuf in etcd), so 16 MiB leaves room for every legal event.
MAX_LINE_BYTES = 16 * 2**20
READ_BYTES = 64 * 2**10  # what one read takes from the socket at most (a chunk's end returns sooner)


class WatchLineTooLong(ValueError):
    """A watch stream sent more than the bound without a newline."""


def watch_lines(chunks: Iterable[bytes], limit: int = MAX_LINE_BYTES) -> Iterator[str]:
    """The newline-terminated lines of `chunks` (UTF-8, invalid bytes replaced as kubernetes' reader replaces them),
    empty lines included; a trailing partial line is dropped (the stream ended mid-event)."""
    buffer = bytearray()
    for chunk in chunks:
        searched = len(buffer)  # the bytes before have no newline: search only what arrived
        buffer += chunk
        start = 0
        while (end := buffer.find(b"\n", searched)) != -1:
            yield buffer[start:end].decode("utf-8", errors="replace")
            start = searched = end + 1
        del buffer[:start]
        if len(buffer) > limit:
            raise WatchLineTooLong(
                f"a watch event is longer than {limit} bytes without a newline: the API server's stream is broken "
                "(or the server is not a Kubernetes API server); watching again"
            )
