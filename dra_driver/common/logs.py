"""Structured logging, quiet by default (warnings only).

Log calls pass context as `extra={"fields": {...}}`; the text format prints
them as key=value pairs, the JSON format as object members.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = getattr(record, "fields", {}) or {}
        pairs = " ".join(f"{key}={json.dumps(value) if isinstance(value, str) and ' ' in value else value}" for key, value in fields.items())
        base = f"{record.levelname.lower()} {record.name}: {record.getMessage()}"
        text = f"{base} {pairs}" if pairs else base
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        payload.update(getattr(record, "fields", {}) or {})
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return json.dumps(payload, default=str)


def configure_logging(verbosity: int = 0, fmt: str = "text") -> None:
    """Route dra_driver logs to stderr; verbosity 0 warnings, 1 info, 2+ debug."""
    level = logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else _TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Third-party libraries stay at warning even when we are verbose.
    for noisy in ("celpy", "kubernetes", "urllib3", "grpc"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # urllib3 warns once per retry of a request ("Retrying (Retry(total=2, ...)) after connection broken by ..."),
    # which our own line about the failed request already says: shown with -vv only.
    logging.getLogger("urllib3").setLevel(logging.WARNING if verbosity >= 2 else logging.ERROR)


def fields(**values: Any) -> dict[str, Any]:
    """Shorthand for `extra=` of a structured log call: log.info("msg", extra=fields(a=1))."""
    return {"fields": values}
