"""dra_driver.common.prometheus_text writes what prometheus_client.exposition.generate_latest writes, for every kind
of family and value the format knows; dra_driver.common.prometheus loads the metric types without the package's
`__init__` (and so without exposition's HTTP servers), and every module of the driver goes through it."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from prometheus_client.core import (
    CollectorRegistry, Counter, GaugeHistogramMetricFamily, GaugeMetricFamily, Histogram, InfoMetricFamily, Metric,
    StateSetMetricFamily, Summary, UnknownMetricFamily,
)  # fmt: skip
from prometheus_client.exposition import generate_latest
from prometheus_client.samples import Timestamp

from dra_driver.common.prometheus_text import generate_text

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = 'a"b\\c\nd-é✓'
# What prometheus_client.exposition imports that the driver's /metrics does not need.
EXPOSITION = ("prometheus_client.exposition", "prometheus_client.openmetrics", "prometheus_client.asgi", "http.server",
              "socketserver", "wsgiref", "gzip")  # fmt: skip


class _Families:
    """A collector of every family type, with timestamps, special values and text that needs escaping."""

    def collect(self) -> Iterator[Metric]:
        gauge = GaugeMetricFamily("stamped", f"help with \\ and\nnewline and {HOSTILE}", labels=["z", "a"])
        gauge.add_metric([HOSTILE, "x"], 1.5, timestamp=1700000000.123)
        gauge.add_metric(["inf", "x"], float("inf"), timestamp=Timestamp(1700000000, 5_000_000))
        gauge.add_metric(["ninf", "x"], float("-inf"))
        gauge.add_metric(["nan", "x"], float("nan"))
        gauge.add_metric(["big", "x"], 123456789.0)
        gauge.add_metric(["small", "x"], 1e-9)
        yield gauge
        info = InfoMetricFamily("build", "Build information")
        info.add_metric(["v"], {"version": HOSTILE})
        yield info
        stateset = StateSetMetricFamily("phase", "A state set", labels=["node"])
        stateset.add_metric(["n1"], {"ready": True, "failed": False})
        yield stateset
        histogram = GaugeHistogramMetricFamily("queue", "A gauge histogram", labels=["q"])
        histogram.add_metric(["q1"], [("1.0", 4), ("+Inf", 6)], gsum_value=7.5)
        yield histogram
        unknown = UnknownMetricFamily("mystery", "Untyped", labels=["k"])
        unknown.add_metric([HOSTILE], 2)
        yield unknown
        yield GaugeMetricFamily("empty_family", "No samples")


def test_every_family_kind_renders_as_generate_latest_renders_it() -> None:
    registry = CollectorRegistry()
    registry.register(_Families())
    Counter("jobs", "Jobs done", ["kind"], registry=registry).labels(HOSTILE).inc(2)
    Histogram("wait_seconds", "Wait", buckets=(0.1, 1.0, 1e6), registry=registry).observe(0.5)
    Summary("size_bytes", "Sizes", ["k"], registry=registry).labels("a").observe(1024)
    ours = generate_text(registry)
    assert ours == generate_latest(registry)
    text = ours.decode()
    assert "# HELP stamped help with \\\\ and\\nnewline and " in text  # HELP: backslash and newline escaped
    assert 'stamped{a="x",z="a\\"b\\\\c\\nd-é✓"} 1.5 1700000000123\n' in text  # sorted labels, value escapes, ms
    assert "# TYPE jobs_total counter" in text and "# TYPE build_info gauge" in text and "# TYPE queue histogram" in text
    assert "# TYPE queue_gcount gauge" in text and "# TYPE mystery untyped" in text and "1e+06" in text


def test_the_metric_types_load_without_the_package_init_and_the_whole_package_still_works() -> None:
    code = (
        "import json, sys\n"
        "from dra_driver.common.prometheus import CollectorRegistry, Counter\n"
        "from dra_driver.common.prometheus_text import generate_text\n"
        "registry = CollectorRegistry()\n"
        "Counter('c', 'A counter', registry=registry).inc()\n"
        "ours = generate_text(registry)\n"
        f"loaded = sorted(m for m in {EXPOSITION!r} if m in sys.modules)\n"
        "state = sys.modules['prometheus_client']._deferred_init\n"
        "from prometheus_client import generate_latest\n"  # an attribute of the package: its init runs now
        "print(json.dumps([loaded, state, ours == generate_latest(registry), sys.modules['prometheus_client']._deferred_init]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == [[], "deferred", True, "done"]


def test_every_module_imports_prometheus_client_through_the_gate() -> None:
    """Only dra_driver/common/prometheus.py imports prometheus_client (after deferring its init); anywhere else the
    package's init, and with it exposition, would run."""
    gate = ROOT / "dra_driver" / "common" / "prometheus.py"
    wrong = []
    for path in sorted([*(ROOT / "dra_driver").rglob("*.py"), *(ROOT / "vendors").rglob("*.py")]):
        if path == gate:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n == "prometheus_client" or n.startswith("prometheus_client.") for n in names):
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert wrong == []
