"""A real Prometheus scraping the driver's metrics, and the checks every dashboard query and alert expression must
pass against it: shared by tests/monitoring/test_live.py (local daemon and exporter) and tests/e2e (the pods that
deploy/ installs in the kit's cluster)."""

from __future__ import annotations

import json
import re
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from tests.monitoring.manifests import alerts, panel_queries, write_rules
from tests.support import eventually

PLUGIN_JOB = "dra-driver/dra-driver-kubelet-plugin"  # the job names the PodMonitors give
FLEET_JOB = "dra-driver/dra-driver-fleet-exporter"
# An alert expression ends in one comparison with a number: what is left is the series it compares.
THRESHOLD = re.compile(r"\s*(==|!=|>=|<=|>|<)\s*[0-9.]+\s*$")


def spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as answer:  # noqa: S310 - loopback URL built here
        return json.loads(answer.read())


def query(port: int, promql: str) -> list[Any]:
    """The series an instant query returns (empty on a query error: the caller names the query)."""
    try:
        answer = get_json(f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
    except OSError:
        return []
    return list(answer["data"]["result"]) if answer.get("status") == "success" else []


def metric_names(promql: str) -> set[str]:
    """The metric names a query reads (identifiers followed by a selector or range, not functions or labels)."""
    return set(re.findall(r"\b((?:dra_driver|dra_fleet)_[a-z_]+)\b", promql))


def prometheus_config(work: Path, plugin_port: int, fleet_port: int, node: str) -> Path:
    """Scrape both every second, with the target labels the PodMonitors give; load the alert rules too."""
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(write_rules(work))],
        "scrape_configs": [
            {
                "job_name": PLUGIN_JOB,
                "static_configs": [{"targets": [f"127.0.0.1:{plugin_port}"], "labels": {"node": node, "kubernetes_pod": "plugin-0"}}],
            },
            {"job_name": FLEET_JOB, "static_configs": [{"targets": [f"127.0.0.1:{fleet_port}"], "labels": {"kubernetes_pod": "fleet-exporter-0"}}]},
        ],
    }
    path = work / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def prometheus_command(prometheus: str, config: Path, work: Path, port: int) -> list[str]:
    return [prometheus, f"--config.file={config}", f"--storage.tsdb.path={work / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"]


def dashboard_and_alert_checks(quiet: set[str]) -> list[tuple[str, str]]:
    """(what, PromQL) that must each return series: every panel's query, every alert's expression without its
    threshold (except the alerts in `quiet`, whose condition the scene cannot make true), and a count of every
    metric any panel or alert names (so a renamed metric fails even for a quiet alert)."""
    checks = [(f"panel {title!r}", promql) for title, promql in panel_queries()]
    checks += [(f"alert {a['alert']}", THRESHOLD.sub("", a["expr"])) for a in alerts() if a["alert"] not in quiet]
    names = {name for _, promql in checks for name in metric_names(promql)}
    names |= {name for a in alerts() for name in metric_names(a["expr"])}
    checks += [(f"metric {name}", f'count({{__name__="{name}"}})') for name in sorted(names)]
    return checks


def unanswered(port: int, checks: list[tuple[str, str]]) -> list[str]:
    """The checks whose query returns no series now."""
    return [f"{what}: {promql}" for what, promql in checks if not query(port, promql)]


def assert_every_check_answers_and_every_rule_loads(
    port: int, checks: list[tuple[str, str]], logs: list[Path], timeout: float, step: float
) -> list[str]:
    """Waits until each check's query returns series (else AssertionError naming those that never did, with the end
    of each process's log), then asserts that Prometheus loaded every alert rule, all healthy; the rules' names."""
    empty: list[str] = []

    def all_answer() -> bool:
        empty[:] = unanswered(port, checks)
        return not empty

    try:
        eventually(all_answer, "every query to return series", timeout, step=step)
    except AssertionError:
        raise AssertionError("no series for:\n  " + "\n  ".join(empty) + "\n" + tails(logs)) from None
    unhealthy, loaded = rules_unhealthy(port)
    assert unhealthy == []
    assert loaded == sorted(a["alert"] for a in alerts())
    return loaded


def rules_unhealthy(port: int) -> tuple[list[tuple[str, str]], list[str]]:
    """(rules Prometheus reports not ok, the names of the rules it loaded)."""
    groups = get_json(f"http://127.0.0.1:{port}/api/v1/rules")["data"]["groups"]
    rules = [r for g in groups for r in g["rules"]]
    return [(r["name"], r["health"]) for r in rules if r["health"] != "ok"], sorted(r["name"] for r in rules)


def tails(logs: list[Path]) -> str:
    """The end of each process's log, for a failure message."""
    return "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}" for log in logs if log.exists())
