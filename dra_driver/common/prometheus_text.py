"""The Prometheus text format 0.0.4 of a registry, as prometheus_client.exposition.generate_latest writes it.

The driver's one writer of /metrics (the daemon's and the fleet exporter's): importing prometheus_client.exposition
would bring its HTTP servers with it (dra_driver/common/prometheus.py). Byte for byte what generate_latest writes
(tests/common/test_prometheus_text.py compares them on the daemon's and the exporter's real registries):

- a counter family `x` is written as `x_total`, info as `x_info` (a gauge), stateset as a gauge, gaugehistogram as a
  histogram, unknown as untyped;
- samples named `<family>_created`, `_gsum`, `_gcount` (OpenMetrics only) are moved to a gauge family of that name after
  the family, suffixes in sorted order;
- HELP escapes backslash and newline; label values escape backslash, double quote and newline and stay UTF-8; labels
  are sorted by name; values as Go prints them (`+Inf`, `NaN`, `1e+06`); timestamps in integer milliseconds.

Metric and label names outside the legacy character set have every other character replaced by `_`, as generate_latest's
default escaping does; the driver's own names never need it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Protocol, SupportsFloat

from dra_driver.common.prometheus import Metric, floatToGoString

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_TYPE_RENAMES = {"counter": ("_total", "counter"), "info": ("_info", "gauge"), "stateset": ("", "gauge"),
                 "gaugehistogram": ("", "histogram"), "unknown": ("", "untyped")}  # fmt: skip
_OPENMETRICS_ONLY = ("_created", "_gsum", "_gcount")
_LEGACY_METRIC = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LEGACY_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


class Collector(Protocol):
    def collect(self) -> Iterable[Metric]: ...


def generate_text(registry: Collector) -> bytes:
    """Every family the registry collects, in the Prometheus text format 0.0.4 (UTF-8)."""
    output: list[str] = []
    for metric in registry.collect():
        suffix, kind = _TYPE_RENAMES.get(metric.type, ("", metric.type))
        help_text = _escape_help(metric.documentation)
        _header(output, _metric_name(metric.name + suffix), help_text, kind)
        moved: dict[str, list[str]] = {}
        for sample in metric.samples:
            target = next((s for s in _OPENMETRICS_ONLY if sample.name == metric.name + s), None)
            line = _sample_line(sample.name, sample.labels, sample.value, sample.timestamp)
            (moved.setdefault(target, []) if target else output).append(line)
        for moved_suffix, lines in sorted(moved.items()):
            _header(output, _metric_name(metric.name + moved_suffix), help_text, "gauge")
            output.extend(lines)
    return "".join(output).encode("utf-8")


def _header(output: list[str], name: str, help_text: str, kind: str) -> None:
    output.append(f"# HELP {name} {help_text}\n")
    output.append(f"# TYPE {name} {kind}\n")


def _sample_line(name: str, labels: Mapping[str, str], value: float, timestamp: SupportsFloat | None) -> str:
    label_text = ",".join(f'{_label_name(k)}="{_escape_label_value(v)}"' for k, v in sorted(labels.items()))
    stamp = "" if timestamp is None else f" {int(float(timestamp) * 1000):d}"  # seconds (a float or a Timestamp) to ms
    labels_part = f"{{{label_text}}}" if label_text else ""
    return f"{_metric_name(name)}{labels_part} {floatToGoString(value)}{stamp}\n"


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _escape_label_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _metric_name(name: str) -> str:
    return name if _LEGACY_METRIC.fullmatch(name) else _underscored(name, ":")


def _label_name(name: str) -> str:
    return name if _LEGACY_LABEL.fullmatch(name) else _underscored(name, "")


def _underscored(name: str, extra: str) -> str:
    """Every character outside [a-zA-Z_] + extra (and digits after the first) replaced by `_`."""
    return "".join(c if c.isascii() and (c.isalpha() or c == "_" or c in extra or (c.isdigit() and i > 0)) else "_" for i, c in enumerate(name))
