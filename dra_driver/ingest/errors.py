"""The one error type of input that cannot be used: which input, where in it, what is wrong, how to fix it."""

from __future__ import annotations

from collections.abc import Sequence

from dra_driver.common.errors import FieldError, UsageError


class InputError(UsageError):
    """Input refused (exit code 2), one line a problem: `where: what is wrong; how to fix it`.

    Raised with the field problems of objects that parsed but cannot be used (explain, template, fleet:
    `InputError(errors)`), or by the input layer for one problem of a file (`InputError.at`): then `source`
    is the file, `line` the line of the file (1-based, counting from the start of the whole stream, not of
    one YAML document) and `offset` the byte offset where they are known.
    """

    def __init__(self, errors: Sequence[FieldError], *, source: str = "", line: int | None = None, offset: int | None = None) -> None:
        self.errors = list(errors)
        self.source = source
        self.line = line
        self.offset = offset
        super().__init__("\n".join(str(e) for e in self.errors))

    @classmethod
    def at(cls, source: str, message: str, *, line: int | None = None, offset: int | None = None) -> InputError:
        """One problem of the file `source`, as one line `source:line: message`."""
        where = f"{source}:{line}" if line is not None else source
        return cls([FieldError(where, " ".join(message.split()))], source=source, line=line, offset=offset)
