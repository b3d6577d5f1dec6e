"""The one error type of the input layer: which input, where in it, what is wrong, how to fix it."""

from __future__ import annotations

from dra_driver.common.errors import UsageError


class InputError(UsageError):
    """Input refused before or while it is parsed; renders as one line `source:line: message`.

    `line` is the line of the file (1-based, counting from the start of the whole
    stream, not of one YAML document); `offset` the byte offset where it is known.
    """

    def __init__(self, source: str, message: str, *, line: int | None = None, offset: int | None = None) -> None:
        self.source = source
        self.message = " ".join(message.split())  # one line, whatever a parser put in it
        self.line = line
        self.offset = offset
        where = f"{source}:{line}" if line is not None else source
        super().__init__(f"{where}: {self.message}")
