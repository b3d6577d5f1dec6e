"""What `dra-driver run` has imported once it serves and publishes: nothing of the offline tools, and of the kubernetes
package only the client it uses (docs/performance.md, "Memory over cycles": every module stays resident)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.support import free_port

from dra_driver.simulation.api_server import SimApiServer

# Loaded by the tools (explain, template, fleet, migrate: CEL, the allocator, ruamel.yaml) or by parts of the
# kubernetes package the daemon does not use (dynamic, stream, the kubeconfig loader, ApiClient and their dependencies).
FORBIDDEN = (
    "celpy", "lark", "ruamel", "re2", "dra_driver.cel", "dra_driver.allocator", "dra_driver.explain", "dra_driver.template",
    "dra_driver.fleet", "dra_driver.migrate", "dra_driver.sources",
    "kubernetes.dynamic", "kubernetes.stream", "kubernetes.leaderelection", "kubernetes.informer", "kubernetes.config.kube_config",
    "kubernetes.utils.create_from_yaml", "kubernetes_validate", "jsonschema", "websocket", "requests", "requests_oauthlib", "oauthlib",
    "dra_driver.kube.claim_cache", "dra_driver.kube.reflector",  # the claim cache is off unless asked for
    "kubernetes.client.api_client", "multiprocessing.pool", "dateutil",  # the typed client: the daemon sends plain JSON
    # prometheus_client's init and exposition (HTTP servers): the daemon serves /metrics itself, in its own text writer
    "prometheus_client.exposition", "prometheus_client.openmetrics", "prometheus_client.asgi", "http.server", "socketserver", "wsgiref",
    "pydoc",  # kubernetes.watch.watch imports it: the daemon reads watch streams with kube/watch_lines.py
)  # fmt: skip

# The daemon as `dra-driver run` starts it; its modules (and whether kubernetes.client's init ran: kube/k8s.py defers
# its table of typed classes) written to a file when it exits after SIGTERM.
_DAEMON = (
    "import atexit, json, sys\n"
    "atexit.register(lambda: open(sys.argv[1], 'w').write(json.dumps([sorted(sys.modules), "
    "getattr(sys.modules.get('kubernetes.client'), '_deferred_init', None)])))\n"
    "from dra_driver.cli.main import main\n"
    "sys.exit(main(sys.argv[2:]))\n"
)


def _forbidden(modules: list[str]) -> list[str]:
    return sorted(m for m in modules if any(m == f or m.startswith(f + ".") for f in FORBIDDEN))


def test_the_running_daemon_imports_no_tool_and_only_the_client_it_uses(short_tmp: Path) -> None:
    for sub in ("k/plugins_registry", "k/plugins", "c"):
        (short_tmp / sub).mkdir(parents=True)
    listed = short_tmp / "modules.json"
    port = free_port()
    with SimApiServer() as server:
        server.add_node("node-a")
        command = [sys.executable, "-c", _DAEMON, str(listed), "run", "--profile", "dgx-h100", "--simulated-root", "none",
                   "--node-name", "node-a", "--api-server", server.url, "--kubelet-dir", str(short_tmp / "k"),
                   "--state-dir", str(short_tmp / "s"), "--cdi-dir", str(short_tmp / "c"),
                   "--metrics-bind-address", f"127.0.0.1:{port}"]  # fmt: skip
        daemon = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 90
            while not server.objects("ResourceSlice") and daemon.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert server.objects("ResourceSlice"), "the daemon published no slice"
            scraped = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read()  # /metrics rendered
            assert b"# TYPE dra_driver_requests_total counter" in scraped
        finally:
            daemon.send_signal(signal.SIGTERM)
            _, err = daemon.communicate(timeout=60)
    assert daemon.returncode == 0, err
    modules, client_init = json.loads(listed.read_text())
    assert "dra_driver.node.publisher.publisher" in modules and "kubernetes.client.rest" in modules  # it did publish
    assert _forbidden(modules) == []
    assert client_init == "deferred"
