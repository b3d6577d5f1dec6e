"""prometheus_client as the driver imports it: the metric types, the registry and the custom-collector families, without
the package `__init__`, which imports prometheus_client.exposition and with it http.server, socketserver, wsgiref, gzip,
the ASGI app and the OpenMetrics writer (0.94 MiB of the daemon's resident memory, docs/performance.md, "Memory over
cycles"). The driver serves /metrics with its own endpoint (dra_driver/node/metrics_http.py) and writes the text format
itself (dra_driver/common/prometheus_text.py), so it needs none of them.

Every module of the driver that uses prometheus_client imports it through this module (tests/common/test_prometheus_text.py),
so the deferral (dra_driver/common/deferred_packages.py) is in place before the first import; something that asks the
package for an attribute (`from prometheus_client import generate_latest`, a test) runs the real `__init__` then.
"""

from __future__ import annotations

from dra_driver.common.deferred_packages import defer_package_inits

FIX = "dra-driver supports the prometheus-client versions pinned in its pyproject.toml: reinstall one of those"
defer_package_inits(("prometheus_client",), FIX)

# After the deferral, and by full name: `from prometheus_client import Counter` would run the package's init. The
# metrics module's own `from . import values` asks the package for the attribute first: imported before, it is bound.
import prometheus_client.values  # noqa: E402, F401
from prometheus_client.metrics import Counter, Gauge, Histogram  # noqa: E402
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric  # noqa: E402
from prometheus_client.registry import CollectorRegistry  # noqa: E402
from prometheus_client.utils import floatToGoString  # noqa: E402

__all__ = ["FIX", "CollectorRegistry", "Counter", "CounterMetricFamily", "Gauge", "GaugeMetricFamily", "Histogram", "Metric", "floatToGoString"]
